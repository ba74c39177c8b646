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
    decay = sum(wi * hi for wi, hi in zip(w, h, strict=True)) / sum(w)
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
    from trace_core.methods.risk import stack_traces

    with pytest.raises(TypeError, match="wrap a single trace"):
        stack_traces(make_trace([1.0]))


def test_stack_traces_gives_no_entropy_batch_when_a_trace_has_none():
    from trace_core import Trace, TraceMetadata
    from trace_core.methods.risk import SURPRISAL_ONLY_CONFIG, stack_traces

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


# ------------------------------------------------------------------------------------------------ the spike rule

def naive_spikes(x, floor, margin, share):
    """The spike rule written out token by token: rank (ties: earlier first), floor, margin over the median."""
    x = list(x)
    n = len(x)
    cap = max(1, math.floor(share * n))
    ordered = sorted(x)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    rank = [sum(x[j] > x[t] or (x[j] == x[t] and j < t) for j in range(n)) for t in range(n)]
    return [t for t in range(n) if rank[t] < cap and x[t] >= floor and x[t] >= median + margin]


@pytest.mark.parametrize("seed", range(4))
def test_spike_indices_match_the_rule_written_out(seed):
    from trace_core.methods.risk import spike_indices

    rng = np.random.default_rng(seed)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        x = np.round(rng.gamma(0.7, 0.8, size=n), 1)  # rounded: ties happen
        floor, margin, share = float(rng.choice([0.0, 0.3, 0.5, 1.0])), float(rng.choice([0.0, 0.2])), \
            float(rng.choice([0.1, 0.25, 1.0]))
        got = spike_indices(x, floor=floor, margin=margin, max_share=share)
        assert got.dtype == np.int64
        assert got.tolist() == naive_spikes(x, floor, margin, share), (x, floor, margin, share)


def test_confident_answer_has_no_spike_and_spikes_follow_surprisal_only():
    from trace_core.methods.risk import SPIKE_MIN_SURPRISAL, spike_indices

    confident = make_trace([0.0, 0.02, 0.01, 0.09], [0.3, 2.5, 0.2, 0.4])  # "1392": high entropy, likely tokens
    assert explain_trace(confident).spikes.tolist() == []
    assert spike_indices([]).tolist() == []
    # At the floor is a spike, just under it is not (probability exp(-SPIKE_MIN_SURPRISAL) is the line); the other
    # tokens are certain, so the median is 0 and the margin over it is met at the floor.
    assert explain_trace(make_trace([0.0] * 9 + [SPIKE_MIN_SURPRISAL])).spikes.tolist() == [9]
    assert explain_trace(make_trace([0.0] * 9 + [np.nextafter(SPIKE_MIN_SURPRISAL, 0)])).spikes.tolist() == []
    # At most max(1, floor(T / 10)) tokens, the most surprising ones.
    s = np.full(25, 0.05)
    s[[3, 10, 20]] = [2.0, 3.0, 1.0]
    assert explain_trace(make_trace(s)).spikes.tolist() == [3, 10]


def test_spike_indices_validate_their_inputs():
    from trace_core.methods.risk import spike_indices

    with pytest.raises(ValueError, match="1-D array of finite numbers"):
        spike_indices([[0.1, 0.2]])
    with pytest.raises(ValueError, match="1-D array of finite numbers"):
        spike_indices([0.1, float("nan")])
    with pytest.raises(ValueError, match="`max_share` must be"):
        spike_indices([0.1], max_share=0)
    with pytest.raises(ValueError, match="`floor` must be"):
        spike_indices([0.1], floor=-1)
    with pytest.raises(TypeError, match="`margin` must be"):
        spike_indices([0.1], margin="0.2")


# ------------------------------------------------------------------------- localisation (bench/localisation.py)

@pytest.mark.parametrize("answer, reference, position", [
    (" 1219", "1106", 2),  # numbers: the "2"
    (" 57", "53", 2),
    ("It is 57.", "53", 7),  # a numeric reference is compared with the answer's last number
    (" Tom Tace", "Tom Norta", 5),  # text: leading whitespace skipped
    ("Pia Lones", "Pia Lone", 8),  # the answer runs on: the first extra character
    (" pia lona", "Pia Lone", 8),  # case does not count
    ("Fensu", "Mawo || Fenpi", 3),  # several references: the one followed longest
    (" 10", "103", None),  # the answer stops early: no character of it is wrong
    (" Pia", "Pia Lone", None),
    ("It is unknown", "53", None),  # no number for a numeric reference
])
def test_first_wrong_char(answer, reference, position):
    from bench.localisation import first_wrong_char

    assert first_wrong_char(answer, reference) == position


def test_first_wrong_token_maps_the_position_to_its_token():
    from bench.localisation import first_wrong_token

    assert first_wrong_token([" ", "1", "2", "1", "9"], " 1219", "1106") == 2
    assert first_wrong_token([" Tom", " T", "ace"], " Tom Tace", "Tom Norta") == 1
    assert first_wrong_token([" Uma", " Qua", "fo"], " Uma Quafo", "Uma Quaqua") == 2
    assert first_wrong_token([" 5", "7"], " 57", "57") is None  # equal: nothing to locate
    assert first_wrong_token([" 5", "8"], " 57", "53") is None  # tokens that do not spell the answer


def _answer(correct, length, first_wrong, spikes, window):
    from bench.localisation import Answer

    return Answer("f", correct, length, first_wrong, {}, window, np.array(spikes, dtype=np.int64),
                  np.array([length - 1], dtype=np.int64))


def test_localisation_row_counts_by_hand():
    from bench.localisation import localisation_row

    answers = [_answer(False, 4, 1, [1, 3], (0, 4)),   # hit; both marks at/after the first wrong token
               _answer(False, 2, 1, [], (0, 2)),       # the first wrong token is the last; no mark
               _answer(False, 8, 2, [0], (4, 8)),      # a mark before it; outside the window
               _answer(False, 3, None, [0], (0, 3)),   # skipped
               _answer(True, 3, None, [2], (0, 3)), _answer(True, 3, None, [], (0, 3))]
    row = localisation_row(answers, lambda a: a.spikes)
    assert row["wrong"] == "4" and row["located"] == "3"
    assert row["spike on first wrong"] == "33.3% (1/3)"
    assert row["chance 1/T"] == f"{(1 / 4 + 1 / 2 + 1 / 8) / 3:.1%}"
    assert row["first wrong = last token"] == "33.3% (1/3)"
    assert row["spike on first wrong, when not last"] == "50.0% (1/2)"
    assert row["window holds it"] == "66.7% (2/3)"
    assert row["chance window/T"] == f"{(1 + 1 + 4 / 8) / 3:.1%}"
    assert row["spikes at/after first wrong"] == "66.7% (2/3)"
    assert row["wrong with a spike"] == "66.7% (2/3)"
    assert row["correct with a spike"] == "50.0% (1/2)" and row["spikes per correct"] == "0.50"
    legacy = localisation_row(answers, lambda a: a.legacy)  # always the last token here
    assert legacy["spike on first wrong"] == "33.3% (1/3)" and legacy["correct with a spike"] == "100.0% (2/2)"


def test_legacy_rule_marks_every_answer():
    from bench.localisation import legacy_spikes

    assert legacy_spikes(np.array([0.01, 0.02, 0.01])).tolist() == [1]
    c = np.full(20, 0.01)
    c[[4, 9]] = [2.0, 2.5]  # mean + 2 std is about 1.59
    assert legacy_spikes(c).tolist() == [4, 9]


@pytest.mark.slow
def test_spike_constants_are_the_ones_chosen_on_the_validation_data():
    from bench.localisation import DEFAULT_VALIDATION, choose_rule, load_answers
    from trace_core.methods.risk import SPIKE_MARGIN, SPIKE_MIN_SURPRISAL

    answers, _ = load_answers(DEFAULT_VALIDATION)
    choice = choose_rule(answers, "surprisal")
    assert (choice.floor, choice.margin) == (SPIKE_MIN_SURPRISAL, SPIKE_MARGIN)
    # The chosen rule beats marking nothing (objective 0) and marking the top token of every answer.
    assert choice.objective > 0
    always = choose_rule(answers, "surprisal", floors=[0.0], margins=[0.0])
    assert always.false_alarm == 1.0 and choice.objective > always.objective
    # The objective by hand: first wrong tokens marked minus the share of correct answers' tokens marked.
    from trace_core.methods.risk import spike_indices

    wrong = [a for a in answers if a.first_wrong is not None]
    right = [a for a in answers if a.correct]
    marked = lambda a: spike_indices(a.signals["surprisal"], floor=choice.floor, margin=choice.margin)  # noqa: E731
    hit = np.mean([a.first_wrong in marked(a) for a in wrong])
    token_rate = sum(marked(a).size for a in right) / sum(a.length for a in right)
    assert choice.objective == pytest.approx(hit - token_rate)
