"""The logistic solvers behind Platt scaling and TRACE+ against scikit-learn on hard inputs, and the score transforms.

The reference is ``LogisticRegression(C=C, tol=1e-10, max_iter=10000)`` on the standardised input, the objective both
minimise: ``sum_i logloss_i + |coef|**2 / (2 C)``, intercept unpenalised.

The skewed case reproduces a divergence seen on real chain-of-draft runs: ``exp(sum log p)`` of chains of 50-130 tokens
where 50-60% of the token probabilities are exactly 1.0 is squeezed against 0 over many orders of magnitude, with 3%
positives. On these seeds the earlier plain (undamped) Newton solver returned coefficients of about 1e6 in magnitude
(-3.9e6 on seed 14) and predicted 0 or 1 for every answer.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import random_traces
from sklearn.linear_model import LogisticRegression

from trace_core import PlattCalibrator, TracePlus, feature_matrix
from trace_core.methods.baselines import BASELINES, trace_baseline_scores
from trace_core.methods.logistic import fit_logistic, fit_logistic_1d, transform_scores
from trace_core.traces.ragged import Ragged


def skewed_chains(n: int, seed: int, positive_rate: float = 0.03) -> tuple[Ragged, np.ndarray]:
    """Chosen-token-only chains: surprisal of n answers of 50-130 tokens, 50-60% of them exactly 0 (p = 1.0), and
    labels logistic in the total surprisal with about ``positive_rate`` correct answers."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(50, 131, n)
    total_tokens = int(lengths.sum())
    certain = rng.random(total_tokens) < np.repeat(rng.uniform(0.5, 0.6, n), lengths)
    scale = np.repeat(rng.uniform(0.05, 0.8, n), lengths)
    s = np.where(certain, 0.0, rng.exponential(1.0, total_tokens) * scale)
    surprisal = Ragged(s, np.concatenate([[0], np.cumsum(lengths)]))
    logit = -0.15 * np.bincount(np.repeat(np.arange(n), lengths), weights=s, minlength=n)
    lo, hi = -60.0, 60.0
    for _ in range(80):  # the intercept that gives the positive rate
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if np.mean(1 / (1 + np.exp(-(logit + mid)))) > positive_rate else (mid, hi)
    y = (rng.random(n) < 1 / (1 + np.exp(-(logit + mid)))).astype(int)
    return surprisal, y


def seq_logp(surprisal: Ragged) -> np.ndarray:
    return trace_baseline_scores(surprisal, None, names=["SeqLogP"])["SeqLogP"]


def standardise(x: np.ndarray) -> tuple[np.ndarray, float, float]:
    mean, std = float(x.mean()), float(x.std())
    std = std if std > 1e-12 else 1.0
    return (x - mean) / std, mean, std


def reference(Z: np.ndarray, y: np.ndarray, C: float, **kwargs) -> LogisticRegression:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lbfgs may say it stopped at max_iter on separable data
        return LogisticRegression(C=C, tol=1e-10, max_iter=10000, **kwargs).fit(Z, y)


def objective(Z: np.ndarray, y: np.ndarray, coef: np.ndarray, intercept: float, C: float) -> float:
    u = Z @ np.atleast_1d(coef) + intercept
    return float(np.logaddexp(0.0, (1 - 2 * y) * u).sum() + 0.5 * float(np.atleast_1d(coef) @ np.atleast_1d(coef)) / C)


def assert_platt_equals_sklearn(x: np.ndarray, y: np.ndarray, C: float, *, atol: float = 1e-6) -> PlattCalibrator:
    platt = PlattCalibrator(C=C).fit(x, y)
    z, mean, std = standardise(x)
    ref = reference(z[:, None], y, C)
    assert np.isfinite([platt.coef_, platt.intercept_]).all()
    assert (platt.mean_, platt.scale_) == pytest.approx((mean, std))
    np.testing.assert_allclose(platt.predict_proba(x), ref.predict_proba(z[:, None])[:, 1], atol=atol)
    # at least as good an optimum as scikit-learn's (lbfgs stops on its tolerance; Newton converges quadratically)
    ours = objective(z[:, None], y, np.array([platt.coef_]), platt.intercept_, C)
    theirs = objective(z[:, None], y, ref.coef_.ravel(), float(ref.intercept_[0]), C)
    assert ours <= theirs + 1e-9 * max(1.0, abs(theirs))
    return platt


@pytest.mark.parametrize("seed", [8, 14, 32, 33, 37, 38])
def test_platt_on_the_skewed_sequence_probability_equals_sklearn(seed):
    surprisal, y = skewed_chains(2000, seed)
    x = seq_logp(surprisal)
    assert 0.015 < y.mean() < 0.05 and x.max() / np.median(x) > 1e5  # squeezed against 0
    platt = assert_platt_equals_sklearn(x, y, 1e4)
    z, _, _ = standardise(x)
    ref = reference(z[:, None], y, 1e4)
    assert platt.coef_ == pytest.approx(ref.coef_[0, 0], rel=1e-5)
    assert platt.intercept_ == pytest.approx(ref.intercept_[0], rel=1e-6)
    assert abs(platt.coef_) < 5
    held_out, y_held_out = skewed_chains(2000, seed + 1000)
    x_held_out = seq_logp(held_out)
    brier = np.mean((platt.predict_proba(x_held_out) - y_held_out) ** 2)
    z_held_out = (x_held_out - platt.mean_) / platt.scale_
    brier_sklearn = np.mean((ref.predict_proba(z_held_out[:, None])[:, 1] - y_held_out) ** 2)
    assert brier == pytest.approx(brier_sklearn, abs=1e-8)


@pytest.mark.parametrize("rate", [0.01, 0.005])
@pytest.mark.parametrize("C", [1.0, 1e4])
def test_rare_positives_on_heavy_tailed_scores(rate, C):
    rng = np.random.default_rng(int(rate * 1000))
    x = rng.lognormal(0.0, 2.0, 10000)  # heavy right tail
    y = (rng.random(10000) < rate * (0.5 + (x > np.median(x)))).astype(int)
    assert_platt_equals_sklearn(x, y, C)
    assert_platt_equals_sklearn(-x, y, C)  # the tail on the other side


@pytest.mark.parametrize("C", [1e4, 1e6])
def test_nearly_separable_scores(C):
    rng = np.random.default_rng(2)
    x = rng.normal(size=2000)
    y = (x + 0.05 * rng.normal(size=2000) > 0.3).astype(int)
    platt = assert_platt_equals_sklearn(x, y, C)
    assert platt.coef_ > 20


def test_perfectly_separable_scores_give_the_finite_penalised_optimum():
    rng = np.random.default_rng(3)
    x = rng.normal(size=500)
    y = (x > 0.2).astype(int)
    platt = assert_platt_equals_sklearn(x, y, 1e4)
    z, _, _ = standardise(x)
    tight = reference(z[:, None], y, 1e4, solver="newton-cholesky")
    assert 10 < platt.coef_ < 1e3
    assert platt.coef_ == pytest.approx(tight.coef_[0, 0], rel=1e-7)
    assert platt.intercept_ == pytest.approx(tight.intercept_[0], rel=1e-7)


def test_constant_scores_give_the_base_rate():
    y = np.array([1] * 7 + [0] * 293)
    platt = PlattCalibrator().fit(np.full(300, 0.7), y)
    assert platt.coef_ == pytest.approx(0.0, abs=1e-12)
    assert platt.intercept_ == pytest.approx(np.log(7 / 293), abs=1e-12)
    np.testing.assert_allclose(platt.predict_proba([0.0, 0.7, 5.0]), 7 / 300, rtol=1e-12)
    assert_platt_equals_sklearn(np.full(300, 0.7), y, 1e4)


@pytest.mark.parametrize("C", [1.0, 1e4])
def test_two_point_scores(C):
    rng = np.random.default_rng(4)
    x = np.where(rng.random(1000) < 0.3, 1.0, 0.0)
    y = (rng.random(1000) < 0.2 + 0.5 * x).astype(int)
    platt = assert_platt_equals_sklearn(x, y, C, atol=1e-8)
    if C == 1e4:  # nearly unpenalised: each point's probability is its observed rate
        for v in (0.0, 1.0):
            assert platt.predict_proba([v])[0] == pytest.approx(y[x == v].mean(), abs=1e-4)


def test_one_hundred_thousand_rows():
    rng = np.random.default_rng(5)
    x = rng.gamma(0.5, 1.0, 100_000)
    y = (rng.random(100_000) < 1 / (1 + np.exp(-(x - 1)))).astype(int)
    assert_platt_equals_sklearn(x, y, 1e4)


def test_every_newton_step_decreases_the_objective_on_the_skewed_case():
    """The objective after k steps is non-increasing in k (the line search only accepts decreasing steps; the slack
    is the rounding of this test's own evaluation of the objective)."""
    surprisal, y = skewed_chains(2000, 14)
    z, _, _ = standardise(seq_logp(surprisal))
    values = []
    for k in range(1, 16):
        a, b = fit_logistic_1d(z, y.astype(float), C=1e4, max_iter=k)
        values.append(objective(z[:, None], y, np.array([a]), b, 1e4))
    assert all(later <= earlier * (1 + 1e-12) for earlier, later in zip(values, values[1:], strict=False))
    assert values[-1] < values[0]


def _nearly_separable_features(feature_set: str, noise: float) -> tuple[np.ndarray, np.ndarray]:
    F = feature_matrix(random_traces(600, seed=3), feature_set=feature_set)
    scale = F.std(axis=0)
    Z = (F - F.mean(axis=0)) / np.where(scale > 1e-12, scale, 1.0)
    signal = Z[:, 1] - 0.5 * Z[:, 2]
    y = (signal + noise * np.random.default_rng(1).normal(size=len(signal)) > 0.8).astype(int)
    return F, y


@pytest.mark.parametrize("feature_set", ["paper", "extended"])
@pytest.mark.parametrize("noise", [0.0, 0.05])
@pytest.mark.parametrize("C", [1.0, 1e4])
def test_traceplus_on_nearly_separable_features_equals_sklearn(feature_set, noise, C):
    F, y = _nearly_separable_features(feature_set, noise)
    model = TracePlus(feature_set=feature_set, C=C).fit(F, y)
    Z = (F - model.mean_) / model.scale_
    lbfgs = reference(Z, y, C)
    np.testing.assert_allclose(model.predict_proba(F), lbfgs.predict_proba(Z)[:, 1], atol=1e-5)
    ours = objective(Z, y, model.coef_, model.intercept_, C)
    assert ours <= objective(Z, y, lbfgs.coef_.ravel(), float(lbfgs.intercept_[0]), C) + 1e-9
    tight = reference(Z, y, C, solver="newton-cholesky")  # scikit-learn's own Newton solver, to near precision
    np.testing.assert_allclose(model.predict_proba(F), tight.predict_proba(Z)[:, 1], atol=1e-8)
    np.testing.assert_allclose(model.coef_, tight.coef_.ravel(), rtol=1e-5, atol=1e-6)


def test_every_multi_feature_newton_step_decreases_the_objective():
    F, y = _nearly_separable_features("extended", 0.0)
    Z = (F - F.mean(axis=0)) / np.where(F.std(axis=0) > 1e-12, F.std(axis=0), 1.0)
    values = []
    for k in range(1, 20):
        coef, intercept = fit_logistic(Z, y.astype(float), C=1e4, max_iter=k)
        values.append(objective(Z, y, coef, intercept, 1e4))
    assert all(later <= earlier * (1 + 1e-12) for earlier, later in zip(values, values[1:], strict=False))


# ---------------------------------------------------------------------------------------------------------------
# Score transforms


def test_platt_on_the_log_of_the_sequence_probability_is_as_good_as_sklearn_and_beats_the_raw_score():
    assert BASELINES["SeqLogP"].transform == "log"
    briers = {"raw": [], "log": [], "sklearn log": [], "base rate": []}
    for seed in (14, 33, 8):
        surprisal, y = skewed_chains(3000, seed)
        held_out, y_held_out = skewed_chains(3000, seed + 1000)
        x, x_held_out = seq_logp(surprisal), seq_logp(held_out)
        log_x, log_held_out = transform_scores(x, "log"), transform_scores(x_held_out, "log")
        np.testing.assert_allclose(log_x, -np.add.reduceat(surprisal.values, surprisal.offsets[:-1]), rtol=1e-12)
        z, mean, std = standardise(log_x)
        ref = reference(z[:, None], y, 1e4)
        briers["sklearn log"].append(np.mean((ref.predict_proba(((log_held_out - mean) / std)[:, None])[:, 1]
                                              - y_held_out) ** 2))
        briers["log"].append(np.mean((PlattCalibrator().fit(log_x, y).predict_proba(log_held_out) - y_held_out) ** 2))
        briers["raw"].append(np.mean((PlattCalibrator().fit(x, y).predict_proba(x_held_out) - y_held_out) ** 2))
        briers["base rate"].append(np.mean((y.mean() - y_held_out) ** 2))
    mean = {k: float(np.mean(v)) for k, v in briers.items()}
    assert mean["log"] == pytest.approx(mean["sklearn log"], abs=1e-8)
    # Brier skill over the base rate (0.043 on the log score, 0.014 on the raw one when written)
    skill = {k: 1 - mean[k] / mean["base rate"] for k in ("raw", "log")}
    assert skill["log"] > 0.03 and skill["log"] > 2.5 * skill["raw"] and skill["log"] - skill["raw"] > 0.02


def test_transform_values_and_domains():
    np.testing.assert_allclose(transform_scores([0.5, 0.75, 0.1], "logit"), [0.0, np.log(3), np.log(1 / 9)])
    np.testing.assert_allclose(transform_scores([1.0, np.e ** -3], "log"), [0.0, -3.0])
    ends = transform_scores([0.0, 1.0], "logit")
    assert ends[0] == pytest.approx(-708.396, abs=1e-3) and ends[1] == pytest.approx(36.737, abs=1e-3)
    assert transform_scores([0.0], "log")[0] == pytest.approx(-708.396, abs=1e-3)
    tiny = np.array([1e-300, 1e-200, 1e-12])
    np.testing.assert_allclose(transform_scores(tiny, "logit"), np.log(tiny), rtol=1e-9)  # logit = log near 0
    near_one = np.array([1 - 1e-4, 1 - 1e-8, 1 - 1e-12])
    assert (np.diff(transform_scores(near_one, "logit")) > 3).all()  # spread, where log squeezes them to ~0
    x = np.sort(np.random.default_rng(0).random(200))
    for t in ("identity", "log", "logit"):
        assert (np.diff(transform_scores(x, t)) > 0).all(), t
    with pytest.raises(ValueError, match=r"logit transform needs scores in \[0, 1\]; index 1 is 1.5"):
        transform_scores([0.5, 1.5], "logit")
    with pytest.raises(ValueError, match="log transform needs scores >= 0; index 0 is -0.1"):
        transform_scores([-0.1], "log")
    with pytest.raises(ValueError, match="transform"):
        transform_scores([0.5], "sqrt")
    np.testing.assert_array_equal(transform_scores([-3.0, 2.0], "identity"), [-3.0, 2.0])


@pytest.mark.parametrize("C", [1.0, 1e4])
@pytest.mark.parametrize("kind", ["normal", "gamma", "rare", "separable", "two_point", "tails"])
def test_one_feature_solver_equals_the_matrix_solver(kind, C):
    """The 2 x 2 solver (buffers, one exp per point) reaches the matrix-form solver's optimum, tails included."""
    rng = np.random.default_rng(11)
    n = 5000
    x = {"normal": rng.normal(size=n), "gamma": rng.gamma(0.5, 1.0, n), "rare": -np.log(rng.random(n)) ** 3,
         "separable": rng.normal(size=n), "two_point": np.where(rng.random(n) < 0.3, 1.0, 0.0),
         "tails": rng.normal(size=n) * 40}[kind]
    y = {"rare": rng.random(n) < 0.03, "separable": x > 0.3,
         "two_point": rng.random(n) < 0.2 + 0.5 * x}.get(kind, rng.random(n) < 1 / (1 + np.exp(-(x - x.mean()))))
    z, _, _ = standardise(x)
    a, b = fit_logistic_1d(z, y.astype(float), C=C)
    coef, intercept = fit_logistic(z[:, None], y.astype(float), C=C)
    assert a == pytest.approx(coef[0], rel=1e-9, abs=1e-9)
    assert b == pytest.approx(intercept, rel=1e-9, abs=1e-9)
