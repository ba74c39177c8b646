"""A fit started from another fit (the previous split's, or the whole calibration part's for the out-of-fold folds)
reaches the optimum that a fit from the default start reaches: the objective, computed here independently, is the
same, on small and (nearly) separable parts too, where the previous split's fit can lie far out on a flat ridge."""

from __future__ import annotations

import numpy as np
import pytest

from trace_core.calibration.scalar import PlattCalibrator
from trace_core.methods.logistic import standardised_logistic


def _platt_objective(cal: PlattCalibrator, x: np.ndarray, y: np.ndarray) -> float:
    """Platt's objective at the fitted coefficients: the summed log-loss on the standardised score plus a^2 / 2C."""
    u = cal.coef_ * (x - cal.mean_) / cal.scale_ + cal.intercept_
    return float(np.sum(np.logaddexp(0.0, u) - y * u) + cal.coef_ ** 2 / (2.0 * cal.C))


def _logistic_objective(model, F: np.ndarray, y: np.ndarray, C: float = 1.0) -> float:
    u = model.standardised_decision(F)
    return float(np.sum(np.logaddexp(0.0, u) - y * u) + np.sum(model.coef ** 2) / (2.0 * C))


def _parts(seed: int, n: int, kind: str, splits: int = 20):
    """A score and labels of ``n`` answers, and ``splits`` random calibration parts of 35% of them (both classes).
    ``kind``: labels drawn from a logistic model of the score; separable by the score (odd seeds: but for one
    answer); or rare and unrelated to the score, so that a small part is often separable by chance, each along
    another boundary (the previous split's steep fit then sends some of this part's answers to log-odds of
    hundreds, where the Newton weights underflow)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n) * rng.choice([0.01, 1.0, 300.0])
    if kind == "logistic":
        y = (rng.random(n) < 1 / (1 + np.exp(-x / x.std()))).astype(np.int64)
    elif kind == "separable":
        y = (x > np.quantile(x, 0.7)).astype(np.int64)
        if seed % 2:
            y[np.argmax(x)] = 0
    else:
        y = np.zeros(n, dtype=np.int64)
        y[rng.choice(n, max(2, n // 5), replace=False)] = 1
    parts = []
    while len(parts) < splits:
        cal = np.sort(rng.choice(n, max(4, round(0.35 * n)), replace=False))
        if 0 < y[cal].sum() < cal.shape[0]:
            parts.append(cal)
    return x, y, parts


@pytest.mark.parametrize("n", [12, 30, 200])
@pytest.mark.parametrize("kind", ["logistic", "separable", "rare"])
@pytest.mark.parametrize("seed", range(12))
def test_platt_started_from_the_previous_split_reaches_the_cold_optimum(n, kind, seed):
    x, y, parts = _parts(seed, n, kind)
    previous = None
    for cal in parts:
        cold = PlattCalibrator().fit_checked(x[cal], y[cal])
        warm = PlattCalibrator().fit_checked(x[cal], y[cal], near=previous)
        best = _platt_objective(cold, x[cal], y[cal])
        assert _platt_objective(warm, x[cal], y[cal]) <= best + 1e-9 * max(1.0, best)
        np.testing.assert_allclose(warm.predict_checked(x), cold.predict_checked(x), atol=1e-6)
        previous = warm


@pytest.mark.parametrize("n", [12, 30, 200])
@pytest.mark.parametrize("kind", ["logistic", "separable", "rare"])
@pytest.mark.parametrize("seed", range(12))
def test_a_logistic_fit_started_from_the_previous_split_reaches_the_cold_optimum(n, kind, seed):
    x, y, parts = _parts(seed, n, kind)
    rng = np.random.default_rng(seed + 100)
    F = np.column_stack([x, x ** 2 / (1 + np.abs(x)), rng.normal(size=n)])
    previous = None
    for cal in parts:
        cold = standardised_logistic(F[cal], y[cal])
        warm = standardised_logistic(F[cal], y[cal], near=previous)
        best = _logistic_objective(cold, F[cal], y[cal])
        assert _logistic_objective(warm, F[cal], y[cal]) <= best + 1e-9 * max(1.0, best)
        np.testing.assert_allclose(warm(F), cold(F), atol=1e-6, rtol=1e-6)
        previous = warm


def test_a_real_part_whose_previous_split_fit_is_steep():
    """A 10-answer calibration part of SmolLM2's beam answers (Beam Entropy, transformed; 2 correct) and the
    previous split's Platt fit: started from that fit, the line search used to stop at once with an objective 44
    times the optimum's (probabilities off by up to 0.7)."""
    x = np.array([-1.3678896725238794, -1.3602405293838424, -1.3478707147460629, -1.0891056712202201,
                  -0.91790731841052475, -0.68907934949252725, -0.66743375181153342, -0.14705260184183749,
                  -0.033011610894182308, -1.1476956296768459e-05])
    y = np.array([1, 0, 1, 0, 0, 0, 0, 0, 0, 0])
    previous = PlattCalibrator()
    previous.coef_, previous.intercept_ = -93.5595380208206, -86.34576001432661
    previous.mean_, previous.scale_ = -0.8502140932718041, 0.21492002579923877
    cold = PlattCalibrator().fit_checked(x, y)
    warm = PlattCalibrator().fit_checked(x, y, near=previous)
    assert _platt_objective(cold, x, y) == pytest.approx(1.96473, abs=1e-5)
    assert _platt_objective(warm, x, y) <= _platt_objective(cold, x, y) + 1e-9
    np.testing.assert_allclose(warm.predict_checked(x), cold.predict_checked(x), atol=1e-6)

