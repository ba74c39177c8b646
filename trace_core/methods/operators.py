"""Local-risk operators over per-token traces.

Every operator takes either one 1-D trace (returns a float) or a :class:`Ragged` batch of traces (returns an array of
shape (n_traces,)), and computes both with the same vectorised code: there is no Python loop over tokens or traces.
An empty trace (T = 0) gives NaN.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
from numpy.typing import ArrayLike

from trace_core.checks import check_choice, check_int, check_real

__all__ = [
    "KERNELS",
    "Ragged",
    "check_paired",
    "float64",
    "decay_weights",
    "decayed_mean",
    "first_k_mean",
    "last_k_mean",
    "length_normalized_sum",
    "segment_max",
    "segment_mean",
    "segment_var",
    "slope",
    "window_means",
    "window_max_mean",
]

KERNELS = ("harmonic", "exponential")  # position weights of the decayed mean (see decay_weights)


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


@overload
def _as_ragged(x: Ragged) -> tuple[Ragged, bool]: ...
@overload
def _as_ragged(x: ArrayLike) -> tuple[Ragged, bool]: ...


def _as_ragged(x):
    """Return (batch, was_single)."""
    if isinstance(x, Ragged):
        return float64(x), False
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"a trace must be 1-D (or a Ragged batch), got shape {arr.shape}")
    return Ragged(arr, np.array([0, arr.shape[0]])), True


def _out(result: np.ndarray, single: bool):
    return float(result[0]) if single else result


def _segment_sum(batch: Ragged, weights: np.ndarray) -> np.ndarray:
    """Per-trace sums of ``weights`` (0 for an empty trace): one contiguous reduction per trace (pairwise summation,
    several times faster than a bincount's scatter over millions of tokens)."""
    weights = np.asarray(weights, dtype=np.float64)
    out = np.zeros(len(batch))
    nonempty = batch.lengths > 0
    if nonempty.any():  # each start reduces up to the next given start: exactly its trace, as in the max below
        with np.errstate(over="ignore"):  # an overflowing sum is inf: the scores' finiteness check names the answer
            out[nonempty] = np.add.reduceat(weights, batch.offsets[:-1][nonempty])
    return out


def _nan_where_empty(result: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    result = np.asarray(result, dtype=np.float64)
    result[lengths == 0] = np.nan
    return result


def _ratio(batch: Ragged, numerator: np.ndarray, denominator: np.ndarray, single: bool) -> float | np.ndarray:
    """``numerator / denominator`` per trace; NaN for empty traces (whose 0/0 is not worth a warning)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        result = numerator / denominator
    return _out(_nan_where_empty(result, batch.lengths), single)


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


def segment_mean(x: ArrayLike | Ragged) -> float | np.ndarray:
    """Mean over tokens: ``(1/T) sum_t x_t``."""
    batch, single = _as_ragged(x)
    return _ratio(batch, _segment_sum(batch, batch.values), batch.lengths, single)


def segment_max(x: ArrayLike | Ragged) -> float | np.ndarray:
    """Maximum over tokens: ``max_t x_t``."""
    batch, single = _as_ragged(x)
    return _out(_segment_reduce_max(batch.values, batch.offsets), single)


def _segment_reduce_max(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    lengths = np.diff(offsets)
    result = np.full(lengths.shape[0], np.nan)
    nonempty = lengths > 0
    if nonempty.any():
        # reduceat over the starts of non-empty segments: each reduces up to the next start, i.e. exactly its segment.
        result[nonempty] = np.maximum.reduceat(values, offsets[:-1][nonempty])
    return result


def segment_var(x: ArrayLike | Ragged) -> float | np.ndarray:
    """Population variance over tokens: ``(1/T) sum_t (x_t - mean x)^2``."""
    batch, single = _as_ragged(x)
    mean = np.asarray(segment_mean(batch))
    centered = batch.values - np.nan_to_num(mean)[batch.segment_ids]
    return _ratio(batch, _segment_sum(batch, centered * centered), batch.lengths, single)


def length_normalized_sum(x: ArrayLike | Ragged, *, rho: float = 0.25) -> float | np.ndarray:
    """``L_rho(x) = sum_t x_t / T**rho`` (rho = 0 is the sum, rho = 1 the mean)."""
    rho = check_real(rho, "rho")
    batch, single = _as_ragged(x)
    return _ratio(batch, _segment_sum(batch, batch.values), np.power(batch.lengths.astype(np.float64), rho), single)


def decay_weights(positions: np.ndarray, *, lam: float = 2.0, kernel: str = "harmonic") -> np.ndarray:
    """Position weights of the decayed mean, largest at the first token.

    ``harmonic``: ``w_t = lam / (lam + t - 1)`` for 1-based t (our kernel; the paper does not give one).
    ``exponential``: ``w_t = exp(-(t - 1) / lam)``.
    ``positions`` are 0-based, so ``t - 1 == positions``.
    """
    lam = check_real(lam, "lam", minimum=0, low_open=True)
    kernel = check_choice(kernel, "kernel", KERNELS)
    positions = np.asarray(positions, dtype=np.float64)
    if kernel == "harmonic":
        return lam / (lam + positions)
    return np.exp(-positions / lam)


def decayed_mean(x: ArrayLike | Ragged, *, lam: float = 2.0, kernel: str = "harmonic") -> float | np.ndarray:
    """Position-decayed mean ``D_lam(x) = sum_t w_t x_t / sum_t w_t`` that weights early tokens more.

    See :func:`decay_weights` for ``w_t``. Small ``lam`` concentrates the weight on the first few tokens.
    """
    batch, single = _as_ragged(x)
    w = decay_weights(batch.positions, lam=lam, kernel=kernel)
    return _ratio(batch, _segment_sum(batch, w * batch.values), _segment_sum(batch, w), single)


def window_means(x: ArrayLike | Ragged, *, w: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Mean of every window of ``w`` consecutive tokens that lies inside one trace.

    Returns
    -------
    means : ndarray, shape (N,)
        ``means[i]`` is the mean of the window *ending* at flat index i; NaN where fewer than ``w`` tokens of the
        same trace end there (at positions < w - 1).
    valid : ndarray of bool, shape (N,)
    """
    w = check_int(w, "w", minimum=1)
    batch, _ = _as_ragged(x)
    values = batch.values
    # Sum of w shifted copies: exact window sums without the cancellation error of cumulative-sum differences.
    sums = values.copy()
    for shift in range(1, w):
        sums[shift:] += values[:-shift]
    valid = batch.positions >= w - 1
    means = np.where(valid, sums / w, np.nan)
    return means, valid


def window_max_mean(x: ArrayLike | Ragged, *, w: int = 4) -> float | np.ndarray:
    """``M_w(x)``: the largest mean over windows of ``w`` consecutive tokens; the whole-trace mean when T < w."""
    batch, single = _as_ragged(x)
    means, _ = window_means(batch, w=w)
    filled = np.where(np.isnan(means), -np.inf, means)
    result = _segment_reduce_max(filled, batch.offsets)
    short = batch.lengths < w
    result[short] = np.asarray(segment_mean(batch))[short]
    return _out(result, single)


def first_k_mean(x: ArrayLike | Ragged, *, k: int = 3) -> float | np.ndarray:
    """Mean of the first ``min(k, T)`` tokens."""
    k = check_int(k, "k", minimum=1)
    batch, single = _as_ragged(x)
    keep = (batch.positions < k).astype(np.float64)
    return _ratio(batch, _segment_sum(batch, keep * batch.values), np.minimum(batch.lengths, k), single)


def last_k_mean(x: ArrayLike | Ragged, *, k: int = 3) -> float | np.ndarray:
    """Mean of the last ``min(k, T)`` tokens."""
    k = check_int(k, "k", minimum=1)
    batch, single = _as_ragged(x)
    from_end = np.repeat(batch.lengths, batch.lengths) - batch.positions  # 1 for the last token
    keep = (from_end <= k).astype(np.float64)
    return _ratio(batch, _segment_sum(batch, keep * batch.values), np.minimum(batch.lengths, k), single)


def slope(x: ArrayLike | Ragged) -> float | np.ndarray:
    """Least-squares slope of ``x_t`` against position t; 0 when T < 2 (NaN when T = 0).

    ``slope = sum_t (t - tbar) x_t / sum_t (t - tbar)^2`` with ``sum_t (t - tbar)^2 = T (T^2 - 1) / 12``.
    """
    batch, single = _as_ragged(x)
    lengths = batch.lengths.astype(np.float64)
    t_centered = batch.positions - np.repeat((lengths - 1) / 2, batch.lengths)
    denom = lengths * (lengths * lengths - 1) / 12
    numer = _segment_sum(batch, t_centered * batch.values)
    with np.errstate(invalid="ignore", divide="ignore"):
        result = np.where(lengths >= 2, numer / np.where(denom > 0, denom, 1.0), 0.0)
    return _out(_nan_where_empty(result, batch.lengths), single)
