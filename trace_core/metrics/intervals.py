"""Uncertainty of a rate or a metric: the Wilson interval of a proportion and the percentile bootstrap."""

from __future__ import annotations

import functools
import inspect
import statistics
import warnings
from collections.abc import Callable
from typing import overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trace_core.checks import check_int, shorten
from trace_core.metrics._common import UndefinedMetricWarning, check_level, check_pair, number_text
from trace_core.metrics._docs import fill_doc

__all__ = ["bootstrap_ci", "wilson_interval"]


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
    level = check_level(confidence)
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
            raise ValueError(f"`{name}` must be a non-negative integer count{where} {number_text(flat[i])}")
        arrays[name] = arr
    s, m = np.broadcast_arrays(arrays["successes"], arrays["n"])
    too_many = (s > m).ravel()
    if too_many.any():
        i = int(np.argmax(too_many))
        raise ValueError(
            f"`successes` must be <= `n`, got {number_text(s.ravel()[i])} > {number_text(m.ravel()[i])}"
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



@fill_doc
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
    evaluates ``metric(y_true[idx], scores[idx])`` on each (with ``validate=False`` for a metric that takes it, such
    as this package's: the point estimate has checked the data, and a resample holds only checked values) and returns
    the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` percentiles of the defined (non-nan) values.
    Resamples where the metric is undefined (``nan``, e.g. a single class for AUROC) are
    skipped, and warnings raised while evaluating resamples are suppressed; the point estimate on
    the full data still warns normally.

    Parameters
    ----------
    metric : callable ``(y_true, scores) -> float``
        E.g. :func:`auroc` or ``functools.partial(expected_calibration_error, n_bins=10)``.
    {y_true}
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
        raise TypeError(f"`metric` must be callable, got {shorten(metric)}")
    n_boot = check_int(n_boot, "n_boot", minimum=1)
    level = check_level(confidence)
    y, s = check_pair(y_true, scores, "scores", probability=False)

    # The point estimate checks the data in full; resamples of checked data skip the checks where the metric can.
    resample_metric = _unchecked(metric)

    def evaluate(yy: np.ndarray, ss: np.ndarray, fn: Callable[[np.ndarray, np.ndarray], float] = metric) -> float:
        value = fn(yy, ss)
        # Not check_real: an undefined metric returns nan, which is allowed here (those resamples are skipped).
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"`metric` must return a real number, got {shorten(value)}")
        return float(value)

    estimate = evaluate(y, s)
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, y.shape[0], size=(int(n_boot), y.shape[0]))
    values = np.empty(int(n_boot), dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b, idx in enumerate(indices):
            values[b] = evaluate(y[idx], s[idx], resample_metric)
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


def _unchecked(metric: Callable[..., float]) -> Callable[[np.ndarray, np.ndarray], float]:
    """``metric`` with ``validate=False`` bound when it takes that keyword, else ``metric`` itself."""
    try:
        takes = "validate" in inspect.signature(metric).parameters
    except (TypeError, ValueError):  # a callable without a signature (some builtins)
        takes = False
    return functools.partial(metric, validate=False) if takes else metric
