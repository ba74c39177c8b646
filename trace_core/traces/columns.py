"""The trace columns of a dataset table: one registry of columns, and the one decoder (cells -> :class:`Trace`) and
encoder (traces -> column cells) that reading and writing both use.

A row's trace is stored per token (length T) across the columns of :data:`COLUMNS` (their meaning is given there);
in CSV cells the values are JSON text, in JSON Lines and Parquet native lists too. A row whose trace cells are all
empty has no trace (``None``), so a dataset may mix recorded and not-yet-recorded answers. The decoded trace's
answer is the row's ``answer`` as given, even when ``"".join(tokens)`` differs from it (the row is not rejected for
that).

Where the entropy comes from (``TraceMetadata.entropy_source``): an ``entropy`` cell gives it (``"exact"`` unless
the row's ``trace_metadata`` says otherwise); without one (no column, or an empty cell), it is estimated from the
row's top-k log-probabilities (``"top_k"``, ``entropy_k`` = k, :func:`entropy_from_top_k`), and a row with neither
has no entropy (``"absent"``, ``entropy=None``: only the chosen tokens' log-probabilities, the most common format
of saved runs). Writing a trace without entropy leaves its ``entropy`` cell empty (null in JSON Lines and Parquet).

Sign checks use :data:`trace_core.traces.trace.LOGPROB_TOLERANCE`, the slack :class:`Trace` itself allows, so a row the
reader accepts always makes a valid Trace.

Bounds on the values (:mod:`trace_core.traces.logprobs`), shared with the response importer and live recording, so that
an impossible number is a row error at reading rather than an overflow far away:

- a chosen token's surprisal is at most :data:`MAX_NATS` (``-logprobs`` likewise);
- an alternative whose log-probability is below ``-MAX_NATS`` (``-inf``, or the -9999 servers write for it) has no
  probability: it is dropped, and every step keeps the smallest number of alternatives left at any step;
- one step's alternatives, plus the chosen token when it is not among them, hold a probability of at most
  ``1 +`` :data:`TOP_K_MASS_TOLERANCE` (here the chosen token is known not to be among them only by its id; the
  importer tells by its bytes);
- entropy is at most ``log V +`` :data:`ENTROPY_TOLERANCE` when the vocabulary size V is known (the recorder
  stores it as ``vocab_size`` in the ``trace_metadata`` cell's ``extra``), else at most :data:`MAX_ENTROPY_NATS`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from trace_core.traces.cells import ABSENT, CellError, as_finite_float, is_blank, is_int64, is_number, json_cell, show
from trace_core.traces.logprobs import (
    ENTROPY_TOLERANCE,
    MAX_ENTROPY_NATS,
    MAX_NATS,
    TOP_K_MASS_TOLERANCE,
    entropy_from_top_k,
    too_much_mass,
    unlikely_chosen,
)
from trace_core.traces.trace import LOGPROB_TOLERANCE, Trace, TraceMetadata

if TYPE_CHECKING:
    import pyarrow

__all__ = ["COLUMNS", "COLUMN_BY_NAME", "ELEMENT_TYPES", "TRACE_COLUMNS", "TraceColumn", "check_trace",
           "parse_beam_logprobs", "trace_cells", "trace_from_cells", "vocab_size_of"]

#: Per element type: the numpy dtype its numbers are decoded to (None: not numbers), and the Python types whose
#: values need no per-value check (numbers still have to be finite). A value of any other type is checked one by
#: one, so that a bad one is named. The per-row decoder and the many-row reader (:mod:`trace_core.data.fastread`)
#: both take their rules from here, through each column's ``dtype`` and ``py_types``.
ELEMENT_TYPES: dict[str, tuple[Any, frozenset[type]]] = {
    "str": (None, frozenset({str})),
    "int": (np.int64, frozenset({int})),
    "float": (np.float64, frozenset({float, int})),
    "json": (None, frozenset()),
}


@dataclass(frozen=True)
class TraceColumn:
    """One trace column of a dataset table.

    Attributes
    ----------
    name : str
        The column name (lower case).
    element : {"str", "int", "float", "json"}
        The type of each value; ``"json"`` is one free-form JSON object per row.
    ndim : int
        1: one value per token, shape (T,); 2: k values per token, shape (T, k); 0: one value per row.
    field : str or None
        The :meth:`Trace.to_dict` key written into this column; None for a column that is only read.
    meaning : str
        What the column holds, for people.
    neg_inf_ok : bool
        Whether ``-inf`` is a valid value: "no probability" (dropped, like values below ``-MAX_NATS``).
    dtype : numpy dtype or None
        What its numbers are decoded to (:data:`ELEMENT_TYPES`); None for text and JSON.
    py_types : frozenset of type
        The Python types of values that need no per-value check (:data:`ELEMENT_TYPES`).
    """

    name: str
    element: str
    ndim: int
    field: str | None
    meaning: str
    neg_inf_ok: bool = False
    dtype: Any = dataclasses.field(init=False, repr=False)
    py_types: frozenset[type] = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        dtype, py_types = ELEMENT_TYPES[self.element]
        object.__setattr__(self, "dtype", dtype)  # frozen: set once, from the element type
        object.__setattr__(self, "py_types", py_types)

    def arrow_type(self) -> pyarrow.DataType:
        """The column's Arrow type in Parquet: lists (one level per ``ndim``) of its element type; a free-form JSON
        object is stored as its text."""
        import pyarrow as pa

        arrow_type = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "json": pa.string()}[self.element]
        for _ in range(self.ndim):
            arrow_type = pa.list_(arrow_type)
        return arrow_type

    def arrow_array(self, values: Sequence[Any]) -> pyarrow.Array:
        """``values`` (one per row, None where the row has no trace) as a typed Arrow array, for Parquet."""
        import pyarrow as pa

        if self.element == "json":  # a free-form object: stored as JSON text, decoded on reading
            values = [None if v is None else json.dumps(v, ensure_ascii=False) for v in values]
        return pa.array(values, type=self.arrow_type())


#: Every column that carries a pre-recorded trace, in the order they are read and written.
COLUMNS: tuple[TraceColumn, ...] = (
    TraceColumn("tokens", "str", 1, "tokens", "each token's text (required in a row with a trace)"),
    TraceColumn("token_ids", "int", 1, "token_ids", "the tokens' ids (-1 when unknown)"),
    TraceColumn("surprisal", "float", 1, "surprisal", "-log p of each chosen token, >= 0 nats"),
    TraceColumn("logprobs", "float", 1, None, "log p of each chosen token, <= 0 (read only: surprisal = -logprob)"),
    TraceColumn("entropy", "float", 1, "entropy",
                ">= 0 nats; when missing, estimated from top_logprobs (entropy_from_top_k), else absent (no entropy)"),
    TraceColumn("top_ids", "int", 2, "top_ids", "the k most likely tokens' ids, T x k (-1 when unknown)"),
    TraceColumn("top_logprobs", "float", 2, "top_logprobs",
                "their log-probabilities, T x k, each row sorted from most to least likely", neg_inf_ok=True),
    TraceColumn("top_tokens", "str", 2, "top_tokens", "their text, T x k"),
    TraceColumn("ranks", "int", 1, "ranks", "1-based rank of each chosen token"),
    TraceColumn("trace_metadata", "json", 0, "metadata", "a JSON object: TraceMetadata.to_dict()"),
)
#: The trace column names (``response`` is separate: it is used only when none of these exist).
TRACE_COLUMNS: tuple[str, ...] = tuple(c.name for c in COLUMNS)
#: Each trace column by its name.
COLUMN_BY_NAME: dict[str, TraceColumn] = {c.name: c for c in COLUMNS}
WRITTEN = tuple(c for c in COLUMNS if c.field is not None)


# --------------------------------------------------------------------------------------------------
# Decoding: cells -> Trace
# --------------------------------------------------------------------------------------------------

def decode_cell(value: object, name: str) -> Any:
    """One trace cell as a Python value: JSON text decoded, a native list kept; :data:`ABSENT` when empty."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple, dict)):
        return value
    if isinstance(value, str) or is_blank(value):  # JSON text of any value: the column's decoder reports a non-list
        return json_cell(value, name)
    raise CellError(name, f"is {show(value)}; expected a list (or its JSON text)")


def _list(value: object, name: str, where: str = "") -> list[Any]:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise CellError(name, f"{where + ' ' if where else ''}is {show(value)}; expected a list")
    return list(value)


def _check_element(value: object, column: TraceColumn, where: str) -> None:
    """Raise a CellError naming ``where`` when ``value`` is not one valid element of ``column`` (numbers are finite,
    but for the -inf of a column whose ``neg_inf_ok`` is set)."""
    name, element = column.name, column.element
    if element == "str":
        if not isinstance(value, str):
            raise CellError(name, f"{where} is {show(value)}; expected a string")
    elif element == "int":
        if not is_int64(value):
            raise CellError(name, f"{where} is {show(value)}; expected an integer")
    elif not is_number(value):
        raise CellError(name, f"{where} is {show(value)}; expected a number")
    elif as_finite_float(value) is None and not (column.neg_inf_ok and _is_neg_inf(value)):
        shown = show(value) if isinstance(value, (int, np.integer)) else str(float(value))  # type: ignore[arg-type]
        raise CellError(name, f"{where} is {shown}; expected a finite number")


def _is_neg_inf(value: object) -> bool:
    return isinstance(value, (float, np.floating)) and value == -math.inf


def _fast_array(values: list[Any], column: TraceColumn) -> Any:
    """``values`` (of plain types) as an array when every one is valid; None sends the caller to the slow path,
    which names the culprit."""
    if column.dtype is None:  # text
        return values
    try:
        arr = np.array(values, dtype=column.dtype)
    except OverflowError:  # an int beyond int64 (or, for floats, beyond float64)
        return None
    if (column.element == "int" or np.isfinite(arr).all()
            or (column.neg_inf_ok and (np.isfinite(arr) | (arr == -np.inf)).all())):
        return arr
    return None


def _vector(value: object, column: TraceColumn, n_tokens: int | None) -> Any:
    """A per-token column: an ndarray of shape (T,) for numbers, a list of str for text."""
    name, element = column.name, column.element
    items = _list(value, name)
    out = _fast_array(items, column) if set(map(type, items)) <= column.py_types else None
    if out is None:
        for i, x in enumerate(items):
            _check_element(x, column, f"{name}[{i}]")
        out = items if element == "str" else np.array(
            [int(x) for x in items] if element == "int" else items, dtype=column.dtype)
    if n_tokens is not None and len(out) != n_tokens:
        raise CellError(name, f"{name} has {len(out)} values but tokens has {n_tokens}")
    return out


def _matrix(value: object, column: TraceColumn, n_tokens: int) -> Any:
    """A (T, k) column: an ndarray for numbers, a list of lists of str for text."""
    name, element = column.name, column.element
    rows = _list(value, name)
    if not rows and n_tokens > 0:
        rows = [[] for _ in range(n_tokens)]  # [] means "no alternatives"
    if len(rows) != n_tokens:
        raise CellError(name, f"{name} has {len(rows)} rows but tokens has {n_tokens}")
    if (set(map(type, rows)) <= {list} and len(set(map(len, rows))) <= 1
            and set(map(type, itertools.chain.from_iterable(rows))) <= column.py_types):
        k = len(rows[0]) if rows else 0
        out = _fast_array(rows, column)
        if out is not None:
            return out if element == "str" else out.reshape(n_tokens, k)
    lists = [_list(r, name, f"{name}[{i}]") for i, r in enumerate(rows)]
    k = len(lists[0]) if lists else 0
    for i, r in enumerate(lists):
        if len(r) != k:
            raise CellError(name, f"{name}[{i}] has {len(r)} values but {name}[0] has {k} (every token needs "
                                  f"the same number k of alternatives)")
        for j, x in enumerate(r):
            _check_element(x, column, f"{name}[{i}][{j}]")
    if element == "str":
        return lists
    return np.array(lists, dtype=column.dtype).reshape(n_tokens, k)


def _decode(name: str, cells: Mapping[str, Any], n_tokens: int | None) -> Any:
    """A per-token or (T, k) column of one row, decoded and checked; None when its cell is empty."""
    value = cells.get(name, ABSENT)
    if value is ABSENT:
        return None
    column = COLUMN_BY_NAME[name]
    return _vector(value, column, n_tokens) if column.ndim == 1 else _matrix(value, column, n_tokens or 0)


def _check_bound(arr: np.ndarray, name: str, wrong: np.ndarray, rule: str) -> None:
    """Refuse the first value where ``wrong`` holds, naming its index: ``"surprisal[3] is 9999.0; <rule>"``."""
    if wrong.any():
        index = tuple(int(i) for i in np.argwhere(wrong)[0])
        value = int(arr[index]) if arr.dtype.kind in "iu" else float(arr[index])
        raise CellError(name, f"{name}{''.join(f'[{i}]' for i in index)} is {show(value)}; {rule}")


def _check_sign(arr: np.ndarray, name: str, *, nonnegative: bool, rule: str) -> None:
    """Refuse the first value on the wrong side of 0 by more than the slack Trace allows."""
    _check_bound(arr, name, arr < -LOGPROB_TOLERANCE if nonnegative else arr > LOGPROB_TOLERANCE, rule)


_FIELD_COLUMNS = {c.field: c.name for c in WRITTEN}


def _column_named_in(message: str) -> str:
    """The column that one of Trace's messages ("`top_logprobs` must be ...") is about; "" when none."""
    match = re.match(r"`(\w+)", message)
    return _FIELD_COLUMNS.get(match.group(1), "") if match else ""


def trace_from_cells(cells: Mapping[str, Any], *, prompt: str, answer: str) -> Trace:
    """Validate one row's trace cells and build its Trace.

    Parameters
    ----------
    cells : Mapping
        Column name -> value as decoded by :func:`decode_cell` (:data:`ABSENT` where the cell is empty).
    prompt, answer : str
        The row's prompt and answer, stored on the trace as given.

    Returns
    -------
    Trace

    Raises
    ------
    CellError
        The first problem found, naming the column at fault.
    """
    if cells.get("tokens", ABSENT) is ABSENT:
        raise CellError("tokens", "is missing; a row with trace columns needs `tokens` (leave every trace column "
                                  "empty for a row without a trace)")
    tokens = _decode("tokens", cells, None)
    n = len(tokens)
    surprisal = _surprisal(cells, n)
    top_logprobs, top_ids, top_tokens = _alternatives(cells, n)
    token_ids = _decode("token_ids", cells, n)
    if token_ids is None:
        token_ids = np.full(n, -1, dtype=np.int64)
    k = top_logprobs.shape[1]
    if k > 0:
        _check_top_k_mass(top_logprobs, top_ids, surprisal, token_ids)
        # Alternatives below -MAX_NATS (-inf, -9999) have no probability: dropped. A row is sorted, so they are its
        # tail; every step keeps the smallest number of real alternatives at any step (as the importer does).
        kept = int((top_logprobs >= -MAX_NATS).sum(axis=1).min()) if n else k
        if kept < k:
            k = kept
            top_logprobs, top_ids = top_logprobs[:, :k], top_ids[:, :k]
            top_tokens = None if top_tokens is None else tuple(r[:k] for r in top_tokens)

    entropy = _decode("entropy", cells, n)
    if entropy is not None:
        _check_sign(entropy, "entropy", nonnegative=True, rule="entropy must be >= 0 (nats)")
    elif k > 0:
        entropy = entropy_from_top_k(top_logprobs)
    ranks = _decode("ranks", cells, n)
    if ranks is not None and (ranks < 1).any():
        raise CellError("ranks", f"ranks[{int(np.argmin(ranks))}] is {int(ranks.min())}; ranks are 1-based (>= 1)")

    metadata = _metadata(cells)
    vocab_size = vocab_size_of(metadata)
    _check_vocabulary(vocab_size, token_ids, top_ids, ranks)
    if cells.get("entropy", ABSENT) is not ABSENT:  # given, not estimated here (a top-k estimate is below log(k+1))
        _check_entropy_bound(entropy, vocab_size)
    if entropy is None:  # the chosen tokens' log-probabilities only: surprisal-only methods still run
        metadata = replace(metadata, entropy_source="absent", entropy_k=None)
    elif cells.get("entropy", ABSENT) is ABSENT:  # estimated here: say so, whatever the metadata cell claimed
        metadata = replace(metadata, entropy_source="top_k", entropy_k=k)
    try:
        return Trace(prompt=prompt, answer=answer, token_ids=token_ids, tokens=tuple(tokens), surprisal=surprisal,
                     entropy=entropy, top_ids=top_ids, top_logprobs=top_logprobs, ranks=ranks, metadata=metadata,
                     top_tokens=top_tokens)
    except (TypeError, ValueError) as exc:  # the checks above mirror Trace's; should one miss, name the column
        raise CellError(_column_named_in(str(exc)), f"inconsistent trace: {exc}") from None


def _surprisal(cells: Mapping[str, Any], n: int) -> np.ndarray:
    """The chosen tokens' surprisal, from the ``surprisal`` cell or the ``logprobs`` cell (both: they must agree)."""
    surprisal = _decode("surprisal", cells, n)
    if surprisal is not None:
        _check_sign(surprisal, "surprisal", nonnegative=True,
                    rule="surprisal must be >= 0 (nats) -- log-probabilities (<= 0) go in a `logprobs` column")
        _check_bound(surprisal, "surprisal", surprisal > MAX_NATS, unlikely_chosen("above"))
    logprobs = _decode("logprobs", cells, n)
    if logprobs is not None:
        _check_sign(logprobs, "logprobs", nonnegative=False,
                    rule="log-probabilities must be <= 0 -- surprisal (>= 0) goes in a `surprisal` column")
        _check_bound(logprobs, "logprobs", logprobs < -MAX_NATS, unlikely_chosen("below"))
        if surprisal is None:
            surprisal = 0.0 - logprobs  # not -logprobs: a log-prob of 0 is surprisal 0, not -0.0
        elif not np.allclose(surprisal, -logprobs, rtol=0.0, atol=1e-6):
            i = int(np.flatnonzero(~np.isclose(surprisal, -logprobs, rtol=0.0, atol=1e-6))[0])
            raise CellError("logprobs", f"logprobs[{i}] is {float(logprobs[i])!r} but surprisal[{i}] is "
                                        f"{float(surprisal[i])!r}; expected surprisal = -logprob (or give only one "
                                        f"of them)")
    if surprisal is None:
        raise CellError("surprisal", "is missing; a trace needs `surprisal` (or `logprobs`)")
    return surprisal


def _alternatives(cells: Mapping[str, Any], n: int) -> tuple[np.ndarray, np.ndarray, Any]:
    """The top-k alternatives: ``top_logprobs`` (T, k; sorted, <= 0), ``top_ids`` of the same shape (-1 when not
    given) and ``top_tokens`` (T tuples of k texts, or None)."""
    top_logprobs = _decode("top_logprobs", cells, n)
    if top_logprobs is None:
        top_logprobs = np.zeros((n, 0))
    else:
        _check_sign(top_logprobs, "top_logprobs", nonnegative=False, rule="log-probabilities must be <= 0")
        with np.errstate(invalid="ignore"):  # -inf after -inf: NaN, not out of order
            unsorted = (np.diff(top_logprobs, axis=1) > 1e-12).any(axis=1)
        if unsorted.any():
            i = int(np.flatnonzero(unsorted)[0])
            raise CellError("top_logprobs", f"top_logprobs[{i}] is {show(top_logprobs[i].tolist())}; each row must "
                                            f"be sorted from most to least likely")
    k = top_logprobs.shape[1]
    top_ids = _decode("top_ids", cells, n)
    if top_ids is None:
        top_ids = np.full((n, k), -1, dtype=np.int64)
    elif top_ids.shape != top_logprobs.shape:
        raise CellError("top_ids", f"top_ids has shape {top_ids.shape} but top_logprobs has shape "
                                   f"{top_logprobs.shape}")
    top_tokens = _decode("top_tokens", cells, n)
    if top_tokens is not None:
        if any(len(r) != k for r in top_tokens):
            raise CellError("top_tokens", f"top_tokens has {len(top_tokens[0]) if top_tokens else 0} alternatives "
                                          f"per token but top_logprobs has {k}")
        top_tokens = tuple(tuple(r) for r in top_tokens)
    return top_logprobs, top_ids, top_tokens


def _metadata(cells: Mapping[str, Any]) -> TraceMetadata:
    """The row's TraceMetadata from its ``trace_metadata`` cell; ``source="imported"`` when the cell is empty."""
    if cells.get("trace_metadata", ABSENT) is ABSENT:
        return TraceMetadata(source="imported")
    meta = cells["trace_metadata"]
    if not isinstance(meta, Mapping):
        raise CellError("trace_metadata", f"is {show(meta)}; expected a JSON object")
    try:
        return TraceMetadata.from_dict(meta)
    except (TypeError, ValueError) as exc:
        raise CellError("trace_metadata", str(exc)) from None


def _check_vocabulary(vocab_size: int | None, token_ids: np.ndarray, top_ids: np.ndarray,
                      ranks: np.ndarray | None) -> None:
    """Ids index the model's vocabulary of ``vocab_size`` tokens (when known), and a rank counts tokens in it."""
    if vocab_size is None:
        return
    beyond = f"at least V = {vocab_size} (trace_metadata's extra.vocab_size): token ids are below V"
    _check_bound(token_ids, "token_ids", token_ids >= vocab_size, beyond)
    _check_bound(top_ids, "top_ids", top_ids >= vocab_size, beyond)
    if ranks is not None:
        _check_bound(ranks, "ranks", ranks > vocab_size,
                     f"above V = {vocab_size} (trace_metadata's extra.vocab_size): a rank counts tokens in V")


def _check_entropy_bound(entropy: np.ndarray, vocab_size: int | None) -> None:
    """A given entropy is at most log V (+ tolerance) when V is known, else at most MAX_ENTROPY_NATS."""
    if vocab_size is None:
        _check_bound(entropy, "entropy", entropy > MAX_ENTROPY_NATS,
                     f"above {MAX_ENTROPY_NATS:.4g} nats = log(2**31) (MAX_ENTROPY_NATS): no vocabulary is that "
                     f"large (entropy over V tokens is at most log V)")
    else:
        _check_bound(entropy, "entropy", entropy > math.log(vocab_size) + ENTROPY_TOLERANCE,
                     f"above log V = {math.log(vocab_size):.4g} nats (V = {vocab_size}, trace_metadata's "
                     f"extra.vocab_size): no distribution over V tokens has more entropy")


def check_trace(trace: Trace) -> Trace:
    """``trace`` as the dataset readers would read it back after :func:`~trace_core.data.write_dataset` wrote it:
    the very checks of :func:`trace_from_cells`. Recording from a model server passes every trace through here, so
    that ``generate`` and ``score`` never write a row their own reader refuses.

    Raises
    ------
    CellError
        The first problem, naming the column (a ValueError).
    """
    cells = {name: (ABSENT if value is None else value) for name, value in trace_cells(trace).items()}
    return trace_from_cells(cells, prompt=trace.prompt, answer=trace.answer)


def vocab_size_of(metadata: TraceMetadata) -> int | None:
    """V from ``metadata.extra["vocab_size"]`` (stored by the recorder); None when not given.

    Raises
    ------
    CellError
        A ``vocab_size`` that is not an integer from 1 to 2**31, naming the ``trace_metadata`` column.
    """
    value = metadata.extra.get("vocab_size")
    if value is None:
        return None
    if not is_int64(value) or isinstance(value, float) or not 1 <= int(value) <= 2**31:
        raise CellError("trace_metadata", f"extra.vocab_size is {show(value)}; expected the vocabulary size, an "
                                          f"integer from 1 to 2**31")
    return int(value)


def _check_top_k_mass(top_logprobs: np.ndarray, top_ids: np.ndarray, surprisal: np.ndarray,
                      token_ids: np.ndarray) -> None:
    """Refuse the first step whose alternatives, plus the chosen token when it is not among them, hold more than
    ``1 + TOP_K_MASS_TOLERANCE`` of probability.

    The chosen token is known not to be among them when its id and the step's ``top_ids`` are known (>= 0) and differ.
    Without ids it cannot be told apart (token texts are decoded pieces, not the server's token strings), so it is
    counted as among them: only the alternatives are summed, and a trace the importer accepted is never refused here.
    """
    alternatives = np.exp(top_logprobs).sum(axis=1)  # -inf and -9999 add 0
    chosen = np.exp(-surprisal)
    doubtful = np.flatnonzero(alternatives + chosen > 1.0 + TOP_K_MASS_TOLERANCE)  # usually none: checked one by one
    for t in doubtful:
        ids_known = token_ids[t] >= 0 and (top_ids[t] >= 0).all()
        among = not ids_known or bool((top_ids[t] == token_ids[t]).any())
        mass = float(alternatives[t]) + (0.0 if among else float(chosen[t]))
        problem = too_much_mass(mass, None if among else float(chosen[t]))
        if problem:
            raise CellError("top_logprobs", f"top_logprobs[{t}] {problem}")


# --------------------------------------------------------------------------------------------------
# Encoding: traces -> cells
# --------------------------------------------------------------------------------------------------

def trace_cells(trace: Trace) -> dict[str, Any]:
    """One trace's :data:`WRITTEN` columns as plain Python values (lists, dicts; None where it has none): the cells a
    writer stores for its row, which :func:`trace_from_cells` reads back into the same trace."""
    fields = trace.to_dict()
    return {column.name: fields[column.field] for column in WRITTEN}  # type: ignore[index]


def trace_column(name: str) -> TraceColumn | None:
    """The registry entry of a column name; None for a column that is not a trace column."""
    return COLUMN_BY_NAME.get(name)


# --------------------------------------------------------------------------------------------------
# The beam column (not part of a trace)
# --------------------------------------------------------------------------------------------------

def parse_beam_logprobs(values: Iterable[object], rows: Iterable[int]) -> list[list[float]]:
    """Decode the ``beam_logprobs`` column: per answer, the log-probabilities of a beam search's beams.

    Parameters
    ----------
    values : iterable
        The column's cells: a JSON list in CSV cells, a list in JSONL/Parquet.
    rows : iterable of int
        The data-row numbers of the cells, used in error messages.

    Returns
    -------
    list of list of float
        One list of at least 2 beam log-probabilities per cell.

    Raises
    ------
    ValueError
        ``"row 7: beam_logprobs: ..."`` for a cell that is not a list of at least 2 numbers.

    Examples
    --------
    >>> parse_beam_logprobs(["[-0.5, -1.5]", [-0.1, -2.0]], [1, 2])
    [[-0.5, -1.5], [-0.1, -2.0]]
    """
    out = []
    for row, value in zip(rows, values, strict=True):
        try:
            parsed = json.loads(value) if isinstance(value, str) else list(value)  # type: ignore[call-overload]
            beams = [float(v) for v in parsed]
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"row {row}: beam_logprobs: not a JSON list of numbers "
                             f"({'nested too deeply' if isinstance(exc, RecursionError) else exc})") from None
        if len(beams) < 2:
            raise ValueError(f"row {row}: beam_logprobs: needs at least 2 beam log-probabilities, got {len(beams)}")
        out.append(beams)
    return out
