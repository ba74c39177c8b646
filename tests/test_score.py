from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import make_trace, random_traces

from trace_core import TraceConfig, explain_trace, trace_confidence, trace_risk


def naive_risk(s, h):
    """TRACE risk written out directly from the formula, one trace at a time."""
    T = len(s)
    w = [2 / (2 + t) for t in range(T)]
    decay = sum(wi * hi for wi, hi in zip(w, h)) / sum(w)
    window = sum(h) / T if T < 4 else max(sum(h[i:i + 4]) / 4 for i in range(T - 3))
    length = sum(s) / T ** 0.25
    return 0.4 * decay + 0.4 * window + 0.2 * length


def test_risk_matches_formula_by_hand():
    s, h = [0.1, 0.2, 3.0, 0.1, 0.1], [0.5, 0.4, 2.0, 1.5, 0.2]
    # D_2(H): w = [1, 2/3, 1/2, 2/5, 1/3], M_4(H) = max(4.4, 4.1)/4 = 1.1, L(s) = 3.5 / 5**0.25
    w = np.array([1, 2 / 3, 1 / 2, 2 / 5, 1 / 3])
    expected = 0.4 * (w @ h) / w.sum() + 0.4 * 1.1 + 0.2 * 3.5 / 5 ** 0.25
    trace = make_trace(s, h)
    assert trace_risk(trace) == pytest.approx(expected)
    assert trace_confidence(trace) == pytest.approx(math.exp(-expected))


def test_batch_matches_naive_and_single():
    traces = random_traces(150, seed=3)
    batch = trace_risk(traces)
    assert batch.shape == (150,)
    np.testing.assert_allclose(batch, [naive_risk(t.surprisal.tolist(), t.entropy.tolist()) for t in traces],
                               rtol=1e-10)
    np.testing.assert_allclose(trace_confidence(traces), np.exp(-batch))
    assert trace_risk(traces[7]) == pytest.approx(batch[7])


def test_local_spike_raises_risk_more_than_its_share_of_the_mean():
    flat = make_trace([0.2] * 20, [0.5] * 20)
    spiked_entropy = [0.5] * 20
    spiked_entropy[12:15] = [3.0, 3.0, 3.0]
    spiked = make_trace([0.2] * 20, spiked_entropy)
    # Mean entropy moves by 0.375 nats; the window term alone moves R by 0.4 * (2.375 - 0.5).
    assert trace_risk(spiked) - trace_risk(flat) > 0.4 * 1.8


def test_explanation_decomposes_risk_and_finds_the_spike():
    h = [0.5] * 20
    h[12:15] = [3.0, 3.5, 3.0]
    s = [0.2] * 20
    s[13] = 4.0
    trace = make_trace(s, h)
    exp = explain_trace(trace)
    assert exp.risk == pytest.approx(trace_risk(trace))
    assert exp.contributions.sum() == pytest.approx(exp.risk)
    assert sum(exp.components.values()) == pytest.approx(exp.risk)
    # Windows [11, 15) and [12, 16) tie (10.0 each); the documented rule picks the first maximum, the earliest.
    assert exp.peak_window == (11, 15)
    assert 13 in exp.spikes
    assert exp.confidence == pytest.approx(math.exp(-exp.risk))


def test_explanation_of_short_trace_spreads_window_over_all_tokens():
    exp = explain_trace(make_trace([1.0, 2.0], [1.0, 3.0]))
    assert exp.peak_window == (0, 2)
    assert exp.contributions.sum() == pytest.approx(exp.risk)


def test_empty_trace_is_nan():
    empty = make_trace([], [])
    assert math.isnan(trace_risk(empty))
    assert math.isnan(explain_trace(empty).risk)


def test_config_changes_weights_and_validates():
    trace = make_trace([1.0, 2.0, 0.5, 0.1, 0.3], [2.0, 1.0, 0.5, 0.2, 0.4])
    only_length = TraceConfig(weight_decay=0, weight_window=0, weight_length=1.0, length_rho=1.0)
    assert trace_risk(trace, config=only_length) == pytest.approx(np.mean([1.0, 2.0, 0.5, 0.1, 0.3]))
    with pytest.raises(ValueError, match="`window` must be an int >= 1"):
        TraceConfig(window=0)
    with pytest.raises(ValueError, match="`weight_decay` must be a finite real number >= 0"):
        TraceConfig(weight_decay=-1)
    with pytest.raises(TypeError, match="`window` must be an int >= 1, got 2.5"):
        TraceConfig(window=2.5)
    with pytest.raises(ValueError, match="`decay_kernel` must be one of 'harmonic', 'exponential'"):
        TraceConfig(decay_kernel="gauss")
    # numpy scalars are accepted and stored as Python numbers, so the config equals the paper's
    config = TraceConfig(window=np.int64(4), weight_decay=np.float64(0.4))
    assert config == TraceConfig() and type(config.window) is int


def test_single_trace_must_be_wrapped_for_batch_helpers():
    from trace_core.score import stack_traces

    with pytest.raises(TypeError, match="wrap a single trace"):
        stack_traces(make_trace([1.0]))


def test_stack_traces_gives_no_entropy_batch_when_a_trace_has_none():
    from trace_core import Trace, TraceMetadata
    from trace_core.score import SURPRISAL_ONLY_CONFIG, stack_traces

    absent = Trace(prompt="", answer="a", token_ids=[1], tokens=("a",), surprisal=[0.5], entropy=None,
                   top_ids=[], top_logprobs=[], metadata=TraceMetadata(entropy_source="absent"))
    traces = random_traces(3, seed=1)
    assert stack_traces(traces)[1] is not None
    s, h = stack_traces(traces + [absent])
    assert h is None and len(s) == 4
    with pytest.raises(ValueError, match="TRACE needs entropy for every answer but 1 of 4"):
        trace_risk(traces + [absent])
    risk = trace_risk(traces + [absent], config=SURPRISAL_ONLY_CONFIG)
    only_s = TraceConfig(weight_decay=0.4, weight_window=0.4, weight_length=0.2, signal="surprisal")
    np.testing.assert_allclose(risk, [naive_risk(t.surprisal.tolist(), t.surprisal.tolist())
                                      for t in traces + [absent]], rtol=1e-10)
    assert only_s == SURPRISAL_ONLY_CONFIG
    assert explain_trace(absent).variant == "TRACE (surprisal-only)" and explain_trace(traces[0]).variant == "TRACE"
