"""Write the bad-input corpus used by tests/hostile/test_bad_inputs.py (what each file is: README.md here).

    python tests/data/bad/make_bad.py                  # rewrite the small files next to this script
    python tests/data/bad/make_bad.py --large DIR      # write the large files into DIR (never commit them)
        [--rows 1000000] [--limit-mb 200]

The small files are committed; running the script again reproduces them byte for byte (a test checks it). The
large ones (a 1M-row CSV, a CSV just over a size limit) are made on demand, by the tests into a temporary folder.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import random
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADER = ["prompt", "answer", "label", "tokens", "surprisal", "entropy"]
PLAIN_HEADER = ["prompt", "answer", "label"]
MILLION_BAD_EVERY = 100_000  # every this-th row of the 1M-row file has a bad label


def good_row(i: int) -> list[str]:
    """Row number ``i`` (1-based) of a valid dataset with a trace; labels alternate 1, 0, 1, ..."""
    n = 1 + i % 3
    tokens = [f" w{i}_{j}" for j in range(n)]
    surprisal = [round(0.1 * (i % 7 + j + 1), 3) for j in range(n)]
    entropy = [round(0.2 * (i % 5 + j + 1), 3) for j in range(n)]
    return [f"Q{i}: what is {i} + {i}?", "".join(tokens), str(i % 2), json.dumps(tokens), json.dumps(surprisal),
            json.dumps(entropy)]


def _csv(rows: list[list[str]], delimiter: str = ",") -> bytes:
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator="\n").writerows(rows)
    return out.getvalue().encode("utf-8")


def _replace(rows: list[list[str]], row: int, column: str, value: str) -> None:
    rows[row][HEADER.index(column)] = value  # rows[0] is the header, so data row r is rows[r]


def bad_labels() -> bytes:
    rows = [HEADER] + [good_row(i) for i in range(1, 13)]
    for r, word in ((1, "yes"), (2, "incorrect"), (4, "False"), (5, "Correct")):  # accepted spellings
        _replace(rows, r, "label", word)
    for r, value in ((3, "maybe"), (6, "2"), (9, "")):
        _replace(rows, r, "label", value)
    return _csv(rows)


def nan_inf_trace() -> bytes:
    rows = [HEADER] + [good_row(i) for i in range(1, 11)]
    _replace(rows, 2, "surprisal", "[0.1, NaN, 0.3]")
    _replace(rows, 5, "entropy", "[Infinity, 0.2, 0.3]")
    _replace(rows, 8, "surprisal", "[0.1, 0.2, 1e999]")  # overflows to inf when parsed
    return _csv(rows)


def mismatched_lengths() -> bytes:
    rows = [HEADER] + [good_row(i) for i in range(1, 11)]
    _replace(rows, 3, "surprisal", "[0.1, 0.2]")  # row 3 has 1 token
    _replace(rows, 7, "entropy", "[0.1, 0.2, 0.3]")  # row 7 has 2 tokens
    return _csv(rows)


def malformed_json() -> bytes:
    rows = [HEADER] + [good_row(i) for i in range(1, 11)]
    _replace(rows, 2, "surprisal", "[0.1, 0.2")
    _replace(rows, 4, "tokens", "[' w4_0', ' w4_1', ' w4_2']")  # a Python repr, not JSON
    _replace(rows, 6, "entropy", "0.5")  # a number, not a list
    return _csv(rows)


def ragged_rows() -> bytes:
    rows = [HEADER] + [good_row(i) for i in range(1, 11)]
    rows[2] = rows[2] + ["stray"]
    rows[5] = rows[5][:-1]
    return _csv(rows)


def empty_answers() -> bytes:
    rows = [HEADER] + [good_row(i) for i in range(1, 11)]
    for r in (4, 7):
        rows[r][1:] = ["", rows[r][2], "[]", "[]", "[]"]
    _replace(rows, 2, "label", "maybe")  # a rejected row first: empty answers must be named by file row
    return _csv(rows)


def all_answers_empty() -> bytes:
    return _csv([HEADER] + [[f"Q{i}: say nothing", "", str(i % 2), "[]", "[]", "[]"] for i in (1, 2)])


def malformed_lines() -> bytes:
    def line(i: int) -> str:
        row = dict(zip(HEADER, good_row(i), strict=True))
        for name in ("tokens", "surprisal", "entropy"):
            row[name] = json.loads(row[name])
        row["label"] = int(row["label"])
        return json.dumps(row)

    lines = [line(1), '{"prompt": "Q2", "answer": "x", "label": 1', "[1, 2, 3]", line(4), line(5), line(6)]
    return ("\n".join(lines) + "\n").encode("utf-8")


#: Characters that ``str.splitlines`` treats as line breaks but JSON Lines does not (lines end at "\n" only).
LINE_SEPARATORS = ("\u2028", "\u2029", "\u0085", "\u000b", "\u000c", "\u001c", "\u001d", "\u001e")
#: (line, column) of the problems in :func:`line_separators`: a broken line after every separator-holding record.
LINE_SEPARATOR_ERRORS = ((len(LINE_SEPARATORS) + 3, ""), (len(LINE_SEPARATORS) + 5, "label"))


def line_separators() -> bytes:
    """JSON Lines whose records 2..9 hold each of :data:`LINE_SEPARATORS` raw (not escaped) inside their prompt,
    answer and token strings; line 11 is broken JSON, line 13 has a bad label, the others are valid (12 of 14 kept).
    A reader that splits on those characters loses rows 2..9 and numbers every later line wrong. (Raw U+000B,
    U+000C and U+001C-U+001E are control characters, which strict JSON forbids inside strings; the reader accepts
    them, as many writers emit them.)"""
    def record(i: int, sep: str = "") -> str:
        row = dict(zip(HEADER, good_row(i), strict=True))
        for name in ("tokens", "surprisal", "entropy"):
            row[name] = json.loads(row[name])
        row["tokens"][0] = row["tokens"][0] + sep
        row["answer"] = "".join(row["tokens"])
        row["prompt"] = f"{row['prompt']} {sep}(U+{ord(sep):04X}){sep}" if sep else row["prompt"]
        row["label"] = int(row["label"])
        text = json.dumps(row, ensure_ascii=False)  # ensure_ascii=False keeps U+2028, U+2029 and U+0085 raw
        return text.replace(json.dumps(sep)[1:-1], sep) if sep else text  # and control characters raw too

    lines = [record(1)] + [record(i, sep) for i, sep in enumerate(LINE_SEPARATORS, start=2)]
    n = len(lines)
    lines += [record(n + 1), '{"prompt": "broken", "answer": ', record(n + 3),
              record(n + 4).replace('"label": 0', '"label": "maybe"').replace('"label": 1', '"label": "maybe"'),
              record(n + 5)]
    return ("\n".join(lines) + "\n").encode("utf-8")


#: JSON Lines cases written on demand (by the tests, into a temporary folder); not committed, not in SMALL.
ON_DEMAND: dict[str, Callable[[], bytes]] = {"line_separators.jsonl": line_separators}


def binary_garbage() -> bytes:
    data = bytearray(random.Random(0).randbytes(512))
    data[100] = 0  # binary files hold NUL bytes; make sure this one does
    return bytes(data)


SMALL: dict[str, Callable[[], bytes]] = {
    "empty.csv": lambda: b"",
    "whitespace_only.csv": lambda: b"\n   \n\t\n",
    "header_only.csv": lambda: _csv([HEADER]),
    "missing_columns.csv": lambda: _csv([["question", "reply", "label"], ["Q1", "a", "1"], ["Q2", "b", "0"]]),
    "no_label_column.csv": lambda: _csv([["prompt", "answer"], ["Q1", "a"], ["Q2", "b"]]),
    "semicolon_delimiter.csv": lambda: _csv([HEADER] + [good_row(i) for i in range(1, 9)], delimiter=";"),
    "colon_delimiter.csv": lambda: b"prompt:answer:label\nQ1:a:1\nQ2:b:0\n",
    "latin1_bytes.csv": lambda: "prompt,answer,label\nWho painted it?,C\u00e9zanne,1\nAnd this?,Monet,0\n".encode(
        "latin-1"),
    "binary_garbage.csv": binary_garbage,
    "xlsx_renamed.csv": lambda: b"PK\x03\x04\x14\x00\x06\x00" + bytes(range(1, 200)),
    "not_parquet.parquet": lambda: _csv([PLAIN_HEADER, ["Q1", "a", "1"]]),
    "bad_labels.csv": bad_labels,
    "nan_inf_trace.csv": nan_inf_trace,
    "mismatched_lengths.csv": mismatched_lengths,
    "malformed_json.csv": malformed_json,
    "malformed_lines.jsonl": malformed_lines,
    # Every prompt holds half of a surrogate pair (JSON allows the escape, Unicode has no such character).
    "lone_surrogates.jsonl": lambda: "".join(f'{{"prompt": "Q{i} \\ud800", "answer": "a", "label": {i % 2}}}\n'
                                             for i in range(1, 4)).encode(),
    "duplicate_columns.csv": lambda: _csv([["prompt", "answer", "label", "Label"], ["Q1", "a", "1", "0"],
                                           ["Q2", "b", "0", "1"]]),
    "ragged_rows.csv": ragged_rows,
    "unclosed_quote.csv": lambda: b'prompt,answer,label\nQ1,a,1\nQ2,"oops,0\nQ3,b,1\nQ4,c,0\n',
    "empty_answers.csv": empty_answers,
    "all_answers_empty.csv": all_answers_empty,
    "one_class.csv": lambda: _csv([HEADER] + [good_row(i)[:2] + ["1"] + good_row(i)[3:] for i in range(1, 7)]),
    "single_row.csv": lambda: _csv([HEADER, good_row(1)]),
}


def write_small(folder: Path = HERE) -> list[Path]:
    paths = []
    for name, make in SMALL.items():
        path = folder / name
        path.write_bytes(make())
        paths.append(path)
    return paths


def write_million_rows(path: Path, n_rows: int = 1_000_000) -> Path:
    """A plain CSV (no traces) with ``n_rows`` rows; every MILLION_BAD_EVERY-th row has the label 'maybe'."""
    with path.open("w", encoding="utf-8", newline="") as f:
        f.write("prompt,answer,label\n")
        step = 50_000  # written in chunks: fast, and memory stays small
        for start in range(1, n_rows + 1, step):
            f.write("".join(f"Q{i},a{i},{'maybe' if i % MILLION_BAD_EVERY == 0 else i % 2}\n"
                            for i in range(start, min(start + step, n_rows + 1))))
    return path


def write_oversize(path: Path, limit_bytes: int) -> Path:
    """A valid CSV with traces just over ``limit_bytes`` bytes: its only problem is its size."""
    out = [_csv([HEADER])]
    size, i = len(out[0]), 0
    while size <= limit_bytes:
        i += 1
        out.append(_csv([good_row(i)]))
        size += len(out[-1])
    path.write_bytes(b"".join(out))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--large", type=Path, help="write million_rows.csv and oversize.csv into this folder")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--limit-mb", type=int, default=200, help="oversize.csv is just over this many MiB")
    args = parser.parse_args()
    if args.large is None:
        for path in write_small():
            print(path.name)
    else:
        args.large.mkdir(parents=True, exist_ok=True)
        print(write_million_rows(args.large / "million_rows.csv", args.rows))
        print(write_oversize(args.large / "oversize.csv", args.limit_mb * 2**20))


if __name__ == "__main__":
    main()
