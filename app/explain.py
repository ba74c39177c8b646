"""Plain-language explanations of a TRACE risk and a TRACE+ probability, as HTML with every token escaped."""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np

from trace_core import ScoreCalibrator, Trace, TraceExplanation, TracePlus
from trace_core.calibration.calibrators import CALIBRATOR_WORDS
from trace_core.methods.risk import PAPER_CONFIG, SPIKE_MIN_SURPRISAL

from .text import byte_piece_note, visible_token

#: Answers shorter than this have no "stretch of four tokens": the window term is their whole-answer mean.
WINDOW = PAPER_CONFIG.window
#: At most this many spike tokens are named; the rest are counted.
MAX_NAMED = 5

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
    "logit_min_token_prob": "its least likely token",
    "log_geomean_token_prob": "its average token probability",
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


# Phrases that would be untrue of an answer shorter than the four-token window (or the first three tokens): with
# T < 4 the window term is the mean over the whole answer, so a stretch cannot stand out, and with T < 3 "the first
# three tokens" are all of them.
SHORT_COMPONENT_PHRASES = {"window": "the uncertainty over the whole answer"}
SHORT_SURPRISAL_COMPONENT_PHRASES = {"window": "the surprise over the whole answer"}
SHORT_FEATURE_PHRASES = {
    "window_entropy_max": "its uncertainty over the whole answer (shorter than four tokens)",
    "window_surprisal_max": "how surprising the whole answer was (shorter than four tokens)",
    "entropy_spike_gap": "its shortness: no stretch of fewer than four tokens stands out",
    "surprisal_spike_gap": "its shortness: no stretch of fewer than four tokens stands out",
}
VERY_SHORT_FEATURE_PHRASES = {  # fewer than three tokens
    "first3_entropy_conf": "how certain the model was over the whole answer",
    "first3_surprisal_conf": "how expected the whole answer's tokens were",
}

def code(text: str) -> str:
    """A token shown literally: invisible characters made visible, quoted (so edge spaces show), HTML-escaped."""
    return f"<code>'{html.escape(visible_token(text))}'</code>"


def _and_list(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def unfinished_note(trace: Trace) -> str | None:
    """Why the numbers above do not score a finished answer, or None: the answer is only whitespace, or it was cut
    at the token limit (TRACE and TRACE+ then score the tokens written so far; a one-token answer cut there looks
    as confident as the model was about that token)."""
    cut = trace.metadata.extra.get("finish_reason") == "length"
    if len(trace) and not trace.answer.strip():
        return ("The answer is only whitespace" + (", cut at the token limit" if cut else "") + ": there is no "
                "answer to score, so read TRACE confidence and the TRACE+ probability as saying nothing about one.")
    if cut:
        return (f"The answer was cut at the token limit ({len(trace)} new token{'' if len(trace) == 1 else 's'}): "
                "TRACE confidence and the TRACE+ probability score the tokens written so far, not a finished "
                "answer. Raise Max new tokens in the sidebar's Decoding and generate again.")
    return None


def spike_sentence(trace: Trace, exp: TraceExplanation) -> str:
    """The outlined tokens in words: each escaped, with its 1-based position; or why none is outlined."""
    spikes = [int(i) for i in np.asarray(exp.spikes).ravel()]
    if not spikes:
        if len(trace) and float(np.max(trace.surprisal)) < SPIKE_MIN_SURPRISAL:
            # No spike because every surprisal is below the floor: every probability is above exp(-floor).
            least = math.floor(100 * math.exp(-SPIKE_MIN_SURPRISAL))
            return (f"No token stands out: the model gave every token a probability above {least}%. That does not "
                    "make the answer right: a confident mistake has no spike.")
        return "No token stands out from the rest of the answer."
    named = [f"{code(trace.tokens[i])} (token {i + 1}" + (f": {note})" if (note := byte_piece_note(
        trace.tokens, i, quote=lambda shown: f"<code>'{html.escape(shown)}'</code>")) else ")")
        for i in spikes[:MAX_NAMED]]
    if len(spikes) > MAX_NAMED:
        named.append(f"{len(spikes) - MAX_NAMED} more")
    if len(spikes) == 1:
        return f"The token that stands out (outlined) is {named[0]}."
    return f"The tokens that stand out (outlined) are {_and_list(named)}."


def window_sentence(trace: Trace, exp: TraceExplanation, *, surprisal_only: bool = False) -> str:
    """Where the peak window lies, in words; an answer shorter than the window is said to be the whole answer."""
    stretch = "most surprising" if surprisal_only else "most uncertain"
    if len(trace) < WINDOW:
        return f"The {stretch} stretch (underlined) is the whole answer, which is shorter than four tokens."
    start, stop = exp.peak_window
    return f"The {stretch} stretch of four tokens (underlined) is tokens {start + 1}–{stop}."


def component_phrase(name: str, length: int, *, surprisal_only: bool = False) -> str:
    """The words for one TRACE component, true for an answer of ``length`` tokens."""
    phrases = SURPRISAL_COMPONENT_PHRASES if surprisal_only else COMPONENT_PHRASES
    short = SHORT_SURPRISAL_COMPONENT_PHRASES if surprisal_only else SHORT_COMPONENT_PHRASES
    return short.get(name, phrases[name]) if length < WINDOW else phrases[name]


def feature_phrase(name: str, length: int) -> str:
    """The words for one TRACE+ feature, true for an answer of ``length`` tokens; unknown names read as they are."""
    if length < 3 and name in VERY_SHORT_FEATURE_PHRASES:
        return VERY_SHORT_FEATURE_PHRASES[name]
    if length < WINDOW and name in SHORT_FEATURE_PHRASES:
        return SHORT_FEATURE_PHRASES[name]
    if name.startswith("log_") and name not in FEATURE_PHRASES:  # the well-conditioned form of a paper feature
        name = name[len("log_"):]
    return FEATURE_PHRASES.get(name, name)


def explain_risk(trace: Trace, exp: TraceExplanation) -> str:
    """Which TRACE component carries most of the risk, the outlined tokens (escaped) and the peak window."""
    if len(trace) == 0:
        return "<p><b>Why this confidence:</b> the answer has no tokens.</p>"
    surprisal_only = exp.variant != "TRACE"
    main = max(exp.components, key=lambda name: exp.components[name])
    share = exp.components[main] / exp.risk if exp.risk > 0 else 0.0
    phrase = component_phrase(main, len(trace), surprisal_only=surprisal_only)
    note = (f" ({html.escape(exp.variant)}: these traces hold no entropy, so surprisal stands in for it.)"
            if surprisal_only else "")
    return (f"<p><b>Why this confidence:</b> {share:.0%} of the risk comes from {phrase}. "
            f"{spike_sentence(trace, exp)} {window_sentence(trace, exp, surprisal_only=surprisal_only)}{note}</p>")


def probability_title(model: Any) -> str:
    """What a calibrator's probability is called on the pages: ``"TRACE+"``, ``"TRACE+ (extended)"``, the method a
    ScoreCalibrator calibrates (``"SeqLogP"``), or ``"TRACE"`` for a bare scalar calibrator of TRACE confidence."""
    if isinstance(model, ScoreCalibrator):
        return model.method
    return model.score_name if isinstance(model, TracePlus) else "TRACE"


def explain_probability(model: Any, trace: Trace, probability: float) -> str:
    """The calibrated probability: for TRACE+ with the (at most two) features that raised it and lowered it most;
    for another score (a ScoreCalibrator), which score and calibrator gave it."""
    if isinstance(model, ScoreCalibrator):
        return (f"<p><b>{html.escape(model.method)}:</b> {html.escape(CALIBRATOR_WORDS[model.calibrator])} of its "
                f"score puts the chance that this answer is correct at {probability:.0%} (the active calibrator "
                "calibrates this score, not TRACE+).</p>")
    contributions = model.feature_contributions([trace])[0]
    order = np.argsort(contributions)
    down = [feature_phrase(model.feature_names_[i], len(trace)) for i in order[:2] if contributions[i] < -0.05]
    up = [feature_phrase(model.feature_names_[i], len(trace)) for i in order[::-1][:2] if contributions[i] > 0.05]
    parts = [f"<p><b>TRACE+:</b> the calibrator puts the chance that this answer is correct at {probability:.0%}."]
    if up:
        parts.append("Raised by " + " and ".join(up) + ".")
    if down:
        parts.append("Lowered by " + " and ".join(down) + ".")
    return " ".join(parts) + "</p>"
