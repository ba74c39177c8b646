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
        1-based data-row number (the header is not counted); 0 for a file-level problem.
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
