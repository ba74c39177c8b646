"""Splits that keep groups whole (several answers per prompt): no group is both calibrated on and evaluated, the
same draws whichever way the groups are written, and the same result over shards as in one file."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helpers import synthetic_trace_objects

from trace_core import EvaluationConfig, evaluate, evaluate_arrays, synthetic_traces
from trace_core.cli import main
from trace_core.data import write_dataset
from trace_core.evaluation.protocol import iter_splits, split_group_codes


def test_every_split_keeps_each_group_in_one_part_and_covers_every_answer():
    y = np.arange(300) % 2
    prompts = np.repeat([f"q{i}" for i in range(60)], 5)
    codes = split_group_codes(prompts, 300)
    config = EvaluationConfig(n_splits=6, seed=4)
    for cal, ev in iter_splits(y, config, codes):
        assert set(prompts[cal]).isdisjoint(prompts[ev])
        assert sorted(np.concatenate([cal, ev]).tolist()) == list(range(300))
        assert len(set(prompts[cal])) == round(0.35 * 60)


def test_groups_written_as_numbers_or_text_draw_the_same_splits():
    y = np.arange(120) % 2
    numbers = np.repeat(np.arange(40), 3)
    texts = [f"prompt {k}" for k in numbers]
    config = EvaluationConfig(n_splits=3)
    a = list(iter_splits(y, config, split_group_codes(numbers, 120)))
    b = list(iter_splits(y, config, split_group_codes(texts, 120)))
    assert all((x[0] == z[0]).all() and (x[1] == z[1]).all() for x, z in zip(a, b, strict=True))


@pytest.mark.parametrize("groups, words", [(["a"] * 10, "at least 2"), (["a", None] * 5, "answer 1 has no split"),
                                           (["a", "b"] * 4, "8 values for 10 answers")])
def test_bad_groups_are_refused_with_the_reason(groups, words):
    with pytest.raises(ValueError, match=words):
        split_group_codes(groups, 10)


def test_evaluate_with_groups_says_so_and_refuses_stratified_splits():
    s, h, y = synthetic_traces(400, seed=3)
    groups = np.repeat(np.arange(100), 4)
    result = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=3), methods=["TRACE"], split_groups=groups)
    assert any("100 answer groups whole" in note for note in result.notes)
    plain = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=3), methods=["TRACE"])
    assert not plain.per_split["value"].equals(result.per_split["value"])
    with pytest.raises(ValueError, match="cannot also be stratified"):
        evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=3, stratified=True), methods=["TRACE"],
                        split_groups=groups)


def test_split_by_over_shards_equals_one_file(tmp_path, capsys):
    traces, y = synthetic_trace_objects(600, seed=12)
    frame = pd.DataFrame({"prompt": [f"q{i // 3}" for i in range(600)], "answer": [t.answer for t in traces],
                          "label": y})
    write_dataset(frame, tmp_path / "all.jsonl", traces=traces)
    (tmp_path / "s").mkdir()
    for k in range(3):
        a, b = 200 * k, 200 * (k + 1)
        write_dataset(frame.iloc[a:b].reset_index(drop=True), tmp_path / "s" / f"p{k}.parquet", traces=traces[a:b])
    tables = []
    for data in (tmp_path / "all.jsonl", tmp_path / "s"):
        assert main(["evaluate", str(data), "--splits", "4", "--split-by", "prompt", "--format", "json",
                     "--quiet"]) == 0
        tables.append(json.loads(capsys.readouterr().out)["all"])
    assert any("200 answer groups whole" in note for note in tables[0]["notes"])
    got, expected = pd.DataFrame(tables[1]["summary"]), pd.DataFrame(tables[0]["summary"])
    np.testing.assert_allclose(got["mean"].to_numpy(float), expected["mean"].to_numpy(float), rtol=0, atol=1e-9)
    one = evaluate(traces, y, config=EvaluationConfig(n_splits=4), split_groups=frame["prompt"])
    assert one.notes == tables[0]["notes"]


def test_split_by_names_a_missing_column_and_refuses_stratified(tmp_path, capsys):
    traces, y = synthetic_trace_objects(60, seed=1)
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y})
    write_dataset(frame, tmp_path / "d.jsonl", traces=traces)
    assert main(["evaluate", str(tmp_path / "d.jsonl"), "--split-by", "question"]) != 0
    assert "--split-by: no column 'question'" in capsys.readouterr().err
    assert main(["evaluate", str(tmp_path / "d.jsonl"), "--split-by", "prompt", "--stratified"]) != 0
    assert "cannot also --stratified" in capsys.readouterr().err
