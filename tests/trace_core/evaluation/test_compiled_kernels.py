"""The compiled loops (numba) give the numpy path's numbers; the protocol's shortcuts (CES on feature ranks, fits
started from a nearby fit) give the plain computation's numbers."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import trace_core.metrics.kernels as kernels
from trace_core.methods import logistic
from trace_core.methods.fitted_baselines import FITTED_BASELINES, ces_confidence, feature_ranks
from trace_core.methods.logistic import fit_logistic, fit_logistic_1d, standardised_logistic

REFERENCE = Path(__file__).resolve().parents[2] / "data" / "protocol_reference.json"


@pytest.fixture
def numpy_path(monkeypatch):
    """Run the numpy expressions instead of the compiled loops."""
    monkeypatch.setattr(kernels, "USE_COMPILED", False)


def _both(fn):
    """``fn()`` on the numpy path and on the compiled one."""
    pytest.importorskip("numba")
    kernels.USE_COMPILED = False
    try:
        plain = fn()
    finally:
        kernels.USE_COMPILED = True
    return plain, fn()


def test_compiled_is_none_on_the_numpy_path(numpy_path):
    assert kernels.compiled(kernels.singletons_loop) is None


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 40_000])
@pytest.mark.parametrize("rate", [0.0, 0.3, 1.0])
def test_the_ranking_loop_gives_the_numpy_rankings(n, rate):
    pos = (np.random.default_rng(n).random(n) < rate).astype(np.float64)
    plain, fast = _both(lambda: kernels.ranking_of_groups(np.ones(n), pos, both_classes=0 < pos.sum() < n,
                                                          singletons=True))
    assert plain.keys() == fast.keys()
    for name in plain:
        np.testing.assert_allclose(fast[name], plain[name], rtol=1e-12, atol=1e-14, equal_nan=True, err_msg=name)


def _skewed(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.gamma(0.5, 2.0, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(2.0 - z)))).astype(np.float64)
    return (z - z.mean()) / z.std(), y


@pytest.mark.parametrize("n", [3, 600, 5000])
def test_the_one_feature_point_loop_gives_the_numpy_sums(n):
    z, y = _skewed(n, 1)
    plain, fast = _both(lambda: logistic._point_1d(z, y, -1.3, 0.4, np.empty(n)))
    np.testing.assert_allclose(fast, plain, rtol=1e-12, atol=1e-12)


def test_the_loss_loop_gives_the_numpy_loss_residuals_and_weights():
    u = np.random.default_rng(2).normal(0.0, 30.0, 3000)  # deep into both tails
    y = (np.random.default_rng(3).random(3000) < 0.4).astype(np.float64)

    def terms():
        r, w = np.empty(3000), np.empty(3000)
        return logistic._loss_terms(u, y, r, w), r, w

    (plain, r0, w0), (fast, r1, w1) = _both(terms)
    np.testing.assert_allclose(fast, plain, rtol=1e-13)
    np.testing.assert_array_equal(r1, r0)
    np.testing.assert_array_equal(w1, w0)


@pytest.mark.parametrize("C", [1.0, 1e4])
def test_the_fits_give_the_same_coefficients_on_both_paths(C):
    z, y = _skewed(4000, 4)
    plain, fast = _both(lambda: fit_logistic_1d(z, y, C=C))
    np.testing.assert_allclose(fast, plain, rtol=1e-9, atol=1e-12)
    F = np.column_stack([z, z ** 2, np.sin(3 * z)])
    plain, fast = _both(lambda: fit_logistic(F, y, C=C))
    np.testing.assert_allclose(fast[0], plain[0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fast[1], plain[1], rtol=1e-9, atol=1e-12)


def test_a_fit_started_from_a_nearby_fit_reaches_the_same_model():
    z, y = _skewed(5000, 5)
    F = np.column_stack([z, np.exp(z / 3), np.cos(z)]) * [1.0, 10.0, 0.1] + [0.0, 5.0, -2.0]
    full = standardised_logistic(F, y)
    rows = np.arange(5000) % 5 != 0
    cold = standardised_logistic(F[rows], y[rows])
    warm = standardised_logistic(F[rows], y[rows], near=full)
    np.testing.assert_allclose(warm(F), cold(F), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(full.coefficients_in(full.mean, full.scale), np.append(full.coef, full.intercept))


def test_ces_on_feature_ranks_gives_the_scores_of_ces_on_the_features():
    rng = np.random.default_rng(6)
    F = np.column_stack([rng.gamma(2.0, 1.0, 800).round(2), rng.gamma(3.0, 1.0, 800)])  # ties in the first
    y = (rng.random(800) < 0.6).astype(np.int64)
    ranks = feature_ranks(F)
    assert ranks.dtype == np.int64
    fit = FITTED_BASELINES["CES"].fit
    on_values, on_ranks = fit(F[:500], y[:500]), fit(ranks[:500], y[:500])
    np.testing.assert_array_equal(on_ranks.score(ranks), on_values.score(F))
    np.testing.assert_array_equal(on_values.score(F), ces_confidence(F, F[:500][y[:500] == 1]))
    np.testing.assert_allclose(on_ranks.log_odds(on_ranks.score(ranks)), on_values.log_odds(on_values.score(F)))


@pytest.mark.slow
def test_the_numpy_path_gives_the_recorded_protocol_numbers(numpy_path, capsys):
    from bench.protocol_harness import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the sets include a truncated distribution on purpose
        assert main(["--check", str(REFERENCE)]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("n", [5, 4096, 20_000])
def test_the_radix_sort_gives_numpy_s_stable_order(n):
    rng = np.random.default_rng(n)
    x = rng.normal(size=n) * np.exp(rng.normal(0.0, 20.0, n))  # many magnitudes, both signs
    x[: n // 3] = np.round(x[: n // 3], 1)  # ties, kept in row order
    x[:4] = [-0.0, 0.0, -0.0, np.finfo(np.float64).tiny]
    plain, fast = _both(lambda: kernels.stable_argsort(x))
    np.testing.assert_array_equal(plain, np.argsort(x, kind="stable"))
    np.testing.assert_array_equal(fast, plain)


@pytest.mark.parametrize("kind", ["normal", "near_ties", "rounded"])
def test_the_isotonic_runs_loop_gives_the_numpy_thresholds_bit_for_bit(kind):
    from trace_core.calibration.calibrators import IsotonicCalibrator

    rng = np.random.default_rng(7)
    x = {"normal": rng.normal(size=3000), "near_ties": 0.5 + rng.integers(0, 12, 3000) * 2.2e-16,
         "rounded": np.round(rng.random(3000), 2)}[kind]
    y = (rng.random(3000) < 0.4).astype(np.int64)
    plain, fast = _both(lambda: IsotonicCalibrator().fit(x, y))
    np.testing.assert_array_equal(fast.x_thresholds_, plain.x_thresholds_)
    np.testing.assert_array_equal(fast.y_thresholds_, plain.y_thresholds_)


@pytest.mark.parametrize("n", [1, 7, 8, 129, 1000, 70_001])
def test_the_pairwise_loop_sums_as_numpy_does_bit_for_bit(n):
    pytest.importorskip("numba")
    from trace_core.metrics.compiled_sums import pairwise_sum

    rng = np.random.default_rng(n)
    x = rng.normal(size=n) * np.exp(rng.normal(0.0, 8.0, n))  # many magnitudes, both signs: the order shows
    assert pairwise_sum(x, 0, n) == np.add.reduce(x)
    assert pairwise_sum(x[::-1], 0, n) == np.add.reduce(x[::-1])
    if n > 3:
        assert pairwise_sum(x, 3, n - 3) == np.add.reduce(x[3:])


@pytest.mark.parametrize("order", ["ascending", "descending", "shuffled", "on_edges", "one_bin"])
@pytest.mark.parametrize("n", [1, 2, 9, 300, 20_000])
@pytest.mark.parametrize("n_bins", [1, 10, 15])
def test_the_brier_and_ece_loop_gives_the_numpy_numbers_bit_for_bit(order, n, n_bins):
    rng = np.random.default_rng(n * n_bins)
    p = {"ascending": np.sort(rng.beta(0.4, 0.4, n)), "descending": np.sort(rng.random(n))[::-1].copy(),
         "shuffled": rng.random(n), "on_edges": np.sort(np.round(rng.random(n), 1)),
         "one_bin": np.sort(0.5 + rng.random(n) * 1e-3)}[order]
    y = (rng.random(n) < p).astype(np.int64)
    plain, fast = _both(lambda: kernels.brier_and_ece_of_monotone(y, p, n_bins))
    assert plain == (kernels.brier_kernel(y, p), kernels.ece_of_ascending(y, p, n_bins))
    assert fast == plain


def test_the_platt_loop_gives_the_numpy_probabilities_bit_for_bit():
    from trace_core.calibration.calibrators import PlattCalibrator

    z, y = _skewed(4000, 5)
    model = PlattCalibrator().fit(z, y.astype(np.int64))
    x = np.concatenate([z, np.linspace(-800.0, 800.0, 2001)])  # both tails, where the sigmoid rounds to 0 and 1
    plain, fast = _both(lambda: model.predict_checked(x))
    np.testing.assert_array_equal(fast, plain)


def test_the_split_loop_gives_the_numpy_parts():
    from trace_core.evaluation.protocol import Ascending

    rng = np.random.default_rng(4)
    raw = np.round(rng.normal(size=5000), 2)
    y = (rng.random(5000) < 0.3).astype(np.int64)
    prep = Ascending.of(raw, raw, y)
    in_cal = rng.random(5000) < 0.35
    plain, fast = _both(lambda: prep.parts(in_cal, int(in_cal.sum())))
    for want, got in zip([*plain[0], *plain[1]], [*fast[0], *fast[1]], strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("distinct", [5, 400, 6000])
def test_a_fitted_score_s_rankings_equal_rank_groups_bit_for_bit(distinct):
    from trace_core.evaluation.protocol import ranking_of_scores
    from trace_core.metrics import RankGroups

    rng = np.random.default_rng(distinct)
    score = rng.integers(0, distinct, 6000) / distinct - 0.5  # ties (CES's scores are counts over a part)
    score[:3] = [-0.0, 0.0, -0.0]  # equal, one group
    y = (rng.random(6000) < 0.5 + score / 2).astype(np.int64)
    assert ranking_of_scores(score, y) == RankGroups(score).ranking_metrics(y)


def test_preload_loads_every_compiled_loop():
    """``preload()`` (a server's start, ``make install``) calls every loop the code compiles, so that no user's first
    evaluation compiles or loads one: each name given to ``compiled(...)`` in trace_core, read from the sources, is
    compiled in a fresh process after preload alone, and so is the Brier-and-ECE loop."""
    import re
    import subprocess
    import sys

    pytest.importorskip("numba")
    root = Path(kernels.__file__).resolve().parents[1]
    wanted = {name for path in root.rglob("*.py")
              for name in re.findall(r"\bcompiled\((\w+)\)", path.read_text(encoding="utf-8"))}
    assert {"platt_loop", "split_ascending_loop", "singletons_loop"} <= wanted
    code = ("import trace_core.metrics.kernels as k\n"
            "from trace_core.evaluation.protocol import preload\n"
            "preload()\n"
            "print(' '.join(f.__name__ for f, c in k._compiled_loops.items() if c is not None and c.signatures))\n"
            "print(bool(k.compiled_sums().brier_and_ece.signatures))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert wanted <= set(out[0].split())
    assert out[1] == "True"
