"""Plain-language explanations of a TRACE risk and a TRACE+ probability, as HTML with every token escaped."""

from __future__ import annotations

import html

import numpy as np

from trace_core import Trace, TraceExplanation, TracePlus

FEATURE_PHRASES = {
    "first3_entropy_conf": "how certain the model was over the first three tokens",
    "mean_entropy_conf": "how certain it was on average",
    "log_length": "the answer's length",
    "entropy_slope": "whether its uncertainty rose or fell along the answer",
    "decayed_entropy_conf_l2": "its certainty at the very start",
    "decayed_entropy_conf_l4": "its certainty early in the answer",
    "decayed_surprisal_conf_l2": "how expected the very first tokens were",
    "decayed_surprisal_conf_l4": "how expected the early tokens were",
    "window_entropy_max": "its most uncertain stretch of four tokens",
    "window_surprisal_max": "its most surprising stretch of four tokens",
    "entropy_spike_gap": "how far its most uncertain stretch stands out",
    "surprisal_spike_gap": "how far its most surprising stretch stands out",
    "trace_risk": "the TRACE risk",
    "first3_surprisal_conf": "how expected its first three tokens were",
    "mean_surprisal_conf": "how expected its tokens were on average",
    "surprisal_slope": "whether its tokens grew more or less surprising along the answer",
    "min_token_prob": "its least likely token",
    "geomean_token_prob": "its average token probability",
    "low_prob_rate": "how many unlikely tokens it chose",
}

COMPONENT_PHRASES = {
    "decay": "uncertainty at the start of the answer",
    "window": "the most uncertain stretch of four tokens",
    "length": "the total surprise of the chosen tokens",
}
# TRACE (surprisal-only) applies the same operators to surprisal: the traces held no entropy.
SURPRISAL_COMPONENT_PHRASES = {
    "decay": "surprise at the start of the answer",
    "window": "the most surprising stretch of four tokens",
    "length": "the total surprise of the chosen tokens",
}


def code(text: str) -> str:
    """A token shown literally: repr'd (whitespace and control characters visible), then HTML-escaped."""
    return f"<code>{html.escape(repr(text)[1:-1])}</code>"


def explain_risk(trace: Trace, exp: TraceExplanation) -> str:
    """Which TRACE component carries most of the risk, the riskiest tokens (escaped) and the peak window."""
    surprisal_only = exp.variant != "TRACE"
    phrases = SURPRISAL_COMPONENT_PHRASES if surprisal_only else COMPONENT_PHRASES
    main = max(exp.components, key=exp.components.get)
    share = exp.components[main] / exp.risk if exp.risk > 0 else 0.0
    spikes = ", ".join(code(trace.tokens[i]) for i in exp.spikes[:5])
    start, stop = exp.peak_window
    note = (f" ({html.escape(exp.variant)}: these traces hold no entropy, so surprisal stands in for it.)"
            if surprisal_only else "")
    stretch = "most surprising" if surprisal_only else "most uncertain"
    return (f"<p><b>Why this confidence:</b> {share:.0%} of the risk comes from {phrases[main]}. "
            f"The riskiest tokens (outlined) are {spikes}; the {stretch} stretch (underlined) is tokens "
            f"{start + 1}–{stop}.{note}</p>")


def explain_probability(model: TracePlus, trace: Trace, probability: float) -> str:
    """The TRACE+ probability with the (at most two) features that raised it and lowered it most."""
    contributions = model.feature_contributions([trace])[0]
    order = np.argsort(contributions)
    down = [FEATURE_PHRASES.get(model.feature_names_[i], model.feature_names_[i]) for i in order[:2]
            if contributions[i] < -0.05]
    up = [FEATURE_PHRASES.get(model.feature_names_[i], model.feature_names_[i]) for i in order[::-1][:2]
          if contributions[i] > 0.05]
    parts = [f"<p><b>TRACE+:</b> the calibrator puts the chance that this answer is correct at {probability:.0%}."]
    if up:
        parts.append("Raised by " + " and ".join(up) + ".")
    if down:
        parts.append("Lowered by " + " and ".join(down) + ".")
    return " ".join(parts) + "</p>"
