"""Plain-language explanations on the Inspect page: tokens escaped, the right component and features named."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest
from helpers import make_trace, random_traces

from trace_core import Trace, TracePlus, explain_trace
from trace_core.score import TraceExplanation

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
    assert "tokens 2–5" in out
    # spikes in the explanation's order, each escaped
    assert out.index("onerror") < out.index("<code>ok</code>")
    out = explain.explain_risk(trace, explanation({"decay": 0.5, "window": 0.2, "length": 0.3}, [0], (0, 4)))
    assert "50% of the risk comes from uncertainty at the start of the answer." in out
    out = explain.explain_risk(trace, explanation({"decay": 0.1, "window": 0.1, "length": 0.8}, [0], (0, 4)))
    assert "80% of the risk comes from the total surprise of the chosen tokens." in out


def test_explain_risk_escapes_every_token():
    trace = hostile_trace()
    out = explain.explain_risk(trace, explanation({"decay": 0.2, "window": 0.5, "length": 0.3}, [1, 2, 3, 4], (0, 4)))
    assert "<img" not in out and "<script" not in out and "\u202e" not in out
    assert "<code> &lt;img src=x onerror=alert(1)&gt;</code>" in out
    assert "<code>\\n&lt;script&gt;</code>" in out  # the newline shown as \n, not a line break
    assert "&quot;q&quot; &amp;" in out and "\\u202e" in out
    # the only tags are the explanation's own
    assert set(re.findall(r"</?([a-z]+)", out)) == {"p", "b", "code"}


def test_explain_risk_on_a_real_explanation():
    trace = make_trace([0.1, 0.2, 6.0, 0.1, 0.2, 0.1], [0.3, 0.2, 3.0, 0.4, 0.2, 0.1])
    exp = explain_trace(trace)
    main = max(exp.components, key=exp.components.get)
    out = explain.explain_risk(trace, exp)
    assert f"{exp.components[main] / exp.risk:.0%} of the risk comes from {explain.COMPONENT_PHRASES[main]}" in out
    assert f"<code>{html.escape(trace.tokens[int(exp.spikes[0])])}</code>" in out


class FixedContributions:
    """A stand-in calibrator whose feature contributions are given."""

    def __init__(self, names: list[str], contributions: list[float]):
        self.feature_names_ = names
        self._c = np.array([contributions])

    def feature_contributions(self, traces):
        assert len(traces) == 1
        return self._c


def test_explain_probability_names_the_two_strongest_features_each_way():
    names = ["log_length", "mean_entropy_conf", "entropy_slope", "first3_entropy_conf", "min_token_prob"]
    model = FixedContributions(names, [0.3, -0.2, 0.01, 0.5, -0.6])
    out = explain.explain_probability(model, hostile_trace(), 0.734)
    phrase = explain.FEATURE_PHRASES
    assert out.startswith("<p><b>TRACE+:</b> the calibrator puts the chance that this answer is correct at 73%.")
    assert f"Raised by {phrase['first3_entropy_conf']} and {phrase['log_length']}." in out
    assert f"Lowered by {phrase['min_token_prob']} and {phrase['mean_entropy_conf']}." in out
    assert out.endswith("</p>")


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
