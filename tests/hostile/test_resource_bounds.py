"""Reading is bounded: a small compressed file never unpacks to gigabytes (Parquet is refused from its metadata,
before a page is decompressed), text is counted as it is read, long cells reject their row, the dashboard's shared
dataset cache is bounded by size, nothing opens a device or a FIFO, and a JSON value Python cannot keep (a lone
surrogate, an integer of more than 4,300 digits) is one bad row, never the end of the file. Messages stay one line.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tracemalloc
import warnings
from pathlib import Path

import pandas as pd
import pytest
from helpers import synthetic_trace_objects

from trace_core import DatasetError, read_dataset, write_dataset
from trace_core.cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20
GOOD = '{"prompt": "q", "answer": "a", "label": 1}\n'


def _read(source, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_dataset(source, **options)


def _errors(dataset) -> list[tuple[int, str]]:
    return [(e.row, e.field) for e in dataset.errors]


class _Measured:
    """Peak Python allocations (tracemalloc) and peak Arrow allocations (a proxy of Arrow's default pool) in a
    block."""

    def __enter__(self) -> _Measured:
        self.old_pool = pa.default_memory_pool()
        self.pool = pa.proxy_memory_pool(self.old_pool)
        pa.set_memory_pool(self.pool)
        tracemalloc.start()
        return self

    def __exit__(self, *exc) -> None:
        self.python = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        pa.set_memory_pool(self.old_pool)
        self.arrow = self.pool.max_memory()


# --------------------------------------------------------------------------------------------------
# Item 8: decompressed size and cell size are bounded
# --------------------------------------------------------------------------------------------------

def _parquet(path: Path, prompts: list[str]) -> int:
    """Write a labeled Parquet file (zstd) with these prompts; return its uncompressed size (Arrow's bytes)."""
    n = len(prompts)
    table = pa.table({"prompt": prompts, "answer": ["a"] * n, "label": [1] * n})
    pq.write_table(table, path, compression="zstd")
    return table.nbytes


def test_a_parquet_bomb_is_refused_from_its_metadata_before_it_is_decompressed(tmp_path, monkeypatch):
    path = tmp_path / "bomb.parquet"
    size = _parquet(path, [f"{i:08d}" + "a" * 8_000 for i in range(2_000)])  # 2,000 distinct 8 KB prompts
    assert path.stat().st_size < 50_000 < 15 * MIB < size  # a few KB on disk, 16 MB unpacked
    total = pq.ParquetFile(path).metadata.row_group(0).total_byte_size
    monkeypatch.setenv("TRACE_MAX_DATA_MB", "1")
    with _Measured() as used, pytest.raises(DatasetError) as info:
        _read(path)
    assert str(info.value) == (f"'bomb.parquet' holds {total:,} bytes ({total / MIB:.1f} MiB) of data uncompressed, "
                               "by its metadata; the limit is 1 MiB (TRACE_MAX_DATA_MB, or "
                               "read_dataset(max_bytes=...))")
    assert used.python < size / 50 and used.arrow < size / 50  # refused before decompressing, not after


def test_a_parquet_bomb_of_one_repeated_value_is_refused_before_its_batch_is_decoded(tmp_path):
    path = tmp_path / "repeated.parquet"
    size = _parquet(path, ["a" * 8_000] * 2_000)  # one dictionary entry: the metadata says a few KB
    assert pq.ParquetFile(path).metadata.row_group(0).total_byte_size < 50_000 < MIB < size
    with _Measured() as used, pytest.raises(DatasetError, match=r"^'repeated.parquet' holds more than 1 MiB of data; "
                                                                r"the limit is 1 MiB \(TRACE_MAX_DATA_MB"):
        _read(path, max_bytes=MIB)
    assert used.python < size / 20 and used.arrow < size / 20


def test_parquet_within_the_limits_reads_as_before(tmp_path):
    path = tmp_path / "fine.parquet"
    _parquet(path, ["a" * 8_000] * 50 + [f"q{i}" for i in range(50)])
    dataset = _read(path, max_bytes=MIB)
    assert dataset.n_valid == 100 and dataset.frame["prompt"].iloc[0] == "a" * 8_000


@pytest.mark.parametrize("name, text", [
    ("big.csv", "prompt,answer,label\n" + "q,a,1\n" * 400_000),
    ("big.jsonl", GOOD * 100_000),
    ("one_line.csv", "prompt,answer,label\nq," + "a" * (6 * MIB)),  # no line break: never read whole
    ("one_line.jsonl", '{"prompt": "' + "q" * (6 * MIB)),
])
@pytest.mark.slow
def test_text_is_counted_as_it_is_read(name, text, tmp_path, monkeypatch):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert path.stat().st_size > 2 * MIB
    monkeypatch.setenv("TRACE_MAX_DATA_MB", "1")
    with _Measured() as used, pytest.raises(DatasetError) as info:
        _read(path)
    assert str(info.value) == (f"'{name}' holds more than 1 MiB of data; the limit is 1 MiB (TRACE_MAX_DATA_MB, or "
                               "read_dataset(max_bytes=...))")
    if name.startswith("one_line"):
        assert used.python < 4 * MIB  # at most the limit's worth of the line was read


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_cell_over_the_limit_rejects_its_row_and_the_rest_is_read(fmt, tmp_path, monkeypatch):
    frame = pd.DataFrame({"prompt": ["q1", "q" * (MIB + 5), "q3"], "answer": ["a", "b", "c"], "label": [1, 0, 1]})
    path = tmp_path / f"cells.{fmt}"
    write_dataset(frame, path)
    monkeypatch.setenv("TRACE_MAX_CELL_MB", "1")
    dataset = _read(path)
    assert dataset.frame["prompt"].tolist() == ["q1", "q3"]
    assert [(e.row, e.field, e.message) for e in dataset.errors] == [
        (2, "prompt", f"is {MIB + 5:,} characters long; a cell may hold at most {MIB:,} (TRACE_MAX_CELL_MB, or "
                      "read_dataset(max_cell_chars=...))")]
    assert _read(path, max_cell_chars=2 * MIB).n_valid == 3  # the option overrides the setting


@pytest.mark.slow
def test_the_command_line_says_the_setting_not_the_keyword(tmp_path, monkeypatch, capsys):
    path = tmp_path / "big.csv"
    path.write_text("prompt,answer,label\n" + "q,a,1\n" * 400_000, encoding="utf-8")
    monkeypatch.setenv("TRACE_MAX_DATA_MB", "1")
    assert main(["evaluate", str(path), "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: 'big.csv' holds more than 1 MiB of data; the limit is 1 MiB (TRACE_MAX_DATA_MB)"]


def test_the_dashboard_refuses_oversize_data(tmp_path, monkeypatch):
    """The dataset cache's own bounds (entries, bytes) are tested in tests/app/test_services.py."""
    pytest.importorskip("streamlit")
    from app import services

    bomb = tmp_path / "bomb.parquet"
    _parquet(bomb, [f"{i:08d}" + "a" * 8_000 for i in range(2_000)])
    monkeypatch.setenv("TRACE_MAX_DATA_MB", "1")
    with pytest.raises(DatasetError, match="the limit is 1 MiB"):
        services.read_cached(bomb.read_bytes(), "bomb.parquet", "exact")


# --------------------------------------------------------------------------------------------------
# Item 9: no preallocation of the limit; devices and FIFOs are never opened
# --------------------------------------------------------------------------------------------------

def test_a_huge_file_limit_does_not_preallocate_it(tmp_path, monkeypatch):
    pytest.importorskip("streamlit")
    from app import services

    monkeypatch.setenv("TRACE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TRACE_MAX_FILE_MB", "30000")
    path = tmp_path / "small.csv"
    path.write_bytes(b"prompt,answer,label\nq,a,1\n")
    with _Measured() as used:
        assert services.read_local_file("small.csv") == (path.read_bytes(), "small.csv")
    assert used.python < 4 * MIB


def _cli_in_a_subprocess(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """The command line in a child with 4 GiB of address space and 60 s: an endless or blocking read fails the test
    instead of exhausting the machine or hanging."""
    code = ("import resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
            "from trace_core.cli import main\n"
            f"sys.exit(main({argv!r}))\n")
    try:
        return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"{argv} blocked for 60 s")


@pytest.mark.parametrize("kind", ["fifo", "symlink to /dev/zero", "/dev/zero"])
def test_generate_refuses_a_prompts_file_that_is_not_a_regular_file(kind, tmp_path):
    if kind == "fifo":
        prompts = tmp_path / "prompts"
        os.mkfifo(prompts)  # opening it would block until someone writes
    elif kind == "/dev/zero":
        prompts = Path("/dev/zero")
    else:
        prompts = tmp_path / "prompts.txt"
        prompts.symlink_to("/dev/zero")  # reading it never ends
    done = _cli_in_a_subprocess(["generate", str(prompts), "--model", "m", "--out", str(tmp_path / "g.jsonl")],
                                tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"error: {prompts}: is not a regular file (a device, a pipe or a socket); give a file"]


@pytest.fixture()
def with_traces(tmp_path) -> Path:
    traces, y = synthetic_trace_objects(40, seed=1)
    path = tmp_path / "traces.jsonl"
    write_dataset(pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces],
                                "label": y}), path, traces=traces)
    return path


def test_flag_refuses_a_calibrator_that_is_a_fifo_before_opening_it(with_traces, tmp_path, capsys):
    fifo = tmp_path / "calibrator.json"
    os.mkfifo(fifo)
    assert main(["flag", str(with_traces), "--calibrator", str(fifo), "--threshold", "0.5", "--out",
                 str(tmp_path / "f.csv"), "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {fifo}: is not a regular file (a device, a pipe or a socket); give a file")


# --------------------------------------------------------------------------------------------------
# Item 12: a JSON value Python cannot keep is one bad row
# --------------------------------------------------------------------------------------------------

SURROGATE = "half of a UTF-16 surrogate pair without its other half, which is no character"
LONG_NUMBER = "holds a number with more than 4,300 digits; no value in a dataset needs that many"
DIGITS = "1" * 5_000


def test_lone_surrogates_and_long_integers_in_json_lines_are_row_errors(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text(GOOD + '{"prompt": "q\\ud800", "answer": "a", "label": 1}\n'
                    + '{"prompt": "q", "answer": "a", "label": 1, "unused": %s}\n' % DIGITS
                    + '{"prompt": "q", "answer": "a", "label": 1, "note": ["\\udc00"]}\n'
                    + '{"prompt": "\\ud83d\\ude00", "answer": "b", "label": 0}\n', encoding="utf-8")
    dataset = _read(path)
    assert dataset.frame["row"].tolist() == [1, 5] and dataset.frame["prompt"].iloc[1] == "\U0001F600"  # a pair
    assert [(e.row, e.field, e.message) for e in dataset.errors] == [
        (2, "prompt", f"holds '\\ud800': {SURROGATE}; remove it or give the whole character"),
        (3, "", LONG_NUMBER),
        (4, "note", f"[0] holds '\\udc00': {SURROGATE}; remove it or give the whole character")]


def test_a_json_array_item_with_a_lone_surrogate_is_one_bad_row():
    data = json.dumps([{"prompt": "q", "answer": "a", "label": 1}, {"prompt": "q\ud800", "answer": "a", "label": 1}])
    dataset = _read(io.BytesIO(data.encode()), format="jsonl")
    assert dataset.n_valid == 1 and _errors(dataset) == [(2, "prompt")]


def test_csv_cells_holding_json_and_the_fast_path_refuse_them_by_row(tmp_path):
    traces, y = synthetic_trace_objects(6, seed=2)
    path = tmp_path / "traces.csv"
    write_dataset(pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces],
                                "label": y}), path, traces=traces)
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.loc[1, "tokens"] = json.dumps(["\ud800"] * len(traces[1].tokens))
    frame.loc[3, "surprisal"] = "[" + ",".join([DIGITS] * len(traces[3].tokens)) + "]"
    frame.loc[4, "trace_metadata"] = '{"source": "\\udfff"}'
    frame.to_csv(path, index=False)
    dataset = _read(path)
    assert dataset.frame["row"].tolist() == [1, 3, 6] and dataset.has_traces
    assert [(e.row, e.field) for e in dataset.errors] == [(2, "tokens"), (4, "surprisal"), (5, "trace_metadata")]
    assert SURROGATE in dataset.errors[0].message and dataset.errors[1].message == LONG_NUMBER

    lists = tmp_path / "traces.jsonl"  # JSON Lines with trace lists: the chunk's fast path
    write_dataset(pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces],
                                "label": y}), lists, traces=traces)
    lines = lists.read_text(encoding="utf-8").splitlines()
    assert '"tokens": ["' in lines[2]
    lines[2] = lines[2].replace('"tokens": ["', '"tokens": ["\\ud800', 1)
    lists.write_text("\n".join(lines) + "\n", encoding="utf-8")
    dataset = _read(lists)
    assert dataset.n_valid == 5 and _errors(dataset) == [(3, "tokens")]


def test_the_command_line_reports_them_as_row_errors_and_goes_on(with_traces, tmp_path, capsys):
    path = tmp_path / "spoiled.jsonl"
    path.write_text(with_traces.read_text(encoding="utf-8")
                    + '{"prompt": "q\\ud800", "answer": "a", "label": 1}\n'
                    + '{"prompt": "q", "answer": "a", "label": 1, "unused": %s}\n' % DIGITS, encoding="utf-8")
    assert main(["evaluate", str(path), "--quiet", "--splits", "2", "--methods", "TRACE"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == (f"42 rows read: 40 kept, 2 rejected (row 41: prompt: holds '\\ud800': {SURROGATE}; remove it "
                      f"or give the whole character; row 42: {LONG_NUMBER})")
    assert not any(line.startswith("error") for line in err)


def test_the_dashboard_reads_them_as_row_errors():
    pytest.importorskip("streamlit")
    from app import services

    data = (GOOD + '{"prompt": "q\\ud800", "answer": "a", "label": 1}\n'
            + '{"prompt": "q", "answer": "b", "label": 0, "x": %s}\n' % DIGITS).encode()
    dataset = services.read_cached(data, "bad.jsonl", "exact")
    assert dataset.n_valid == 1 and _errors(dataset) == [(2, "prompt"), (3, "")]


# --------------------------------------------------------------------------------------------------
# Item 17: one-line messages in the command line's words
# --------------------------------------------------------------------------------------------------

def test_a_file_name_with_a_line_break_keeps_the_message_on_one_line(tmp_path, capsys):
    path = tmp_path / "bad\nname.jsonl"
    path.write_text('{"prompt": "", "answer": "a", "label": 1}\n', encoding="utf-8")
    assert main(["evaluate", str(path), "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: {str(path)!r}: no valid rows to use"


def test_a_calibrator_with_a_huge_integer_gets_one_line_in_the_users_terms(with_traces, tmp_path, capsys):
    calibrator = tmp_path / "calibrator.json"
    calibrator.write_text('{"format_version": %s}' % DIGITS, encoding="utf-8")
    assert main(["flag", str(with_traces), "--calibrator", str(calibrator), "--threshold", "0.5", "--out",
                 str(tmp_path / "f.csv"), "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {calibrator}: calibrator: a number in the file is too long (more than 4,300 digits); a calibrator's "
        "numbers have at most a few dozen")
