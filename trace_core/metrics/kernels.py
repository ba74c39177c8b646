"""The metrics' kernels: each metric computed from its sufficient statistics, on arrays already checked.

The public metrics (:mod:`trace_core.metrics`) check their inputs once and call these; so do
:class:`~trace_core.metrics.RankGroups`, the evaluation protocol (which checks labels and scores once for all its
splits) and :func:`~trace_core.metrics.bootstrap_ci` (through the metrics' ``validate=False``). One kernel per
metric means the protocol's numbers are the public functions' numbers by construction.

Sufficient statistics:

- ranking metrics (AUROC, AUPRC, AURC, PRR): the answers' tie groups in ascending score order, ``total`` answers
  and ``pos`` correct ones per distinct score (:func:`tie_groups`); every running count comes from their
  cumulative sums;
- binned calibration metrics (ECE, the reliability table): per bin the count, the sum of probabilities and the
  number correct (:func:`bin_sums`), from the one binning of :func:`~trace_core.metrics.bin_probabilities`;
- Brier: the mean squared difference itself.

Inputs here are trusted: ``y`` int64 0/1, scores finite float64, equal lengths; anything else gives undefined
results.

Compiled loops: where numpy needs a dozen passes over an array for sums that one loop gives, the loop is written
once in plain Python (``*_loop``) and :func:`compiled` hands it to numba (``pip install trace-core[fast]``), compiled
on first use and cached on disk; without numba the numpy expressions run instead. Both give the same numbers up to
the order of summation (relative differences near 1e-15); tests compare them.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["RADIX_FROM", "USE_COMPILED", "aurc_of_groups", "bin_edges_and_ids", "bin_ids", "bin_sums",
           "brier_and_ece_of_monotone", "brier_kernel", "compiled", "compiled_sums", "ece_kernel", "ece_of_ascending",
           "ece_of_sums", "harmonic", "harmonic_steps", "oracle_aurc", "prr_of_aurc", "radix_argsort_loop",
           "ranking_of_groups", "singletons_loop", "stable_argsort", "tie_groups", "uniform_edges"]


#: Whether a kernel with a compiled loop runs it when numba is installed; False runs the numpy path everywhere (the
#: tests compare the two).
USE_COMPILED = True

_compiled_loops: dict[Callable[..., Any], Callable[..., Any] | None] = {}
_compile_lock = threading.Lock()


def compiled(loop: Callable[..., Any]) -> Callable[..., Any] | None:
    """``loop`` compiled by numba (``nogil``: the protocol runs methods on threads; cached on disk, so only a
    process's first call of a new signature compiles), or None when numba is missing or :data:`USE_COMPILED` is
    False. numba is imported here, on first use: ``import trace_core`` stays light."""
    if not USE_COMPILED:
        return None
    with _compile_lock:
        if loop not in _compiled_loops:
            try:
                import numba
            except ImportError:
                _compiled_loops[loop] = None
            else:
                _compiled_loops[loop] = numba.njit(cache=True, nogil=True)(loop)
    return _compiled_loops[loop]


def compiled_sums() -> Any:
    """:mod:`trace_core.metrics.compiled_sums` (loops whose sums are numpy's, bit for bit), or None when numba is
    missing or :data:`USE_COMPILED` is False; imported here, on first use, like :func:`compiled`'s loops."""
    if not USE_COMPILED:
        return None
    try:
        from trace_core.metrics import compiled_sums as loops
    except ImportError:
        return None
    return loops


# LSD radix sort of float64 keys: 6 passes of 11-bit digits over the 64 bits (a pass whose digit is the same for
# every key is skipped).
_RADIX_BITS = 11
_RADIX_PASSES = 6
#: From this many scores :func:`stable_argsort` takes the compiled radix sort (below, numpy's is as fast).
RADIX_FROM = 4096


def radix_argsort_loop(keys: NDArray[np.uint64], order: NDArray[np.int64]) -> None:
    """Write into ``order`` the stable ascending order of ``keys`` (LSD radix sort; compiled by :func:`compiled`)."""
    n = keys.shape[0]
    buckets = 1 << _RADIX_BITS
    mask = np.uint64(buckets - 1)
    counts = np.zeros((_RADIX_PASSES, buckets), dtype=np.int64)
    for i in range(n):
        for p in range(_RADIX_PASSES):
            counts[p, (keys[i] >> np.uint64(_RADIX_BITS * p)) & mask] += 1
    src_key, dst_key = keys.copy(), np.empty(n, dtype=np.uint64)
    src_idx, dst_idx = np.arange(n), np.empty(n, dtype=np.int64)
    offsets = np.empty(buckets, dtype=np.int64)
    for p in range(_RADIX_PASSES):
        if counts[p].max() == n:  # one digit for every key: the pass would not move anything
            continue
        total = 0
        for d in range(buckets):
            offsets[d] = total
            total += counts[p, d]
        shift = np.uint64(_RADIX_BITS * p)
        for i in range(n):
            d = (src_key[i] >> shift) & mask
            at = offsets[d]
            offsets[d] = at + 1
            dst_key[at] = src_key[i]
            dst_idx[at] = src_idx[i]
        src_key, dst_key = dst_key, src_key
        src_idx, dst_idx = dst_idx, src_idx
    order[:] = src_idx


def stable_argsort(x: NDArray[np.float64]) -> NDArray[np.int64]:
    """``np.argsort(x, kind="stable")`` of finite scores, the same order: with numba, from :data:`RADIX_FROM`
    scores, a compiled radix sort of the scores' bits (2 to 3 times faster than numpy's sort of the protocol's
    part sizes). The bits are mapped to unsigned keys in the order of the values, -0.0 taken as 0.0."""
    loop = compiled(radix_argsort_loop) if x.shape[0] >= RADIX_FROM else None
    if loop is None:
        return np.argsort(x, kind="stable")
    bits = (x + 0.0).view(np.uint64)  # + 0.0 turns -0.0 into 0.0, which it equals
    keys = np.where(bits >> np.uint64(63), ~bits, bits | np.uint64(1 << 63))  # negatives reversed, below positives
    order = np.empty(x.shape[0], dtype=np.int64)
    loop(keys, order)
    return order


def tie_groups(y: NDArray[np.int64], score: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The ranking metrics' sufficient statistics: per distinct score, ascending, the number of answers and the
    number correct (one sort)."""
    values, inverse = np.unique(score, return_inverse=True)
    inverse = inverse.reshape(-1)
    total = np.bincount(inverse, minlength=values.size).astype(np.float64)
    # weighted counts are floats (the stubs type every bincount as integers)
    pos = np.asarray(np.bincount(inverse, weights=y.astype(np.float64), minlength=values.size), dtype=np.float64)
    return total, pos


def brier_kernel(y: NDArray[np.int64], p: NDArray[np.float64]) -> float:
    """:func:`brier_score` of checked arrays (the evaluation protocol's inner loop: its inputs are checked once)."""
    return float(((p - y) ** 2).mean())


def bin_edges_and_ids(p: NDArray[np.float64], n_bins: int,
                      strategy: str) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """:func:`bin_probabilities` of checked probabilities and settings."""
    if strategy == "uniform":
        edges = uniform_edges(n_bins)
    else:
        edges = np.percentile(p, np.linspace(0.0, 1.0, n_bins + 1) * 100)
    return edges.astype(np.float64), bin_ids(edges[1:-1], p)


def bin_ids(inner: NDArray[np.float64], p: NDArray[np.float64]) -> NDArray[np.int64]:
    """``searchsorted(inner, p, side="left")``: the number of inner edges below each probability. With the usual
    few edges, counting with one comparison per edge is several times faster than the binary search."""
    if inner.shape[0] > 16:
        return np.searchsorted(inner, p).astype(np.int64)
    ids = np.zeros(p.shape[0], dtype=np.int64)
    for edge in inner:
        ids += p > edge
    return ids


@functools.lru_cache(maxsize=8)
def uniform_edges(n_bins: int) -> NDArray[np.float64]:
    """``linspace(0, 1, n_bins + 1)``, read-only: the protocol bins thousands of probability vectors alike."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    edges.flags.writeable = False
    return edges


def bin_sums(
    y: NDArray[np.int64], p: NDArray[np.float64], n_bins: int, strategy: str
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Per-bin (edges, count, sum of probabilities, number correct) of checked arrays and settings, in the bins of
    :func:`bin_probabilities`."""
    edges, ids = bin_edges_and_ids(p, n_bins, strategy)
    count = np.bincount(ids, minlength=n_bins).astype(np.int64)
    # weighted counts are floats (the stubs type every bincount as integers)
    sum_prob = np.asarray(np.bincount(ids, weights=p, minlength=n_bins), dtype=np.float64)
    n_correct = np.asarray(np.bincount(ids, weights=y.astype(np.float64), minlength=n_bins), dtype=np.float64)
    return edges, count, sum_prob, n_correct


def ece_kernel(y: NDArray[np.int64], p: NDArray[np.float64], n_bins: int, strategy: str = "uniform") -> float:
    """:func:`expected_calibration_error` of checked arrays and settings."""
    _, count, sum_prob, n_correct = bin_sums(y, p, n_bins, strategy)
    return ece_of_sums(count, sum_prob, n_correct, y.shape[0])


def ece_of_sums(count: NDArray[np.int64], sum_prob: NDArray[np.float64], n_correct: NDArray[Any],
                n: int) -> float:
    """ECE from the bins' counts, sums of probabilities and numbers correct, over ``n`` answers (empty bins left
    out)."""
    nonempty = count > 0
    acc = n_correct[nonempty] / count[nonempty]
    conf = sum_prob[nonempty] / count[nonempty]
    return float(np.sum(count[nonempty] / n * np.abs(acc - conf)))


def ece_of_ascending(y: NDArray[np.int64], p: NDArray[np.float64], n_bins: int) -> float:
    """:func:`ece_kernel` with uniform bins of probabilities in monotone order (the evaluation protocol predicts each
    part in ascending score order, and a calibrator is monotone): each bin is then a run of ``p``, found by a binary
    search per edge instead of comparing every probability with every edge. Any other order falls back to
    :func:`ece_kernel`; the sums are the same up to the order of summation."""
    n = p.shape[0]
    ascending = p if n < 2 or p[-1] >= p[0] else p[::-1]
    if n > 1 and not bool(np.all(ascending[1:] >= ascending[:-1])):
        return ece_kernel(y, p, n_bins)
    y, p = (y, p) if ascending is p else (y[::-1], ascending)
    # Bin b holds edges[b] < p <= edges[b + 1] (see bin_probabilities): it starts after the last p <= edges[b].
    bounds = np.concatenate(([0], np.searchsorted(p, uniform_edges(n_bins)[1:-1], side="right"), [n]))
    count = np.diff(bounds)
    starts = bounds[:-1][count > 0]
    sum_prob, n_correct = np.zeros(n_bins), np.zeros(n_bins, dtype=np.int64)
    sum_prob[count > 0] = np.add.reduceat(p, starts)
    n_correct[count > 0] = np.add.reduceat(y, starts)
    return ece_of_sums(count, sum_prob, n_correct, n)


def brier_and_ece_of_monotone(y: NDArray[np.int64], p: NDArray[np.float64], n_bins: int) -> tuple[float, float]:
    """:func:`brier_kernel` and :func:`ece_of_ascending` of the same probabilities (uniform bins), the same numbers
    bit for bit: with numba one compiled call for both (:func:`~trace_core.metrics.compiled_sums.brier_and_ece`,
    which sums as numpy does) instead of some twenty small numpy calls; the evaluation protocol asks for both on every
    calibrator, method and split."""
    loops = compiled_sums() if p.shape[0] else None
    if loops is None:
        return brier_kernel(y, p), ece_of_ascending(y, p, n_bins)
    brier, ece, monotone = loops.brier_and_ece(y, p, uniform_edges(n_bins)[1:-1])
    return float(brier), (float(ece) if monotone else ece_kernel(y, p, n_bins))


@functools.lru_cache(maxsize=4)
def harmonic(n: int) -> NDArray[np.float64]:
    """``[H_0, H_1, ..., H_n]`` (read-only): the evaluation protocol asks for the same two sizes on every split."""
    table = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, n + 1, dtype=np.float64))])
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=4)
def harmonic_steps(n: int) -> NDArray[np.float64]:
    """``H_j - H_{j-1}`` for j = 1 .. n, as :func:`aurc_of_groups` computes them for groups of one (read-only)."""
    table = harmonic(n)
    steps = table[1:] - table[:-1]
    steps.flags.writeable = False
    return steps


def aurc_of_groups(sizes: NDArray[np.float64], errors: NDArray[np.float64], *,
                   kept_before: NDArray[np.float64] | None = None,
                   errors_before: NDArray[np.float64] | None = None) -> float:
    """AURC from tied groups in decreasing confidence, in O(groups) after an O(n) harmonic table.

    Inside a group of m answers with error rate r, kept after K answers with E expected errors, the risks at
    k = K+1 .. K+m sum to ``m r + (E - K r)(H_{K+m} - H_K)`` with H the harmonic numbers; this equals the mean of
    :func:`risk_coverage_curve`'s risks without expanding the groups to answers. ``kept_before`` (K) and
    ``errors_before`` (E) per group, when the caller has them, save their cumulative sums.
    """
    n = int(sizes.sum())
    table = harmonic(n)
    rate = errors / sizes
    if kept_before is None:
        kept_before = np.cumsum(sizes) - sizes
    if errors_before is None:
        errors_before = np.cumsum(errors) - errors
    ends = kept_before.astype(np.int64)
    h = table[ends + sizes.astype(np.int64)] - table[ends]
    return float(np.sum(sizes * rate + (errors_before - kept_before * rate) * h) / n)


def oracle_aurc(n_correct: int, n_wrong: int) -> float:
    """AURC of the oracle order (every correct answer first): ``risk_k = max(0, k - n_c) / k``, so
    ``AURC_oracle = (n_w - n_c (H_n - H_{n_c})) / n`` with ``H`` the harmonic numbers and ``n = n_c + n_w``."""
    n = n_correct + n_wrong
    tail = float(np.sum(1.0 / np.arange(n_correct + 1, n + 1, dtype=np.float64)))  # H_n - H_{n_c}
    return (n_wrong - n_correct * tail) / n


def prr_of_aurc(aurc_value: float, n_correct: int, n_wrong: int) -> float:
    """PRR from the method's AURC and the class counts (both classes present)."""
    random = n_wrong / (n_correct + n_wrong)
    return (random - aurc_value) / (random - oracle_aurc(n_correct, n_wrong))


def ranking_of_groups(total: NDArray[np.float64], pos: NDArray[np.float64], *, both_classes: bool,
                      singletons: bool = False) -> dict[str, float]:
    """AUROC, AUPRC, AURC and PRR from the answers' tie groups in ascending score order: ``total`` answers and
    ``pos`` correct ones per group (every ``total`` > 0; ``singletons``: every ``total`` is 1). AUROC, AUPRC and PRR
    are nan unless ``both_classes``.

    Every running count comes from two cumulative sums (of ``total`` and ``pos``); the counts from the top are their
    complements. Sums of whole numbers are exact in float64 (below 2**53), so these are the same numbers as summing
    each series on its own, with fewer passes over the groups."""
    if singletons:
        return _ranking_of_singletons(pos, both_classes=both_classes)
    neg = total - pos
    n = float(total.sum())
    cum_total = np.cumsum(total)
    cum_pos = np.cumsum(pos)
    top_total = n - cum_total + total  # answers scoring at or above each group
    top_pos = cum_pos[-1] - cum_pos + pos
    top_neg = top_total - top_pos
    out = {"aurc": aurc_of_groups(total[::-1], neg[::-1], kept_before=(top_total - total)[::-1],
                                  errors_before=(top_neg - neg)[::-1])}
    if not both_classes:
        return {"auroc": float("nan"), "auprc": float("nan"), **out, "prr": float("nan")}
    n_pos = float(cum_pos[-1])
    before = cum_total - total
    u = float(pos @ (before + (total + 1) / 2.0)) - n_pos * (n_pos + 1) / 2.0
    out["auroc"] = u / (n_pos * (n - n_pos))
    tps, fps = top_pos[::-1], top_neg[::-1]
    out["auprc"] = float(np.sum(_increments(tps / n_pos) * (tps / (tps + fps))))
    out["prr"] = prr_of_aurc(out["aurc"], int(n_pos), int(n - n_pos))
    return out


def _increments(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """``np.diff(np.r_[0.0, x])`` without building the padded copy (the protocol calls it twice per method and
    split)."""
    out = np.empty_like(x)
    out[:1] = x[:1]
    np.subtract(x[1:], x[:-1], out=out[1:])
    return out


@functools.lru_cache(maxsize=4)
def _counts_to(n: int) -> NDArray[np.float64]:
    """``1.0, 2.0, ..., n`` (read-only): the answers kept at each step of a ranking of distinct scores."""
    counts = np.arange(1.0, n + 1.0)
    counts.flags.writeable = False
    return counts


def singletons_loop(pos: NDArray[np.float64], n_pos: float,
                    steps: NDArray[np.float64]) -> tuple[float, float, float]:
    """AURC, the Mann-Whitney U and AUPRC of distinct scores (``pos``: 0/1 in ascending score order, ``n_pos`` their
    sum, ``steps`` :func:`harmonic_steps`) in one pass from the most confident answer: the terms of
    :func:`_ranking_of_singletons`, summed in order (compiled by :func:`compiled`)."""
    n = pos.shape[0]
    tps = 0.0
    aurc_sum = 0.0
    u = 0.0
    auprc = 0.0
    recall = 0.0
    for j in range(1, n + 1):
        p = pos[n - j]
        before = j - 1.0
        err = 1.0 - p
        aurc_sum += err + ((before - tps) - err * before) * steps[j - 1]
        tps += p
        u += p * (n - j + 1.0)
        if n_pos > 0:
            previous, recall = recall, tps / n_pos
            auprc += (recall - previous) * (tps / j)
    return aurc_sum / n, u, auprc


def _ranking_of_singletons(pos: NDArray[np.float64], *, both_classes: bool) -> dict[str, float]:
    """:func:`ranking_of_groups` when every group is one answer (distinct scores, the protocol's common case):
    the same element-wise values summed in the same order, so the same numbers, from one cumulative sum and cached
    counts instead of a dozen passes over reversed views; with numba, from one compiled pass
    (:func:`singletons_loop`)."""
    n = pos.shape[0]
    loop = compiled(singletons_loop)
    if loop is not None:
        n_pos = float(pos.sum())
        aurc_value, u, auprc_value = loop(pos, n_pos, harmonic_steps(n))
        if not both_classes:
            return {"auroc": float("nan"), "auprc": float("nan"), "aurc": aurc_value, "prr": float("nan")}
        return {"aurc": aurc_value, "auroc": (u - n_pos * (n_pos + 1) / 2.0) / (n_pos * (n - n_pos)),
                "auprc": auprc_value, "prr": prr_of_aurc(aurc_value, int(n_pos), int(n - n_pos))}
    counts = _counts_to(n)
    tps = np.cumsum(pos[::-1])  # correct answers among the j most confident, j = 1 .. n
    err = 1.0 - pos[::-1]  # the j-th most confident answer is wrong
    # AURC's group term e_j + (E_{j-1} - (j-1) e_j) (H_j - H_{j-1}): the bracket is -tps_{j-1} for a wrong answer and
    # the errors before it, (j-1) - tps_{j-1}, for a correct one; whole numbers, exact in float64.
    before = counts - 1.0
    bracket = (before - (tps - pos[::-1])) - err * before
    out = {"aurc": float(np.sum(err + bracket * harmonic_steps(n)) / n)}
    if not both_classes:
        return {"auroc": float("nan"), "auprc": float("nan"), **out, "prr": float("nan")}
    n_pos = float(tps[-1])
    u = float(pos @ counts) - n_pos * (n_pos + 1) / 2.0
    out["auroc"] = u / (n_pos * (n - n_pos))
    out["auprc"] = float(np.sum(_increments(tps / n_pos) * (tps / counts)))
    out["prr"] = prr_of_aurc(out["aurc"], int(n_pos), int(n - n_pos))
    return out
