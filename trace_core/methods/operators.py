"""Local-risk operators over per-token traces.

Every operator takes either one 1-D trace (returns a float) or a :class:`Ragged` batch of traces (returns an array of
shape (n_traces,)), and computes both with the same vectorised code: there is no Python loop over tokens or traces.
An empty trace (T = 0) gives NaN.
"""

from __future__ import annotations

from typing import overload

import numpy as np
from numpy.typing import ArrayLike

from trace_core.checks import check_choice, check_int, check_real
from trace_core.traces.ragged import Ragged, float64

__all__ = [
    "KERNELS",
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
