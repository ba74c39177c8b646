"""What a model folder holds, and paths vs model ids: the checks load_model and load_embedder share."""

from __future__ import annotations

import pytest

from trace_core.record.folders import looks_like_path, model_folder


@pytest.mark.parametrize("files, config, safetensors, pickle", [
    (["config.json", "model.safetensors"], True, True, False),
    (["config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors"], True, True, False),
    (["model.safetensors.index.json"], False, True, False),
    (["config.json", "pytorch_model.bin"], True, False, True),
    (["pytorch_model-00001-of-00002.bin"], False, False, True),
    (["weights.pt"], False, False, True),
    (["weights.pth", "model.safetensors"], False, True, True),
    (["config.json", "tokenizer.json"], True, False, False),
])
def test_model_folder_reports_what_it_holds(tmp_path, files, config, safetensors, pickle):
    for name in files:
        (tmp_path / name).write_bytes(b"")
    folder = model_folder(tmp_path)
    assert (folder.has_config, folder.has_safetensors, folder.has_pickle) == (config, safetensors, pickle)
    assert folder.only_pickle == (pickle and not safetensors)
    assert folder.path == tmp_path


def test_model_folder_is_none_for_what_is_not_a_folder(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    assert model_folder(tmp_path / "nowhere") is None
    assert model_folder(tmp_path / "file.txt") is None
    assert model_folder(str(tmp_path)) is not None


@pytest.mark.parametrize("name, expected", [
    ("gpt2", False),
    ("org/model", False),
    ("./model", True),
    ("/abs/model", True),
    ("~/models/x", True),
    ("a/b/c", True),
    ("C:\\models\\x", True),
])
def test_looks_like_path(name, expected):
    assert looks_like_path(name) is expected


def test_an_existing_name_is_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "model").mkdir()
    assert looks_like_path("org/model") is True
