"""``trace-core flag`` over a folder of shards: every usable row written once with a ``flagged`` column, the flags
of one file with the same rows, a resumable run, and rows left out named by shard and row."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from helpers import synthetic_trace_objects

from trace_core.calibration.calibrators import TracePlus
from trace_core.cli import main
from trace_core.data import read_dataset, write_dataset


@pytest.fixture
def data(tmp_path):
    traces, y = synthetic_trace_objects(700, seed=41)
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y})
    (tmp_path / "in").mkdir()
    for k, (a, b) in enumerate([(0, 250), (250, 500), (500, 700)]):
        write_dataset(frame.iloc[a:b].reset_index(drop=True), tmp_path / "in" / f"p{k}.jsonl", traces=traces[a:b])
    write_dataset(frame, tmp_path / "all.jsonl", traces=traces)
    (tmp_path / "cal.json").write_text(TracePlus().fit(traces[:300], y[:300]).to_json())
    return tmp_path


def _outputs(folder):
    return pd.concat([pd.read_parquet(folder / f"p{k}.parquet") for k in range(3)], ignore_index=True)


@pytest.mark.parametrize("rule", [["--threshold", "0.6"], ["--coverage", "0.8"], ["--target-risk", "0.05"]])
def test_the_flags_equal_one_file_flags_and_every_row_is_written(data, rule, capsys):
    assert main(["flag", str(data / "all.jsonl"), "--calibrator", str(data / "cal.json"), *rule,
                 "--out", str(data / "one.jsonl"), "--quiet"]) == 0
    expected = set(read_dataset(data / "one.jsonl").frame["prompt"])
    one_line = capsys.readouterr().err
    readout = one_line[one_line.index(" answers (") + len(" answers ("):one_line.index("); wrote")]
    assert readout.startswith("error rate by the labels: ")
    assert main(["flag", str(data / "in"), "--calibrator", str(data / "cal.json"), *rule,
                 "--out", str(data / "out")]) == 0
    err = capsys.readouterr().err
    out = _outputs(data / "out")
    assert len(out) == 700 and out["prompt"].is_unique
    assert set(out.loc[out["flagged"], "prompt"]) == expected
    assert f"flagged {len(expected):,} of 700 answers in " in err
    assert f"(column `flagged`; {readout}); " in err  # the same rows, the same summary as one file
    manifest = json.loads((data / "out" / "manifest.json").read_text())
    assert manifest["settings"]["calibrator_sha256"] and len(manifest["entries"]) == 3


def test_a_rerun_skips_the_complete_shards_and_a_new_threshold_redoes_them(data, capsys):
    args = ["flag", str(data / "in"), "--calibrator", str(data / "cal.json"), "--out", str(data / "out")]
    assert main([*args, "--threshold", "0.5"]) == 0
    capsys.readouterr()
    assert main([*args, "--threshold", "0.5"]) == 0
    assert capsys.readouterr().err.count("already complete, skipped") == 3
    assert main([*args, "--threshold", "0.7"]) == 0
    assert "already complete, skipped" not in capsys.readouterr().err
    out = _outputs(data / "out")
    np.testing.assert_array_equal(out["flagged"], out["probability_correct"] < 0.7)


def test_rows_without_a_trace_are_named_and_the_shard_kept(data, capsys):
    path = data / "in" / "p1.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[6])
    for column in ("tokens", "token_ids", "surprisal", "entropy", "top_ids", "top_logprobs", "ranks"):
        record.pop(column, None)
    lines[6] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    assert main(["flag", str(data / "in"), "--calibrator", str(data / "cal.json"), "--threshold", "0.5",
                 "--out", str(data / "out")]) == 0
    err = capsys.readouterr().err
    assert "p1.jsonl: row 7" in err
    assert len(_outputs(data / "out")) == 699


def test_tokens_are_refused_with_shards(data, capsys):
    assert main(["flag", str(data / "in"), "--calibrator", str(data / "cal.json"), "--threshold", "0.5",
                 "--out", str(data / "out"), "--tokens", str(data / "t.csv")]) != 0
    assert "--tokens: not with shards" in capsys.readouterr().err


def test_a_complete_coverage_run_is_not_read_again(data, capsys):
    args = ["flag", str(data / "in"), "--calibrator", str(data / "cal.json"), "--coverage", "0.8",
            "--out", str(data / "out")]
    assert main(args) == 0
    assert "reading 3 shards for the answers' probabilities" in capsys.readouterr().err
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "reading 3 shards" not in err and err.count("already complete, skipped") == 3


def test_with_a_shard_unlabeled_the_summary_gives_the_kept_answers_mean_probability(data, capsys):
    """The error rates need every shard's labels: one shard without them, and the summary is the kept answers' mean
    probability of being correct (read back from the written shards)."""
    unlabeled = read_dataset(data / "in" / "p1.jsonl")
    write_dataset(unlabeled.frame.drop(columns=["label"]), data / "in" / "p1.jsonl", traces=unlabeled.traces)
    assert main(["flag", str(data / "in"), "--calibrator", str(data / "cal.json"), "--threshold", "0.6",
                 "--out", str(data / "out"), "--quiet"]) == 0
    out = _outputs(data / "out")
    kept = out.loc[~out["flagged"], "probability_correct"]
    assert (f"(column `flagged`; mean P(correct) of the {len(kept):,} kept: {kept.mean():.1%}); "
            in capsys.readouterr().err)


def test_flag_by_span_over_shards_says_how_many_answers_are_mostly_in_another_script(data, capsys):
    frame = read_dataset(data / "in" / "p1.jsonl")
    traces = list(frame.traces)
    japanese = ["\u6771\u4eac", "\u306f", "\u3069", "\u3053", "\u3002"]
    traces[0] = dataclasses.replace(traces[0], tokens=tuple(japanese[i % 5] for i in range(len(traces[0]))))
    traces[0] = dataclasses.replace(traces[0], answer="".join(traces[0].tokens))
    table = frame.frame[["prompt", "answer", "label"]].copy()
    table.loc[0, "answer"] = traces[0].answer
    write_dataset(table, data / "in" / "p1.jsonl", traces=traces)
    args = ["flag", str(data / "in"), "--calibrator", str(data / "cal.json"), "--threshold", "0.5"]
    assert main([*args, "--by", "span", "--out", str(data / "out")]) == 0
    assert "warning: 1 of 700 answers is mostly outside the Latin alphabet: the shipped span" in capsys.readouterr().err
    assert main([*args, "--out", str(data / "out2")]) == 0
    assert "Latin alphabet" not in capsys.readouterr().err  # judged by the answer
