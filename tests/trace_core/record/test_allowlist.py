"""The model policy's hard edges (issue 13, item 3): an allow-list set but empty, weight files outside the model
folder (sharded index targets, absolute paths, symlinks), and allow-list entries that are explicitly a folder or a
hub id."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("torch")

from trace_core import settings  # noqa: E402
from trace_core.record import (  # noqa: E402
    ModelNotAllowedError,
    ModelNotFoundError,
    UnsafeModelError,
    check_model_allowed,
    load_model,
)
from trace_core.record import load as load_module  # noqa: E402

# ----------------------------------------------------------------------------------------------------------------
# (a) set but empty


def test_an_allowlist_set_but_empty_refuses_every_model(tiny_model_dirs, monkeypatch):
    monkeypatch.setattr(load_module, "model_allowlist", lambda: ())
    with pytest.raises(ModelNotAllowedError, match="TRACE_MODEL_ALLOWLIST is set but lists no model"):
        load_model(tiny_model_dirs["gpt2"], device="cpu")
    with pytest.raises(ModelNotAllowedError, match="TRACE_MODEL_ALLOWLIST is set but lists no model"):
        check_model_allowed("org/model")


@pytest.mark.parametrize("value", [" ", ",", " , ,"])
def test_a_whitespace_or_comma_only_allowlist_refuses_every_model(tiny_model_dirs, monkeypatch, value):
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", value)
    assert settings.get("TRACE_MODEL_ALLOWLIST") == ()
    with pytest.raises(ModelNotAllowedError, match="TRACE_MODEL_ALLOWLIST"):
        load_model(tiny_model_dirs["gpt2"], device="cpu")


@pytest.mark.parametrize("entry", ["a/b/c", "org/../model", "org\\model", "-x", "org/model/"])
def test_an_entry_that_is_neither_a_folder_nor_a_hub_id_is_an_error_naming_the_variable(monkeypatch, entry):
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", f"gpt2,{entry}")
    with pytest.raises(ModelNotAllowedError, match="TRACE_MODEL_ALLOWLIST entry .* is neither a folder"):
        check_model_allowed("gpt2")


# ----------------------------------------------------------------------------------------------------------------
# (b) every weight file inside the model folder


@pytest.fixture
def sharded_outside(tiny_model_dirs, tmp_path):
    """An allowed-looking folder whose index sends every tensor to ``../../outside.safetensors``."""
    folder = tmp_path / "allowed" / "model"
    shutil.copytree(tiny_model_dirs["gpt2"], folder)
    (folder / "model.safetensors").rename(tmp_path / "outside.safetensors")
    from safetensors import safe_open

    with safe_open(tmp_path / "outside.safetensors", "pt") as handle:
        keys = list(handle.keys())
    index = {"metadata": {}, "weight_map": {key: "../../outside.safetensors" for key in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


@pytest.mark.parametrize("allowlisted", [True, False])
def test_a_shard_outside_the_folder_is_refused(sharded_outside, monkeypatch, allowlisted):
    if allowlisted:
        monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", str(sharded_outside))
    with pytest.raises(UnsafeModelError, match=r"model\.safetensors\.index\.json names '\.\./\.\./outside"
                                               r"\.safetensors', which resolves outside the model folder"):
        load_model(sharded_outside, device="cpu")


def test_a_shard_given_as_an_absolute_path_is_refused(sharded_outside):
    index_path = sharded_outside / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    target = str((sharded_outside / "../../outside.safetensors").resolve())
    index["weight_map"] = {key: target for key in index["weight_map"]}
    index_path.write_text(json.dumps(index))
    with pytest.raises(UnsafeModelError, match="names the absolute path"):
        load_model(sharded_outside, device="cpu")


def test_a_weight_file_symlinked_outside_the_folder_is_refused(tiny_model_dirs, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dirs["gpt2"], folder)
    (folder / "model.safetensors").rename(tmp_path / "elsewhere.safetensors")
    (folder / "model.safetensors").symlink_to(tmp_path / "elsewhere.safetensors")
    with pytest.raises(UnsafeModelError, match="model.safetensors resolves outside the model folder"):
        load_model(folder, device="cpu")


def test_shards_and_symlinks_inside_the_folder_still_load(tiny_model_dirs, tmp_path):
    folder = tmp_path / "sharded"
    model = load_model(tiny_model_dirs["gpt2"], device="cpu")
    model.model.save_pretrained(folder, max_shard_size="20KB")
    model.tokenizer.save_pretrained(folder)
    assert (folder / "model.safetensors.index.json").is_file()
    assert load_model(folder, device="cpu").vocab_size == model.vocab_size
    # a Hugging Face cache snapshot: its files are symlinks to ../../blobs, inside the cache repository
    repo = tmp_path / "models--org--tiny"
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for file in tiny_model_dirs["gpt2"].iterdir():
        shutil.copy(file, repo / "blobs" / file.name)
        (snapshot / file.name).symlink_to(f"../../blobs/{file.name}")
    assert load_model(snapshot, device="cpu").vocab_size == model.vocab_size


# ----------------------------------------------------------------------------------------------------------------
# (c) an entry is explicitly a folder or a hub id


@pytest.fixture
def local_org_model(tiny_model_dirs, tmp_path, monkeypatch):
    """A local folder ``./org/model`` (the working directory is tmp_path)."""
    shutil.copytree(tiny_model_dirs["gpt2"], tmp_path / "org" / "model")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "org" / "model"


def test_a_hub_id_entry_does_not_admit_a_local_folder_of_the_same_name(local_org_model, monkeypatch):
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", "org/model")
    for name in ("org/model", "./org/model", str(local_org_model)):
        with pytest.raises(ModelNotAllowedError, match="not on this deployment's allow-list"):
            load_model(name, device="cpu")


def test_a_folder_entry_admits_that_folder_however_it_is_named(local_org_model, monkeypatch, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(local_org_model, target_is_directory=True)
    for entry in ("./org/model", str(local_org_model), str(link)):
        monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", entry)
        for name in ("org/model", "./org/model", str(local_org_model), str(link)):
            check_model_allowed(name)
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", "./org/model")
    assert load_model("org/model", device="cpu").vocab_size > 0


def test_a_hub_id_entry_admits_only_that_id_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", "org/model,/srv/models/x")
    check_model_allowed("org/model")
    with pytest.raises(ModelNotFoundError, match="not found locally"):  # allowed, then looked up in the cache only
        load_model("org/model", device="cpu")
    for name in ("org/other", "/srv/models/org/model", "Org/Model"):
        with pytest.raises(ModelNotAllowedError):
            check_model_allowed(name)
    # a path entry never admits a hub id, even one whose name matches the folder's tail
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", str(tmp_path / "org" / "model"))
    with pytest.raises(ModelNotAllowedError):
        check_model_allowed("org/model")
