"""The protocol on synthetic traces whose ground truth is known, and its mechanics."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import random_traces

from trace_core.evaluate import EvaluationConfig, evaluate, evaluate_arrays, method_names
from trace_core.metrics import auroc
from trace_core.synthetic import synthetic_traces

FAST = EvaluationConfig(n_splits=5)


def auroc_of(result, method):
    s = result.summary
    return float(s[(s.method == method) & (s.metric == "auroc")]["mean"].iloc[0])


def test_local_spike_labels_trace_beats_mean_entropy():
    s, h, y = synthetic_traces(3000, kind="spike", seed=1)
    result = evaluate_arrays(s, h, y, config=FAST, methods=["TRACE+", "TRACE", "Mean Entropy"])
    assert auroc_of(result, "TRACE") > auroc_of(result, "Mean Entropy") + 0.02
    assert auroc_of(result, "TRACE+") > auroc_of(result, "Mean Entropy") + 0.02


def test_diffuse_labels_mean_entropy_beats_trace():
    s, h, y = synthetic_traces(3000, kind="diffuse", seed=1)
    result = evaluate_arrays(s, h, y, config=FAST, methods=["TRACE", "Mean Entropy"])
    assert auroc_of(result, "Mean Entropy") > auroc_of(result, "TRACE") + 0.05


def test_length_labels_favour_length_aware_methods():
    s, h, y = synthetic_traces(3000, kind="length", seed=2)
    result = evaluate_arrays(s, h, y, config=FAST, methods=["TRACE+", "SeqLogP", "Mean Entropy"])
    assert auroc_of(result, "SeqLogP") > auroc_of(result, "Mean Entropy") + 0.15
    assert auroc_of(result, "TRACE+") > auroc_of(result, "Mean Entropy") + 0.15


def test_result_tables_and_split_mechanics():
    traces = random_traces(200, seed=4)
    y = np.random.default_rng(0).integers(0, 2, 200)
    result = evaluate(traces, y, config=EvaluationConfig(n_splits=4, seed=3, stratified=True))
    assert set(result.summary.columns) == {"method", "family", "metric", "mean", "std", "n_splits"}
    assert (result.summary["n_splits"] == 4).all()
    assert set(result.per_split["split"]) == {0, 1, 2, 3}
    assert result.methods[:2] == ["TRACE+", "TRACE"] and len(result.methods) == 16
    assert set(result.skipped) == {"Beam-Ratio", "Beam-TailThinness", "Beam Entropy", "TokenSAR", "MARS-style"}
    # held-out split: 65% of the answers, each method's probability in [0, 1] and AUROC consistent with per_split
    held = result.held_out
    assert len(held) == 200 - 70
    assert ((held["TRACE"] >= 0) & (held["TRACE"] <= 1)).all()
    first = result.per_split[(result.per_split.split == 0) & (result.per_split.method == "TRACE")
                             & (result.per_split.metric == "auroc")]["value"].iloc[0]
    assert auroc(held["label"], held["TRACE score"]) == pytest.approx(first)
    # stratified: each split keeps the class ratio in the calibration part
    table = result.table()
    assert list(table.index[:2]) == ["TRACE+", "TRACE"] and "auroc_std" in table.columns
    markdown = result.to_markdown()
    assert markdown.count("\n") == len(table) + 1 and "± " in markdown


def test_same_seed_same_result_and_different_seed_differs():
    s, h, y = synthetic_traces(500, seed=5)
    a = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=3, seed=1), methods=["TRACE"])
    b = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=3, seed=1), methods=["TRACE"])
    c = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=3, seed=2), methods=["TRACE"])
    assert a.summary.equals(b.summary)
    assert not a.per_split["value"].equals(c.per_split["value"])


def test_isotonic_calibrator_option_changes_brier_not_auroc():
    s, h, y = synthetic_traces(800, seed=6)
    platt = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=2), methods=["TRACE"])
    iso = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=2, scalar_calibrator="isotonic"),
                          methods=["TRACE"])
    assert auroc_of(platt, "TRACE") == pytest.approx(auroc_of(iso, "TRACE"))
    pb = platt.summary.query("metric == 'brier'")["mean"].iloc[0]
    ib = iso.summary.query("metric == 'brier'")["mean"].iloc[0]
    assert pb != ib


@pytest.mark.parametrize("kwargs, match", [
    ({"n_splits": 0}, "`n_splits` must be an int >= 1"),
    ({"calibration_fraction": 1.0}, "`calibration_fraction` must be in"),
    ({"scalar_calibrator": "beta"}, "`scalar_calibrator`"),
    ({"metrics": ("accuracy",)}, "unknown metrics"),
])
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EvaluationConfig(**kwargs)


def test_input_errors():
    traces = random_traces(20)
    with pytest.raises(ValueError, match="both correct and incorrect"):
        evaluate(traces, np.ones(20))
    with pytest.raises(ValueError, match="got 3 labels for 20 answers"):
        evaluate(traces, [0, 1, 0])
    with pytest.raises(ValueError, match="unknown methods"):
        evaluate(traces, np.arange(20) % 2, methods=["GPT-judge"])


def test_tiny_unstratified_data_skips_one_class_splits_with_a_warning():
    traces = random_traces(12, seed=1)
    y = np.array([1] * 10 + [0, 0])
    with pytest.warns(UserWarning, match="splits skipped"):
        result = evaluate(traces, y, config=EvaluationConfig(n_splits=20), methods=["TRACE"])
    assert 0 < result.skipped_splits < 20
    assert (result.summary["n_splits"] == 20 - result.skipped_splits).all()
    with pytest.raises(ValueError, match="every split left one class only"):
        evaluate(traces[:8], [1] * 7 + [0], config=EvaluationConfig(n_splits=3), methods=["TRACE"])


def test_method_names():
    assert method_names()[:2] == ["TRACE+", "TRACE"] and len(method_names()) == 21
    assert "TRACE+ (extended)" in method_names(extended=True)
