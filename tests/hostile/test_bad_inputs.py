"""The bad-input corpus (tests/data/bad) through the loader, the command line and the Calibrate page.

Each file either fails as a whole with a message naming the problem, or keeps its valid rows and names every
rejected row with its column and reason; nowhere does a traceback reach the user.
"""

from __future__ import annotations

import html
import importlib.util
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from trace_core.cli import main
from trace_core.data import DatasetError, DatasetWarning, LabeledDataset, read_dataset

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / "tests" / "data" / "bad"
APP = str(ROOT / "app" / "main.py")
EVALUATE = ["--splits", "2", "--stratified", "--methods", "TRACE+", "TRACE", "SeqLogP", "--format", "csv", "--quiet"]
LABEL_WORDS = "is not one of 0/1, true/false, yes/no, correct/incorrect"


def _load_make_bad() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_bad", BAD / "make_bad.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_bad = _load_make_bad()


@dataclass(frozen=True)
class Case:
    name: str
    file_error: tuple[str, ...] = ()  # a whole-file DatasetError: fragments of its message
    n_read: int = 0
    kept: tuple[int, ...] = ()  # file row numbers of the kept rows
    row_errors: tuple[tuple[int, str, str], ...] = ()  # (row, column, fragment of the reason)
    cli_error: str = ""  # `evaluate` fails on the kept rows with this; "" = it succeeds
    cli_notes: tuple[str, ...] = ()  # other stderr lines expected from `evaluate`
    page_notes: tuple[str, ...] = ()  # fragments of the page's error/warning/info texts, besides the counts

    @property
    def n_kept(self) -> int:
        return len(self.kept)

    def __str__(self) -> str:
        return self.name


def _all_but(n: int, *rejected: int) -> tuple[int, ...]:
    return tuple(r for r in range(1, n + 1) if r not in rejected)


CASES = [
    Case("empty.csv", file_error=("the file is empty (0 bytes)",)),
    Case("whitespace_only.csv", file_error=("the file is empty (only whitespace)",)),
    Case("header_only.csv", file_error=("no data rows", "['prompt', 'answer', 'label', 'tokens', 'surprisal', "
                                                       "'entropy'] but no rows below the header")),
    Case("missing_columns.csv", file_error=("missing required columns `prompt` and `answer`",
                                            "found columns ['question', 'reply', 'label']")),
    Case("no_label_column.csv", file_error=("needs a `label` column", "or a `reference` column",
                                            "found columns ['prompt', 'answer']")),
    Case("colon_delimiter.csv", file_error=("missing required columns `prompt` and `answer`",
                                            "found columns ['prompt:answer:label']",
                                            "may use a delimiter other than ',', ';', tab, '|'")),
    Case("latin1_bytes.csv", file_error=("not valid UTF-8", "byte 0xe9 at offset 37 (line 2)",
                                         "save the file as UTF-8")),
    Case("binary_garbage.csv", file_error=("looks binary (it contains NUL bytes)", "expected a UTF-8 text file")),
    Case("xlsx_renamed.csv", file_error=("looks like a ZIP archive (an Excel .xlsx workbook?)",
                                         "save it as CSV UTF-8")),
    Case("not_parquet.parquet", file_error=("not a readable Parquet file", "expected a Parquet table")),
    Case("duplicate_columns.csv", file_error=("duplicate column names", "'label' and 'Label'")),
    Case("semicolon_delimiter.csv", n_read=8, kept=_all_but(8)),
    Case("bad_labels.csv", n_read=12, kept=_all_but(12, 3, 6, 9), row_errors=(
        (3, "label", f"'maybe' {LABEL_WORDS}"), (6, "label", f"'2' {LABEL_WORDS}"), (9, "label", "is missing"))),
    Case("nan_inf_trace.csv", n_read=10, kept=_all_but(10, 2, 5, 8), row_errors=(
        (2, "surprisal", "surprisal[1] is nan; expected a finite number"),
        (5, "entropy", "entropy[0] is inf; expected a finite number"),
        (8, "surprisal", "surprisal[2] is inf; expected a finite number"))),
    Case("mismatched_lengths.csv", n_read=10, kept=_all_but(10, 3, 7), row_errors=(
        (3, "surprisal", "surprisal has 2 values but tokens has 1"),
        (7, "entropy", "entropy has 3 values but tokens has 2"))),
    Case("malformed_json.csv", n_read=10, kept=_all_but(10, 2, 4, 6), row_errors=(
        (2, "surprisal", "not valid JSON (Expecting ',' delimiter at char 9): '[0.1, 0.2'"),
        (4, "tokens", "not valid JSON (Expecting value at char 1)"),
        (6, "entropy", "is 0.5; expected a list"))),
    Case("lone_surrogates.jsonl", file_error=("no row could be read: 3 rows rejected, none kept (the first: row 1: "
                                              "prompt: holds '\\ud800': half of a UTF-16 surrogate pair",)),
    Case("malformed_lines.jsonl", n_read=6, kept=_all_but(6, 2, 3), row_errors=(
        (2, "", "not valid JSON (Expecting ',' delimiter"), (3, "", "is [1, 2, 3]; expected a JSON object"))),
    Case("ragged_rows.csv", n_read=10, kept=_all_but(10, 2, 5), row_errors=(
        (2, "", "has 7 fields but the header has 6 (a stray delimiter or quote?)"),
        (5, "", "has 5 fields but the header has 6 (a stray delimiter or quote?)"))),
    # The lines after an unclosed quote become part of its row: they cannot be recovered, only reported.
    Case("unclosed_quote.csv", n_read=2, kept=(1,), row_errors=(
        (2, "", "has 2 fields but the header has 3, and it runs from line 3 to line 5 of the file: a quote on "
                "line 3 is probably never closed"),),
         cli_error="1 row has no trace (row 1)", page_notes=("1 row has no trace (row 1)",)),
    Case("empty_answers.csv", n_read=10, kept=_all_but(10, 2), row_errors=((2, "label", f"'maybe' {LABEL_WORDS}"),),
         cli_notes=("warning: 2 empty answers (no tokens) left out: rows 4, 7",),
         page_notes=("2 empty answers (no tokens) left out: rows 4, 7",)),
    Case("all_answers_empty.csv", n_read=2, kept=(1, 2), cli_error="every answer is empty (no tokens)",
         page_notes=("Every answer is empty (no tokens), so there is nothing to score",)),
    Case("one_class.csv", n_read=6, kept=_all_but(6),
         cli_error="all 6 usable answers are labeled correct (1), so the metrics are undefined",
         page_notes=("All 6 usable answers are labeled correct (1), so the metrics are undefined",)),
    Case("single_row.csv", n_read=1, kept=(1,),
         cli_error="the only usable answer is labeled correct (1), so the metrics are undefined",
         page_notes=("The only usable answer is labeled correct (1), so the metrics are undefined",)),
]


def _summary(case: Case) -> str:
    return f"{case.n_read:,} row{'' if case.n_read == 1 else 's'} read: {case.n_kept:,} kept, {case.n_read - case.n_kept:,} rejected"


def _read(path: Path, **kwargs: Any) -> LabeledDataset:
    """read_dataset, checking it warns exactly when rows were rejected."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dataset = read_dataset(path, **kwargs)
    dataset_warnings = [w for w in caught if issubclass(w.category, DatasetWarning)]
    assert len(dataset_warnings) == (1 if dataset.n_rejected else 0)
    return dataset


# --------------------------------------------------------------------------------------------------
# The corpus itself
# --------------------------------------------------------------------------------------------------

def test_every_corpus_file_has_a_case_and_the_script_rewrites_it_unchanged(tmp_path: Path) -> None:
    committed = sorted(p.name for p in BAD.iterdir() if p.is_file() and p.name not in ("make_bad.py", "README.md"))
    assert committed == sorted(c.name for c in CASES) == sorted(make_bad.SMALL)
    make_bad.write_small(tmp_path)
    readme = (BAD / "README.md").read_text(encoding="utf-8")
    for name in committed:
        assert (tmp_path / name).read_bytes() == (BAD / name).read_bytes(), f"rerun make_bad.py: {name} differs"
        assert f"`{name}`" in readme, f"{name} is not described in tests/data/bad/README.md"


# --------------------------------------------------------------------------------------------------
# (a) the library loader
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=str)
def test_loader(case: Case) -> None:
    path = BAD / case.name
    if case.file_error:
        with pytest.raises(DatasetError) as info:
            read_dataset(path)
        message = str(info.value)
        assert "\n" not in message
        for fragment in case.file_error:
            assert fragment in message
        return
    dataset = _read(path)
    assert (dataset.n_read, dataset.n_valid) == (case.n_read, case.n_kept)
    assert dataset.frame[dataset.row_column].tolist() == list(case.kept)
    assert len(dataset.traces) == case.n_kept
    assert [(e.row, e.field) for e in dataset.errors] == [(row, column) for row, column, _ in case.row_errors]
    for error, (row, column, fragment) in zip(dataset.errors, case.row_errors, strict=True):
        assert fragment in error.message
        assert str(error).startswith(f"row {row}: {column + ': ' if column else ''}")
    assert dataset.summary().startswith(_summary(case))


def test_loader_keeps_the_trace_of_every_valid_row() -> None:
    dataset = _read(BAD / "nan_inf_trace.csv")
    for row, trace in zip(dataset.frame["row"], dataset.traces, strict=True):
        assert trace is not None and len(trace) == 1 + row % 3
        assert trace.tokens[0] == f" w{row}_0"


# --------------------------------------------------------------------------------------------------
# (b) the command line
# --------------------------------------------------------------------------------------------------

def _stderr_lines(capsys: pytest.CaptureFixture[str]) -> tuple[str, list[str]]:
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert not any("Traceback" in line for line in lines)
    return captured.out, lines


@pytest.mark.parametrize("case", CASES, ids=str)
def test_cli_evaluate(case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["evaluate", str(BAD / case.name), *EVALUATE])
    out, err = _stderr_lines(capsys)
    if case.file_error:
        assert code == 1 and out == ""
        assert len(err) == 1 and err[0].startswith("error: ")
        for fragment in case.file_error:
            assert fragment in err[0]
        return
    # --quiet: the reader's summary only when it names rejected rows (a problem), else nothing but problems
    summary = [err[0]] if case.n_kept < case.n_read else []
    if summary:
        assert err[0].startswith(_summary(case))
    else:
        assert not any("rows read" in line for line in err)
    for row, column, fragment in case.row_errors:
        assert f"row {row}: {column + ': ' if column else ''}{fragment}" in err[0]
    for note in case.cli_notes:
        assert note in err
    if case.cli_error:
        assert code == 1 and out == ""
        assert err[-1].startswith(f"error: {BAD / case.name}: ") and case.cli_error in err[-1]
        assert len(err) == len(summary) + 1 + len(case.cli_notes)  # the summary, the notes, the error: a line each
    else:
        assert code == 0
        assert err == [*summary, *case.cli_notes]
        assert {"TRACE+", "TRACE", "SeqLogP"} <= {line.split(",")[0] for line in out.splitlines()}


@pytest.mark.parametrize("name, message", [
    ("binary_garbage.csv", "error: the file looks binary (it contains NUL bytes)"),
    ("one_class.csv", "so the metrics are undefined"),
])
def test_cli_process_prints_one_line_and_no_traceback(name: str, message: str) -> None:
    result = subprocess.run([sys.executable, "-m", "trace_core", "evaluate", str(BAD / name), "--quiet"],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 1 and result.stdout == ""
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and message in last


def test_cli_fit_and_flag_name_file_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calibrator = tmp_path / "cal.json"
    assert main(["fit", str(BAD / "one_class.csv"), "--out", str(calibrator)]) == 1
    assert "all 6 usable answers are labeled correct (1), so no calibrator can be fitted" in capsys.readouterr().err
    assert main(["fit", str(BAD / "empty_answers.csv"), "--out", str(calibrator)]) == 0
    _, err = _stderr_lines(capsys)
    assert "warning: 2 empty answers (no tokens) left out: rows 4, 7" in err
    assert err[-2].startswith("fitted TRACE+ (paper) on 7 answers (")
    assert err[-1].startswith("warning: a calibrator fitted on fewer than 100 answers")
    # row 2 is rejected, so the empty answers are the 3rd and 6th kept rows: the message must give file rows
    assert main(["flag", str(BAD / "empty_answers.csv"), "--calibrator", str(calibrator), "--threshold", "0.5",
                 "--out", str(tmp_path / "flagged.csv")]) == 1
    _, err = _stderr_lines(capsys)
    assert err[-1].endswith("2 empty answers (no tokens) cannot be scored: rows 4, 7; remove them or record "
                            "them again")


# --------------------------------------------------------------------------------------------------
# (c) the Calibrate page, through an upload (a file read by "File path" is named but not described: see
# tests/hostile/test_security_files.py)
# --------------------------------------------------------------------------------------------------

def _calibrate_page(path: Path, monkeypatch: pytest.MonkeyPatch, by_path: bool = False) -> Any:
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["model_source"] = "Local folder or cached model id"  # no model: nothing to load
    if by_path:  # "File path", reading inside the file's folder
        monkeypatch.setenv("TRACE_LOCAL_FILES", "1")
        monkeypatch.setenv("TRACE_DATA_DIR", str(path.parent))
        at.session_state["data_source"] = "File path"
        at.session_state["data_path"] = str(path)
    else:
        at.session_state["data_source"] = "Upload a file"
    at.session_state["n_splits"] = 2
    at.session_state["stratified"] = True
    at.run()
    at.switch_page("../pages/calibrate.py").run()
    if not by_path:
        at.file_uploader(key="upload").set_value((path.name, path.read_bytes(), "application/octet-stream")).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _texts(elements: Any) -> list[str]:
    # The page shows untrusted text with punctuation as character references (md_literal); read it decoded.
    return [html.unescape(e.value) for e in elements]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_calibrate_page(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _calibrate_page(BAD / case.name, monkeypatch)
    errors, alerts = _texts(at.error), _texts(at.error) + _texts(at.warning) + _texts(at.info)
    if case.file_error:
        assert len(errors) == 1 and errors[0].startswith(f"{case.name}: ")
        for fragment in case.file_error:
            assert fragment in errors[0]
        assert not at.success and not at.dataframe
        return
    if case.row_errors:
        assert f"{_summary(case)}." in _texts(at.warning)
        rejected = at.dataframe[0].value  # the "Rejected rows and why" table
        assert rejected["row"].tolist() == [row for row, _, _ in case.row_errors]
        assert rejected["column"].tolist() == [column for _, column, _ in case.row_errors]
        for problem, (_, _, fragment) in zip(rejected["problem"], case.row_errors, strict=True):
            assert fragment in problem
    else:
        kept = "1 row read, kept." if case.n_read == 1 else f"{case.n_read:,} rows read, all kept."
        assert _texts(at.success) == [kept]
    for note in case.page_notes:
        assert any(note in text for text in alerts), (note, alerts)
    if case.cli_error:  # the page stops where the command line does
        assert len(at.get("plotly_chart")) == 0
    else:
        assert not errors
        assert len(at.get("plotly_chart")) == 3
        metrics = next(d.value for d in at.dataframe if "family" in d.value.columns)
        assert {"TRACE+", "TRACE", "SeqLogP"} <= set(metrics["method"])


def test_calibrate_page_refuses_a_file_over_the_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("streamlit")
    monkeypatch.setenv("TRACE_MAX_FILE_MB", "1")
    path = make_bad.write_oversize(tmp_path / "oversize.csv", 2**20)
    size = path.stat().st_size
    assert 2**20 < size < 2**20 + 1000
    at = _calibrate_page(path, monkeypatch, by_path=True)
    assert _texts(at.error) == [f"'oversize.csv' is {size:,} bytes (1.0 MB); the limit is 1,048,576 bytes "
                                f"(1 MB, TRACE_MAX_FILE_MB)."]
    assert not at.success and not at.dataframe
    dataset = _read(path)  # the library and the command line have no size limit: it is a valid file
    assert dataset.n_valid == dataset.n_read > 5_000 and dataset.has_traces


# --------------------------------------------------------------------------------------------------
# One million rows
# --------------------------------------------------------------------------------------------------

N_MILLION = 1_000_000
MILLION_BAD_ROWS = list(range(make_bad.MILLION_BAD_EVERY, N_MILLION + 1, make_bad.MILLION_BAD_EVERY))


@pytest.fixture(scope="module")
def million_rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_bad.write_million_rows(tmp_path_factory.mktemp("large") / "million_rows.csv", N_MILLION)


def test_million_rows_row_cap_stops_early(million_rows: Path) -> None:
    with pytest.raises(DatasetError, match=r"more than 100,000 data rows \(max_rows=100000\)"):
        read_dataset(million_rows, max_rows=100_000)


@pytest.mark.slow
@pytest.mark.scale
def test_million_rows_loader_keeps_and_counts_every_valid_row(million_rows: Path) -> None:
    dataset = _read(million_rows)
    assert (dataset.n_read, dataset.n_valid) == (N_MILLION, N_MILLION - len(MILLION_BAD_ROWS))
    assert [(e.row, e.field) for e in dataset.errors] == [(r, "label") for r in MILLION_BAD_ROWS]
    assert all("'maybe'" in e.message for e in dataset.errors)
    assert dataset.frame["row"].iloc[99_998:100_001].tolist() == [99_999, 100_001, 100_002]


@pytest.mark.slow
@pytest.mark.scale
def test_million_rows_cli(million_rows: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", str(million_rows), "--quiet"]) == 1
    _, err = _stderr_lines(capsys)
    assert err[0] == (f"1,000,000 rows read: 999,990 kept, 10 rejected (row 100000: label: 'maybe' {LABEL_WORDS}; "
                      f"row 200000: label: 'maybe' {LABEL_WORDS}; row 300000: label: 'maybe' {LABEL_WORDS}; "
                      "and 7 more)")
    assert err[1] == (f"error: {million_rows}: 999,990 rows have no trace (rows 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 …); "
                      "record traces first with `trace-core score DATA --model MODEL --out FILE`")
    assert len(err) == 2


@pytest.mark.slow
def test_million_rows_page_hits_the_row_cap(million_rows: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("streamlit")
    monkeypatch.setenv("TRACE_MAX_ROWS", "100000")
    at = _calibrate_page(million_rows, monkeypatch)
    assert _texts(at.error) == ["million_rows.csv: the file has more than 100,000 data rows (max_rows=100000); "
                                "split it or raise the limit"]
    assert not at.success and not at.dataframe
