from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import make_trace, random_traces

from trace_core import FEATURE_SETS, feature_matrix, feature_names, trace_risk
from trace_core.methods.features import feature_matrix_from_arrays, needs_entropy


def naive_features(trace):
    """Every feature computed directly from its definition for one trace."""
    s, h = trace.surprisal, trace.entropy
    T = len(s)

    def decayed(x, lam):
        w = lam / (lam + np.arange(T))
        return float(w @ x / w.sum())

    def window_max(x):
        return float(x.mean()) if T < 4 else max(float(x[i:i + 4].mean()) for i in range(T - 3))

    p = np.exp(-s)
    out = {
        "first3_entropy_conf": math.exp(-h[:3].mean()),
        "mean_entropy_conf": math.exp(-h.mean()),
        "log_length": math.log(T),
        "entropy_slope": 0.0 if T < 2 else float(np.polyfit(np.arange(T), h, 1)[0]),
        "decayed_entropy_conf_l2": math.exp(-decayed(h, 2)),
        "decayed_entropy_conf_l4": math.exp(-decayed(h, 4)),
        "decayed_surprisal_conf_l2": math.exp(-decayed(s, 2)),
        "decayed_surprisal_conf_l4": math.exp(-decayed(s, 4)),
        "window_entropy_max": window_max(h),
        "window_surprisal_max": window_max(s),
        "entropy_spike_gap": window_max(h) - h.mean(),
        "surprisal_spike_gap": window_max(s) - s.mean(),
        "trace_risk": trace_risk(trace),
        "logit_min_token_prob": math.log(p.min() / (1 - p.min())),
        "log_geomean_token_prob": float(np.log(p).mean()),
        "low_prob_rate": float((p < 0.1).mean()),
        "first3_surprisal_conf": math.exp(-s[:3].mean()),
        "mean_surprisal_conf": math.exp(-s.mean()),
        "surprisal_slope": 0.0 if T < 2 else float(np.polyfit(np.arange(T), s, 1)[0]),
    }
    for name in [n for n in out if n.endswith("_conf") or "_conf_l" in n]:
        out[f"log_{name}"] = math.log(out[name])
    return out


@pytest.mark.parametrize("feature_set", sorted(FEATURE_SETS))
def test_feature_matrix_equals_naive_definitions(feature_set):
    traces = random_traces(60, seed=5, max_len=12)
    F = feature_matrix(traces, feature_set=feature_set)
    names = feature_names(feature_set)
    assert F.shape == (60, len(names))
    expected = np.array([[naive_features(t)[n] for n in names] for t in traces])
    np.testing.assert_allclose(F, expected, rtol=1e-9, atol=1e-12)


def test_paper_feature_set_is_the_eight_features_in_order():
    assert feature_names("paper") == (
        "first3_entropy_conf", "mean_entropy_conf", "log_length", "entropy_slope", "decayed_entropy_conf_l2",
        "decayed_entropy_conf_l4", "decayed_surprisal_conf_l2", "decayed_surprisal_conf_l4")
    assert not set(feature_names("paper")) & {"logit_min_token_prob", "log_geomean_token_prob", "low_prob_rate"}


def test_single_token_trace_has_zero_slope():
    F = feature_matrix([make_trace([0.3], [1.0])])
    assert F[0, feature_names().index("entropy_slope")] == 0.0
    assert F[0, feature_names().index("log_length")] == 0.0


def test_errors():
    with pytest.raises(ValueError, match="trace 1 is empty"):
        feature_matrix([make_trace([1.0]), make_trace([])])
    with pytest.raises(ValueError, match="`feature_set` must be one of"):
        feature_names("everything")


def test_no_traces_gives_empty_matrix():
    assert feature_matrix([]).shape == (0, 8)


def test_feature_names_are_unique_within_every_set_and_needs_entropy_is_right():
    for name, names in FEATURE_SETS.items():
        assert len(set(names)) == len(names), name
        assert needs_entropy(name) == any("entropy" in n or n == "trace_risk" for n in names)
    assert [n for n in FEATURE_SETS if not needs_entropy(n)] == ["surprisal"]


def test_surprisal_set_reads_no_entropy():
    traces = random_traces(20, seed=2, max_len=9)
    from trace_core.methods.risk import stack_traces

    s, h = stack_traces(traces)
    np.testing.assert_array_equal(feature_matrix_from_arrays(s, feature_set="surprisal"),
                                  feature_matrix_from_arrays(s, h, feature_set="surprisal"))
    with pytest.raises(ValueError, match="feature set 'paper' needs entropy.*feature_set='surprisal'"):
        feature_matrix_from_arrays(s, None, feature_set="paper")
