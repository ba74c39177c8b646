"""Reading a labeled dataset: :func:`read_dataset` opens the file (:mod:`trace_core.data.read`), validates its rows
(:mod:`trace_core.data.validate`) and assembles what is kept into a :class:`LabeledDataset`: the valid rows' frame,
their traces, and every rejected row with its reason.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from trace_core import settings
from trace_core.checks import check_bool, check_int, counted
from trace_core.data.errors import DatasetWarning, RowError
from trace_core.data.fastread import FastRow, build_trace
from trace_core.data.labels import check_matcher_options, exact_match_hint
from trace_core.data.read import PathOrBuffer, Progress, Table, read_table
from trace_core.data.validate import Options, Rules, ValidRows, validate_rows
from trace_core.traces.columns import TRACE_COLUMNS
from trace_core.traces.table import TableBuilder, TraceTable
from trace_core.traces.trace import Trace

__all__ = ["LabeledDataset", "read_dataset"]

_TRACE_SET = frozenset(TRACE_COLUMNS)


@dataclass
class LabeledDataset:
    """The valid rows of a dataset, their traces, and every rejected row with its reason.

    Attributes
    ----------
    frame : pandas.DataFrame, shape (n_valid, ...)
        The valid rows, every input column but the trace columns (:data:`~trace_core.data.TRACE_COLUMNS`, held
        decoded in ``traces`` instead) kept as read (names lower-cased), an int column ``label`` (0/1; the input's
        ``label`` column is replaced by its parsed value; absent when ``label_source == "none"``), an ``answer``
        column (added when taken from ``response``), and an int column ``row_column`` holding each row's number
        (see :class:`RowError`). The index is 0..n_valid-1. ``write_dataset(frame, ..., traces=traces)`` writes
        the trace columns back.
    traces : TraceTable, or list of Trace or None; length n_valid
        One per valid row. When every valid row carries a trace (the usual case) this is a
        :class:`~trace_core.traces.table.TraceTable` built straight from the columns the reader decoded: ``traces[i]``
        is row i's Trace, and :func:`~trace_core.evaluate`, the calibrators and the scores read its columns at once.
        Otherwise a list with None where a row carries no trace.
    errors : list of RowError
        Every problem found; a rejected row has one or more entries.
    n_read : int
        Data rows read from the file.
    label_source : str
        ``"label"``, ``"reference:<matcher>"`` or ``"none"``.
    row_column : str
        Name of the row-number column: ``"row"``, or ``"_row"`` when the input already has a ``row`` column.
    notes : list of str
        Remarks on the kept rows that are not errors, in words (they end the :meth:`summary`): e.g. how many rows
        had both trace cells and a ``response`` (the trace cells were used; see :func:`read_dataset`).
    label_note : str or None
        A warning that labels may be wrong, in words (it ends the :meth:`summary`): with the default ``"exact"``
        matcher, how many answers labeled wrong hold their reference as whole words, as answers written in
        sentences do (:func:`~trace_core.data.labels.exact_match_hint`); None when there are none.
    """

    frame: pd.DataFrame
    traces: Sequence[Trace | None]
    errors: list[RowError]
    n_read: int
    label_source: str
    row_column: str = "row"
    notes: list[str] = field(default_factory=list)
    label_note: str | None = None

    @property
    def n_valid(self) -> int:
        return int(len(self.frame))

    @property
    def n_rejected(self) -> int:
        return self.n_read - self.n_valid

    @property
    def has_traces(self) -> bool:
        """True when there is at least one valid row and every valid row has a trace."""
        if isinstance(self.traces, TraceTable):
            return len(self.traces) > 0
        return bool(self.traces) and all(t is not None for t in self.traces)

    @property
    def labels(self) -> np.ndarray:
        """The 0/1 labels of the valid rows, shape (n_valid,), int64."""
        if "label" not in self.frame.columns:
            raise ValueError("this dataset has no labels (label_source is 'none')")
        return self.frame["label"].to_numpy(dtype=np.int64)

    def summary(self, *, max_errors: int = 3) -> str:
        """One line, e.g. ``"1,000 rows read: 997 kept, 3 rejected (row 4: label: 'maybe' is not one of ...)"``.

        The first ``max_errors`` errors are quoted (0: none, only the counts), then the :attr:`notes` and the
        :attr:`label_note`.
        """
        check_int(max_errors, "max_errors", minimum=0)
        text = f"{counted(self.n_read, 'row')} read: {self.n_valid:,} kept, {self.n_rejected:,} rejected"
        if self.errors and max_errors:
            shown = "; ".join(str(e) for e in self.errors[:max_errors])
            more = len(self.errors) - max_errors
            text += f" ({shown}{f'; and {more:,} more' if more > 0 else ''})"
        return "; ".join([text, *self.notes, *([self.label_note] if self.label_note else [])])


def read_dataset(source: PathOrBuffer | bytes, *, format: str | None = None, matcher: str = "exact",
                 tolerance: float = 1e-6, f1_threshold: float = 0.5, require_label: bool = True,
                 max_rows: int | None = None, progress: Progress | None = None, max_bytes: int | None = None,
                 max_cell_chars: int | None = None) -> LabeledDataset:
    """Read and validate a labeled dataset (CSV, JSON Lines or Parquet); see :mod:`trace_core.data` for the columns.

    Parameters
    ----------
    source : str, Path, bytes or binary file-like
        A path, the file's bytes, or an open binary file (a Streamlit ``UploadedFile`` works: it is rewound first
        and its ``.name`` gives the format). A path or a seekable file is read as a stream, never whole. Rows are
        numbered as :class:`RowError` says: in JSON Lines by their line in the file.
    format : {"csv", "jsonl", "parquet"} or None
        None: from the extension (.csv/.tsv/.txt, .jsonl/.json/.ndjson, .parquet/.pq). CSV delimiters ``,`` ``;``
        tab and ``|`` are recognised from the header; a ``.json`` file may also hold one JSON array of objects.
    matcher, tolerance, f1_threshold
        How answers are labeled from a ``reference`` column when there is no ``label`` column; see
        :func:`label_from_reference`.
    require_label : bool
        When False, a file without ``label`` and ``reference`` columns is read unlabeled (``label_source="none"``).
    max_rows : int or None
        Refuse files with more data rows than this (>= 1).
    progress : callable(done, total) or None
        Called while the file is read and its rows validated (about once per MiB, and once at the end) with the
        bytes read so far and the file's size in bytes (Parquet: the size times the share of rows read). ``done``
        only grows and ends equal to ``total``, so ``done / total`` suits a progress bar (e.g. a command line's
        reading bar on stderr).
    max_bytes : int or None
        Refuse a file holding more bytes than this once read (>= 1): its text (CSV, JSON Lines), or its columns
        decompressed (Parquet: the metadata is checked before any page is decompressed, then each batch before it
        is decoded), so a small compressed file never unpacks to gigabytes. None: ``TRACE_MAX_DATA_MB`` MiB
        (default 1,024; :mod:`trace_core.settings`).
    max_cell_chars : int or None
        A text cell longer than this many characters (>= 1) rejects its row with a row error naming the column; the
        other rows are read. Text cells: CSV fields (trace columns' JSON text too), a JSON Lines record's string
        values, Parquet strings (binary: bytes). None: ``TRACE_MAX_CELL_MB`` MiB (default 16).

    Returns
    -------
    LabeledDataset
        The valid rows and their traces, and one :class:`RowError` per problem. When rows were rejected a
        :class:`DatasetWarning` with the summary is also emitted.

    Notes
    -----
    Where a row's trace comes from, row by row: from its trace columns when any of its trace cells is non-empty
    (the trace columns win); else from its ``response`` when that cell is non-empty, which then also gives the
    answer if the ``answer`` cell is missing or empty; else the row has no trace. A file may mix the two kinds of
    rows. A row with both trace cells and a ``response`` is read from its trace cells and its response is not
    looked at; this is no error, but the number of such rows is said in ``LabeledDataset.notes`` (and so in the
    summary). The ``answer`` column may be left out when there is a ``response`` column; a row that then has
    trace cells but no answer is rejected.

    A JSON Lines record (or JSON array item) that gives a key twice (``{"label": 1, "label": 0}``), or two keys
    that name one column (``"label"`` and ``"Label "``: names are matched ignoring case and surrounding spaces),
    is rejected with a row error naming the column: ``json`` would keep the last value, silently. The same holds
    for any object nested in a cell (a ``response``'s, or a CSV cell's JSON text): the error names the column and
    where in it the key is repeated. (A CSV or Parquet header with two such names is a :class:`DatasetError`.)
    So is JSON that holds a value Python cannot keep, in any column, used or not: an escaped lone surrogate
    (``"\\ud800"``: half of a UTF-16 pair, no character) or an integer of more than 4,300 digits.

    Raises
    ------
    DatasetError
        The file is empty, has no data rows, is not UTF-8 text (CSV/JSONL), not a table, lacks required columns,
        has duplicate column names, has more than ``max_rows`` rows or ``max_bytes`` bytes, or its format cannot
        be told.
    TypeError, ValueError
        An option of the wrong type or out of range.

    Examples
    --------
    >>> ds = read_dataset(b"prompt,answer,label\\nQ,A,yes\\nQ2,B,no\\n", format="csv")
    >>> ds.n_valid, ds.labels.tolist(), ds.summary()
    (2, [1, 0], '2 rows read: 2 kept, 0 rejected')
    """
    check_matcher_options(matcher, tolerance, f1_threshold)
    check_bool(require_label, "require_label")
    if max_rows is not None:
        check_int(max_rows, "max_rows", minimum=1)
    if progress is not None and not callable(progress):
        raise TypeError(f"`progress` must be a callable or None, got {type(progress).__name__}")
    max_bytes = settings.get("TRACE_MAX_DATA_MB") * 2**20 if max_bytes is None else max_bytes
    max_cell_chars = settings.get("TRACE_MAX_CELL_MB") * 2**20 if max_cell_chars is None else max_cell_chars
    check_int(max_bytes, "max_bytes", minimum=1)
    check_int(max_cell_chars, "max_cell_chars", minimum=1)
    table, fmt = read_table(source, format=format, max_rows=max_rows, progress=progress, max_bytes=max_bytes,
                            max_cell_chars=max_cell_chars)
    options = Options(matcher=matcher, tolerance=tolerance, f1_threshold=f1_threshold, require_label=require_label)
    table, rows, rules = validate_rows(table, fmt, options)
    return _dataset(table, rows, rules, fmt)


def _dataset(table: Table, rows: ValidRows, rules: Rules, fmt: str) -> LabeledDataset:
    """The dataset of the valid rows: their non-trace columns, answers, labels and row numbers, and their traces."""
    frame = _valid_frame(table, rows, fmt)
    if "answer" not in frame.columns:
        frame.insert(frame.columns.get_loc("prompt") + 1, "answer",
                     pd.Series(rows.answers, index=frame.index, dtype=str))
    elif rules.use_response:  # answers filled in from responses where missing
        frame["answer"] = pd.Series(rows.answers, index=frame.index, dtype=str)
    if rules.label_source != "none":  # replaces the input's label column in place, or is added at the end
        frame["label"] = pd.Series(rows.labels, index=frame.index, dtype=np.int64)
    row_column = "row"
    while row_column in frame.columns:
        row_column = "_" + row_column
    frame[row_column] = pd.Series(rows.numbers, index=frame.index, dtype=np.int64)
    frame.attrs["trace_core_row_column"] = row_column
    dataset = LabeledDataset(frame=frame, traces=_traces(rows.traces), errors=rows.errors, n_read=rows.n_read,
                             label_source=rules.label_source, row_column=row_column,
                             notes=_unused_note(rows.unused_responses), label_note=_label_note(frame, rows, rules))
    if dataset.n_rejected:
        warnings.warn(f"{dataset.summary()}; every problem is listed in LabeledDataset.errors", DatasetWarning,
                      stacklevel=3)
    return dataset


def _traces(rows: Sequence[Trace | FastRow | None]) -> Sequence[Trace | None]:
    """The valid rows' traces: one TraceTable when every row has one (a checked chunk row goes in as it is, with no
    Trace made for it), else a list with None for the rows without."""
    if rows and all(r is not None for r in rows):
        builder = TableBuilder()
        for row in rows:
            builder.add(row)
        return builder.build()
    return [build_trace(r, prompt=r.prompt, answer=r.answer) if isinstance(r, FastRow) else r for r in rows]


def _label_note(frame: pd.DataFrame, rows: ValidRows, rules: Rules) -> str | None:
    """The note on answers the exact matcher labeled wrong that hold their reference (:func:`exact_match_hint`)."""
    if rules.label_source != "reference:exact" or "reference" not in frame.columns:
        return None
    return exact_match_hint(rows.answers, frame["reference"].tolist(), rows.labels, rows.numbers)


def _unused_note(rows: Sequence[int], shown: int = 5) -> list[str]:
    """The note on kept rows whose ``response`` was not used (they had trace cells), or none."""
    if not rows:
        return []
    listed = ", ".join(f"{r:,}" for r in rows[:shown]) + (", ..." if len(rows) > shown else "")
    which = "row" if len(rows) == 1 else "rows"
    note = (f"{len(rows):,} {which} had both trace cells and a `response`: the trace cells were used and the "
            f"response ignored ({which} {listed})")
    return [note]


def _valid_frame(table: Table, rows: ValidRows, fmt: str) -> pd.DataFrame:
    """The valid rows' non-trace columns (their traces are in ``LabeledDataset.traces``), typed as read: Parquet's
    as pyarrow converts them, CSV's as text, JSON's as decoded."""
    columns = [c for c in table.columns if c not in _TRACE_SET]
    if table.frame is not None:  # Parquet: pyarrow's typed columns
        return table.frame(columns).iloc[[n - 1 for n in rows.numbers]].reset_index(drop=True)
    if fmt == "csv":
        return pd.DataFrame(rows.cells, columns=columns, dtype=str) if rows.cells else pd.DataFrame(
            {c: pd.Series([], dtype=str) for c in columns})
    return pd.DataFrame.from_records(rows.cells, columns=columns).reset_index(drop=True)
