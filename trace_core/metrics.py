"""Evaluation metrics for confidence scores of LLM answers.

Conventions shared by every function in this module:

- ``y_true`` is a 1-D array of binary labels, ``1`` meaning *the answer is correct*.
  Booleans and the numbers 0/1 (of any numeric dtype) are accepted; anything else is rejected.
- Confidence scores are *higher = more likely correct*. Ranking metrics (AUROC, AUPRC, ROC curve,
  AURC, risk at coverage) accept any finite real score; calibration metrics (Brier, ECE, reliability
  table) take probabilities ``y_prob`` that must be finite and lie in ``[0, 1]`` -- out-of-range values
  raise instead of being clipped.
- A ranking metric that is undefined because ``y_true`` holds a single class emits
  :class:`UndefinedMetricWarning` and returns ``nan``.

Every probability binning (ECE, the reliability table and the reliability plot) goes through
:func:`bin_probabilities`, so the reported number and the picture cannot disagree.
"""

from __future__ import annotations

import math
import statistics
import warnings
from typing import Callable, overload

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from ._checks import as_1d as _as_1d
from ._checks import check_labels as _check_labels
from ._checks import check_scores as _check_scores

__all__ = [
    "RankGroups",
    "UndefinedMetricWarning",
    "auprc",
    "aurc",
    "auroc",
    "bin_probabilities",
    "bootstrap_ci",
    "brier_score",
    "expected_calibration_error",
    "reliability_table",
    "risk_at_coverage",
    "risk_coverage_curve",
    "roc_curve",
    "tpr_at_fpr",
    "wilson_interval",
]

_STRATEGIES = ("uniform", "quantile")


class UndefinedMetricWarning(UserWarning):
    """Warning emitted when a metric is undefined for the given labels (e.g. one class only)."""


# --------------------------------------------------------------------------------------------------
# Validation helpers (the boundary). Each public function validates once, then works on clean arrays.
# --------------------------------------------------------------------------------------------------


def _fmt(x: float) -> str:
    """Format a number for an error message: integral values without a trailing '.0'."""
    x = float(x)
    return str(int(x)) if x.is_integer() else repr(x)


def _check_pair(
    y_true: ArrayLike, scores: ArrayLike, name: str, *, probability: bool
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Validate labels and scores together (emptiness, then lengths, then values)."""
    y_arr = _as_1d(y_true, "y_true")
    s_arr = _as_1d(scores, name)
    if y_arr.shape[0] != s_arr.shape[0]:
        raise ValueError(
            f"`y_true` and `{name}` must have the same length, "
            f"got {y_arr.shape[0]} and {s_arr.shape[0]}"
        )
    return _check_labels(y_arr), _check_scores(s_arr, name, probability=probability)


def _check_n_bins(n_bins: int) -> int:
    if isinstance(n_bins, (bool, np.bool_)) or not isinstance(n_bins, (int, np.integer)):
        raise TypeError(f"`n_bins` must be an int >= 1, got {n_bins!r}")
    if n_bins < 1:
        raise ValueError(f"`n_bins` must be an int >= 1, got {n_bins!r}")
    return int(n_bins)


def _check_strategy(strategy: str) -> str:
    if strategy not in _STRATEGIES:
        raise ValueError(f"`strategy` must be one of 'uniform', 'quantile', got {strategy!r}")
    return strategy


def _check_real(value: float, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"`{name}` must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"`{name}` must be finite, got {value!r}")
    return value


def _check_level(confidence: float) -> float:
    level = _check_real(confidence, "confidence")
    if not 0.0 < level < 1.0:
        raise ValueError(f"`confidence` must be in (0, 1), got {confidence!r}")
    return level


def _has_both_classes(y: NDArray[np.int64], metric: str) -> bool:
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == y.shape[0]:
        only = "positive (1)" if n_pos else "negative (0)"
        warnings.warn(
            f"{metric} is undefined when `y_true` holds a single class "
            f"(all {y.shape[0]} labels are {only}); returning nan",
            UndefinedMetricWarning,
            stacklevel=3,
        )
        return False
    return True


# --------------------------------------------------------------------------------------------------
# Calibration metrics (probabilities)
# --------------------------------------------------------------------------------------------------


def brier_score(y_true: ArrayLike, y_prob: ArrayLike) -> float:
    """Brier score: mean squared error between predicted probabilities and 0/1 correctness.

    ``Brier = (1/N) * sum_i (p_i - y_i)^2``; lower is better, 0 is perfect.

    Parameters
    ----------
    y_true : array-like of shape (n_answers,)
        1 if the answer is correct, 0 otherwise (bool or 0/1 numbers).
    y_prob : array-like of shape (n_answers,)
        Predicted probability that the answer is correct, finite and in [0, 1].

    Returns
    -------
    float
        The Brier score, in [0, 1].

    Raises
    ------
    ValueError
        On empty input, length mismatch, non-0/1 labels, non-finite or out-of-range probabilities.
    """
    y, p = _check_pair(y_true, y_prob, "y_prob", probability=True)
    return float(np.mean((p - y) ** 2))


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
    y_prob : array-like of shape (n_answers,)
        Probabilities, finite and in [0, 1].
    n_bins : int, default=10
        Number of bins, >= 1.
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
    n_bins = _check_n_bins(n_bins)
    strategy = _check_strategy(strategy)
    p = _check_scores(y_prob, "y_prob", probability=True)
    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, n_bins + 1)
    else:
        edges = np.percentile(p, np.linspace(0.0, 1.0, n_bins + 1) * 100)
    bin_ids = np.searchsorted(edges[1:-1], p).astype(np.int64)
    return edges.astype(np.float64), bin_ids


def _bin_sums(
    y: NDArray[np.int64], p: NDArray[np.float64], n_bins: int, strategy: str
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Per-bin (edges, count, sum of probabilities, number correct) from :func:`bin_probabilities`."""
    edges, ids = bin_probabilities(p, n_bins=n_bins, strategy=strategy)
    count = np.bincount(ids, minlength=n_bins).astype(np.int64)
    sum_prob = np.bincount(ids, weights=p, minlength=n_bins)
    n_correct = np.bincount(ids, weights=y.astype(np.float64), minlength=n_bins)
    return edges, count, sum_prob, n_correct


def expected_calibration_error(
    y_true: ArrayLike, y_prob: ArrayLike, *, n_bins: int = 10, strategy: str = "uniform"
) -> float:
    """Expected calibration error (ECE) over the bins of :func:`bin_probabilities`.

    ``ECE = sum_b (n_b / N) * |acc_b - conf_b|`` over non-empty bins ``b``, where ``acc_b`` is the
    fraction of correct answers in the bin and ``conf_b`` the mean predicted probability in it.

    Parameters
    ----------
    y_true : array-like of shape (n_answers,)
        1 if the answer is correct, 0 otherwise.
    y_prob : array-like of shape (n_answers,)
        Predicted probability of correctness, finite and in [0, 1].
    n_bins : int, default=10
        Number of bins; the same default as :func:`reliability_table`, so the number and the plot agree.
    strategy : {"uniform", "quantile"}, default="uniform"
        Bin edges, see :func:`bin_probabilities`.

    Returns
    -------
    float
        ECE in [0, 1]; lower is better. Defined with a single class (no warning).

    Raises
    ------
    ValueError
        On invalid inputs, ``n_bins < 1`` or an unknown ``strategy``.
    """
    n_bins = _check_n_bins(n_bins)
    strategy = _check_strategy(strategy)
    y, p = _check_pair(y_true, y_prob, "y_prob", probability=True)
    _, count, sum_prob, n_correct = _bin_sums(y, p, n_bins, strategy)
    nonempty = count > 0
    acc = n_correct[nonempty] / count[nonempty]
    conf = sum_prob[nonempty] / count[nonempty]
    return float(np.sum(count[nonempty] / y.shape[0] * np.abs(acc - conf)))


@overload
def wilson_interval(
    successes: float, n: float, *, confidence: float = 0.95
) -> tuple[float, float]: ...


@overload
def wilson_interval(
    successes: ArrayLike, n: ArrayLike, *, confidence: float = 0.95
) -> tuple[NDArray[np.float64], NDArray[np.float64]]: ...


def wilson_interval(
    successes: ArrayLike, n: ArrayLike, *, confidence: float = 0.95
) -> tuple[float, float] | tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Wilson score interval for a binomial proportion (vectorised).

    With ``p = successes / n`` and ``z`` the standard normal ``(1 + confidence) / 2`` quantile::

        center     = (p + z^2 / (2n)) / (1 + z^2 / n)
        half_width = z * sqrt(p (1 - p) / n + z^2 / (4 n^2)) / (1 + z^2 / n)
        interval   = (center - half_width, center + half_width)

    Parameters
    ----------
    successes : int or array-like of shape (k,)
        Number of successes (integer-valued, ``0 <= successes <= n``).
    n : int or array-like of shape (k,)
        Number of trials (integer-valued, >= 0); broadcast against ``successes``.
        ``n = 0`` gives ``(nan, nan)``.
    confidence : float, default=0.95
        Two-sided confidence level in (0, 1).

    Returns
    -------
    low, high : float, or ndarrays of the broadcast shape
        Bounds in [0, 1] (floats when both inputs are scalars).

    Raises
    ------
    ValueError
        If a count is negative, non-integer, non-finite, ``successes > n``, or ``confidence``
        is outside (0, 1).
    """
    level = _check_level(confidence)
    scalar = np.ndim(successes) == 0 and np.ndim(n) == 0
    arrays: dict[str, np.ndarray] = {}
    for name, value in (("successes", successes), ("n", n)):
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"`{name}` must be numeric, got dtype {arr.dtype}")
        arr = arr.astype(np.float64)
        flat = arr.ravel()
        bad = ~np.isfinite(flat) | (flat < 0) | (flat != np.floor(flat))
        if bad.any():
            i = int(np.argmax(bad))
            where = ", got" if arr.ndim == 0 else f"; index {i} is"
            raise ValueError(f"`{name}` must be a non-negative integer count{where} {_fmt(flat[i])}")
        arrays[name] = arr
    s, m = np.broadcast_arrays(arrays["successes"], arrays["n"])
    too_many = (s > m).ravel()
    if too_many.any():
        i = int(np.argmax(too_many))
        raise ValueError(
            f"`successes` must be <= `n`, got {_fmt(s.ravel()[i])} > {_fmt(m.ravel()[i])}"
            + ("" if s.ndim == 0 else f" at index {i}")
        )
    z = statistics.NormalDist().inv_cdf(0.5 + level / 2.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = s / m
        denom = 1.0 + z**2 / m
        center = (p + z**2 / (2.0 * m)) / denom
        half = z * np.sqrt(p * (1.0 - p) / m + z**2 / (4.0 * m**2)) / denom
    # Mathematically the bounds are in [0, 1], exactly 0 when successes = 0 and exactly 1 when
    # successes = n; set those and clip so float round-off (e.g. 3e-17 at p = 0) does not show.
    low = np.where(s == 0, 0.0, np.clip(center - half, 0.0, 1.0))
    high = np.where(s == m, 1.0, np.clip(center + half, 0.0, 1.0))
    low = np.where(m > 0, low, np.nan)
    high = np.where(m > 0, high, np.nan)
    if scalar:
        return float(low), float(high)
    return low, high


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

    Parameters
    ----------
    y_true : array-like of shape (n_answers,)
        1 if the answer is correct, 0 otherwise.
    y_prob : array-like of shape (n_answers,)
        Predicted probability of correctness, finite and in [0, 1].
    n_bins : int, default=10
        Number of bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Bin edges, see :func:`bin_probabilities`.
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
    n_bins = _check_n_bins(n_bins)
    strategy = _check_strategy(strategy)
    _check_level(confidence)
    y, p = _check_pair(y_true, y_prob, "y_prob", probability=True)
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


# --------------------------------------------------------------------------------------------------
# Ranking metrics (any finite real score)
# --------------------------------------------------------------------------------------------------


def _descending_counts(
    y: NDArray[np.int64], score: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Distinct thresholds (descending) with cumulative true/false positives at each.

    Returns ``(thresholds, tps, fps)``, each of shape (n_distinct,), where ``tps[j]``/``fps[j]``
    count the positives/negatives with ``score >= thresholds[j]``.
    """
    values, inverse = np.unique(score, return_inverse=True)
    pos = np.bincount(inverse, weights=y.astype(np.float64), minlength=values.size)
    total = np.bincount(inverse, minlength=values.size).astype(np.float64)
    tps = np.cumsum(pos[::-1])
    fps = np.cumsum((total - pos)[::-1])
    return values[::-1], tps, fps


def auroc(y_true: ArrayLike, score: ArrayLike) -> float:
    """Area under the ROC curve, from ranks (Mann-Whitney U).

    ``AUROC = (R_pos - n_pos (n_pos + 1) / 2) / (n_pos * n_neg)``, where ``R_pos`` is the sum of the
    ranks of the correct answers' scores among all scores, tied scores receiving their average rank.
    Equivalently, the probability that a random correct answer outscores a random wrong one, ties
    counting 1/2. Equals ``sklearn.metrics.roc_auc_score``, ties included.

    Parameters
    ----------
    y_true : array-like of shape (n_answers,)
        1 if the answer is correct, 0 otherwise.
    score : array-like of shape (n_answers,)
        Confidence score, any finite real, higher = more likely correct.

    Returns
    -------
    float
        AUROC in [0, 1]; ``nan`` with an :class:`UndefinedMetricWarning` if ``y_true`` has one class.

    Raises
    ------
    ValueError
        On empty input, length mismatch, bad labels or non-finite scores.
    """
    y, s = _check_pair(y_true, score, "score", probability=False)
    if not _has_both_classes(y, "AUROC"):
        return float("nan")
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    # Average rank of each tie group: ranks (before + 1) .. (before + count), mean = before + (count + 1) / 2.
    before = np.cumsum(counts) - counts
    ranks = (before + (counts + 1) / 2.0)[inverse]
    n_pos = float(y.sum())
    n_neg = float(y.shape[0]) - n_pos
    u = ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def roc_curve(
    y_true: ArrayLike, score: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Receiver operating characteristic curve at every distinct score threshold.

    For each distinct threshold ``t`` (descending), an answer is *accepted* when ``score >= t``:
    ``tpr = accepted correct / n_correct`` and ``fpr = accepted wrong / n_wrong``. A first point
    ``(0, 0)`` with threshold ``+inf`` is prepended. This matches
    ``sklearn.metrics.roc_curve(..., drop_intermediate=False)``: collinear points are kept.

    Parameters
    ----------
    y_true : array-like of shape (n_answers,)
        1 if the answer is correct, 0 otherwise.
    score : array-like of shape (n_answers,)
        Confidence score, any finite real, higher = more likely correct.

    Returns
    -------
    fpr : ndarray of shape (n_distinct + 1,)
        False positive rates, non-decreasing from 0 to 1.
    tpr : ndarray of shape (n_distinct + 1,)
        True positive rates, non-decreasing from 0 to 1.
    thresholds : ndarray of shape (n_distinct + 1,)
        ``[inf, distinct scores in decreasing order]``.

    Warns
    -----
    UndefinedMetricWarning
        If ``y_true`` has a single class; the undefined axis (``tpr`` with no correct answers,
        ``fpr`` with no wrong ones) is then all ``nan``, as in scikit-learn.
    """
    y, s = _check_pair(y_true, score, "score", probability=False)
    _has_both_classes(y, "The ROC curve")
    thresholds, tps, fps = _descending_counts(y, s)
    tps = np.r_[0.0, tps]
    fps = np.r_[0.0, fps]
    with np.errstate(divide="ignore", invalid="ignore"):
        fpr = fps / fps[-1] if fps[-1] > 0 else np.full_like(fps, np.nan)
        tpr = tps / tps[-1] if tps[-1] > 0 else np.full_like(tps, np.nan)
    return fpr, tpr, np.r_[np.inf, thresholds]


def tpr_at_fpr(y_true: ArrayLike, score: ArrayLike, *, fpr: float = 0.05) -> float:
    """True positive rate at a given false positive rate, read off the ROC curve.

    The ROC curve of :func:`roc_curve` (which starts at ``(0, 0)``) is linearly interpolated
    (``np.interp``) between its points. Where the curve is vertical at exactly ``fpr`` (several
    points share that false positive rate) the *highest* TPR is returned: the best TPR reachable
    without exceeding ``fpr``. E.g. ``fpr=0`` gives the share of correct answers that score above
    every wrong one.

    Parameters
    ----------
    y_true : array-like of shape (n_answers,)
        1 if the answer is correct, 0 otherwise.
    score : array-like of shape (n_answers,)
        Confidence score, any finite real, higher = more likely correct.
    fpr : float, default=0.05
        Target false positive rate, ``0 <= fpr <= 1``.

    Returns
    -------
    float
        TPR in [0, 1]; ``nan`` with an :class:`UndefinedMetricWarning` if ``y_true`` has one class.

    Raises
    ------
    ValueError
        On invalid inputs or ``fpr`` outside [0, 1].
    """
    target = _check_real(fpr, "fpr")
    if not 0.0 <= target <= 1.0:
        raise ValueError(f"`fpr` must be in [0, 1], got {fpr!r}")
    y, s = _check_pair(y_true, score, "score", probability=False)
    if not _has_both_classes(y, "TPR at FPR"):
        return float("nan")
    _, tps, fps = _descending_counts(y, s)
    curve_fpr = np.r_[0.0, fps / fps[-1]]
    curve_tpr = np.r_[0.0, tps / tps[-1]]
    # np.interp over the whole curve would be ambiguous where curve_fpr repeats (vertical
    # segments). Take the last point with curve_fpr <= target -- the top of a vertical segment,
    # since tpr is non-decreasing -- and interpolate towards the next point, which lies strictly
    # to the right; at target == curve_fpr[j] np.interp returns curve_tpr[j] itself.
    j = int(np.searchsorted(curve_fpr, target, side="right")) - 1
    if j == curve_fpr.size - 1:
        return float(curve_tpr[j])
    return float(np.interp(target, curve_fpr[j : j + 2], curve_tpr[j : j + 2]))


def auprc(y_true: ArrayLike, score: ArrayLike) -> float:
    """Area under the precision-recall curve as average precision (step-wise, no interpolation).

    ``AP = sum_n (R_n - R_{n-1}) * P_n`` over the distinct score thresholds in decreasing order,
    with ``R_0 = 0``, where ``P_n`` and ``R_n`` are the precision and recall when accepting every
    answer with ``score >= threshold_n``; the positive class is *correct*. Equals
    ``sklearn.metrics.average_precision_score``, ties included.

    Parameters
    ----------
    y_true : array-like of shape (n_answers,)
        1 if the answer is correct, 0 otherwise.
    score : array-like of shape (n_answers,)
        Confidence score, any finite real, higher = more likely correct.

    Returns
    -------
    float
        AP in [0, 1]; ``nan`` with an :class:`UndefinedMetricWarning` if ``y_true`` has a single
        class. (scikit-learn instead returns 1.0 when all labels are 1 and 0.0 when none is; both
        say nothing about the score, so they are treated as undefined here, as for AUROC.)

    Raises
    ------
    ValueError
        On empty input, length mismatch, bad labels or non-finite scores.
    """
    y, s = _check_pair(y_true, score, "score", probability=False)
    if not _has_both_classes(y, "AUPRC"):
        return float("nan")
    _, tps, fps = _descending_counts(y, s)
    precision = tps / (tps + fps)
    recall = tps / tps[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def _aurc_from_groups(sizes: NDArray[np.float64], errors: NDArray[np.float64]) -> float:
    """AURC from tied groups in decreasing confidence, in O(groups) after an O(n) harmonic table.

    Inside a group of m answers with error rate r, kept after K answers with E expected errors, the risks at
    k = K+1 .. K+m sum to ``m r + (E - K r)(H_{K+m} - H_K)`` with H the harmonic numbers; this equals the mean of
    :func:`risk_coverage_curve`'s risks without expanding the groups to answers.
    """
    n = int(sizes.sum())
    harmonic = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, n + 1, dtype=np.float64))])
    rate = errors / sizes
    kept_before = np.cumsum(sizes) - sizes
    errors_before = np.cumsum(errors) - errors
    ends = kept_before.astype(np.int64)
    h = harmonic[ends + sizes.astype(np.int64)] - harmonic[ends]
    return float(np.sum(sizes * rate + (errors_before - kept_before * rate) * h) / n)


class RankGroups:
    """A score's distinct values, found once, so AUROC, AUPRC and AURC of any subset of the answers need no sort.

    The evaluation protocol scores every method on 20 random held-out subsets; sorting the full score once and
    counting per distinct value with ``bincount`` makes each subset O(n) instead of three O(n log n) sorts. The
    results equal :func:`auroc`, :func:`auprc` and :func:`aurc` on ``score[subset]`` (ties included).

    Parameters
    ----------
    score : array-like of shape (n_answers,)
        Confidence score, any finite real, higher = more likely correct.
    """

    def __init__(self, score: ArrayLike) -> None:
        s = _check_scores(score, "score", probability=False)
        if s.shape[0] == 0:
            raise ValueError("`score` is empty")
        values, inverse = np.unique(s, return_inverse=True)
        self.n_values_ = int(values.shape[0])
        self._inverse = inverse.reshape(-1)

    def ranking_metrics(self, y_true: ArrayLike, subset: ArrayLike | None = None) -> dict[str, float]:
        """``{"auroc", "auprc", "aurc"}`` of the answers in ``subset`` (indices; all if None), labels ``y_true``
        aligned with the subset. AUROC and AUPRC are ``nan`` (with a warning) when the subset has one class."""
        groups = self._inverse if subset is None else self._inverse[np.asarray(subset, dtype=np.int64)]
        y = _check_labels(y_true, "y_true")
        if y.shape[0] != groups.shape[0]:
            raise ValueError(f"`y_true` has {y.shape[0]} labels but the subset has {groups.shape[0]} answers")
        if y.shape[0] == 0:
            raise ValueError("the subset is empty")
        total = np.bincount(groups, minlength=self.n_values_)
        pos = np.bincount(groups, weights=y.astype(np.float64), minlength=self.n_values_)
        present = total > 0
        total, pos = total[present].astype(np.float64), pos[present]  # ascending score
        neg = total - pos
        n = float(y.shape[0])
        out = {"aurc": _aurc_from_groups(total[::-1], neg[::-1])}
        if not _has_both_classes(y, "AUROC and AUPRC"):
            return {"auroc": float("nan"), "auprc": float("nan"), **out}
        n_pos = float(pos.sum())
        before = np.cumsum(total) - total
        u = float(pos @ (before + (total + 1) / 2.0)) - n_pos * (n_pos + 1) / 2.0
        out["auroc"] = u / (n_pos * (n - n_pos))
        tps, fps = np.cumsum(pos[::-1]), np.cumsum(neg[::-1])
        out["auprc"] = float(np.sum(np.diff(np.r_[0.0, tps / n_pos]) * (tps / (tps + fps))))
        return out


# --------------------------------------------------------------------------------------------------
# Selective prediction (risk = error rate among the answers kept, most confident first)
# --------------------------------------------------------------------------------------------------


def risk_coverage_curve(
    y_true: ArrayLike, confidence: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Selective risk at every coverage, keeping the most confident answers first.

    For ``k = 1 .. n``: ``coverage_k = k / n`` and ``risk_k = E[errors among the k most confident] / k``,
    where an error is ``y_true == 0``. Ties in ``confidence`` are resolved by expectation: inside a
    group of ``m`` tied answers containing ``e`` errors, each kept answer adds ``e / m`` expected
    errors (the average over all orders of the group). The curve therefore does not depend on the
    order of the input.

    Parameters
    ----------
    y_true : array-like of shape (n_answers,)
        1 if the answer is correct, 0 otherwise.
    confidence : array-like of shape (n_answers,)
        Confidence score, any finite real, higher = more likely correct.

    Returns
    -------
    coverage : ndarray of shape (n_answers,)
        ``k / n`` for ``k = 1 .. n``.
    risk : ndarray of shape (n_answers,)
        Expected error rate among the ``k`` kept answers, in [0, 1]; ``risk[-1]`` is the overall
        error rate. Defined with a single class (no warning).

    Raises
    ------
    ValueError
        On empty input, length mismatch, bad labels or non-finite scores.
    """
    y, c = _check_pair(y_true, confidence, "confidence", probability=False)
    n = y.shape[0]
    values, inverse = np.unique(c, return_inverse=True)
    errors = np.bincount(inverse, weights=(1 - y).astype(np.float64), minlength=values.size)
    sizes = np.bincount(inverse, minlength=values.size)
    group_rate = errors / sizes
    # Expected error of each kept answer, in order of decreasing confidence: a group's answers
    # appear consecutively and each contributes the group's average error rate.
    per_answer = np.repeat(group_rate[::-1], sizes[::-1])
    k = np.arange(1, n + 1, dtype=np.float64)
    return k / n, np.cumsum(per_answer) / k


def aurc(y_true: ArrayLike, confidence: ArrayLike) -> float:
    """Area under the risk-coverage curve.

    ``AURC = (1/n) * sum_{k=1..n} risk_k`` with ``risk_k`` from :func:`risk_coverage_curve`
    (ties resolved by expectation). Lower is better; for a fixed set of labels it is minimal when
    every correct answer is ranked above every wrong one and maximal for the reverse order.

    Parameters
    ----------
    y_true : array-like of shape (n_answers,)
        1 if the answer is correct, 0 otherwise.
    confidence : array-like of shape (n_answers,)
        Confidence score, any finite real, higher = more likely correct.

    Returns
    -------
    float
        AURC in [0, 1]. Defined with a single class (0 if all correct, 1 if all wrong).

    Raises
    ------
    ValueError
        On empty input, length mismatch, bad labels or non-finite scores.
    """
    _, risk = risk_coverage_curve(y_true, confidence)
    return float(np.mean(risk))


def risk_at_coverage(y_true: ArrayLike, confidence: ArrayLike, *, coverage: float = 0.5) -> float:
    """Selective risk when keeping the most confident ``coverage`` share of the answers.

    Returns ``risk_k`` of :func:`risk_coverage_curve` at ``k = max(1, ceil(coverage * n))``.
    ``coverage * n`` within 1e-9 (relative) of an integer is taken as that integer, so float
    round-off (``0.07 * 100 = 7.000000000000001``) does not add an answer.

    Parameters
    ----------
    y_true : array-like of shape (n_answers,)
        1 if the answer is correct, 0 otherwise.
    confidence : array-like of shape (n_answers,)
        Confidence score, any finite real, higher = more likely correct.
    coverage : float, default=0.5
        Share of answers kept, ``0 < coverage <= 1``.

    Returns
    -------
    float
        Expected error rate among the kept answers, in [0, 1].

    Raises
    ------
    ValueError
        On invalid inputs or ``coverage`` outside (0, 1].
    """
    cov = _check_real(coverage, "coverage")
    if not 0.0 < cov <= 1.0:
        raise ValueError(f"`coverage` must be in (0, 1], got {coverage!r}")
    _, risk = risk_coverage_curve(y_true, confidence)
    n = risk.shape[0]
    exact = cov * n
    nearest = round(exact)
    k = nearest if math.isclose(exact, nearest, rel_tol=1e-9, abs_tol=1e-9) else math.ceil(exact)
    k = min(max(1, int(k)), n)
    return float(risk[k - 1])


# --------------------------------------------------------------------------------------------------
# Uncertainty of a metric
# --------------------------------------------------------------------------------------------------


def bootstrap_ci(
    metric: Callable[[np.ndarray, np.ndarray], float],
    y_true: ArrayLike,
    scores: ArrayLike,
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int | np.random.Generator | None = 0,
) -> tuple[float, float, float]:
    """Percentile bootstrap confidence interval of a metric.

    Draws ``n_boot`` resamples of the answer indices with replacement (``numpy.random.Generator``),
    evaluates ``metric(y_true[idx], scores[idx])`` on each and returns the
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` percentiles of the defined (non-nan)
    values. Resamples where the metric is undefined (``nan``, e.g. a single class for AUROC) are
    skipped, and warnings raised while evaluating resamples are suppressed; the point estimate on
    the full data still warns normally.

    Parameters
    ----------
    metric : callable ``(y_true, scores) -> float``
        E.g. :func:`auroc` or ``functools.partial(expected_calibration_error, n_bins=10)``.
    y_true : array-like of shape (n_answers,)
        1 if the answer is correct, 0 otherwise.
    scores : array-like of shape (n_answers,)
        Scores or probabilities passed to ``metric`` (finite; range checks are the metric's).
    n_boot : int, default=1000
        Number of bootstrap resamples, >= 1.
    confidence : float, default=0.95
        Two-sided level in (0, 1).
    seed : int, numpy Generator or None, default=0
        Seed for ``numpy.random.default_rng``; the same seed gives the same interval.

    Returns
    -------
    estimate : float
        ``metric`` on the full data.
    low, high : float
        Percentile bounds; both ``nan`` (with an :class:`UndefinedMetricWarning`) if more than
        half of the resamples are undefined.

    Raises
    ------
    ValueError
        On invalid inputs, ``n_boot < 1`` or ``confidence`` outside (0, 1).
    TypeError
        If ``metric`` is not callable or does not return a real number.
    """
    if not callable(metric):
        raise TypeError(f"`metric` must be callable, got {metric!r}")
    if isinstance(n_boot, (bool, np.bool_)) or not isinstance(n_boot, (int, np.integer)):
        raise TypeError(f"`n_boot` must be an int >= 1, got {n_boot!r}")
    if n_boot < 1:
        raise ValueError(f"`n_boot` must be an int >= 1, got {n_boot!r}")
    level = _check_level(confidence)
    y, s = _check_pair(y_true, scores, "scores", probability=False)

    def evaluate(yy: np.ndarray, ss: np.ndarray) -> float:
        value = metric(yy, ss)
        if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)
        ):
            raise TypeError(f"`metric` must return a real number, got {value!r}")
        return float(value)

    estimate = evaluate(y, s)
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, y.shape[0], size=(int(n_boot), y.shape[0]))
    values = np.empty(int(n_boot), dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b, idx in enumerate(indices):
            values[b] = evaluate(y[idx], s[idx])
    defined = values[~np.isnan(values)]
    if defined.size * 2 < n_boot:
        warnings.warn(
            f"the metric is undefined (nan) on {n_boot - defined.size} of {n_boot} bootstrap "
            "resamples; returning nan bounds",
            UndefinedMetricWarning,
            stacklevel=2,
        )
        return estimate, float("nan"), float("nan")
    alpha = (1.0 - level) / 2.0
    low, high = np.percentile(defined, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return estimate, float(low), float(high)
