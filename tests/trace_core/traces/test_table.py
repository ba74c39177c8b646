"""TraceTable: many traces as columns; each row a Trace view; the library's batch functions read the columns."""

from __future__ import annotations

import dataclasses
import traceback
import warnings

import numpy as np
import pandas as pd
import pytest
from helpers import make_trace, random_traces

from trace_core import EvaluationConfig, TracePlus, TraceTable, evaluate
from trace_core.methods.fitted_baselines import stack_top_logprobs
from trace_core.methods.risk import entropy_summary, stack_traces
from trace_core.policy import usable_rows
from trace_core.traces.table import TableBuilder, gather
from trace_core.traces.trace import Trace, TraceMetadata


def _fields_equal(a: Trace, b: Trace) -> bool:
    for f in dataclasses.fields(Trace):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if x is None or y is None or x.dtype != y.dtype or not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


def _mixed() -> list[Trace]:
    """Traces that differ in every optional part: entropy or none, k, ranks, alternatives' texts, empty answers."""
    base = make_trace([0.5, 1.0, 2.0], k=3)
    no_entropy = dataclasses.replace(make_trace([0.2, 0.1], k=0), entropy=None, ranks=None,
                                     metadata=TraceMetadata(entropy_source="absent", model_id="m2"))
    texts = dataclasses.replace(make_trace([0.3], k=2), top_tokens=(("a", "b"),),
                                metadata=TraceMetadata(entropy_source="top_k", entropy_k=2))
    empty = make_trace([], k=1)
    return [base, no_entropy, texts, empty, *random_traces(5, seed=3)]


def test_every_row_is_the_trace_it_was_made_from():
    traces = _mixed()
    table = TraceTable.from_traces(traces)
    assert len(table) == len(traces) and table.n_tokens == sum(len(t) for t in traces)
    assert all(_fields_equal(row, t) for row, t in zip(table, traces, strict=True))
    assert _fields_equal(table[-1], traces[-1]) and [r.answer for r in table[2:4]] == [t.answer for t in traces[2:4]]
    assert TraceTable.from_traces(table) is table


def test_rows_are_read_only_views_of_the_columns():
    table = TraceTable.from_traces(_mixed())
    row = table[0]
    assert np.shares_memory(row.surprisal, table.surprisal) and np.shares_memory(row.top_logprobs, table.top_logprobs)
    with pytest.raises(ValueError, match="read-only"):
        row.surprisal[0] = 9.0
    with pytest.raises(ValueError, match="read-only"):
        table.surprisal[0] = 9.0


def test_indexing_errors_name_the_problem():
    table = TraceTable.from_traces(_mixed())
    with pytest.raises(IndexError, match="answer 9 of a table of 9"):
        table[9]
    with pytest.raises(TypeError, match="indexed by int or slice, got str"):
        table["0"]
    with pytest.raises(TypeError, match=r"`traces\[1\]` must be a Trace"):
        TraceTable.from_traces([make_trace([0.1]), "not a trace"])


def test_the_batches_are_the_columns_and_equal_stacking_the_list():
    traces = random_traces(40, seed=1)
    table = TraceTable.from_traces(traces)
    (s_list, h_list), (s_table, h_table) = stack_traces(traces), stack_traces(table)
    assert np.array_equal(s_list.values, s_table.values) and np.array_equal(s_list.offsets, s_table.offsets)
    assert np.array_equal(h_list.values, h_table.values)
    assert np.shares_memory(s_table.values, table.surprisal)
    assert stack_traces(TraceTable.from_traces(_mixed()))[1] is None  # one answer without entropy: none for all
    assert entropy_summary(table) == entropy_summary(traces)
    assert entropy_summary(TraceTable.from_traces(_mixed())) == entropy_summary(_mixed())


def test_top_logprobs_stack_alike_from_the_table():
    traces = [make_trace(np.linspace(0.1, 2, n), k=5) for n in (3, 7, 1)]
    got, why = stack_top_logprobs(TraceTable.from_traces(traces))
    expected, why_list = stack_top_logprobs(traces)
    assert why == why_list == "" and np.array_equal(got.logprobs, expected.logprobs)
    short = [make_trace([0.1, 0.2], k=1)] * 3
    assert stack_top_logprobs(TraceTable.from_traces(short))[1] == stack_top_logprobs(short)[1]


def test_evaluate_and_a_calibrator_give_the_same_numbers_on_a_table():
    traces = random_traces(300, seed=2)
    y = (np.array([t.surprisal.mean() for t in traces]) < 1.0).astype(int)
    table = TraceTable.from_traces(traces)
    config = EvaluationConfig(n_splits=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from_list, from_table = evaluate(traces, y, config=config), evaluate(table, y, config=config)
    pd.testing.assert_frame_equal(from_list.per_split, from_table.per_split, check_exact=True)
    assert from_list.entropy_summary == from_table.entropy_summary and from_list.data_note == from_table.data_note
    a, b = TracePlus().fit(traces, y), TracePlus().fit(table, y)
    np.testing.assert_array_equal(a.predict_proba(traces), b.predict_proba(table))
    assert a.provenance_["entropy_source"] == b.provenance_["entropy_source"]


def test_calibrators_read_a_table_without_making_a_trace_per_answer(monkeypatch):
    """Fitting, predicting, the drift and provenance checks and out-of-fold probabilities read a table's columns:
    the same numbers as on the list of its traces, with no Trace made per answer."""
    from trace_core.calibration.calibrators import ScoreCalibrator, check_drift, probability_correct
    from trace_core.flagging.flag import out_of_fold_probabilities

    traces = [dataclasses.replace(t, metadata=TraceMetadata(model_id="m", model_digest="d"))
              for t in random_traces(200, seed=5)]
    y = (np.array([t.surprisal.mean() for t in traces]) < 1.0).astype(int)
    table = TraceTable.from_traces(traces)
    made = []
    real = Trace.from_checked.__func__

    def counted(cls, **parts):
        made.append("".join(traceback.format_stack(limit=6)))
        return real(cls, **parts)

    for calibrator in (ScoreCalibrator(method="TRACE"), ScoreCalibrator(method="SeqLogP", calibrator="isotonic"),
                       TracePlus()):
        expected = type(calibrator)(**calibrator.get_params()).fit(traces, y)
        with monkeypatch.context() as m:
            m.setattr(Trace, "from_checked", classmethod(counted))
            fitted = calibrator.fit(table, y)
            got = probability_correct(fitted, table)
            drift = check_drift(fitted, table)
            folds = out_of_fold_probabilities(table, y, fitted)
        assert not made, made[0] if made else ""
        np.testing.assert_array_equal(got, probability_correct(expected, traces))
        np.testing.assert_array_equal(folds, out_of_fold_probabilities(traces, y, expected))
        assert drift == check_drift(expected, traces)
        assert fitted.provenance_mismatch(table) == expected.provenance_mismatch(traces) == []


@pytest.mark.parametrize("indices", [[3, 0, 0, 7], [], [-1, 2], list(range(9))])
def test_take_gathers_the_rows_asked_for(indices):
    traces = _mixed()
    table = TraceTable.from_traces(traces)
    taken = table.take(indices)
    assert isinstance(taken, TraceTable) and len(taken) == len(indices)
    assert all(_fields_equal(row, traces[i]) for row, i in zip(taken, indices, strict=True))
    assert taken.surprisal_batch().lengths.tolist() == [len(traces[i]) for i in indices]
    assert (taken is table) == (indices == list(range(9)))  # every row in order: the table itself
    assert gather(table, indices) == [traces[i] for i in indices] == gather(traces, indices)


def test_take_refuses_bad_indices():
    table = TraceTable.from_traces(_mixed())
    with pytest.raises(IndexError, match="out of range"):
        table.take([9])
    with pytest.raises(TypeError, match="1-D sequence of ints"):
        table.take([0.5])


def test_a_table_compares_and_adds_as_a_list_of_its_traces():
    traces = _mixed()
    table = TraceTable.from_traces(traces)
    assert table == traces and traces == table and table == tuple(traces)
    assert table != traces[:-1] and table != traces[::-1] and table != "traces"
    assert table + traces[:2] == traces + traces[:2] and traces[:2] + table == traces[:2] + traces
    assert isinstance(table + traces[:1], list) and isinstance(traces[:1] + table, list)
    both = table + table
    assert isinstance(both, TraceTable) and both == traces + traces
    with pytest.raises(TypeError):
        hash(table)


def test_the_builder_takes_a_readers_checked_rows_as_they_are():
    traces = _mixed()
    builder = TableBuilder()
    for t in traces:
        builder.add(t)
    assert len(builder) == len(traces) and builder.build() == traces
    assert TableBuilder().build() == [] and len(TableBuilder().build()) == 0


def test_usable_rows_read_a_table_as_its_list():
    traces = _mixed()
    table = TraceTable.from_traces(traces)
    a, b = usable_rows(table, too_long=[1]), usable_rows(traces, too_long=[1])
    assert a.keep.tolist() == b.keep.tolist() and (a.missing, a.empty, a.too_long) == (b.missing, b.empty, b.too_long)
    assert 3 in a.empty and 1 not in a.keep.tolist()


def test_to_columns_is_each_traces_to_dict_and_files_are_written_alike():
    import io

    from trace_core.data import write_dataset

    traces = _mixed()
    table = TraceTable.from_traces(traces)
    columns = table.to_columns()
    for i, trace in enumerate(traces):
        assert {name: values[i] for name, values in columns.items()} == trace.to_dict()
    frame = pd.DataFrame({"prompt": [t.prompt or "q" for t in traces], "answer": [t.answer for t in traces]})
    for fmt in ("csv", "jsonl", "parquet"):
        a, b = io.BytesIO(), io.BytesIO()
        write_dataset(frame, a, traces=table, format=fmt)
        write_dataset(frame, b, traces=traces, format=fmt)
        assert a.getvalue() == b.getvalue(), fmt


def test_taking_consecutive_answers_gives_views_of_the_columns():
    traces = _mixed()
    table = TraceTable.from_traces(traces)
    part = table.take(range(2, 7))
    assert part == traces[2:7] and np.shares_memory(part.surprisal, table.surprisal)
    assert part.offsets[0] == 0 and part.top_offsets[0] == 0 and not part.offsets.flags.writeable
    assert table.take([4]) == traces[4:5] and table.take([5, 6, 6]) == [traces[5], traces[6], traces[6]]
