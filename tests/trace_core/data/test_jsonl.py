"""Reading JSON Lines and CSV as streams: lines end at "\\n" only, rows keep their file line numbers, progress."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import numpy as np
import pytest

from trace_core.data import DatasetError, read_dataset, write_dataset

pytestmark = pytest.mark.filterwarnings("ignore::trace_core.data.DatasetWarning")  # rejected rows are expected

BAD = Path(__file__).resolve().parents[2] / "data" / "bad"
_spec = importlib.util.spec_from_file_location("make_bad", BAD / "make_bad.py")
assert _spec is not None and _spec.loader is not None
make_bad = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_bad)


def upload(data: bytes, name: str) -> io.BytesIO:
    buffer = io.BytesIO(data)
    buffer.name = name
    return buffer


def record(i: int, text: str = "", **extra) -> dict:
    return {"prompt": f"Q{i}{text}", "answer": f"a{i}{text}", "label": i % 2, "tokens": [f"a{i}", text],
            "surprisal": [0.1, 0.2], "entropy": [0.3, 0.4], **extra}


# --------------------------------------------------------------------------------------------------
# Item 8: JSON Lines records end at "\n" only
# --------------------------------------------------------------------------------------------------

def test_every_line_separator_inside_strings_keeps_rows_and_line_numbers():
    data = make_bad.line_separators()
    ds = read_dataset(upload(data, "line_separators.jsonl"))
    n_lines = data.count(b"\n")
    bad = {line for line, _ in make_bad.LINE_SEPARATOR_ERRORS}
    assert ds.n_read == n_lines == 14 and ds.n_valid == 12
    assert ds.frame["row"].tolist() == [n for n in range(1, n_lines + 1) if n not in bad]
    assert [(e.row, e.field) for e in ds.errors] == list(make_bad.LINE_SEPARATOR_ERRORS)
    assert ds.errors[0].message == "not valid JSON (Expecting value at column 32)"  # the column on its own line
    for i, sep in enumerate(make_bad.LINE_SEPARATORS, start=2):  # each character read back raw, where it was
        assert sep in ds.frame["prompt"].iloc[i - 1] and ds.traces[i - 1].tokens[0].endswith(sep)
        assert ds.frame["prompt"].iloc[i - 1].startswith(f"Q{i}:")
    assert [t.answer for t in ds.traces] == ds.frame["answer"].tolist()


@pytest.mark.parametrize("sep", make_bad.LINE_SEPARATORS)
def test_one_separator_in_the_middle_of_a_file(sep):
    lines = [json.dumps(record(1)), json.dumps(record(2, f"x{sep}y"), ensure_ascii=False),
             json.dumps(record(3)), "{broken", json.dumps(record(5))]
    lines[1] = lines[1].replace(json.dumps(sep)[1:-1], sep)  # raw, also for control characters
    assert sep in lines[1]
    ds = read_dataset(upload(("\n".join(lines) + "\n").encode(), "x.jsonl"))
    assert ds.frame["row"].tolist() == [1, 2, 3, 5] and ds.frame["prompt"].iloc[1] == f"Q2x{sep}y"
    assert [(e.row, e.message[:14]) for e in ds.errors] == [(4, "not valid JSON")]


def test_crlf_endings_and_blank_lines_are_counted_as_lines():
    lines = [json.dumps(record(i)) for i in range(1, 4)]
    text = f"{lines[0]}\r\n\r\n  \r\n{lines[1]}\r\n{{oops\r\n{lines[2]}"  # no ending on the last line
    ds = read_dataset(upload(text.encode(), "x.jsonl"))
    assert ds.n_read == 4 and ds.frame["row"].tolist() == [1, 4, 6]
    assert [(e.row, e.message) for e in ds.errors] == [(5, "not valid JSON (Expecting property name enclosed in "
                                                           "double quotes at column 2)")]
    assert ds.frame["prompt"].tolist() == ["Q1", "Q2", "Q3"]  # no "\r" left anywhere
    assert ds.traces[2].tokens == ("a3", "")


def test_a_lone_carriage_return_inside_a_string_is_kept():
    text = json.dumps(record(1, "x\ry")).replace("\\r", "\r") + "\n" + json.dumps(record(2)) + "\n"
    ds = read_dataset(upload(text.encode(), "x.jsonl"))
    assert ds.frame["row"].tolist() == [1, 2] and ds.frame["prompt"].iloc[0] == "Q1x\ry"


def test_not_utf8_names_the_byte_offset_and_line_of_a_later_line():
    good = (json.dumps(record(1)) + "\n").encode()
    data = good + good + b'{"prompt": "caf\xe9"}\n'
    with pytest.raises(DatasetError, match=rf"byte 0xe9 at offset {2 * len(good) + 15} \(line 3\)"):
        read_dataset(upload(data, "x.jsonl"))
    with pytest.raises(DatasetError, match=r"byte 0xe9 at offset 18 \(line 1\)"):  # the BOM is counted
        read_dataset(upload(b'\xef\xbb\xbf{"prompt": "caf\xe9"}\n', "x.jsonl"))


def test_json_array_file_is_still_read_whole():
    items = [record(1), record(2, "\u2028"), 7]
    ds = read_dataset(upload(("\n\n" + json.dumps(items, ensure_ascii=False, indent=1)).encode(), "x.json"))
    assert ds.frame["row"].tolist() == [1, 2] and [e.row for e in ds.errors] == [3]
    with pytest.raises(DatasetError, match=r"not valid JSON \(Extra data at line 4, column 2\)"):
        read_dataset(upload(b"\n\n[\n]x", "x.json").getvalue(), format="jsonl")


# --------------------------------------------------------------------------------------------------
# The same class of bug in CSV: the csv module's newline='' rules, never str.splitlines
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sep", make_bad.LINE_SEPARATORS)
def test_csv_fields_may_hold_line_separators(sep):
    text = (f"prompt,answer,label\nQ1,a{sep}b,1\n\"Q2{sep}\",\"x{sep}y\",0\nQ3,c,maybe\r\nQ4,d,1\rQ5,e,0\n"
            f"\"Q6\nstill Q6\",f,1\nQ7,g,0\n")
    ds = read_dataset(upload(text.encode(), "x.csv"))
    assert ds.frame["prompt"].tolist() == ["Q1", f"Q2{sep}", "Q4", "Q5", "Q6\nstill Q6", "Q7"]
    assert ds.frame["answer"].tolist()[:2] == [f"a{sep}b", f"x{sep}y"]
    assert ds.frame["row"].tolist() == [1, 2, 4, 5, 6, 7] and [e.row for e in ds.errors] == [3]


def test_csv_unclosed_quote_still_names_the_lines_it_swallowed():
    ds = read_dataset(upload(b'prompt,answer,label\nQ1,a,1\nQ2,"oops\xe2\x80\xa8,0\nQ3,b,1\nQ4,c,0\n', "x.csv"))
    assert ds.n_read == 2 and "runs from line 3 to line 5 of the file" in ds.errors[0].message


# --------------------------------------------------------------------------------------------------
# Item 9: streaming keeps what the dataset needs; the values are those of a whole-file read
# --------------------------------------------------------------------------------------------------

def test_frame_keeps_non_trace_columns_and_traces_hold_the_rest(tmp_path):
    rows = [record(i, extra="x", top_logprobs=[[-0.1, -3.0], [-0.2, -3.0]], top_tokens=[["a", "b"], ["c", "a"]])
            for i in range(1, 4)]
    ds = read_dataset(upload("\n".join(json.dumps(r) for r in rows).encode(), "x.jsonl"))
    assert list(ds.frame.columns) == ["prompt", "answer", "label", "extra", "row"]
    assert ds.traces[0].top_tokens == (("a", "b"), ("c", "a"))
    assert ds.traces[0].top_tokens[0][0] is ds.traces[2].top_tokens[1][1]  # one object per distinct token text
    np.testing.assert_array_equal(ds.traces[1].top_logprobs, [[-0.1, -3.0], [-0.2, -3.0]])
    out = tmp_path / "again.jsonl"  # the trace columns are written back from the traces
    write_dataset(ds.frame, out, traces=ds.traces)
    back = read_dataset(out)
    assert back.frame.equals(ds.frame) and back.traces[2].top_tokens == ds.traces[2].top_tokens


def test_a_later_record_that_changes_the_rules_is_read_again():
    # Records 1-2 have no `label` (the reference would label them); record 3 brings one: the file has a label
    # column, so records 1-2 are rejected for a missing label, exactly as when the columns are known up front.
    rows = [{"prompt": "Q1", "answer": "4", "reference": "4"}, {"prompt": "Q2", "answer": "5", "reference": "4"},
            {"prompt": "Q3", "answer": "6", "label": 1}]
    calls: list[tuple[int, int | None]] = []
    data = "\n".join(json.dumps(r) for r in rows).encode()
    ds = read_dataset(upload(data, "x.jsonl"), progress=lambda d, t: calls.append((d, t)))
    assert ds.label_source == "label" and ds.frame["row"].tolist() == [3]
    assert [(e.row, e.field) for e in ds.errors] == [(1, "label"), (2, "label")]
    assert calls[-1] == (len(data), len(data)) and calls == sorted(set(calls))  # still monotone over two passes
    assert read_dataset(upload(data[:data.rindex(b"\n")], "x.jsonl")).label_source == "reference:exact"


@pytest.mark.parametrize("name", ["x.jsonl", "x.csv", "x.parquet"])
def test_values_match_a_whole_file_read(tmp_path, name):
    rows = [record(i, extra=str(i), top_logprobs=[[-0.1, -2.5], [-1e-3, -7.0]], top_tokens=[["x", "y"], ["z", "y"]])
            for i in range(1, 6)]
    path = tmp_path / name
    import pandas as pd

    write_dataset(pd.DataFrame([{k: v for k, v in r.items() if k in ("prompt", "answer", "label", "extra")}
                                for r in rows]), path, traces=read_dataset(upload(
                                    "\n".join(json.dumps(r) for r in rows).encode(), "r.jsonl")).traces)
    ds = read_dataset(path)
    assert ds.frame["prompt"].tolist() == [r["prompt"] for r in rows] and ds.frame["row"].tolist() == [1, 2, 3, 4, 5]
    for trace, r in zip(ds.traces, rows, strict=True):
        assert list(trace.tokens) == r["tokens"] and trace.surprisal.tolist() == r["surprisal"]
        assert trace.top_logprobs.tolist() == r["top_logprobs"]


# --------------------------------------------------------------------------------------------------
# progress=
# --------------------------------------------------------------------------------------------------

def _lines_file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "big.jsonl"
    long = "w" * 3000  # about 3 KB a row, so the file spans a few MiB and progress is reported several times
    path.write_text("\n".join(json.dumps(record(i, long)) for i in range(1, n + 1)) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["path", "bytes", "buffer", "csv"])
def test_progress_is_called_monotone_up_to_the_size(tmp_path, kind):
    path = _lines_file(tmp_path, 1500)
    source: object = path
    if kind == "bytes":
        source = path.read_bytes()
    elif kind == "buffer":
        source = upload(path.read_bytes(), "big.jsonl")
    elif kind == "csv":
        source = tmp_path / "big.csv"
        write_dataset(read_dataset(path).frame, source, traces=read_dataset(path).traces)
    size = Path(source).stat().st_size if isinstance(source, Path) else path.stat().st_size
    calls: list[tuple[int, int | None]] = []
    ds = read_dataset(source, format="jsonl" if kind == "bytes" else None,
                      progress=lambda done, total: calls.append((done, total)))
    assert ds.n_valid == 1500
    assert len(calls) >= 3 and calls[-1] == (size, size)
    assert all(total == size for _, total in calls)
    assert all(a[0] < b[0] for a, b in zip(calls, calls[1:], strict=False))


def test_progress_of_a_stream_that_cannot_seek_and_of_parquet(tmp_path):
    class Pipe(io.RawIOBase):  # readable, not seekable: like a pipe
        def __init__(self, data: bytes) -> None:
            self.inner, self.name = io.BytesIO(data), "pipe.jsonl"

        def readable(self) -> bool:
            return True

        def readinto(self, b) -> int:  # type: ignore[override]
            chunk = self.inner.read(len(b))
            b[:len(chunk)] = chunk
            return len(chunk)

    data = "\n".join(json.dumps(record(i)) for i in range(1, 4)).encode()
    calls: list[tuple[int, int | None]] = []
    assert read_dataset(Pipe(data), progress=lambda d, t: calls.append((d, t))).n_valid == 3
    assert calls[-1] == (len(data), len(data))  # read whole first (it cannot be read twice): the size is known
    path = tmp_path / "x.parquet"
    ds = read_dataset(upload(data, "x.jsonl"))
    write_dataset(ds.frame, path, traces=ds.traces)
    calls.clear()
    assert read_dataset(path, progress=lambda d, t: calls.append((d, t))).n_valid == 3
    size = path.stat().st_size
    assert calls[-1] == (size, size)  # Parquet: bytes in proportion to the rows read


def test_progress_must_be_callable():
    with pytest.raises(TypeError, match="`progress` must be a callable or None, got int"):
        read_dataset(b"prompt,answer,label\nQ,A,1\n", format="csv", progress=3)  # type: ignore[arg-type]
