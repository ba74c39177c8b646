"""Spreadsheet-safe exports (issue 13, items 6 and 10): formulas behind blanks or invisible characters are
neutralised, real numbers are never changed, and a non-finite value never loses an export."""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pandas as pd
import pytest
from helpers import synthetic_trace_objects

from trace_core.calibration.calibrators import TracePlus
from trace_core.cli import main
from trace_core.data import export_flagged, read_dataset, sanitize_cell, write_dataset
from trace_core.traces.trace import Trace

HIDDEN_FORMULAS = [" =1+1", "  +cmd", "\u00a0=HYPERLINK(\"http://x\")", "\u200b=1+1", "\ufeff=1+1", "\n=1+1",
                   "\t=1+1", "\r=1+1", "\r\n@SUM(A1:A2)", "\u2028-2+3", "\u200e=1", "\u3000=1", "\u2800=1",
                   " \u200b\u00a0\n=1", "\u00a0\uff1d1"]
PLAIN_NUMBERS = ["-4.5", "+3", "1e-3", "-0.25", "-3", "0", "-.5", "7.", "+1E+5", "-1e-300"]
NOT_NUMBERS = ["-", "-inf", "-nan", "-1+1", "-0x1F", "-1,000", "+3 ", " -4.5", "-4.5\n", "－4", "-٣", "-1e", "--1"]


@pytest.mark.parametrize("value", HIDDEN_FORMULAS)
def test_formulas_behind_blanks_or_invisible_characters_are_neutralised(value):
    assert sanitize_cell(value) == "'" + value


@pytest.mark.parametrize("value", PLAIN_NUMBERS)
def test_a_string_that_is_a_plain_number_is_unchanged(value):
    assert sanitize_cell(value) == value


@pytest.mark.parametrize("value", NOT_NUMBERS)
def test_only_exact_plain_numbers_escape_the_rule(value):
    assert sanitize_cell(value) == "'" + value


@pytest.mark.parametrize("value", ["Paris", " Paris", "\u00a0", "  ", "", "a=b", "1+1", "e-3", "\u200bok", -3, 1.5,
                                   None, True])
def test_ordinary_values_are_unchanged(value):
    assert sanitize_cell(value) == value


def _read_csv(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))


def test_export_csv_neutralises_hidden_formulas_and_keeps_numbers():
    frame = pd.DataFrame({"text": HIDDEN_FORMULAS[:len(PLAIN_NUMBERS)], "number_text": PLAIN_NUMBERS,
                          "number": [-4.5, 3, 1e-3, -0.25, -3, 0, -0.5, 7.0, 1e5, -1e-300]})
    buffer = io.BytesIO()
    export_flagged(frame, buffer, format="csv")
    rows = _read_csv(buffer.getvalue())
    assert rows[0] == ["text", "number_text", "number"]
    assert [r[0] for r in rows[1:]] == ["'" + v for v in frame["text"]]
    assert [r[1] for r in rows[1:]] == PLAIN_NUMBERS  # "-4.5" is not "'-4.5"
    assert [float(r[2]) for r in rows[1:]] == frame["number"].tolist()


@pytest.mark.parametrize("sanitize", [None, True])
def test_export_jsonl_keeps_numbers_and_neutralises_hidden_formulas_when_asked(sanitize):
    frame = pd.DataFrame({"text": [" =1+1", "\u200b=1"], "number_text": ["-4.5", "+3"], "number": [-4.5, -3.0]})
    buffer = io.BytesIO()
    export_flagged(frame, buffer, format="jsonl", sanitize=sanitize)
    records = [json.loads(line) for line in buffer.getvalue().decode("utf-8").splitlines()]
    assert [r["number_text"] for r in records] == ["-4.5", "+3"]
    assert [r["number"] for r in records] == [-4.5, -3.0]
    expected = ["' =1+1", "'\u200b=1"] if sanitize else [" =1+1", "\u200b=1"]
    assert [r["text"] for r in records] == expected


def test_non_finite_values_never_lose_an_export():
    frame = pd.DataFrame({"answer": ["a", "b", "c", "d"], "value": [1.5, math.inf, -math.inf, math.nan],
                          "single": np.array([np.inf, 1, 2, 3], dtype=np.float32),
                          "scores": [[1.0, math.inf], [2.0], [-math.inf], [math.nan, 0.5]]})
    jsonl = io.BytesIO()
    export_flagged(frame, jsonl, format="jsonl")
    records = [json.loads(line) for line in jsonl.getvalue().decode("utf-8").splitlines()]
    assert len(records) == 4
    assert [r["value"] for r in records] == [1.5, None, None, None]
    assert [r["single"] for r in records] == [None, 1.0, 2.0, 3.0]
    assert [r["scores"] for r in records] == [[1.0, None], [2.0], [None], [None, 0.5]]
    text = io.BytesIO()
    export_flagged(frame, text, format="csv")
    rows = _read_csv(text.getvalue())
    assert len(rows) == 5
    assert [r[1] for r in rows[1:]] == ["1.5", "", "", ""]
    assert [r[2] for r in rows[1:]] == ["", "1.0", "2.0", "3.0"]
    assert [r[3] for r in rows[1:]] == ["[1.0,null]", "[2.0]", "[null]", "[null,0.5]"]
    assert b"inf" not in text.getvalue().lower() and b"nan" not in text.getvalue().lower()


# ------------------------------------------------------------------------------------------------------------------
# End to end: `trace-core flag` on a file with such cells
# ------------------------------------------------------------------------------------------------------------------

def _traces(n: int = 40) -> tuple[list[Trace], np.ndarray]:
    return synthetic_trace_objects(n, seed=5)


@pytest.fixture
def calibrator(tmp_path):
    traces, y = _traces()
    path = tmp_path / "cal.json"
    path.write_text(TracePlus().fit(traces, y).to_json(), encoding="utf-8")
    return path


def test_flag_keeps_numbers_of_a_csv_input_and_neutralises_hidden_formulas(tmp_path, calibrator):
    traces, y = _traces()
    notes = ["-4.5", "+3", "1e-3", "-0.25", " =1+1", "\u00a0=1+1", "\u200b=1+1", "\ufeff=1+1", "\n=1+1"]
    notes = (notes * 5)[:len(traces)]
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y,
                          "id": [f"id{i}" for i in range(len(notes))], "note": notes})
    data = tmp_path / "input.csv"
    write_dataset(frame, data, traces=traces)
    assert read_dataset(data).frame["note"].tolist() == notes  # string cells, as read from the CSV
    for suffix in (".csv", ".jsonl"):
        out = tmp_path / f"flagged{suffix}"
        assert main(["flag", str(data), "--calibrator", str(calibrator), "--threshold", "1.0", "--out", str(out),
                     "--quiet"]) == 0
        if suffix == ".csv":
            with out.open(newline="", encoding="utf-8") as f:
                got = {r["id"]: r["note"] for r in csv.DictReader(f)}
            expected = {f"id{i}": (v if v[0] in "-+1" else "'" + v) for i, v in enumerate(notes)}
        else:  # JSON Lines is for programs: values as they are
            got = {r["id"]: r["note"] for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
            expected = {f"id{i}": v for i, v in enumerate(notes)}
        assert got == expected


def test_flag_exports_every_row_when_a_value_is_infinite(tmp_path, calibrator):
    traces, y = _traces()
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y,
                          "extra": [1.0] * len(traces)})
    data = tmp_path / "input.jsonl"
    write_dataset(frame, data, traces=traces)
    lines = data.read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3].replace('"extra": 1.0', '"extra": 1e400')  # row 4: a huge value reads as inf
    assert "1e400" in lines[3]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "flagged.jsonl"
    assert main(["flag", str(data), "--calibrator", str(calibrator), "--threshold", "1.0", "--out", str(out),
                 "--quiet"]) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(records) == len(traces)
    assert sorted(r["extra"] for r in records if r["extra"] is not None) == [1.0] * (len(traces) - 1)
    assert [r["row"] for r in records if r["extra"] is None] == [4]
    out = tmp_path / "flagged.csv"
    assert main(["flag", str(data), "--calibrator", str(calibrator), "--threshold", "1.0", "--out", str(out),
                 "--quiet"]) == 0
    with out.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(traces)
    assert [r["row"] for r in rows if r["extra"] == ""] == ["4"] and "inf" not in out.read_text().lower()
