"""The guarantee's power and validity on the synthetic spike answers with confident mistakes (a few wrong answers
among the most confident, as with language models), by the simulation of ``bench/guarantee_power.py``: calibration
sets redrawn from a pool whose selective risk at every threshold is known."""

from __future__ import annotations

import pytest

from bench.guarantee_power import Population, simulate, spike_population, truth

DRAWS = 400


@pytest.fixture(scope="module")
def spike() -> Population:
    return spike_population(60_000)


@pytest.mark.slow
def test_the_spike_data_has_confident_mistakes(spike):
    import numpy as np

    order = np.argsort(-spike.p)
    wrong = 1 - spike.y[order]
    assert 0.02 < wrong[:600].mean() < 0.07  # among the 1% most confident
    assert 0.11 < wrong[:18_000].mean() < 0.16  # among the 30% most confident (the 13.3%)


@pytest.mark.slow
def test_a_threshold_is_certified_on_most_calibration_sets_with_most_of_the_oracle_coverage(spike):
    # n = 1,500, alpha = 0.2, delta = 0.1: a fixed sequence from the ~11 most confident answers stops at the first
    # confident mistake there and certifies nothing on ~40% of these sets
    known = truth(spike)
    fallback, fixed = simulate(spike, 1_500, 0.2, 0.1, draws=DRAWS, seed=1, procedures=("fallback", "fixed sequence"),
                               known=known)
    assert fallback.ok, fallback  # violations within delta + 3 standard errors
    assert fallback.certified >= 0.9 * DRAWS, fallback
    assert fallback.median_ratio >= 0.8, fallback  # coverage over the oracle's (largest with true risk <= alpha)
    assert fixed.certified < 0.9 * DRAWS, fixed  # one sequence from the top, for contrast: the test tells them apart


@pytest.mark.slow
@pytest.mark.parametrize("n, alpha, delta", [(200, 0.3, 0.1), (1_500, 0.1, 0.05), (5_000, 0.05, 0.1)])
def test_violations_stay_within_delta_with_confident_mistakes(spike, n, alpha, delta):
    (result,) = simulate(spike, n, alpha, delta, draws=DRAWS, seed=2, procedures=("fallback",))
    assert result.ok, result
