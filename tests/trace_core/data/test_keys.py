"""Keys and sources of a row: a JSON key given twice or two keys naming one column reject that row only; a row's
trace comes from its trace cells, else from its `response`; UTF-32 and duplicate Parquet columns are named; the
summary without quoted errors reads as a sentence.

Every file is written in tmp_path and read with trace_core.read_dataset. A bad row never stops a file: the valid
rows are kept and each bad row is listed by its number (JSON Lines: its line in the file) with its column.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import pytest

import trace_core
from trace_core.data import DatasetError, DatasetWarning

pytestmark = pytest.mark.filterwarnings("ignore::trace_core.data.DatasetWarning")  # rejected rows are expected

DATA = Path(__file__).resolve().parents[2] / "data"
LOST = "JSON keeps only the last value"


def chat_response() -> dict:
    """An OpenAI chat response whose answer is "Café!" (4 tokens)."""
    return json.loads((DATA / "openai_chat_response.json").read_text(encoding="utf-8"))


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def good(i: int) -> str:
    return json.dumps({"prompt": f"Q{i}", "answer": f"a{i}", "label": i % 2})


# --------------------------------------------------------------------------------------------------
# 1. A key given twice in one JSON object
# --------------------------------------------------------------------------------------------------

def test_a_key_given_twice_rejects_that_jsonl_row_by_its_line_number(tmp_path):
    path = write_lines(tmp_path / "data.jsonl", [
        good(1),
        '{"prompt": "Q2", "answer": "a2", "label": 1, "label": 0}',
        "",  # a blank line: counted in the line numbers, holds no row
        '{"prompt": "Q4", "answer": "a4", "answer": "b4", "answer": "c4", "label": 1}',
        good(5),
    ])
    ds = trace_core.read_dataset(path)
    assert (ds.n_read, ds.n_valid) == (4, 2)
    assert ds.frame["row"].tolist() == [1, 5]
    assert [(e.row, e.field) for e in ds.errors] == [(2, "label"), (4, "answer")]
    assert "the key 'label' is given twice in this record" in ds.errors[0].message
    assert "the key 'answer' is given 3 times" in ds.errors[1].message
    assert all(LOST in e.message for e in ds.errors)


def test_a_file_whose_only_record_gives_a_key_twice_keeps_its_columns(tmp_path):
    path = write_lines(tmp_path / "one.jsonl", ['{"prompt": "Q", "answer": "a", "label": 1, "label": 0}'])
    with pytest.warns(DatasetWarning, match="1 row read: 0 kept, 1 rejected"):
        ds = trace_core.read_dataset(path)
    assert ds.n_valid == 0 and [(e.row, e.field) for e in ds.errors] == [(1, "label")]


def test_a_key_given_twice_inside_a_response_names_the_column_and_where(tmp_path):
    text = json.dumps({"prompt": "Say cafe!", "label": 1, "response": chat_response()})
    # the choice gives "finish_reason" twice: a duplicate json.loads would drop without a word
    broken = text.replace('"finish_reason": "stop"', '"finish_reason": "stop", "finish_reason": "length"')
    assert broken != text
    ds = trace_core.read_dataset(write_lines(tmp_path / "data.jsonl", [text, broken, good(3)]))
    assert ds.frame["row"].tolist() == [1, 3]
    assert [(e.row, e.field) for e in ds.errors] == [(2, "response")]
    assert ds.errors[0].message.startswith("response.choices[0] holds the key 'finish_reason' twice")
    assert LOST in ds.errors[0].message


def test_a_key_given_twice_in_a_json_array_rejects_that_item(tmp_path):
    path = tmp_path / "data.json"
    path.write_text('[{"prompt": "Q1", "answer": "a1", "label": 1},\n'
                    ' {"prompt": "Q2", "answer": "a2", "label": 1, "meta": {"k": 1, "k": 2}},\n'
                    ' {"prompt": "Q3", "answer": "a3", "label": 0, "label": 1}]\n', encoding="utf-8")
    ds = trace_core.read_dataset(path)
    assert (ds.n_read, ds.frame["row"].tolist()) == (3, [1])
    assert [(e.row, e.field) for e in ds.errors] == [(2, "meta"), (3, "label")]
    assert "meta holds the key 'k' twice" in ds.errors[0].message


def test_a_key_given_twice_in_a_csv_response_cell(tmp_path):
    response = json.dumps(chat_response())
    broken = response.replace('"model": "test-model-chat"', '"model": "a", "model": "b"')
    assert broken != response
    frame = pd.DataFrame({"prompt": ["Say cafe!", "Say cafe!"], "answer": ["", ""], "label": [1, 0],
                          "response": [response, broken]})
    path = tmp_path / "data.csv"
    frame.to_csv(path, index=False)
    ds = trace_core.read_dataset(path)
    assert ds.frame["row"].tolist() == [1] and ds.traces[0] is not None
    assert [(e.row, e.field) for e in ds.errors] == [(2, "response")]
    assert ds.errors[0].message.startswith("holds the key 'model' twice")


# --------------------------------------------------------------------------------------------------
# 2. Two keys that name one column (case, surrounding spaces)
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("clash, column, names", [
    ('{"prompt": "Q2", "answer": "a2", "label": 1, "Label ": 0}', "label", "'label' and 'Label '"),
    ('{"prompt": "Q2", "Answer": "x", "answer": "a2", "label": 1}', "answer", "'Answer' and 'answer'"),
    ('{" prompt": "Q2", "PROMPT": "q", "answer": "a2", "label": 1}', "prompt", "' prompt' and 'PROMPT'"),
])
def test_keys_naming_one_column_reject_that_row_and_the_file_is_read(tmp_path, clash, column, names):
    ds = trace_core.read_dataset(write_lines(tmp_path / "data.jsonl", [good(1), clash, good(3)]))
    assert (ds.n_read, ds.frame["row"].tolist()) == (3, [1, 3])
    assert [(e.row, e.field) for e in ds.errors] == [(2, column)]
    assert f"the keys {names} name the same column" in ds.errors[0].message


def test_duplicate_header_names_still_stop_a_csv(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("prompt,answer,label,Label \nQ,a,1,0\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="duplicate column names .*'label' and 'Label '"):
        trace_core.read_dataset(path)


# --------------------------------------------------------------------------------------------------
# 3. Trace columns and `response`, row by row
# --------------------------------------------------------------------------------------------------

def _mixed_rows() -> list[dict]:
    """Row 1: trace cells only; row 2: a response only (empty answer); row 3: both; row 4: neither."""
    response = chat_response()
    return [
        {"prompt": "Q1", "answer": "A", "label": 1, "tokens": ["A"], "logprobs": [-0.1], "response": None},
        {"prompt": "Say cafe!", "answer": "", "label": 1, "tokens": None, "logprobs": None, "response": response},
        {"prompt": "Q3", "answer": "B", "label": 0, "tokens": ["B"], "logprobs": [-0.3], "response": response},
        {"prompt": "Q4", "answer": "C", "label": 0, "tokens": None, "logprobs": None, "response": None},
    ]


def _write_mixed(tmp_path: Path, fmt: str) -> Path:
    rows = _mixed_rows()
    if fmt == "jsonl":
        return write_lines(tmp_path / "mixed.jsonl", [json.dumps(r) for r in rows])
    as_text = [{k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in r.items()} for r in rows]
    frame = pd.DataFrame(as_text)
    path = tmp_path / f"mixed.{fmt}"
    if fmt == "csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return path


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_each_row_takes_its_trace_from_its_trace_cells_else_from_its_response(tmp_path, fmt):
    ds = trace_core.read_dataset(_write_mixed(tmp_path, fmt))
    assert (ds.n_read, ds.n_valid, ds.errors) == (4, 4, [])
    assert ds.traces[0].tokens == ("A",) and ds.traces[0].answer == "A"
    assert ds.traces[1] is not None and ds.traces[1].answer == "Café!" and len(ds.traces[1]) == 4
    assert ds.traces[2].tokens == ("B",)  # trace columns win over the response
    assert ds.traces[3] is None
    assert ds.frame["answer"].tolist() == ["A", "Café!", "B", "C"]  # the empty answer taken from the response
    assert ds.notes == [("1 row had both trace cells and a `response`: the trace cells were used and the response "
                         "ignored (row 3)")]
    assert ds.summary().endswith("; " + ds.notes[0])


def test_a_response_column_that_appears_after_traced_rows_is_used(tmp_path):
    """JSON Lines: the rules change when `response` first appears on a later line (a second pass)."""
    rows = [{"prompt": f"Q{i}", "answer": "A", "label": i % 2, "tokens": ["A"], "logprobs": [-0.1]}
            for i in range(1, 4)]
    rows.append({"prompt": "Say cafe!", "label": 1, "response": chat_response()})  # no answer: from the response
    ds = trace_core.read_dataset(write_lines(tmp_path / "late.jsonl", [json.dumps(r) for r in rows]))
    assert (ds.n_valid, ds.errors, ds.notes) == (4, [], [])
    assert [t.answer for t in ds.traces] == ["A", "A", "A", "Café!"]
    assert ds.frame["answer"].tolist() == ["A", "A", "A", "Café!"]


def test_without_an_answer_column_a_row_with_trace_cells_is_rejected_and_the_rest_read(tmp_path):
    response = chat_response()
    rows = [{"prompt": "Q1", "label": 1, "tokens": ["A"], "logprobs": [-0.1]},  # trace cells but no answer
            {"prompt": "Say cafe!", "label": 1, "response": response},
            {"prompt": "Q3", "label": 0, "tokens": ["B"], "logprobs": [-0.2], "response": response}]
    ds = trace_core.read_dataset(write_lines(tmp_path / "data.jsonl", [json.dumps(r) for r in rows]))
    assert ds.frame["row"].tolist() == [2]
    assert [(e.row, e.field) for e in ds.errors] == [(1, "answer"), (3, "answer")]
    assert all("is missing" in e.message for e in ds.errors)


def test_a_broken_trace_cell_is_not_replaced_by_the_response(tmp_path):
    rows = copy.deepcopy(_mixed_rows())
    rows[2]["logprobs"] = [0.5]  # a log-probability above 0: the row is rejected, its response not used instead
    ds = trace_core.read_dataset(write_lines(tmp_path / "data.jsonl", [json.dumps(r) for r in rows]))
    assert ds.frame["row"].tolist() == [1, 2, 4]
    assert [(e.row, e.field) for e in ds.errors] == [(3, "logprobs")]
    assert ds.notes == []


# --------------------------------------------------------------------------------------------------
# 4. Wording: UTF-32, duplicate Parquet columns, a summary without quoted errors
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["utf-32", "utf-32-le", "utf-32-be"])
@pytest.mark.parametrize("name", ["data.csv", "data.jsonl"])
def test_utf32_text_is_named_as_utf32(tmp_path, encoding, name):
    text = "prompt,answer,label\nQ,a,1\n" if name.endswith(".csv") else good(1) + "\n"
    bom = {"utf-32-le": b"\xff\xfe\x00\x00", "utf-32-be": b"\x00\x00\xfe\xff"}.get(encoding, b"")
    path = tmp_path / name
    path.write_bytes(bom + text.encode(encoding))
    with pytest.raises(DatasetError, match="looks like UTF-32 text: save it as UTF-8"):
        trace_core.read_dataset(path)


def test_utf16_text_is_still_named_as_utf16(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes("prompt,answer,label\nQ,a,1\n".encode("utf-16"))
    with pytest.raises(DatasetError, match="looks like UTF-16 text"):
        trace_core.read_dataset(path)


@pytest.mark.parametrize("names", [["prompt", "answer", "label", "label"], ["prompt", "answer", "label", " LABEL"]])
def test_parquet_with_duplicate_column_names(tmp_path, names):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.Table.from_arrays([pa.array(["Q"]), pa.array(["a"]), pa.array([1]), pa.array([0])], names=names)
    path = tmp_path / "dup.parquet"
    pq.write_table(table, path)
    with pytest.raises(DatasetError, match=f"duplicate column names .*'label' and {names[3]!r}"):
        trace_core.read_dataset(path)


def test_summary_without_quoted_errors_reads_as_a_sentence(tmp_path):
    lines = ["prompt,answer,label"] + [f"Q{i},a{i},{'maybe' if i in (3, 7) else i % 2}" for i in range(1, 11)]
    path = write_lines(tmp_path / "data.csv", lines)
    ds = trace_core.read_dataset(path)
    assert ds.summary(max_errors=0) == "10 rows read: 8 kept, 2 rejected"
    assert ds.summary(max_errors=1).endswith("; and 1 more)")
    assert ds.summary(max_errors=2).endswith("correct/incorrect)")  # every error shown: no "and 0 more"
    with pytest.raises(ValueError, match="max_errors"):
        ds.summary(max_errors=-1)
