"""Ground truths the protocol must recover: surprisal-only local spikes, labels from likelihood summaries only, and a
constant score (over several seeds, with margins)."""

from __future__ import annotations

import numpy as np
import pytest

from trace_core.evaluation.run import EvaluationConfig, evaluate_arrays
from trace_core.methods.registry import REFERENCE
from trace_core.traces.synthetic import synthetic_traces

CONFIG = EvaluationConfig(n_splits=5)


def _mean(result, method, metric="auroc"):
    s = result.summary
    return float(s[(s.method == method) & (s.metric == metric)]["mean"].iloc[0])


def test_surprisal_spike_traces_look_like_saved_chain_of_thought_runs():
    s, h, y = synthetic_traces(2000, kind="surprisal_spike", mean_length=90, seed=0)
    assert h is None
    assert s.lengths.min() >= 50 and s.lengths.max() <= 130
    certain = (s.values == 0.0).mean()  # probabilities exactly 1.0
    assert 0.45 < certain < 0.65
    assert (s.values[s.offsets[:-1]] == 0.0).all()  # the first token is always certain
    assert 0.5 < y.mean() < 0.7


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_surprisal_only_trace_beats_mean_surprisal_on_local_spikes(seed):
    s, h, y = synthetic_traces(2000, kind="surprisal_spike", mean_length=90, seed=seed)
    result = evaluate_arrays(s, h, y, config=CONFIG)
    assert result.methods[:2] == ["TRACE+ (surprisal-only)", "TRACE (surprisal-only)"]
    assert _mean(result, "TRACE (surprisal-only)") > _mean(result, "Len-Norm LogP") + 0.05
    assert "ran as TRACE (surprisal-only)" in result.skipped["TRACE"]
    assert "Mean Entropy" in result.skipped and "Mean Entropy" not in result.methods
    assert result.data_note.endswith("chosen-token log-probabilities only (no entropy): entropy methods skipped")
    # The constant-score case: p_1 = 1.0 for every answer
    assert result.uninformative == {"First-Token Prob": "uninformative (constant)"}
    best = result.paired.per_split.query("versus == 'best baseline'")
    assert "First-Token Prob" not in set(best["chosen"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_supervised_likelihood_reference_ties_trace_plus_when_labels_follow_likelihood(seed):
    s, h, y = synthetic_traces(3000, kind="likelihood", seed=seed)
    result = evaluate_arrays(s, h, y, config=CONFIG, methods=["TRACE+", "Len-Norm LogP", REFERENCE])
    plus, reference = _mean(result, "TRACE+"), _mean(result, REFERENCE)
    assert abs(plus - reference) < 0.015
    assert reference > _mean(result, "Len-Norm LogP") + 0.02  # length matters: the reference uses it
    assert _mean(result, REFERENCE, "brier") <= _mean(result, "TRACE+", "brier") + 0.005
    verdict = result.verdict()  # labels from likelihood summaries: TRACE+ cannot beat the likelihood reference
    assert verdict.word(REFERENCE, "auroc") == "ties" and verdict.word(REFERENCE, "brier") in ("ties", "loses")
    assert "cannot be told apart from the supervised likelihood reference" in verdict.sentence


def test_the_new_kinds_are_seeded_and_checked():
    a = synthetic_traces(50, kind="likelihood", seed=3)
    b = synthetic_traces(50, kind="likelihood", seed=3)
    np.testing.assert_array_equal(a[0].values, b[0].values)
    np.testing.assert_array_equal(a[2], b[2])
    with pytest.raises(ValueError, match="`kind` must be one of"):
        synthetic_traces(10, kind="surprise")
