"""Ranking metrics on any finite real confidence score: AUROC, the ROC curve, TPR at FPR, AUPRC.

:class:`RankGroups` computes AUROC, AUPRC, AURC and PRR of many subsets of the same answers after one sort.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trace_core.checks import check_labels, check_real, check_scores
from trace_core.metrics._common import check_pair, checked_pair, has_both_classes
from trace_core.metrics._docs import fill_doc
from trace_core.metrics.kernels import ranking_of_groups, tie_groups

__all__ = ["RankGroups", "auprc", "auroc", "roc_curve", "tpr_at_fpr"]


def _descending_counts(
    y: NDArray[np.int64], score: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Distinct thresholds (descending) with cumulative true/false positives at each.

    Returns ``(thresholds, tps, fps)``, each of shape (n_distinct,), where ``tps[j]``/``fps[j]``
    count the positives/negatives with ``score >= thresholds[j]``.
    """
    values, inverse = np.unique(score, return_inverse=True)
    pos = np.asarray(np.bincount(inverse, weights=y.astype(np.float64), minlength=values.size), dtype=np.float64)
    total = np.bincount(inverse, minlength=values.size).astype(np.float64)
    tps = np.cumsum(pos[::-1])
    fps = np.cumsum((total - pos)[::-1])
    return values[::-1], tps, fps


@fill_doc
def auroc(y_true: ArrayLike, score: ArrayLike, *, validate: bool = True) -> float:
    """Area under the ROC curve, from ranks (Mann-Whitney U).

    ``AUROC = (R_pos - n_pos (n_pos + 1) / 2) / (n_pos * n_neg)``, where ``R_pos`` is the sum of the
    ranks of the correct answers' scores among all scores, tied scores receiving their average rank.
    Equivalently, the probability that a random correct answer outscores a random wrong one, ties
    counting 1/2. Equals ``sklearn.metrics.roc_auc_score``, ties included.

    {ranking_parameters}
    {validate}

    Returns
    -------
    float
        AUROC in [0, 1]; ``nan`` with an :class:`UndefinedMetricWarning` if ``y_true`` has one class.

    {pair_raises}
    """
    return _from_tie_groups("auroc", "AUROC", y_true, score, validate)


@fill_doc
def roc_curve(
    y_true: ArrayLike, score: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Receiver operating characteristic curve at every distinct score threshold.

    For each distinct threshold ``t`` (descending), an answer is *accepted* when ``score >= t``:
    ``tpr = accepted correct / n_correct`` and ``fpr = accepted wrong / n_wrong``. A first point
    ``(0, 0)`` with threshold ``+inf`` is prepended. This matches
    ``sklearn.metrics.roc_curve(..., drop_intermediate=False)``: collinear points are kept.

    {ranking_parameters}

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
    y, s = check_pair(y_true, score, "score", probability=False)
    has_both_classes(y, "The ROC curve")
    thresholds, tps, fps = _descending_counts(y, s)
    tps = np.r_[0.0, tps]
    fps = np.r_[0.0, fps]
    with np.errstate(divide="ignore", invalid="ignore"):
        fpr = fps / fps[-1] if fps[-1] > 0 else np.full_like(fps, np.nan)
        tpr = tps / tps[-1] if tps[-1] > 0 else np.full_like(tps, np.nan)
    return fpr, tpr, np.r_[np.inf, thresholds]


@fill_doc
def tpr_at_fpr(y_true: ArrayLike, score: ArrayLike, *, fpr: float = 0.05) -> float:
    """True positive rate at a given false positive rate, read off the ROC curve.

    The ROC curve of :func:`roc_curve` (which starts at ``(0, 0)``) is linearly interpolated
    (``np.interp``) between its points. Where the curve is vertical at exactly ``fpr`` (several
    points share that false positive rate) the *highest* TPR is returned: the best TPR reachable
    without exceeding ``fpr``. E.g. ``fpr=0`` gives the share of correct answers that score above
    every wrong one.

    {ranking_parameters}
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
    target = check_real(fpr, "fpr", minimum=0, maximum=1)
    y, s = check_pair(y_true, score, "score", probability=False)
    if not has_both_classes(y, "TPR at FPR"):
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


@fill_doc
def auprc(y_true: ArrayLike, score: ArrayLike, *, validate: bool = True) -> float:
    """Area under the precision-recall curve as average precision (step-wise, no interpolation).

    ``AP = sum_n (R_n - R_{n-1}) * P_n`` over the distinct score thresholds in decreasing order,
    with ``R_0 = 0``, where ``P_n`` and ``R_n`` are the precision and recall when accepting every
    answer with ``score >= threshold_n``; the positive class is *correct*. Equals
    ``sklearn.metrics.average_precision_score``, ties included.

    {ranking_parameters}
    {validate}

    Returns
    -------
    float
        AP in [0, 1]; ``nan`` with an :class:`UndefinedMetricWarning` if ``y_true`` has a single
        class. (scikit-learn instead returns 1.0 when all labels are 1 and 0.0 when none is; both
        say nothing about the score, so they are treated as undefined here, as for AUROC.)

    {pair_raises}
    """
    return _from_tie_groups("auprc", "AUPRC", y_true, score, validate)


def _from_tie_groups(key: str, title: str, y_true: ArrayLike, score: ArrayLike, validate: bool) -> float:
    """One ranking metric through the kernel: checked pair, one-class warning (nan), then the tie groups."""
    y, s = checked_pair(y_true, score, "score", probability=False, validate=validate)
    if not has_both_classes(y, title, depth=1):
        return float("nan")
    return ranking_of_groups(*tie_groups(y, s), both_classes=True)[key]


@fill_doc
class RankGroups:
    """A score's distinct values, found once, so AUROC, AUPRC, AURC and PRR of any subset of the answers need no sort.

    The evaluation protocol scores every method on 20 random held-out subsets; sorting the full score once and
    counting per distinct value with ``bincount`` makes each subset O(n) instead of four O(n log n) sorts. The
    results equal :func:`auroc`, :func:`auprc`, :func:`aurc` and :func:`prr` on ``score[subset]`` (ties included).

    Parameters
    ----------
    {score}
    """

    def __init__(self, score: ArrayLike) -> None:
        s = check_scores(score, "score", probability=False)
        values, inverse = np.unique(s, return_inverse=True)
        self.n_values_ = int(values.shape[0])
        self._inverse = inverse.reshape(-1)

    def ranking_metrics(self, y_true: ArrayLike, subset: ArrayLike | None = None) -> dict[str, float]:
        """``{"auroc", "auprc", "aurc", "prr"}`` of the answers in ``subset`` (indices; all if None), labels ``y_true``
        aligned with the subset. AUROC, AUPRC and PRR are ``nan`` (with a warning) when the subset has one class."""
        groups = self._inverse if subset is None else self._inverse[np.asarray(subset, dtype=np.int64)]
        y = check_labels(y_true, "y_true", n=groups.shape[0])
        total = np.bincount(groups, minlength=self.n_values_)
        # weighted counts are floats (the stubs type every bincount as integers)
        pos = np.asarray(np.bincount(groups, weights=y.astype(np.float64), minlength=self.n_values_), dtype=np.float64)
        present = total > 0
        return ranking_of_groups(total[present].astype(np.float64), pos[present],
                                 both_classes=has_both_classes(y, "AUROC, AUPRC and PRR"))
