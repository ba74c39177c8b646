"""Reading CSV: the delimiter told from the header (``,`` ``;`` tab ``|``), one raw row per data record (blank lines
skipped), a row with the wrong number of fields or a cell over ``max_cell_chars`` rejected with its reason.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from typing import Any

from trace_core.data.errors import DatasetError, RowError
from trace_core.data.source import Lines, Reporter, Source, cell_too_long
from trace_core.data.table import Row, Table, no_rows, normalize_columns, too_many

__all__ = ["csv_table"]

_DELIMITERS = (",", ";", "\t", "|")
_DELIMITER_NAMES = {",": "','", ";": "';'", "\t": "tab", "|": "'|'"}
_CSV_FIELD_LIMIT = 2**31 - 1  # trace cells of long answers exceed the csv module's default 128 KiB per field
_LONE_CR = re.compile(r"(?<=\r)(?!\n)")  # where CSV's universal newlines also end a line: after a \r not before \n


def _is_blank(record: list[str]) -> bool:
    return not record or (len(record) == 1 and not record[0].strip())


def _csv_lines(lines: Lines) -> Iterator[str]:
    """``lines`` as the csv module reads text opened with ``newline=''``: a lone ``\\r`` also ends a line."""
    for line in lines:
        if "\r" in line and not (line.endswith("\r\n") and line.count("\r") == 1):  # not just a "\r\n" ending
            yield from (part for part in _LONE_CR.split(line) if part)
        else:
            yield line


def _header_delimiter(src: Source, preferred: str) -> str:
    """The delimiter whose header holds the required columns (tried: , ; tab |); else the one that splits the
    header into the most columns (the preferred one on ties), so a missing column is reported by its name."""
    candidates = (preferred,) + tuple(d for d in _DELIMITERS if d != preferred)
    widths = {}
    for delimiter in candidates:
        try:
            lines = Lines(src, Reporter(None))
            header = next((r for r in csv.reader(_csv_lines(lines), delimiter=delimiter) if not _is_blank(r)), [])
        except csv.Error:
            continue
        names = {str(h).strip().lower() for h in header}
        if "prompt" in names and ({"answer", "response"} & names):
            return delimiter
        widths[delimiter] = len(header)
    return max(widths, key=lambda d: widths[d], default=preferred)  # max keeps the first of equals


def csv_table(src: Source, *, max_rows: int | None, report: Reporter) -> Table:
    """The CSV file ``src`` as a :class:`Table`: its header read here, its rows as ``rows`` is consumed."""
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)  # only ever raised, never lowered: harmless for other readers
    delimiter = _header_delimiter(src, "\t" if src.name.lower().endswith(".tsv") else ",")
    lines = Lines(src, report)
    reader = csv.reader(_csv_lines(lines), delimiter=delimiter)
    header: list[str] | None = None
    try:
        for record in reader:
            if not _is_blank(record):
                header = normalize_columns(record)
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
    table = Table(columns=header, rows=iter(()), hint=hint,
                  again=lambda: csv_table(src, max_rows=max_rows, report=report))
    table.rows = _csv_rows(reader, lines, header, table.errors, max_rows)
    return table


def _csv_rows(reader: Any, lines: Lines, header: list[str], errors: list[RowError],
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
            too_many(max_rows, count)
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
                errors.extend(RowError(count, name, cell_too_long(len(cell), max_cell))
                              for name, cell in zip(header, record, strict=True) if len(cell) > max_cell)
                yield count, None
            else:
                yield count, dict(zip(header, record, strict=True))
    except csv.Error as exc:
        raise DatasetError(f"cannot parse the CSV near data row {count + 1}: {exc}") from None
    lines.check_not_blank()
    if not count:
        raise no_rows(header)
