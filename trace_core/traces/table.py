"""Many answers' traces as columns: :class:`TraceTable`.

Per-token values of every answer lie end to end in one array per column (surprisal, entropy, token ids, ranks), with
``offsets`` marking where each answer starts; each answer's top-k alternatives lie end to end as rows of ``k``
values, so answers may keep different ``k``. Per-answer values (prompt, answer, metadata, the token texts) are lists.

The table is a sequence of :class:`~trace_core.traces.trace.Trace`: ``table[i]`` is answer i as a Trace whose arrays are
views into the columns (no copy), so code written for lists of traces works on a table. What reads every answer at
once takes the columns directly: :func:`~trace_core.methods.risk.stack_traces` returns the table's surprisal and entropy
batches without re-stacking them, so :func:`~trace_core.evaluate`, the features, the baselines and the calibrators
stack the traces once, when the table is made, instead of at every call.

Examples
--------
>>> from trace_core import Trace
>>> traces = [Trace(prompt="q", answer=a, token_ids=list(range(len(a))), tokens=tuple(a), surprisal=[0.1] * len(a),
...                 entropy=[0.5] * len(a), top_ids=[], top_logprobs=[]) for a in ("yes", "no")]
>>> table = TraceTable.from_traces(traces)
>>> table, table[1].answer, table[1].tokens, table.surprisal_batch().lengths.tolist()
(TraceTable(2 answers, 5 tokens), 'no', ('n', 'o'), [3, 2])
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, overload

import numpy as np

from trace_core.traces.columns import COLUMN_BY_NAME, WRITTEN, trace_cells
from trace_core.traces.ragged import Ragged
from trace_core.traces.trace import Trace, TraceMetadata

__all__ = ["TableBuilder", "TraceTable", "as_trace_list", "as_traces", "gather", "traces_to_columns"]


def _offsets(lengths: Sequence[int]) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64), out=out[1:])
    return out


def _read_only(*arrays: np.ndarray | None) -> None:
    for array in arrays:
        if array is not None:
            array.setflags(write=False)


def _ragged_index(offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The positions, in a column with these offsets, of the values of ``rows`` one after another."""
    starts, lengths = offsets[rows], offsets[rows + 1] - offsets[rows]
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    begins = np.zeros(len(rows), dtype=np.int64)  # where each row's values begin in the output
    np.cumsum(lengths[:-1], out=begins[1:])
    return np.repeat(starts - begins, lengths) + np.arange(total, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class TraceTable(Sequence[Trace]):
    """The traces of many answers, column by column (see the module docstring); make one with :meth:`from_traces`
    or a :class:`TableBuilder`. Each per-token column has the dtype that the trace column spec gives it
    (:data:`~trace_core.traces.columns.COLUMNS`).

    Attributes
    ----------
    prompts, answers : tuple of str
        Per answer.
    metadata : tuple of TraceMetadata
        Per answer.
    offsets : ndarray of int64, shape (n + 1,)
        Answer i's tokens are ``offsets[i]:offsets[i + 1]`` of every per-token column.
    token_ids : ndarray of int64, shape (N,)
    tokens : tuple of str, length N
    surprisal : ndarray of float64, shape (N,)
    entropy : ndarray of float64, shape (N,)
        NaN for the tokens of answers without entropy (``has_entropy`` False).
    has_entropy : ndarray of bool, shape (n,)
    top_k : ndarray of int64, shape (n,)
        Each answer's number of alternatives per token.
    top_offsets : ndarray of int64, shape (n + 1,)
        Answer i's alternatives are ``top_offsets[i]:top_offsets[i + 1]`` of ``top_ids`` and ``top_logprobs``, in
        token order, ``top_k[i]`` per token.
    top_ids : ndarray of int64
    top_logprobs : ndarray of float64
    ranks : ndarray of int64, shape (N,)
        0 for the tokens of answers without ranks (``has_ranks`` False).
    has_ranks : ndarray of bool, shape (n,)
    top_tokens : tuple
        Per answer: its alternatives' texts (a tuple of tuples) or None.
    """

    prompts: tuple[str, ...]
    answers: tuple[str, ...]
    metadata: tuple[TraceMetadata, ...]
    offsets: np.ndarray
    token_ids: np.ndarray
    tokens: tuple[str, ...]
    surprisal: np.ndarray
    entropy: np.ndarray
    has_entropy: np.ndarray
    top_k: np.ndarray
    top_offsets: np.ndarray
    top_ids: np.ndarray
    top_logprobs: np.ndarray
    ranks: np.ndarray
    has_ranks: np.ndarray
    top_tokens: tuple[tuple[tuple[str, ...], ...] | None, ...]

    @classmethod
    def from_traces(cls, traces: Sequence[Trace] | TraceTable) -> TraceTable:
        """The table of ``traces`` (a table is returned as it is). Every value is the trace's own (checked when the
        Trace was made)."""
        if isinstance(traces, TraceTable):
            return traces

        builder = TableBuilder()
        for trace in as_trace_list(traces):
            builder.add(trace)
        return builder.build()

    def take(self, indices: Sequence[int] | np.ndarray) -> TraceTable:
        """The table of the answers at ``indices`` (in that order; repeats allowed), its columns gathered at once.

        Examples
        --------
        >>> from trace_core import Trace
        >>> t = [Trace(prompt="q", answer=a, token_ids=[0], tokens=(a,), surprisal=[0.1], entropy=[0.5],
        ...            top_ids=[], top_logprobs=[]) for a in "xyz"]
        >>> [row.answer for row in TraceTable.from_traces(t).take([2, 0])]
        ['z', 'x']
        """
        index = np.asarray(indices)
        if index.ndim != 1 or (index.size and index.dtype.kind not in "iu"):
            raise TypeError(f"`indices` must be a 1-D sequence of ints, got {index.dtype} of shape {index.shape}")
        index = index.astype(np.int64, copy=False)
        n = len(self)
        if index.size and (index.min() < -n or index.max() >= n):
            raise IndexError(f"an index of `indices` is out of range for a table of {n} answers")
        index = np.where(index < 0, index + n, index)
        if index.shape[0] == n and bool((index == np.arange(n)).all()):
            return self
        if index.shape[0] > 1 and bool((np.diff(index) == 1).all()):  # consecutive answers: views, no gather
            a, b = int(index[0]), int(index[-1]) + 1
            ta, tb, pa, pb = (int(x) for x in (self.offsets[a], self.offsets[b], self.top_offsets[a],
                                                self.top_offsets[b]))
            return self._select(slice(a, b), slice(ta, tb), slice(pa, pb), self.offsets[a:b + 1] - ta,
                                self.top_offsets[a:b + 1] - pa)
        return self._select(index, _ragged_index(self.offsets, index), _ragged_index(self.top_offsets, index),
                            _offsets(np.diff(self.offsets)[index]), _offsets(np.diff(self.top_offsets)[index]))

    def _select(self, answers: slice | np.ndarray, tokens: slice | np.ndarray, tops: slice | np.ndarray,
                offsets: np.ndarray, top_offsets: np.ndarray) -> TraceTable:
        """The table of the answers, tokens and alternatives at these positions (slices: views; index arrays: a
        gather), with the offsets that go with them."""
        def pick(values: tuple, at: slice | np.ndarray) -> tuple:
            return values[at] if isinstance(at, slice) else tuple(map(values.__getitem__, at.tolist()))

        table = TraceTable(
            prompts=pick(self.prompts, answers), answers=pick(self.answers, answers),
            metadata=pick(self.metadata, answers), offsets=offsets, token_ids=self.token_ids[tokens],
            tokens=pick(self.tokens, tokens), surprisal=self.surprisal[tokens], entropy=self.entropy[tokens],
            has_entropy=self.has_entropy[answers], top_k=self.top_k[answers], top_offsets=top_offsets,
            top_ids=self.top_ids[tops], top_logprobs=self.top_logprobs[tops], ranks=self.ranks[tokens],
            has_ranks=self.has_ranks[answers], top_tokens=pick(self.top_tokens, answers))
        table._freeze()
        return table

    def _freeze(self) -> None:
        _read_only(self.offsets, self.token_ids, self.surprisal, self.entropy, self.has_entropy, self.top_k,
                   self.top_offsets, self.top_ids, self.top_logprobs, self.ranks, self.has_ranks)

    def __len__(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @overload
    def __getitem__(self, index: int) -> Trace: ...

    @overload
    def __getitem__(self, index: slice) -> list[Trace]: ...

    def __getitem__(self, index: int | slice) -> Trace | list[Trace]:
        """Answer ``index`` as a Trace whose arrays are views into the columns (a slice gives a list of them)."""
        if isinstance(index, slice):
            return [self._row(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"a TraceTable is indexed by int or slice, got {type(index).__name__}")
        i = int(index) + n if index < 0 else int(index)
        if not 0 <= i < n:
            raise IndexError(f"answer {index} of a table of {n}")
        return self._row(i)

    def __eq__(self, other: object) -> bool:
        """Equal to a table, list or tuple holding equal traces in the same order (as a list of the traces would
        be), so a table may stand where a list of traces was compared."""
        if not isinstance(other, (TraceTable, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # like a list of traces: not hashable

    def __add__(self, other: object) -> Any:
        """A table and a table: their table. A table and a list of traces: the list of all (as lists add), so
        code that extends a list of traces keeps working on a table."""
        if isinstance(other, TraceTable):
            builder = TableBuilder()
            for row in (*self, *other):
                builder.add(row)
            return builder.build()
        if isinstance(other, list):
            return [*self, *other]
        return NotImplemented

    def __radd__(self, other: object) -> Any:
        if isinstance(other, list):
            return [*other, *self]
        return NotImplemented

    def __iter__(self) -> Iterator[Trace]:
        return (self._row(i) for i in range(len(self)))

    def _row(self, i: int) -> Trace:
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        k = int(self.top_k[i])
        ta, tb = int(self.top_offsets[i]), int(self.top_offsets[i + 1])
        return Trace.from_checked(
            prompt=self.prompts[i], answer=self.answers[i], token_ids=self.token_ids[a:b], tokens=self.tokens[a:b],
            surprisal=self.surprisal[a:b], entropy=self.entropy[a:b] if self.has_entropy[i] else None,
            top_ids=self.top_ids[ta:tb].reshape(b - a, k), top_logprobs=self.top_logprobs[ta:tb].reshape(b - a, k),
            ranks=self.ranks[a:b] if self.has_ranks[i] else None, metadata=self.metadata[i],
            top_tokens=self.top_tokens[i])

    def to_columns(self) -> dict[str, list[Any]]:
        """Every answer's fields as :meth:`Trace.to_dict <trace_core.traces.trace.Trace.to_dict>` gives them, one list
        per field (``prompt``, ``answer``, ``token_ids``, ...), each column converted to Python values once rather than
        answer by answer (what the writers take)."""
        bounds, top_bounds, ks = self.offsets.tolist(), self.top_offsets.tolist(), self.top_k.tolist()
        ids, surprisal, ranks = self.token_ids.tolist(), self.surprisal.tolist(), self.ranks.tolist()
        entropy = self.entropy.tolist()
        has_entropy, has_ranks = self.has_entropy.tolist(), self.has_ranks.tolist()
        out: dict[str, list[Any]] = {name: [] for name in ("token_ids", "tokens", "surprisal", "entropy", "top_ids",
                                                           "top_logprobs", "ranks", "top_tokens")}
        for i in range(len(self)):
            a, b, k = bounds[i], bounds[i + 1], ks[i]
            ta, tb = top_bounds[i], top_bounds[i + 1]
            out["token_ids"].append(ids[a:b])
            out["tokens"].append(list(self.tokens[a:b]))
            out["surprisal"].append(surprisal[a:b])
            out["entropy"].append(entropy[a:b] if has_entropy[i] else None)
            out["top_ids"].append(self.top_ids[ta:tb].reshape(b - a, k).tolist())  # nested lists made in C
            out["top_logprobs"].append(self.top_logprobs[ta:tb].reshape(b - a, k).tolist())
            out["ranks"].append(ranks[a:b] if has_ranks[i] else None)
            top = self.top_tokens[i]
            out["top_tokens"].append(None if top is None else [list(row) for row in top])
        return {"prompt": list(self.prompts), "answer": list(self.answers), **out,
                "metadata": [m.to_dict() for m in self.metadata]}

    @property
    def n_tokens(self) -> int:
        """Tokens of all the answers."""
        return int(self.offsets[-1])

    def surprisal_batch(self) -> Ragged:
        """Every answer's surprisal as one :class:`~trace_core.methods.operators.Ragged` batch (the column, not a
        copy)."""
        return Ragged(self.surprisal, self.offsets)

    def entropy_batch(self) -> Ragged | None:
        """Every answer's entropy as a batch with the surprisal's offsets; None when any answer has none (as
        :func:`~trace_core.methods.risk.stack_traces`: methods that read entropy need it for every answer)."""
        if not bool(self.has_entropy.all()):
            return None
        return self.surprisal_batch().with_values(self.entropy)

    def entropy_sources(self) -> list[str]:
        """Each answer's ``metadata.entropy_source``."""
        return [m.entropy_source for m in self.metadata]

    def __repr__(self) -> str:
        return f"TraceTable({len(self):,} answers, {self.n_tokens:,} tokens)"


class TableBuilder:
    """Collects answers one at a time and makes their :class:`TraceTable` with one concatenation per column.

    :meth:`add` takes anything with a Trace's fields (``prompt``, ``answer``, ``token_ids``, ``tokens``,
    ``surprisal``, ``entropy``, ``top_ids``, ``top_logprobs``, ``ranks``, ``metadata``, ``top_tokens``): a
    :class:`~trace_core.traces.trace.Trace`, or a reader's row whose values it has checked as Trace does (the readers
    add their checked chunk rows here directly, so no Trace is made per answer). Arrays are kept until :meth:`build`, as
    given.
    """

    def __init__(self) -> None:
        self._rows: list[Any] = []

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, row: Any) -> None:
        self._rows.append(row)

    def build(self) -> TraceTable:
        rows = self._rows
        lengths = [len(r.tokens) for r in rows]
        ks = np.array([r.top_ids.shape[1] for r in rows], dtype=np.int64)

        def column(name: str, parts: list[np.ndarray]) -> np.ndarray:  # typed as the trace column spec says
            return _joined(parts, COLUMN_BY_NAME[name].dtype)

        table = TraceTable(
            prompts=tuple(r.prompt for r in rows), answers=tuple(r.answer for r in rows),
            metadata=tuple(r.metadata for r in rows), offsets=_offsets(lengths),
            token_ids=column("token_ids", [r.token_ids for r in rows]),
            tokens=tuple(chain.from_iterable(r.tokens for r in rows)),
            surprisal=column("surprisal", [r.surprisal for r in rows]),
            entropy=column("entropy", [r.entropy if r.entropy is not None else np.full(n, np.nan)
                                       for r, n in zip(rows, lengths, strict=True)]),
            has_entropy=np.array([r.entropy is not None for r in rows], dtype=bool), top_k=ks,
            top_offsets=_offsets([n * k for n, k in zip(lengths, ks.tolist(), strict=True)]),
            top_ids=column("top_ids", [r.top_ids.reshape(-1) for r in rows]),
            top_logprobs=column("top_logprobs", [r.top_logprobs.reshape(-1) for r in rows]),
            ranks=column("ranks", [r.ranks if r.ranks is not None else np.zeros(n, np.int64)
                                   for r, n in zip(rows, lengths, strict=True)]),
            has_ranks=np.array([r.ranks is not None for r in rows], dtype=bool),
            top_tokens=tuple(r.top_tokens for r in rows))
        table._freeze()
        return table


def _joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)


def gather(traces: Sequence[Any], indices: Sequence[int] | np.ndarray) -> Sequence[Any]:
    """The items of ``traces`` at ``indices``: a table's as a table (:meth:`TraceTable.take`: its columns stay
    columns), any other sequence's as a list."""
    if isinstance(traces, TraceTable):
        return traces.take(indices)
    return [traces[int(i)] for i in indices]


def as_trace_list(traces: Any) -> list[Trace]:
    if isinstance(traces, Trace):
        raise TypeError("`traces` must be a sequence of Trace objects; wrap a single trace in a list")
    traces = list(traces)
    for i, trace in enumerate(traces):
        if not isinstance(trace, Trace):
            raise TypeError(f"`traces[{i}]` must be a Trace, got {type(trace).__name__}")
    return traces


def as_traces(traces: Any) -> Sequence[Trace]:
    """Many traces as the functions that take them read them: a :class:`~trace_core.traces.table.TraceTable` as it is
    (its columns are read; no Trace is made per answer), anything else as a checked list (:func:`as_trace_list`)."""
    return traces if isinstance(traces, TraceTable) else as_trace_list(traces)


def traces_to_columns(traces: Sequence[Trace | None]) -> dict[str, list[Any]]:
    """Trace columns as plain Python lists, one entry per trace (None where a trace is None).

    Parameters
    ----------
    traces : sequence of Trace or None

    Returns
    -------
    dict
        ``tokens``, ``token_ids``, ``surprisal``, ``entropy``, ``top_ids``, ``top_logprobs`` (lists per trace),
        ``top_tokens`` and ``ranks`` (None where the trace has none) and ``trace_metadata`` (dicts): every column of
        :data:`~trace_core.traces.columns.COLUMNS` but the read-only ``logprobs``. Together they rebuild each trace
        exactly (with its row's prompt and answer).

    Examples
    --------
    >>> traces_to_columns([None])["tokens"]
    [None]
    """
    if isinstance(traces, TraceTable):  # column by column
        fields = traces.to_columns()
        return {column.name: fields[column.field] for column in WRITTEN}  # type: ignore[index]
    out: dict[str, list[Any]] = {c.name: [] for c in WRITTEN}
    for i, trace in enumerate(traces):
        if trace is None:
            for values in out.values():
                values.append(None)
            continue
        if not isinstance(trace, Trace):
            raise TypeError(f"`traces[{i}]` must be a Trace or None, got {type(trace).__name__}")
        for name, value in trace_cells(trace).items():
            out[name].append(value)
    return out
