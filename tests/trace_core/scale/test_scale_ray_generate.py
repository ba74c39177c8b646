"""``trace-core generate PROMPTS --engine ray`` through the in-process fake server: Ray Data actors (each connecting
to the server once) write the same output folder as ``--engine stream``, byte for byte, and a rerun starts no Ray."""

from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("ray", reason="ray is not installed: `make test-ray` installs requirements-ray.txt")
pytest.importorskip("torch")

from fake_server import FakeServer  # noqa: E402

from trace_core.cli import main  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _folder(out):
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_generate_on_ray_writes_what_the_stream_engine_writes(tmp_path, tiny_model_dirs, capsys, monkeypatch):
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    pd.DataFrame({"prompt": ["Q: 2 + 2 =", "The quick brown"], "reference": ["4", "fox"], "id": [0, 1]}).to_json(
        folder / "a.jsonl", orient="records", lines=True)
    pd.DataFrame({"prompt": ["The capital of France is"], "reference": ["Paris"], "id": [2]}).to_json(
        folder / "sub" / "b.jsonl", orient="records", lines=True)
    (folder / "c.jsonl").write_text('{"prompt": "Q: 1 + 1 =", "reference": "2", "id": 3}\n'
                                    '{"prompt": "", "reference": "x", "id": 4}\n', encoding="utf-8")
    fake = FakeServer(tiny_model_dirs["gpt2"])
    try:
        command = ["generate", str(folder), "--server", fake.url, "--server-model", "tiny", "--server-tokenizer",
                   str(tiny_model_dirs["gpt2"]), "--max-new-tokens", "3", "--alternatives", "3", "--out", "out"]
        errs = {}
        for engine, extra in (("stream", []), ("ray", ["--engine", "ray", "--workers", "2"])):
            (tmp_path / engine).mkdir()
            monkeypatch.chdir(tmp_path / engine)  # the same command line, --out relative to each folder
            capsys.readouterr()
            assert main([*command, *extra]) == 0
            errs[engine] = capsys.readouterr().err
        assert fake.attempts == 8  # 4 prompts, once per engine
        assert _folder(tmp_path / "ray" / "out") == _folder(tmp_path / "stream" / "out")
        summary = "3 shards: 3 written, 0 already complete; 5 rows read: 4 kept, 1 rejected; manifest: out/manifest.json"
        assert errs["stream"].splitlines()[-1] == summary == errs["ray"].splitlines()[-1]
        assert "rejected: c.jsonl: row 2: prompt: " in errs["ray"]
        assert main([*command, "--engine", "ray", "--quiet"]) == 0
        assert capsys.readouterr().err == ""  # every shard complete: nothing to say, no Ray started
    finally:
        fake.stop()
