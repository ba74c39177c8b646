"""``trace-core evaluate`` over a folder or glob of shards: the table of one file with the same answers, rows left
out named by shard and row, and the grouped table."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helpers import synthetic_trace_objects

from trace_core.cli import main
from trace_core.data import write_dataset


@pytest.fixture
def data(tmp_path):
    traces, y = synthetic_trace_objects(900, seed=11)
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y,
                          "task": [("math", "geo", "misc")[i % 3] for i in range(900)]})
    write_dataset(frame, tmp_path / "all.jsonl", traces=traces)
    for day in ("day1", "day2"):  # shards are taken in the order of their names, as the one file has them
        (tmp_path / "shards" / day).mkdir(parents=True)
    for k, (a, b) in enumerate([(0, 300), (300, 650), (650, 900)]):
        name = f"shards/day1/part-{k}.parquet" if k < 2 else "shards/day2/part-2.parquet"
        write_dataset(frame.iloc[a:b].reset_index(drop=True), tmp_path / name, traces=traces[a:b])
    return tmp_path


@pytest.mark.parametrize("spec", ["shards", "shards/**/*.parquet"])
def test_the_table_of_a_folder_or_pattern_equals_the_one_file_table(data, spec, capsys, monkeypatch):
    monkeypatch.chdir(data)
    assert main(["evaluate", "all.jsonl", "--splits", "4", "--format", "json", "--quiet"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert main(["evaluate", spec, "--splits", "4", "--format", "json"]) == 0
    captured = capsys.readouterr()
    sharded = json.loads(captured.out)
    assert "3 shards" in captured.err and "900 answers kept" in captured.err
    assert "day2/part-2.parquet: 250 rows read, 250 kept" in captured.err
    got, expected = pd.DataFrame(sharded["all"]["summary"]), pd.DataFrame(one["all"]["summary"])
    pd.testing.assert_frame_equal(got.drop(columns=["mean", "std"]), expected.drop(columns=["mean", "std"]))
    np.testing.assert_allclose(got[["mean", "std"]].to_numpy(float), expected[["mean", "std"]].to_numpy(float),
                               rtol=0, atol=1e-9)


def test_rows_left_out_are_named_by_shard_and_row_and_the_rest_evaluated(data, capsys):
    bad = pd.read_parquet(data / "shards" / "day1" / "part-1.parquet")
    bad.loc[3, "label"] = 7  # not a 0/1 label
    bad.to_parquet(data / "shards" / "day1" / "part-1.parquet")
    assert main(["evaluate", str(data / "shards"), "--splits", "2", "--methods", "TRACE"]) == 0
    err = capsys.readouterr().err
    assert "day1/part-1.parquet: 350 rows read, 349 kept (1 rejected left out)" in err
    assert "warning: day1/part-1.parquet: row 4: label" in err
    assert "899 answers kept" in err


def test_group_by_over_shards_gives_each_group_and_their_average(data, capsys):
    assert main(["evaluate", str(data / "all.jsonl"), "--splits", "3", "--group-by", "task", "--format", "json",
                 "--quiet"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert main(["evaluate", str(data / "shards"), "--splits", "3", "--group-by", "task", "--format", "json",
                 "--quiet"]) == 0
    sharded = json.loads(capsys.readouterr().out)
    assert list(sharded) == list(one) == ["task = math", "task = geo", "task = misc", "average"]
    for group in one:
        got, expected = pd.DataFrame(sharded[group]["summary"]), pd.DataFrame(one[group]["summary"])
        np.testing.assert_allclose(got["mean"].to_numpy(float), expected["mean"].to_numpy(float), rtol=0, atol=1e-9)


def test_a_shard_that_cannot_be_read_stops_the_evaluation_naming_it(data, capsys):
    (data / "shards" / "day1" / "part-1.parquet").write_bytes(b"not parquet")
    assert main(["evaluate", str(data / "shards"), "--splits", "2"]) != 0
    err = capsys.readouterr().err
    assert "part-1.parquet" in err and "fix or move that shard" in err


def test_scores_out_keeps_the_per_answer_scores_and_a_rerun_gives_the_same_table(data, capsys):
    args = ["evaluate", str(data / "shards"), "--splits", "3", "--format", "json", "--quiet",
            "--scores-out", str(data / "scores")]
    assert main(args) == 0
    first = capsys.readouterr().out
    manifest = json.loads((data / "scores" / "manifest.json").read_text())
    assert [e["rows_kept"] for e in manifest["entries"]] == [300, 350, 250]
    assert main(args) == 0
    assert capsys.readouterr().out == first
    assert main(["evaluate", str(data / "all.jsonl"), "--scores-out", str(data / "scores2")]) != 0
    assert "--scores-out keeps the per-answer scores of a folder" in capsys.readouterr().err


@pytest.mark.parametrize("quiet", [False, True])
def test_a_shard_whose_answers_in_sentences_the_exact_matcher_labels_wrong_is_named(data, capsys, quiet):
    shard = data / "shards" / "day2" / "part-2.parquet"
    frame = pd.read_parquet(shard)
    frame["reference"] = [f"city{i}" for i in range(len(frame))]
    frame["answer"] = [f"It is {r}." if i % 2 else r for i, r in enumerate(frame["reference"])]
    frame.drop(columns=["label"]).to_parquet(shard)
    for other in (data / "shards" / "day1").iterdir():  # the other shards: labeled by reference, one word each
        part = pd.read_parquet(other)
        part["reference"] = np.where(part["label"] == 1, part["answer"], "something else")
        part.drop(columns=["label"]).to_parquet(other)
    assert main(["evaluate", str(data / "shards"), "--splits", "2", "--methods", "TRACE",
                 *(["--quiet"] if quiet else [])]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "exact matcher" in line]
    assert len(said) == 1, said
    assert said[0].startswith("warning: day2/part-2.parquet: 125 of the 125 answers that the exact matcher")
