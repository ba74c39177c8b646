"""Validating a table row by row into a :class:`LabeledDataset`: every valid row kept with its label and trace, every
rejected row reported with its number, column and reason (nothing is dropped silently).

Rows are validated as they are read (see :mod:`trace_core.data.read`) and only what the dataset keeps is held: the
non-trace cells of valid rows and their traces, never every raw row at once.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from .. import settings
from .._checks import check_bool, check_int
from ..trace import Trace
from ._values import ABSENT, CellError, is_blank, is_int64, is_missing, json_cell, show
from .codec import TRACE_COLUMNS, decode_cell, trace_from_cells
from .errors import DatasetError, DatasetWarning, RowError
from .fastread import FastRow, build_trace, decode_chunk
from .labels import LABEL_EXPECTED, check_matcher_options, label_from_reference, parse_label
from .read import PathOrBuffer, Progress, Table, columns_text, read_table
from .responses import trace_from_openai

__all__ = ["LabeledDataset", "read_dataset"]

_TRACE_SET = frozenset(TRACE_COLUMNS)
_TEXT_COLUMNS = ("tokens", "top_tokens")  # trace columns of token text, whose strings are shared (see _share)
_CHUNK = 256  # rows whose trace cells are decoded together (fastread.decode_chunk)


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
    traces : list of Trace or None, length n_valid
        One per valid row, None where the row carries no trace.
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
    """

    frame: pd.DataFrame
    traces: list[Trace | None]
    errors: list[RowError]
    n_read: int
    label_source: str
    row_column: str = "row"
    notes: list[str] = field(default_factory=list)

    @property
    def n_valid(self) -> int:
        return int(len(self.frame))

    @property
    def n_rejected(self) -> int:
        return self.n_read - self.n_valid

    @property
    def has_traces(self) -> bool:
        """True when there is at least one valid row and every valid row has a trace."""
        return bool(self.traces) and all(t is not None for t in self.traces)

    @property
    def labels(self) -> np.ndarray:
        """The 0/1 labels of the valid rows, shape (n_valid,), int64."""
        if "label" not in self.frame.columns:
            raise ValueError("this dataset has no labels (label_source is 'none')")
        return self.frame["label"].to_numpy(dtype=np.int64)

    def summary(self, *, max_errors: int = 3) -> str:
        """One line, e.g. ``"1,000 rows read: 997 kept, 3 rejected (row 4: label: 'maybe' is not one of ...)"``.

        The first ``max_errors`` errors are quoted (0: none, only the counts), then the :attr:`notes`.
        """
        check_int(max_errors, "max_errors", minimum=0)
        text = f"{self.n_read:,} rows read: {self.n_valid:,} kept, {self.n_rejected:,} rejected"
        if self.errors and max_errors:
            shown = "; ".join(str(e) for e in self.errors[:max_errors])
            more = len(self.errors) - max_errors
            text += f" ({shown}{f'; and {more:,} more' if more > 0 else ''})"
        return "; ".join([text, *self.notes])


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
    return _validate_table(table, fmt=fmt, matcher=matcher, tolerance=tolerance, f1_threshold=f1_threshold,
                           require_label=require_label)


@dataclass(frozen=True)
class _Rules:
    """What every row of one table is checked against (decided once, from its columns and the options)."""

    trace_columns: tuple[str, ...]  # the trace columns the table has
    use_response: bool              # a row without trace cells takes its trace (and a missing answer) from its
                                    # `response` cell
    label_source: str
    matcher: str
    tolerance: float
    f1_threshold: float


def _rules_for(columns: Sequence[str], hint: str, options: dict[str, Any]) -> _Rules | DatasetError:
    """The rules for a table with these columns, or the error that a table without the required ones raises."""
    has = set(columns)
    trace_columns = tuple(c for c in TRACE_COLUMNS if c in has)
    use_response = "response" in has
    missing = [c for c in ("prompt", "answer") if c not in has and not (c == "answer" and use_response)]
    if missing:
        needed = " and ".join(f"`{c}`" for c in missing)
        return DatasetError(f"missing required column{'s' if len(missing) > 1 else ''} {needed}; found columns "
                            f"{columns_text(columns)}{hint}")
    if "label" in has:
        label_source = "label"
    elif "reference" in has:
        label_source = f"reference:{options['matcher']}"
    elif options["require_label"]:
        return DatasetError(f"the dataset needs a `label` column ({LABEL_EXPECTED}) or a `reference` column (the "
                            f"gold answer, to label answers with a matcher); found columns {columns_text(columns)}"
                            f"{hint}")
    else:
        label_source = "none"
    return _Rules(trace_columns, use_response, label_source, options["matcher"], options["tolerance"],
                  options["f1_threshold"])


@dataclass
class _Kept:
    """What one pass over a table keeps of its valid rows: no raw trace cells, so memory stays near the traces'."""

    n_read: int = 0
    numbers: list[int] = field(default_factory=list)       # the valid rows' numbers
    cells: list[Any] = field(default_factory=list)         # their non-trace cells (CSV: lists; JSON: dicts)
    traces: list[Trace | None] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    unused_responses: list[int] = field(default_factory=list)  # kept rows with trace cells and a response too
    errors: list[RowError] = field(default_factory=list)
    rules: _Rules | None = None


def _validate_pass(table: Table, fmt: str, options: dict[str, Any], fixed: _Rules | None) -> _Kept | None:
    """Validate each row as it is read and keep only what the dataset needs; None when a second pass is needed.

    The rules come from the columns. A JSON Lines file's columns are known only at its end, so rows are checked
    under the columns seen so far; should a later row bring a column that changes the rules (rare: a file whose
    records differ in shape), the rows already checked are stale and the caller reads the file again with the rules
    of all its columns (``fixed``).
    """
    kept = _Kept()
    rules: _Rules | DatasetError | None = fixed
    width, used, stale = -1, False, False
    strings: dict[str, str] = {}  # one str object per distinct token text: traces repeat a vocabulary's tokens
    csv_columns = [c for c in table.columns if c not in _TRACE_SET]  # a CSV's columns are known from its header
    pending: list[tuple[int, Any, _Rules]] = []  # rows read, checked a chunk at a time (in order)
    for number, raw in table.rows:
        kept.n_read += 1
        if fixed is None and len(table.columns) != width:
            width = len(table.columns)
            now = _rules_for(table.columns, table.hint, options)
            if now != rules:
                stale, rules = stale or used, now
        if raw is None:
            continue
        if stale or not isinstance(rules, _Rules):  # this row waits for the second pass
            stale = True
            continue
        used = True
        if pending and pending[0][2] is not rules:
            _keep_chunk(kept, pending, strings, fmt, csv_columns)
        pending.append((number, raw, rules))
        if len(pending) >= _CHUNK:
            _keep_chunk(kept, pending, strings, fmt, csv_columns)
    _keep_chunk(kept, pending, strings, fmt, csv_columns)
    final = fixed or _rules_for(table.columns, table.hint, options)  # the rows are read: the columns are complete
    if isinstance(final, DatasetError):
        raise final
    if stale or (used and rules != final):
        return None
    kept.rules = final
    kept.errors = sorted(table.errors + kept.errors, key=lambda e: e.row)  # stable: a row keeps its errors' order
    return kept


def _keep_chunk(kept: _Kept, pending: list[tuple[int, Any, _Rules]], strings: dict[str, str], fmt: str,
                csv_columns: list[str]) -> None:
    """Check the rows in ``pending`` (all under one set of rules) and keep the valid ones, in order; empties it.

    Their trace cells are decoded together (:func:`decode_chunk`); a row that the fast path leaves out is checked
    on its own, as every row is without it."""
    if not pending:
        return
    rules = pending[0][2]
    fast = decode_chunk([raw for _, raw, _ in pending], rules.trace_columns, strings) if rules.trace_columns else None
    for i, (number, raw, _) in enumerate(pending):
        _keep_row(kept, number, raw, rules, strings, fmt, csv_columns, None if fast is None else fast[i])
    pending.clear()


def _keep_row(kept: _Kept, number: int, raw: Any, rules: _Rules, strings: dict[str, str], fmt: str,
              csv_columns: list[str], fast: FastRow | None) -> None:
    problems: list[CellError] = []
    trace, answer, label, unused_response = _check_row(raw, rules, problems, strings, fast)
    if problems:
        kept.errors.extend(RowError(number, p.field, p.message) for p in problems)
        return
    if unused_response:
        kept.unused_responses.append(number)
    kept.numbers.append(number)
    kept.traces.append(trace)
    kept.labels.append(label)
    kept.answers.append(answer if answer is not None else "")
    if fmt == "csv":
        kept.cells.append([raw[c] for c in csv_columns])
    elif fmt == "jsonl":
        kept.cells.append({k: v for k, v in raw.items() if k not in _TRACE_SET})


def _validate_table(table: Table, *, fmt: str, matcher: str, tolerance: float, f1_threshold: float,
                    require_label: bool) -> LabeledDataset:
    options = {"matcher": matcher, "tolerance": tolerance, "f1_threshold": f1_threshold,
               "require_label": require_label}
    kept = _validate_pass(table, fmt, options, None)
    if kept is None and table.again is not None:
        final = _rules_for(table.columns, table.hint, options)
        assert isinstance(final, _Rules)  # checked by the first pass
        table = table.again()
        kept = _validate_pass(table, fmt, options, final)
    assert kept is not None and kept.rules is not None  # a pass with fixed rules always completes
    rules = kept.rules

    frame = _valid_frame(table, kept, fmt)
    if "answer" not in frame.columns:
        frame.insert(frame.columns.get_loc("prompt") + 1, "answer",
                     pd.Series(kept.answers, index=frame.index, dtype=str))
    elif rules.use_response:  # answers filled in from responses where missing
        frame["answer"] = pd.Series(kept.answers, index=frame.index, dtype=str)
    if rules.label_source != "none":  # replaces the input's label column in place, or is added at the end
        frame["label"] = pd.Series(kept.labels, index=frame.index, dtype=np.int64)
    row_column = "row"
    while row_column in frame.columns:
        row_column = "_" + row_column
    frame[row_column] = pd.Series(kept.numbers, index=frame.index, dtype=np.int64)
    frame.attrs["trace_core_row_column"] = row_column
    dataset = LabeledDataset(frame=frame, traces=kept.traces, errors=kept.errors, n_read=kept.n_read,
                             label_source=rules.label_source, row_column=row_column,
                             notes=_unused_note(kept.unused_responses))
    if dataset.n_rejected:
        warnings.warn(f"{dataset.summary()}; every problem is listed in LabeledDataset.errors", DatasetWarning,
                      stacklevel=3)
    return dataset


def _unused_note(rows: Sequence[int], shown: int = 5) -> list[str]:
    """The note on kept rows whose ``response`` was not used (they had trace cells), or none."""
    if not rows:
        return []
    listed = ", ".join(f"{r:,}" for r in rows[:shown]) + (", ..." if len(rows) > shown else "")
    which = "row" if len(rows) == 1 else "rows"
    note = (f"{len(rows):,} {which} had both trace cells and a `response`: the trace cells were used and the "
            f"response ignored ({which} {listed})")
    return [note]


def _check_row(raw: Mapping[str, Any], rules: _Rules, problems: list[CellError], strings: dict[str, str],  # noqa: C901 (a flat check per column)
               fast: FastRow | None = None) -> tuple[Trace | None, str | None, int, bool]:
    """One row's trace, answer and label (-1 when unlabeled), and whether it had a ``response`` that was not used
    (its trace cells were); every problem found is appended to ``problems``, so a row with several bad cells
    reports them all. ``strings`` maps token texts to the one object kept for each. ``fast``: the row's trace cells
    as :func:`decode_chunk` decoded and checked them, when it did.

    The trace comes from the row's trace cells when any is non-empty, else from its ``response`` (see
    :func:`read_dataset`)."""
    prompt = answer = None
    try:
        prompt = _text_cell(raw.get("prompt"), "prompt", allow_empty=False)
        if prompt is None:
            raise CellError("prompt", "is missing; expected non-empty text")
    except CellError as exc:
        problems.append(exc)
    try:
        answer = _text_cell(raw.get("answer"), "answer", allow_empty=True)
    except CellError as exc:
        problems.append(exc)
        answer = ""  # reported; keep going to report other problems too

    trace: Trace | None = None
    cells: dict[str, Any] = {}
    cell_problem: CellError | None = None
    if fast is not None:  # decoded and checked with its chunk: non-empty trace cells, valid
        cells = {"tokens": fast}
    elif rules.trace_columns:  # decoded first: any non-empty trace cell (even a bad one) means the trace is there
        try:
            cells = {c: decode_cell(raw.get(c), c) for c in rules.trace_columns}
        except CellError as exc:
            cell_problem = exc
    from_cells = cell_problem is not None or any(v is not ABSENT for v in cells.values())
    has_response = rules.use_response and not is_blank(raw.get("response"))
    response_failed = False
    if has_response and not from_cells:
        try:
            response = _response_cell(raw.get("response"))
            if response is not None:
                trace = trace_from_openai(response, prompt=prompt or "",
                                          answer_tokens=_answer_tokens_cell(raw.get("answer_tokens")))
        except CellError as exc:
            problems.append(exc)
            response_failed = True
        except (TypeError, ValueError) as exc:
            problems.append(CellError("response", str(exc)))
            response_failed = True
        if trace is not None and not answer:  # missing or empty answer: the response's text
            answer = trace.answer
    if answer is None:
        if not response_failed:  # a broken response was reported already; it was to give the answer
            problems.append(CellError("answer", "is missing; expected text (it may be empty)"))
    elif cell_problem is not None:
        problems.append(cell_problem)
    elif fast is not None:
        try:
            trace = build_trace(fast, prompt=prompt or "", answer=answer)
        except (TypeError, ValueError):  # should Trace refuse it after all, the per-row path names the cell
            problems.clear()
            return _check_row(raw, rules, problems, strings)
    elif from_cells:
        try:
            for c in _TEXT_COLUMNS:
                if isinstance(cells.get(c), list):
                    cells[c] = _share(cells[c], strings)
            trace = trace_from_cells(cells, prompt=prompt or "", answer=answer)
        except CellError as exc:
            problems.append(exc)
    if trace is not None and answer is not None and (trace.answer != answer or trace.prompt != (prompt or "")):
        trace = replace(trace, answer=answer, prompt=prompt or "")
    try:
        label = _label(raw, answer, rules)
    except CellError as exc:
        problems.append(exc)
        label = -1
    return trace, answer, label, from_cells and has_response


def _share(value: list[Any], strings: dict[str, str]) -> list[Any]:
    """``value`` (a list of token texts, or of lists of them) with each str replaced by the first equal one seen.

    ``json.loads`` makes a new object for every string, and the top-k token texts of a large file are tens of
    millions of copies of a few thousand tokens: sharing them keeps the traces' memory near that of their arrays.
    Anything that is not a str is left as is (the codec reports it).
    """
    out: list[Any] = []
    for item in value:
        if isinstance(item, list):
            out.append([strings.setdefault(x, x) if type(x) is str else x for x in item])
        else:
            out.append(strings.setdefault(item, item) if type(item) is str else item)
    return out


def _label(raw: Mapping[str, Any], answer: str | None, rules: _Rules) -> int:
    """The row's 0/1 label from its ``label`` cell or by matching its answer with its ``reference``; -1 when the
    table is unlabeled (or the answer is missing, which is reported already)."""
    if rules.label_source == "label":
        try:
            return parse_label(raw.get("label"))
        except ValueError as exc:
            raise CellError("label", str(exc)) from None
    if rules.label_source == "none" or answer is None:
        return -1
    reference = raw.get("reference")
    if is_blank(reference):
        raise CellError("reference", "is missing; expected the gold answer")
    try:
        return label_from_reference(answer, reference, matcher=rules.matcher, tolerance=rules.tolerance,
                                    f1_threshold=rules.f1_threshold)
    except (TypeError, ValueError) as exc:
        raise CellError("reference", str(exc)) from None


def _valid_frame(table: Table, kept: _Kept, fmt: str) -> pd.DataFrame:
    """The valid rows' non-trace columns (their traces are in ``LabeledDataset.traces``), typed as before."""
    columns = [c for c in table.columns if c not in _TRACE_SET]
    if table.frame is not None:  # Parquet: pyarrow's typed columns
        return table.frame(columns).iloc[[n - 1 for n in kept.numbers]].reset_index(drop=True)
    if fmt == "csv":
        return pd.DataFrame(kept.cells, columns=columns, dtype=str) if kept.cells else pd.DataFrame(
            {c: pd.Series([], dtype=str) for c in columns})
    return pd.DataFrame.from_records(kept.cells, columns=columns).reset_index(drop=True)


def _text_cell(value: object, name: str, *, allow_empty: bool) -> str | None:
    """A text cell as str; None when missing (callers decide); raises CellError for non-text or forbidden empty."""
    if is_missing(value):
        return None
    if not isinstance(value, str):
        raise CellError(name, f"is {show(value)}; expected text")
    if not allow_empty and not value.strip():
        raise CellError(name, "is empty; expected non-empty text")
    return value


def _answer_tokens_cell(value: object) -> int | None:
    """How many of a scored prompt's last tokens are the answer (a vLLM ``prompt_logprobs`` response needs it)."""
    if is_blank(value):
        return None
    number = value
    if isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    if not is_int64(number) or int(number) < 0:  # type: ignore[call-overload]
        raise CellError("answer_tokens", f"is {show(value)}; expected a whole number of tokens >= 0")
    return int(number)  # type: ignore[call-overload]


def _response_cell(value: object) -> Mapping[str, Any] | None:
    value = json_cell(value, "response")
    if value is ABSENT:
        return None
    if not isinstance(value, Mapping):
        raise CellError("response", f"is {show(value)}; expected a model server's response object (OpenAI-style, "
                                    "llama.cpp, Ollama, TGI or vLLM)")
    return value
