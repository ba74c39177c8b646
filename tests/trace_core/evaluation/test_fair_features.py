"""Well-conditioned features (issue: fair features): the supervised likelihood reference and the non-paper TRACE+
sets read probabilities on the scale the scalar baselines are calibrated on, so sure answers are not crowded against
p = 1. The data: one-token answers (a multiple-choice letter) from an overconfident model, where the chosen letter's
logit, not its probability, carries the signal."""

from __future__ import annotations

import numpy as np

from trace_core.evaluation.inputs import reference_features
from trace_core.evaluation.protocol import fit_reference as _fit_reference
from trace_core.evaluation.run import EvaluationConfig, evaluate_arrays
from trace_core.methods.features import FEATURE_SETS, feature_matrix_from_arrays, feature_names, logit_of_surprisal
from trace_core.methods.logistic import sigmoid, transform_scores
from trace_core.methods.registry import REFERENCE
from trace_core.traces.ragged import Ragged


def _letters(n: int = 3000, seed: int = 0):
    """Letters chosen at logit z ~ N(7, 3) (p mostly 0.99 to 1 - 1e-7), right with probability sigmoid(z / 2 - 0.5):
    an overconfident model, so answers at p = 0.999 and p = 0.9999999 differ in how often they are right."""
    rng = np.random.default_rng(seed)
    z = rng.normal(7.0, 3.0, n)
    p = sigmoid(z)
    truth = sigmoid(0.5 * z - 0.5)
    y = (rng.random(n) < truth).astype(np.int64)
    s = np.logaddexp(0.0, -z)  # -log p, exact for large z
    h = -(p * np.log(p) + (1 - p) * np.log1p(-p))  # two-way entropy of the letter's step
    return Ragged.from_arrays([[v] for v in s]), Ragged.from_arrays([[v] for v in h]), y, truth


def _brier_held_out(F, y, cal):
    decision = _fit_reference(F[cal], y[cal])
    return float(np.mean((sigmoid(decision(F[~cal])) - y[~cal]) ** 2))


def test_logit_of_surprisal_is_the_logit_of_the_probability_and_stays_finite():
    s = np.array([0.0, 1e-300, 2.0 ** -53, 1e-9, 0.1, np.log(2.0), 5.0, 800.0])
    got = logit_of_surprisal(s)
    assert np.isfinite(got).all()
    assert got[0] == got[1] == got[2] == transform_scores([1.0], "logit")[0]  # the calibrators' ceiling, 36.7
    np.testing.assert_allclose(got[3:7], transform_scores(np.exp(-s[3:7]), "logit"), rtol=1e-6)
    assert got[5] == 0.0 and got[7] == -800.0
    assert np.all(np.diff(got) <= 0)  # more surprise, lower logit


def test_reference_reads_the_logit_where_the_raw_probability_saturates():
    surprisal, _, y, truth = _letters()
    cal = np.arange(len(y)) < 0.35 * len(y)
    raw = np.column_stack([np.asarray(surprisal.values), np.zeros(len(y)), np.exp(-np.asarray(surprisal.values))])
    conditioned = reference_features(surprisal)
    np.testing.assert_allclose(conditioned[:, 2], logit_of_surprisal(surprisal.values))
    oracle = float(np.mean((truth[~cal] - y[~cal]) ** 2))
    raw_brier, brier = _brier_held_out(raw, y, cal), _brier_held_out(conditioned, y, cal)
    assert raw_brier - oracle > 0.004  # p and exp(-s) = p crowd the sure letters together
    assert brier - oracle < 0.001


def test_protocol_reference_and_likelihood_sets_match_platt_on_the_logit():
    surprisal, entropy, y, _ = _letters()
    methods = ["MinProb", REFERENCE, "TRACE+ (extended+likelihood)", "TRACE+ (paper+likelihood)"]
    result = evaluate_arrays(surprisal, entropy, y, config=EvaluationConfig(n_splits=4), methods=methods)
    s = result.summary
    brier = s[(s.metric == "brier") & s.calibrator.isin(["platt", "logistic"])].set_index("method")["mean"]
    # MinProb with Platt on its logit transform is the right model here up to a constant; the fitted methods holding
    # logit(min p) come within 0.002 of it
    for method in methods[1:]:
        assert brier[method] - brier["MinProb"] < 0.002, (method, brier.to_dict())


def test_paper_sets_stay_as_published_and_the_others_use_the_conditioned_names():
    assert all(name.endswith(("_conf", "_l2", "_l4")) or name in ("log_length", "entropy_slope", "surprisal_slope")
               for fs in ("paper", "surprisal") for name in feature_names(fs))
    for fs in ("extended", "extended+likelihood"):
        assert not [n for n in FEATURE_SETS[fs] if not n.startswith(("log_", "logit_")) and "conf" in n], fs
    assert "logit_min_token_prob" in FEATURE_SETS["paper+likelihood"]
    # the log form is the published feature's log
    surprisal, entropy, _, _ = _letters(200)
    paper = feature_matrix_from_arrays(surprisal, entropy, feature_set="paper")
    extended = feature_matrix_from_arrays(surprisal, entropy, feature_set="extended")
    for i, name in enumerate(feature_names("paper")):
        j = feature_names("extended").index(name if name in ("log_length", "entropy_slope") else f"log_{name}")
        expected = np.log(paper[:, i]) if name.endswith(("_conf", "_l2", "_l4")) else paper[:, i]
        np.testing.assert_allclose(extended[:, j], expected, rtol=1e-9)  # -x is exact; log(exp(-x)) rounds near 0
