"""Flagging shards: every usable row written once with its scores and a ``flagged`` column; a coverage or target
risk decided over all the shards' rows as one file would be."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import synthetic_trace_objects

from trace_core.calibration.calibrators import TracePlus
from trace_core.data import read_dataset, write_dataset
from trace_core.flagging.flag import score_rows, select_flagged
from trace_core.scale import list_shards, run_shards
from trace_core.scale.flag import FLAGGED_COLUMN, ShardFlagger, flag_decisions, score_shard


@pytest.fixture
def shards(tmp_path):
    traces, y = synthetic_trace_objects(600, seed=21)
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y})
    (tmp_path / "in").mkdir()
    for k, (a, b) in enumerate([(0, 200), (200, 450), (450, 600)]):
        write_dataset(frame.iloc[a:b].reset_index(drop=True), tmp_path / "in" / f"p{k}.jsonl", traces=traces[a:b])
    write_dataset(frame, tmp_path / "all.jsonl", traces=traces)
    calibrator = TracePlus().fit(traces[:300], y[:300])
    return tmp_path, calibrator


def test_a_threshold_marks_the_rows_one_file_flags_and_keeps_every_row(shards):
    root, calibrator = shards
    summary = run_shards(list_shards(str(root / "in")), root / "out", ShardFlagger(calibrator, threshold=0.5),
                         settings={"threshold": 0.5})
    assert summary.rows("kept") == 600
    out = pd.concat([pd.read_parquet(root / "out" / f"p{k}.parquet") for k in range(3)], ignore_index=True)
    whole = read_dataset(root / "all.jsonl")
    expected = score_rows(whole.frame, whole.traces, calibrator)
    np.testing.assert_allclose(out["probability_correct"], expected["probability_correct"], rtol=0, atol=1e-12)
    flagged_rows = set(select_flagged(expected, threshold=0.5)["row"])
    assert set(np.flatnonzero(out[FLAGGED_COLUMN].to_numpy()) + 1) == flagged_rows


@pytest.mark.parametrize("rule", [{"coverage": 0.7}, {"target_risk": 0.05}])
def test_a_coverage_or_target_risk_flags_what_one_file_flags(shards, rule):
    root, calibrator = shards
    found = list_shards(str(root / "in"))
    decisions = flag_decisions(found, lambda s: score_shard(s, calibrator), **rule)
    whole = read_dataset(root / "all.jsonl")
    scored = score_rows(whole.frame, whole.traces, calibrator)
    expected = select_flagged(scored, labels=scored["label"].to_numpy(), **rule)
    got = np.concatenate([decisions[s.name] for s in found])
    assert set(np.flatnonzero(got)) == set(expected.index) and got.sum() > 0


def test_rows_without_a_trace_are_rejected_by_row_and_the_others_scored(shards):
    root, calibrator = shards
    path = root / "in" / "p1.jsonl"
    frame = read_dataset(path).frame.drop(columns="row")
    traces = list(read_dataset(path).traces)
    traces[3] = None
    write_dataset(frame, path, traces=traces)
    scored, _, n_read, errors = score_shard(list_shards(str(path))[0], calibrator)
    assert (n_read, len(scored)) == (250, 249)
    assert [str(e) for e in errors] == ["row 4: has no trace; record it first (trace-core score)"]
