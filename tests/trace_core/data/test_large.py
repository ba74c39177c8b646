"""A large JSON Lines file of API-style traces (top-10 log-probabilities and token texts per step): read as a stream,
its peak memory stays well below that of parsing every line into a list, and every value is the one in the file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.large_jsonl import _SNIPPETS, measure, write_file
from trace_core.data import read_dataset

ROWS = 8_000  # about 17 MB: large enough that the rows, not the interpreter, dominate the memory measured


@pytest.fixture(scope="module")
def large_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("large") / "api_runs.jsonl"
    write_file(path, ROWS)
    return path


@pytest.mark.slow
def test_every_value_is_the_one_in_the_file(large_file):
    ds = read_dataset(large_file)
    assert ds.n_read == ds.n_valid == ROWS and ds.errors == []
    assert ds.frame["row"].tolist() == list(range(1, ROWS + 1))
    assert "top_tokens" not in ds.frame.columns  # the raw trace cells are not kept twice
    with open(large_file, encoding="utf-8") as f:
        for i, line in enumerate(f):
            raw = json.loads(line)
            trace = ds.traces[i]
            assert list(trace.tokens) == raw["tokens"] and trace.answer == raw["answer"] == ds.frame["answer"][i]
            np.testing.assert_array_equal(trace.surprisal, -np.array(raw["logprobs"]))
            np.testing.assert_array_equal(trace.top_logprobs, raw["top_logprobs"])
            assert [list(t) for t in trace.top_tokens] == raw["top_tokens"]
            assert ds.frame["label"][i] == raw["label"]


@pytest.mark.slow
def test_reading_holds_less_than_the_parsed_lines(large_file):
    # Each in a fresh process; what the rows add over importing the library, against what a list of the parsed
    # lines adds over a bare interpreter. Before streaming, reading added about 1.7x the parsed lines.
    bare, _, _ = measure(["-c", "pass"])
    imported, _, _ = measure(["-c", "import trace_core.data"])
    parsed, _, _ = measure(["-c", _SNIPPETS["json.loads"], str(large_file)])
    read, _, status = measure(["-c", _SNIPPETS["read_dataset"], str(large_file)])
    assert status == 0
    assert read - imported < 0.8 * (parsed - bare), (read, imported, parsed, bare)
