"""Evaluation on data without entropy: methods that need it are skipped with the reason, TRACE and TRACE+ run as
their surprisal-only variants under their own names, and the result says what the data held."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import random_traces

from trace_core import Trace, TraceMetadata
from trace_core.evaluation.run import EvaluationConfig, data_note, evaluate, evaluate_arrays
from trace_core.methods.registry import METHODS
from trace_core.traces.synthetic import synthetic_traces

FAST = EvaluationConfig(n_splits=3)


def _without_entropy(traces: list[Trace]) -> list[Trace]:
    return [Trace(prompt=t.prompt, answer=t.answer, token_ids=t.token_ids, tokens=t.tokens, surprisal=t.surprisal,
                  entropy=None, top_ids=np.zeros((len(t), 0)), top_logprobs=np.zeros((len(t), 0)),
                  metadata=TraceMetadata(entropy_source="absent")) for t in traces]


def test_traces_without_entropy_skip_entropy_methods_and_run_the_surprisal_only_variants():
    traces = _without_entropy(random_traces(120, seed=2, min_len=3))
    y = np.random.default_rng(1).integers(0, 2, 120)
    result = evaluate(traces, y, config=FAST, methods=["TRACE+", "TRACE", "SeqLogP", "Mean Entropy"])
    assert result.methods == ["TRACE+ (surprisal-only)", "TRACE (surprisal-only)", "SeqLogP"]
    assert result.skipped["TRACE"].startswith("needs token entropy")
    assert result.skipped["TRACE"].endswith("ran as TRACE (surprisal-only)")
    assert result.skipped["TRACE+"].endswith("ran as TRACE+ (surprisal-only)")
    assert "Mean Entropy" in result.skipped and "ran as" not in result.skipped["Mean Entropy"]
    assert result.data_note == ("120 traces: chosen-token log-probabilities only (no entropy): entropy methods "
                                "skipped")
    assert result.entropy_summary["absent"] == 120
    assert {"TRACE", "TRACE+"}.isdisjoint(result.per_split["method"])  # never under the entropy names


def test_default_methods_on_entropy_free_data_and_the_variants_by_name_on_full_data():
    s, h, y = synthetic_traces(400, kind="surprisal_spike", mean_length=40, seed=1)
    result = evaluate_arrays(s, h, y, config=FAST)
    needing = {m.name for m in METHODS.values() if m.needs_entropy and not m.extended}
    assert needing <= set(result.skipped) and not needing & set(result.methods)
    assert "Likelihood LR (reference)" in result.methods
    s, h, y = synthetic_traces(400, seed=1)
    default = evaluate_arrays(s, h, y, config=FAST)
    assert "TRACE (surprisal-only)" not in default.methods  # only on data without entropy ...
    asked = evaluate_arrays(s, h, y, config=FAST, methods=["TRACE", "TRACE (surprisal-only)"])
    assert asked.methods == ["TRACE", "TRACE (surprisal-only)"]  # ... or when asked for by name
    assert asked.data_note == "400 traces: entropy given"


def test_data_note_counts_mixed_sources():
    assert data_note({"exact": 1160, "top_k": 0, "absent": 0, "k": []}) == "1,160 traces: entropy exact"
    assert data_note({"exact": 0, "top_k": 96000, "absent": 0, "k": [10]}) == (
        "96,000 traces: top-10 entropy estimate")
    assert data_note({"exact": 600, "top_k": 0, "absent": 400, "k": []}, has_entropy=False) == (
        "1,000 traces: entropy exact (600), chosen-token log-probabilities only (no entropy) (400): entropy methods "
        "skipped")


@pytest.mark.parametrize("method", ["TRACE (surprisal-only)", "TRACE+ (surprisal-only)", "Likelihood LR (reference)"])
def test_surprisal_only_methods_do_not_need_entropy(method):
    assert METHODS[method].needs_entropy is False
