"""Selective prediction: the risk (error rate among the answers kept, most confident first) at each coverage; AURC and
the prediction rejection ratio (PRR) summarise the whole curve."""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import check_real
from ._common import check_pair, has_both_classes
from ._docs import fill_doc

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
def aurc(y_true: ArrayLike, confidence: ArrayLike) -> float:
    """Area under the risk-coverage curve.

    ``AURC = (1/n) * sum_{k=1..n} risk_k`` with ``risk_k`` from :func:`risk_coverage_curve`
    (ties resolved by expectation). Lower is better; for a fixed set of labels it is minimal when
    every correct answer is ranked above every wrong one and maximal for the reverse order.

    {selective_parameters}

    Returns
    -------
    float
        AURC in [0, 1]. Defined with a single class (0 if all correct, 1 if all wrong).

    {pair_raises}
    """
    _, risk = risk_coverage_curve(y_true, confidence)
    return float(np.mean(risk))


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


@functools.lru_cache(maxsize=4)
def _harmonic(n: int) -> NDArray[np.float64]:
    """``[H_0, H_1, ..., H_n]`` (read-only): the evaluation protocol asks for the same two sizes on every split."""
    table = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, n + 1, dtype=np.float64))])
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=4)
def _harmonic_steps(n: int) -> NDArray[np.float64]:
    """``H_j - H_{j-1}`` for j = 1 .. n, as :func:`_aurc_from_groups` computes them for groups of one (read-only)."""
    table = _harmonic(n)
    steps = table[1:] - table[:-1]
    steps.flags.writeable = False
    return steps


def _aurc_from_groups(sizes: NDArray[np.float64], errors: NDArray[np.float64], *,
                      kept_before: NDArray[np.float64] | None = None,
                      errors_before: NDArray[np.float64] | None = None) -> float:
    """AURC from tied groups in decreasing confidence, in O(groups) after an O(n) harmonic table.

    Inside a group of m answers with error rate r, kept after K answers with E expected errors, the risks at
    k = K+1 .. K+m sum to ``m r + (E - K r)(H_{K+m} - H_K)`` with H the harmonic numbers; this equals the mean of
    :func:`risk_coverage_curve`'s risks without expanding the groups to answers. ``kept_before`` (K) and
    ``errors_before`` (E) per group, when the caller has them, save their cumulative sums.
    """
    n = int(sizes.sum())
    harmonic = _harmonic(n)
    rate = errors / sizes
    if kept_before is None:
        kept_before = np.cumsum(sizes) - sizes
    if errors_before is None:
        errors_before = np.cumsum(errors) - errors
    ends = kept_before.astype(np.int64)
    h = harmonic[ends + sizes.astype(np.int64)] - harmonic[ends]
    return float(np.sum(sizes * rate + (errors_before - kept_before * rate) * h) / n)


def _oracle_aurc(n_correct: int, n_wrong: int) -> float:
    """AURC of the oracle order (every correct answer first): ``risk_k = max(0, k - n_c) / k``, so
    ``AURC_oracle = (n_w - n_c (H_n - H_{n_c})) / n`` with ``H`` the harmonic numbers and ``n = n_c + n_w``."""
    n = n_correct + n_wrong
    tail = float(np.sum(1.0 / np.arange(n_correct + 1, n + 1, dtype=np.float64)))  # H_n - H_{n_c}
    return (n_wrong - n_correct * tail) / n


def _prr_from_aurc(aurc_value: float, n_correct: int, n_wrong: int) -> float:
    """PRR from the method's AURC and the class counts (both classes present)."""
    random = n_wrong / (n_correct + n_wrong)
    return (random - aurc_value) / (random - _oracle_aurc(n_correct, n_wrong))


@fill_doc
def prr(y_true: ArrayLike, confidence: ArrayLike) -> float:
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
    y, _ = check_pair(y_true, confidence, "confidence", probability=False)
    if not has_both_classes(y, "PRR"):
        return float("nan")
    n_correct = int(y.sum())
    return _prr_from_aurc(aurc(y, confidence), n_correct, int(y.shape[0]) - n_correct)
