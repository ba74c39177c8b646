"""Calibration metrics on probabilities: Brier score, ECE and the reliability table, over one binning.

Every probability binning (ECE, the reliability table and the reliability plot) goes through
:func:`bin_probabilities`, so the reported number and the picture cannot disagree.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from .._checks import check_choice, check_int, check_scores
from ._common import STRATEGIES, check_level, check_pair
from ._docs import fill_doc
from .intervals import wilson_interval

__all__ = ["bin_probabilities", "brier_score", "expected_calibration_error", "reliability_table"]


@fill_doc
def brier_score(y_true: ArrayLike, y_prob: ArrayLike) -> float:
    """Brier score: mean squared error between predicted probabilities and 0/1 correctness.

    ``Brier = (1/N) * sum_i (p_i - y_i)^2``; lower is better, 0 is perfect.

    Parameters
    ----------
    {y_true}
    {y_prob}

    Returns
    -------
    float
        The Brier score, in [0, 1].

    Raises
    ------
    ValueError
        On empty input, length mismatch, non-0/1 labels, non-finite or out-of-range probabilities.
    """
    y, p = check_pair(y_true, y_prob, "y_prob", probability=True)
    return _brier(y, p)


def _brier(y: NDArray[np.int64], p: NDArray[np.float64]) -> float:
    """:func:`brier_score` of checked arrays (the evaluation protocol's inner loop: its inputs are checked once)."""
    return float(((p - y) ** 2).mean())


@fill_doc
def bin_probabilities(
    y_prob: ArrayLike, *, n_bins: int = 10, strategy: str = "uniform"
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Assign probabilities to bins; the one binning used by ECE, the reliability table and plot.

    The conventions are exactly those of ``sklearn.calibration.calibration_curve``:

    - ``strategy="uniform"``: ``edges = linspace(0, 1, n_bins + 1)`` (equal width).
    - ``strategy="quantile"``: ``edges = percentile(y_prob, linspace(0, 100, n_bins + 1))``
      (equal mass, numpy's default linear interpolation). With many tied probabilities some edges
      coincide and the bins between them are empty.
    - ``bin_ids = searchsorted(edges[1:-1], y_prob, side="left")``: bin ``b`` holds
      ``edges[b] < p <= edges[b + 1]`` and bin 0 also holds ``p == edges[0]``. A probability that
      lies exactly on an inner edge therefore goes to the *lower* bin (e.g. with 10 uniform bins,
      ``p = 0.5`` is in bin 4, ``(0.4, 0.5]``).

    Parameters
    ----------
    {y_prob}
    {n_bins}
    strategy : {"uniform", "quantile"}, default="uniform"
        How the edges are chosen (see above).

    Returns
    -------
    edges : ndarray of shape (n_bins + 1,)
        Non-decreasing bin edges; ``edges[0]`` and ``edges[-1]`` are 0 and 1 for "uniform",
        ``min(y_prob)`` and ``max(y_prob)`` for "quantile".
    bin_ids : ndarray of shape (n_answers,)
        Bin index in ``0 .. n_bins - 1`` of each probability.

    Raises
    ------
    ValueError
        On empty or invalid ``y_prob``, ``n_bins < 1`` or an unknown ``strategy``.
    TypeError
        If ``n_bins`` is not an int.
    """
    n_bins, strategy = _check_binning(n_bins, strategy)
    p = check_scores(y_prob, "y_prob", probability=True)
    return _bins(p, n_bins, strategy)


def _check_binning(n_bins: int, strategy: str) -> tuple[int, str]:
    """The checked ``n_bins`` (an int >= 1) and ``strategy`` (one of ``STRATEGIES``) of every binned metric."""
    return check_int(n_bins, "n_bins", minimum=1), check_choice(strategy, "strategy", STRATEGIES)


def _bins(p: NDArray[np.float64], n_bins: int, strategy: str) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """:func:`bin_probabilities` of checked probabilities and settings."""
    if strategy == "uniform":
        edges = _uniform_edges(n_bins)
    else:
        edges = np.percentile(p, np.linspace(0.0, 1.0, n_bins + 1) * 100)
    return edges.astype(np.float64), _bin_ids(edges[1:-1], p)


def _bin_ids(inner: NDArray[np.float64], p: NDArray[np.float64]) -> NDArray[np.int64]:
    """``searchsorted(inner, p, side="left")``: the number of inner edges below each probability. With the usual
    few edges, counting with one comparison per edge is several times faster than the binary search."""
    if inner.shape[0] > 16:
        return np.searchsorted(inner, p).astype(np.int64)
    ids = np.zeros(p.shape[0], dtype=np.int64)
    for edge in inner:
        ids += p > edge
    return ids


@functools.lru_cache(maxsize=8)
def _uniform_edges(n_bins: int) -> NDArray[np.float64]:
    """``linspace(0, 1, n_bins + 1)``, read-only: the protocol bins thousands of probability vectors alike."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    edges.flags.writeable = False
    return edges


def _bin_sums(
    y: NDArray[np.int64], p: NDArray[np.float64], n_bins: int, strategy: str
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Per-bin (edges, count, sum of probabilities, number correct) of checked arrays and settings, in the bins of
    :func:`bin_probabilities`."""
    edges, ids = _bins(p, n_bins, strategy)
    count = np.bincount(ids, minlength=n_bins).astype(np.int64)
    # weighted counts are floats (the stubs type every bincount as integers)
    sum_prob = np.asarray(np.bincount(ids, weights=p, minlength=n_bins), dtype=np.float64)
    n_correct = np.asarray(np.bincount(ids, weights=y.astype(np.float64), minlength=n_bins), dtype=np.float64)
    return edges, count, sum_prob, n_correct


@fill_doc
def expected_calibration_error(
    y_true: ArrayLike, y_prob: ArrayLike, *, n_bins: int = 10, strategy: str = "uniform"
) -> float:
    """Expected calibration error (ECE) over the bins of :func:`bin_probabilities`.

    ``ECE = sum_b (n_b / N) * |acc_b - conf_b|`` over non-empty bins ``b``, where ``acc_b`` is the
    fraction of correct answers in the bin and ``conf_b`` the mean predicted probability in it.

    {binned_parameters}

    Returns
    -------
    float
        ECE in [0, 1]; lower is better. Defined with a single class (no warning).

    Raises
    ------
    ValueError
        On invalid inputs, ``n_bins < 1`` or an unknown ``strategy``.
    """
    n_bins, strategy = _check_binning(n_bins, strategy)
    y, p = check_pair(y_true, y_prob, "y_prob", probability=True)
    return _ece(y, p, n_bins, strategy)


def _ece(y: NDArray[np.int64], p: NDArray[np.float64], n_bins: int, strategy: str = "uniform") -> float:
    """:func:`expected_calibration_error` of checked arrays and settings."""
    _, count, sum_prob, n_correct = _bin_sums(y, p, n_bins, strategy)
    return _ece_from_sums(count, sum_prob, n_correct, y.shape[0])


def _ece_from_sums(count: NDArray[np.int64], sum_prob: NDArray[np.float64], n_correct: NDArray[Any],
                   n: int) -> float:
    nonempty = count > 0
    acc = n_correct[nonempty] / count[nonempty]
    conf = sum_prob[nonempty] / count[nonempty]
    return float(np.sum(count[nonempty] / n * np.abs(acc - conf)))


def _ece_sorted(y: NDArray[np.int64], p: NDArray[np.float64], n_bins: int) -> float:
    """:func:`_ece` with uniform bins of probabilities in monotone order (the evaluation protocol predicts each part
    in ascending score order, and a calibrator is monotone): each bin is then a run of ``p``, found by a binary
    search per edge instead of comparing every probability with every edge. Any other order falls back to
    :func:`_ece`; the sums are the same up to the order of summation."""
    n = p.shape[0]
    ascending = p if n < 2 or p[-1] >= p[0] else p[::-1]
    if n > 1 and not bool(np.all(ascending[1:] >= ascending[:-1])):
        return _ece(y, p, n_bins)
    y, p = (y, p) if ascending is p else (y[::-1], ascending)
    # Bin b holds edges[b] < p <= edges[b + 1] (see bin_probabilities): it starts after the last p <= edges[b].
    bounds = np.concatenate(([0], np.searchsorted(p, _uniform_edges(n_bins)[1:-1], side="right"), [n]))
    count = np.diff(bounds)
    starts = bounds[:-1][count > 0]
    sum_prob, n_correct = np.zeros(n_bins), np.zeros(n_bins, dtype=np.int64)
    sum_prob[count > 0] = np.add.reduceat(p, starts)
    n_correct[count > 0] = np.add.reduceat(y, starts)
    return _ece_from_sums(count, sum_prob, n_correct, n)



@fill_doc
def reliability_table(
    y_true: ArrayLike,
    y_prob: ArrayLike,
    *,
    n_bins: int = 10,
    strategy: str = "uniform",
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Per-bin calibration statistics (the data behind a reliability diagram).

    Bins come from :func:`bin_probabilities`, so ``sum(count / N * |gap|)`` over the rows equals
    :func:`expected_calibration_error` with the same ``n_bins`` and ``strategy``, and the non-empty
    rows agree with ``sklearn.calibration.calibration_curve``.

    {binned_parameters}
    confidence : float, default=0.95
        Level of the Wilson interval on each bin's accuracy.

    Returns
    -------
    pandas.DataFrame of shape (n_bins, 9)
        One row per bin, empty bins included (``count`` 0 and NaN statistics), with columns

        - ``bin`` (int): bin index, 0-based;
        - ``lower``, ``upper``: the bin edges (bin holds ``lower < p <= upper``; bin 0 includes
          ``lower``);
        - ``count`` (int): number of answers in the bin;
        - ``mean_confidence``: mean predicted probability in the bin;
        - ``accuracy``: fraction correct in the bin;
        - ``wilson_low``, ``wilson_high``: Wilson interval of ``accuracy``;
        - ``gap``: ``accuracy - mean_confidence`` (positive = under-confident).

    Raises
    ------
    ValueError
        On invalid inputs, ``n_bins < 1``, an unknown ``strategy`` or ``confidence`` outside (0, 1).
    """
    n_bins, strategy = _check_binning(n_bins, strategy)
    check_level(confidence)
    y, p = check_pair(y_true, y_prob, "y_prob", probability=True)
    edges, count, sum_prob, n_correct = _bin_sums(y, p, n_bins, strategy)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_conf = np.where(count > 0, sum_prob / count, np.nan)
        accuracy = np.where(count > 0, n_correct / count, np.nan)
    # bincount weights are floats; round to recover the exact integer count of correct answers.
    w_low, w_high = wilson_interval(np.rint(n_correct), count, confidence=confidence)
    return pd.DataFrame(
        {
            "bin": np.arange(n_bins, dtype=np.int64),
            "lower": edges[:-1],
            "upper": edges[1:],
            "count": count,
            "mean_confidence": mean_conf,
            "accuracy": accuracy,
            "wilson_low": w_low,
            "wilson_high": w_high,
            "gap": accuracy - mean_conf,
        }
    )
