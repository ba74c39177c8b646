"""A table as read, before any cell is validated (:class:`Table`, one :data:`Row` per data row), and the checks on
its shape that refuse a whole file: its header (too many columns, names too long, two names for one column), more
rows than ``max_rows``, no data rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from trace_core.checks import shorten
from trace_core.data.errors import DatasetError, RowError

__all__ = ["MAX_COLUMNS", "MAX_COLUMN_NAME", "Row", "Table", "check_header", "columns_text", "no_rows",
           "normalize_columns", "too_many"]

#: One data row as read: (its number, its cells by normalized column name, or None where it could not be parsed).
#: The cells are a dict, or for Parquet a mapping that converts its trace cells when they are looked at.
Row = tuple[int, Mapping[str, Any] | None]

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


def check_header(raw: Sequence[object]) -> None:
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


def normalize_columns(raw: Sequence[object]) -> list[str]:
    check_header(raw)
    names = []
    for i, name in enumerate(raw):
        norm = str(name).strip().lower()
        names.append(norm if norm else f"unnamed_{i}")  # e.g. the index column pandas writes without a name
    counts = Counter(names)
    dupes = [n for n in counts if counts[n] > 1]
    if dupes:
        groups = "; ".join(" and ".join(shorten(str(r), _SHOWN_NAME) for r, n in zip(raw, names, strict=True) if n == d)
                           for d in dupes[:_SHOWN_NAMES])
        raise DatasetError(f"duplicate column names (ignoring case and surrounding spaces): {groups}; "
                           f"each column needs a distinct name")
    return names


def too_many(limit: int | None, count: int) -> None:
    if limit is not None and count > limit:
        raise DatasetError(f"the file has more than {limit:,} data rows (max_rows={limit}); split it or raise "
                           f"the limit")


def no_rows(columns: Sequence[str]) -> DatasetError:
    return DatasetError(f"no data rows: the file has columns {columns_text(columns)} but no rows below the header")
