"""JSON Lines read by Arrow's JSON parser a block at a time (``trace_core.data.jsonl_arrow``): wherever it reads a
block, the dataset, its errors and notes are those of the line reader (``json``, one line at a time); wherever it
cannot be sure to (a value ``json`` reads otherwise, a row the line reader refuses), it leaves the block to the line
reader; hostile lines (deep nesting, a new key on every line) neither crash it nor make it build what the line
reader would refuse."""

from __future__ import annotations

import json
import random
import warnings

import numpy as np
import pandas as pd
import pytest
from test_fastread import _same_trace

from bench.large_jsonl import write_file
from trace_core import DecodingConfig, TraceMetadata
from trace_core.data import DatasetError, read_dataset, write_dataset
from trace_core.data.jsonl_arrow import ArrowLines


def _read(data: bytes, monkeypatch, arrow: bool, **options):
    """The dataset (or the DatasetError) and warnings, and the rows Arrow read."""
    taken = [0]
    records = ArrowLines.records

    def counted(self, lines, max_cell):
        out = records(self, lines, max_cell) if arrow else None
        taken[0] += 0 if out is None else len(out)
        return out

    with monkeypatch.context() as m:
        m.setattr(ArrowLines, "records", counted)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                ds = read_dataset(data, format="jsonl", **options)
            except DatasetError as exc:
                ds = exc
    return ds, [str(w.message) for w in caught], taken[0]


def _same(data: bytes, monkeypatch, **options) -> tuple[object, int]:
    """Read ``data`` with Arrow and line by line, check both give the same; the dataset and the rows Arrow read."""
    fast, fast_warned, taken = _read(data, monkeypatch, True, **options)
    slow, slow_warned, _ = _read(data, monkeypatch, False, **options)
    if isinstance(slow, DatasetError):
        assert isinstance(fast, DatasetError) and str(fast) == str(slow)
        return fast, taken
    assert not isinstance(fast, DatasetError), fast
    assert fast.errors == slow.errors and fast_warned == slow_warned
    assert fast.n_read == slow.n_read and fast.notes == slow.notes and fast.label_note == slow.label_note
    pd.testing.assert_frame_equal(fast.frame, slow.frame)
    assert type(fast.traces) is type(slow.traces) and len(fast.traces) == len(slow.traces)
    for a, b in zip(fast.traces, slow.traces, strict=True):
        _same_trace(a, b)
    return fast, taken


def _lines(records: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def _api_records(n: int, seed: int = 0, k: int = 3) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = rng.randint(1, 6)
        top = [_top(rng, k) for _ in range(t)]
        out.append({"prompt": f"Q{i}: «{i}» 日本", "answer": f" a{i}", "label": i % 2,
                    "tokens": [f" t{rng.randint(0, 30)}" for _ in range(t)],
                    "logprobs": [step[0] for step in top], "top_logprobs": top,
                    "top_tokens": [[f" t{rng.randint(0, 30)}" for _ in range(k)] for _ in range(t)],
                    "family": rng.choice(["math", "geo"]), "score": rng.choice([0.25, 0.5, 0.75])})
    return out


def _top(rng: random.Random, k: int) -> list[float]:
    """One step's k largest log-probabilities, of a distribution over k + 1 tokens."""
    weights = [rng.random() + 0.01 for _ in range(k + 1)]
    return sorted((float(np.log(w / sum(weights))) for w in weights), reverse=True)[:k]


def test_an_api_shaped_file_is_read_by_arrow_as_json_reads_it(tmp_path, monkeypatch):
    path = tmp_path / "api.jsonl"
    write_file(path, 700)
    ds, taken = _same(path.read_bytes(), monkeypatch)
    assert taken == 700 and ds.n_valid == 700


def test_files_written_by_the_tool_are_read_by_arrow(tmp_path, monkeypatch):
    from helpers import labeled_answers

    frame, traces = labeled_answers(300, seed=2)
    # Unseeded: the decoding settings hold a null (their seed), given on every line
    meta = TraceMetadata(source="generate", decoding=DecodingConfig(max_new_tokens=8).to_dict(), model_id="m",
                         entropy_source="exact", extra={"run": "a", "batch": 3})
    traces = [t.__class__(**{**t.__dict__, "metadata": meta}) for t in traces]
    path = tmp_path / "own.jsonl"
    write_dataset(frame, path, traces=traces)
    ds, taken = _same(path.read_bytes(), monkeypatch)
    assert taken == 300 and ds.traces[0].metadata == meta and meta.decoding["seed"] is None


def test_the_real_models_answers_are_read_by_arrow(tmp_path, monkeypatch):
    from pathlib import Path

    real = read_dataset(Path(__file__).resolve().parents[3] / "assets" / "datasets" / "real_validation.csv")
    path = tmp_path / "real.jsonl"  # token texts with escapes, odd Unicode, metadata with nested objects
    write_dataset(real.frame.drop(columns=[real.row_column]), path, traces=real.traces)
    ds, taken = _same(path.read_bytes(), monkeypatch)
    assert taken == ds.n_read == real.n_valid


def _unseeded(records: list[dict]) -> None:
    for x in records:
        x["trace_metadata"] = {"source": "generate", "decoding": {"max_new_tokens": 8, "seed": None}}


def _edit(records: list[dict], how: str) -> list[dict] | bytes:
    """The records changed in one of the ways Arrow would read otherwise than ``json`` (or than the line reader
    checks): each must leave its block to the line reader."""
    r = records
    if how == "int in a float column":
        r[3]["score"] = 1
    elif how == "labels as floats":
        for x in r:
            x["label"] = float(x["label"])
    elif how == "a null":
        r[4]["family"] = None
    elif how == "a missing key":
        del r[5]["family"]
    elif how == "a key twice":
        return _lines(r).replace(b'"family": ', b'"family": "x", "family": ', 1)
    elif how == "keys naming one column":
        r[2]["Family "] = "y"
    elif how == "a lone surrogate":
        return _lines(r).replace(b'" t', b'" \\ud800t', 1)
    elif how == "NaN":
        return _lines(r).replace(b'"logprobs": [', b'"logprobs": [NaN, ', 1)
    elif how == "a raw control character":
        return _lines(r).replace(b'"answer": " a', b'"answer": "\x01 a', 1)
    elif how == "deep nesting":
        return _lines(r).replace(b'"family": ', b'"deep": ' + b"[" * 100_000 + b"]" * 100_000 + b', "family": ', 1)
    elif how == "ids as floats":
        for x in r:
            x["token_ids"] = [7.0] * len(x["tokens"])
    elif how == "an id beyond int64":
        for x in r:
            x["token_ids"] = [2**70] * len(x["tokens"])
    elif how == "an empty answer":
        r[6].update(tokens=[], logprobs=[], top_logprobs=[], top_tokens=[])
    elif how == "trace cells as JSON text":
        r[1]["tokens"] = json.dumps(r[1]["tokens"])
    elif how == "a bad value":
        r[7]["logprobs"][0] = 0.5  # a log-probability above 0
    elif how == "a bad label":
        r[8]["label"] = "maybe"
    elif how == "bad labels as numbers":  # Arrow reads 2 as 2.0 in a column of floats; the message quotes it
        r[8]["label"], r[9]["label"] = 2, 0.5
    elif how == "metadata with a key missing":
        for i, x in enumerate(r):
            x["trace_metadata"] = {"source": "imported", "model_id": "m"} if i % 2 else {"source": "imported"}
    elif how == "metadata extras of other keys":
        for i, x in enumerate(r):
            x["trace_metadata"] = {"source": "imported", "extra": {f"k{i % 3}": i}}
    elif how == "blank lines and CRLF":
        return _lines(r).replace(b"\n", b"\r\n\n  \n", 5)
    elif how == "a BOM":
        return b"\xef\xbb\xbf" + _lines(r)
    elif how == "a nested object":
        r[0]["response"] = {"id": "x"}
    elif how == "a null nested key left out":  # Arrow reads it null too: the key is looked for on every line
        _unseeded(r)
        del r[3]["trace_metadata"]["decoding"]["seed"]
    elif how == "the key elsewhere in the line":  # a column of that name does not stand for the missing one
        _unseeded(r)
        for x in r:
            x["seed"] = 1
        del r[3]["trace_metadata"]["decoding"]["seed"]
    elif how == "the key quoted in a text":
        _unseeded(r)
        del r[3]["trace_metadata"]["decoding"]["seed"]
        r[3]["answer"] = 'x", "seed": null'
    elif how == "the key written with an escape":
        _unseeded(r)
        return _lines(r).replace(b'"seed"', b'"se\\u0065d"', 1)
    return r


EDITS = ["int in a float column", "labels as floats", "a null", "a missing key", "a key twice",
         "keys naming one column", "a lone surrogate", "NaN", "a raw control character", "deep nesting",
         "ids as floats", "an id beyond int64", "an empty answer", "trace cells as JSON text", "a bad value",
         "a bad label", "bad labels as numbers", "metadata with a key missing", "metadata extras of other keys", "blank lines and CRLF",
         "a BOM", "a nested object", "a null nested key left out", "the key elsewhere in the line",
         "the key quoted in a text", "the key written with an escape"]


@pytest.mark.parametrize("how", EDITS)
def test_what_arrow_would_read_otherwise_is_read_as_json_reads_it(how, monkeypatch):
    edited = _edit(_api_records(40, seed=EDITS.index(how)), how)
    data = edited if isinstance(edited, bytes) else _lines(edited)
    _same(data, monkeypatch)


def test_a_long_text_cell_is_refused_as_by_the_line_reader(monkeypatch):
    records = _api_records(30, seed=1)
    records[9]["prompt"] = "x" * 5000
    ds, _ = _same(_lines(records), monkeypatch, max_cell_chars=1000)
    assert [(e.row, e.field) for e in ds.errors] == [(10, "prompt")]


@pytest.mark.parametrize("start, declined", [(1536, 0), (1500, 512)])
def test_the_columns_of_one_block_serve_the_next_and_a_change_is_read_again(start, declined, monkeypatch):
    import trace_core.data.read_jsonl as read_jsonl

    monkeypatch.setattr(read_jsonl, "BLOCK_ROWS", 512)  # blocks of rows 1-512, 513-1024, ...
    records = _api_records(3000, seed=3)
    for i, x in enumerate(records[start:]):  # from ``start``: another column, an int, then floats (from 2048)
        x["extra_id"] = 5 if start + i < 2048 else 5.5
    ds, taken = _same(_lines(records), monkeypatch)
    assert taken == 3000 - declined  # a block with and without the column has nulls: read by json
    assert ds.frame["extra_id"].isna().sum() == start


def test_a_new_key_on_every_line_is_refused_before_arrow_makes_its_columns(monkeypatch):
    records = [{"prompt": "Q", "answer": "a", "label": 1, **{f"k{i}_{j}": 1 for j in range(40)}} for i in range(300)]
    ds, taken = _same(_lines(records), monkeypatch)
    assert isinstance(ds, DatasetError) and "columns" in str(ds) and taken == 0


def test_every_value_is_the_one_in_the_file(tmp_path):
    path = tmp_path / "api.jsonl"
    write_file(path, 500, seed=4)
    ds = read_dataset(path)
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            raw = json.loads(line)
            trace = ds.traces[i]
            assert list(trace.tokens) == raw["tokens"] and ds.frame["prompt"][i] == raw["prompt"]
            np.testing.assert_array_equal(trace.surprisal, -np.array(raw["logprobs"]))
            np.testing.assert_array_equal(trace.top_logprobs, raw["top_logprobs"])
            assert [list(t) for t in trace.top_tokens] == raw["top_tokens"]
