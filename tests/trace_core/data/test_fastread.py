"""The reader's fast path (trace cells of many rows decoded at once, fastread.decode_chunk) against the per-row
path: on many generated files (CSV, and JSON Lines and Parquet whose cells are decoded lists), valid ones and ones
with bad cells at random places, both give identical traces, frames and errors."""

from __future__ import annotations

import io
import json
import math
import random
import warnings

import numpy as np
import pandas as pd
import pytest

from trace_core import Trace
from trace_core.data import fastparse, fastread, read_dataset, validate, write_dataset
from trace_core.traces import columns as codec
from trace_core.traces.trace import TraceMetadata

_WORDS = ["a", " the", "Paris", "é", "日本", "x y", "1", "-", "\u2028", "tab\tin", 'q"uote', "back\\slash", "new\nline",
          "😀", "", " ", "[", "]", ",", "],["]
_PLAIN = _WORDS[:9]


def _traces(rng: random.Random, n: int, *, plain: bool, k: int, entropy: bool, top_tokens: bool, ranks: bool,
            metadata: bool) -> list[Trace | None]:
    words = _PLAIN if plain else _WORDS
    out: list[Trace | None] = []
    for _ in range(n):
        t = rng.randint(1, 12)
        lp = np.sort(np.log(np.array([[rng.uniform(0.001, 0.19) for _ in range(k)] for _ in range(t)])), axis=1)
        lp = lp[:, ::-1].reshape(t, k)
        if k and rng.random() < 0.3:
            lp[rng.randrange(t)] = -30.0 * np.arange(k)  # a certain step
        ids = np.array([rng.randrange(50) for _ in range(t)])
        top_ids = np.array([[rng.randrange(50) for _ in range(k)] for _ in range(t)], dtype=np.int64).reshape(t, k)
        surprisal = np.array([rng.choice([0.0, rng.uniform(0, 9), float(rng.randint(0, 3))]) for _ in range(t)])
        if k:  # the chosen token is the first alternative
            top_ids[:, 0] = ids
            surprisal = -lp[:, 0]
        ent = np.array([rng.uniform(0, 5) for _ in range(t)]) if entropy else None
        meta = TraceMetadata(model_id="m", tokenizer="tk", extra={"vocab_size": 200}) if metadata else \
            TraceMetadata(source="imported")
        if ent is None:
            meta = TraceMetadata(model_id=meta.model_id, source=meta.source, extra=meta.extra,
                                 entropy_source="absent")
        out.append(Trace(prompt="", answer="", token_ids=ids, tokens=tuple(rng.choice(words) for _ in range(t)),
                         surprisal=surprisal, entropy=ent, top_ids=top_ids, top_logprobs=lp,
                         ranks=np.array([rng.randint(1, 9) for _ in range(t)]) if ranks else None, metadata=meta,
                         top_tokens=tuple(tuple(rng.choice(words) for _ in range(k)) for _ in range(t))
                         if top_tokens and k else None))
    return out


def _csv(rng: random.Random, n: int, **options) -> tuple[list[str], list[list[str]]]:
    traces = _traces(rng, n, **options)
    frame = pd.DataFrame({"prompt": [f"Q{i}" for i in range(n)], "answer": ["A"] * n,
                          "label": [rng.choice(["1", "0", "yes"]) for _ in range(n)]})
    buffer = io.BytesIO()
    write_dataset(frame, buffer, traces=traces, format="csv")
    table = pd.read_csv(io.BytesIO(buffer.getvalue()), dtype=str, keep_default_na=False)
    return list(table.columns), table.values.tolist()


def _bytes(header: list[str], rows: list[list[str]]) -> bytes:
    out = io.StringIO(newline="")
    import csv

    csv.writer(out).writerows([header, *rows])
    return out.getvalue().encode("utf-8")


_NUMBER_SWAPS = ["-0", "0", "01", "-01", "+1", ".5", "1.", "1e", "1e+", "NaN", "Infinity", "-Infinity", "1e400",
                 "-1e400", "1e-400", "-1", "2.5", "1.2.3", "1e5e5", " 1", "1 ", "--1", "1-2", "9999", "-9999",
                 "99999999999999999999", "-0.0", "1E5", "1e-5", "0.0", "true", "null", '"1"', "[1]", "", "3.0",
                 "123456789012345678", "1234567890123456789", "-1000.5", "0e0", "-0e1", "1.5e-320"]


def _corrupt(rng: random.Random, header: list[str], row: list[str], ways: tuple[int, ...] = tuple(range(10))) -> None:
    """Damage one trace cell of ``row`` in place, in one of many ways."""
    columns = [i for i, c in enumerate(header) if c in codec.TRACE_COLUMNS and row[i]]
    if not columns:
        return
    i = rng.choice(columns)
    cell = row[i]
    how = rng.choice(ways)
    if how == 0:  # one number or string replaced
        parts = cell.split(",")
        j = rng.randrange(len(parts))
        head = parts[j][:len(parts[j]) - len(parts[j].lstrip("["))]
        tail = parts[j][len(parts[j].rstrip("]")):]
        parts[j] = head + rng.choice(_NUMBER_SWAPS) + tail
        row[i] = ",".join(parts)
    elif how == 1:  # emptied
        row[i] = rng.choice(["", " ", "[]", "[[]]", "{}", "null"])
    elif how == 2:  # cut short
        row[i] = cell[:rng.randrange(len(cell))]
    elif how == 3:  # an element dropped or doubled
        value = json.loads(cell)
        if isinstance(value, list) and value:
            j = rng.randrange(len(value))
            if rng.random() < 0.5:
                del value[j]
            else:
                value.insert(j, value[j])
            row[i] = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    elif how == 4:  # an inner list changed in length
        value = json.loads(cell)
        if isinstance(value, list) and value and isinstance(value[0], list) and value[0]:
            j = rng.randrange(len(value))
            value[j] = value[j][:-1] if rng.random() < 0.5 else value[j] + value[j][:1]
            row[i] = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    elif how == 5:  # spaces (another writer)
        row[i] = cell.replace(",", ", ")
    elif how == 6:  # a value out of bounds
        value = json.loads(cell)
        if isinstance(value, list) and value:
            column = codec.trace_column(header[i])
            if column is None or column.element not in ("float", "int"):
                return
            bad = rng.choice([-0.5, 5.0, 1500.0, -1500.0, 30.0, 0.0, -1e-13, 1e-13, -2, 0]
                             if column.element == "float" else [-2, 0, -1, 10**12])
            if isinstance(value[0], list) and value[0]:
                value[rng.randrange(len(value))][rng.randrange(len(value[0]))] = bad
            else:
                value[rng.randrange(len(value))] = bad
            row[i] = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    elif how == 7:  # rows swapped: unsorted alternatives, or ids moved
        value = json.loads(cell)
        if isinstance(value, list) and value and isinstance(value[0], list) and len(value[0]) > 1:
            j = rng.randrange(len(value))
            value[j] = value[j][::-1]
            row[i] = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    elif how == 8:  # metadata changes
        if header[i] == "trace_metadata":
            row[i] = rng.choice(['{"extra": {"vocab_size": 2}}', '{"source": "nope"}', '{"a": 1, "a": 2}', "[1]",
                                 '{"extra": {"vocab_size": 0}}', '{"entropy_source": "top_k"}'])
        else:
            row[i] = cell.replace("[", "[ ", 1)
    else:  # a text cell with escapes
        if header[i] in ("tokens", "top_tokens"):
            row[i] = cell.replace('"a"', '"\\u0061"').replace('"1"', '"\\n"')
        else:
            row[i] = cell + "x"


def _records(rng: random.Random, header: list[str], rows: list[list[str]]) -> list[dict]:
    """The CSV rows as JSON records: each trace cell decoded (its lists, its object), kept as text where it is not
    JSON (and some metadata objects as text), dropped or null where empty."""
    records = []
    for row in rows:
        record = {}
        for name, cell in zip(header, row, strict=True):
            if name not in codec.TRACE_COLUMNS:
                record[name] = cell
            elif cell == "":
                if rng.random() < 0.5:
                    record[name] = None
            elif name == "trace_metadata" and rng.random() < 0.3:  # an object's JSON text: read as the object
                record[name] = cell
            else:
                try:
                    record[name] = json.loads(cell)
                except ValueError:
                    record[name] = cell
        records.append(record)
    return records


def _jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def _refusing_only(trace_from_cells):
    """The per-row decoder, as the reader may use it when the fast path is on: only for rows the fast path's checks
    refused, to name the problem. A valid row reaching it means the vectorised check did not take a row it should."""
    def per_row(cells, **kwargs):
        trace = trace_from_cells(cells, **kwargs)
        raise AssertionError(f"a valid row went through the per-row path: tokens {trace.tokens[:8]!r}")
    return per_row


def _read(data: bytes, fast: bool, monkeypatch, chunk: int, fmt: str = "csv", arrow: bool = True,
          **options) -> tuple[object, list]:
    """The dataset and its warnings, read on the fast path (``arrow``: Parquet cells from their Arrow arrays when
    it can; else from their lists, as before from_arrow) or on the per-row path alone. On the fast path, every
    valid row must be taken by the vectorised check (the per-row decoder only names the problems of the others)."""
    with monkeypatch.context() as m:
        m.setattr(validate, "CHUNK_ROWS", chunk)
        if not fast:
            m.setattr(validate, "decode_chunk", lambda *args: None)
        else:
            m.setattr(validate, "trace_from_cells", _refusing_only(validate.trace_from_cells))
        if not arrow:
            m.setattr(fastread, "from_arrow", lambda *args: None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = read_dataset(data, format=fmt, **options)
    return ds, [str(w.message) for w in caught]


def _same_trace(a: Trace | None, b: Trace | None) -> None:
    assert (a is None) == (b is None)
    if a is None:
        return
    assert a == b
    assert a.metadata == b.metadata and a.tokens == b.tokens and a.top_tokens == b.top_tokens
    for name in ("token_ids", "surprisal", "entropy", "top_ids", "top_logprobs", "ranks"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name
            assert not x.flags.writeable


def _same(data: bytes, monkeypatch, chunk: int, fmt: str = "csv", *, lists: bool = False, **options) -> int:
    """Read ``data`` on the fast path and on the per-row path (``lists``: on the fast path without from_arrow, as
    before it) and check that both give the same dataset and warnings; the number of row errors."""
    fast, fast_warned = _read(data, True, monkeypatch, chunk, fmt, **options)
    slow, slow_warned = _read(data, lists, monkeypatch, chunk, fmt, arrow=not lists, **options)
    assert fast.errors == slow.errors
    assert fast_warned == slow_warned
    assert fast.n_read == slow.n_read and fast.notes == slow.notes
    pd.testing.assert_frame_equal(fast.frame, slow.frame)
    assert len(fast.traces) == len(slow.traces)
    for a, b in zip(fast.traces, slow.traces, strict=True):
        _same_trace(a, b)
    return len(fast.errors)


_OPTIONS = [dict(plain=True, k=5, entropy=True, top_tokens=True, ranks=True, metadata=True),
            dict(plain=True, k=3, entropy=False, top_tokens=True, ranks=False, metadata=False),
            dict(plain=True, k=0, entropy=True, top_tokens=False, ranks=True, metadata=True),
            dict(plain=True, k=2, entropy=False, top_tokens=False, ranks=False, metadata=True),
            dict(plain=False, k=4, entropy=True, top_tokens=True, ranks=True, metadata=False)]


@pytest.mark.parametrize("seed", range(25))
def test_valid_files_read_alike(seed, monkeypatch):
    rng = random.Random(seed)
    header, rows = _csv(rng, rng.randint(1, 60), **_OPTIONS[seed % len(_OPTIONS)])
    assert _same(_bytes(header, rows), monkeypatch, rng.choice([1, 7, 256])) == 0


@pytest.fixture(params=[True, False], ids=["pyarrow", "numpy"])
def parser(request, monkeypatch):
    """Numbers parsed with pyarrow (when installed) and with numpy (without it)."""
    monkeypatch.setattr(fastparse, "ARROW", request.param)


@pytest.mark.parametrize("seed", range(120))
def test_files_with_bad_cells_read_alike(seed, monkeypatch, parser):
    rng = random.Random(1000 + seed)
    header, rows = _csv(rng, rng.randint(5, 60), **_OPTIONS[seed % len(_OPTIONS)])
    for _ in range(rng.randint(1, 6)):
        _corrupt(rng, header, rows[rng.randrange(len(rows))])
    _same(_bytes(header, rows), monkeypatch, rng.choice([1, 1, 3, 16, 256]))


@pytest.mark.parametrize("seed", range(20))
def test_logprobs_column_and_partial_rows_read_alike(seed, monkeypatch):
    """A ``logprobs`` column instead of ``surprisal``, rows without a trace, and a few bad cells."""
    rng = random.Random(5000 + seed)
    header, rows = _csv(rng, rng.randint(5, 40), **_OPTIONS[seed % 4])
    s = header.index("surprisal")
    header[s] = "logprobs"
    for row in rows:
        row[s] = json.dumps([-x for x in json.loads(row[s])], separators=(",", ":"))
        if rng.random() < 0.1:
            for i, c in enumerate(header):
                if c in codec.TRACE_COLUMNS:
                    row[i] = ""
    for _ in range(rng.randint(0, 3)):
        _corrupt(rng, header, rows[rng.randrange(len(rows))])
    _same(_bytes(header, rows), monkeypatch, rng.choice([1, 4, 256]))


def test_fast_path_takes_plain_rows():
    """The writer's own files go through the fast path: every row decoded at once."""
    rng = random.Random(7)
    header, rows = _csv(rng, 30, **_OPTIONS[0])
    raws = [dict(zip(header, r, strict=True)) for r in rows]
    columns = tuple(c for c in codec.TRACE_COLUMNS if c in header)
    decoded = fastread.decode_chunk(raws, columns, {})
    assert decoded is not None and all(row is not None for row in decoded)


def test_text_cells_with_escaped_token_texts_are_parsed_in_bulk():
    """A chunk whose token texts have JSON escapes (quotes, backslashes, newlines, as real vocabularies do) is
    still taken by the text front end: its numbers parsed in bulk, just those cells decoded by the codec's decoder;
    ``json.dumps``' ``", "`` between values is read too. A cell that is not a list of strings sends the chunk
    elsewhere."""
    rng = random.Random(12)
    header, rows = _csv(rng, 30, **_OPTIONS[4])  # every word, escaped ones included
    columns = tuple(c for c in codec.TRACE_COLUMNS if c in header)
    top = header.index("top_tokens")
    for name in ("tokens", "top_tokens", "surprisal", "top_logprobs", "top_ids"):  # ", " between the values
        rows[2][header.index(name)] = json.dumps(json.loads(rows[2][header.index(name)]))
    raws = [dict(zip(header, r, strict=True)) for r in rows]
    assert any("\\" in raw["tokens"] for raw in raws) and ", " in raws[2]["top_logprobs"]
    parsed = fastparse.from_text(raws, columns)
    assert parsed is not None
    assert parsed.token_lists == [json.loads(raw["tokens"]) for raw in raws]
    for name, values in (("surprisal", parsed.vectors["surprisal"]), ("top_logprobs", parsed.top_logprobs),
                         ("top_ids", parsed.top_ids)):
        expected = [x for raw in raws for x in json.loads(raw[name])]
        assert values.tolist() == expected, name
    assert parsed.top_strings == [[text for step in json.loads(raw["top_tokens"]) for text in step] for raw in raws]
    for broken in ('["a\\"]', '["a", 7]', '{"a": 1}', '[["a"]]'):
        raws[5] = {**raws[5], "tokens": broken}
        assert fastparse.from_text(raws, columns) is None
    raws[5] = dict(zip(header, rows[5], strict=True))
    raws[9] = {**raws[9], "top_tokens": json.dumps(json.loads(rows[9][top])[:-1])}
    assert fastparse.from_text(raws, columns) is None


@pytest.mark.parametrize("text, integer, plain", [("99999999999999999999", True, False),
    ("-99999999999999999999", True, False), ("9223372036854775807", True, False), ("1.2.3", False, False),
    ("1e5e5", False, False), ("1,2,", False, False), ("1e+5,2E-5,3e05", False, True),
    ("1,-2,3.5,1e5,1E-5,0,0.0,-0.5", False, True), ("-0", False, False), ("-0.0", False, True),
    ("01", False, False), ("+1", False, False), (".5", False, False), ("1.", False, False), ("1e", False, False),
    ("1-2", False, False), ("--1", False, False), ("1,,2", False, False), ("1, 2", False, False),
    ("nan", False, False), ("1,-2,0,-0", True, True), ("12,-3", True, True), ("1.0", True, False),
    ("123456789012345678", True, True), ("1234567890123456789", True, True), ("-123456789012345678", True, True),
])
def test_parse_numbers(text, integer, plain, parser):
    """Only numbers that strtod reads as json does are parsed; anything else sends the chunk to the per-row path."""
    parsed = fastparse._parse_numbers([text], np.int64 if integer else np.float64)
    assert (parsed is not None) is plain
    if plain:
        assert parsed.tolist() == json.loads(f"[{text}]")


def test_parsed_floats_match_json(parser):
    """strtod (numpy) and json read every plain number to the same float, bit for bit."""
    rng = random.Random(3)
    values = [rng.uniform(-50, 0) for _ in range(2000)] + [rng.expovariate(1e-3) for _ in range(500)]
    texts = [repr(v) for v in values] + [f"{rng.randint(-10**25, 10**25)}" for _ in range(200)]
    texts += [f"{rng.randint(1, 9)}.{rng.randint(0, 10**20)}e{rng.randint(-330, 300)}" for _ in range(1000)]
    texts += ["5e-324", "2.2250738585072011e-308", "1.7976931348623157e308", "0.1", "1e-400", "-0.0", "0",
              "1E+05", "2.5e-0310"]
    parsed = fastparse._parse_numbers(texts, np.float64)
    assert parsed is not None
    expected = np.array([float(json.loads(t)) for t in texts])
    assert parsed.tobytes() == expected.tobytes()
    ints = [str(rng.randint(-2**63 + 1, 2**63 - 2)) for _ in range(500)] + ["0", "-0", "7"]
    assert fastparse._parse_numbers(ints, np.int64).tolist() == [json.loads(t) for t in ints]


def _counting(monkeypatch) -> list[int]:
    """Rows the fast path took and rows it left to the per-row path, counted as the reader runs."""
    counts = [0, 0]
    decode = fastread.decode_chunk

    def counted(*args):
        out = decode(*args)
        if out is not None:
            counts[0] += sum(r is not None for r in out)
            counts[1] += sum(r is None for r in out)
        return out

    monkeypatch.setattr(validate, "decode_chunk", counted)
    return counts


@pytest.mark.parametrize("seed", range(40))
def test_bad_values_in_plain_cells_read_alike(seed, monkeypatch):
    """Values out of bounds or out of order in cells of the plain form: the fast path decodes the chunk and leaves
    just those rows to the per-row path, which names them."""
    rng = random.Random(9000 + seed)
    header, rows = _csv(rng, rng.randint(20, 80), **_OPTIONS[(0, 1, 3)[seed % 3]])  # k >= 1, plain token texts
    for _ in range(rng.randint(1, 8)):
        _corrupt(rng, header, rows[rng.randrange(len(rows))], ways=(6, 7))
    counts = _counting(monkeypatch)
    n_errors = _same(_bytes(header, rows), monkeypatch, rng.choice([3, 256]))
    assert counts[0] > 0 and counts[1] >= (n_errors > 0)


def test_read_traces_bench_runs(capsys):
    from bench.read_traces import main

    main(["--rows", "40", "--repeat", "1"])
    out = capsys.readouterr().out
    assert "csv" in out and "jsonl" in out and "x" in out.splitlines()[-1]


@pytest.mark.parametrize("source, k", [("absent", 0), ("exact", 0), ("top_k", 0), ("top_k", 2), ("absent", 2)])
def test_metadata_that_contradicts_the_cells_reads_alike(source, k, monkeypatch):
    """The fast path builds its traces without checking each row's values again; a row whose metadata contradicts
    its cells (entropy given, source "absent"; a top-k source without k) still gets the constructor's verdict."""
    header = ["prompt", "answer", "label", "tokens", "surprisal", "entropy", "top_ids", "top_logprobs",
              "trace_metadata"]
    alternatives = json.dumps([[-0.2, -2.0][:k]] * 2, separators=(",", ":")) if k else ""
    ids = json.dumps([[5, 6][:k]] * 2, separators=(",", ":")) if k else ""
    rows = [[f"Q{i}", "A", "1", '["a","b"]', "[0.1,0.2]", "[0.5,0.6]", ids, alternatives,
             json.dumps({"source": "imported", "entropy_source": source}, separators=(",", ":"))] for i in range(3)]
    raws = [dict(zip(header, r, strict=True)) for r in rows]
    decoded = fastread.decode_chunk(raws, tuple(c for c in codec.TRACE_COLUMNS if c in header), {})
    assert decoded is not None and all(row is not None for row in decoded)  # the fast path takes them
    n_errors = _same(_bytes(header, rows), monkeypatch, 256)
    assert n_errors == (3 if source == "absent" else 0)
    fast, _ = _read(_bytes(header, rows), True, monkeypatch, 256)
    if source == "top_k" and k:
        assert all(t.metadata.entropy_k == k for t in fast.traces)


@pytest.mark.parametrize("seed", range(25))
def test_valid_jsonl_files_read_alike(seed, monkeypatch):
    """JSON Lines records whose trace cells are lists: the fast path takes every row, and reads them as the per-row
    path does."""
    rng = random.Random(20_000 + seed)
    header, rows = _csv(rng, rng.randint(1, 60), **_OPTIONS[seed % len(_OPTIONS)])
    counts = _counting(monkeypatch)
    assert _same(_jsonl(_records(rng, header, rows)), monkeypatch, rng.choice([1, 7, 256]), "jsonl") == 0
    assert counts == [len(rows), 0]


_ANY_SWAPS = [True, False, None, "1.5", 1.5, -0.5, 2, -2, 0, -0.0, 10**30, -(10**30), 10**400, 2**63, -(2**63) - 1,
              float("nan"), float("inf"), -float("inf"), 9999.0, -9999.0, [1.0], {}, 1e-13]
_FLOAT_SWAPS = [1.5, -0.5, 2.0, -2.0, 0.0, -0.0, 30.0, float("nan"), float("inf"), -float("inf"), 9999.0, -9999.0,
                1e-13, -1e-13]


def _swap_number(rng: random.Random, records: list[dict], floats_only: bool = False) -> None:
    """One number of a numeric trace list replaced by a value of another type or out of bounds (``floats_only``:
    a float, in a float column)."""
    record = rng.choice(records)
    names = [c for c in ("surprisal", "entropy", "token_ids", "ranks", "top_logprobs", "top_ids")
             if isinstance(record.get(c), list) and record[c] and not (floats_only and "ids" in c or
                                                                       floats_only and c == "ranks")]
    if not names:
        return
    value = record[rng.choice(names)]
    j = rng.randrange(len(value))
    swap = rng.choice(_FLOAT_SWAPS if floats_only else _ANY_SWAPS)
    if isinstance(value[j], list):
        if value[j]:
            value[j][rng.randrange(len(value[j]))] = swap
    else:
        value[j] = swap


@pytest.mark.parametrize("seed", range(80))
def test_jsonl_files_with_bad_cells_read_alike(seed, monkeypatch):
    """JSON Lines with bad cells: damaged text (kept as text when not JSON), values of the wrong type or out of
    bounds, missing cells: both paths give the same traces and the same errors."""
    rng = random.Random(30_000 + seed)
    header, rows = _csv(rng, rng.randint(5, 60), **_OPTIONS[seed % len(_OPTIONS)])
    for _ in range(rng.randint(0, 3)):
        _corrupt(rng, header, rows[rng.randrange(len(rows))])
    records = _records(rng, header, rows)
    for _ in range(rng.randint(1, 5)):
        _swap_number(rng, records)
    for _ in range(rng.randint(0, 2)):  # a trace cell removed from one record
        record = rng.choice(records)
        names = [c for c in record if c in codec.TRACE_COLUMNS]
        if names:
            del record[rng.choice(names)]
    _same(_jsonl(records), monkeypatch, rng.choice([1, 3, 16, 256]), "jsonl")


@pytest.mark.parametrize("seed", range(30))
def test_bad_values_in_jsonl_lists_read_alike(seed, monkeypatch):
    """Numbers out of bounds, out of order or not finite in otherwise plain lists: the fast path decodes the chunk
    and leaves just those rows to the per-row path, which names them."""
    rng = random.Random(40_000 + seed)
    header, rows = _csv(rng, rng.randint(20, 80), **_OPTIONS[(0, 1, 3)[seed % 3]])
    for _ in range(rng.randint(1, 6)):
        _corrupt(rng, header, rows[rng.randrange(len(rows))], ways=(6, 7))
    records = _records(rng, header, rows)
    for _ in range(rng.randint(0, 3)):
        _swap_number(rng, records, floats_only=True)
    counts = _counting(monkeypatch)
    n_errors = _same(_jsonl(records), monkeypatch, rng.choice([3, 256]), "jsonl")
    assert counts[0] > 0 and counts[1] >= (n_errors > 0) and sum(counts) == len(rows)


@pytest.mark.parametrize("seed", range(6))
def test_parquet_lists_read_alike(seed, monkeypatch):
    """Parquet's list columns come as lists too: the same fast path, the same traces."""
    pytest.importorskip("pyarrow")
    rng = random.Random(50_000 + seed)
    header, rows = _csv(rng, rng.randint(5, 40), **_OPTIONS[seed % len(_OPTIONS)])
    frame = pd.DataFrame(_records(random.Random(0), header, rows))
    if "trace_metadata" in frame.columns:  # as text: Parquet has no struct without fields ("decoding": {})
        frame["trace_metadata"] = [m if isinstance(m, str) else json.dumps(m) for m in frame["trace_metadata"]]
    buffer = io.BytesIO()
    frame.to_parquet(buffer)
    counts = _counting(monkeypatch)
    assert _same(buffer.getvalue(), monkeypatch, rng.choice([1, 7, 256]), "parquet") == 0
    assert counts[0] > 0


def test_api_shaped_jsonl_takes_the_fast_path(tmp_path, monkeypatch):
    """Saved API runs (chosen log-probabilities, top-10 log-probabilities and texts, no entropy column: the shape of
    bench.large_jsonl) are decoded a chunk at a time, every row, as the per-row path reads them."""
    from bench.large_jsonl import write_file

    path = tmp_path / "api.jsonl"
    write_file(path, 300)
    counts = _counting(monkeypatch)
    assert _same(path.read_bytes(), monkeypatch, 256, "jsonl") == 0
    assert counts == [300, 0]


@pytest.mark.parametrize("name", ["real_test.csv", "real_sampled_validation.csv", "demo_validation.csv"])
def test_real_answers_with_escaped_token_texts_take_the_fast_path(name, monkeypatch):
    """A real model's answers have tokens with quotes, newlines and non-ASCII escapes, which the plain text front
    end does not split: their cells are decoded one by one and then checked together, every row, as the per-row
    path reads them."""
    from pathlib import Path

    data = (Path(__file__).parents[3] / "assets" / "datasets" / name).read_bytes()
    assert b"\\u" in data or b"\\n" in data or b'\\"' in data  # escapes in the JSON text cells
    counts = _counting(monkeypatch)
    assert _same(data, monkeypatch, 256) == 0
    assert counts[0] > 0 and counts[1] == 0


def test_escaped_cells_that_do_not_decode_are_left_to_the_per_row_path(monkeypatch):
    """In a chunk of escaped cells, a row whose cell is not JSON, is not a list or holds no token goes to the
    per-row path, which names the cell; the rest of the chunk stays on the fast path."""
    rng = random.Random(5)
    header, rows = _csv(rng, 40, **_OPTIONS[4])
    at = header.index("tokens")
    rows[3][at], rows[9][at], rows[17][at] = rows[3][at][:-1], "7", "[]"
    counts = _counting(monkeypatch)
    assert _same(_bytes(header, rows), monkeypatch, 256) == 3
    assert counts == [37, 3]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_alternatives_without_probability_and_near_full_steps_are_checked_on_the_fast_path(fmt, monkeypatch):
    """Valid rows that need the rarer rules -- alternatives at -inf or -9999 (dropped: each row keeps the fewest any
    of its steps has, and their ids may pass the vocabulary), steps whose alternatives with the chosen token pass 1
    while the chosen token is among them -- are checked together, and read as the per-row path reads them; rows
    that break the mass rule (the chosen token, not among them by id, pushes the step past 1) are its only rows."""
    rng = random.Random(11)
    records = []
    for i in range(60):
        n, k = rng.randint(1, 6), 4
        top = [sorted((math.log(rng.uniform(0.01, 0.2)) for _ in range(k)), reverse=True) for _ in range(n)]
        ids = [[rng.randrange(50) for _ in range(k)] for _ in range(n)]
        chosen = [row[0] for row in ids]
        surprisal = [-row[0] for row in top]
        kind = i % 4
        if kind == 1:  # a tail with no probability at some steps; its ids beyond the vocabulary
            for t in rng.sample(range(n), rng.randint(1, n)):
                cut = rng.randint(1, k)
                top[t][cut:] = [rng.choice([-math.inf, -9999.0, -1e6])] * (k - cut)
                ids[t][cut:] = [10**6] * (k - cut)
        elif kind == 2:  # a near-full step: the chosen token (among them) has most of the mass
            top[0] = [math.log(0.9), math.log(0.05), math.log(0.03), math.log(0.02)]
            surprisal[0] = -top[0][0]
        elif kind == 3:  # the chosen token is not among them by id and pushes the step past 1: refused
            top[0] = [math.log(0.5), math.log(0.3), math.log(0.1), math.log(0.05)]
            chosen[0], surprisal[0] = 99, -math.log(0.5)
        records.append({"prompt": f"q{i}", "answer": "x" * n, "label": i % 2, "tokens": ["x"] * n,
                        "token_ids": chosen, "surprisal": surprisal, "top_ids": ids, "top_logprobs": top,
                        "trace_metadata": {"source": "generate", "extra": {"vocab_size": 100}}})
    if fmt == "jsonl":
        data = _jsonl(records)
    else:
        frame = pd.DataFrame({key: [json.dumps(r[key], separators=(",", ":")) if isinstance(r[key], (list, dict))
                                    else r[key] for r in records] for key in records[0]})
        data = frame.to_csv(index=False).encode()
    counts = _counting(monkeypatch)
    assert _same(data, monkeypatch, 256, fmt) == 15
    assert counts == [45, 15]
    fast, _ = _read(data, True, monkeypatch, 256, fmt)
    dropped = [t for t in fast.traces if t.top_logprobs.shape[1] < 4]
    assert dropped and all(t.metadata.entropy_k == t.top_logprobs.shape[1] or t.entropy is None for t in dropped)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_surprisal_and_logprobs_both_given_are_checked_on_the_fast_path(fmt, monkeypatch):
    """Both columns: rows where they agree (within 1e-6) are taken together; a row where they differ is the only one
    left to the per-row path, which names it, as without the fast path."""
    rng = random.Random(4)
    header, rows = _csv(rng, 30, **_OPTIONS[0])
    at = header.index("surprisal")
    header.append("logprobs")
    for i, row in enumerate(rows):
        values = json.loads(row[at])
        logprobs = [-v + (1e-3 if i % 10 == 3 and j == 0 else rng.uniform(-1e-7, 1e-7)) for j, v in enumerate(values)]
        row.append(json.dumps([min(x, 0.0) for x in logprobs], separators=(",", ":")))
    assert _fast_and_per_row(header, rows, fmt, rng, monkeypatch) == (3, [27, 3])


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_few_malformed_rows_leave_only_themselves_to_the_per_row_path(fmt, monkeypatch):
    """Rows whose lists the front end cannot take (a list one value short, a text among the ids, a number among the
    token texts) are found by halving their chunk: their neighbours stay on the fast path; the read is as the
    per-row path's."""
    rng = random.Random(8)
    header, rows = _csv(rng, 200, **_OPTIONS[0])
    ids, texts = header.index("token_ids"), header.index("tokens")
    for i, how in ((5, "short"), (77, "text id"), (150, "number token"), (151, "short")):
        cell = json.loads(rows[i][ids if how != "number token" else texts])
        if how == "short":
            cell = cell[:-1]
        else:
            cell[0] = "7" if how == "text id" else 7
        rows[i][ids if how != "number token" else texts] = json.dumps(cell, separators=(",", ":"))
    assert _fast_and_per_row(header, rows, fmt, rng, monkeypatch) == (4, [196, 4])


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_rows_of_many_odd_rows_are_each_tried_when_the_halvings_are_spent(fmt, monkeypatch):
    """A chunk where every other row has a list one value short needs more halvings than a chunk may spend: the
    rows left then are tried one by one, so every valid row is still checked on the fast path."""
    rng = random.Random(21)
    header, rows = _csv(rng, 256, **_OPTIONS[0])
    ids = header.index("token_ids")
    for row in rows[1::2]:
        row[ids] = json.dumps(json.loads(row[ids])[:-1], separators=(",", ":"))
    assert _fast_and_per_row(header, rows, fmt, rng, monkeypatch) == (128, [128, 128])


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_valid_forms_that_no_front_end_takes_whole_are_checked_on_the_fast_path(fmt, monkeypatch):
    """Forms the per-row path accepts: an answer with no token (each trace cell an empty list), ids written as
    floats (``7.0``, as a float64 column holds them), a step column given as ``[]`` or ``top_ids`` without
    ``top_logprobs`` (no alternatives), a blank metadata cell among given ones. Every row is read on the fast path,
    as the per-row path reads it; a fraction among the ids is still refused and named."""
    meta = {"source": "generate", "extra": {"vocab_size": 100}}
    records = []
    for i in range(40):
        n = 1 + i % 4
        record = {"prompt": f"q{i}", "answer": "x" * n, "label": i % 2, "tokens": ["x"] * n,
                  "token_ids": list(range(n)), "surprisal": [1.5] * n, "entropy": [2.0] * n,
                  "top_ids": [[j, 50, 60] for j in range(n)], "top_logprobs": [[-1.5, -2.0, -3.0]] * n,
                  "top_tokens": [["x", "y", "z"]] * n, "trace_metadata": meta}
        kind = i % 6
        if kind == 0:
            record.update(answer="", tokens=[], token_ids=[], surprisal=[], entropy=[], top_ids=[], top_logprobs=[],
                          top_tokens=[])
        elif kind == 1:
            record.update(token_ids=[float(j) for j in range(n)], top_ids=[[float(j), 50.0, 60.0] for j in range(n)])
        elif kind == 2:
            record.update(top_ids=[], top_logprobs=[], top_tokens=[])
        elif kind == 3:
            record.update(top_ids=[[] for _ in range(n)], top_logprobs=None, top_tokens=None)
        elif kind == 4:
            record["trace_metadata"] = " "
        records.append(record)
    records[7]["token_ids"] = [0.5]
    header = list(records[0])
    rows = [[json.dumps(r[c], separators=(",", ":")) if isinstance(r[c], (list, dict)) else
             "" if r[c] is None else str(r[c]) for c in header] for r in records]
    data = _bytes(header, rows) if fmt == "csv" else _jsonl(records)
    counts = _counting(monkeypatch)
    assert _same(data, monkeypatch, 256, fmt) == 1
    assert counts == [39, 1]
    fast, _ = _read(data, True, monkeypatch, 256, fmt)
    empty = fast.traces[0]
    assert empty.tokens == () and empty.top_logprobs.shape == (0, 0) and empty.metadata.entropy_source == "exact"
    assert fast.traces[1].token_ids.dtype == np.int64 and fast.traces[2].top_logprobs.shape == (3, 0)
    for record in records:  # a file with ids and texts but no top_logprobs column: steps without alternatives
        n = len(record["tokens"])
        record.update(top_ids=[[] for _ in range(n)], top_tokens=[[] for _ in range(n)], token_ids=list(range(n)))
        del record["top_logprobs"]
    header = list(records[0])
    rows = [[json.dumps(r[c], separators=(",", ":")) if isinstance(r[c], (list, dict)) else
             "" if r[c] is None else str(r[c]) for c in header] for r in records]
    data = _bytes(header, rows) if fmt == "csv" else _jsonl(records)
    counts[:] = [0, 0]
    assert _same(data, monkeypatch, 256, fmt) == 0
    assert counts == [40, 0]


def _fast_and_per_row(header: list[str], rows: list[list[str]], fmt: str, rng: random.Random,
                      monkeypatch) -> tuple[int, list[int]]:
    """The rows as a CSV or JSON Lines file, read on both paths alike: its row errors, and the rows the fast path
    took and left to the per-row path."""
    data = _bytes(header, rows) if fmt == "csv" else _jsonl(_records(rng, header, rows))
    counts = _counting(monkeypatch)
    return _same(data, monkeypatch, 256, fmt), counts


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_file_whose_rows_all_have_traces_reads_into_one_table(fmt, monkeypatch):
    """The reader's checked rows go into one TraceTable with no Trace made per row; a file with a row without a
    trace gives a list instead, with None for that row."""
    from trace_core import TraceTable

    rng = random.Random(3)
    header, rows = _csv(rng, 40, **_OPTIONS[0])
    data = _bytes(header, rows)
    if fmt == "jsonl":
        data = _jsonl(_records(rng, header, rows))
    made: list[int] = []
    real = Trace.from_checked.__func__

    def counting(cls, **parts):
        made.append(1)
        return real(cls, **parts)

    with monkeypatch.context() as m:
        m.setattr(Trace, "from_checked", classmethod(counting))
        ds = read_dataset(data, format=fmt)
    assert isinstance(ds.traces, TraceTable) and len(ds.traces) == 40 and ds.has_traces and not made
    traces = list(ds.traces)  # rows as Traces, equal to what the per-row path reads
    slow, _ = _read(data, False, monkeypatch, 256, fmt)
    assert traces == slow.traces and traces == list(slow.traces)

    blank = [c if name in ("prompt", "answer", "label") else "" for name, c in zip(header, rows[5], strict=True)]
    mixed = read_dataset(_bytes(header, [*rows[:5], blank, *rows[6:]]), format="csv")
    assert isinstance(mixed.traces, list) and mixed.traces[5] is None and not mixed.has_traces
    assert mixed.traces[:5] == traces[:5] and mixed.traces[6:] == traces[6:]


@pytest.mark.parametrize("seed", range(6))
def test_a_few_records_of_another_form_leave_the_rest_of_their_chunk_on_the_fast_path(seed, monkeypatch):
    """Records without one of the trace columns (or with it as text) among list records: the records of each form
    are decoded together, so only rows no form can take go row by row; every row reads as on the per-row path."""
    rng = random.Random(40_000 + seed)
    header, rows = _csv(rng, 120, **_OPTIONS[0])
    records = _records(rng, header, rows)
    odd = rng.sample(range(len(records)), 6)
    for i in odd[:4]:
        records[i].pop(rng.choice(["ranks", "entropy", "top_tokens"]), None)  # a column some records lack
    for i in odd[4:]:
        records[i]["surprisal"] = json.dumps(records[i]["surprisal"])  # a list given as its JSON text
    counts = _counting(monkeypatch)
    assert _same(_jsonl(records), monkeypatch, 256, "jsonl") == 0
    assert counts[0] >= len(records) - 2  # before: the whole chunk of 120 went row by row


# --------------------------------------------------------------------------------------------------
# Parquet: trace cells decoded from their record batch's Arrow arrays (read_parquet.from_arrow)
# --------------------------------------------------------------------------------------------------

def _arrow_counting(monkeypatch) -> list[int]:
    """Rows whose trace cells from_arrow decoded from their arrays, and rows of chunks it left to fastparse."""
    counts = [0, 0]
    decode = fastread.from_arrow

    def counted(raws, columns, strings):
        out = decode(raws, columns, strings)
        counts[out is None] += len(raws)
        return out

    monkeypatch.setattr(fastread, "from_arrow", counted)
    return counts


def _parquet(records: list[dict], types: dict[str, object]) -> bytes:
    """The records as a Parquet file, each column of the given Arrow type (else as pyarrow infers it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = list(dict.fromkeys(k for r in records for k in r))
    arrays = [pa.array([r.get(n) for r in records], type=types.get(n)) for n in names]
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, names=names), buffer)
    return buffer.getvalue()


def _clean_records(rng: random.Random, n: int, **options) -> list[dict]:
    """Records with every trace cell a list (metadata as its JSON text), as write_dataset writes them."""
    header, rows = _csv(rng, n, **options)
    records = []
    for row in rows:
        record = {}
        for name, cell in zip(header, row, strict=True):
            record[name] = cell if name in ("prompt", "answer", "label", "trace_metadata") or not cell \
                else json.loads(cell)
            if name in codec.TRACE_COLUMNS and cell == "":
                record[name] = None
        records.append(record)
    return records


def _types(records: list[dict], rng: random.Random | None = None) -> dict[str, object]:
    """Each trace column's Arrow type by the column spec; with ``rng``, some of them swapped for types the fast
    path takes (float32, small ints, large lists) or leaves to the lists (uint64, float16, bool, decimal, JSON
    text)."""
    import pyarrow as pa

    types: dict[str, object] = {c.name: c.arrow_type() for c in codec.COLUMNS if any(c.name in r for r in records)}
    if rng is None:
        return types
    for _ in range(rng.randint(1, 3)):
        name = rng.choice(list(types))
        column = codec.COLUMN_BY_NAME[name]
        if column.element == "float":
            inner = rng.choice([pa.float32(), pa.float16(), pa.int64(), pa.decimal128(38, 20), pa.float64()])
        elif column.element == "int":
            inner = rng.choice([pa.int8(), pa.uint16(), pa.int32(), pa.uint64(), pa.float64(), pa.bool_()])
        elif column.element == "str":
            inner = rng.choice([pa.large_string(), pa.string()])
        else:
            continue
        kind = inner
        for level in range(column.ndim):
            kind = pa.large_list(kind) if level == 0 and rng.random() < 0.3 else pa.list_(kind)
        types[name] = kind
        _fit(records, name, inner)
    return types


def _fit(records: list[dict], name: str, inner) -> None:
    """Values that the Arrow type ``inner`` can hold (rounded, or made whole numbers), so that the file can be
    written; the readers then read what it holds."""
    import pyarrow as pa

    def fit(x):
        if isinstance(x, list):
            return [fit(v) for v in x]
        if x is None or isinstance(x, str):
            return x
        if pa.types.is_floating(inner) or pa.types.is_decimal(inner):
            if pa.types.is_float16(inner):
                return float(np.float16(x))
            if pa.types.is_decimal(inner):
                import decimal

                return decimal.Decimal(repr(float(x))) if math.isfinite(x) and abs(x) < 1e15 else None
            return float(np.float32(x)) if pa.types.is_float32(inner) else float(x)
        if pa.types.is_boolean(inner):
            return bool(x)
        value = int(x) if math.isfinite(x) else 0
        if pa.types.is_unsigned_integer(inner) or pa.types.is_int8(inner):
            value = min(max(value, 0), 127)
        return value

    for record in records:
        if record.get(name) is not None and not isinstance(record[name], str):
            record[name] = fit(record[name])


def _oddity(rng: random.Random, records: list[dict], how: str) -> None:
    """Change one record's trace cells in place, in one of the ways the fast path must leave to the lists."""
    record = rng.choice(records)
    lists = [c for c in codec.TRACE_COLUMNS if isinstance(record.get(c), list) and record[c]]
    if not lists:
        return
    name = rng.choice(lists)
    value = record[name]
    j = rng.randrange(len(value))
    if how == "null in list":
        if isinstance(value[j], list) and value[j]:
            value[j][rng.randrange(len(value[j]))] = None
        else:
            value[j] = None
    elif how == "null cell":
        record[name] = None
    elif how == "no trace":
        for c in codec.TRACE_COLUMNS:
            if c in record:
                record[c] = None
    elif how == "length":
        record[name] = value[:-1] if rng.random() < 0.5 else value + value[:1]
    elif how == "ragged":
        steps = [c for c in ("top_logprobs", "top_ids", "top_tokens") if isinstance(record.get(c), list)]
        if steps:
            step = record[rng.choice(steps)]
            j = rng.randrange(len(step))
            step[j] = step[j][:-1] if step[j] and rng.random() < 0.5 else step[j] + step[j][:1] + step[j][:1]
    elif how == "value":
        column = codec.COLUMN_BY_NAME[name]
        if column.element in ("float", "int"):
            bad = rng.choice([float("nan"), float("inf"), -float("inf"), -0.5, 9999.0, -9999.0, 1e-13, -1e-13, 30.0,
                              -0.0] if column.element == "float" else [-2, 0, -1, 10**12, 2**62])
            if isinstance(value[j], list):
                if value[j]:
                    value[j][rng.randrange(len(value[j]))] = bad
            else:
                value[j] = bad
    elif how == "unsorted":
        if name in ("top_logprobs", "top_ids", "top_tokens") and len(value[j]) > 1:
            value[j] = value[j][::-1]
    elif how == "empty answer":
        record["answer"] = ""
        for c in codec.TRACE_COLUMNS:
            if isinstance(record.get(c), list):
                record[c] = []


_ODDITIES = ["null in list", "null cell", "no trace", "length", "ragged", "value", "unsorted", "empty answer"]


@pytest.mark.parametrize("seed", range(25))
def test_clean_parquet_files_are_read_from_their_arrow_arrays(seed, monkeypatch):
    """Files as write_dataset writes them: every row's trace cells decoded from the batch's arrays, the same
    dataset as the per-row path and as the lists' fast path (before from_arrow) give."""
    pytest.importorskip("pyarrow")
    rng = random.Random(60_000 + seed)
    records = _clean_records(rng, rng.randint(1, 70), **_OPTIONS[seed % len(_OPTIONS)])
    data = _parquet(records, _types(records))
    chunk = rng.choice([1, 7, 256])
    counts = _arrow_counting(monkeypatch)
    assert _same(data, monkeypatch, chunk, "parquet") == 0
    assert counts == [len(records), 0]
    assert _same(data, monkeypatch, chunk, "parquet", lists=True) == 0


@pytest.mark.parametrize("seed", range(90))
def test_odd_parquet_files_read_as_before(seed, monkeypatch):
    """Nulls in lists and cells, lengths that do not match, ragged alternatives, values out of bounds, empty
    answers, rows without a trace, columns of other Arrow types (JSON text too): the same dataset, errors and
    warnings as the per-row path and as the lists' fast path give, batches of a few rows too."""
    pytest.importorskip("pyarrow")
    from trace_core.data import read_parquet

    rng = random.Random(70_000 + seed)
    records = _clean_records(rng, rng.randint(5, 60), **_OPTIONS[seed % len(_OPTIONS)])
    for _ in range(rng.randint(1, 5)):
        _oddity(rng, records, rng.choice(_ODDITIES))
    types = _types(records, rng if seed % 3 else None)
    if seed % 5 == 0:  # a trace column stored as JSON text
        name = rng.choice([n for n in types if n != "trace_metadata"])
        types[name] = None
        for record in records:
            if record.get(name) is not None:
                record[name] = json.dumps(record[name], allow_nan=True)
    data = _parquet(records, types)
    chunk = rng.choice([1, 3, 16, 256])
    with monkeypatch.context() as m:
        m.setattr(read_parquet, "PARQUET_BATCH", rng.choice([4, 13, 4096]))
        _same(data, monkeypatch, chunk, "parquet")
        _same(data, monkeypatch, chunk, "parquet", lists=True)


@pytest.mark.parametrize("seed", range(20))
def test_bad_values_in_plain_parquet_lists_read_alike(seed, monkeypatch):
    """NaN, infinities, negative surprisal, values out of bounds or out of order in lists of the plain form: from_arrow
    decodes every row from the arrays, the checks leave just those rows to the per-row path, which names them."""
    pytest.importorskip("pyarrow")
    rng = random.Random(80_000 + seed)
    records = _clean_records(rng, rng.randint(20, 80), **_OPTIONS[(0, 1, 3)[seed % 3]])
    for _ in range(rng.randint(1, 6)):
        _oddity(rng, records, rng.choice(["value", "unsorted"]))
    data = _parquet(records, _types(records))
    counts = _arrow_counting(monkeypatch)
    _same(data, monkeypatch, rng.choice([3, 256]), "parquet")
    assert counts == [len(records), 0]
    _same(data, monkeypatch, 256, "parquet", lists=True)


@pytest.mark.parametrize("case", ["missing", "logprobs", "both", "struct metadata", "odd metadata", "huge ints",
                                  "long prompt", "float32", "no columns but tokens", "k of top_ids",
                                  "k of top_tokens", "metadata in some rows"])
def test_parquet_columns_of_every_kind_read_as_before(case, monkeypatch):
    """Optional columns missing, ``logprobs`` instead of (or besides) ``surprisal``, metadata as objects or odd text,
    ids beyond int64, a row rejected for a long cell in the middle of a chunk (its neighbours are not consecutive in
    the batch): the same dataset as the per-row path and as the lists' fast path give."""
    import pyarrow as pa

    rng = random.Random(case)
    records = _clean_records(rng, 40, **_OPTIONS[0])
    types = _types(records)
    options: dict = {}
    if case == "missing":
        for record in records:
            for name in ("entropy", "ranks", "top_tokens", "trace_metadata"):
                record.pop(name)
    elif case in ("logprobs", "both"):
        for record in records:
            record["logprobs"] = [-x for x in record["surprisal"]]
            if case == "logprobs":
                record.pop("surprisal")
        types["logprobs"] = pa.list_(pa.float64())
    elif case == "struct metadata":
        for record in records:
            record["trace_metadata"] = {"model_id": "m", "source": "imported", "extra": {"vocab_size": 200}}
        types["trace_metadata"] = None
    elif case == "odd metadata":
        for i, record in enumerate(records):
            record["trace_metadata"] = ['{"extra": {"vocab_size": 2}}', '{"source": "nope"}', "[1]", "",
                                        '{"a": 1, "a": 2}', record["trace_metadata"]][i % 6]
    elif case == "huge ints":
        for record in records:
            record["token_ids"] = [2**63 + 5] + record["token_ids"][1:]
        types["token_ids"] = pa.list_(pa.uint64())
    elif case == "long prompt":
        records[5]["prompt"] = "x" * 5000
        options["max_cell_chars"] = 1000
    elif case in ("k of top_ids", "k of top_tokens"):  # every step of one column one alternative short
        name = case.split()[-1]
        for record in records:
            record[name] = [step[:-1] for step in record[name]]
    elif case == "metadata in some rows":
        for record in records[::3]:
            record["trace_metadata"] = None
    elif case == "float32":
        types["surprisal"] = pa.list_(pa.float32())
        types["top_logprobs"] = pa.list_(pa.list_(pa.float32()))
        _fit(records, "surprisal", pa.float32())
        _fit(records, "top_logprobs", pa.float32())
    else:
        for record in records:
            for name in codec.TRACE_COLUMNS:
                if name not in ("tokens", "surprisal"):
                    record.pop(name, None)
    data = _parquet(records, types)
    counts = _arrow_counting(monkeypatch)
    n_errors = _same(data, monkeypatch, 256, "parquet", **options)
    _same(data, monkeypatch, 256, "parquet", lists=True, **options)
    if case in ("missing", "logprobs", "both", "float32", "no columns but tokens", "long prompt"):
        assert n_errors == (1 if case == "long prompt" else 0) and counts[0] > 0 and counts[1] == 0
    if case in ("huge ints", "k of top_ids", "k of top_tokens", "metadata in some rows"):
        assert counts[1] > 0  # the chunk left to the lists (its rows of each form may then be taken one form each)


def test_parquet_records_hold_what_to_pylist_gives():
    """A Parquet row's cells, converted when they are looked at, equal the record ``to_pylist`` gives, in order."""
    import pyarrow as pa

    from trace_core.data.read_parquet import ArrowBatch, ArrowRecord, _records

    batch = pa.RecordBatch.from_pydict({
        "prompt": ["a", None], "surprisal": [[1.5, None], None], "tokens": [["x"], []],
        "trace_metadata": [{"k": [1, 2]}, None], "top_ids": pa.array([[[1]], [[2, 3]]], pa.list_(pa.list_(pa.uint64())))})
    rows = _records(batch)
    assert [dict(r) for r in rows] == batch.to_pylist()
    assert [list(r) for r in rows] == [list(r) for r in batch.to_pylist()]
    assert isinstance(rows[0], ArrowRecord) and isinstance(rows[0].batch, ArrowBatch)
    assert "surprisal" in rows[1] and "nope" not in rows[1] and rows[1].get("nope", 7) == 7
    assert rows[0]["surprisal"] is rows[0]["surprisal"]  # converted once: the per-row path sees one object


def test_read_traces_bench_runs_on_parquet(capsys):
    pytest.importorskip("pyarrow")
    from bench.read_traces import main

    main(["--rows", "40", "--repeat", "1", "--format", "parquet"])
    out = capsys.readouterr().out
    assert "parquet" in out and "x" in out.splitlines()[-1]


_PROMPTS = ["Q", " Q ", "", " ", "\t", "\u00a0", "日本語の質問"]
_ANSWERS = ["A", "", " ", "réponse", "\u2028"]
_LABELS = ["1", "0", " Yes ", "TRUE", "f", "Correct", "incorrect", "1.0", "-0", "\u22120", "2", "", " ", "maybe",
           "0.99999999999999999"]
_JSON_LABELS = [True, False, 0, 1, 1.0, 0.0, 2, -1, None, "1", " no ", "x", [1], {"v": 1}]


def _lane_off(monkeypatch, data: bytes, fmt: str, **options) -> tuple[object, list]:
    """The dataset read with every row's prompt, answer and label checked by the per-row path."""
    with monkeypatch.context() as m:
        m.setattr(validate, "plain_cells", lambda pending, rules: None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = read_dataset(data, format=fmt, **options)
    return ds, [str(w.message) for w in caught]


def _same_either_lane(data: bytes, monkeypatch, fmt: str, **options) -> object:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast = read_dataset(data, format=fmt, **options)
    slow, slow_warned = _lane_off(monkeypatch, data, fmt, **options)
    assert [str(w.message) for w in caught] == slow_warned
    assert fast.errors == slow.errors
    assert fast.n_read == slow.n_read and fast.notes == slow.notes and fast.label_source == slow.label_source
    pd.testing.assert_frame_equal(fast.frame, slow.frame)
    assert len(fast.traces) == len(slow.traces)
    for a, b in zip(fast.traces, slow.traces, strict=True):
        _same_trace(a, b)
    return fast


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("seed", range(12))
def test_odd_prompt_answer_label_and_response_cells_read_alike(seed, fmt, monkeypatch):
    """The rows whose prompt, answer and label are plain are kept without the per-row checks (plain_cells); every
    other row goes through them. Files with blank, odd and wrong prompts, answers, labels (in every spelling) and
    ``response`` cells read alike either way: the same rows kept, traces, frames, errors and notes."""
    rng = random.Random(60_000 + seed)
    header, rows = _csv(rng, rng.randint(10, 80), **_OPTIONS[seed % len(_OPTIONS)])
    with_response = seed % 3 == 0
    if with_response:  # a response cell beside trace cells is not used (the note counts such rows)
        header.append("response")
        for row in rows:
            row.append(rng.choice(["", " ", "{}", '{"choices": []}']))
    records = _records(rng, header, rows)
    for row, record in zip(rows, records, strict=True):
        for name, values in (("prompt", _PROMPTS), ("answer", _ANSWERS), ("label", _LABELS)):
            if rng.random() < 0.3:
                row[header.index(name)] = record[name] = rng.choice(values)
        if fmt == "jsonl" and rng.random() < 0.3:
            record["label"] = rng.choice(_JSON_LABELS)
        if fmt == "jsonl" and rng.random() < 0.1:
            del record[rng.choice(["prompt", "answer", "label"])]
        if fmt == "jsonl" and rng.random() < 0.05:
            record["prompt"] = rng.choice([None, 3, ["Q"]])
    data = _bytes(header, rows) if fmt == "csv" else _jsonl(records)
    with monkeypatch.context() as m:
        m.setattr(validate, "CHUNK_ROWS", rng.choice([1, 7, 256]))
        _same_either_lane(data, monkeypatch, fmt)
        _same_either_lane(data, monkeypatch, fmt, require_label=False)


def test_plain_rows_skip_the_per_row_checks(monkeypatch):
    """A file of plain rows is kept without one per-row check; a row with a spelling outside the common ones is
    checked on its own (and kept when valid)."""
    rng = random.Random(3)
    header, rows = _csv(rng, 40, **_OPTIONS[0])
    rows[5][header.index("label")] = "1.0"  # valid, but decided by parse_label
    checked: list[int] = []
    keep_row = validate.keep_row
    monkeypatch.setattr(validate, "keep_row", lambda kept, number, *args: (checked.append(number),
                                                                           keep_row(kept, number, *args)))
    ds = read_dataset(_bytes(header, rows), format="csv")
    assert len(ds.traces) == 40 and not ds.errors
    assert checked == [ds.frame[ds.row_column].iloc[5]]


@pytest.mark.parametrize("value", [*_LABELS, *_JSON_LABELS, np.int64(1), np.bool_(True), 1.0, "YES", "\tn\n",
                                   "１", "true\u00a0", 10, True, 0])
def test_common_label_is_parse_label_where_it_answers(value):
    from trace_core.data.labels import common_label, parse_label

    got = common_label(value)
    try:
        expected: int | None = parse_label(value)
    except ValueError:
        expected = None
    if got is not None:
        assert got == expected and type(got) is int
    if isinstance(value, str) and expected is not None and value.strip().lower() in ("0", "1", "yes", "true", "n"):
        assert got == expected  # the words are answered, not left to parse_label
