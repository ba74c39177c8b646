"""Evaluating shards: the protocol on the compact per-answer table of every shard gives the result of one evaluate
over the same answers in one file; rows left out are named by shard and row, and keep their shard's other rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helpers import random_traces, synthetic_trace_objects

from trace_core import EvaluationConfig, evaluate
from trace_core.data import read_dataset, write_dataset
from trace_core.evaluation.inputs import ProtocolInputs
from trace_core.evaluation.run import evaluate_scores
from trace_core.scale import list_shards
from trace_core.scale.compact import concat_compact, merge_entropy_summaries
from trace_core.scale.evaluate import evaluate_shards, read_compact


def _write_shards(folder, frame, traces, n_shards, *, fmt="parquet"):
    bounds = np.linspace(0, len(frame), n_shards + 1).astype(int)
    for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        write_dataset(frame.iloc[a:b].reset_index(drop=True), folder / f"part-{k:03d}.{fmt}", traces=traces[a:b])


def _assert_same_result(got, expected, tol):
    for name in ("per_split", "calibration_values"):
        a, b = getattr(got, name), getattr(expected, name)
        pd.testing.assert_frame_equal(a.drop(columns="value"), b.drop(columns="value"))
        np.testing.assert_allclose(a["value"].to_numpy(float), b["value"].to_numpy(float), rtol=0, atol=tol,
                                   err_msg=name)
    pd.testing.assert_frame_equal(got.summary, expected.summary, rtol=0, atol=tol, check_exact=False)
    assert got.methods == expected.methods and got.skipped == expected.skipped
    assert got.uninformative == expected.uninformative and got.n_answers == expected.n_answers
    assert got.data_note == expected.data_note and got.notes == expected.notes
    assert got.certain_tokens == expected.certain_tokens
    np.testing.assert_array_equal(got.held_out.rows, expected.held_out.rows)
    for method, held in expected.held_out.methods.items():
        np.testing.assert_allclose(got.held_out.methods[method].score, held.score, rtol=0, atol=tol)
        for c, p in held.probabilities.items():
            np.testing.assert_allclose(got.held_out.methods[method].probabilities[c], p, rtol=0, atol=tol)


def _one_file(tmp_path, frame, traces):
    write_dataset(frame, tmp_path / "all.parquet", traces=traces)
    return read_dataset(tmp_path / "all.parquet")


@pytest.mark.slow
@pytest.mark.scale
def test_100000_answers_in_20_shards_give_the_one_file_result_to_1e_9(tmp_path):
    traces, y = synthetic_trace_objects(100_000, seed=5, mean_length=12)
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y})
    (tmp_path / "shards").mkdir()
    _write_shards(tmp_path / "shards", frame, traces, 20)
    config = EvaluationConfig(n_splits=20, seed=3)
    whole = _one_file(tmp_path, frame, traces)
    expected = evaluate(whole.traces, whole.frame["label"].to_numpy(), config=config)
    shards = list_shards(str(tmp_path / "shards"))
    assert len(shards) == 20
    got, scores = evaluate_shards(shards, config=config)
    assert scores.rows("kept") == 100_000 and len(scores.table) == 100_000
    _assert_same_result(got, expected, 1e-9)


def test_shards_with_top_k_and_beams_give_the_one_file_result(tmp_path):
    traces = random_traces(900, seed=8)
    rng = np.random.default_rng(8)
    frame = pd.DataFrame({"prompt": [f"q{i}" for i in range(900)], "answer": [t.answer for t in traces],
                          "label": (rng.random(900) < 0.6).astype(int),
                          "beam_logprobs": [json.dumps([-0.3 - i % 5, -1.2]) for i in range(900)]})
    (tmp_path / "shards").mkdir()
    _write_shards(tmp_path / "shards", frame, traces, 4, fmt="jsonl")
    config = EvaluationConfig(n_splits=5, seed=1)
    whole = _one_file(tmp_path, frame, traces)
    from trace_core.data import parse_beam_logprobs

    beams = parse_beam_logprobs(whole.frame["beam_logprobs"], whole.frame["row"].tolist())
    expected = evaluate(whole.traces, whole.frame["label"].to_numpy(), config=config, beam_logprobs=beams)
    got, _ = evaluate_shards(list_shards(str(tmp_path / "shards")), config=config)
    assert any(m in got.methods for m in ("WEPR", "EPR"))  # the top-k and beam baselines ran
    _assert_same_result(got, expected, 1e-9)


def test_a_bad_row_is_named_by_shard_and_row_and_its_shard_keeps_the_others(tmp_path):
    traces, y = synthetic_trace_objects(300, seed=2)
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y})
    (tmp_path / "s").mkdir()
    _write_shards(tmp_path / "s", frame, traces, 3, fmt="jsonl")
    path = tmp_path / "s" / "part-001.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[4])
    record["label"] = "maybe"
    lines[4] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    scores = read_compact(list_shards(str(tmp_path / "s")))
    second = scores.accounts[1]
    assert (second.read, second.kept, second.left_out) == (100, 99, {"rejected": 1})
    assert second.problems[0].startswith("part-001.jsonl: row 5: label")
    assert len(scores.table) == 299
    where = [scores.table.where(i) for i in range(len(scores.table))]
    assert "part-001.jsonl: row 5" not in where and "part-001.jsonl: row 6" in where


def test_shards_with_and_without_entropy_score_every_answer_without_it_as_one_file_does(tmp_path):
    from trace_core.traces.trace import TraceMetadata

    traces, y = synthetic_trace_objects(400, seed=6)
    no_entropy = [t.__class__(prompt=t.prompt, answer=t.answer, token_ids=t.token_ids, tokens=t.tokens,
                              surprisal=t.surprisal, entropy=None, top_ids=t.top_ids, top_logprobs=t.top_logprobs,
                              metadata=TraceMetadata(entropy_source="absent")) for t in traces[200:]]
    mixed = traces[:200] + no_entropy
    frame = pd.DataFrame({"prompt": [t.prompt for t in mixed], "answer": [t.answer for t in mixed], "label": y})
    (tmp_path / "s").mkdir()
    _write_shards(tmp_path / "s", frame, mixed, 2)
    config = EvaluationConfig(n_splits=4)
    whole = _one_file(tmp_path, frame, mixed)
    expected = evaluate(whole.traces, whole.frame["label"].to_numpy(), config=config)
    got, scores = evaluate_shards(list_shards(str(tmp_path / "s")), config=config)
    assert not scores.table.has_entropy and "TRACE (surprisal-only)" in got.methods
    _assert_same_result(got, expected, 1e-9)


def test_a_method_some_shard_lacks_is_left_out_with_the_reason():
    def part(methods, skipped, name):
        inputs = ProtocolInputs(scalar={m: np.arange(3.0) for m in methods}, features={}, wanted=list(methods),
                                skipped=skipped)
        from trace_core.scale.compact import CompactScores

        return CompactScores(inputs=inputs, labels=np.array([0, 1, 1], np.int8), shard=np.zeros(3, np.int32),
                             rows=np.arange(1, 4), shard_names=[name], certain_tokens=(0, 9),
                             entropy_summary={"exact": 3, "top_k": 0, "absent": 0, "k": []})

    whole = concat_compact([part(["TRACE", "EPR"], {}, "a.jsonl"),
                            part(["TRACE"], {"EPR": "needs top-k alternatives"}, "b.jsonl")])
    assert whole.inputs.wanted == ["TRACE"] and list(whole.inputs.scalar) == ["TRACE"]
    assert whole.inputs.skipped == {"EPR": "needs top-k alternatives"}
    assert whole.shard.tolist() == [0, 0, 0, 1, 1, 1] and whole.where(4) == "b.jsonl: row 2"
    assert whole.certain_tokens == (0, 18)


def test_entropy_summaries_add_up():
    got = merge_entropy_summaries([{"exact": 2, "top_k": 1, "absent": 0, "k": [10]},
                                   {"exact": 0, "top_k": 3, "absent": 1, "k": [5, 10]}])
    assert got == {"exact": 2, "top_k": 4, "absent": 1, "k": [5, 10]}


def test_evaluate_scores_refuses_ragged_or_non_finite_inputs():
    ok = np.linspace(0.1, 0.9, 40)
    y = np.arange(40) % 2
    with pytest.raises(ValueError, match="one score per answer"):
        evaluate_scores(ProtocolInputs(scalar={"TRACE": ok, "SeqLogP": ok[:-1]}, features={},
                                       wanted=["TRACE", "SeqLogP"], skipped={}), y)
    bad = ok.copy()
    bad[7] = np.nan
    with pytest.raises(ValueError, match="non-finite TRACE"):
        evaluate_scores(ProtocolInputs(scalar={"TRACE": bad}, features={}, wanted=["TRACE"], skipped={}), y)


@pytest.mark.parametrize("ks", [(5, 3), (4, 1)])
def test_shards_storing_different_numbers_of_alternatives_give_the_one_file_result(tmp_path, ks):
    from helpers import make_trace

    rng = np.random.default_rng(10)
    traces = [make_trace(rng.gamma(1.0, 1.0, size=9), rng.gamma(2.0, 1.0, size=9), k=ks[i >= 300], prompt=f"q{i}")
              for i in range(600)]
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces],
                          "label": (rng.random(600) < 0.5).astype(int)})
    (tmp_path / "s").mkdir()
    _write_shards(tmp_path / "s", frame, traces, 3)
    config = EvaluationConfig(n_splits=3)
    whole = _one_file(tmp_path, frame, traces)
    expected = evaluate(whole.traces, whole.frame["label"].to_numpy(), config=config)
    got, _ = evaluate_shards(list_shards(str(tmp_path / "s")), config=config)
    assert ("EPR" in got.methods) == (min(ks) >= 2)
    _assert_same_result(got, expected, 1e-9)


def test_a_compact_table_reads_back_bit_for_bit(tmp_path):
    from trace_core.scale.compact_io import compact_bytes, compact_from_bytes

    traces = random_traces(300, seed=3)
    frame = pd.DataFrame({"prompt": [f"q{i}" for i in range(300)], "answer": [t.answer for t in traces],
                          "label": np.arange(300) % 2, "task": ["a", "b", "c"] * 100})
    (tmp_path / "s").mkdir()
    _write_shards(tmp_path / "s", frame, traces, 1)
    part = read_compact(list_shards(str(tmp_path / "s")), group_by="task", split_by="prompt").table
    back, source = compact_from_bytes(compact_bytes(part, label_source="label"))
    assert source == "label" and back is not None
    assert (back.inputs.wanted, back.inputs.skipped) == (part.inputs.wanted, part.inputs.skipped)
    for m, v in part.inputs.scalar.items():
        np.testing.assert_array_equal(back.inputs.scalar[m], v)
    for m, F in part.inputs.features.items():
        np.testing.assert_array_equal(back.inputs.features[m], F)
        assert back.inputs.features[m].flags.f_contiguous == F.flags.f_contiguous
    for name in ("labels", "rows", "groups", "split_groups"):
        np.testing.assert_array_equal(getattr(back, name), getattr(part, name))
    assert (back.top_k, back.certain_tokens, back.entropy_summary) == (part.top_k, part.certain_tokens,
                                                                       part.entropy_summary)
    assert compact_from_bytes(compact_bytes(None, label_source="reference")) == (None, "reference")


def test_scores_kept_in_a_folder_are_read_back_and_a_changed_shard_is_redone(tmp_path):
    traces, y = synthetic_trace_objects(600, seed=9)
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y})
    (tmp_path / "s").mkdir()
    _write_shards(tmp_path / "s", frame, traces, 3, fmt="jsonl")
    shards = list_shards(str(tmp_path / "s"))
    fresh = read_compact(shards)
    first = read_compact(shards, scores_out=tmp_path / "scores")
    assert sorted(p.name for p in (tmp_path / "scores").glob("*.parquet")) == [s.output for s in shards]
    again = read_compact(shards, scores_out=tmp_path / "scores")
    for table in (first.table, again.table):
        for m, v in fresh.table.inputs.scalar.items():
            np.testing.assert_array_equal(table.inputs.scalar[m], v)
        assert table.shard_names == fresh.table.shard_names
    config = EvaluationConfig(n_splits=3)
    from trace_core.scale.evaluate import evaluate_table

    pd.testing.assert_frame_equal(evaluate_table(again.table, config=config).summary,
                                  evaluate_table(fresh.table, config=config).summary)
    entries = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "scores" / "_manifest").glob("*.json")}
    path = tmp_path / "s" / "part-001.jsonl"
    path.write_text("\n".join(path.read_text().splitlines()[:-1]) + "\n")  # one row fewer
    redone = read_compact(shards, scores_out=tmp_path / "scores")
    assert len(redone.table) == 599
    changed = [name for name, t in entries.items()
               if (tmp_path / "scores" / "_manifest" / name).stat().st_mtime_ns != t]
    assert changed == ["part-001.json"]
