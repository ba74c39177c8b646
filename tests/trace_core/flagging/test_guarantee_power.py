"""The guarantee's power and validity on the synthetic spike answers with confident mistakes (a few wrong answers
among the most confident, as with language models), by the simulation of ``bench/guarantee_power.py``: calibration
sets redrawn from a pool whose selective risk at every threshold is known."""

from __future__ import annotations

import numpy as np
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


def test_per_group_guarantees_hold_together_over_redrawn_sets():
    """Each group certified at delta / G: over redrawn calibration sets, the share of draws where some group's kept
    answers have a true risk above alpha stays within delta (+ 3 standard errors), while the pooled threshold lets
    the weak group's kept answers exceed alpha in most draws (the pooled rate hides it)."""
    from trace_core.flagging.guarantee import guaranteed_threshold, guaranteed_thresholds

    rng = np.random.default_rng(7)
    alpha, delta, draws, n = 0.2, 0.1, 300, 1500
    shapes = {"easy": lambda p: p ** 0.5, "hard": lambda p: p ** 2}  # true P(right | p) per group

    def true_risk(name, threshold):  # risk of the kept answers, p uniform on (0, 1)
        grid = np.linspace(threshold, 1, 2001)
        return float(np.mean(1 - shapes[name](grid)))

    failed, hidden = 0, 0
    for _ in range(draws):
        p = rng.random(n)
        group = np.where(rng.random(n) < 0.5, "easy", "hard")
        y = (rng.random(n) < np.where(group == "easy", shapes["easy"](p), shapes["hard"](p))).astype(int)
        found = guaranteed_thresholds(p, y, group, max_risk=alpha, delta=delta)
        failed += any(g.threshold is not None and true_risk(name, g.threshold) > alpha for name, g in found.items())
        pooled = guaranteed_threshold(p, y, max_risk=alpha, delta=delta).threshold
        hidden += pooled is not None and true_risk("hard", pooled) > alpha
    se = np.sqrt(delta * (1 - delta) / draws)
    assert failed / draws <= delta + 3 * se
    assert hidden / draws > 0.8


def test_per_group_guarantee_checks_its_input():
    from trace_core.flagging.guarantee import guaranteed_thresholds

    with pytest.raises(ValueError, match="`groups` has 2 values for 3 answers"):
        guaranteed_thresholds([0.1, 0.5, 0.9], [0, 1, 1], ["a", "b"], max_risk=0.2)
