"""Rendering: the token heatmap (escaped HTML), the Plotly figures and the metrics table. Pure functions: nothing
here draws on the page (the table's column settings are plain Streamlit config objects).

Every piece of text that comes from a model or a file goes through :func:`html.escape` before it reaches HTML, so a
token such as ``<img src=x onerror=alert(1)>`` shows literally; control, bidi and zero-width characters are shown one
way everywhere (:func:`visible_token`). The heatmap's hover cards are pure HTML and CSS (``st.html`` drops scripts):
each token is focusable, so a card also opens from the keyboard and, on touch screens, by tapping.
"""

from __future__ import annotations

import colorsys
import hashlib
import html
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from trace_core import EvaluationResult, Trace, TraceExplanation, explain_trace, reliability_table, roc_curve
from trace_core._checks import check_choice, check_int
from trace_core.metrics import risk_coverage_curve
from trace_core.registry import METHODS, METRICS

#: The longest message (characters, before escaping) an alert or caption shows; user input inside it is shortened
#: to about 200 characters where it is quoted, so only a message quoting many inputs reaches this.
MAX_MESSAGE = 2_000

SIGNALS = {
    "surprisal": ("Surprisal (nats): how unexpected the chosen token was", 6.0),
    "entropy": ("Entropy (nats): how undecided the model was", 4.0),
    "risk": ("TRACE risk share: how much the token adds to the answer's risk", None),
}
#: How the top of the colour scale is chosen: a fixed top per signal (answers compare with each other) or this
#: answer's maximum (small differences inside a confident answer show).
SCALES = {"fixed": "fixed scale", "answer": "this answer's maximum"}
# The smallest top an answer-relative scale takes: a flat answer (all values ~0) stays pale instead of turning its
# rounding noise into full colour, and nothing divides by zero.
_ANSWER_FLOOR = {"surprisal": 0.05, "entropy": 0.05, "risk": 1e-6}

# A colour-blind-safe sequential ramp (light yellow -> orange -> dark red), as RGB stops.
_STOPS = np.array([[255, 255, 229], [254, 227, 145], [254, 153, 41], [217, 95, 14], [153, 52, 4]], dtype=float)


def ramp(value: float) -> str:
    """Colour of a value in [0, 1] on the ramp, as ``rgb(r, g, b)``."""
    x = float(np.clip(value, 0.0, 1.0)) * (len(_STOPS) - 1)
    i = min(int(x), len(_STOPS) - 2)
    rgb = _STOPS[i] + (x - i) * (_STOPS[i + 1] - _STOPS[i])
    return "rgb({}, {}, {})".format(*np.round(rgb).astype(int))


def _text_colour(value: float) -> str:
    return "#ffffff" if value > 0.62 else "#1f1f1f"


def _token_styles(norm: np.ndarray) -> list[str]:
    """``background:{ramp(v)};color:{_text_colour(v)}`` for every value at once: the same arithmetic as
    :func:`ramp`, element by element, so the same strings; values that are not finite go through :func:`ramp`."""
    norm = np.asarray(norm, dtype=float)
    if not np.isfinite(norm).all():
        return [f"background:{ramp(v)};color:{_text_colour(v)}" for v in norm]
    x = np.clip(norm, 0.0, 1.0) * (len(_STOPS) - 1)
    i = np.minimum(x.astype(np.int64), len(_STOPS) - 2)
    rgb = np.round(_STOPS[i] + (x - i)[:, None] * (_STOPS[i + 1] - _STOPS[i])).astype(int).tolist()
    return [f"background:rgb({r}, {g}, {b});color:{'#ffffff' if v > 0.62 else '#1f1f1f'}"
            for (r, g, b), v in zip(rgb, norm.tolist())]


@dataclass(frozen=True)
class HeatmapScale:
    """One signal's per-token values and the top of its colour scale.

    Attributes
    ----------
    signal : str
        A key of :data:`SIGNALS`.
    values : ndarray, shape (T,)
        The raw per-token values.
    vmax : float
        The value drawn in full colour; larger values are clipped to it.
    scale : str
        A key of :data:`SCALES`: ``"fixed"`` (the signal's fixed top) or ``"answer"`` (this answer's maximum).
    """

    signal: str
    values: np.ndarray  # (T,) raw values
    vmax: float
    scale: str = "fixed"

    def normalized(self) -> np.ndarray:
        return np.clip(self.values / self.vmax, 0.0, 1.0) if self.vmax > 0 else np.zeros_like(self.values)


def signal_values(trace: Trace, signal: str, explanation: TraceExplanation | None = None, *,
                  scale: str = "fixed") -> HeatmapScale:
    """Per-token values of the chosen signal and the top of its colour scale.

    Parameters
    ----------
    trace : Trace
    signal : {"surprisal", "entropy", "risk"}
    explanation : TraceExplanation, optional
        ``explain_trace(trace)``, computed when not given (the ``"risk"`` signal reads its contributions).
    scale : {"fixed", "answer"}
        ``"fixed"``: 6 nats for surprisal, 4 nats for entropy, so colours compare across answers. ``"answer"``: this
        answer's maximum (at least a small floor), so the differences inside one answer show. The risk share has no
        fixed top: it is always drawn against the answer's maximum, and the returned scale says ``"answer"``.

    Examples
    --------
    >>> signal_values(trace, "surprisal", scale="answer").vmax  # doctest: +SKIP
    0.31
    """
    check_choice(signal, "signal", SIGNALS)
    check_choice(scale, "scale", SCALES)
    if signal == "surprisal":
        values = trace.surprisal
    elif signal == "entropy":
        if not trace.has_entropy:
            raise ValueError("this trace has no entropy (its data held only the chosen tokens' log-probabilities); "
                             "colour by surprisal instead")
        values = trace.entropy
    else:
        values = (explanation or explain_trace(trace)).contributions
        scale = "answer"
    if scale == "fixed":
        return HeatmapScale(signal, values, SIGNALS[signal][1], scale)
    top = float(values.max()) if values.size else 0.0
    return HeatmapScale(signal, values, max(top, _ANSWER_FLOOR[signal]), scale)


# Characters that can hide, reorder or fake text: C0 and C1 controls and DEL, bidi embeddings, overrides, isolates
# and marks, zero-width characters, and the Unicode line and paragraph separators (they break lines in some viewers
# and vanish in others). Tab and the newlines are C0 controls too; callers decide how to show those first.
_BIDI_AND_INVISIBLE = frozenset([0x061C, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x2028, 0x2029, 0x2060, 0xFEFF]
                                + list(range(0x202A, 0x202F)) + list(range(0x2066, 0x206A)))
_NEWLINE = re.compile(r"\r\n|\r|\n")
NEWLINE_MARK, TAB_MARK, EMPTY_MARK = "↵", "⇥", "∅"
# Any character that _token_units treats specially (newlines, tab, and every _hidden character): a token without one
# is a single text run.
_SPECIAL = re.compile("[\x00-\x1f\x7f-\x9f" + "".join(chr(c) for c in sorted(_BIDI_AND_INVISIBLE)) + "]")


def _hidden(ch: str) -> bool:
    """Whether ``ch`` is shown as a ``\\uXXXX`` escape (see ``_BIDI_AND_INVISIBLE``)."""
    code = ord(ch)
    return code < 0x20 or 0x7F <= code <= 0x9F or code in _BIDI_AND_INVISIBLE


def _escaped(ch: str) -> str:
    return f"\\u{ord(ch):04x}"


def _token_units(token: str) -> list[tuple[str, str]]:
    """``token`` as ``(kind, text)`` units: ``"text"`` runs, and one unit per ``"newline"`` (``\\r\\n`` is one),
    ``"tab"`` and ``"escape"``; the texts joined are :func:`visible_token`'s answer (less the empty mark)."""
    if not _SPECIAL.search(token):
        return [("text", token)] if token else []
    units: list[tuple[str, str]] = []
    for number, line in enumerate(_NEWLINE.split(token)):
        if number:
            units.append(("newline", NEWLINE_MARK))
        run: list[str] = []
        for ch in line:
            if ch == "\t" or _hidden(ch):
                if run:
                    units.append(("text", "".join(run)))
                    run = []
                units.append(("tab", TAB_MARK) if ch == "\t" else ("escape", _escaped(ch)))
            else:
                run.append(ch)
        if run:
            units.append(("text", "".join(run)))
    return units


def visible_token(token: str) -> str:
    """A token as plain text with every invisible or layout-changing character made visible (not HTML-escaped).

    Newlines (``\\n``, ``\\r\\n``, ``\\r``) become ``↵``, a tab ``⇥``; every other C0/C1 control and DEL, the bidi
    embeddings, overrides, isolates and marks (U+202A–202E, U+2066–2069, U+200E, U+200F, U+061C), the zero-width
    characters (U+200B–200D, U+2060, U+FEFF) and the line/paragraph separators (U+2028, U+2029) become ``\\uXXXX``;
    the empty token (a byte-level piece completed by the next token) becomes ``∅``. Ordinary spaces are kept.

    Examples
    --------
    >>> visible_token("a\\n\\tb\\u202ec")
    'a↵⇥b\\\\u202ec'
    >>> visible_token("")
    '∅'
    """
    if not isinstance(token, str):
        raise TypeError(f"`token` must be a str, got {type(token).__name__}")
    if token == "":
        return EMPTY_MARK
    if not _SPECIAL.search(token):
        return token
    return "".join(text for _, text in _token_units(token))


def control_safe(text: str) -> str:
    """Whole texts (prompts, answers in tables): the characters :func:`visible_token` escapes are escaped the same
    way (``\\uXXXX``); newlines and tabs are kept as they are, so multi-line text stays multi-line (``\\r\\n`` and a
    lone ``\\r`` become ``\\n``)."""
    text = _NEWLINE.sub("\n", text)
    return "".join(_escaped(ch) if ch not in "\n\t" and _hidden(ch) else ch for ch in text)


def md_literal(text: str, limit: int = MAX_MESSAGE) -> str:
    """Untrusted text for a Streamlit Markdown string (``st.error``, ``st.warning``, ``st.caption``), shown literally.

    Backslash escapes are not enough (``:material/...:`` and ``:red[...]`` still render), so every ASCII punctuation
    character becomes a numeric character reference, which Markdown shows as that character and never parses.
    Text longer than ``limit`` characters is cut (the cut says how long it was): a message quoting a huge input never
    becomes a huge alert.
    """
    text = str(text)
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text):,} characters in all)"
    return "".join(f"&#{ord(ch)};" if ch.isascii() and not ch.isalnum() and not ch.isspace() else ch
                   for ch in control_safe(text))


def _percent(p: float) -> str:
    """A probability for people: ``45.0%``, and tiny ones in scientific notation rather than ``0.0%``."""
    return f"{p:.1%}" if p >= 0.001 else f"{p:.1e}"


def _alternative_labels(trace: Trace, i: int, alternatives: Sequence[str] | None) -> list[str]:
    return [alternatives[j] if alternatives is not None else f"id {int(trace.top_ids[i, j])}"
            for j in range(trace.n_alternatives)]


def token_tooltip(trace: Trace, i: int, alternatives: Sequence[str] | None) -> str:
    """Plain-text details of token i: probability, surprisal, entropy, rank and the top-k alternatives."""
    p = float(np.exp(-trace.surprisal[i]))
    lines = [f"token {i + 1}: '{visible_token(trace.tokens[i])}'",
             f"probability {_percent(p)} · surprisal {trace.surprisal[i]:.2f}"
             + (f" · entropy {trace.entropy[i]:.2f}" if trace.has_entropy else " · entropy not recorded")]
    if trace.ranks is not None:
        lines.append(f"rank {int(trace.ranks[i])} of the vocabulary")
    if trace.n_alternatives:
        lines.append("alternatives:")
        for j, label in enumerate(_alternative_labels(trace, i, alternatives)):
            lines.append(f"  {_percent(float(np.exp(trace.top_logprobs[i, j]))):>7}  '{visible_token(label)}'")
    return "\n".join(lines)


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… (+{len(text) - limit} chars)"


def _token_html(token: str, limit: int) -> str:
    """A token's text for the heatmap, escaped, at most ``limit`` visible characters: newlines show ``↵`` and still
    break the line, tabs show ``⇥`` and keep some width, escapes are set apart from ordinary text."""
    if token == "":
        return f'<span class="tr-mark">{EMPTY_MARK}</span>'
    parts, used = [], 0
    units = _token_units(token)
    total = sum(len(text) for _, text in units)
    for kind, text in units:
        if used >= limit:
            break
        if kind == "text":
            text = text[:limit - used]
            parts.append(html.escape(text, quote=False))
        elif kind == "newline":
            parts.append(f'<span class="tr-mark">{NEWLINE_MARK}</span><br/>')
        elif kind == "tab":
            parts.append(f'<span class="tr-mark">{TAB_MARK}</span>&emsp;')
        else:
            parts.append(f'<span class="tr-esc">{text}</span>')
        used += len(text)
    if total > used:
        parts.append(f"… (+{total - used} chars)")
    return "".join(parts)


def _card_code(token: str, limit: int) -> str:
    """A token in a card: escaped, shortened, and named when it is only spaces (an empty-looking box says little)."""
    shown = _shortened(visible_token(token), limit)
    if shown.strip(" "):
        return f"<code>{html.escape(shown, quote=False)}</code>"
    name = "space" if len(shown) == 1 else f"{len(shown)} spaces"
    return f'<code>{shown}</code> <span class="tr-k">({name})</span>'


def card_html(trace: Trace, i: int, card_id: str, *, alternatives: Sequence[str] | None, marks: Sequence[str] = (),
              note: str | None = None, risk_share: float | None = None, limit: int = 200) -> str:
    """The hover card of token i (hidden until the token is hovered or focused): every text escaped."""
    alt_p = np.exp(trace.top_logprobs[i]).tolist() if trace.n_alternatives else None
    return _card_html(trace, i, card_id, float(np.exp(-trace.surprisal[i])), alt_p, alternatives=alternatives,
                      marks=marks, note=note, risk_share=risk_share, limit=limit)


def _card_html(trace: Trace, i: int, card_id: str, p: float, alt_p: Sequence[float] | None, *,
               alternatives: Sequence[str] | None, marks: Sequence[str], note: str | None, risk_share: float | None,
               limit: int, chosen_row: Sequence[bool] | None = None) -> str:
    """:func:`card_html` with token i's probability ``p`` and its alternatives' probabilities ``alt_p`` given
    (computed for all tokens at once by :func:`heatmap_html`), and optionally which alternatives are the chosen
    token."""
    e = html.escape
    head = f'<span class="tr-card-head">Token {i + 1} {_card_code(trace.tokens[i], limit)}</span>'
    if marks:
        head += f'<span class="tr-card-marks">{e(" · ".join(marks))}</span>'
    rows = [("probability", _percent(p)), ("surprisal", f"{trace.surprisal[i]:.2f} nats"),
            ("entropy", f"{trace.entropy[i]:.2f} nats" if trace.has_entropy else "not recorded")]
    bounds = _entropy_bounds(trace, i)
    if bounds is not None:  # a top-k estimate: the full-vocabulary entropy lies between these
        rows.append(("entropy bounds", f"{bounds[0]:.2f} – {bounds[1]:.2f} nats (top-{trace.metadata.entropy_k})"))
    if trace.ranks is not None:
        rows.append(("rank", f"{int(trace.ranks[i]):,}"))
    if risk_share is not None:
        rows.append(("risk share", f"{risk_share:.3f}"))
    stats = "".join(f'<span class="tr-k">{e(k)}</span><span>{e(v)}</span>' for k, v in rows)
    body = f'<span class="tr-card-grid">{stats}</span>'
    if trace.n_alternatives:
        if chosen_row is None:
            chosen = int(trace.token_ids[i])
            chosen_row = [chosen >= 0 and int(t) == chosen for t in trace.top_ids[i]]
        cells = []
        for j, label in enumerate(_alternative_labels(trace, i, alternatives)):
            mark = ' <span class="tr-k">(chosen)</span>' if chosen_row[j] else ""
            cells.append(f'<span class="tr-num">{_percent(alt_p[j])}</span>'
                         f'<span>{_card_code(str(label), 60)}{mark}</span>')
        body += (f'<span class="tr-card-sub">alternatives ({trace.n_alternatives})</span>'
                 f'<span class="tr-card-grid">{"".join(cells)}</span>')
    if note:
        body += f'<span class="tr-card-note">{e(str(note))}</span>'
    return f'<span class="tr-card" role="tooltip" id="{card_id}">{head}{body}</span>'


def _entropy_bounds(trace: Trace, i: int) -> tuple[float, float] | None:
    """Token i's lower and upper entropy bounds when the trace carries them (a server's top-k estimate)."""
    extra = trace.metadata.extra
    lower, upper = extra.get("entropy_lower"), extra.get("entropy_upper")
    if trace.metadata.entropy_source != "top_k" or not isinstance(lower, list) or not isinstance(upper, list) \
            or len(lower) != len(trace) or len(upper) != len(trace):
        return None
    try:
        return float(lower[i]), float(upper[i])
    except (TypeError, ValueError):
        return None


def card_id_prefix(trace: Trace, note: str | None = None) -> str:
    """A prefix for the cards' ids that differs between heatmaps of different answers on one page (``aria-describedby``
    needs ids unique in the document); deterministic, so a rerun renders the same HTML."""
    digest = hashlib.blake2s(digest_size=5)
    digest.update("\x00".join(trace.tokens).encode("utf-8", "surrogatepass"))
    digest.update(np.ascontiguousarray(trace.surprisal).tobytes())
    digest.update((note or "").encode("utf-8", "surrogatepass"))
    return "tr-" + digest.hexdigest()


def heatmap_html(trace: Trace, *, signal: str = "surprisal", explanation: TraceExplanation | None = None,
                 alternatives: Callable[[Trace, int], Sequence[str]] | None = None, max_token_chars: int = 200,
                 scale: str = "fixed", alternatives_note: str | None = None) -> str:
    """The answer as coloured token spans, spikes outlined, peak window underlined, each with a hover card.

    Every token is focusable (``tabindex="0"``); its card (``role="tooltip"``, referenced by ``aria-describedby``)
    opens on hover, on keyboard focus and, on touch screens, on a tap. The card shows the token's number and text, its
    probability, surprisal, entropy (or "not recorded"), rank when known and the top-k alternatives with their
    probabilities, then ``alternatives_note`` when given (e.g. why the alternatives show as ids). Pure HTML and CSS
    (:data:`HEATMAP_CSS`); no script.

    All text is HTML-escaped; control, bidi and zero-width characters show as :func:`visible_token` shows them (a
    newline also breaks the line). Tokens longer than ``max_token_chars`` are shortened (the page says by how much).
    ``scale`` is :func:`signal_values`' (``"fixed"`` or ``"answer"``).
    """
    check_int(max_token_chars, "max_token_chars", minimum=1)
    exp = explanation or explain_trace(trace)
    values = signal_values(trace, signal, exp, scale=scale)
    norm = values.normalized()
    spikes = {int(i) for i in np.asarray(exp.spikes).ravel()}
    start, stop = exp.peak_window
    prefix = card_id_prefix(trace, alternatives_note)
    # Per-token numbers for all tokens at once (the same element-wise arithmetic as card_html's).
    styles = _token_styles(norm)
    probabilities = np.exp(-trace.surprisal).tolist()
    if trace.n_alternatives:
        alt_p = np.exp(trace.top_logprobs).tolist()
        chosen = np.asarray(trace.token_ids, dtype=np.int64)
        chosen_rows = ((chosen >= 0)[:, None] & (np.asarray(trace.top_ids, dtype=np.int64) == chosen[:, None])).tolist()
    else:
        alt_p = chosen_rows = None
    risk = exp.contributions.tolist() if signal == "risk" else None
    parts = ['<div class="tr-heatmap" data-testid="trace-heatmap">']
    for i, token in enumerate(trace.tokens):
        classes, marks = ["tr-tok"], []
        if i in spikes:
            classes.append("tr-spike")
            marks.append("spike")
        if start <= i < stop:
            classes.append("tr-peak")
            marks.append("peak window")
        card_id = f"{prefix}-{i}"
        card = _card_html(trace, i, card_id, probabilities[i], alt_p[i] if alt_p is not None else None,
                          alternatives=alternatives(trace, i) if alternatives is not None else None, marks=marks,
                          note=alternatives_note, limit=max_token_chars,
                          risk_share=risk[i] if risk is not None else None,
                          chosen_row=chosen_rows[i] if chosen_rows is not None else None)
        parts.append(f'<span class="{" ".join(classes)}" style="{styles[i]}" data-index="{i}" tabindex="0" '
                     f'aria-describedby="{card_id}">{_token_html(token, max_token_chars)}{card}</span>')
    parts.append("</div>")
    return "".join(parts)


def legend_html(scale: HeatmapScale) -> str:
    """The colour legend: what the signal means, the ramp, the range it spans and which top was used, and samples of
    the spike and peak-window marks."""
    title, _ = SIGNALS[scale.signal]
    stops = ", ".join(ramp(x) for x in np.linspace(0, 1, 6))
    unit = "" if scale.signal == "risk" else " nats"
    top = f"{scale.vmax:.2f}" + ("+" if scale.scale == "fixed" else "")  # a fixed top clips larger values
    return (f'<div class="tr-legend"><span>{html.escape(title)}</span>'
            f'<span class="tr-legend-bar" style="background:linear-gradient(to right, {stops})"></span>'
            f'<span class="tr-legend-range">0 … {top}{unit} ({SCALES[scale.scale]})</span>'
            '<span class="tr-sample tr-spike">spike</span><span class="tr-sample tr-peak">peak window</span></div>')


# The card is placed under its token. Where the browser has anchor positioning with scoped anchor names, the card is
# positioned against the whole heatmap instead and pushed left as far as needed to stay inside it (a token near the
# right edge); elsewhere it hangs from the token's left edge, at most 20rem (and 85% of the screen) wide.
HEATMAP_CSS = """
<style>
.tr-heatmap {position: relative; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 0.95rem;
  line-height: 2.1; white-space: pre-wrap; word-break: break-word; padding: 0.6rem 0.2rem;}
.tr-tok {position: relative; border-radius: 3px; padding: 1px 0; cursor: help;}
.tr-tok:focus {outline: none;}
.tr-tok:focus-visible {box-shadow: 0 0 0 2px #ffffff, 0 0 0 5px #2563eb;}
.tr-spike {outline: 2px solid #3b0764; outline-offset: 1px; font-weight: 700;}
.tr-peak {text-decoration: underline wavy #3b0764; text-underline-offset: 5px;}
.tr-mark {opacity: 0.55;}
.tr-esc {opacity: 0.8; font-style: italic;}
.tr-card {display: none; position: absolute; z-index: 1000; left: 0; top: calc(100% + 6px); box-sizing: border-box;
  width: max-content; min-width: 12rem; max-width: min(20rem, 85vw); padding: 0.45rem 0.6rem;
  background: #ffffff; color: #1f1f1f; border: 1px solid #c8c8c8; border-radius: 6px;
  box-shadow: 0 4px 14px rgba(0, 0, 0, 0.18); font: 400 0.8rem/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  white-space: normal; word-break: break-word; text-align: left; cursor: auto;}
.tr-tok:hover > .tr-card, .tr-tok:focus > .tr-card, .tr-tok:focus-within > .tr-card {display: block;}
.tr-card code {font-family: ui-monospace, SFMono-Regular, Menlo, monospace; white-space: pre-wrap;
  background: #f1f1f4; border-radius: 3px; padding: 0 0.2em;}
.tr-card-head {display: block; font-weight: 600;}
.tr-card-marks {display: block; color: #3b0764; font-weight: 600;}
.tr-card-sub {display: block; margin-top: 0.35rem; padding-top: 0.25rem; border-top: 1px solid #e4e4e4; color: #555;}
.tr-card-grid {display: grid; grid-template-columns: auto 1fr; column-gap: 0.8rem; margin-top: 0.2rem;}
.tr-k {color: #555;}
.tr-num {text-align: right; font-variant-numeric: tabular-nums;}
.tr-card-note {display: block; margin-top: 0.35rem; color: #7a4b00; font-style: italic;}
@supports (anchor-scope: --a) and (position-anchor: --a) {
  .tr-tok {position: static; anchor-name: --tr-tok; anchor-scope: --tr-tok;}
  .tr-card {position-anchor: --tr-tok; top: calc(anchor(bottom) + 6px);
    width: min(20rem, 100%); min-width: 0; max-width: none; left: max(0px, min(anchor(left), 100% - min(20rem, 100%)));}
}
.tr-legend {display: flex; gap: 0.8rem; align-items: center; flex-wrap: wrap; font-size: 0.85rem; color: #555;}
.tr-legend-bar {display: inline-block; width: 140px; height: 12px; border-radius: 3px;}
.tr-sample {border-radius: 3px; padding: 1px 2px;}
</style>
"""


def _token_axis(n: int, max_ticks: int = 20) -> dict[str, Any]:
    """An x axis with ticks at whole token numbers only: every token for short answers, else the smallest round step
    (1, 2, 5, 10, 20, 50, ...) that keeps at most ``max_ticks`` ticks."""
    magnitude = 1
    while True:
        for multiple in (1, 2, 5):
            step = multiple * magnitude
            if n <= max_ticks * step:
                return dict(tickmode="linear", tick0=1 if step == 1 else 0, dtick=step, tickformat="d")
        magnitude *= 10


def trace_figure(trace: Trace, explanation: TraceExplanation | None = None) -> go.Figure:
    """Surprisal and entropy (when recorded) over token positions (whole numbers), the peak window shaded and spikes
    marked."""
    exp = explanation or explain_trace(trace)
    x = np.arange(1, len(trace) + 1)
    # Plotly reads tags in hover text (<b>, <span style>, <a>): escaped, a token shows as typed.
    labels = [html.escape(_shortened(visible_token(t), 40), quote=False) for t in trace.tokens]
    fig = go.Figure()
    start, stop = exp.peak_window
    if stop > start:
        fig.add_vrect(x0=start + 0.5, x1=stop + 0.5, fillcolor="#fdae6b", opacity=0.3, line_width=0,
                      annotation_text="peak window", annotation_position="top left")
    fig.add_trace(go.Scatter(x=x, y=trace.surprisal, mode="lines+markers", name="surprisal", customdata=labels,
                             hovertemplate="token %{x}: %{customdata}<br>surprisal %{y:.2f}<extra></extra>"))
    if trace.has_entropy:
        fig.add_trace(go.Scatter(x=x, y=trace.entropy, mode="lines+markers", name="entropy", customdata=labels,
                                 line=dict(dash="dot"),
                                 hovertemplate="token %{x}: %{customdata}<br>entropy %{y:.2f}<extra></extra>"))
    spikes = np.asarray(exp.spikes, dtype=np.int64).ravel()
    if spikes.size:
        fig.add_trace(go.Scatter(x=spikes + 1, y=trace.surprisal[spikes], mode="markers", name="spike",
                                 marker=dict(symbol="diamond-open", size=14, line=dict(width=2)), hoverinfo="skip"))
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=30, b=10), xaxis_title="token position",
                      legend=dict(orientation="h", y=1.15), xaxis=_token_axis(len(trace)),
                      yaxis=dict(title="nats", exponentformat="e"))  # plotly's default writes 5e-5 nats as "50μ"
    return fig


# One colour per method name, the same in every figure and tab whatever order or subset a caller passes. TRACE+ and
# TRACE get the two strong colours (red, blue); their variants are shades of the same hue (the surprisal-only ones
# lighter); the baselines take a qualitative palette free of that red and blue, in registry order; the supervised
# reference is near-black.
_TRACE_PLUS_COLOUR, _TRACE_COLOUR, _REFERENCE_COLOUR = "#d62728", "#1f77b4", "#252525"
_SURPRISAL_ONLY_COLOURS = {"TRACE+": "#f08a8b", "TRACE": "#74b3e3"}
_TRACE_PLUS_SHADES = ("#8b0000", "#e8603c", "#b2182b", "#ff9e80")  # TRACE+ feature-set variants
_TRACE_SHADES = ("#08306b", "#4292c6")  # any further TRACE variant
_BASELINE_PALETTE = ("#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
                     "#1b9e77", "#ffbb78", "#c5b0d5", "#c49c94", "#f7b6d2", "#9edae5", "#dbdb8d", "#393b79",
                     "#637939", "#8c6d31", "#7b4173", "#98df8a", "#a55194", "#fdae6b", "#74c476")


def _registry_colours() -> dict[str, str]:
    colours: dict[str, str] = {}
    surprisal_only = {METHODS[m].surprisal_only: c for m, c in _SURPRISAL_ONLY_COLOURS.items()
                      if m in METHODS and METHODS[m].surprisal_only}
    counts = {"trace_plus": 0, "trace": 0, "baseline": 0}
    for method in METHODS.values():
        name, kind = method.name, method.kind
        if name == "TRACE+":
            colours[name] = _TRACE_PLUS_COLOUR
        elif name == "TRACE":
            colours[name] = _TRACE_COLOUR
        elif name in surprisal_only:
            colours[name] = surprisal_only[name]
        elif kind == "reference":
            colours[name] = _REFERENCE_COLOUR
        else:
            palette = {"trace_plus": _TRACE_PLUS_SHADES, "trace": _TRACE_SHADES}.get(kind, _BASELINE_PALETTE)
            key = kind if kind in counts else "baseline"
            colours[name] = palette[counts[key] % len(palette)]  # cycles only if the registry outgrows the palette
            counts[key] += 1
    return colours


_METHOD_COLOURS = _registry_colours()


def method_colour(name: str) -> str:
    """The colour of a method in every figure (``"#rrggbb"``): fixed by the method registry, so a method looks the
    same in every figure and tab whichever methods are shown; a name the registry does not know gets a colour
    derived from a hash of the name (the same in every run).

    Examples
    --------
    >>> method_colour("TRACE+"), method_colour("TRACE")
    ('#d62728', '#1f77b4')
    """
    if not isinstance(name, str):
        raise TypeError(f"`name` must be a str, got {type(name).__name__}")
    if name in _METHOD_COLOURS:
        return _METHOD_COLOURS[name]
    hue = int.from_bytes(hashlib.blake2s(name.encode("utf-8", "surrogatepass"), digest_size=4).digest(), "big")
    r, g, b = colorsys.hls_to_rgb((hue % 360) / 360, 0.42, 0.55)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def _plotly_text(text: str) -> str:
    """Text for a Plotly label: Plotly reads tags (``<b>``, ``<a>``) in names and hover text, so escape them."""
    return html.escape(str(text), quote=False)


def _legend_name(name: str, this_split: str, legend_stats: Mapping[str, str] | None) -> str:
    """``"TRACE+ (AUROC ↑ 0.899 ± 0.012, mean of 20 splits)"`` from ``legend_stats``, else the plotted split's own
    value, saying so (``"TRACE+ (AUROC 0.904 on this split)"``)."""
    if legend_stats is not None and name in legend_stats:
        return _plotly_text(f"{name} ({legend_stats[name]})")
    return _plotly_text(f"{name} ({this_split} on this split)")


def _title(subtitle: str | None) -> dict[str, Any]:
    """A small left-aligned title line (e.g. which split the figure shows); nothing when ``subtitle`` is None."""
    if subtitle is None:
        return {}
    return dict(title=dict(text=_plotly_text(subtitle), x=0.01, xanchor="left", font=dict(size=13, color="#555")))


def _legend_below(y: float = -0.3) -> dict[str, Any]:
    """A horizontal legend under the plot: entries quoting mean ± std are long and wrap into rows, which above the
    plot would run into the title."""
    return dict(orientation="h", x=0, xanchor="left", y=y, yanchor="top")


def legend_stats(result: EvaluationResult, metric: str, calibrator: str | None = None) -> dict[str, str]:
    """Legend texts that quote the metrics table: each method's mean ± std over the held-out splits of ``metric``,
    from :meth:`EvaluationResult.table` under ``calibrator`` (the table :func:`metrics_frame` shows).

    Returns
    -------
    dict
        Method -> ``"ECE ↓ 0.031 ± 0.006, mean of 20 splits"`` (the metric's title from
        :data:`trace_core.registry.METRICS`), for every method in the table, in table order; pass it as the figures'
        ``legend_stats``.

    Examples
    --------
    >>> roc_figure(y, scores, legend_stats=legend_stats(result, "auroc"))  # doctest: +SKIP
    """
    check_choice(metric, "metric", METRICS)
    table = result.table(calibrator=calibrator)
    if metric not in table.columns:
        raise ValueError(f"`metric` {metric!r} was not computed in this evaluation; computed: "
                         f"{', '.join(m for m in METRICS if m in table.columns)}")
    n = result.n_splits_used
    where = f"mean of {n} split{'s' if n != 1 else ''}"
    title = METRICS[metric].title
    out = {}
    for method, row in table.iterrows():
        mean, std = float(row[metric]), float(row[f"{metric}_std"])
        out[str(method)] = (f"{title} n/a" if not np.isfinite(mean) else f"{title} {mean:.3f} ± {std:.3f}, {where}")
    return out


def histogram_bars(table: pd.DataFrame, name: str, colour: str) -> go.Bar:
    """Where the answers are, drawn from a :func:`trace_core.reliability_table`'s ``count``, ``lower`` and ``upper``
    columns: the very bins of the points above and of the ECE (one binning, never ``np.histogram``, whose ``[a, b)``
    bins differ from ``bin_probabilities``' ``(a, b]``).

    Each bar spans its bin ``[lower, upper]`` and its height is the bin's count of answers, so the axis never reads
    more answers than there are; with equal-mass bins the heights are about equal and the widths show where the
    answers are (narrow bins where they crowd). A zero-wide bin (tied probabilities) is drawn 0.01 wide. The bars
    share the method's ``legendgroup``: its legend entry toggles points and bars together.
    """
    lower, upper = table["lower"].to_numpy(float), table["upper"].to_numpy(float)
    counts = table["count"].to_numpy()
    # Tied probabilities can make an equal-mass bin zero-wide; give it a sliver so that its answers still show.
    width = np.maximum(upper - lower, 0.01)
    fill = f"rgba({int(colour[1:3], 16)}, {int(colour[3:5], 16)}, {int(colour[5:7], 16)}, 0.35)"
    label = _plotly_text(name)
    return go.Bar(x=(lower + upper) / 2, y=counts, width=width, name=label, legendgroup=name,
                  showlegend=False, marker=dict(color=fill, line=dict(color=colour, width=1.5)),
                  customdata=np.stack([lower, upper, counts], axis=1),
                  hovertemplate="bin %{customdata[0]:.2f}–%{customdata[1]:.2f}<br>%{customdata[2]} answers"
                                "<extra>" + label + "</extra>")


def reliability_figure(y: np.ndarray, probabilities: dict[str, np.ndarray], *, n_bins: int = 10,
                       strategy: str = "uniform", legend_stats: Mapping[str, str] | None = None,
                       subtitle: str | None = None) -> go.Figure:
    """Reliability diagram: per-bin accuracy with Wilson intervals vs mean confidence, the diagonal, and a histogram
    of confidences underneath (same bins; each method's bars in its colour, toggled with its points).

    The legend quotes ``legend_stats[name]`` when given (see :func:`legend_stats`: the table's mean over splits),
    else the ECE of these answers, marked "on this split". ``subtitle`` is a small title line.
    """
    from plotly.subplots import make_subplots

    from trace_core import expected_calibration_error

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.75, 0.25], vertical_spacing=0.04)
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration",
                             line=dict(color="#999", dash="dash")), row=1, col=1)
    for name, p in probabilities.items():
        colour = method_colour(name)
        table = reliability_table(y, p, n_bins=n_bins, strategy=strategy)
        table = table[table["count"] > 0]
        ece = expected_calibration_error(y, p, n_bins=n_bins, strategy=strategy)
        err = dict(type="data", symmetric=False, array=table["wilson_high"] - table["accuracy"],
                   arrayminus=table["accuracy"] - table["wilson_low"])
        fig.add_trace(go.Scatter(x=table["mean_confidence"], y=table["accuracy"], error_y=err, mode="lines+markers",
                                 name=_legend_name(name, f"ECE {ece:.3f}", legend_stats), legendgroup=name,
                                 marker_color=colour, line_color=colour,
                                 customdata=np.stack([table["count"], table["lower"], table["upper"]], axis=1),
                                 hovertemplate=("bin %{customdata[1]:.2f}–%{customdata[2]:.2f}<br>"
                                                "confidence %{x:.2f}<br>accuracy %{y:.2f}<br>"
                                                "%{customdata[0]} answers<extra>" + _plotly_text(name) + "</extra>")),
                      row=1, col=1)
        fig.add_trace(histogram_bars(table, name, colour), row=2, col=1)
    fig.update_layout(height=540, margin=dict(l=10, r=10, t=60 if subtitle else 30, b=10), barmode="overlay",
                      legend=_legend_below(-0.14), **_title(subtitle))
    fig.update_xaxes(range=[0, 1], row=2, col=1, title="predicted probability of a correct answer")
    fig.update_yaxes(range=[0, 1.02], row=1, col=1, title="observed accuracy")
    fig.update_yaxes(title="answers", row=2, col=1)
    return fig


def risk_coverage_figure(y: np.ndarray, scores: dict[str, np.ndarray], *,
                         legend_stats: Mapping[str, str] | None = None, subtitle: str | None = None) -> go.Figure:
    """Selective risk (error rate of the answers kept) against coverage, with the oracle. The legend quotes
    ``legend_stats[name]`` when given, else the AURC of these answers, marked "on this split"."""
    from trace_core import aurc

    fig = go.Figure()
    y = np.asarray(y)
    order_oracle = np.sort(1 - y)
    k = np.arange(1, len(y) + 1)
    fig.add_trace(go.Scatter(x=k / len(y), y=np.cumsum(order_oracle) / k, mode="lines", name="oracle",
                             line=dict(color="#999", dash="dash")))
    for name, score in scores.items():
        coverage, risk = risk_coverage_curve(y, score)
        fig.add_trace(go.Scatter(x=coverage, y=risk, mode="lines", legendgroup=name,
                                 name=_legend_name(name, f"AURC {aurc(y, score):.3f}", legend_stats),
                                 line=dict(color=method_colour(name))))
    fig.update_layout(height=440, margin=dict(l=10, r=10, t=60 if subtitle else 30, b=10),
                      xaxis_title="coverage (share of answers kept)", yaxis_title="risk (error rate among kept)",
                      legend=_legend_below(), **_title(subtitle))
    return fig


def roc_figure(y: np.ndarray, scores: dict[str, np.ndarray], *, legend_stats: Mapping[str, str] | None = None,
               subtitle: str | None = None) -> go.Figure:
    """ROC curves of raw scores (correct answers are the positives), with chance. The legend quotes
    ``legend_stats[name]`` when given, else the AUROC of these answers, marked "on this split"."""
    from trace_core import auroc

    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="chance", line=dict(color="#999", dash="dash")))
    for name, score in scores.items():
        fpr, tpr, _ = roc_curve(y, score)
        fig.add_trace(go.Scatter(x=fpr, y=tpr, mode="lines", legendgroup=name,
                                 name=_legend_name(name, f"AUROC {auroc(y, score):.3f}", legend_stats),
                                 line=dict(color=method_colour(name))))
    fig.update_layout(height=440, margin=dict(l=10, r=10, t=60 if subtitle else 30, b=10),
                      xaxis_title="false positive rate (wrong answers accepted)",
                      yaxis_title="true positive rate (correct answers accepted)", legend=_legend_below(),
                      **_title(subtitle))
    return fig


def metrics_frame(result: EvaluationResult, calibrator: str | None = None) -> pd.DataFrame:
    """The page's metrics table: :meth:`EvaluationResult.table` under ``calibrator`` (one row per method, in method
    order; ``family``, ``<metric>`` and ``<metric>_std`` columns) with the method as its first column and each
    method's note (uninformative, supervised reference) as its last."""
    table = result.table(calibrator=calibrator).rename_axis("method").reset_index()
    table["note"] = table["method"].map(result.note)
    return table


def paired_frame(result: EvaluationResult, calibrator: str | None = None) -> pd.DataFrame:
    """TRACE+ and TRACE minus the best baseline (chosen on each split's calibration part) and minus the supervised
    reference: ``"+0.012 ± 0.004 (18/20)"`` cells, headers from the metric registry."""
    from trace_core.compare import BEST_BASELINE
    from trace_core.registry import REFERENCE

    if result.paired is None:
        return pd.DataFrame()
    table = result.paired.table(calibrator=calibrator or result.config.scalar_calibrator,
                                versus=(BEST_BASELINE, REFERENCE))
    return table.rename(columns={"versus": "minus", **{m: METRICS[m].title for m in METRICS if m in table}})


def metric_columns(metrics: Sequence[str]) -> dict[str, Any]:
    """Streamlit column settings for :func:`metrics_frame`: headers and help from the metric registry
    (``"AUROC ↑"`` over ``auroc``, ``"±"`` over ``auroc_std``)."""
    import streamlit as st

    columns: dict[str, Any] = {}
    for name in metrics:
        spec = METRICS[name]
        basis = "each method's raw score" if spec.on == "score" else "calibrated probabilities"
        direction = "higher" if spec.higher_is_better else "lower"
        columns[name] = st.column_config.NumberColumn(spec.title, format="%.3f",
                                                      help=f"{spec.label} on {basis}; {direction} is better.")
        columns[f"{name}_std"] = st.column_config.NumberColumn("±", format="%.3f",
                                                               help=f"{spec.label}: standard deviation over splits.")
    return columns


def sentence(message: str) -> str:
    """A library message (lower case, no full stop) as a sentence for the page."""
    return message[:1].upper() + message[1:] + ("" if message.endswith((".", "…")) else ".")
