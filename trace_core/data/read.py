"""Reading tables: a path, bytes or upload -> column names and raw rows (CSV with delimiter sniffing, JSON Lines or
a JSON array, Parquet), with the checks that refuse what is not a readable table (empty, binary, not UTF-8, too many
rows, duplicate column names). Nothing is validated per cell here: see :mod:`trace_core.data.validate`.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Sequence, Union

import pandas as pd

from .._checks import check_choice
from ._values import show
from .errors import DatasetError, RowError

__all__ = ["FORMATS", "PathOrBuffer", "Table", "format_from_name", "read_table"]

FORMATS = ("csv", "jsonl", "parquet")

PathOrBuffer = Union[str, Path, IO[bytes], IO[str]]

_EXTENSIONS = {".csv": "csv", ".tsv": "csv", ".txt": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
               ".parquet": "parquet", ".pq": "parquet"}
_EXTENSIONS_TEXT = ".csv/.tsv (csv), .jsonl/.json/.ndjson (jsonl), .parquet/.pq (parquet)"
_DELIMITERS = (",", ";", "\t", "|")
_DELIMITER_NAMES = {",": "','", ";": "';'", "\t": "tab", "|": "'|'"}
_CSV_FIELD_LIMIT = 2**31 - 1  # trace cells of long answers exceed the csv module's default 128 KiB per field


@dataclass
class Table:
    """A file's rows as read, before any cell is validated."""

    columns: list[str]                      # normalized names, in file order
    rows: list[dict[str, Any] | None]       # one per data row; None where the row could not be parsed
    errors: list[RowError] = field(default_factory=list)
    frame: pd.DataFrame | None = None       # Parquet: the typed frame of all rows, normalized names
    hint: str = ""                          # added to the missing-column message


def read_table(source: PathOrBuffer | bytes, *, format: str | None, max_rows: int | None) -> tuple[Table, str]:
    """Read a file into a :class:`Table` of raw rows.

    Parameters
    ----------
    source : str, Path, bytes or binary file-like
        See :func:`trace_core.data.read_dataset`.
    format : {"csv", "jsonl", "parquet"} or None
        None: from the extension of the path or of the buffer's ``.name``.
    max_rows : int or None
        Refuse files with more data rows than this.

    Returns
    -------
    (Table, str)
        The table, with at least one data row, and the format it was read as.

    Raises
    ------
    DatasetError
        Empty, binary, not UTF-8, not a table, duplicate column names, too many rows, no data rows, or the format
        cannot be told.
    """
    data, name = _read_source(source)
    fmt = format_from_name(name, format, "upload")
    if not data:
        raise DatasetError("the file is empty (0 bytes)")
    if fmt == "parquet":
        table = _read_parquet(data, max_rows=max_rows)
    else:
        text = _decode_text(data, fmt)
        if not text.strip():
            raise DatasetError("the file is empty (only whitespace)")
        table = _read_csv(text, name=name, max_rows=max_rows) if fmt == "csv" else _read_jsonl(text,
                                                                                               max_rows=max_rows)
    if not table.rows:
        raise DatasetError(f"no data rows: the file has columns {table.columns} but no rows below the header")
    return table, fmt


def _read_source(source: object) -> tuple[bytes, str]:
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no dataset file at {str(path)!r}")
        return path.read_bytes(), path.name
    if isinstance(source, (bytes, bytearray)):
        return bytes(source), ""
    if hasattr(source, "read"):
        if hasattr(source, "seek"):
            try:  # Streamlit's UploadedFile (a BytesIO) may have been read already
                source.seek(0)
            except (OSError, ValueError):
                pass
        data = source.read()
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"`source.read()` must return bytes, got {type(data).__name__}")
        return bytes(data), str(getattr(source, "name", "") or "")
    raise TypeError(f"`source` must be a path or a binary file-like object, got {type(source).__name__}")


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


def _check_binary(data: bytes, format: str) -> None:
    head = data[:8192]
    signatures = ((b"PAR1", "a Parquet file: use format='parquet' or a .parquet extension"),
                  (b"PK\x03\x04", "a ZIP archive (an Excel .xlsx workbook?): save it as CSV UTF-8"),
                  (b"\x1f\x8b", "gzip-compressed: decompress it first"),
                  (b"\xff\xfe", "UTF-16 text: save it as UTF-8"), (b"\xfe\xff", "UTF-16 text: save it as UTF-8"))
    for magic, what in signatures:
        if head.startswith(magic):
            raise DatasetError(f"the file is not {format} text; it looks like {what}")
    if b"\x00" in head:
        raise DatasetError(f"the file looks binary (it contains NUL bytes), not {format} text; expected a UTF-8 "
                           f"text file")


def _decode_text(data: bytes, format: str) -> str:
    _check_binary(data, format)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise DatasetError(f"the file is not valid UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                           f"(line {line}) cannot be decoded; save the file as UTF-8 (in Excel: 'CSV UTF-8') and "
                           f"try again") from None


def _normalize_columns(raw: Sequence[object]) -> list[str]:
    names = []
    for i, name in enumerate(raw):
        norm = str(name).strip().lower()
        names.append(norm if norm else f"unnamed_{i}")  # e.g. the index column pandas writes without a name
    counts = Counter(names)
    dupes = [n for n in counts if counts[n] > 1]
    if dupes:
        groups = "; ".join(" and ".join(repr(str(r)) for r, n in zip(raw, names) if n == d) for d in dupes)
        raise DatasetError(f"duplicate column names (ignoring case and surrounding spaces): {groups}; "
                           f"each column needs a distinct name")
    return names


def _too_many(limit: int | None, count: int) -> None:
    if limit is not None and count > limit:
        raise DatasetError(f"the file has more than {limit:,} data rows (max_rows={limit}); split it or raise "
                           f"the limit")


def _is_blank(record: list[str]) -> bool:
    return not record or (len(record) == 1 and not record[0].strip())


def _header_delimiter(text: str, preferred: str) -> str:
    """The delimiter whose header holds the required columns (tried: , ; tab |); else the one that splits the
    header into the most columns (the preferred one on ties), so a missing column is reported by its name."""
    candidates = (preferred,) + tuple(d for d in _DELIMITERS if d != preferred)
    widths = {}
    for delimiter in candidates:
        try:
            header = next((r for r in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
                           if not _is_blank(r)), [])
        except csv.Error:
            continue
        names = {str(h).strip().lower() for h in header}
        if "prompt" in names and ({"answer", "response"} & names):
            return delimiter
        widths[delimiter] = len(header)
    return max(widths, key=lambda d: widths[d], default=preferred)  # max keeps the first of equals


def _read_csv(text: str, *, name: str, max_rows: int | None) -> Table:
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)  # only ever raised, never lowered: harmless for other readers
    preferred = "\t" if name.lower().endswith(".tsv") else ","
    delimiter = _header_delimiter(text, preferred)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header: list[str] | None = None
    rows: list[dict[str, Any] | None] = []
    errors: list[RowError] = []
    last_line = 0
    try:
        for record in reader:
            first_line, last_line = last_line + 1, reader.line_num
            if _is_blank(record):
                continue
            if header is None:
                header = _normalize_columns(record)
                continue
            _too_many(max_rows, len(rows) + 1)
            if len(record) != len(header):
                message = f"has {len(record)} fields but the header has {len(header)}"
                if last_line > first_line:  # an unclosed quote swallows the lines after it: say so, they are lost
                    message += (f", and it runs from line {first_line} to line {last_line} of the file: a quote on "
                                f"line {first_line} is probably never closed, so those lines were read as this one "
                                f"row")
                else:
                    message += " (a stray delimiter or quote?)"
                errors.append(RowError(len(rows) + 1, "", message))
                rows.append(None)
            else:
                rows.append(dict(zip(header, record)))
    except csv.Error as exc:
        raise DatasetError(f"cannot parse the CSV near data row {len(rows) + 1}: {exc}") from None
    if header is None:
        raise DatasetError("the file is empty (no header row)")
    hint = ""
    if len(header) == 1:
        hint = (f"; the header was read as one column, so the file may use a delimiter other than "
                f"{', '.join(_DELIMITER_NAMES[d] for d in _DELIMITERS)} -- save it as comma-separated CSV")
    return Table(columns=header, rows=rows, errors=errors, hint=hint)


def _row_from_json(obj: object, row: int, errors: list[RowError]) -> dict[str, Any] | None:
    if not isinstance(obj, dict):
        errors.append(RowError(row, "", f"is {show(obj)}; expected a JSON object {{\"prompt\": ..., ...}}"))
        return None
    out: dict[str, Any] = {}
    raw_names: dict[str, str] = {}
    for key, value in obj.items():
        norm = str(key).strip().lower() or "unnamed"
        if norm in out:
            raise DatasetError(f"duplicate column names (ignoring case and surrounding spaces) in row {row}: "
                               f"{raw_names[norm]!r} and {str(key)!r}; each key needs a distinct name")
        out[norm], raw_names[norm] = value, str(key)
    return out


def _read_jsonl(text: str, *, max_rows: int | None) -> Table:
    rows: list[dict[str, Any] | None] = []
    errors: list[RowError] = []
    if text.lstrip().startswith("["):  # a JSON array of objects (a common ".json" export)
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"the file starts like a JSON array but is not valid JSON ({exc.msg} at line "
                               f"{exc.lineno}, column {exc.colno})") from None
        _too_many(max_rows, len(items))
        for i, obj in enumerate(items, start=1):
            rows.append(_row_from_json(obj, i, errors))
    else:
        first_error = ""
        for line_no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            row = len(rows) + 1
            _too_many(max_rows, row)
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                message = f"not valid JSON ({exc.msg} at column {exc.colno})"
                first_error = first_error or f"line {line_no}: {message}"
                errors.append(RowError(row, "", message))
                rows.append(None)
                continue
            rows.append(_row_from_json(obj, row, errors))
        if rows and all(r is None for r in rows):
            raise DatasetError(f"the file is not JSON Lines: no line holds a JSON object ({first_error or errors[0]}); "
                               f"expected one object per line, like {{\"prompt\": \"...\", \"answer\": \"...\", "
                               f"\"label\": 1}}")
    columns: list[str] = []
    seen: set[str] = set()
    for r in rows:
        for key in r or ():
            if key not in seen:
                seen.add(key)
                columns.append(key)
    return Table(columns=columns, rows=rows, errors=errors)


def _read_parquet(data: bytes, *, max_rows: int | None) -> Table:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("reading Parquet needs pyarrow: pip install pyarrow") from exc
    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(f"the file is not a readable Parquet file ({exc}); expected a Parquet table") from None
    _too_many(max_rows, table.num_rows)
    columns = _normalize_columns(table.column_names)
    table = table.rename_columns(columns)
    rows: list[dict[str, Any] | None] = list(table.to_pylist())
    frame = table.to_pandas()
    return Table(columns=columns, rows=rows, frame=frame)
