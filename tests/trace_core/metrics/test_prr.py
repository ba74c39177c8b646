"""PRR (prediction rejection ratio) against direct computations of the rejection curve."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from trace_core.metrics import RankGroups, UndefinedMetricWarning, prr


def _aurc_of_order(y_in_order: np.ndarray) -> float:
    """The rejection curve of one order (kept first = first in the array), integrated: mean over k of the error rate
    among the first k answers."""
    errors = np.cumsum(1 - np.asarray(y_in_order, dtype=float))
    return float(np.mean(errors / np.arange(1, len(y_in_order) + 1)))


def _brute_force_prr(y: np.ndarray, score: np.ndarray) -> float:
    """PRR from first principles for a small n: the method's AURC averaged over every order of its tied answers,
    the random AURC averaged over all n! orders, the oracle AURC the smallest over all n! orders."""
    n = len(y)
    every_order = [_aurc_of_order(y[list(p)]) for p in itertools.permutations(range(n))]
    random, oracle = float(np.mean(every_order)), min(every_order)
    groups = [np.flatnonzero(score == v) for v in np.unique(score)[::-1]]  # most confident group first
    method = [_aurc_of_order(y[np.concatenate(parts)])
              for parts in itertools.product(*[list(itertools.permutations(g)) for g in groups])]
    return (random - float(np.mean(method))) / (random - oracle)


def _lm_polygraph_form(y: np.ndarray, score: np.ndarray) -> float:
    """The LM-Polygraph formulation (no ties): area under the quality-rejection curve, Q = mean over k of the mean
    quality of the k most confident answers, normalised as (Q - Q_random) / (Q_oracle - Q_random)."""
    def area(order: np.ndarray) -> float:
        quality = y[order].astype(float)
        return float(np.mean(np.cumsum(quality) / np.arange(1, len(y) + 1)))

    method = area(np.argsort(-score, kind="stable"))
    oracle = area(np.argsort(-y, kind="stable"))
    return (method - y.mean()) / (oracle - y.mean())


@pytest.mark.parametrize("seed", range(12))
def test_prr_equals_the_brute_force_over_every_order_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 7))
    y = rng.integers(0, 2, n)
    y[:2] = [0, 1]
    rng.shuffle(y)
    score = rng.integers(0, 3, n).astype(float)  # few distinct values: ties
    assert prr(y, score) == pytest.approx(_brute_force_prr(y, score), abs=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_prr_equals_the_lm_polygraph_form_and_the_direct_curve_without_ties(seed):
    rng = np.random.default_rng(100 + seed)
    n = 300
    score = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-2 * score))).astype(int)
    direct_aurc = _aurc_of_order(y[np.argsort(-score)])
    oracle_aurc = _aurc_of_order(np.sort(y)[::-1])
    random_aurc = 1 - y.mean()
    direct = (random_aurc - direct_aurc) / (random_aurc - oracle_aurc)
    assert prr(y, score) == pytest.approx(direct, abs=1e-12)
    assert prr(y, score) == pytest.approx(_lm_polygraph_form(y, score), abs=1e-12)


def test_prr_landmarks():
    y = np.array([1, 1, 1, 0, 0, 1, 0, 1])
    assert prr(y, y + 0.0) == pytest.approx(1.0)  # the oracle
    assert prr([1, 1, 0, 0], [0.1, 0.2, 0.8, 0.9]) == pytest.approx(-1.0)  # reversed, balanced classes
    assert prr(y, np.zeros(8)) == pytest.approx(0.0, abs=1e-15)  # a constant score is random in expectation
    rng = np.random.default_rng(0)
    score = rng.normal(size=8)
    assert prr(y, score) == pytest.approx(prr(y, np.exp(3 * score) + 7))  # invariant to increasing transforms
    assert prr(y, score) == pytest.approx(prr(y.tolist(), score.tolist()))


def test_random_scores_have_prr_near_zero_on_average():
    rng = np.random.default_rng(1)
    y = (rng.random(400) < 0.3).astype(int)
    values = [prr(y, rng.normal(size=400)) for _ in range(200)]
    assert abs(float(np.mean(values))) < 0.02


def test_prr_is_undefined_with_one_class():
    for labels in ([1, 1, 1], [0, 0, 0]):
        with pytest.warns(UndefinedMetricWarning, match="PRR is undefined"):
            assert math.isnan(prr(labels, [0.1, 0.5, 0.9]))


def test_prr_input_errors():
    with pytest.raises(ValueError, match="same length"):
        prr([1, 0], [0.1])
    with pytest.raises(ValueError):
        prr([1, 0], [0.1, float("nan")])
    with pytest.raises(ValueError, match="0/1 labels"):
        prr([1, 2], [0.1, 0.2])


def test_rank_groups_prr_is_nan_for_a_one_class_split():
    groups = RankGroups([0.1, 0.4, 0.3, 0.9])
    with pytest.warns(UndefinedMetricWarning):
        got = groups.ranking_metrics([0, 0], [1, 2])
    assert math.isnan(got["prr"]) and got["aurc"] == 1.0
