"""Selective prediction: the risk (error rate among the answers kept, most confident first) at each coverage; AURC and
the prediction rejection ratio (PRR) summarise the whole curve."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trace_core.checks import check_real
from trace_core.metrics._common import check_pair, checked_pair, has_both_classes
from trace_core.metrics._docs import fill_doc
from trace_core.metrics.kernels import aurc_of_groups, prr_of_aurc, tie_groups

__all__ = ["aurc", "prr", "risk_at_coverage", "risk_coverage_curve"]


@fill_doc
def risk_coverage_curve(
    y_true: ArrayLike, confidence: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Selective risk at every coverage, keeping the most confident answers first.

    For ``k = 1 .. n``: ``coverage_k = k / n`` and ``risk_k = E[errors among the k most confident] / k``,
    where an error is ``y_true == 0``. Ties in ``confidence`` are resolved by expectation: inside a
    group of ``m`` tied answers containing ``e`` errors, each kept answer adds ``e / m`` expected
    errors (the average over all orders of the group). The curve therefore does not depend on the
    order of the input.

    {selective_parameters}

    Returns
    -------
    coverage : ndarray of shape (n_answers,)
        ``k / n`` for ``k = 1 .. n``.
    risk : ndarray of shape (n_answers,)
        Expected error rate among the ``k`` kept answers, in [0, 1]; ``risk[-1]`` is the overall
        error rate. Defined with a single class (no warning).

    {pair_raises}
    """
    y, c = check_pair(y_true, confidence, "confidence", probability=False)
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


@fill_doc
def aurc(y_true: ArrayLike, confidence: ArrayLike, *, validate: bool = True) -> float:
    """Area under the risk-coverage curve.

    ``AURC = (1/n) * sum_{k=1..n} risk_k`` with ``risk_k`` from :func:`risk_coverage_curve`
    (ties resolved by expectation). Lower is better; for a fixed set of labels it is minimal when
    every correct answer is ranked above every wrong one and maximal for the reverse order.

    {selective_parameters}
    {validate}

    Returns
    -------
    float
        AURC in [0, 1]. Defined with a single class (0 if all correct, 1 if all wrong).

    {pair_raises}
    """
    y, c = checked_pair(y_true, confidence, "confidence", probability=False, validate=validate)
    return _aurc(y, c)


def _aurc(y: NDArray[np.int64], c: NDArray[np.float64]) -> float:
    """AURC of checked arrays: the tie groups in decreasing confidence, through the one AURC kernel."""
    total, pos = tie_groups(y, c)
    return aurc_of_groups(total[::-1], (total - pos)[::-1])


@fill_doc
def risk_at_coverage(y_true: ArrayLike, confidence: ArrayLike, *, coverage: float = 0.5) -> float:
    """Selective risk when keeping the most confident ``coverage`` share of the answers.

    Returns ``risk_k`` of :func:`risk_coverage_curve` at ``k = max(1, ceil(coverage * n))``.
    ``coverage * n`` within 1e-9 (relative) of an integer is taken as that integer, so float
    round-off (``0.07 * 100 = 7.000000000000001``) does not add an answer.

    {selective_parameters}
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
    cov = check_real(coverage, "coverage", minimum=0, maximum=1, low_open=True)
    _, risk = risk_coverage_curve(y_true, confidence)
    n = risk.shape[0]
    exact = cov * n
    nearest = round(exact)
    k = nearest if math.isclose(exact, nearest, rel_tol=1e-9, abs_tol=1e-9) else math.ceil(exact)
    k = min(max(1, int(k)), n)
    return float(risk[k - 1])


@fill_doc
def prr(y_true: ArrayLike, confidence: ArrayLike, *, validate: bool = True) -> float:
    """Prediction rejection ratio: how much of the gap between a random and the oracle rejection order a score closes.

    With binary correctness as the quality, ``PRR = (AURC_random - AURC) / (AURC_random - AURC_oracle)``, where

    * ``AURC`` is :func:`aurc` of ``confidence`` (the risk-coverage curve, most confident kept first; ties in
      ``confidence`` resolved by expectation over their orders);
    * ``AURC_random = n_wrong / n``, the error rate: a random order's expected risk at every coverage;
    * ``AURC_oracle = (n_wrong - n_correct (H_n - H_{n_correct})) / n``, every correct answer kept first
      (``H_m = sum_{j<=m} 1/j``).

    This is LM-Polygraph's PRR (Fadeeva et al. 2023; Vashurin et al. 2025) with correctness as the quality: its
    prediction-rejection area ``Q = (1/n) sum_k (mean quality of the k most confident)`` is ``1 - AURC`` here, and
    ``(Q - Q_random) / (Q_oracle - Q_random)`` equals the formula above. Since PRR is affine in AURC, the tie handling
    gives the expected PRR over the orders of tied answers; PRR is invariant to any increasing transform of the score.

    {selective_parameters}
    {validate}

    Returns
    -------
    float
        At most 1 (the oracle order); 0 for a constant score and in expectation for a random one; negative when worse
        than random (-1 for the reversed oracle order when the classes are balanced). ``nan`` with an
        :class:`UndefinedMetricWarning` when ``y_true`` holds one class (there is no gap to close).

    {pair_raises}

    Examples
    --------
    >>> round(prr([1, 1, 0, 0], [0.9, 0.8, 0.3, 0.1]), 12), prr([1, 1, 0, 0], [0.5, 0.5, 0.5, 0.5])
    (1.0, 0.0)
    """
    y, c = checked_pair(y_true, confidence, "confidence", probability=False, validate=validate)
    if not has_both_classes(y, "PRR"):
        return float("nan")
    n_correct = int(y.sum())
    return prr_of_aurc(_aurc(y, c), n_correct, int(y.shape[0]) - n_correct)
