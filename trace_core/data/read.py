"""Reading tables: a path, bytes or upload -> column names and a stream of raw rows (CSV with delimiter sniffing,
JSON Lines or a JSON array, Parquet), with the checks that refuse what is not a readable table (empty, binary, not
UTF-8, too many rows, duplicate column names). Nothing is validated per cell here: see
:mod:`trace_core.data.validate`. A JSON record that gives a key twice, or two keys naming one column, is a rejected
row (see :func:`_row_from_json`), not a file error.

Files are read as a stream: lines are split from the bytes on ``\\n`` only and decoded one at a time, so a reader
never holds the whole text, a list of its lines and its parsed rows at once.

(About 560 lines, over the package's ~500: the CSV, JSON Lines and Parquet readers share the header, size, encoding
and progress checks defined here, and splitting them apart would spread one set of rules over several modules.)
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pandas as pd

from .._checks import check_choice, shorten
from ._values import JsonValueError, Repeated, check_surrogates, has_surrogate_escape, loads_checked, show
from .errors import DatasetError, RowError

__all__ = ["FORMATS", "PathOrBuffer", "Progress", "Row", "Table", "format_from_name", "read_table"]

FORMATS = ("csv", "jsonl", "parquet")

PathOrBuffer = str | Path | IO[bytes] | IO[str]
#: ``progress(done, total)``: the bytes of the file read so far, and its size in bytes.
Progress = Callable[[int, int | None], None]
#: One data row as read: (its number, its cells by normalized column name, or None where it could not be parsed).
Row = tuple[int, dict[str, Any] | None]

_EXTENSIONS = {".csv": "csv", ".tsv": "csv", ".txt": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
               ".parquet": "parquet", ".pq": "parquet"}
_EXTENSIONS_TEXT = ".csv/.tsv (csv), .jsonl/.json/.ndjson (jsonl), .parquet/.pq (parquet)"
_DELIMITERS = (",", ";", "\t", "|")
_DELIMITER_NAMES = {",": "','", ";": "';'", "\t": "tab", "|": "'|'"}
_CSV_FIELD_LIMIT = 2**31 - 1  # trace cells of long answers exceed the csv module's default 128 KiB per field
_HEAD = 8192                  # bytes looked at for binary signatures
_PROGRESS_STEP = 1 << 20      # report progress about once per MiB read
_LONE_CR = re.compile(r"(?<=\r)(?!\n)")  # where CSV's universal newlines also end a line: after a \r not before \n
_PARQUET_BATCH = 4096
MAX_COLUMNS = 10_000          # columns a table may have (a header is refused beyond it, before it is used)
MAX_COLUMN_NAME = 1_000       # characters a column name may have
_SHOWN_NAMES = 10             # column names a message lists (each shortened)
_SHOWN_NAME = 60              # characters of each


@dataclass
class Table:
    """A file's rows as read, before any cell is validated.

    ``rows`` is an iterator: rows are parsed as it is consumed, and ``columns`` and ``errors`` are complete only
    once it is exhausted (a JSON Lines file's columns are the union of its records' keys, in order of appearance).
    The iterator raises :class:`DatasetError` for a problem with the whole file, at the latest when it ends.
    """

    columns: list[str]                      # normalized names, in file order
    rows: Iterator[Row]                     # one per data row (see Row), in file order
    errors: list[RowError] = field(default_factory=list)  # rows that could not be parsed
    frame: Callable[[Sequence[str]], pd.DataFrame] | None = None  # Parquet: the typed frame of these columns
    hint: str = ""                          # added to the missing-column message
    again: Callable[[], Table] | None = None  # the same file read again from its start (a second pass)


@dataclass(frozen=True)
class _Source:
    """A file that can be opened (again) as a binary stream from its start."""

    name: str
    size: int | None
    open: Callable[[], contextlib.AbstractContextManager[IO[bytes]]]
    max_bytes: int | None = None  # uncompressed bytes the file may hold (see read_table)
    max_cell: int | None = None   # characters one text cell may hold


def _mib(n: int) -> str:
    """A size limit in words: whole MiB as such, else bytes."""
    return f"{n // 2**20:,} MiB" if n % 2**20 == 0 else f"{n:,} bytes"


def _too_big(src: _Source, size: int | None = None) -> DatasetError:
    """The one message for a file over ``max_bytes``: its name, how much it holds (when known), the limit and the
    setting that raises it."""
    limit = src.max_bytes or 0
    name = shorten(src.name) if src.name else "the file"
    what = (f"{size:,} bytes ({size / 2**20:,.1f} MiB) of data uncompressed, by its metadata" if size is not None
            else f"more than {_mib(limit)} of data")
    return DatasetError(f"{name} holds {what}; the limit is {_mib(limit)} (TRACE_MAX_DATA_MB, or "
                        f"read_dataset(max_bytes=...))")


def _cell_too_long(chars: int, limit: int) -> str:
    """The row error's message for a text cell over ``max_cell_chars``."""
    return (f"is {chars:,} characters long; a cell may hold at most {limit:,} (TRACE_MAX_CELL_MB, or "
            f"read_dataset(max_cell_chars=...))")


def read_table(source: PathOrBuffer | bytes, *, format: str | None, max_rows: int | None,
               progress: Progress | None = None, max_bytes: int | None = None,
               max_cell_chars: int | None = None) -> tuple[Table, str]:
    """Open a file as a :class:`Table` of raw rows, read as its ``rows`` are consumed.

    Parameters
    ----------
    source : str, Path, bytes or binary file-like
        See :func:`trace_core.data.read_dataset`.
    format : {"csv", "jsonl", "parquet"} or None
        None: from the extension of the path or of the buffer's ``.name``.
    max_rows : int or None
        Refuse files with more data rows than this.
    progress : callable(done, total) or None
        Called about once per MiB and at the end with the bytes read so far (Parquet: the file's size times the
        share of rows read) and the file's size; ``done`` never decreases.
    max_bytes : int or None
        Refuse a file that holds more bytes than this once decompressed: counted as text is read (CSV, JSON Lines),
        from the metadata before any row is read and then batch by batch as decoded (Parquet). None: no limit.
    max_cell_chars : int or None
        A text cell (a CSV field, a JSON Lines record's string value, a Parquet string) longer than this rejects
        its row. None: no limit.

    Returns
    -------
    (Table, str)
        The table and the format it is read as.

    Raises
    ------
    DatasetError
        Empty, binary, not UTF-8, not a table, duplicate column names, too many rows, more than ``max_bytes``, no
        data rows, or the format cannot be told; some of these only while ``rows`` is consumed.
    """
    src = _open_source(source, max_bytes)
    src = dataclasses.replace(src, max_bytes=max_bytes, max_cell=max_cell_chars)
    fmt = format_from_name(src.name, format, "upload")
    with src.open() as stream:
        head = stream.read(_HEAD)
    if not head:
        raise DatasetError("the file is empty (0 bytes)")
    report = _Reporter(progress)
    if fmt == "parquet":
        return _read_parquet(src, max_rows=max_rows, report=report), fmt
    _check_binary(head, fmt)
    reader = _read_csv if fmt == "csv" else _read_jsonl
    return reader(src, max_rows=max_rows, report=report), fmt


def _open_source(source: object, max_bytes: int | None = None) -> _Source:
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no dataset file at {str(path)!r}")
        return _Source(path.name, path.stat().st_size, lambda: open(path, "rb"))
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
        return _Source("", len(data), lambda: io.BytesIO(data))
    if not hasattr(source, "read"):
        raise TypeError(f"`source` must be a path or a binary file-like object, got {type(source).__name__}")
    name = str(getattr(source, "name", "") or "")
    if isinstance(source, io.IOBase) and _seekable(source):  # read in place, rewound for every pass (Streamlit's
        # UploadedFile, a BytesIO, may have been read already)
        buffer: Any = source
        size = buffer.seek(0, os.SEEK_END)
        buffer.seek(0)
        if isinstance(buffer.read(0), (bytes, bytearray)):

            def rewound() -> contextlib.AbstractContextManager[IO[bytes]]:
                buffer.seek(0)
                return contextlib.nullcontext(buffer)  # the caller's buffer stays open

            return _Source(name, size, rewound)
    data = _read_all(source, name, max_bytes)  # a text buffer or a pipe: read once, kept as bytes
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")  # a lone surrogate then fails as "not valid UTF-8"
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"`source.read()` must return bytes, got {type(data).__name__}")
    data = bytes(data)
    return _Source(name, len(data), lambda: io.BytesIO(data))


def _read_all(source: Any, name: str, max_bytes: int | None) -> Any:
    """Everything ``source.read`` gives, a MiB at a time and never more than ``max_bytes`` (+ one MiB)."""
    parts: list[Any] = []  # all str or all bytes, as read() gives them (a mix fails in join, a TypeError)
    size = 0
    while True:
        part = source.read(_PROGRESS_STEP)
        if not isinstance(part, (str, bytes, bytearray)):
            raise TypeError(f"`source.read()` must return bytes, got {type(part).__name__}")
        if not part:
            break
        parts.append(part)
        size += len(part)
        if max_bytes is not None and size > max_bytes:
            raise _too_big(_Source(name, None, contextlib.nullcontext, max_bytes))  # type: ignore[arg-type]
    return "".join(parts) if parts and isinstance(parts[0], str) else b"".join(parts)


def _seekable(source: Any) -> bool:
    try:
        if not hasattr(source, "seek") or (hasattr(source, "seekable") and not source.seekable()):
            return False
        source.seek(0)
        return True
    except (OSError, ValueError, AttributeError):
        return False


class _Reporter:
    """Forwards progress to the caller's callback at most about once per MiB, never with a smaller ``done``."""

    def __init__(self, callback: Progress | None) -> None:
        self.callback, self.last, self.next = callback, -1, 0

    def __call__(self, done: int, total: int | None, *, final: bool = False) -> None:
        if self.callback is None or done <= self.last:
            return
        if final or done >= self.next:
            self.callback(done, total)
            self.last, self.next = done, done + _PROGRESS_STEP


def format_from_name(name: str, format: str | None, what: str) -> str:
    """``format`` when given (checked), else the format its extension names; ``what`` names the file in messages."""
    if format is not None:
        return check_choice(format, "format", FORMATS)
    suffix = Path(name).suffix.lower() if name else ""
    if suffix in _EXTENSIONS:
        return _EXTENSIONS[suffix]
    shown = repr(name) if name else f"this {what} (it has no name)"
    raise DatasetError(f"cannot tell the format of {shown} from its extension; expected one of {_EXTENSIONS_TEXT}, "
                       f"or pass format= one of {FORMATS}")


def _check_binary(head: bytes, format: str) -> None:
    signatures = ((b"PAR1", "a Parquet file: use format='parquet' or a .parquet extension"),
                  (b"PK\x03\x04", "a ZIP archive (an Excel .xlsx workbook?): save it as CSV UTF-8"),
                  (b"\x1f\x8b", "gzip-compressed: decompress it first"),
                  (b"\xff\xfe\x00\x00", "UTF-32 text: save it as UTF-8"),  # before UTF-16: its BOM starts alike
                  (b"\x00\x00\xfe\xff", "UTF-32 text: save it as UTF-8"),
                  (b"\xff\xfe", "UTF-16 text: save it as UTF-8"), (b"\xfe\xff", "UTF-16 text: save it as UTF-8"))
    for magic, what in signatures:
        if head.startswith(magic):
            raise DatasetError(f"the file is not {format} text; it looks like {what}")
    if b"\x00" in head:
        raise DatasetError(f"the file looks binary (it contains NUL bytes), not {format} text; expected a UTF-8 "
                           f"text file")


class _Lines:
    """The decoded lines of a UTF-8 file, split on ``\\n`` only (each keeps its line ending).

    Not ``str.splitlines``: that also splits on U+2028, U+2029, U+0085, U+000B, U+000C and U+001C-U+001E, which JSON
    strings may hold raw, so records were cut in two and every later line number was off. ``blank`` records whether
    the text seen so far is only whitespace.
    """

    def __init__(self, src: _Source, report: _Reporter) -> None:
        self.src, self.report = src, report
        self.number = 0       # 1-based number of the last line returned
        self.blank = True

    def __iter__(self) -> Iterator[str]:
        done, limit = 0, self.src.max_bytes
        with self.src.open() as stream:
            readline = stream.readline
            while True:  # a binary stream's lines end at b"\n" only, and a UTF-8 "\n" byte is always "\n"
                raw = readline() if limit is None else readline(limit - done + 1)  # never more than the limit
                if not raw:
                    break
                if limit is not None and done + len(raw) > limit:
                    raise _too_big(self.src)
                start, done = done, done + len(raw)
                self.number += 1
                if self.number == 1 and raw.startswith(b"\xef\xbb\xbf"):  # the BOM Excel writes
                    raw, start = raw[3:], start + 3
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    offset = start + exc.start
                    raise DatasetError(f"the file is not valid UTF-8: byte 0x{raw[exc.start]:02x} at offset {offset} "
                                       f"(line {self.number}) cannot be decoded; save the file as UTF-8 (in Excel: "
                                       f"'CSV UTF-8') and try again") from None
                if self.blank and line.strip():
                    self.blank = False
                self.report(done, self.src.size)
                yield line
        self.report(done, self.src.size, final=True)

    def check_not_blank(self) -> None:
        if self.blank:
            raise DatasetError("the file is empty (only whitespace)")


def _check_header(raw: Sequence[object]) -> None:
    """Refuse a header with more than MAX_COLUMNS columns or a name longer than MAX_COLUMN_NAME characters: no
    table has them, and every message that lists columns would otherwise echo them."""
    if len(raw) > MAX_COLUMNS:
        raise DatasetError(f"the file has {len(raw):,} columns; at most {MAX_COLUMNS:,} are read (a dataset needs "
                           f"`prompt`, `answer` and `label` or `reference`, plus optional trace columns)")
    for i, name in enumerate(raw):
        if len(str(name)) > MAX_COLUMN_NAME:
            raise DatasetError(f"column {i + 1}'s name is {len(str(name)):,} characters long "
                               f"({shorten(str(name), _SHOWN_NAME)}); column names may be at most "
                               f"{MAX_COLUMN_NAME:,} characters")


def columns_text(columns: Sequence[object]) -> str:
    """A list of column names for a message: the first few, each shortened."""
    shown = ", ".join(shorten(str(c), _SHOWN_NAME) for c in columns[:_SHOWN_NAMES])
    more = f", ... ({len(columns):,} in all)" if len(columns) > _SHOWN_NAMES else ""
    return f"[{shown}{more}]"


def _normalize_columns(raw: Sequence[object]) -> list[str]:
    _check_header(raw)
    names = []
    for i, name in enumerate(raw):
        norm = str(name).strip().lower()
        names.append(norm if norm else f"unnamed_{i}")  # e.g. the index column pandas writes without a name
    counts = Counter(names)
    dupes = [n for n in counts if counts[n] > 1]
    if dupes:
        groups = "; ".join(" and ".join(shorten(str(r), _SHOWN_NAME) for r, n in zip(raw, names) if n == d)
                           for d in dupes[:_SHOWN_NAMES])
        raise DatasetError(f"duplicate column names (ignoring case and surrounding spaces): {groups}; "
                           f"each column needs a distinct name")
    return names


def _too_many(limit: int | None, count: int) -> None:
    if limit is not None and count > limit:
        raise DatasetError(f"the file has more than {limit:,} data rows (max_rows={limit}); split it or raise "
                           f"the limit")


def _no_rows(columns: Sequence[str]) -> DatasetError:
    return DatasetError(f"no data rows: the file has columns {columns_text(columns)} but no rows below the header")


# --------------------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------------------

def _is_blank(record: list[str]) -> bool:
    return not record or (len(record) == 1 and not record[0].strip())


def _csv_lines(lines: _Lines) -> Iterator[str]:
    """``lines`` as the csv module reads text opened with ``newline=''``: a lone ``\\r`` also ends a line."""
    for line in lines:
        if "\r" in line and not (line.endswith("\r\n") and line.count("\r") == 1):  # not just a "\r\n" ending
            yield from (part for part in _LONE_CR.split(line) if part)
        else:
            yield line


def _header_delimiter(src: _Source, preferred: str) -> str:
    """The delimiter whose header holds the required columns (tried: , ; tab |); else the one that splits the
    header into the most columns (the preferred one on ties), so a missing column is reported by its name."""
    candidates = (preferred,) + tuple(d for d in _DELIMITERS if d != preferred)
    widths = {}
    for delimiter in candidates:
        try:
            lines = _Lines(src, _Reporter(None))
            header = next((r for r in csv.reader(_csv_lines(lines), delimiter=delimiter) if not _is_blank(r)), [])
        except csv.Error:
            continue
        names = {str(h).strip().lower() for h in header}
        if "prompt" in names and ({"answer", "response"} & names):
            return delimiter
        widths[delimiter] = len(header)
    return max(widths, key=lambda d: widths[d], default=preferred)  # max keeps the first of equals


def _read_csv(src: _Source, *, max_rows: int | None, report: _Reporter) -> Table:
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)  # only ever raised, never lowered: harmless for other readers
    delimiter = _header_delimiter(src, "\t" if src.name.lower().endswith(".tsv") else ",")
    lines = _Lines(src, report)
    reader = csv.reader(_csv_lines(lines), delimiter=delimiter)
    header: list[str] | None = None
    try:
        for record in reader:
            if not _is_blank(record):
                header = _normalize_columns(record)
                break
    except csv.Error as exc:
        raise DatasetError(f"cannot parse the CSV near data row 1: {exc}") from None
    if header is None:
        lines.check_not_blank()
        raise DatasetError("the file is empty (no header row)")
    hint = ""
    if len(header) == 1:
        hint = (f"; the header was read as one column, so the file may use a delimiter other than "
                f"{', '.join(_DELIMITER_NAMES[d] for d in _DELIMITERS)} -- save it as comma-separated CSV")
    table = Table(columns=header, rows=iter(()), hint=hint, again=lambda: _read_csv(src, max_rows=max_rows,
                                                                                     report=report))
    table.rows = _csv_rows(reader, lines, header, table.errors, max_rows)
    return table


def _csv_rows(reader: Any, lines: _Lines, header: list[str], errors: list[RowError],
              max_rows: int | None) -> Iterator[Row]:
    """The data rows below the header, numbered from 1 (blank lines are skipped and not counted)."""
    count, last_line = 0, reader.line_num
    max_cell = lines.src.max_cell
    try:
        for record in reader:
            first_line, last_line = last_line + 1, reader.line_num
            if _is_blank(record):
                continue
            count += 1
            _too_many(max_rows, count)
            if len(record) != len(header):
                message = f"has {len(record)} fields but the header has {len(header)}"
                if last_line > first_line:  # an unclosed quote swallows the lines after it: say so, they are lost
                    message += (f", and it runs from line {first_line} to line {last_line} of the file: a quote on "
                                f"line {first_line} is probably never closed, so those lines were read as this one "
                                f"row")
                else:
                    message += " (a stray delimiter or quote?)"
                errors.append(RowError(count, "", message))
                yield count, None
            elif max_cell is not None and max(map(len, record)) > max_cell:  # one C call per row
                errors.extend(RowError(count, name, _cell_too_long(len(cell), max_cell))
                              for name, cell in zip(header, record) if len(cell) > max_cell)
                yield count, None
            else:
                yield count, dict(zip(header, record))
    except csv.Error as exc:
        raise DatasetError(f"cannot parse the CSV near data row {count + 1}: {exc}") from None
    lines.check_not_blank()
    if not count:
        raise _no_rows(header)


# --------------------------------------------------------------------------------------------------
# JSON Lines and JSON arrays
# --------------------------------------------------------------------------------------------------

def _column_name(key: object) -> str:
    return str(key).strip().lower() or "unnamed"


def _row_from_json(obj: object, row: int, errors: list[RowError],
                   repeated: Sequence[Repeated] = ()) -> tuple[dict[str, Any] | None, bool]:
    """One record's cells by column name (None when it is not an object), and whether it is valid: not when it gives
    a key twice (``repeated``: the objects that do, by their path from ``obj``) or two keys that name one column.
    The problems go to ``errors``.

    Such a record is rejected, never read as ``json`` would (keeping the last value): which value was meant is
    unknown, and the other one would be lost silently. This holds for objects nested in a cell (a ``response``)
    too. Its keys still count as the file's columns."""
    if not isinstance(obj, dict):
        errors.append(RowError(row, "", f"is {show(obj)}; expected a JSON object {{\"prompt\": ..., ...}}"))
        return None, False
    problems = []
    for found in repeated:
        if not found.path:  # the record itself
            for key, times in found.keys:
                count = "twice" if times == 2 else f"{times:,} times"
                problems.append(RowError(row, _column_name(key), f"the key {show(key)} is given {count} in this "
                                         f"record; JSON keeps only the last value, so the others would be lost "
                                         f"silently -- keep one"))
        else:
            problems.append(RowError(row, _column_name(found.path[0]), found.message(found.path)))
    out: dict[str, Any] = {}
    raw_names: dict[str, str] = {}
    for key, value in obj.items():
        norm = _column_name(key)
        if norm in out:
            problems.append(RowError(row, norm, f"the keys {show(raw_names[norm])} and {show(str(key))} name the same "
                                                f"column (names are matched ignoring case and surrounding spaces); "
                                                f"each key needs a distinct name"))
            continue
        out[norm], raw_names[norm] = value, str(key)
    errors.extend(problems)
    return out, not problems


def _read_jsonl(src: _Source, *, max_rows: int | None, report: _Reporter) -> Table:
    table = Table(columns=[], rows=iter(()), again=lambda: _read_jsonl(src, max_rows=max_rows, report=report))
    table.rows = _jsonl_rows(_Lines(src, report), table, max_rows)
    return table


def _jsonl_rows(lines: _Lines, table: Table, max_rows: int | None) -> Iterator[Row]:  # noqa: C901 (one branch per malformed-line case)
    """One row per non-blank line, numbered by its line in the file (blank lines hold no row but are counted), or
    one per item of a JSON array; ``table.columns`` grows as new keys appear."""
    seen: set[str] = set()
    count, objects, first_error = 0, 0, ""
    is_array: bool | None = None
    max_cell = lines.src.max_cell
    stream = iter(lines)  # one pass: the array case below reads the rest of this same pass
    for line in stream:
        if not line.strip():
            continue
        if is_array is None:
            is_array = line.lstrip().startswith("[")
            if is_array:  # a JSON array of objects (a common ".json" export): parsed whole, numbered by item
                text = "\n" * (lines.number - 1) + line + "".join(stream)
                items, in_items = _json_array(text)
                escapes, long_text = has_surrogate_escape(text), max_cell is not None and len(text) > max_cell
                del text
                break
        count += 1
        _too_many(max_rows, count)
        line = line[:-1] if line.endswith("\n") else line  # without its ending, so error columns are on its line
        line = line[:-1] if line.endswith("\r") else line  # "\r\n" endings too
        try:  # strict=False: control characters raw inside strings are kept
            obj, repeated = loads_checked(line, strict=False)
        except (json.JSONDecodeError, RecursionError) as exc:  # deep nesting is a bad row, not a crash
            message = (f"not valid JSON ({exc.msg} at column {exc.colno})" if isinstance(exc, json.JSONDecodeError)
                       else "JSON nested too deeply")
            first_error = first_error or f"line {lines.number}: {message}"
            table.errors.append(RowError(lines.number, "", message))
            yield lines.number, None
            continue
        except JsonValueError as exc:  # valid JSON, but a value Python cannot keep: a bad row, the rest is read
            objects += line.lstrip().startswith("{")
            table.errors.append(_value_error(exc, lines.number))
            yield lines.number, None
            continue
        row, valid = _row_from_json(obj, lines.number, table.errors, repeated)
        if row is not None:  # an object, even one rejected for its keys: the file is JSON Lines, and has its keys
            objects += 1
            _add_columns(table.columns, seen, row)
            if max_cell is not None and len(line) > max_cell:  # only then can a cell be too long
                valid = _short_cells(row, lines.number, table.errors, max_cell) and valid
        yield lines.number, row if valid else None
    if is_array:
        _too_many(max_rows, len(items))
        for i, obj in enumerate(items, start=1):
            items[i - 1] = None  # each item is dropped once handed over
            if escapes:
                try:
                    check_surrogates(obj)
                except JsonValueError as exc:
                    table.errors.append(_value_error(exc, i))
                    yield i, None
                    continue
            row, valid = _row_from_json(obj, i, table.errors, in_items.get(i - 1, ()))
            if row is not None:
                _add_columns(table.columns, seen, row)
                if long_text:
                    valid = _short_cells(row, i, table.errors, max_cell) and valid  # type: ignore[arg-type]
            yield i, row if valid else None
        count = len(items)
    lines.check_not_blank()
    if not count:
        raise _no_rows(table.columns)
    if not is_array and not objects:
        raise DatasetError(f"the file is not JSON Lines: no line holds a JSON object "
                           f"({first_error or table.errors[0]}); expected one object per line, like "
                           f"{{\"prompt\": \"...\", \"answer\": \"...\", \"label\": 1}}")


def _value_error(exc: JsonValueError, row: int) -> RowError:
    """The row error for a record (or array item) holding a value Python cannot keep, naming its column."""
    if exc.path and isinstance(exc.path[0], str):
        return RowError(row, _column_name(exc.path[0]), exc.message_in(exc.path[1:]))
    return RowError(row, "", exc.message)


def _short_cells(row: dict[str, Any], number: int, errors: list[RowError], max_cell: int) -> bool:
    """Whether every text cell of ``row`` holds at most ``max_cell`` characters; each that does not is an error."""
    long = [(name, len(v)) for name, v in row.items() if type(v) is str and len(v) > max_cell]
    errors.extend(RowError(number, name, _cell_too_long(chars, max_cell)) for name, chars in long)
    return not long


def _json_array(text: str) -> tuple[list[Any], dict[int, list[Repeated]]]:
    """The items of a JSON array, and the objects in each that give a key twice (by item index; paths from it).
    Lone surrogates are not looked for: the caller checks each item (one bad item is one bad row)."""
    try:
        items, repeated = loads_checked(text, surrogates=False)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"the file starts like a JSON array but is not valid JSON ({exc.msg} at line "
                           f"{exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise DatasetError("the file starts like a JSON array but its JSON is nested too deeply") from None
    except JsonValueError as exc:
        raise DatasetError(f"the file starts like a JSON array but it {exc.message}") from None
    by_item: dict[int, list[Repeated]] = {}
    for found in repeated:  # every path starts with an item's index: the document is a list
        by_item.setdefault(int(found.path[0]), []).append(Repeated(found.path[1:], found.keys))
    return items, by_item


def _add_columns(columns: list[str], seen: set[str], row: dict[str, Any]) -> None:
    if len(row) > len(seen) or not seen.issuperset(row):
        for key in row:
            if key not in seen:
                if len(seen) >= MAX_COLUMNS or len(key) > MAX_COLUMN_NAME:
                    _check_header([*columns, *(k for k in row if k not in seen)])
                seen.add(key)
                columns.append(key)


# --------------------------------------------------------------------------------------------------
# Parquet
# --------------------------------------------------------------------------------------------------

def _read_parquet(src: _Source, *, max_rows: int | None, report: _Reporter) -> Table:  # noqa: C901 (one branch per Parquet schema case)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("reading Parquet needs pyarrow: pip install pyarrow") from exc
    try:
        with src.open() as stream:
            metadata = pq.ParquetFile(stream).metadata
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(f"the file is not a readable Parquet file ({exc}); expected a Parquet table") from None
    _too_many(max_rows, metadata.num_rows)
    groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    if src.max_bytes is not None:  # refused before a page is decompressed: a few KB may unpack to gigabytes
        total = sum(group.total_byte_size for group in groups)
        if total > src.max_bytes:
            raise _too_big(src, total)
    schema = metadata.schema.to_arrow_schema()
    raw_names = list(schema.names)
    columns = _normalize_columns(raw_names)
    # Text columns stored with a dictionary are read as dictionaries, so that a batch's size once decoded is known
    # before it is decoded (one stored value may be repeated in every row); see _decoded_size.
    texts = {name for name in raw_names if _is_text(schema.field(name).type)}
    as_dictionary = sorted({chunk.path_in_schema for group in groups for chunk in map(group.column,
                                                                                       range(group.num_columns))
                            if chunk.has_dictionary_page and chunk.physical_type == "BYTE_ARRAY"
                            and chunk.path_in_schema.split(".")[0] in texts})

    def _bytes_of(rows: int) -> int:  # progress in bytes, like text files: the share of the rows read
        return (src.size or 0) * rows // max(metadata.num_rows, 1)

    def frame(wanted: Sequence[str]) -> pd.DataFrame:  # the typed columns, as pandas converts them
        names = [name for name in columns if name in set(wanted)]
        with src.open() as stream:
            table = pq.ParquetFile(stream).read(columns=[raw_names[columns.index(name)] for name in names])
        return table.rename_columns(names).to_pandas()

    def rows(row_errors: list[RowError]) -> Iterator[Row]:
        count, used = 0, 0
        with src.open() as stream:
            try:
                batches = pq.ParquetFile(stream, read_dictionary=as_dictionary or None).iter_batches(
                    batch_size=_PARQUET_BATCH)
            except (pa.ArrowException, OSError) as exc:
                raise DatasetError(f"the file is not a readable Parquet file ({exc}); expected a Parquet "
                                   f"table") from None
            while True:
                try:
                    batch = next(batches, None)
                except (pa.ArrowException, OSError) as exc:  # a damaged page, found when it is reached
                    raise DatasetError(f"the file is not a readable Parquet file ({exc}); expected a Parquet "
                                       f"table") from None
                if batch is None:
                    break
                used += sum(map(_decoded_size, batch.columns))
                if src.max_bytes is not None and used > src.max_bytes:  # before the batch is decoded
                    raise _too_big(src)
                batch = pa.RecordBatch.from_arrays(
                    [c if c.type == schema.field(i).type else c.cast(schema.field(i).type)  # dictionaries decoded
                     for i, c in enumerate(batch.columns)], names=columns)
                long = _long_cells(batch, src.max_cell) if src.max_cell is not None else {}
                for i, record in enumerate(batch.to_pylist()):
                    count += 1
                    if i in long:
                        row_errors.extend(RowError(count, name, _cell_too_long(chars, src.max_cell or 0))
                                          for name, chars in long[i])
                        yield count, None
                    else:
                        yield count, record
                report(_bytes_of(count), src.size)
        report(_bytes_of(count), src.size, final=True)
        if not count:
            raise _no_rows(columns)

    table = Table(columns=columns, rows=iter(()), frame=frame,
                  again=lambda: _read_parquet(src, max_rows=max_rows, report=report))
    table.rows = rows(table.errors)
    return table


def _is_text(kind: Any) -> bool:
    """A string or binary Arrow type, or a list of them (a Parquet column whose values may be read as dictionaries)."""
    import pyarrow as pa

    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind) or (
        pa.types.is_large_binary(kind))


def _decoded_size(array: Any) -> int:
    """The bytes ``array`` takes once its dictionaries are decoded, found without decoding them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_dictionary(kind):  # each row's value's bytes, and its offset
        lengths = pc.take(pc.binary_length(array.dictionary), array.indices)
        return int(pc.sum(lengths).as_py() or 0) + 8 * len(array)
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and pa.types.is_dictionary(kind.value_type):
        return 8 * (len(array) + 1) + _decoded_size(array.flatten())
    return int(array.nbytes)


def _long_cells(batch: Any, max_cell: int) -> dict[int, list[tuple[str, int]]]:
    """The rows of ``batch`` (by index) holding a string or binary cell longer than ``max_cell``, with each such
    cell's column and length (characters; bytes for binary)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    long: dict[int, list[tuple[str, int]]] = {}
    for name, column in zip(batch.schema.names, batch.columns):
        kind = column.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            lengths = pc.utf8_length(column)
        elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            lengths = pc.binary_length(column)
        else:
            continue
        if (pc.max(lengths).as_py() or 0) > max_cell:
            values = lengths.to_pylist()
            for i, chars in enumerate(values):
                if chars is not None and chars > max_cell:
                    long.setdefault(i, []).append((name, chars))
    return long
