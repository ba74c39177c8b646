"""Calibration metrics on probabilities: Brier score, ECE and the reliability table, over one binning.

Every probability binning (ECE, the reliability table and the reliability plot) goes through
:func:`bin_probabilities`, so the reported number and the picture cannot disagree.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from trace_core.checks import check_choice, check_int, check_scores
from trace_core.metrics._common import STRATEGIES, check_level, checked_pair
from trace_core.metrics._docs import fill_doc
from trace_core.metrics.intervals import wilson_interval
from trace_core.metrics.kernels import bin_edges_and_ids, bin_sums, brier_kernel, ece_kernel

__all__ = ["bin_probabilities", "brier_score", "expected_calibration_error", "reliability_table"]


@fill_doc
def brier_score(y_true: ArrayLike, y_prob: ArrayLike, *, validate: bool = True) -> float:
    """Brier score: mean squared error between predicted probabilities and 0/1 correctness.

    ``Brier = (1/N) * sum_i (p_i - y_i)^2``; lower is better, 0 is perfect.

    Parameters
    ----------
    {y_true}
    {y_prob}
    {validate}

    Returns
    -------
    float
        The Brier score, in [0, 1].

    Raises
    ------
    ValueError
        On empty input, length mismatch, non-0/1 labels, non-finite or out-of-range probabilities.
    """
    y, p = checked_pair(y_true, y_prob, "y_prob", probability=True, validate=validate)
    return brier_kernel(y, p)


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
    return bin_edges_and_ids(p, n_bins, strategy)


def _check_binning(n_bins: int, strategy: str) -> tuple[int, str]:
    """The checked ``n_bins`` (an int >= 1) and ``strategy`` (one of ``STRATEGIES``) of every binned metric."""
    return check_int(n_bins, "n_bins", minimum=1), check_choice(strategy, "strategy", STRATEGIES)


@fill_doc
def expected_calibration_error(
    y_true: ArrayLike, y_prob: ArrayLike, *, n_bins: int = 10, strategy: str = "uniform", validate: bool = True
) -> float:
    """Expected calibration error (ECE) over the bins of :func:`bin_probabilities`.

    ``ECE = sum_b (n_b / N) * |acc_b - conf_b|`` over non-empty bins ``b``, where ``acc_b`` is the
    fraction of correct answers in the bin and ``conf_b`` the mean predicted probability in it.

    {binned_parameters}
    {validate}

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
    y, p = checked_pair(y_true, y_prob, "y_prob", probability=True, validate=validate)
    return ece_kernel(y, p, n_bins, strategy)


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
    y, p = checked_pair(y_true, y_prob, "y_prob", probability=True, validate=True)
    edges, count, sum_prob, n_correct = bin_sums(y, p, n_bins, strategy)
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
