"""A batch of variable-length per-token traces stored flat (:class:`Ragged`): one values array and the offsets of each
trace in it, with the index arrays every operator needs computed once per offsets and shared."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["Ragged", "check_paired", "float64"]


@dataclass(frozen=True, eq=False)
class Ragged:
    """A batch of variable-length 1-D traces stored flat.

    Attributes
    ----------
    values : ndarray of float64 (or float32), shape (N,)
        All traces concatenated. float32 values are kept as given, to halve what a large batch holds; every operator
        computes in float64 (:func:`float64` upcasts a float32 batch where it is read), and
        :func:`~trace_core.evaluate_arrays` upcasts one chunk of answers at a time. Any other values are converted
        to float64.
    offsets : ndarray of int64, shape (n_traces + 1,)
        Trace i is ``values[offsets[i]:offsets[i + 1]]``; ``offsets[0] == 0`` and ``offsets[-1] == N``.
    """

    values: np.ndarray
    offsets: np.ndarray

    def __post_init__(self) -> None:
        values = np.asarray(self.values)
        if values.dtype != np.float32:
            values = np.asarray(values, dtype=np.float64)
        offsets = np.asarray(self.offsets, dtype=np.int64)
        if values.ndim != 1:
            raise ValueError(f"`values` must be 1-D, got shape {values.shape}")
        if offsets.ndim != 1 or offsets.shape[0] < 1:
            raise ValueError(f"`offsets` must be 1-D with at least one entry, got shape {offsets.shape}")
        if offsets[0] != 0 or offsets[-1] != values.shape[0] or (np.diff(offsets) < 0).any():
            raise ValueError("`offsets` must start at 0, be non-decreasing and end at len(values)")
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "offsets", offsets)

    @classmethod
    def from_arrays(cls, arrays: Sequence[ArrayLike]) -> Ragged:
        """Build from a sequence of 1-D arrays (one per trace)."""
        parts = [np.asarray(a, dtype=np.float64).reshape(-1) for a in arrays]
        lengths = np.fromiter((p.shape[0] for p in parts), dtype=np.int64, count=len(parts))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        values = np.concatenate(parts) if parts else np.zeros(0)
        return cls(values, offsets)

    def __len__(self) -> int:
        return int(self.offsets.shape[0] - 1)

    # The segmentation's index arrays are computed once and kept read-only, shared by every batch made from this one
    # with with_values (entropy beside surprisal, p = exp(-s), ...): the features and baselines ask for them dozens
    # of times, and at millions of tokens each np.repeat took longer than the statistic using it.

    @property
    def lengths(self) -> np.ndarray:
        """(n_traces,) number of tokens per trace (read-only)."""
        return self._index.lengths

    @property
    def segment_ids(self) -> np.ndarray:
        """(N,) index of the trace each value belongs to (read-only)."""
        return self._index.segment_ids

    @property
    def positions(self) -> np.ndarray:
        """(N,) 0-based position of each value within its trace (read-only)."""
        return self._index.positions

    @functools.cached_property
    def _index(self) -> _Segmentation:
        return _Segmentation(self.offsets)

    def with_values(self, values: np.ndarray) -> Ragged:
        """Same segmentation, new values (e.g. ``exp(-s)`` from ``s``); shares the index arrays, whichever of the two
        computes them first."""
        other = Ragged(values, self.offsets)
        other.__dict__["_index"] = self._index
        return other

    def split(self) -> list[np.ndarray]:
        """Back to a list of 1-D arrays."""
        return np.split(self.values, self.offsets[1:-1])


class _Segmentation:
    """The index arrays of one ``offsets``, each computed on first use. Two threads may both compute one: the same
    values, and either result is kept."""

    def __init__(self, offsets: np.ndarray) -> None:
        self.offsets = offsets

    @functools.cached_property
    def lengths(self) -> np.ndarray:
        return _read_only(np.diff(self.offsets))

    @functools.cached_property
    def segment_ids(self) -> np.ndarray:
        return _read_only(np.repeat(np.arange(self.offsets.shape[0] - 1), self.lengths))

    @functools.cached_property
    def positions(self) -> np.ndarray:
        return _read_only(np.arange(int(self.offsets[-1])) - np.repeat(self.offsets[:-1], self.lengths))


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def float64(batch: Ragged) -> Ragged:
    """``batch`` with float64 values: a float32 batch's values upcast (a copy that shares its index arrays), any
    other batch as it is."""
    if batch.values.dtype == np.float64:
        return batch
    return batch.with_values(batch.values.astype(np.float64))


def check_paired(surprisal: Ragged, entropy: Ragged | None, *, who: str) -> None:
    """ValueError unless ``surprisal`` and ``entropy`` hold the same traces and none is empty (``who`` says what
    needs a token, e.g. ``"TRACE+ needs"``).

    ``entropy`` may be None (traces without entropy, see :func:`trace_core.methods.risk.stack_traces`): then only the
    surprisal batch is checked.
    """
    if entropy is not None and not np.array_equal(surprisal.offsets, entropy.offsets):
        raise ValueError("`surprisal` and `entropy` must have the same offsets (the same traces)")
    empty = np.flatnonzero(surprisal.lengths == 0)
    if empty.size:
        raise ValueError(f"trace {int(empty[0])} is empty; {who} at least one token")
