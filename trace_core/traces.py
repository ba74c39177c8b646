"""Many answers' traces as columns: :class:`TraceTable`.

Per-token values of every answer lie end to end in one array per column (surprisal, entropy, token ids, ranks), with
``offsets`` marking where each answer starts; each answer's top-k alternatives lie end to end as rows of ``k``
values, so answers may keep different ``k``. Per-answer values (prompt, answer, metadata, the token texts) are lists.

The table is a sequence of :class:`~trace_core.trace.Trace`: ``table[i]`` is answer i as a Trace whose arrays are
views into the columns (no copy), so code written for lists of traces works on a table. What reads every answer at
once takes the columns directly: :func:`~trace_core.score.stack_traces` returns the table's surprisal and entropy
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
from typing import overload

import numpy as np

from .operators import Ragged
from .trace import Trace, TraceMetadata

__all__ = ["TraceTable"]


def _offsets(lengths: Sequence[int]) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64), out=out[1:])
    return out


def _read_only(*arrays: np.ndarray | None) -> None:
    for array in arrays:
        if array is not None:
            array.setflags(write=False)


@dataclass(frozen=True, eq=False)
class TraceTable(Sequence[Trace]):
    """The traces of many answers, column by column (see the module docstring); make one with :meth:`from_traces`.

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
        from .score import as_trace_list

        items = as_trace_list(traces)
        lengths = [len(t) for t in items]
        offsets = _offsets(lengths)
        ks = np.array([t.top_ids.shape[1] for t in items], dtype=np.int64)
        top_offsets = _offsets([n * k for n, k in zip(lengths, ks.tolist(), strict=True)])
        has_entropy = np.array([t.entropy is not None for t in items], dtype=bool)
        has_ranks = np.array([t.ranks is not None for t in items], dtype=bool)

        def joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
            return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)

        table = cls(
            prompts=tuple(t.prompt for t in items), answers=tuple(t.answer for t in items),
            metadata=tuple(t.metadata for t in items), offsets=offsets,
            token_ids=joined([t.token_ids for t in items], np.int64),
            tokens=tuple(tok for t in items for tok in t.tokens),
            surprisal=joined([t.surprisal for t in items], np.float64),
            entropy=joined([t.entropy if t.entropy is not None else np.full(len(t), np.nan) for t in items],
                           np.float64),
            has_entropy=has_entropy, top_k=ks, top_offsets=top_offsets,
            top_ids=joined([t.top_ids.reshape(-1) for t in items], np.int64),
            top_logprobs=joined([t.top_logprobs.reshape(-1) for t in items], np.float64),
            ranks=joined([t.ranks if t.ranks is not None else np.zeros(len(t), np.int64) for t in items], np.int64),
            has_ranks=has_ranks, top_tokens=tuple(t.top_tokens for t in items))
        _read_only(table.offsets, table.token_ids, table.surprisal, table.entropy, table.has_entropy, table.top_k,
                   table.top_offsets, table.top_ids, table.top_logprobs, table.ranks, table.has_ranks)
        return table

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

    def __iter__(self) -> Iterator[Trace]:
        return (self._row(i) for i in range(len(self)))

    def _row(self, i: int) -> Trace:
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        k = int(self.top_k[i])
        ta, tb = int(self.top_offsets[i]), int(self.top_offsets[i + 1])
        return Trace._from_checked(
            prompt=self.prompts[i], answer=self.answers[i], token_ids=self.token_ids[a:b], tokens=self.tokens[a:b],
            surprisal=self.surprisal[a:b], entropy=self.entropy[a:b] if self.has_entropy[i] else None,
            top_ids=self.top_ids[ta:tb].reshape(b - a, k), top_logprobs=self.top_logprobs[ta:tb].reshape(b - a, k),
            ranks=self.ranks[a:b] if self.has_ranks[i] else None, metadata=self.metadata[i],
            top_tokens=self.top_tokens[i])

    @property
    def n_tokens(self) -> int:
        """Tokens of all the answers."""
        return int(self.offsets[-1])

    def surprisal_batch(self) -> Ragged:
        """Every answer's surprisal as one :class:`~trace_core.operators.Ragged` batch (the column, not a copy)."""
        return Ragged(self.surprisal, self.offsets)

    def entropy_batch(self) -> Ragged | None:
        """Every answer's entropy as a batch with the surprisal's offsets; None when any answer has none (as
        :func:`~trace_core.score.stack_traces`: methods that read entropy need it for every answer)."""
        if not bool(self.has_entropy.all()):
            return None
        return self.surprisal_batch().with_values(self.entropy)

    def entropy_sources(self) -> list[str]:
        """Each answer's ``metadata.entropy_source``."""
        return [m.entropy_source for m in self.metadata]

    def __repr__(self) -> str:
        return f"TraceTable({len(self):,} answers, {self.n_tokens:,} tokens)"
