from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trace_core import Trace, TraceMetadata
from trace_core.data import (
    MATCHERS,
    DatasetError,
    DatasetWarning,
    LabeledDataset,
    RowError,
    entropy_from_top_k,
    export_flagged,
    label_from_reference,
    normalize_answer,
    parse_label,
    read_dataset,
    sanitize_cell,
    trace_from_openai,
    traces_to_columns,
    write_dataset,
)

DATA = Path(__file__).resolve().parents[2] / "data"


def as_upload(data: bytes | str, name: str) -> io.BytesIO:
    """What Streamlit hands over: a BytesIO with a name."""
    buffer = io.BytesIO(data.encode("utf-8") if isinstance(data, str) else data)
    buffer.name = name
    return buffer


def read_text(text: str, name: str = "data.csv", **kwargs) -> LabeledDataset:
    return read_dataset(as_upload(text, name), **kwargs)


def read_with_rejects(text: str, name: str = "data.csv", **kwargs) -> LabeledDataset:
    with pytest.warns(DatasetWarning, match="rejected"):
        return read_text(text, name, **kwargs)


def csv_of(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(dict.fromkeys(k for r in rows for k in r)), restval="")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def hand_entropy(logprobs: list[float]) -> float:
    """Top-k entropy with the rest of the mass as one bucket, written out with the math module."""
    probs = [math.exp(lp) for lp in logprobs]
    rest = max(0.0, 1.0 - sum(probs))
    return -sum(p * lp for p, lp in zip(probs, logprobs, strict=True)) - (rest * math.log(rest) if rest > 0 else 0.0)


def rich_traces() -> list[Trace]:
    """Traces with awkward floats, unicode, top tokens, ranks and metadata: everything a round trip must keep."""
    a = Trace(prompt="Q: capital of France?", answer=" Paris 🙂", token_ids=[5, 9, 2], tokens=(" Par", "is", " 🙂"),
              surprisal=[0.1 + 0.2, 1 / 3, 1e-300], entropy=[2.0 / 3, 0.0, 12.345678901234567],
              top_ids=[[5, 7], [9, 1], [2, 3]], top_logprobs=[[-0.30000000000000004, -1.5], [-1 / 3, -2.0],
                                                              [-1e-300, -40.0]],
              ranks=[1, 1, 1],
              metadata=TraceMetadata(model_id="demo", source="generate", decoding={"max_new_tokens": 8},
                                     tokenizer="demo", extra={"note": "é"}))
    b = Trace(prompt="Q: 2+2?", answer=" 4", token_ids=[-1], tokens=(" 4",), surprisal=[0.5], entropy=[0.7],
              top_ids=[[-1, -1]], top_logprobs=[[-0.5, -1.0]], top_tokens=((" 4", " four"),),
              metadata=TraceMetadata(source="imported", entropy_source="top_k", entropy_k=2))
    c = Trace(prompt="Q: say nothing", answer="", token_ids=[], tokens=(), surprisal=[], entropy=[],
              top_ids=[], top_logprobs=[], metadata=TraceMetadata(source="teacher_forced"))
    return [a, b, c]


def base_frame(traces: list[Trace]) -> pd.DataFrame:
    return pd.DataFrame({"id": [f"q{i}" for i in range(len(traces))],
                         "prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces],
                         "label": [1, 0, 1][:len(traces)], "note": ["NA", "", "-3"][:len(traces)]})


# --------------------------------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (1, 1), (0, 0), (1.0, 1), (0.0, 0), (True, 1), (False, 0), (np.int64(1), 1), (np.bool_(False), 0),
    ("1", 1), ("0", 0), ("1.0", 1), ("0.0", 0), ("true", 1), ("FALSE", 0), (" Yes ", 1), ("no", 0),
    ("Correct", 1), ("INCORRECT", 0), ("y", 1), ("N", 0), ("t", 1), ("f", 0),
])
def test_parse_label_accepts_every_documented_spelling(value, expected):
    assert parse_label(value) == expected


@pytest.mark.parametrize("value, match", [
    ("maybe", r"^'maybe' is not one of 0/1, true/false, yes/no, correct/incorrect$"),
    (2, "2 is not one of"), (0.5, "0.5 is not one of"), ("", "is missing"), (None, "is missing"),
    (float("nan"), "is missing"), ("x" * 200, r"'x{50}'\.\.\. is not one of"),
])
def test_parse_label_rejects_with_the_row_error_message(value, match):
    with pytest.raises(ValueError, match=match):
        parse_label(value)


def test_every_label_spelling_is_read_from_a_csv():
    spellings = {"1": 1, "0": 0, "1.0": 1, "0.0": 0, "true": 1, "False": 0, "YES": 1, " no ": 0,
                 "correct": 1, "Incorrect": 0, "y": 1, "n": 0, "T": 1, "f": 0}
    text = csv_of([{"prompt": f"p{i}", "answer": "a", "label": s} for i, s in enumerate(spellings)])
    ds = read_text(text)
    assert ds.frame["label"].tolist() == list(spellings.values())
    assert ds.frame["label"].dtype == np.int64 and ds.label_source == "label" and ds.n_rejected == 0


def test_bad_label_is_reported_with_its_row_and_the_other_rows_are_kept():
    text = "prompt,answer,label\np1,a,1\np2,b,maybe\np3,c,0\np4,d,\n"
    ds = read_with_rejects(text)
    assert ds.n_read == 4 and ds.n_valid == 2 and ds.n_rejected == 2
    assert ds.frame["prompt"].tolist() == ["p1", "p3"] and ds.frame["row"].tolist() == [1, 3]
    assert [str(e) for e in ds.errors] == [
        "row 2: label: 'maybe' is not one of 0/1, true/false, yes/no, correct/incorrect",
        "row 4: label: is missing; expected one of 0/1, true/false, yes/no, correct/incorrect"]
    assert ds.summary().startswith("4 rows read: 2 kept, 2 rejected (row 2: label: 'maybe'")


def test_row_error_str_and_summary_of_many_errors():
    assert str(RowError(0, "", "the file is empty")) == "file: the file is empty"
    assert str(RowError(3, "prompt", "is empty")) == "row 3: prompt: is empty"
    ds = LabeledDataset(frame=pd.DataFrame({"a": [1]}), traces=[None], errors=[RowError(i, "x", "bad")
                                                                              for i in range(2, 7)],
                        n_read=1006, label_source="label")
    assert ds.summary() == ("1,006 rows read: 1 kept, 1,005 rejected (row 2: x: bad; row 3: x: bad; row 4: x: bad; "
                            "and 2 more)")
    assert not ds.has_traces


# --------------------------------------------------------------------------------------------------
# Matchers
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("answer, reference, matcher, expected", [
    ("The Eiffel Tower", "eiffel tower", "exact", 1),
    ("  the eiffel, TOWER!", "Eiffel Tower", "exact", 1),
    ("Ｐａｒｉｓ", "paris", "exact", 1),  # NFKC: full-width letters
    ("Eiffel", "Eiffel Tower", "exact", 0),
    ("It is the Eiffel Tower, in Paris.", "Eiffel Tower", "contains", 1),
    ("A Parisian cafe", "Paris", "contains", 0),  # word boundaries
    ("Paris", "Paris, France", "contains", 0),
    ("The answer is 1,234.", "1234", "numeric", 1),
    ("1234", "1,234", "numeric", 1),
    ("It went from 12 to -3.5 degrees", "-3.5", "numeric", 1),
    ("pages 2-3", "3", "numeric", 1),  # a hyphen after a digit is not a sign
    ("about 12, maybe 13", "12", "numeric", 0),  # the LAST number counts
    ("I do not know", "5", "numeric", 0),
    ("x = 2.5e3", "2500", "numeric", 1),
    ("Barack Obama", "Obama", "f1", 1),  # F1 = 2/3
    ("the president Barack Hussein Obama II", "Barack Obama", "f1", 1),  # F1 = 4/7
    ("Michelle", "Barack Obama", "f1", 0),
    ("Paris", "London || Paris", "exact", 1),
    ("Lyon", ["London", "Paris"], "exact", 0),
])
def test_matchers_on_hand_examples(answer, reference, matcher, expected):
    assert label_from_reference(answer, reference, matcher=matcher) == expected


def test_numeric_tolerance_and_f1_threshold():
    assert label_from_reference("pi is 3.1416", "3.14159", matcher="numeric") == 0
    assert label_from_reference("pi is 3.1416", "3.14159", matcher="numeric", tolerance=1e-3) == 1
    answer = "the president Barack Hussein Obama II"  # F1 4/7 = 0.571
    assert label_from_reference(answer, "Barack Obama", matcher="f1", f1_threshold=0.57) == 1
    assert label_from_reference(answer, "Barack Obama", matcher="f1", f1_threshold=0.6) == 0


@pytest.mark.parametrize("reference, matcher, match", [
    ("forty-two", "numeric", "'forty-two' is not a number"),
    ("The", "contains", "is empty after normalisation"),
    ("...", "contains", "is empty after normalisation"),
])
def test_unusable_references_raise(reference, matcher, match):
    with pytest.raises(ValueError, match=match):
        label_from_reference("42", reference, matcher=matcher)


def test_matcher_options_are_validated():
    assert MATCHERS == ("exact", "contains", "claim", "numeric", "f1")
    with pytest.raises(ValueError, match="`matcher` must be one of"):
        label_from_reference("a", "a", matcher="fuzzy")
    with pytest.raises(ValueError, match=r"`f1_threshold` must be .*\[0, 1\].*got 1\.5"):
        label_from_reference("a", "a", matcher="f1", f1_threshold=1.5)
    with pytest.raises(TypeError, match="`tolerance` must be a .*real number"):  # wrong type: TypeError
        label_from_reference("1", "1", matcher="numeric", tolerance="0.1")
    with pytest.raises(ValueError, match="`matcher` must be one of"):
        read_text("prompt,answer,reference\np,a,a\n", matcher="regex")


def test_normalize_answer():
    assert normalize_answer("  The  Quick, brown fox — an ANIMAL!  ") == "quick brown fox animal"


def test_reference_column_labels_rows_and_bad_references_are_row_errors():
    text = csv_of([{"prompt": "p1", "answer": "The answer is 1,234.", "reference": "1234"},
                   {"prompt": "p2", "answer": "It is 7", "reference": "8"},
                   {"prompt": "p3", "answer": "It is 7", "reference": "seven"},
                   {"prompt": "p4", "answer": "It is 7", "reference": ""}])
    ds = read_with_rejects(text, matcher="numeric")
    assert ds.label_source == "reference:numeric"
    assert ds.frame["label"].tolist() == [1, 0] and ds.frame["reference"].tolist() == ["1234", "8"]
    assert [(e.row, e.field) for e in ds.errors] == [(3, "reference"), (4, "reference")]
    assert "'seven' is not a number" in ds.errors[0].message


def test_label_column_wins_over_reference():
    ds = read_text("prompt,answer,label,reference\np,Paris,0,Paris\n")
    assert ds.label_source == "label" and ds.frame["label"].tolist() == [0]
    assert ds.frame["reference"].tolist() == ["Paris"]


def test_without_label_or_reference():
    with pytest.raises(DatasetError, match="needs a `label` column .* or a `reference` column"):
        read_text("prompt,answer\np,a\n")
    ds = read_text("prompt,answer\np,a\n", require_label=False)
    assert ds.label_source == "none" and "label" not in ds.frame.columns
    with pytest.raises(ValueError, match="no labels"):
        _ = ds.labels


# --------------------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
@pytest.mark.parametrize("with_traces", [True, False])
def test_write_then_read_round_trips(tmp_path, fmt, with_traces):
    traces = rich_traces()
    frame = base_frame(traces)
    path = tmp_path / f"data.{fmt}"
    write_dataset(frame, path, traces=traces if with_traces else None)
    first = read_dataset(path)
    assert first.n_read == 3 and first.n_rejected == 0 and first.label_source == "label"
    assert first.frame["prompt"].tolist() == frame["prompt"].tolist()
    assert first.frame["answer"].tolist() == frame["answer"].tolist()
    assert first.frame["note"].tolist() == ["NA", "", "-3"]  # "NA" is text, not a missing value
    assert first.labels.tolist() == [1, 0, 1] and first.frame["row"].tolist() == [1, 2, 3]
    if with_traces:
        assert first.has_traces
        for got, want in zip(first.traces, traces, strict=True):
            assert got == want  # every array bit for bit, tokens, top tokens, ranks and metadata
    else:
        assert first.traces == [None, None, None] and not first.has_traces
    # Writing what was read gives the same file contents back, frame and traces alike.
    buffer = io.BytesIO()
    write_dataset(first.frame, buffer, traces=first.traces, format=fmt)
    second = read_dataset(as_upload(buffer.getvalue(), f"again.{fmt}"))
    pd.testing.assert_frame_equal(second.frame, first.frame)
    assert second.traces == first.traces


def test_round_trip_keeps_rows_without_traces_and_csv_uses_json_text(tmp_path):
    traces = rich_traces()
    mixed = [traces[0], None, traces[2]]
    path = tmp_path / "mixed.csv"
    write_dataset(base_frame(traces), path, traces=mixed)
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert json.loads(rows[0]["surprisal"]) == [0.30000000000000004, 1 / 3, 1e-300]
    assert rows[1]["tokens"] == "" and rows[2]["tokens"] == "[]"
    ds = read_dataset(path)
    assert ds.traces[0] == traces[0] and ds.traces[1] is None and ds.traces[2] == traces[2]
    assert not ds.has_traces


def test_traces_to_columns():
    traces = rich_traces()
    columns = traces_to_columns([traces[1], None])
    assert columns["tokens"] == [[" 4"], None]
    assert columns["top_logprobs"] == [[[-0.5, -1.0]], None]
    assert columns["top_tokens"] == [[[" 4", " four"]], None] and columns["ranks"] == [None, None]
    assert columns["trace_metadata"][0]["entropy_source"] == "top_k" and columns["trace_metadata"][0]["entropy_k"] == 2
    assert set(columns) >= {"tokens", "token_ids", "surprisal", "entropy", "top_ids", "top_logprobs"}
    with pytest.raises(TypeError, match=r"`traces\[0\]` must be a Trace or None"):
        traces_to_columns(["not a trace"])


def test_write_dataset_checks_its_arguments(tmp_path):
    frame = base_frame(rich_traces())
    with pytest.raises(ValueError, match="`traces` has 1 entries but `frame` has 3 rows"):
        write_dataset(frame, tmp_path / "x.csv", traces=[None])
    with pytest.raises(DatasetError, match="cannot tell the format of 'x.xlsx'"):
        write_dataset(frame, tmp_path / "x.xlsx")
    with pytest.raises(TypeError, match="Parquet is binary"):
        write_dataset(frame, io.StringIO(), format="parquet")


def test_row_column_is_renamed_when_the_input_has_one():
    ds = read_text("row,prompt,answer,label\n10,p,a,1\n11,q,b,0\n")
    assert ds.row_column == "_row"
    assert ds.frame["row"].tolist() == ["10", "11"] and ds.frame["_row"].tolist() == [1, 2]


def test_columns_are_matched_ignoring_case_and_spaces_and_other_columns_are_kept():
    ds = read_text(" Prompt ,ANSWER,Label,Extra Info\np,a,yes,NA\n")
    assert list(ds.frame.columns) == ["prompt", "answer", "label", "extra info", "row"]
    assert ds.frame["extra info"].tolist() == ["NA"]


# --------------------------------------------------------------------------------------------------
# File-level problems
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("data, name, match", [
    (b"", "data.csv", "the file is empty"),
    (b"", "data.jsonl", "the file is empty"),
    (b"  \n\n", "data.csv", "the file is empty"),
    (b"prompt,answer,label\n", "data.csv", "no data rows"),
    (b"prompt,answer,label\n\n\n", "data.csv", "no data rows"),
    (b"prompt,label\np,1\n", "data.csv", r"missing required column `answer`; found columns \['prompt', 'label'\]"),
    (b"question,response_text\nq,a\n", "data.csv", "missing required columns `prompt` and `answer`"),
    (b"prompt answer label\np a 1\n", "data.csv", "may use a delimiter other than ',', ';', tab, '|'"),
    (b"prompt;label\np;1\n", "data.csv", r"missing required column `answer`; found columns \['prompt', 'label'\]$"),
    ("prompt,answer,label\ncaf\u00e9,a,1\n".encode("latin-1"), "data.csv",
     r"not valid UTF-8: byte 0xe9 at offset 23 \(line 2\).*save the file as UTF-8"),
    (bytes(range(256)) * 4, "data.csv", "looks binary"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64), "data.jsonl", "looks binary"),
    (b"PK\x03\x04" + bytes(30), "data.csv", "ZIP archive"),
    (b"prompt,answer,label\np,a,1\n", "data.xlsx", r"cannot tell the format of 'data.xlsx'.*\.csv/\.tsv"),
    (b"Prompt,answer,label ,LABEL\np,a,1,1\n", "data.csv", "duplicate column names .*'label ' and 'LABEL'"),
    (b"prompt,answer,label\np,a,1\n", "data.jsonl", "not JSON Lines: no line holds a JSON object"),
    (b'{\n  "prompt": "p"\n}\n', "data.jsonl", "not JSON Lines"),
    (b"[1, 2", "data.json", "starts like a JSON array but is not valid JSON"),
    (b"not parquet at all", "data.parquet", "not a readable Parquet file"),
    (b"PAR1" + bytes(20), "data.csv", "looks like a Parquet file"),
])
def test_file_level_problems_raise_dataset_error(data, name, match):
    with pytest.raises(DatasetError, match=match):
        read_dataset(as_upload(data, name))


def test_max_rows():
    text = "prompt,answer,label\n" + "".join(f"p{i},a,1\n" for i in range(5))
    with pytest.raises(DatasetError, match=r"more than 4 data rows \(max_rows=4\)"):
        read_text(text, max_rows=4)
    assert read_text(text, max_rows=5).n_valid == 5
    with pytest.raises(ValueError, match="`max_rows` must be an int >= 1"):
        read_text(text, max_rows=0)


@pytest.mark.parametrize("text, name", [
    ("prompt;answer;label\np;a,b;1\n", "data.csv"),
    ("prompt\tanswer\tlabel\np\ta,b\t1\n", "data.tsv"),
    ("prompt\tanswer\tlabel\np\ta,b\t1\n", "data.csv"),
    ("prompt|answer|label\np|a,b|1\n", "data.txt"),
    ("\ufeffprompt,answer,label\r\np,\"a,b\",1\r\n", "data.csv"),  # Excel's BOM and CRLF
    ("\n\nprompt;answer;label\n\np;a,b;1\n\n", "data.csv"),  # blank lines are skipped
])
def test_other_delimiters_are_recognised(text, name):
    ds = read_text(text, name)
    assert ds.frame["answer"].tolist() == ["a,b"] and ds.labels.tolist() == [1]


def test_ragged_csv_row_is_a_row_error():
    ds = read_with_rejects("prompt,answer,label\np,a,1\nq,b,0,extra\n")
    assert ds.n_valid == 1 and str(ds.errors[0]) == ("row 2: has 4 fields but the header has 3 (a stray delimiter "
                                                     "or quote?)")


def test_sources_paths_buffers_and_explicit_format(tmp_path):
    path = tmp_path / "anything.dat"
    path.write_text("prompt,answer,label\np,a,1\n", encoding="utf-8")
    assert read_dataset(path, format="csv").n_valid == 1
    assert read_dataset(str(path), format="csv").n_valid == 1
    upload = as_upload("prompt,answer,label\np,a,1\n", "up.csv")
    upload.read()  # a page that already read the upload once
    assert read_dataset(upload).n_valid == 1
    with pytest.raises(FileNotFoundError, match="no dataset file"):
        read_dataset(tmp_path / "missing.csv")
    with pytest.raises(ValueError, match="`format` must be one of"):
        read_dataset(path, format="xlsx")
    with pytest.raises(DatasetError, match="it has no name"):
        read_dataset(io.BytesIO(b"prompt,answer,label\np,a,1\n"))


def test_json_array_file():
    rows = [{"prompt": "p", "answer": "a", "label": True}, {"prompt": "q", "answer": "b", "label": "no"}, 7]
    ds = read_with_rejects(json.dumps(rows), "data.json")
    assert ds.labels.tolist() == [1, 0]
    assert str(ds.errors[0]) == "row 3: is 7; expected a JSON object {\"prompt\": ..., ...}"


def test_jsonl_with_a_bad_line_keeps_the_others():
    text = ('{"prompt": "p", "answer": "a", "label": 1}\n\n{"prompt": "q", "answer": \n'
            '{"prompt": "r", "answer": 5, "label": 0}\n{"prompt": "s", "answer": "", "label": 0}\n')
    ds = read_with_rejects(text, "data.jsonl")
    # JSON Lines rows are numbered by file line (the blank line 2 is skipped but counted), so a row number finds the
    # line in an editor.
    assert ds.n_read == 4 and ds.frame["prompt"].tolist() == ["p", "s"] and ds.frame["row"].tolist() == [1, 5]
    assert ds.errors[0].row == 3 and ds.errors[0].message.startswith("not valid JSON (Expecting value")
    assert str(ds.errors[1]) == "row 4: answer: is 5; expected text"


# --------------------------------------------------------------------------------------------------
# Trace columns
# --------------------------------------------------------------------------------------------------

def trace_row(**cells) -> dict:
    row = {"prompt": "p", "answer": "ab", "label": "1", "tokens": '["a", "b"]', "surprisal": "[0.5, 1.0]",
           "entropy": "[1.0, 2.0]"}
    row.update(cells)
    return row


@pytest.mark.parametrize("cells, field, match", [
    ({"tokens": '["a", "b"'}, "tokens", r"^not valid JSON \(Expecting ',' delimiter at char 9\)"),
    ({"tokens": '["a", 2]'}, "tokens", r"^tokens\[1\] is 2; expected a string"),
    ({"tokens": '"ab"'}, "tokens", "is 'ab'; expected a list"),
    ({"surprisal": "[0.5, NaN]"}, "surprisal", r"^surprisal\[1\] is nan; expected a finite number"),
    ({"surprisal": "[Infinity, 0.5]"}, "surprisal", r"^surprisal\[0\] is inf; expected a finite number"),
    ({"surprisal": '[0.5, "x"]'}, "surprisal", r"^surprisal\[1\] is 'x'; expected a number"),
    ({"surprisal": "[0.5, -0.2]"}, "surprisal", r"^surprisal\[1\] is -0\.2; surprisal must be >= 0 .* `logprobs`"),
    ({"entropy": "[1.0]"}, "entropy", "^entropy has 1 values but tokens has 2$"),
    ({"entropy": "[1.0, 2.0, 3.0]"}, "entropy", "^entropy has 3 values but tokens has 2$"),
    ({"entropy": "[1.0, -1.0]"}, "entropy", r"^entropy\[1\] is -1\.0; entropy must be >= 0"),
    ({"surprisal": ""}, "surprisal", r"needs `surprisal` \(or `logprobs`\)"),
    ({"tokens": ""}, "tokens", "is missing; a row with trace columns needs `tokens`"),
    ({"token_ids": "[1, 2.5]"}, "token_ids", r"token_ids\[1\] is 2\.5; expected an integer"),
    ({"top_logprobs": "[[-0.1, -1.0], [-0.2]]"}, "top_logprobs", r"top_logprobs\[1\] has 1 values but "
                                                                 r"top_logprobs\[0\] has 2"),
    ({"top_logprobs": "[[-1.0, -0.1], [-0.2, -0.3]]"}, "top_logprobs", "sorted from most to least likely"),
    ({"top_logprobs": "[[0.5], [-0.2]]"}, "top_logprobs", r"top_logprobs\[0\]\[0\] is 0\.5; log-probabilities"),
    ({"top_logprobs": "[[-0.1]]"}, "top_logprobs", "top_logprobs has 1 rows but tokens has 2"),
    ({"top_logprobs": "[[-0.1], [-0.2]]", "top_ids": "[[1, 2], [3, 4]]"}, "top_ids", "top_ids has shape"),
    ({"ranks": "[0, 1]"}, "ranks", "ranks are 1-based"),
    ({"trace_metadata": '{"colour": 1}'}, "trace_metadata", "unknown metadata fields"),
])
def test_bad_trace_cells_are_row_errors(cells, field, match):
    text = csv_of([trace_row(prompt="good"), trace_row(prompt="bad", **cells)])
    ds = read_with_rejects(text)
    assert ds.n_read == 2 and ds.n_valid == 1 and ds.frame["prompt"].tolist() == ["good"]
    assert len(ds.errors) == 1
    error = ds.errors[0]
    assert (error.row, error.field) == (2, field)
    assert str(error).startswith(f"row 2: {field}: ")
    assert re.search(match, error.message), error.message


def test_logprobs_column_gives_surprisal_and_must_agree_with_surprisal():
    text = csv_of([trace_row(surprisal="", logprobs="[-0.5, -1.25]"),
                   trace_row(logprobs="[-0.5, -1.0]"),
                   trace_row(logprobs="[-0.5, -2.0]"),
                   trace_row(surprisal="", logprobs="[0.5, -1.0]")])
    ds = read_with_rejects(text)
    assert ds.traces[0].surprisal.tolist() == [0.5, 1.25] and ds.traces[1].surprisal.tolist() == [0.5, 1.0]
    assert [(e.row, e.field) for e in ds.errors] == [(3, "logprobs"), (4, "logprobs")]
    assert "expected surprisal = -logprob" in ds.errors[0].message
    assert "log-probabilities must be <= 0" in ds.errors[1].message


def test_entropy_is_estimated_from_top_logprobs_when_missing():
    top = [[-0.2, -2.0, -3.0], [-0.05, -4.0, -5.0]]
    text = csv_of([trace_row(entropy="", top_logprobs=json.dumps(top),
                             top_tokens=json.dumps([["a", "A", "x"], ["b", "B", "y"]]))])
    trace = read_text(text).traces[0]
    np.testing.assert_allclose(trace.entropy, [hand_entropy(top[0]), hand_entropy(top[1])], rtol=1e-12)
    assert trace.metadata.entropy_source == "top_k" and trace.metadata.source == "imported"
    assert trace.metadata.entropy_k == 3
    assert trace.top_ids.tolist() == [[-1, -1, -1]] * 2 and trace.token_ids.tolist() == [-1, -1]
    assert trace.top_tokens == (("a", "A", "x"), ("b", "B", "y"))


def test_trace_columns_rules():
    # A row without any trace cell has no trace; the answer column is kept even if the tokens spell another text.
    text = csv_of([trace_row(answer="a b"), trace_row(tokens="", surprisal="", entropy="")])
    ds = read_text(text)
    assert ds.traces[0].answer == "a b" and ds.traces[0].tokens == ("a", "b") and ds.traces[1] is None
    assert ds.traces[0].prompt == "p" and ds.traces[0].metadata.entropy_source == "exact"
    # JSONL cells may be native lists.
    jsonl = json.dumps({"prompt": "p", "answer": "ab", "label": 1, "tokens": ["a", "b"], "surprisal": [0.5, 1],
                        "entropy": [1, 2], "top_logprobs": [[], []]})
    trace = read_text(jsonl, "data.jsonl").traces[0]
    assert trace.surprisal.tolist() == [0.5, 1.0] and trace.n_alternatives == 0


def test_several_errors_in_one_row_are_all_reported():
    text = csv_of([trace_row(prompt="", label="perhaps", entropy="[1.0]"), trace_row()])
    ds = read_with_rejects(text)
    assert [e.field for e in ds.errors] == ["prompt", "entropy", "label"]
    assert {e.row for e in ds.errors} == {1} and ds.n_rejected == 1 and ds.n_valid == 1


def test_entropy_from_top_k_matches_hand_computation():
    top = np.array([[-0.1, -2.5], [-0.7, -1.5], [math.log(0.5), math.log(0.5)], [-1e-9, -math.inf]])
    got = entropy_from_top_k(top)
    expected = [hand_entropy([-0.1, -2.5]), hand_entropy([-0.7, -1.5]), math.log(2), hand_entropy([-1e-9])]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="must be 2-D"):
        entropy_from_top_k([-0.1, -0.2])


# --------------------------------------------------------------------------------------------------
# OpenAI-compatible responses
# --------------------------------------------------------------------------------------------------

def load(name: str) -> dict:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def test_chat_response_with_a_character_split_across_tokens():
    trace = trace_from_openai(load("openai_chat_response.json"), prompt="Say cafe!")
    assert trace.prompt == "Say cafe!" and trace.answer == "Café!"
    assert trace.tokens == ("Caf", "", "é", "!") and "".join(trace.tokens) == trace.answer
    assert trace.surprisal.tolist() == [0.1, 0.05, 0.01, 2.0]  # exactly -logprob
    # Step 1 offers the chosen token among 2; step 4's chosen token ("!") is not offered, so its mass is added.
    expected = [hand_entropy([-0.1, -2.5]), hand_entropy([-0.05, -3.2]), hand_entropy([-0.01, -4.7]),
                hand_entropy([-0.7, -1.5, -2.0])]
    np.testing.assert_allclose(trace.entropy, expected, rtol=1e-12)
    assert trace.top_logprobs.tolist() == [[-0.1, -2.5], [-0.05, -3.2], [-0.01, -4.7], [-0.7, -1.5]]  # sorted
    assert trace.top_tokens[1] == ("\\xc3", "e") and trace.top_tokens[3] == (".", "?")
    assert trace.top_ids.tolist() == [[-1, -1]] * 4 and trace.token_ids.tolist() == [-1] * 4
    meta = trace.metadata
    assert (meta.model_id, meta.source, meta.entropy_source, meta.entropy_k) == (
        "test-model-chat", "imported", "top_k", 2)
    assert meta.extra == {"api": "chat", "finish_reason": "stop"}
    assert trace_from_openai(load("openai_chat_response.json"), model_id="mine").metadata.model_id == "mine"
    assert Trace.from_json(trace.to_json()) == trace


def test_completions_response():
    trace = trace_from_openai(load("openai_completions_response.json"))
    assert trace.answer == " 42" and trace.tokens == (" 4", "2")
    assert trace.surprisal.tolist() == [0.3, 0.02]
    np.testing.assert_allclose(trace.entropy, [hand_entropy([-0.3, -2.0, -2.5]), hand_entropy([-0.02])],
                               rtol=1e-12)
    # Step 2 offers one alternative, so every step keeps k = 1 (the most likely).
    assert trace.top_logprobs.tolist() == [[-0.3], [-0.02]] and trace.top_tokens == ((" 4",), ("2",))
    assert trace.metadata.model_id == "test-model-completions" and trace.metadata.extra["api"] == "completions"


def test_completions_without_alternatives_and_with_legacy_byte_tokens():
    response = {"choices": [{"text": None, "logprobs": {
        "tokens": ["bytes:\\xe6\\x97", "bytes:\\xa5", " ok"], "token_logprobs": [-0.4, -0.1, -1.0],
        "top_logprobs": [None, {"bytes:\\xa5": -0.1}, None]}}]}
    trace = trace_from_openai(response)
    assert trace.tokens == ("", "日", " ok") and trace.answer == "日 ok"
    assert trace.n_alternatives == 0  # steps 1 and 3 offer none
    # One probability per step says nothing about the rest of the distribution: no entropy, not a one-bucket guess.
    assert trace.entropy is None and trace.metadata.entropy_source == "absent" and trace.metadata.entropy_k is None
    assert trace.surprisal.tolist() == [0.4, 0.1, 1.0]


@pytest.mark.parametrize("response, match", [
    ({"choices": [{"message": {"content": "hi"}, "logprobs": None}]},
     r"response has no choices\[0\]\.logprobs: ask the server for logprobs=true \(and top_logprobs=k\)"),
    ({"choices": [{"message": {"content": "hi"}}]}, "ask the server for logprobs=true"),
    ({"choices": []}, "response has no choices"),
    ({"object": "error"}, "response has no choices"),
    ({"choices": [{"logprobs": {"content": None}}]}, r"content is null"),
    ({"choices": [{"logprobs": {"content": [{"token": "a", "logprob": 0.5}]}}]},
     r"content\[0\]\.logprob is 0\.5; expected a log-probability"),
    ({"choices": [{"logprobs": {"content": [{"token": "a", "logprob": -0.5, "bytes": [300]}]}}]},
     r"content\[0\]\.bytes must be a list of ints 0\.\.255"),
    ({"choices": [{"logprobs": {"tokens": ["a", "b"], "token_logprobs": [None, -0.1]}}]},
     r"token_logprobs\[0\] is null \(with echo=true"),
    ({"choices": [{"logprobs": {"tokens": ["a"], "token_logprobs": [-0.1, -0.2]}}]},
     "token_logprobs has 2 values but tokens has 1"),
    ({"choices": [{"logprobs": {"text_offset": []}}]}, "has neither `content`"),
])
def test_bad_responses_raise_naming_the_field(response, match):
    with pytest.raises(ValueError, match=match):
        trace_from_openai(response)


def test_response_column_in_a_jsonl_dataset():
    chat = load("openai_chat_response.json")
    completions = load("openai_completions_response.json")
    rows = [{"prompt": "Say cafe!", "response": chat, "reference": "café"},
            {"prompt": "6 x 7?", "response": json.dumps(completions), "reference": "42"},
            {"prompt": "no trace", "answer": "x", "response": None, "reference": "x"},
            {"prompt": "broken", "response": {"choices": [{"text": "a"}]}, "reference": "a"},
            {"prompt": "missing", "reference": "a"}]
    text = "\n".join(json.dumps(r) for r in rows)
    ds = read_with_rejects(text, "data.jsonl", matcher="contains")
    assert ds.frame["answer"].tolist() == ["Café!", " 42", "x"]
    assert ds.labels.tolist() == [1, 1, 1] and ds.label_source == "reference:contains"
    assert ds.traces[0].tokens == ("Caf", "", "é", "!") and ds.traces[0].prompt == "Say cafe!"
    assert ds.traces[1].answer == " 42" and ds.traces[2] is None
    assert [(e.row, e.field) for e in ds.errors] == [(4, "response"), (5, "answer")]  # no second error for row 4
    assert "ask the server for logprobs=true" in ds.errors[0].message


# --------------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    ("=1+1", "'=1+1"), ("+cmd", "'+cmd"), ("-2+3", "'-2+3"), ("@SUM(A1:A2)", "'@SUM(A1:A2)"),
    ("\tx", "'\tx"), ("\rx", "'\rx"), ("＝1+1", "'＝1+1"), ("-3", "-3"),
    ("Paris", "Paris"), (" =1", "' =1"), ("", ""), ("a=b", "a=b"), (-3, -3), (1.5, 1.5), (None, None),
])
def test_sanitize_cell(value, expected):
    assert sanitize_cell(value) == expected


def test_export_flagged_csv_neutralises_formulas(tmp_path):
    frame = pd.DataFrame({"prompt": ["=1+1", "+cmd", "-2+3", "@SUM(A1:A2)", "\tTAB", "\rCR"],
                          "answer": ["ok", "=HYPERLINK(\"http://x\")", "fine", "-", "a,b", "multi\nline"],
                          "score": [-3, 2, 0, -1, 5, 6], "conf": [-0.5, 0.1, 0.2, 0.3, 0.4, 0.5],
                          "=evil header": ["x"] * 6})
    path = tmp_path / "flagged.csv"
    export_flagged(frame, path)
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["prompt", "answer", "score", "conf", "'=evil header"]
    assert [r[0] for r in rows[1:]] == ["'=1+1", "'+cmd", "'-2+3", "'@SUM(A1:A2)", "'\tTAB", "'\rCR"]
    assert [r[1] for r in rows[1:]] == ["ok", "'=HYPERLINK(\"http://x\")", "fine", "'-", "a,b", "multi\nline"]
    assert [r[2] for r in rows[1:]] == ["-3", "2", "0", "-1", "5", "6"]  # numbers are not strings: untouched
    assert rows[1][3] == "-0.5"
    for row in rows[1:]:
        assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in row[:2])


def test_export_flagged_jsonl_keeps_values_unless_asked_and_accepts_buffers():
    frame = pd.DataFrame({"prompt": ["=1+1"], "answer": ["-3"], "score": [np.float64(0.25)],
                          "tokens": [["=a", "b"]]})
    text_buffer = io.StringIO()
    export_flagged(frame, text_buffer, format="jsonl")
    assert json.loads(text_buffer.getvalue()) == {"prompt": "=1+1", "answer": "-3", "score": 0.25,
                                                  "tokens": ["=a", "b"]}
    binary = io.BytesIO()
    export_flagged(frame, binary, format="jsonl", sanitize=True)
    assert json.loads(binary.getvalue())["prompt"] == "'=1+1"
    with pytest.raises(ValueError, match="`format` must be one of 'csv', 'jsonl'; got 'parquet'"):
        export_flagged(frame, binary, format="parquet")


def test_parse_beam_logprobs_column():
    from trace_core.data import parse_beam_logprobs

    assert parse_beam_logprobs(["[-0.5, -2]", [-1, -3, -4]], [3, 4]) == [[-0.5, -2.0], [-1.0, -3.0, -4.0]]
    with pytest.raises(ValueError, match=r"row 8: beam_logprobs: not a JSON list of numbers"):
        parse_beam_logprobs(["[-1, -2]", "oops"], [7, 8])
    with pytest.raises(ValueError, match=r"row 2: beam_logprobs: needs at least 2 beam log-probabilities, got 1"):
        parse_beam_logprobs(["[-1]"], [2])
