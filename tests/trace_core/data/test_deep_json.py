"""Deeply nested JSON anywhere in a dataset is one bad row, never a RecursionError for the whole file."""

from __future__ import annotations

import io
import warnings

import pytest

from trace_core import DatasetError, read_dataset
from trace_core.data import parse_beam_logprobs

DEEP = "[" * 100_000 + "]" * 100_000


def _read(text: str, name: str):
    buffer = io.BytesIO(text.encode("utf-8"))
    buffer.name = name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_dataset(buffer)


def test_deep_json_in_a_csv_trace_cell_is_a_row_error():
    csv = ('prompt,answer,label,tokens,surprisal,entropy\n'
           f'q,a,1,"{DEEP}","[0.1]","[0.2]"\n'
           'q,a,0,"[""a""]","[0.1]","[0.2]"\n')
    dataset = _read(csv, "deep.csv")
    assert dataset.n_valid == 1
    assert [(e.row, e.field, e.message) for e in dataset.errors] == [(1, "tokens", "JSON nested too deeply")]


def test_deep_json_line_is_a_row_error_and_later_rows_keep_their_line_numbers():
    jsonl = (f'{{"prompt": "q", "answer": "a", "label": 1, "x": {DEEP}}}\n'
             '{"prompt": "q", "answer": "b", "label": 0}\n')
    dataset = _read(jsonl, "deep.jsonl")
    assert dataset.n_valid == 1 and dataset.frame["row"].tolist() == [2]
    assert [(e.row, e.message) for e in dataset.errors] == [(1, "JSON nested too deeply")]


def test_deep_json_array_file_and_beam_cell_are_clear_errors():
    with pytest.raises(DatasetError, match="nested too deeply"):
        _read(DEEP, "deep.json")
    with pytest.raises(ValueError, match="row 3: beam_logprobs: .*nested too deeply"):
        parse_beam_logprobs([DEEP], [3])
