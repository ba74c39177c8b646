"""trace_core.methods.registry: typed metric specs and method descriptors, the one description of what is compared."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import trace_core
from trace_core.methods.baselines import BASELINES
from trace_core.methods.features import FEATURE_SETS
from trace_core.methods.fitted_baselines import FITTED_BASELINES
from trace_core.methods.registry import METHODS, METRICS, REFERENCE, Method, MetricSpec, get_method, method_names


def test_metric_specs_say_direction_and_input():
    assert list(METRICS) == ["brier", "ece", "auroc", "auprc", "aurc", "prr"]
    assert {m.name for m in METRICS.values() if m.higher_is_better} == {"auroc", "auprc", "prr"}
    assert {m.name for m in METRICS.values() if m.on == "probability"} == {"brier", "ece"}
    assert {m.on for m in METRICS.values()} == {"score", "probability"}
    assert all(name == spec.name for name, spec in METRICS.items())


def test_metric_spec_title_arrow_and_best():
    auroc, ece = METRICS["auroc"], METRICS["ece"]
    assert (auroc.label, auroc.arrow, auroc.title) == ("AUROC", "↑", "AUROC ↑")
    assert (ece.label, ece.arrow, ece.title) == ("ECE", "↓", "ECE ↓")
    values = pd.Series([0.7, 0.9, 0.8])
    assert auroc.best(values) == 0.9 and ece.best(values) == 0.7
    assert auroc.best(np.array([0.1, 0.3])) == 0.3


def test_specs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        METRICS["auroc"].higher_is_better = False  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        METHODS["TRACE"].family = "x"  # type: ignore[misc]


def test_methods_are_trace_plus_trace_every_baseline_and_the_reference_in_order():
    names = method_names()
    assert names[:2] == ["TRACE+", "TRACE"] and names[2:-1] == [*BASELINES, *FITTED_BASELINES] and len(names) == 26
    assert names[-1] == REFERENCE == "Likelihood LR (reference)"
    extended = method_names(extended=True)
    variants = [f"TRACE+ ({fs})" for fs in FEATURE_SETS if fs not in ("paper", "surprisal")]
    assert extended == ["TRACE+", *variants, "TRACE+ (surprisal-only)", "TRACE", "TRACE (surprisal-only)",
                        *BASELINES, *FITTED_BASELINES, REFERENCE]
    assert list(METHODS) == extended


def test_entropy_needs_and_surprisal_only_variants():
    from trace_core.methods.features import needs_entropy

    assert METHODS["TRACE"].surprisal_only == "TRACE (surprisal-only)"
    assert METHODS["TRACE+"].surprisal_only == "TRACE+ (surprisal-only)"
    assert METHODS["TRACE+ (surprisal-only)"].feature_set == "surprisal"
    for m in METHODS.values():
        if m.kind == "trace_plus":
            assert m.needs_entropy == needs_entropy(m.feature_set)
        if m.baseline is not None:
            assert m.needs_entropy == m.baseline.needs_entropy
    assert not METHODS["TRACE (surprisal-only)"].needs_entropy and METHODS["TRACE"].needs_entropy
    assert {m.name for m in METHODS.values() if m.kind == "baseline" and m.needs_entropy} == {
        "Mean Entropy", "Max Entropy", "First-k Entropy", "Last-k Entropy", "Windowed Entropy", "Entropy Variance",
        "Entropy Slope"}
    reference = METHODS[REFERENCE]
    assert (reference.kind, reference.family, reference.needs_entropy, reference.is_trace, reference.is_fitted) == (
        "reference", "reference", False, False, True)


def test_method_descriptors_carry_kind_family_needs_and_feature_set():
    plus = get_method("TRACE+")
    assert (plus.kind, plus.family, plus.feature_set, plus.extended, plus.is_trace) == (
        "trace_plus", "trace", "paper", False, True)
    variant = get_method("TRACE+ (extended+likelihood)")
    assert (variant.kind, variant.feature_set, variant.extended) == ("trace_plus", "extended+likelihood", True)
    trace = get_method("TRACE")
    assert (trace.kind, trace.feature_set, trace.is_trace) == ("trace", None, True)
    for name, baseline in BASELINES.items():
        method = get_method(name)
        assert (method.kind, method.family, method.needs, method.is_trace) == (
            "baseline", baseline.family, baseline.needs, False)
        assert method.baseline is baseline
    assert {m.feature_set for m in METHODS.values() if m.kind == "trace_plus"} == set(FEATURE_SETS)


def test_get_method_refuses_unknown_names_listing_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown method 'GPT-judge'; known: TRACE\+, TRACE\+ \(extended\)"):
        get_method("GPT-judge")
    with pytest.raises(ValueError, match=r"unknown method \['TRACE'\]"):
        get_method(["TRACE"])  # unhashable: a clear error, not a crash
    with pytest.raises(ValueError) as info:
        get_method("x" * 10_000)
    assert "characters in all" in str(info.value) and len(str(info.value)) < 1200


def test_the_package_exports_the_registries():
    for name in ("METRICS", "METHODS", "Method", "MetricSpec", "get_method", "method_names"):
        assert name in trace_core.__all__ and hasattr(trace_core, name)
    assert trace_core.METRICS is METRICS and trace_core.METHODS is METHODS
    assert trace_core.Method is Method and trace_core.MetricSpec is MetricSpec
    from trace_core.evaluation.run import method_names as from_evaluate

    assert from_evaluate is method_names


def test_no_code_slices_method_names():
    """Method facts come from the registry, never from the shape of a name (``"TRACE+ (" ... ")"``)."""
    from pathlib import Path

    root = Path(trace_core.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if 'len("TRACE+ (")' in p.read_text(encoding="utf-8")
                 or 'startswith("TRACE' in p.read_text(encoding="utf-8")]
    assert offenders == []
