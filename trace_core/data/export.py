"""Export for people: rows written for spreadsheets and readers, with spreadsheet formula injection neutralised."""

from __future__ import annotations

import pandas as pd

from .._checks import check_bool, check_choice
from .read import PathOrBuffer
from .write import csv_bytes, csv_text, jsonl_bytes, to_plain, write_bytes

__all__ = ["export_flagged", "sanitize_cell"]

# OWASP's list of characters that start a formula, plus their full-width forms (which spreadsheets also accept).
_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def sanitize_cell(value: object) -> object:
    """Neutralise spreadsheet formula injection in one exported cell.

    A string whose first character is ``=``, ``+``, ``-``, ``@``, tab or carriage return (OWASP's list, plus their
    full-width forms) gets a leading single quote, so spreadsheet programs show it as text instead of running it.
    A negative number written as a *string* (``"-3"``) is quoted too; numbers of numeric type are not strings and are
    returned unchanged, as is every other non-string value.

    Parameters
    ----------
    value : object
        One cell.

    Returns
    -------
    object
        The cell, quoted when it is a string that a spreadsheet would run.

    Examples
    --------
    >>> sanitize_cell("=HYPERLINK(\\"http://x\\")"), sanitize_cell(-3), sanitize_cell("ok")
    ('\\'=HYPERLINK("http://x")', -3, 'ok')
    """
    if isinstance(value, str) and value.startswith(_FORMULA_PREFIXES):
        return "'" + value
    return value


def export_flagged(frame: pd.DataFrame, dest: PathOrBuffer, *, format: str = "csv",
                   sanitize: bool | None = None) -> None:
    """Export rows (e.g. the flagged answers) for people, as CSV or JSON Lines.

    Parameters
    ----------
    frame : pandas.DataFrame
        The rows to export, every column as is (lists and dicts become JSON text in CSV).
    dest : str, Path, or binary or text file-like
    format : {"csv", "jsonl"}
    sanitize : bool or None
        Pass every text cell (and column name) through :func:`sanitize_cell`. None (default): True for CSV, which
        spreadsheets open, and False for JSON Lines, which programs read and where a changed value (``"-3"`` ->
        ``"'-3"``) would be a corruption rather than a protection.

    Examples
    --------
    >>> import io
    >>> buffer = io.BytesIO()
    >>> export_flagged(pd.DataFrame({"answer": ["=1+1"]}), buffer)
    >>> buffer.getvalue()
    b"answer\\r\\n'=1+1\\r\\n"
    """
    check_choice(format, "format", ("csv", "jsonl"))
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"`frame` must be a pandas DataFrame, got {type(frame).__name__}")
    sanitize = format == "csv" if sanitize is None else check_bool(sanitize, "sanitize")
    clean = sanitize_cell if sanitize else (lambda v: v)
    header = [str(clean(str(c))) for c in frame.columns]
    if format == "csv":
        # Sanitise before turning values into text: numbers of numeric type are not strings and stay as they are.
        rows = ([csv_text(clean(to_plain(v))) for v in values]
                for values in frame.itertuples(index=False, name=None))
        data = csv_bytes(header, rows)
    else:
        records = ({h: clean(to_plain(v)) for h, v in zip(header, values)}
                   for values in frame.itertuples(index=False, name=None))
        data = jsonl_bytes(records)
    write_bytes(dest, data)
