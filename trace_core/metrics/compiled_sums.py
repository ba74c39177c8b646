"""Compiled loops whose sums are numpy's, bit for bit: numpy adds a contiguous run of float64 values pairwise (blocks
of up to 128 values, each summed in 8 interleaved partial sums), and :func:`pairwise_sum` adds them in that same
order, so a kernel written here gives the numbers of the numpy expression it replaces, not numbers equal to
rounding.

This module imports numba: :mod:`trace_core.metrics.kernels` imports it on first use (:func:`~trace_core.metrics.
kernels.compiled_sums`), never ``import trace_core``. Its loops are compiled on first call and cached on disk.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["PAIRWISE_BLOCK", "block_sum", "brier_and_ece", "pairwise_sum"]

#: numpy's block of pairwise summation (PW_BLOCKSIZE): a run of at most this many values is one unrolled loop.
PAIRWISE_BLOCK = 128


@numba.njit(cache=True, nogil=True)
def block_sum(x: np.ndarray, lo: int, n: int) -> float:  # pragma: no cover - compiled
    """numpy's sum of a run of at most :data:`PAIRWISE_BLOCK` values ``x[lo:lo + n]``: fewer than 8 in order from
    -0.0, more in 8 interleaved partial sums added pairwise, then the rest in order."""
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += x[i]
        return res
    r = np.empty(8)  # the 8 partial sums (an array rather than 8 names: the same sums, quicker to compile)
    for j in range(8):
        r[j] = x[lo + j]
    i = lo + 8
    stop = lo + n - n % 8
    while i < stop:
        for j in range(8):
            r[j] += x[i + j]
        i += 8
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    while i < lo + n:
        res += x[i]
        i += 1
    return res


@numba.njit(cache=True, nogil=True)
def pairwise_sum(x: np.ndarray, lo: int, n: int) -> float:  # pragma: no cover - compiled
    """``np.add.reduce(x[lo:lo + n])`` of float64 ``x``, bit for bit: a run longer than :data:`PAIRWISE_BLOCK` is
    the sum of its two halves, split at a multiple of 8 below the middle, each summed the same way. Written with a
    stack instead of recursion: numba's disk cache cannot hold a recursive function."""
    if n <= PAIRWISE_BLOCK:
        return block_sum(x, lo, n)
    starts, sizes = np.empty(64, np.int64), np.empty(64, np.int64)  # a run at least halves per level
    stage, lefts = np.empty(64, np.int64), np.empty(64)  # 0: neither half summed, 1: the left one pending, 2: right
    depth, starts[0], sizes[0], stage[0] = 0, lo, n, 0
    value, returned = 0.0, False
    while True:
        if returned:  # ``value`` is the sum of the pending half of the run at ``depth``
            if stage[depth] == 1:
                lefts[depth], stage[depth], returned = value, 2, False
            else:
                value = lefts[depth] + value
                if depth == 0:
                    return value
                depth -= 1
                continue
        half = sizes[depth] // 2
        half -= half % 8
        first, size = (starts[depth], half) if stage[depth] == 0 else (starts[depth] + half, sizes[depth] - half)
        stage[depth] = max(stage[depth], 1)
        if size <= PAIRWISE_BLOCK:
            value, returned = block_sum(x, first, size), True
        else:
            depth += 1
            starts[depth], sizes[depth], stage[depth] = first, size, 0


@numba.njit(cache=True, nogil=True)
def brier_and_ece(y: np.ndarray, p: np.ndarray, inner: np.ndarray) -> tuple[float, float, bool]:  # pragma: no cover
    """Brier score and uniform-bin ECE of probabilities ``p`` (labels ``y``, int64 0/1; ``inner``: the bins' inner
    edges, ascending) in one call: :func:`~trace_core.metrics.kernels.brier_kernel` and
    :func:`~trace_core.metrics.kernels.ece_of_ascending`'s numbers bit for bit. The third value is False when ``p``
    is not monotone (then the ECE is nan: the caller bins it as any other order)."""
    n = p.shape[0]
    squares = np.empty(n)
    for i in range(n):
        d = p[i] - y[i]
        squares[i] = d * d
    brier = pairwise_sum(squares, 0, n) / n
    q, yq = p, y
    if n > 1 and p[n - 1] < p[0]:  # descending: bin the reversed order (a copy: one compiled layout, not two)
        q, yq = p[::-1].copy(), y[::-1].copy()
    for i in range(1, n):
        if not q[i] >= q[i - 1]:
            return brier, np.nan, False
    # Bin b holds edges[b] < p <= edges[b + 1]: it ends after the last value at or below its upper edge.
    terms = np.empty(inner.shape[0] + 1)
    kept = 0
    start = 0
    for b in range(inner.shape[0] + 1):
        end = start
        if b == inner.shape[0]:
            end = n
        else:
            while end < n and q[end] <= inner[b]:
                end += 1
        count = end - start
        if count > 0:
            correct = 0
            for i in range(start, end):
                correct += yq[i]
            sum_prob = q[start] + pairwise_sum(q, start + 1, count - 1)  # np.add.reduceat: first + the rest
            terms[kept] = count / n * abs(correct / count - sum_prob / count)
            kept += 1
        start = end
    return brier, pairwise_sum(terms, 0, kept), True
