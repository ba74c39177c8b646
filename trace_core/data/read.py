"""Reading tables: a path, bytes or upload -> column names and a stream of raw rows (CSV with delimiter sniffing,
JSON Lines or a JSON array, Parquet), with the checks that refuse what is not a readable table (empty, binary, not
UTF-8, too many rows, duplicate column names). Nothing is validated per cell here: see
:mod:`trace_core.data.validate`.

:func:`read_table` tells the format and hands the file to its reader: :mod:`~trace_core.data.read_csv`,
:mod:`~trace_core.data.read_jsonl` or :mod:`~trace_core.data.read_parquet`. They share the file access and the byte,
encoding, size and progress checks of :mod:`~trace_core.data.source`, and the :class:`Table` and the checks on its
header and row count of :mod:`~trace_core.data.table`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trace_core.checks import check_choice
from trace_core.data.errors import DatasetError
from trace_core.data.read_csv import csv_table
from trace_core.data.read_jsonl import jsonl_table
from trace_core.data.read_parquet import parquet_table
from trace_core.data.source import PathOrBuffer, Progress, Reporter, check_binary, open_source
from trace_core.data.table import Row, Table

__all__ = ["FORMATS", "PathOrBuffer", "Progress", "Row", "Table", "format_from_name", "read_table"]

FORMATS = ("csv", "jsonl", "parquet")

_EXTENSIONS = {".csv": "csv", ".tsv": "csv", ".txt": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
               ".parquet": "parquet", ".pq": "parquet"}
_EXTENSIONS_TEXT = ".csv/.tsv (csv), .jsonl/.json/.ndjson (jsonl), .parquet/.pq (parquet)"
_HEAD = 8192                  # bytes looked at for binary signatures


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
    src = open_source(source, max_bytes)
    src = dataclasses.replace(src, max_bytes=max_bytes, max_cell=max_cell_chars)
    fmt = format_from_name(src.name, format, "upload")
    with src.open() as stream:
        head = stream.read(_HEAD)
    if not head:
        raise DatasetError("the file is empty (0 bytes)")
    report = Reporter(progress)
    if fmt == "parquet":
        return parquet_table(src, max_rows=max_rows, report=report), fmt
    check_binary(head, fmt)
    reader = csv_table if fmt == "csv" else jsonl_table
    return reader(src, max_rows=max_rows, report=report), fmt


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
