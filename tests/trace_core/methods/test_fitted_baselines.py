"""The 2025–26 single-pass baselines against hand computations: EPR and WEPR (arXiv 2509.04492), CES (arXiv
2605.28264, our reading of its combination), the uncertainty trace profile (arXiv 2605.07776); and how the protocol
runs them (skipped with a reason without their inputs, fitted per calibration part, in the best-baseline choice)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import make_trace

from trace_core import Trace
from trace_core.evaluation.run import EvaluationConfig, evaluate, evaluate_arrays
from trace_core.methods.baselines import BASELINES, compute_baselines
from trace_core.methods.fitted_baselines import (
    FITTED_BASELINES,
    TopK,
    ces_confidence,
    entropy_contributions,
    epr_confidence,
    stack_top_logprobs,
    trace_profile_features,
    wepr_features,
)
from trace_core.methods.registry import METHODS, method_names
from trace_core.traces.ragged import Ragged


def _trace(top_probs, surprisal=None, entropy=None) -> Trace:
    """A trace whose steps store the alternatives ``top_probs`` (rows, any order)."""
    top = np.log(np.asarray(top_probs, dtype=np.float64))
    n, k = top.shape
    s = np.asarray(surprisal if surprisal is not None else -top.max(axis=1), dtype=np.float64)
    h = np.asarray(entropy if entropy is not None else s + 0.5, dtype=np.float64)
    tokens = tuple(f" w{i}" for i in range(n))
    return Trace(prompt="q", answer="".join(tokens), token_ids=np.arange(n), tokens=tokens, surprisal=s, entropy=h,
                 top_ids=np.arange(n * k).reshape(n, k), top_logprobs=top)


def test_entropy_contributions_and_epr_by_hand():
    a = _trace([[0.5, 0.25], [0.05, 0.9]])  # the second step unsorted: ranks are by probability
    b = _trace([[0.7, 0.2, 0.1]])  # three alternatives: EPR reads the 2 every answer has
    top, reason = stack_top_logprobs([a, b])
    assert reason == "" and top.k == 2
    np.testing.assert_allclose(top.logprobs, np.log([[0.5, 0.25], [0.9, 0.05], [0.7, 0.2]]))
    step1 = 0.5 * math.log(2) + 0.25 * math.log(4)
    step2 = -0.9 * math.log(0.9) - 0.05 * math.log(0.05)
    expected = [-(step1 + step2) / 2, -(-0.7 * math.log(0.7) - 0.2 * math.log(0.2))]
    s = Ragged.from_arrays([a.surprisal, b.surprisal])
    np.testing.assert_allclose(epr_confidence(s, top), expected, rtol=1e-12)
    assert entropy_contributions(np.array([[0.0, -np.inf]])).tolist() == [[0.0, 0.0]]  # q = 1 and q = 0 add nothing
    scores = compute_baselines([a, b], names=["EPR"]).scores["EPR"].to_numpy()
    np.testing.assert_allclose(scores, expected, rtol=1e-12)


def test_top_k_baselines_are_skipped_with_a_reason_without_alternatives():
    bare = make_trace([0.1, 0.2], k=1)
    top, reason = stack_top_logprobs([bare, _trace([[0.5, 0.3]])])
    assert top is None and "1 of 2 answers store fewer" in reason
    out = compute_baselines([bare], names=["EPR", "SeqLogP"])
    assert list(out.scores.columns) == ["SeqLogP"] and "top-k log-probabilities" in out.skipped["EPR"]


def test_wepr_features_by_hand():
    a = _trace([[0.5, 0.25], [0.9, 0.05], [0.6, 0.3]])
    top, _ = stack_top_logprobs([a])
    c = -np.array([[0.5, 0.25], [0.9, 0.05], [0.6, 0.3]]) * np.log([[0.5, 0.25], [0.9, 0.05], [0.6, 0.3]])
    F = wepr_features(Ragged.from_arrays([a.surprisal]), top)
    np.testing.assert_allclose(F, [[c[:, 0].mean(), c[:, 1].mean(), c[:, 0].max(), c[:, 1].max()]], rtol=1e-12)


def _profile_by_hand(x):
    x = np.asarray(x, dtype=np.float64)
    T = len(x)
    thirds = [x[[t for t in range(T) if (3 * t) // T == j]] for j in range(3)]
    means = [part.mean() if part.size else x.mean() for part in thirds]
    if T < 2:
        return [*means, 0.0, 0.0]
    u = np.arange(T) / (T - 1)
    slope = np.polyfit(u, x, 1)[0]
    r2 = 0.0 if T < 3 or np.ptp(x) == 0 else np.corrcoef(u, x)[0, 1] ** 2
    return [*means, slope, r2]


@pytest.mark.parametrize("length", [1, 2, 3, 4, 7, 10])
def test_trace_profile_features_by_hand(length):
    rng = np.random.default_rng(length)
    s, h = rng.gamma(1.0, 1.0, length), rng.gamma(2.0, 1.0, length)
    F = trace_profile_features(Ragged.from_arrays([s, [0.3, 0.1]]), Ragged.from_arrays([h, [1.0, 2.0]]))
    p = np.exp(-s)
    np.testing.assert_allclose(F[0], _profile_by_hand(p * (1 - p)) + _profile_by_hand(h), rtol=1e-9, atol=1e-12)
    without = trace_profile_features(Ragged.from_arrays([s]), None)
    np.testing.assert_allclose(without[0], F[0, :5])
    flat = trace_profile_features(Ragged.from_arrays([np.full(5, 0.2)]), None)
    assert flat[0, 3] == pytest.approx(0.0, abs=1e-15) and flat[0, 4] == 0.0  # a constant series has no linearity


def test_ces_reference_is_the_correct_calibration_answers():
    F = np.array([[0.1, 0.5], [0.2, 1.0], [0.3, 2.0], [0.4, 3.0], [5.0, 9.0], [6.0, 9.5]])
    y = np.array([1, 1, 1, 1, 0, 0])
    model = FITTED_BASELINES["CES"].fit(F, y)
    np.testing.assert_allclose(model.score(F), ces_confidence(F, F[:4]))
    assert model.score(np.array([[0.25, 2.5]])).tolist() == [0.375]  # F_mean 2/4, F_max 3/4
    p = 1 / (1 + np.exp(-model.log_odds(model.score(F))))
    assert p[:3].min() > p[4:].max() and p[3] == p[4]  # Platt keeps CES's order; the top reference ties the wrong
    with pytest.raises(ValueError, match="correct answers"):
        FITTED_BASELINES["CES"].fit(F[4:], y[4:])


def _labelled(n=240, seed=0):
    """Answers whose correctness follows their alternatives' entropy contributions (what EPR and WEPR read)."""
    rng = np.random.default_rng(seed)
    traces, labels = [], []
    for _ in range(n):
        T = int(rng.integers(2, 9))
        right = rng.random() < 0.5
        top1 = rng.uniform(0.85, 0.99, T) if right else rng.uniform(0.35, 0.7, T)
        rest = (1 - top1)[:, None] * np.array([0.6, 0.3])
        traces.append(_trace(np.column_stack([top1, rest])))
        labels.append(int(right))
    return traces, np.array(labels)


def test_protocol_runs_the_new_baselines_and_can_choose_them():
    traces, y = _labelled()
    methods = ["TRACE+", "MeanProb", "EPR", "WEPR", "CES", "Trace Profile"]
    result = evaluate(traces, y, config=EvaluationConfig(n_splits=4), methods=methods)
    s = result.summary
    auroc = s[s.metric == "auroc"].set_index("method")["mean"]
    assert auroc["EPR"] > 0.9 and auroc["WEPR"] > 0.9  # the data follow the entropy contributions
    held = result.held_out
    assert {"WEPR", "CES"} <= set(held.methods)
    assert all(set(held.methods[m].probabilities) == {"logistic"} for m in ("WEPR", "CES"))
    cal = result.calibration_values
    assert {"EPR", "WEPR", "CES", "Trace Profile"} <= set(cal["method"])  # all four in the best-baseline choice
    chosen = result.paired.per_split
    assert set(chosen[chosen.versus == "best baseline"]["chosen"]) & {"EPR", "WEPR", "CES", "Trace Profile"}


def test_protocol_skips_the_new_baselines_without_their_inputs():
    traces, y = _labelled(120)
    s = Ragged.from_arrays([t.surprisal for t in traces])
    h = Ragged.from_arrays([t.entropy for t in traces])
    methods = ["SeqLogP", "EPR", "WEPR", "CES", "Trace Profile"]
    arrays = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=2), methods=methods)
    assert "top-k log-probabilities" in arrays.skipped["EPR"] and "top-k" in arrays.skipped["WEPR"]
    assert {"CES", "Trace Profile"} <= set(arrays.methods)
    no_entropy = evaluate_arrays(s, None, y, config=EvaluationConfig(n_splits=2), methods=methods)
    assert "CES" in no_entropy.skipped and "Trace Profile" in no_entropy.methods


def test_registry_counts_and_describes_every_baseline():
    assert len(BASELINES) == 20 and len(FITTED_BASELINES) == 3
    baselines = [m for m in method_names() if METHODS[m].is_baseline]
    assert len(baselines) == 23
    for name in FITTED_BASELINES:
        spec = METHODS[name]
        assert spec.kind == "fitted_baseline" and spec.is_fitted and "arXiv" in spec.description
    assert METHODS["EPR"].needs == "top_k" and METHODS["WEPR"].needs == "top_k"
    assert TopK(np.zeros((3, 4))).k == 4


def test_fitted_baselines_join_the_choice_with_out_of_fold_values_not_flattering_in_sample_ones():
    rng = np.random.default_rng(4)
    traces = [make_trace(rng.gamma(1.0, 1.0, int(rng.integers(3, 12))), None) for _ in range(200)]
    y = rng.integers(0, 2, 200)  # labels unrelated to anything: no method has skill
    result = evaluate(traces, y, config=EvaluationConfig(n_splits=10, stratified=True),
                      methods=["TRACE+", "SeqLogP", "Trace Profile"])
    cal = result.calibration_values
    on_cal = cal[(cal.method == "Trace Profile") & (cal.metric == "auroc")]["value"]
    assert len(on_cal) == 10 and on_cal.mean() < 0.56  # in-sample, 10 features on 70 answers read about 0.65
