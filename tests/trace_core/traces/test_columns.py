"""The trace-column codec (trace_core.traces.columns) and the response importers' table (trace_core.data.responses):
one registry of columns, one tolerance for log-prob signs shared with Trace, and errors that name the right column.

The tests marked "regression" use only the public API, so they can be run against an older trace_core too.
"""

from __future__ import annotations

import io
import json

import pytest

from trace_core import Trace
from trace_core.data import (
    TRACE_COLUMNS,
    DatasetWarning,
    read_dataset,
    trace_from_openai,
    traces_to_columns,
    write_dataset,
)
from trace_core.traces.trace import LOGPROB_TOLERANCE


def read_jsonl_rows(*rows: dict):
    buffer = io.BytesIO("\n".join(json.dumps(r) for r in rows).encode())
    buffer.name = "rows.jsonl"
    return read_dataset(buffer)


def trace_row(**cells) -> dict:
    row = {"prompt": "p", "answer": "ab", "label": 1, "tokens": ["a", "b"], "surprisal": [0.5, 1.0],
           "entropy": [1.0, 2.0]}
    row.update(cells)
    return row


def chat_response(alternative_logprob: float) -> dict:
    return {"model": "m", "choices": [{"message": {"content": "Hi"}, "finish_reason": "stop", "logprobs": {"content": [
        {"token": "Hi", "logprob": -8.0, "top_logprobs": [{"token": "Hey", "logprob": alternative_logprob},
                                                          {"token": "Hi", "logprob": -8.0}]}]}}]}


# --------------------------------------------------------------------------------------------------
# Regressions: one tolerance for log-prob signs, in the reader and in Trace
# --------------------------------------------------------------------------------------------------

def test_regression_top_logprob_slightly_above_zero_is_read_consistently():
    """A top-k log-prob of 5e-6 (float32 rounding) used to pass the reader's check (slack 1e-5) and then fail in
    Trace (slack 1e-6), reported against the wrong column, `tokens`. Both now allow the same slack."""
    with_small = trace_row(top_logprobs=[[5e-6, -8.0], [-0.1, -3.0]])
    ds = read_jsonl_rows(with_small)
    assert ds.errors == [] and ds.n_valid == 1
    assert ds.traces[0].top_logprobs[0, 0] == 5e-6  # kept as given: a round trip stays exact


def test_top_logprob_beyond_the_tolerance_names_top_logprobs():
    with pytest.warns(DatasetWarning):
        ds = read_jsonl_rows(trace_row(), trace_row(top_logprobs=[[2e-5, -1.0], [-0.1, -2.0]]))
    assert [(e.row, e.field) for e in ds.errors] == [(2, "top_logprobs")]
    assert ds.errors[0].message == "top_logprobs[0][0] is 2e-05; log-probabilities must be <= 0"


def test_regression_openai_alternative_slightly_above_zero_is_imported():
    """The same mismatch made trace_from_openai raise from inside Trace for an alternative at 5e-6."""
    trace = trace_from_openai(chat_response(5e-6))
    assert trace.top_logprobs[0].tolist() == [5e-6, -8.0] and trace.top_tokens == (("Hey", "Hi"),)
    with pytest.raises(ValueError, match=r"top_logprobs\[0\]\.logprob is 2e-05; expected a log-probability"):
        trace_from_openai(chat_response(2e-5))


@pytest.mark.parametrize("column, sign", [("surprisal", -1), ("entropy", -1), ("logprobs", 1), ("top_logprobs", 1)])
def test_reader_and_trace_agree_at_the_tolerance(column, sign):
    """Just inside the slack both accept; just outside, the reader rejects naming the column (as Trace would)."""
    inside, outside = sign * LOGPROB_TOLERANCE * 0.5, sign * LOGPROB_TOLERANCE * 2
    for value, accepted in ((inside, True), (outside, False)):
        cells = {"top_logprobs": [[value], [-1.0]]} if column == "top_logprobs" else {column: [value, -sign * 1.0]}
        if column == "logprobs":
            cells["surprisal"] = ""
        row = trace_row(**cells)
        if accepted:
            assert read_jsonl_rows(row).errors == []
        else:
            with pytest.warns(DatasetWarning):
                errors = read_jsonl_rows(trace_row(), row).errors
            assert [e.field for e in errors] == [column]


def test_regression_huge_integer_and_non_list_rows_are_row_errors_not_crashes():
    """An integer too large for a float used to raise OverflowError; a top_logprobs row that is a number used to
    raise TypeError (len() of an int), both out of read_dataset."""
    with pytest.warns(DatasetWarning):
        ds = read_jsonl_rows(trace_row(), trace_row(surprisal=[10**400, 1.0]), trace_row(top_logprobs=[1, 2]),
                             trace_row(token_ids=[10**30, 1]))
    assert [(e.row, e.field) for e in ds.errors] == [(2, "surprisal"), (3, "top_logprobs"), (4, "token_ids")]
    assert ds.errors[0].message.endswith("; expected a finite number")
    assert ds.errors[1].message == "top_logprobs[0] is 1; expected a list"
    assert ds.errors[2].message.endswith("; expected an integer")


# --------------------------------------------------------------------------------------------------
# The column registry
# --------------------------------------------------------------------------------------------------

def test_one_registry_gives_the_column_names_and_what_is_written():
    from trace_core.traces.columns import COLUMNS

    assert TRACE_COLUMNS == tuple(c.name for c in COLUMNS) == (
        "tokens", "token_ids", "surprisal", "logprobs", "entropy", "top_ids", "top_logprobs", "top_tokens", "ranks",
        "trace_metadata")
    trace = read_jsonl_rows(trace_row(top_logprobs=[[-0.1], [-0.2]], top_tokens=[["a"], ["b"]])).traces[0]
    written = traces_to_columns([trace, None])
    assert list(written) == [c.name for c in COLUMNS if c.field is not None]  # logprobs is read only
    as_dict = trace.to_dict()
    for column in COLUMNS:
        if column.field is not None:
            assert written[column.name] == [as_dict[column.field], None]


def test_arrow_types_come_from_the_registry(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from trace_core.traces.columns import COLUMNS

    trace = read_jsonl_rows(trace_row(top_logprobs=[[-0.1], [-0.2]], top_tokens=[["a"], ["b"]],
                                      ranks=[1, 2])).traces[0]
    import pandas as pd

    path = tmp_path / "t.parquet"
    write_dataset(pd.DataFrame({"prompt": ["p"], "answer": ["ab"], "label": [1]}), path, traces=[trace])
    schema = pq.read_schema(path)
    expected = {"tokens": pa.list_(pa.string()), "token_ids": pa.list_(pa.int64()),
                "surprisal": pa.list_(pa.float64()), "entropy": pa.list_(pa.float64()),
                "top_ids": pa.list_(pa.list_(pa.int64())), "top_logprobs": pa.list_(pa.list_(pa.float64())),
                "top_tokens": pa.list_(pa.list_(pa.string())), "ranks": pa.list_(pa.int64()),
                "trace_metadata": pa.string()}
    assert {c.name: schema.field(c.name).type for c in COLUMNS if c.field is not None} == expected
    assert read_dataset(path).traces == [trace]


def test_a_trace_error_the_reader_misses_is_reported_against_its_own_column():
    from trace_core.traces.columns import _column_named_in

    assert _column_named_in("`top_logprobs` must be log-probabilities (<= 0, not NaN)") == "top_logprobs"
    assert _column_named_in("`tokens[3]` must be a str, got int") == "tokens"
    assert _column_named_in("`metadata` must be a TraceMetadata") == "trace_metadata"
    assert _column_named_in("`prompt` must be a str") == ""  # not a trace column: the row as a whole
    with pytest.raises(ValueError) as info:
        Trace(prompt="", answer="", token_ids=[1], tokens=("a",), surprisal=[0.1], entropy=[0.1],
              top_ids=[[1]], top_logprobs=[[0.5]])
    assert _column_named_in(str(info.value)) == "top_logprobs"


# --------------------------------------------------------------------------------------------------
# The response importers' table
# --------------------------------------------------------------------------------------------------

def test_response_shapes_are_detected_in_order():
    from trace_core.data.responses import RESPONSE_SHAPES

    chat = chat_response(-2.0)
    completions = {"choices": [{"text": "Hi", "logprobs": {"tokens": ["Hi"], "token_logprobs": [-0.1],
                                                           "top_logprobs": [{"Hi": -0.1}]}}]}
    assert [s.api for s in RESPONSE_SHAPES if s.detect(chat)] == ["chat"]
    assert [s.api for s in RESPONSE_SHAPES if s.detect(completions)] == ["completions"]
    assert not any(s.detect({"generated_text": "Hi"}) for s in RESPONSE_SHAPES)  # never raises
    assert trace_from_openai(chat).metadata.extra == {"api": "chat", "finish_reason": "stop"}
    assert trace_from_openai(completions).metadata.extra == {"api": "completions"}


@pytest.mark.parametrize("response, match", [
    ({"generated_text": "Hi"}, "^response has no choices: expected an OpenAI-style response"),
    ({"choices": [{"text": "Hi"}]}, r"^response has no choices\[0\]\.logprobs: ask the server for logprobs=true"),
    ({"choices": [{"logprobs": {"x": 1}}]}, r"^choices\[0\]\.logprobs has neither `content` \(chat\.completions\) "
                                            r"nor `tokens` \(completions\); ask the server"),
])
def test_an_unknown_response_shape_says_what_is_missing(response, match):
    with pytest.raises(ValueError, match=match):
        trace_from_openai(response)


# --------------------------------------------------------------------------------------------------
# Where the entropy comes from
# --------------------------------------------------------------------------------------------------

def test_entropy_source_follows_the_cells():
    """An entropy cell: as the metadata says (default exact); none: a top-k estimate, else absent -- whatever the
    metadata cell claimed, since the data decide what the trace holds."""
    exact_meta = {"entropy_source": "exact"}
    ds = read_jsonl_rows(trace_row(),
                         trace_row(entropy=None, top_logprobs=[[-0.1, -3.0], [-0.2, -2.0]], trace_metadata=exact_meta),
                         trace_row(entropy=None, trace_metadata=exact_meta),
                         trace_row(entropy=None, logprobs=[-0.5, -1.0], surprisal=None),
                         trace_row(trace_metadata={"entropy_source": "top_k", "entropy_k": 5}))
    assert ds.errors == []
    sources = [(t.metadata.entropy_source, t.metadata.entropy_k, t.has_entropy) for t in ds.traces]
    assert sources == [("exact", None, True), ("top_k", 2, True), ("absent", None, False), ("absent", None, False),
                       ("top_k", 5, True)]


def test_metadata_saying_absent_next_to_an_entropy_cell_is_a_row_error():
    with pytest.warns(DatasetWarning):
        ds = read_jsonl_rows(trace_row(), trace_row(trace_metadata={"entropy_source": "absent"}))
    assert [(e.row, e.field) for e in ds.errors] == [(2, "trace_metadata")]
    assert "'absent' but `entropy` was given" in ds.errors[0].message


def test_old_entropy_source_names_in_a_saved_file_are_read():
    ds = read_jsonl_rows(trace_row(trace_metadata={"entropy_source": "full_vocabulary"}),
                         trace_row(top_logprobs=[[-0.1], [-0.2]], trace_metadata={"entropy_source":
                                                                                  "top_k_approximation"}))
    assert ds.errors == []
    assert [(t.metadata.entropy_source, t.metadata.entropy_k) for t in ds.traces] == [("exact", None), ("top_k", 1)]
