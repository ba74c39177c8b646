"""What a model folder holds, and paths vs model ids: the checks load_model and load_embedder share."""

from __future__ import annotations

import json
import shutil

import pytest

from trace_core.record.folders import FolderError, FolderEscapeError, check_folder_files, looks_like_path, model_folder


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


# ----------------------------------------------------------------------------------------------------------------
# Malformed files: every failure to load a local folder is a ModelLoadError naming the file (issue 13, item 15)


def _corrupt(path):
    return {
        "random bytes": ("model.safetensors", bytes(range(256)) * 40),
        "header length past the end": ("model.safetensors", (10**9).to_bytes(8, "little") + b"{}"),
        "header not JSON": ("model.safetensors", (6).to_bytes(8, "little") + b"{nope}" + b"\0" * 16),
        "header offsets past the data": ("model.safetensors", _header({"w": {"dtype": "F32", "shape": [4],
                                                                               "data_offsets": [0, 16]}}, 8)),
        "deep config": ("config.json", "[" * 100_000),
        "config not JSON": ("config.json", "{'model_type': 'gpt2',}"),
        "config not UTF-8": ("config.json", b"\xff\xfe{}"),
    }[path]


def _header(header, data_bytes):
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + b"\0" * data_bytes


@pytest.mark.parametrize("case", ["random bytes", "header length past the end", "header not JSON",
                                  "header offsets past the data", "deep config", "config not JSON",
                                  "config not UTF-8"])
def test_a_malformed_file_is_a_model_load_error_naming_it(tiny_model_dirs, tmp_path, case):
    from trace_core import ModelLoadError, load_model

    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dirs["gpt2"], folder)
    file, content = _corrupt(case)
    (folder / file).write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ModelLoadError) as info:
        load_model(folder, device="cpu")
    message = str(info.value)
    assert f"{file} " in message and "\n" not in message and len(message) < 200 + 2 * len(str(folder)) + 100
    assert type(info.value).__name__ == "ModelLoadError"


def test_an_error_transformers_raises_is_still_a_model_load_error(tiny_model_dirs, tmp_path):
    """A failure that the checks before loading do not foresee (here a tensor dtype safetensors does not know, a
    SafetensorError) still comes out as a ModelLoadError naming the folder, never as a bare library exception."""
    from trace_core import ModelLoadError, load_model

    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dirs["gpt2"], folder)
    (folder / "model.safetensors").write_bytes(_header({"w": {"dtype": "NOPE", "shape": [2],
                                                               "data_offsets": [0, 8]}}, 8))
    with pytest.raises(ModelLoadError, match="could not be loaded"):
        load_model(folder, device="cpu")


def test_check_folder_files_reads_headers_and_json_only(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(_header({"__metadata__": {"format": "pt"},
                                                           "w": {"dtype": "F32", "shape": [2],
                                                                 "data_offsets": [0, 8]}}, 8))
    check_folder_files(model_folder(tmp_path))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "missing.safetensors"}}))
    with pytest.raises(FolderError, match="names 'missing.safetensors', which is not a file"):
        check_folder_files(model_folder(tmp_path))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": ["w"]}))
    with pytest.raises(FolderError, match="has no `weight_map`"):
        check_folder_files(model_folder(tmp_path))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "C:\\x.safetensors"}}))
    with pytest.raises(FolderEscapeError, match="absolute path"):
        check_folder_files(model_folder(tmp_path))


def test_the_embedder_refuses_a_malformed_folder_naming_the_file(tiny_model_dirs, tmp_path):
    pytest.importorskip("torch")
    from trace_core.record.embedder import EmbedderUnavailable, load_embedder

    folder = tmp_path / "embedder"
    shutil.copytree(tiny_model_dirs["gpt2"], folder)
    (folder / "config.json").write_text("[" * 100_000)
    with pytest.raises(EmbedderUnavailable, match="config.json is nested too deeply"):
        load_embedder(folder, device="cpu")
