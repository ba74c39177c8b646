"""Property tests: hostile or random input to the loaders raises only the documented errors, never anything else."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trace_core.data import DatasetError, read_dataset, trace_from_openai
from trace_core.methods.operators import decayed_mean, slope, window_max_mean

pytestmark = pytest.mark.filterwarnings("ignore::trace_core.data.DatasetWarning")  # rejected rows are expected here

cells = st.one_of(st.text(max_size=12), st.sampled_from(["0", "1", "yes", "NaN", "[1, 2]", "[\"a\"]", "=1+1", ""]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400), st.sampled_from(["x.csv", "x.jsonl", "x.parquet"]))
def test_random_bytes_never_crash_the_loader(data, name):
    buffer = io.BytesIO(data)
    buffer.name = name
    try:
        dataset = read_dataset(buffer)
    except DatasetError:
        return
    assert dataset.n_valid + dataset.n_rejected == dataset.n_read


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.fixed_dictionaries({"prompt": cells, "answer": cells, "label": cells, "tokens": cells,
                                       "surprisal": cells, "entropy": cells}), min_size=1, max_size=6))
def test_random_rows_are_kept_or_reported(rows):
    text = "\n".join(json.dumps(r) for r in rows)
    buffer = io.BytesIO(text.encode())
    buffer.name = "rows.jsonl"
    try:
        dataset = read_dataset(buffer)
    except DatasetError:
        return
    assert dataset.n_valid + dataset.n_rejected == len(rows)
    reported = {e.row for e in dataset.errors}
    assert dataset.n_rejected == len(reported)


json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True), st.integers(),
                                     st.text(max_size=5)),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.sampled_from(
                                                       ["choices", "logprobs", "content", "token", "logprob",
                                                        "top_logprobs", "tokens", "token_logprobs", "message",
                                                        "text", "bytes"]), inner, max_size=4)), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_openai_importer_raises_only_documented_errors(response):
    try:
        trace = trace_from_openai(response if isinstance(response, dict) else {"choices": response})
    except (ValueError, TypeError):
        return
    assert np.isfinite(trace.surprisal).all()
    assert trace.entropy is None or np.isfinite(trace.entropy).all()  # None: the response held no alternatives


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e6), max_size=50))
def test_operators_are_finite_on_finite_input(x):
    for value in (decayed_mean(x), window_max_mean(x), slope(x)):
        assert (not x and np.isnan(value)) or np.isfinite(value)
