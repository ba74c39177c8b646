"""Plain-language explanations on the Inspect page: tokens escaped, the right component and features named."""

from __future__ import annotations

import html
import math
import re

import numpy as np
import pytest
from helpers import make_trace, random_traces

from trace_core import Trace, TracePlus, explain_trace
from trace_core.methods.risk import SPIKE_MIN_SURPRISAL, TraceExplanation

explain = pytest.importorskip("app.explain")

HOSTILE = ("ok", " <img src=x onerror=alert(1)>", "\n<script>", ' "q" & \'a\'', "\u202e")


def hostile_trace() -> Trace:
    base = make_trace([0.1, 4.0, 3.0, 0.2, 0.3])
    return Trace(prompt="p", answer="".join(HOSTILE), token_ids=base.token_ids, tokens=HOSTILE,
                 surprisal=base.surprisal, entropy=base.entropy, top_ids=base.top_ids, top_logprobs=base.top_logprobs)


def explanation(components: dict[str, float], spikes: list[int], window: tuple[int, int]) -> TraceExplanation:
    risk = sum(components.values())
    return TraceExplanation(risk=risk, confidence=float(np.exp(-risk)), components=components,
                            contributions=np.zeros(5), peak_window=window, spikes=np.array(spikes))


def test_explain_risk_names_the_largest_component_with_its_share():
    trace = hostile_trace()
    out = explain.explain_risk(trace, explanation({"decay": 0.1, "window": 0.6, "length": 0.3}, [1, 0], (1, 5)))
    assert "60% of the risk comes from the most uncertain stretch of four tokens." in out
    assert "stretch of four tokens (underlined) is tokens 2–5." in out
    # spikes in the explanation's order, each escaped
    assert out.index("onerror") < out.index("<code>'ok'</code>")
    out = explain.explain_risk(trace, explanation({"decay": 0.5, "window": 0.2, "length": 0.3}, [0], (0, 4)))
    assert "50% of the risk comes from uncertainty at the start of the answer." in out
    out = explain.explain_risk(trace, explanation({"decay": 0.1, "window": 0.1, "length": 0.8}, [0], (0, 4)))
    assert "80% of the risk comes from the total surprise of the chosen tokens." in out


def test_explain_risk_escapes_every_token():
    trace = hostile_trace()
    out = explain.explain_risk(trace, explanation({"decay": 0.2, "window": 0.5, "length": 0.3}, [1, 2, 3, 4], (0, 4)))
    assert "<img" not in out and "<script" not in out and "\u202e" not in out and "\n" not in out
    assert "<code>' &lt;img src=x onerror=alert(1)&gt;'</code>" in out
    assert "<code>'↵&lt;script&gt;'</code>" in out  # the newline shown as a mark, not a line break
    assert "&quot;q&quot; &amp;" in out and "<code>'\\u202e'</code>" in out
    # the only tags are the explanation's own
    assert set(re.findall(r"</?([a-z]+)", out)) == {"p", "b", "code"}


@pytest.mark.parametrize("token, shown", [("<b>x</b>", "<code>'&lt;b&gt;x&lt;/b&gt;'</code>"),
                                          ("\n", "<code>'↵'</code>"), ("\u202e", "<code>'\\u202e'</code>"),
                                          ("a\r\nb\tc", "<code>'a↵b⇥c'</code>"), ("", "<code>'∅'</code>"),
                                          ("\x7f\u200b", "<code>'\\u007f\\u200b'</code>")])
def test_tokens_are_shown_one_way(token, shown):
    trace = Trace(prompt="p", answer=token + " x", token_ids=[1, 2], tokens=(token, " x"), surprisal=[2.0, 0.1],
                  entropy=[1.0, 0.5], top_ids=[], top_logprobs=[])
    out = explain.explain_risk(trace, explanation({"decay": 0.2, "window": 0.5, "length": 0.3}, [0], (0, 2)))
    part_of = ": bytes of <code>' x'</code>, which token 2 completes" if token == "" else ""
    assert f"The token that stands out (outlined) is {shown} (token 1{part_of})." in out
    assert explain.code(token) == shown


def _named(tokens: tuple[str, ...], spikes: list[int]) -> str:
    trace = make_trace([1.0] * len(tokens))
    trace = Trace(prompt="p", answer="".join(tokens), token_ids=trace.token_ids, tokens=tokens,
                  surprisal=trace.surprisal, entropy=trace.entropy, top_ids=trace.top_ids,
                  top_logprobs=trace.top_logprobs)
    window = (0, min(4, len(tokens)))
    return explain.explain_risk(trace, explanation({"decay": 0.2, "window": 0.5, "length": 0.3}, spikes, window))


def test_spike_sentence_reads_for_one_two_three_and_many_tokens():
    tokens = (" The", " sum", " is", " 4", "2", " or", " 7", ".", " So", " 9", "!")
    assert "The token that stands out (outlined) is <code>' 4'</code> (token 4)." in _named(tokens, [3])
    assert ("The tokens that stand out (outlined) are <code>' 4'</code> (token 4) and <code>' 7'</code> (token 7)."
            in _named(tokens, [3, 6]))
    assert ("The tokens that stand out (outlined) are <code>' 4'</code> (token 4), <code>' 7'</code> (token 7) and "
            "<code>'.'</code> (token 8)." in _named(tokens, [3, 6, 7]))
    many = _named(tokens, [0, 1, 3, 4, 6, 7, 9])
    assert ("are <code>' The'</code> (token 1), <code>' sum'</code> (token 2), <code>' 4'</code> (token 4), "
            "<code>'2'</code> (token 5), <code>' 7'</code> (token 7) and 2 more." in many)
    assert "' 9'" not in many
    one_token = _named((";",), [0])  # the old sentence read "are ;" here
    assert "The token that stands out (outlined) is <code>';'</code> (token 1)." in one_token


def test_a_spike_without_text_names_the_character_it_begins():
    # SmolLM2's "🌟" is three byte-level tokens; the first two have no text, and the first is the uncertain one
    tokens = ("", "", "\U0001f31f", "", "\u3053", ".", "", "")
    out = _named(tokens, [0, 3, 6])
    assert ("<code>'\u2205'</code> (token 1: bytes of <code>'\U0001f31f'</code>, which token 3 completes), "
            "<code>'\u2205'</code> (token 4: bytes of <code>'\u3053'</code>, which token 5 completes) and "
            "<code>'\u2205'</code> (token 7: bytes of a character the answer does not finish)." in out)
    hostile = _named(("", "<i>x"), [0])
    assert "bytes of <code>'&lt;i&gt;x'</code>, which token 2 completes" in hostile and "<i>" not in hostile


def test_no_spike_says_why():
    confident = make_trace([0.0, 0.02, 0.09])  # a confident "1392": every token above 90% probability
    exp = explain_trace(confident)
    assert exp.spikes.size == 0
    out = explain.explain_risk(confident, exp)
    floor = int(100 * math.exp(-SPIKE_MIN_SURPRISAL))  # the spike rule's probability line, rounded down
    assert f"No token stands out: the model gave every token a probability above {floor}%." in out
    assert "outlined" not in out and "stands out (" not in out
    # No spike although a token is past the floor (a rule with a margin): the sentence must not claim the floor.
    surprising = make_trace([2.0, 2.0, 2.0, 2.0])
    out = explain.explain_risk(surprising, explanation({"decay": 0.2, "window": 0.5, "length": 0.3}, [], (0, 4)))
    assert "No token stands out from the rest of the answer." in out and f"{floor}%" not in out


@pytest.mark.parametrize("n", [1, 2, 3])
def test_short_answers_are_not_called_a_stretch_of_four_tokens(n):
    trace = make_trace([0.3] * n)
    exp = explanation({"decay": 0.1, "window": 0.6, "length": 0.3}, [], (0, n))
    out = explain.explain_risk(trace, exp)
    assert "four tokens (underlined)" not in out and "stretch of four" not in out
    assert "60% of the risk comes from the uncertainty over the whole answer." in out
    assert "The most uncertain stretch (underlined) is the whole answer, which is shorter than four tokens." in out
    surprisal_only = TraceExplanation(**{**exp.__dict__, "variant": "TRACE (surprisal-only)"})
    out = explain.explain_risk(trace, surprisal_only)
    assert "the surprise over the whole answer." in out and "most surprising stretch (underlined) is the whole" in out
    for name in ("window_entropy_max", "window_surprisal_max", "entropy_spike_gap", "surprisal_spike_gap"):
        assert "stretch of four" not in explain.feature_phrase(name, n)
        assert explain.feature_phrase(name, 4) == explain.FEATURE_PHRASES[name]
    for name in ("first3_entropy_conf", "first3_surprisal_conf"):
        phrase = explain.feature_phrase(name, n)
        assert ("first three" in phrase) == (n == 3)


def test_explain_risk_on_a_real_explanation():
    trace = make_trace([0.1, 0.2, 6.0, 0.1, 0.2, 0.1], [0.3, 0.2, 3.0, 0.4, 0.2, 0.1])
    exp = explain_trace(trace)
    main = max(exp.components, key=exp.components.get)
    out = explain.explain_risk(trace, exp)
    assert f"{exp.components[main] / exp.risk:.0%} of the risk comes from {explain.COMPONENT_PHRASES[main]}" in out
    assert exp.spikes.tolist() == [2]
    assert f"The token that stands out (outlined) is <code>'{html.escape(trace.tokens[2])}'</code> (token 3)." in out


class FixedContributions:
    """A stand-in calibrator whose feature contributions are given."""

    def __init__(self, names: list[str], contributions: list[float]):
        self.feature_names_ = names
        self._c = np.array([contributions])

    def feature_contributions(self, traces):
        assert len(traces) == 1
        return self._c


def test_explain_probability_names_the_two_strongest_features_each_way():
    names = ["log_length", "mean_entropy_conf", "entropy_slope", "first3_entropy_conf", "logit_min_token_prob"]
    model = FixedContributions(names, [0.3, -0.2, 0.01, 0.5, -0.6])
    out = explain.explain_probability(model, hostile_trace(), 0.734)
    phrase = explain.FEATURE_PHRASES
    assert out.startswith("<p><b>TRACE+:</b> the calibrator puts the chance that this answer is correct at 73%.")
    assert f"Raised by {phrase['first3_entropy_conf']} and {phrase['log_length']}." in out
    assert f"Lowered by {phrase['logit_min_token_prob']} and {phrase['mean_entropy_conf']}." in out
    assert out.endswith("</p>")


def test_explain_probability_words_fit_a_short_answer():
    model = FixedContributions(["window_entropy_max", "first3_entropy_conf"], [0.4, 0.3])
    short = explain.explain_probability(model, make_trace([0.2, 0.3]), 0.6)
    assert "four tokens" in short and "stretch of four" not in short and "first three" not in short
    long = explain.explain_probability(model, make_trace([0.2] * 6), 0.6)
    assert (f"Raised by {explain.FEATURE_PHRASES['window_entropy_max']} and "
            f"{explain.FEATURE_PHRASES['first3_entropy_conf']}.") in long


def test_explain_probability_leaves_out_small_effects_and_unknown_names_read_as_is():
    model = FixedContributions(["new_feature", "log_length"], [0.2, 0.04])
    out = explain.explain_probability(model, hostile_trace(), 0.5)
    assert "Raised by new_feature." in out and "Lowered" not in out and "length" not in out
    out = explain.explain_probability(FixedContributions(["log_length"], [-0.01]), hostile_trace(), 0.5)
    assert "Raised" not in out and "Lowered" not in out


def test_explain_probability_with_a_fitted_trace_plus():
    traces = random_traces(60, seed=2)
    labels = (np.arange(60) % 2).astype(int)
    model = TracePlus().fit(traces, labels)
    trace = traces[0]
    contributions = model.feature_contributions([trace])[0]
    top = model.feature_names_[int(np.argmax(contributions))]
    out = explain.explain_probability(model, trace, float(model.predict_proba([trace])[0]))
    if contributions.max() > 0.05:
        assert f"Raised by {explain.FEATURE_PHRASES[top]}" in out
    else:
        assert "Raised" not in out
    assert all(name in explain.FEATURE_PHRASES for name in model.feature_names_)  # every paper feature has words


def test_every_feature_of_every_set_has_a_phrase():
    from trace_core import FEATURE_SETS

    for names in FEATURE_SETS.values():
        for name in names:
            assert explain.feature_phrase(name, 10) != name, name
    assert explain.feature_phrase("log_mean_entropy_conf", 10) == explain.FEATURE_PHRASES["mean_entropy_conf"]
