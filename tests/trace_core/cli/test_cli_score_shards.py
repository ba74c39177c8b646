"""``trace-core score`` over shards on a tiny model: a folder or a glob pattern of datasets -> an output folder of
Parquet shards with a manifest; a rerun skips what is complete without loading the model; rejected rows are named by
shard and row; the traces equal those a single-file run records."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from trace_core.cli import common, main
from trace_core.data import read_dataset

pytestmark = pytest.mark.slow  # loads a model


@pytest.fixture
def shards(tmp_path):
    """Three JSON Lines shards of prompts and answers without traces (one in a subfolder, one with a bad row)."""
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    pd.DataFrame({"prompt": ["Q: 2 + 2 =", "Q: 3 + 4 ="], "answer": [" 4", " 7"], "id": [0, 1]}).to_json(
        folder / "a.jsonl", orient="records", lines=True)
    pd.DataFrame({"prompt": ["The capital of France is"], "answer": [" Paris"], "id": [2]}).to_json(
        folder / "sub" / "b.jsonl", orient="records", lines=True)
    (folder / "c.jsonl").write_text('{"prompt": "Q: 1 + 1 =", "answer": " 2", "id": 3}\n'
                                    '{"prompt": "", "answer": " x", "id": 4}\n'
                                    '{"prompt": "Q: 5 + 5 =", "answer": " 10", "id": 5}\n', encoding="utf-8")
    return folder


def _score(data, out, model, *extra):
    return main(["score", str(data), "--model", str(model), "--out", str(out), *map(str, extra)])


def test_a_folder_is_scored_shard_by_shard_and_a_rerun_skips_it(shards, tmp_path, tiny_model_dirs, capsys,
                                                               monkeypatch):
    out = tmp_path / "out"
    assert _score(shards, out, tiny_model_dirs["gpt2"], "--quiet") == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rejected: c.jsonl: row 2: prompt: "), err  # --quiet: problems only
    assert sorted(p.name for p in out.iterdir()) == ["_manifest", "a.parquet", "c.parquet", "manifest.json",
                                                     "sub__b.parquet"]
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert (manifest["rows_read"], manifest["rows_kept"], manifest["rows_rejected"]) == (6, 5, 1)
    assert manifest["settings"]["model"] == str(tiny_model_dirs["gpt2"])
    assert manifest["command"].startswith("trace-core score ") and manifest["entries"][1]["rows_rejected"] == 1
    entry = json.loads((out / manifest["entries"][1]["entry"]).read_text(encoding="utf-8"))
    assert entry["input"] == "c.jsonl" and entry["rejected"][0]["row"] == 2
    ids = []
    for name in ("a", "c", "sub__b"):
        back = read_dataset(out / f"{name}.parquet", require_label=False)
        assert back.has_traces and len(back.traces) == back.n_valid
        ids.extend(back.frame["id"].tolist())
    assert sorted(ids) == [0, 1, 2, 3, 5]

    def no_model(args):
        raise AssertionError("every shard is complete: no model is needed")

    monkeypatch.setattr(common, "load_model", no_model)
    assert _score(shards, out, tiny_model_dirs["gpt2"]) == 0
    err = capsys.readouterr().err
    assert "[1/3] a.jsonl: already complete, skipped" in err
    assert "3 shards: 0 written, 3 already complete; 6 rows read: 5 kept, 1 rejected" in err


def test_the_traces_equal_a_single_file_run(shards, tmp_path, tiny_model_dirs):
    model = tiny_model_dirs["gpt2"]
    assert _score(str(shards / "*.jsonl"), tmp_path / "out", model, "--quiet", "--alternatives", "3") == 0
    assert sorted(p.name for p in (tmp_path / "out").glob("*.parquet")) == ["a.parquet", "c.parquet"]  # no subfolder
    assert _score(shards / "a.jsonl", tmp_path / "single.parquet", model, "--quiet", "--alternatives", "3") == 0
    sharded = read_dataset(tmp_path / "out" / "a.parquet", require_label=False)
    single = read_dataset(tmp_path / "single.parquet", require_label=False)
    assert sharded.frame.equals(single.frame)
    for a, b in zip(sharded.traces, single.traces, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist() and a.top_ids.shape[1] == 3
        np.testing.assert_array_equal(a.surprisal, b.surprisal)
        np.testing.assert_array_equal(a.entropy, b.entropy)


def test_other_settings_redo_every_shard(shards, tmp_path, tiny_model_dirs, capsys):
    model = tiny_model_dirs["gpt2"]
    assert _score(shards, tmp_path / "out", model, "--quiet") == 0
    assert _score(shards, tmp_path / "out", model, "--alternatives", "2") == 0
    assert "3 shards: 3 written, 0 already complete" in capsys.readouterr().err
    entry = json.loads((tmp_path / "out" / "_manifest" / "a.json").read_text(encoding="utf-8"))
    assert entry["settings"]["alternatives"] == 2


def test_a_shard_that_cannot_be_read_fails_alone(shards, tmp_path, tiny_model_dirs, capsys):
    (shards / "empty.jsonl").write_text("", encoding="utf-8")
    assert _score(shards, tmp_path / "out", tiny_model_dirs["gpt2"], "--quiet") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert any(line.startswith("warning: [3/4] empty.jsonl: failed: ") for line in err), err
    assert err[-1].startswith("error: 1 of 4 shards failed (empty.jsonl); the others are written")
    assert len(list((tmp_path / "out").glob("*.parquet"))) == 3


@pytest.mark.parametrize("out, words", [
    ("scored.jsonl", "--out is a folder (one Parquet file per shard), not a file name"),
    ("no_such/out", "the folder"),
    ("a_file", "exists and is not a folder"),
])
def test_a_bad_out_folder_is_refused_before_any_work(shards, tmp_path, out, words, capsys, monkeypatch):
    (tmp_path / "a_file").write_text("x", encoding="utf-8")
    monkeypatch.setattr(common, "load_model", lambda args: pytest.fail("work started"))
    assert main(["score", str(shards), "--model", "m", "--out", str(tmp_path / out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --out ") and words in err[0], err


def test_a_pattern_that_matches_nothing_is_one_line(tmp_path, capsys):
    assert main(["score", str(tmp_path / "none-*.parquet"), "--model", "m", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("the pattern matches nothing; expected .parquet, .pq, .jsonl, .ndjson, "
                                             ".json, .csv, .tsv files"), err


def test_an_output_folder_inside_the_input_folder_is_never_read_as_input(shards, tiny_model_dirs, capsys):
    for _ in range(2):
        assert _score(shards, shards / "out", tiny_model_dirs["gpt2"]) == 0
    assert "3 shards: 0 written, 3 already complete" in capsys.readouterr().err
