"""Tests for trace_core.metrics: scikit-learn as the independent reference, hand examples, validation."""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import warnings
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest
from sklearn.calibration import calibration_curve
from sklearn.metrics import (
    average_precision_score,
    brier_score_loss,
    roc_auc_score,
)
from sklearn.metrics import roc_curve as sk_roc_curve

from trace_core import metrics

SEEDS = [0, 1, 2]
SIZES = [7, 60, 500]
# The data sets every comparison with scikit-learn runs on: each seed and size, without and with heavy ties.
DATA = list(itertools.product(SEEDS, SIZES, [False, True]))


def make_data(seed: int, n: int, *, ties: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Labels with both classes and probabilities loosely related to them (optionally heavily tied)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=n)
    y[0], y[1] = 1, 0
    p = np.clip(0.5 * y + 0.5 * rng.random(n) + rng.normal(0, 0.15, n), 0.0, 1.0)
    if ties:
        p = np.round(p, 1)  # many ties, and many values exactly on uniform bin edges
    return y, p


@contextlib.contextmanager
def no_warnings() -> Iterator[None]:
    """Turn every warning into an error inside the block."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# ---------------------------------------------------------------------------------------------
# Agreement with scikit-learn
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ours, sklearns, score_of", [
    pytest.param(metrics.brier_score, brier_score_loss, lambda p: p, id="brier"),
    pytest.param(metrics.auroc, roc_auc_score, lambda p: 10 * p - 3, id="auroc"),  # raw scores need not be probabilities
    pytest.param(metrics.auprc, average_precision_score, lambda p: np.log(p + 0.01), id="auprc"),
])
@pytest.mark.parametrize("seed, n, ties", DATA)
def test_scalar_metrics_match_sklearn(ours, sklearns, score_of, seed: int, n: int, ties: bool) -> None:
    y, p = make_data(seed, n, ties=ties)
    score = score_of(p)
    assert ours(y, score) == pytest.approx(sklearns(y, score), abs=1e-12)


@pytest.mark.parametrize("seed, n, ties", DATA)
def test_roc_curve_matches_sklearn(seed: int, n: int, ties: bool) -> None:
    y, p = make_data(seed, n, ties=ties)
    fpr, tpr, thr = metrics.roc_curve(y, p)
    sk_fpr, sk_tpr, sk_thr = sk_roc_curve(y, p, drop_intermediate=False)
    np.testing.assert_allclose(fpr, sk_fpr, atol=1e-12)
    np.testing.assert_allclose(tpr, sk_tpr, atol=1e-12)
    assert thr[0] == np.inf
    np.testing.assert_array_equal(thr[1:], sk_thr[1:])


@pytest.mark.parametrize("seed, n, ties", DATA)
@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
@pytest.mark.parametrize("n_bins", [1, 5, 10])
def test_reliability_table_matches_calibration_curve(
    seed: int, n: int, ties: bool, strategy: str, n_bins: int
) -> None:
    y, p = make_data(seed, n, ties=ties)
    table = metrics.reliability_table(y, p, n_bins=n_bins, strategy=strategy)
    prob_true, prob_pred = calibration_curve(y, p, n_bins=n_bins, strategy=strategy)
    nonempty = table[table["count"] > 0]
    np.testing.assert_allclose(nonempty["accuracy"].to_numpy(), prob_true, atol=1e-12)
    np.testing.assert_allclose(nonempty["mean_confidence"].to_numpy(), prob_pred, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Binning, ECE, reliability table
# ---------------------------------------------------------------------------------------------


def test_bin_probabilities_edges_go_to_lower_bin() -> None:
    edges, ids = metrics.bin_probabilities([0.0, 0.1, 0.15, 0.5, 0.55, 1.0], n_bins=10)
    np.testing.assert_allclose(edges, np.linspace(0, 1, 11))
    np.testing.assert_array_equal(ids, [0, 0, 1, 4, 5, 9])


def test_bin_probabilities_quantile_equal_mass() -> None:
    p = np.arange(1, 9) / 10.0  # 0.1 .. 0.8
    edges, ids = metrics.bin_probabilities(p, n_bins=4, strategy="quantile")
    assert edges[0] == pytest.approx(0.1) and edges[-1] == pytest.approx(0.8)
    np.testing.assert_array_equal(np.bincount(ids, minlength=4), [2, 2, 2, 2])
    assert edges.shape == (5,) and ids.shape == (8,)


def test_bin_probabilities_quantile_with_ties_leaves_empty_bins() -> None:
    edges, ids = metrics.bin_probabilities([0.2] * 6 + [0.9] * 2, n_bins=4, strategy="quantile")
    counts = np.bincount(ids, minlength=4)
    assert counts.sum() == 8
    assert (counts == 0).any()
    assert np.all(np.diff(edges) >= 0)


def test_ece_hand_example() -> None:
    # Bin [0, 0.5]: p 0.2, 0.3 both correct -> |1 - 0.25| = 0.75, weight 1/2.
    # Bin (0.5, 1]: p 0.9, 0.9, one correct -> |0.5 - 0.9| = 0.4, weight 1/2.
    y = [1, 0, 1, 1]
    p = [0.9, 0.9, 0.2, 0.3]
    assert metrics.expected_calibration_error(y, p, n_bins=2) == pytest.approx(0.575)


def test_ece_zero_only_when_each_bin_is_calibrated() -> None:
    assert metrics.expected_calibration_error([1, 0], [0.5, 0.5], n_bins=10) == 0.0
    # 0.5 lies on the inner edge of 2 bins and goes to the lower bin {0.5, 0.5, 0.1, 0.0}:
    # accuracy 1/4 vs confidence 0.275; upper bin {0.75 x 4}: accuracy 3/4 vs 0.75 (exact).
    y = [1, 0, 1, 1, 1, 0, 0, 0]
    p = [0.5, 0.5, 0.75, 0.75, 0.75, 0.75, 0.1, 0.0]
    assert metrics.expected_calibration_error(y, p, n_bins=2) == pytest.approx(0.5 * 0.025)


def test_ece_single_class_is_defined_without_warning() -> None:
    with no_warnings():
        assert metrics.expected_calibration_error([1, 1, 1], [0.9, 0.8, 1.0], n_bins=5) == pytest.approx(0.1)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
@pytest.mark.parametrize("ties", [False, True])
def test_reliability_table_sums_to_ece(seed: int, strategy: str, ties: bool) -> None:
    y, p = make_data(seed, 300, ties=ties)
    table = metrics.reliability_table(y, p, n_bins=12, strategy=strategy)
    filled = table[table["count"] > 0]
    from_table = float(np.sum(filled["count"] / len(y) * filled["gap"].abs()))
    ece = metrics.expected_calibration_error(y, p, n_bins=12, strategy=strategy)
    assert ece > 0
    assert from_table == pytest.approx(ece, abs=1e-12)


def test_reliability_table_layout_and_empty_bins() -> None:
    y = [1, 0, 1, 1]
    p = [0.05, 0.05, 0.95, 0.92]
    table = metrics.reliability_table(y, p, n_bins=4, confidence=0.9)
    assert isinstance(table, pd.DataFrame)
    assert list(table.columns) == [
        "bin", "lower", "upper", "count", "mean_confidence",
        "accuracy", "wilson_low", "wilson_high", "gap",
    ]
    assert table["bin"].tolist() == [0, 1, 2, 3]
    assert table["count"].tolist() == [2, 0, 0, 2]
    np.testing.assert_allclose(table["lower"], [0, 0.25, 0.5, 0.75])
    np.testing.assert_allclose(table["upper"], [0.25, 0.5, 0.75, 1.0])
    empty = table.iloc[1:3]
    assert empty[["mean_confidence", "accuracy", "wilson_low", "wilson_high", "gap"]].isna().all().all()
    first, last = table.iloc[0], table.iloc[3]
    assert first["accuracy"] == 0.5 and first["mean_confidence"] == pytest.approx(0.05)
    assert last["accuracy"] == 1.0 and last["gap"] == pytest.approx(1.0 - 0.935)
    low, high = metrics.wilson_interval(1, 2, confidence=0.9)
    assert (first["wilson_low"], first["wilson_high"]) == pytest.approx((low, high))


# ---------------------------------------------------------------------------------------------
# Wilson interval
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("successes", "n", "expected"),
    [
        (8, 10, (0.4902, 0.9433)),  # textbook values
        (50, 100, (0.4038, 0.5962)),
        (10, 10, (0.7225, 1.0)),
    ],
)
def test_wilson_known_values(successes: int, n: int, expected: tuple[float, float]) -> None:
    assert metrics.wilson_interval(successes, n) == pytest.approx(expected, abs=1e-4)


def test_wilson_zero_successes_closed_form() -> None:
    z2 = 1.959963984540054**2
    low, high = metrics.wilson_interval(0, 10)
    assert low == 0.0
    assert high == pytest.approx(z2 / (10 + z2), rel=1e-12)


def test_wilson_empty_is_nan_and_vectorised() -> None:
    low, high = metrics.wilson_interval(np.array([0, 8, 3]), np.array([0, 10, 3]))
    assert isinstance(low, np.ndarray) and low.shape == (3,)
    assert math.isnan(low[0]) and math.isnan(high[0])
    assert (low[1], high[1]) == pytest.approx(metrics.wilson_interval(8, 10))
    assert (low[2], high[2]) == pytest.approx(metrics.wilson_interval(3, 3))
    assert all(math.isnan(v) for v in metrics.wilson_interval(0, 0))


def test_wilson_wider_at_higher_confidence() -> None:
    lo90, hi90 = metrics.wilson_interval(30, 50, confidence=0.90)
    lo99, hi99 = metrics.wilson_interval(30, 50, confidence=0.99)
    assert lo99 < lo90 < 0.6 < hi90 < hi99


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"successes": 5, "n": 3}, ValueError, r"`successes` must be <= `n`, got 5 > 3"),
        ({"successes": -1, "n": 3}, ValueError, r"`successes` must be a non-negative integer count, got -1"),
        ({"successes": 1.5, "n": 3}, ValueError, r"`successes` must be a non-negative integer count, got 1.5"),
        ({"successes": [1, 2], "n": [3, np.nan]}, ValueError, r"`n` must be .* index 1 is nan"),
        ({"successes": 1, "n": 3, "confidence": 1.5}, ValueError,
         r"`confidence` must be a finite real number in \(0, 1\), got 1.5"),
        ({"successes": 1, "n": 3, "confidence": 0}, ValueError,
         r"`confidence` must be a finite real number in \(0, 1\), got 0"),
    ],
)
def test_wilson_validation(kwargs: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        metrics.wilson_interval(**kwargs)


# ---------------------------------------------------------------------------------------------
# Ranking metrics: ties, hand examples, TPR at FPR
# ---------------------------------------------------------------------------------------------


def test_auroc_hand_example_with_ties() -> None:
    # Pairs (pos, neg): (0.9 vs 0.5)=1, (0.9 vs 0.1)=1, (0.5 vs 0.5)=1/2, (0.5 vs 0.1)=1 -> 3.5/4.
    assert metrics.auroc([1, 1, 0, 0], [0.9, 0.5, 0.5, 0.1]) == pytest.approx(0.875)
    assert metrics.auroc([1, 0], [3.0, 3.0]) == 0.5
    assert metrics.auroc([0, 1], [-1.0, 1.0]) == 1.0


def test_auprc_hand_example() -> None:
    # Thresholds 0.9 (P=1, R=1/2), 0.8 (P=1/2, R=1/2), 0.7 (P=2/3, R=1): AP = 1/2*1 + 1/2*2/3.
    assert metrics.auprc([1, 0, 1], [0.9, 0.8, 0.7]) == pytest.approx(0.5 + 1 / 3)
    # A tie group counts as one threshold: both at 0.5 -> P=1/2, R=1 -> AP=1/2.
    assert metrics.auprc([1, 0], [0.5, 0.5]) == pytest.approx(0.5)


def test_labels_accept_bool_and_float_zero_one() -> None:
    y = np.array([1, 0, 1, 1, 0])
    s = np.array([0.3, 0.2, 0.9, 0.4, 0.5])
    expected = metrics.auroc(y, s)
    assert metrics.auroc(y.astype(bool), s) == expected
    assert metrics.auroc(y.astype(float), s) == expected
    assert metrics.auroc(y.tolist(), s.tolist()) == expected


@pytest.mark.parametrize(
    ("fpr", "expected"),
    [(0.0, 0.5), (0.25, 0.5), (0.5, 1.0), (0.75, 1.0), (1.0, 1.0)],
)
def test_tpr_at_fpr_vertical_segments_take_the_top(fpr: float, expected: float) -> None:
    # ROC points: (0,0) (0,.5) (.5,.5) (.5,1) (1,1).
    assert metrics.tpr_at_fpr([1, 0, 1, 0], [0.9, 0.8, 0.7, 0.6], fpr=fpr) == pytest.approx(expected)


@pytest.mark.parametrize("fpr", [0.0, 0.3, 0.6, 1.0])
def test_tpr_at_fpr_interpolates_diagonal_of_a_tie(fpr: float) -> None:
    # All tied: the curve is the straight line (0,0) -> (1,1).
    assert metrics.tpr_at_fpr([1, 0, 1, 0], [2.0, 2.0, 2.0, 2.0], fpr=fpr) == pytest.approx(fpr)


@pytest.mark.parametrize("seed", SEEDS)
def test_tpr_at_fpr_matches_sklearn_curve_at_its_points(seed: int) -> None:
    y, p = make_data(seed, 200, ties=True)
    sk_fpr, sk_tpr, _ = sk_roc_curve(y, p, drop_intermediate=False)
    for target in np.unique(sk_fpr):
        best = sk_tpr[sk_fpr <= target].max()
        assert metrics.tpr_at_fpr(y, p, fpr=float(target)) == pytest.approx(best, abs=1e-12)
    # Between curve points the value is bracketed by its neighbours.
    mid = 0.5 * (np.unique(sk_fpr)[1] + np.unique(sk_fpr)[2])
    value = metrics.tpr_at_fpr(y, p, fpr=mid)
    assert sk_tpr[sk_fpr <= mid].max() <= value <= sk_tpr[sk_fpr >= mid].min()


@pytest.mark.parametrize("y", [[1, 1, 1], [0, 0, 0]])
@pytest.mark.parametrize(
    "metric",
    [metrics.auroc, metrics.auprc, functools.partial(metrics.tpr_at_fpr, fpr=0.1)],
    ids=["auroc", "auprc", "tpr_at_fpr"],
)
def test_one_class_warns_and_returns_nan(y: list[int], metric) -> None:
    with pytest.warns(metrics.UndefinedMetricWarning, match="single class"):
        assert math.isnan(metric(y, [0.1, 0.5, 0.9]))


def test_roc_curve_one_class_warns_with_nan_axis() -> None:
    with pytest.warns(metrics.UndefinedMetricWarning, match="single class"):
        fpr, tpr, _ = metrics.roc_curve([1, 1], [0.2, 0.4])
    assert np.isnan(fpr).all()
    np.testing.assert_allclose(tpr, [0.0, 0.5, 1.0])


# ---------------------------------------------------------------------------------------------
# Selective prediction
# ---------------------------------------------------------------------------------------------


def test_risk_coverage_hand_example() -> None:
    coverage, risk = metrics.risk_coverage_curve([1, 1, 0, 0], [0.9, 0.8, 0.2, 0.1])
    np.testing.assert_allclose(coverage, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(risk, [0, 0, 1 / 3, 1 / 2])
    assert metrics.aurc([1, 1, 0, 0], [0.9, 0.8, 0.2, 0.1]) == pytest.approx(5 / 24)
    assert metrics.aurc([1, 1, 0, 0], [0.1, 0.2, 0.8, 0.9]) == pytest.approx(19 / 24)


def test_risk_coverage_ties_resolved_by_expectation_hand_example() -> None:
    # Top group (conf 2) has 1 error in 2 -> 0.5 expected error per kept answer; bottom group 0.
    _, risk = metrics.risk_coverage_curve([1, 0, 1, 1], [2, 2, 1, 1])
    np.testing.assert_allclose(risk, [0.5, 0.5, 1 / 3, 1 / 4])


def test_risk_coverage_equals_average_over_all_tie_orders() -> None:
    # Independent brute force: average the naive curve over every order of the input, sorting
    # stably by confidence so that each order breaks ties differently.
    y = np.array([1, 0, 0, 1, 1, 0])
    c = np.array([0.7, 0.7, 0.7, 0.2, 0.9, 0.2])
    curves = []
    for perm in itertools.permutations(range(len(y))):
        yp, cp = y[list(perm)], c[list(perm)]
        order = np.argsort(-cp, kind="stable")
        errors = np.cumsum(1 - yp[order])
        curves.append(errors / np.arange(1, len(y) + 1))
    _, risk = metrics.risk_coverage_curve(y, c)
    np.testing.assert_allclose(risk, np.mean(curves, axis=0), atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_risk_coverage_invariant_to_input_order(seed: int) -> None:
    y, p = make_data(seed, 300, ties=True)
    rng = np.random.default_rng(seed + 100)
    _, risk = metrics.risk_coverage_curve(y, p)
    for _ in range(3):
        perm = rng.permutation(len(y))
        _, risk_perm = metrics.risk_coverage_curve(y[perm], p[perm])
        np.testing.assert_array_equal(risk_perm, risk)
        assert metrics.aurc(y[perm], p[perm]) == metrics.aurc(y, p)


@pytest.mark.parametrize("seed", SEEDS)
def test_aurc_perfect_is_minimum_reversed_is_maximum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=40)
    perfect = metrics.aurc(y, y + rng.random(40) * 0.5)  # every correct answer above every wrong one
    reversed_ = metrics.aurc(y, -y - rng.random(40) * 0.5)
    for _ in range(20):
        value = metrics.aurc(y, rng.random(40))
        assert perfect < value < reversed_
    # The perfect ranking reaches the closed-form minimum: zero risk until the errors start.
    n, n_correct = len(y), int(y.sum())
    k = np.arange(1, n + 1)
    assert perfect == pytest.approx(np.mean(np.maximum(k - n_correct, 0) / k))


def test_aurc_and_risk_single_class_without_warning() -> None:
    with no_warnings():
        assert metrics.aurc([1, 1, 1], [0.3, 0.2, 0.1]) == 0.0
        assert metrics.aurc([0, 0, 0], [0.3, 0.2, 0.1]) == 1.0
        assert metrics.risk_at_coverage([0, 0], [0.1, 0.2], coverage=0.5) == 1.0


@pytest.mark.parametrize(
    ("coverage", "expected"),
    [
        (0.01, 0.0),  # k = 1
        (0.3, 0.0),  # k = 3
        (0.7, 3 / 7),  # k = 7
        (0.31, 0.25),  # k = ceil(3.1) = 4
        (0.5, 2 / 5),  # k = 5
        (1.0, 5 / 10),  # overall error rate
    ],
)
def test_risk_at_coverage(coverage: float, expected: float) -> None:
    y = np.array([1, 1, 1, 0, 0, 1, 0, 1, 0, 0])
    confidence = np.arange(10, 0, -1)  # already in decreasing order
    assert metrics.risk_at_coverage(y, confidence, coverage=coverage) == pytest.approx(expected)


def test_risk_at_coverage_ignores_float_round_off() -> None:
    # 0.07 * 100 is 7.000000000000001 in floats; the 7 most confident answers are all correct,
    # the 8th is wrong, so an off-by-one k would give 1/8 instead of 0.
    y = np.array([1] * 7 + [0] + [1] * 92)
    confidence = np.arange(100, 0, -1)
    assert metrics.risk_at_coverage(y, confidence, coverage=0.07) == 0.0
    assert metrics.risk_at_coverage(y, confidence, coverage=0.08) == pytest.approx(1 / 8)


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------

PROB_METRICS = {
    "brier_score": metrics.brier_score,
    "expected_calibration_error": metrics.expected_calibration_error,
    "reliability_table": metrics.reliability_table,
}
SCORE_METRICS = {
    "auroc": metrics.auroc,
    "auprc": metrics.auprc,
    "roc_curve": metrics.roc_curve,
    "tpr_at_fpr": metrics.tpr_at_fpr,
    "risk_coverage_curve": metrics.risk_coverage_curve,
    "aurc": metrics.aurc,
    "risk_at_coverage": metrics.risk_at_coverage,
    "bootstrap_ci": functools.partial(metrics.bootstrap_ci, metrics.auroc),
}
ALL_METRICS = {**PROB_METRICS, **SCORE_METRICS}


@pytest.mark.parametrize("name", sorted(ALL_METRICS))
@pytest.mark.parametrize(
    ("y", "s", "error", "match"),
    [
        ([], [], ValueError, r"`y_true` is empty"),
        ([1, 0, 1], [0.5, 0.5], ValueError, r"must have the same length, got 3 and 2"),
        ([1, 0, 1], [0.5, np.nan, 0.5], ValueError, r"must be finite; index 1 is nan"),
        ([1, 0, 1], [0.5, 0.5, np.inf], ValueError, r"must be finite; index 2 is inf"),
        ([1, 2, 0], [0.5, 0.5, 0.5], ValueError, r"`y_true` must contain only 0/1 .*index 1 is 2"),
        ([1, 0, 0.5], [0.5, 0.5, 0.5], ValueError, r"`y_true` must contain only 0/1 .*index 2 is 0.5"),
        ([1, np.nan], [0.5, 0.5], ValueError, r"`y_true` must contain only 0/1 .*index 1 is nan"),
        (["1", "yes"], [0.5, 0.5], ValueError, r"`y_true` must contain only 0/1 .*index 0 is '1'"),
        ([[1, 0]], [[0.5, 0.5]], ValueError, r"`y_true` must be 1-D, got an array of shape \(1, 2\)"),
        ([1, 0], ["a", "b"], TypeError, r"must be numeric"),
    ],
)
def test_input_validation(name: str, y, s, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ALL_METRICS[name](y, s)


@pytest.mark.parametrize("name", sorted(PROB_METRICS))
@pytest.mark.parametrize(("bad", "index"), [(1.5, 1), (-0.1, 1)])
def test_probabilities_outside_unit_interval_raise(name: str, bad: float, index: int) -> None:
    with pytest.raises(ValueError, match=rf"`y_prob` must be probabilities in \[0, 1\]; index {index} is {bad}"):
        PROB_METRICS[name]([1, 0, 1], [0.2, bad, 0.9])


def test_raw_scores_outside_unit_interval_are_fine_for_ranking() -> None:
    assert metrics.auroc([1, 0, 1], [5.0, -3.0, 100.0]) == 1.0
    assert metrics.aurc([1, 0, 1], [5.0, -3.0, 100.0]) == pytest.approx((0 + 0 + 1 / 3) / 3)


@pytest.mark.parametrize(
    "call",
    [
        lambda **kw: metrics.bin_probabilities([0.2, 0.9], **kw),
        lambda **kw: metrics.expected_calibration_error([1, 0], [0.2, 0.9], **kw),
        lambda **kw: metrics.reliability_table([1, 0], [0.2, 0.9], **kw),
    ],
    ids=["bin_probabilities", "ece", "reliability_table"],
)
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_bins": 0}, ValueError, r"`n_bins` must be an int >= 1, got 0"),
        ({"n_bins": -3}, ValueError, r"`n_bins` must be an int >= 1, got -3"),
        ({"n_bins": 2.5}, TypeError, r"`n_bins` must be an int >= 1, got 2.5"),
        ({"n_bins": True}, TypeError, r"`n_bins` must be an int >= 1, got True"),
        ({"strategy": "equal"}, ValueError, r"`strategy` must be one of 'uniform', 'quantile'; got 'equal'"),
    ],
)
def test_binning_option_validation(call, kwargs: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call(**kwargs)


def test_options_accept_numpy_numbers() -> None:
    y, p = [1, 0, 1, 1], [0.2, 0.9, 0.55, 0.7]
    ece = metrics.expected_calibration_error
    assert ece(y, p, n_bins=np.int64(5)) == ece(y, p, n_bins=5)
    assert metrics.reliability_table(y, p, n_bins=np.int32(4), confidence=np.float32(0.9)).shape == (4, 9)
    assert metrics.risk_at_coverage(y, p, coverage=np.float64(0.5)) == metrics.risk_at_coverage(y, p, coverage=0.5)
    assert metrics.tpr_at_fpr(y, p, fpr=np.float32(0.0)) == metrics.tpr_at_fpr(y, p, fpr=0)
    assert metrics.bootstrap_ci(metrics.auroc, y, p, n_boot=np.int64(20)) == \
        metrics.bootstrap_ci(metrics.auroc, y, p, n_boot=20)


def test_bin_probabilities_validates_probabilities() -> None:
    with pytest.raises(ValueError, match=r"`y_prob` is empty"):
        metrics.bin_probabilities([])
    with pytest.raises(ValueError, match=r"`y_prob` must be probabilities in \[0, 1\]; index 0 is 1.2"):
        metrics.bin_probabilities([1.2])


@pytest.mark.parametrize("coverage", [0, 0.0, -0.5, 1.5, float("nan")])
def test_risk_at_coverage_rejects_bad_coverage(coverage: float) -> None:
    with pytest.raises(ValueError, match=r"`coverage` must be"):
        metrics.risk_at_coverage([1, 0], [0.2, 0.9], coverage=coverage)


@pytest.mark.parametrize("fpr", [-0.1, 1.1, float("inf")])
def test_tpr_at_fpr_rejects_bad_fpr(fpr: float) -> None:
    with pytest.raises(ValueError, match=r"`fpr` must be"):
        metrics.tpr_at_fpr([1, 0], [0.2, 0.9], fpr=fpr)


def test_reliability_table_rejects_bad_confidence() -> None:
    with pytest.raises(ValueError, match=r"`confidence` must be a finite real number in \(0, 1\), got 1"):
        metrics.reliability_table([1, 0], [0.2, 0.9], confidence=1)


# ---------------------------------------------------------------------------------------------
# Bootstrap
# ---------------------------------------------------------------------------------------------


def test_bootstrap_contains_estimate_and_is_reproducible() -> None:
    y, p = make_data(0, 150)
    est, low, high = metrics.bootstrap_ci(metrics.auroc, y, p, n_boot=300, seed=7)
    assert est == pytest.approx(roc_auc_score(y, p))
    assert low < est < high
    assert metrics.bootstrap_ci(metrics.auroc, y, p, n_boot=300, seed=7) == (est, low, high)
    assert metrics.bootstrap_ci(metrics.auroc, y, p, n_boot=300, seed=8) != (est, low, high)


def test_bootstrap_width_matches_standard_error_of_a_mean() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(0.0, 1.0, 400)
    y = np.ones(400, dtype=int)
    est, low, high = metrics.bootstrap_ci(lambda _y, s: float(np.mean(s)), y, x, n_boot=2000, seed=0)
    se = x.std(ddof=1) / math.sqrt(400)
    assert est == pytest.approx(x.mean())
    assert high - low == pytest.approx(2 * 1.959964 * se, rel=0.1)
    _, low90, high90 = metrics.bootstrap_ci(
        lambda _y, s: float(np.mean(s)), y, x, n_boot=2000, confidence=0.9, seed=0
    )
    assert low < low90 < high90 < high


def test_bootstrap_skips_undefined_resamples_silently() -> None:
    # One wrong answer in ten: about 35% of resamples miss it and AUROC is undefined there.
    y = np.array([1] * 9 + [0])
    s = np.linspace(0.1, 1.0, 10)[::-1]
    with no_warnings():
        est, low, high = metrics.bootstrap_ci(metrics.auroc, y, s, n_boot=400, seed=1)
    assert est == 1.0 and low == 1.0 and high == 1.0
    y2 = np.array([1, 0] * 5)
    s2 = np.array([0.9, 0.1, 0.4, 0.6, 0.8, 0.3, 0.5, 0.5, 0.7, 0.2])
    with no_warnings():
        est2, low2, high2 = metrics.bootstrap_ci(metrics.auroc, y2, s2, n_boot=400, seed=1)
    assert not math.isnan(low2) and low2 <= est2 <= high2


def test_bootstrap_mostly_undefined_warns_and_returns_nan_bounds() -> None:
    with pytest.warns(metrics.UndefinedMetricWarning) as record:
        est, low, high = metrics.bootstrap_ci(metrics.auroc, [1, 1, 1, 1], [0.1, 0.2, 0.3, 0.4], n_boot=50)
    assert any("bootstrap resamples" in str(w.message) for w in record)
    assert math.isnan(est) and math.isnan(low) and math.isnan(high)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_boot": 0}, ValueError, r"`n_boot` must be an int >= 1, got 0"),
        ({"n_boot": 10.0}, TypeError, r"`n_boot` must be an int >= 1, got 10.0"),
        ({"confidence": 1.0}, ValueError, r"`confidence` must be a finite real number in \(0, 1\), got 1.0"),
    ],
)
def test_bootstrap_option_validation(kwargs: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        metrics.bootstrap_ci(metrics.auroc, [1, 0], [0.2, 0.9], **kwargs)


def test_bootstrap_rejects_bad_metric() -> None:
    with pytest.raises(TypeError, match=r"`metric` must be callable"):
        metrics.bootstrap_ci("auroc", [1, 0], [0.2, 0.9])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"`metric` must return a real number"):
        metrics.bootstrap_ci(lambda y, s: "high", [1, 0], [0.2, 0.9])  # type: ignore[arg-type, return-value]


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("sort_subset", [True, False])
def test_rank_groups_equal_the_single_metrics_on_every_subset(ties, sort_subset):
    rng = np.random.default_rng(7 + 4 * sort_subset)
    n = 600
    score = rng.integers(0, 12, n).astype(float) if ties else rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-score / 3))).astype(int)
    groups = metrics.RankGroups(score)
    single = {name: getattr(metrics, name) for name in ("auroc", "auprc", "aurc", "prr")}
    for _ in range(15):
        subset = rng.permutation(n)[: rng.integers(10, n)]  # indices in any order, or sorted
        subset = np.sort(subset) if sort_subset else subset
        got = groups.ranking_metrics(y[subset], subset)
        for name, metric in single.items():
            assert got[name] == pytest.approx(metric(y[subset], score[subset]), abs=1e-12), name
    whole = groups.ranking_metrics(y)
    for name, metric in single.items():
        assert whole[name] == pytest.approx(metric(y, score), abs=1e-12), name


@pytest.mark.parametrize("n", [1, 2, 7, 500, 4099])
@pytest.mark.parametrize("rate", [0.0, 0.03, 0.5, 0.97, 1.0])
def test_rankings_of_distinct_scores_equal_the_grouped_count_number_for_number(n, rate, monkeypatch):
    """The protocol's path for distinct scores (groups of one) gives the very numbers of the general group count (its
    numpy form; the compiled loop sums in another order, see tests/trace_core/evaluation/test_compiled_kernels.py)."""
    import trace_core.metrics.kernels as kernels
    from trace_core.metrics.kernels import ranking_of_groups as _ranking_from_groups

    monkeypatch.setattr(kernels, "USE_COMPILED", False)

    rng = np.random.default_rng(n)
    pos = (rng.random(n) < rate).astype(np.float64)
    both = 0 < pos.sum() < n
    fast = _ranking_from_groups(np.ones(n), pos, both_classes=both, singletons=True)
    general = _ranking_from_groups(np.ones(n), pos, both_classes=both, singletons=False)
    assert fast.keys() == general.keys()
    for metric, value in fast.items():
        assert value == general[metric] or (np.isnan(value) and np.isnan(general[metric])), metric
    if n > 1:  # and the single metrics, computed independently
        score = np.arange(n, dtype=float)
        assert fast["aurc"] == pytest.approx(metrics.aurc(pos.astype(int), score), abs=1e-12)
        if both:
            assert fast["auroc"] == pytest.approx(metrics.auroc(pos.astype(int), score), abs=1e-12)
            assert fast["auprc"] == pytest.approx(metrics.auprc(pos.astype(int), score), abs=1e-12)


def test_rank_groups_one_class_subset_is_undefined_except_aurc():
    groups = metrics.RankGroups([0.1, 0.4, 0.3, 0.9])
    with pytest.warns(metrics.UndefinedMetricWarning):
        got = groups.ranking_metrics([1, 1], [0, 3])
    assert np.isnan(got["auroc"]) and np.isnan(got["auprc"]) and got["aurc"] == 0.0
    with pytest.raises(ValueError, match="2 answers"):
        groups.ranking_metrics([1, 0, 1], [0, 3])


@pytest.mark.parametrize("n_bins", [1, 2, 10, 16, 17, 40])
@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_bin_ids_equal_a_left_searchsorted_on_edges_and_ties(n_bins, strategy):
    """Bins are counted edge by edge for a few edges; a probability on an edge goes to the lower bin, as
    ``searchsorted(edges[1:-1], p, side="left")`` (and scikit-learn's calibration_curve) put it."""
    rng = np.random.default_rng(n_bins)
    p = np.concatenate([rng.random(500), np.linspace(0.0, 1.0, 41), np.repeat([0.0, 0.3, 0.5, 1.0], 7)])
    edges, ids = metrics.bin_probabilities(p, n_bins=n_bins, strategy=strategy)
    np.testing.assert_array_equal(ids, np.searchsorted(edges[1:-1], p, side="left"))
    assert ids.dtype == np.int64


@pytest.mark.parametrize("n_bins", [1, 10, 15, 20])
def test_ece_of_probabilities_in_monotone_order_equals_ece(n_bins):
    """The protocol's ECE of a part in score order (bins as runs, found by binary search) equals the ECE of the
    same probabilities: on the edges themselves, ascending, descending, and any other order (the fallback)."""
    from trace_core.metrics.kernels import ece_kernel as _ece
    from trace_core.metrics.kernels import ece_of_ascending as _ece_sorted
    from trace_core.metrics.kernels import uniform_edges as _uniform_edges

    rng = np.random.default_rng(n_bins)
    edges = _uniform_edges(n_bins)
    p = np.sort(np.concatenate([rng.random(500), np.repeat(edges, 7), rng.choice(edges, 50) + 1e-17]).clip(0, 1))
    y = (rng.random(p.shape[0]) < p).astype(np.int64)
    expected = _ece(y, p, n_bins)
    assert _ece_sorted(y, p, n_bins) == pytest.approx(expected, rel=0, abs=1e-15)
    assert _ece_sorted(y[::-1].copy(), p[::-1].copy(), n_bins) == pytest.approx(expected, rel=0, abs=1e-15)
    shuffled = rng.permutation(p.shape[0])
    assert _ece_sorted(y[shuffled], p[shuffled], n_bins) == _ece(y[shuffled], p[shuffled], n_bins)
    one_bin = np.full(9, 0.35)
    assert _ece_sorted(y[:9], one_bin, n_bins) == pytest.approx(_ece(y[:9], one_bin, n_bins), rel=0, abs=1e-15)
    assert _ece_sorted(y[:1], p[:1], n_bins) == _ece(y[:1], p[:1], n_bins)


@pytest.mark.parametrize("name", ["auroc", "auprc", "aurc", "prr", "brier_score", "expected_calibration_error"])
def test_validate_false_gives_the_checked_value_and_skips_the_checks(name):
    """Each public metric has one kernel: with validate=False on checked arrays it returns the very same number; the
    checks are what it skips (a label 2 is refused only when validating)."""
    metric = getattr(metrics, name)
    rng = np.random.default_rng(7)
    y = (rng.random(500) < 0.3).astype(np.int64)
    p = np.round(rng.random(500), 2)  # ties
    assert metric(y, p, validate=False) == metric(list(y), list(p))
    bad = y.copy()
    bad[0] = 2
    with pytest.raises(ValueError, match="y_true"):
        metric(bad, p)
    metric(bad, p, validate=False)  # no check: the caller promised 0/1 labels


def test_the_bootstrap_skips_the_checks_on_resamples_only(monkeypatch):
    """bootstrap_ci checks the data once (the point estimate) and calls this package's metrics with validate=False on
    the resamples; a metric without that keyword is called as it is."""
    calls = []

    def counting(y_true, score, *, validate=True):
        calls.append(validate)
        return metrics.auroc(y_true, score, validate=validate)

    rng = np.random.default_rng(1)
    y, s = (rng.random(200) < 0.5).astype(int), rng.random(200)
    est, low, high = metrics.bootstrap_ci(counting, y, s, n_boot=50)
    assert calls[0] is True and set(calls[1:]) == {False} and len(calls) == 51
    assert (est, low, high) == metrics.bootstrap_ci(metrics.auroc, y, s, n_boot=50)
    assert metrics.bootstrap_ci(lambda a, b: metrics.auroc(a, b), y, s, n_boot=50) == (est, low, high)
