"""What reading a dataset reports: a file-level error, one error per rejected row, and the warning about them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DatasetError", "DatasetWarning", "RowError"]


class DatasetError(ValueError):
    """A problem with the whole file that leaves nothing to keep (empty, unreadable, not a table, missing columns)."""


class DatasetWarning(UserWarning):
    """Emitted by :func:`read_dataset` when some rows were rejected (they are listed in ``LabeledDataset.errors``)."""


@dataclass(frozen=True)
class RowError:
    """Why one row (or, with ``row == 0``, the file) was rejected.

    Attributes
    ----------
    row : int
        The row's 1-based number; 0 for a file-level problem. CSV and Parquet: the data row (the header and blank
        lines are not counted). JSON Lines: the line of the file the record is on, so blank lines, which hold no
        row, are counted (lines end at ``\n`` only; ``\r\n`` works too). A JSON array: the item's position.
    field : str
        The column at fault, or "" when the problem is the row as a whole.
    message : str
        What was wrong and what was expected, with the offending value (repr'd, truncated).
    """

    row: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"row {self.row}" if self.row > 0 else "file"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
