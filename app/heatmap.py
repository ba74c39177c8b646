"""The token heatmap: each token of an answer coloured by a signal (surprisal, entropy or its share of the TRACE risk)
on a fixed or per-answer scale, spikes outlined, the peak window underlined, the riskiest spans boxed, and a hover card
per token; its colour legend and CSS. Pure functions returning escaped HTML: nothing here draws on the page.

Every piece of text that comes from a model or a file goes through :func:`html.escape` before it reaches HTML, so a
token such as ``<img src=x onerror=alert(1)>`` shows literally; control, bidi and zero-width characters show as
:func:`app.text.visible_token` shows them. The hover cards are pure HTML and CSS (``st.html`` drops scripts): each
token is focusable, so a card also opens from the keyboard and, on touch screens, by tapping.
"""

from __future__ import annotations

import hashlib
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from trace_core import SpanRisk, Trace, TraceExplanation, explain_trace
from trace_core.checks import check_choice, check_int

from .text import NEWLINE_MARK, TAB_MARK, byte_piece_note, shortened, token_units, visible_token

SIGNALS = {
    "surprisal": ("Surprisal (nats): how unexpected the chosen token was", 6.0),
    "entropy": ("Entropy (nats): how undecided the model was", 4.0),
    "risk": ("TRACE risk share: how much the token adds to the answer's risk", None),
}
#: How the top of the colour scale is chosen: a fixed top per signal (answers compare with each other) or this
#: answer's maximum (small differences inside a confident answer show).
SCALES = {"fixed": "fixed scale", "answer": "this answer's maximum"}
#: Under a token's alternatives when one shows U+FFFD: that alternative's bytes end inside a character, which only a
#: later token would have completed.
PARTIAL_ALTERNATIVE_NOTE = "\ufffd: an alternative whose bytes end inside a character (a later token completes it)"
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
            for (r, g, b), v in zip(rgb, norm.tolist(), strict=True)]


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
        if trace.entropy is None:
            raise ValueError("this trace has no entropy (its data held only the chosen tokens' log-probabilities); "
                             "colour by surprisal instead")
        values = trace.entropy
    else:
        values = (explanation or explain_trace(trace)).contributions
        scale = "answer"
    fixed_top = SIGNALS[signal][1]
    if scale == "fixed" and fixed_top is not None:  # the risk share has no fixed top: always scaled per answer
        return HeatmapScale(signal, values, fixed_top, scale)
    top = float(values.max()) if values.size else 0.0
    return HeatmapScale(signal, values, max(top, _ANSWER_FLOOR[signal]), scale)


def _percent(p: float) -> str:
    """A probability for people: ``45.0%``, and tiny ones in scientific notation rather than ``0.0%``."""
    return f"{p:.1%}" if p >= 0.001 else f"{p:.1e}"


def _alternative_labels(trace: Trace, i: int, alternatives: Sequence[str] | None) -> list[str]:
    return [alternatives[j] if alternatives is not None else f"id {int(trace.top_ids[i, j])}"
            for j in range(trace.n_alternatives)]


def token_tooltip(trace: Trace, i: int, alternatives: Sequence[str] | None) -> str:
    """Plain-text details of token i: probability, surprisal, entropy, rank and the top-k alternatives."""
    p = float(np.exp(-trace.surprisal[i]))
    entropy = trace.entropy
    lines = [f"token {i + 1}: '{visible_token(trace.tokens[i])}'",
             f"probability {_percent(p)} · surprisal {trace.surprisal[i]:.2f}"
             + (f" · entropy {entropy[i]:.2f}" if entropy is not None else " · entropy not recorded")]
    if trace.ranks is not None:
        lines.append(f"rank {int(trace.ranks[i])} of the vocabulary")
    if trace.n_alternatives:
        lines.append("alternatives:")
        for j, label in enumerate(_alternative_labels(trace, i, alternatives)):
            lines.append(f"  {_percent(float(np.exp(trace.top_logprobs[i, j]))):>7}  '{visible_token(label)}'")
    return "\n".join(lines)


def _token_html(token: str, limit: int) -> str:
    """A token's text for the heatmap, escaped, at most ``limit`` visible characters: newlines show ``↵`` and still
    break the line, tabs show ``⇥`` and keep some width, escapes are set apart from ordinary text."""
    if token == "":  # a slim bar (class tr-bytes) instead of a glyph: the text around it keeps its shaping
        return ""
    parts, used = [], 0
    units = token_units(token)
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
    shown = shortened(visible_token(token), limit)
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
    entropy = trace.entropy
    piece = byte_piece_note(trace.tokens, i)
    rows = [("text", piece)] if piece else []
    rows += [("probability", _percent(p)), ("surprisal", f"{trace.surprisal[i]:.2f} nats"),
            ("entropy", f"{entropy[i]:.2f} nats" if entropy is not None else "not recorded")]
    bounds = _entropy_bounds(trace, i)
    if bounds is not None:  # a top-k estimate: the full-vocabulary entropy lies between these
        rows.append(("entropy bounds", f"{bounds[0]:.2f} – {bounds[1]:.2f} nats (top-{trace.metadata.entropy_k})"))
    if trace.ranks is not None:
        rows.append(("rank", f"{int(trace.ranks[i]):,}"))
    whole = _whole_character(trace, i, limit)
    if whole is not None:
        rows.append(("whole character", whole))
    if risk_share is not None:
        rows.append(("risk share", f"{risk_share:.3f}"))
    stats = "".join(f'<span class="tr-k">{e(k)}</span><span>{e(v)}</span>' for k, v in rows)
    body = f'<span class="tr-card-grid">{stats}</span>'
    if trace.n_alternatives:
        if chosen_row is None:
            chosen = int(trace.token_ids[i])
            chosen_row = [chosen >= 0 and int(t) == chosen for t in trace.top_ids[i]]
        if alt_p is None:  # the callers pass them for a token with alternatives; these are the same values
            alt_p = np.exp(trace.top_logprobs[i]).tolist()
        cells = []
        labels = _alternative_labels(trace, i, alternatives)
        for j, label in enumerate(labels):
            mark = ' <span class="tr-k">(chosen)</span>' if chosen_row[j] else ""
            cells.append(f'<span class="tr-num">{_percent(alt_p[j])}</span>'
                         f'<span>{_card_code(str(label), 60)}{mark}</span>')
        body += (f'<span class="tr-card-sub">alternatives ({trace.n_alternatives})</span>'
                 f'<span class="tr-card-grid">{"".join(cells)}</span>')
        if any("\ufffd" in str(label) for label in labels):
            body += f'<span class="tr-card-note">{e(PARTIAL_ALTERNATIVE_NOTE)}</span>'
    if note:
        body += f'<span class="tr-card-note">{e(str(note))}</span>'
    # dir="ltr": the card reads left to right, and the heatmap's dir="auto" takes the answer's direction from the
    # answer's text alone (an element with its own dir is skipped), not from a card's words
    return f'<span class="tr-card" role="tooltip" id="{card_id}" dir="ltr">{head}{body}</span>'


def _whole_character(trace: Trace, i: int, limit: int) -> str | None:
    """For a token that completes a character begun by tokens without text: the probability of the tokens together
    (the product of theirs: the model's probability of that character there), else None."""
    first = i
    while first > 0 and trace.tokens[first - 1] == "":
        first -= 1
    if first == i or trace.tokens[i] == "":
        return None
    together = float(np.exp(-np.sum(trace.surprisal[first:i + 1])))
    shown = shortened(visible_token(trace.tokens[i]), min(limit, 20))
    return f"'{shown}' (tokens {first + 1}–{i + 1}): {_percent(together)}"


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
                 scale: str = "fixed", alternatives_note: str | None = None,
                 spans: Sequence[SpanRisk] = ()) -> str:
    """The answer as coloured token spans, spikes outlined, peak window underlined, each with a hover card.

    ``spans`` (riskiest first, e.g. the top of :func:`trace_core.rank_spans`) are boxed with a dashed frame and
    numbered by rank, box and number opening at the span's first letter (the spaces its first token starts with stay
    outside, coloured as that token); each of their tokens' cards names the span and, when known, its probability of
    being right.

    Every token is focusable (``tabindex="0"``); its card (``role="tooltip"``, referenced by ``aria-describedby``)
    opens on hover, on keyboard focus and, on touch screens, on a tap. The card shows the token's number and text, its
    probability, surprisal, entropy (or "not recorded"), rank when known and the top-k alternatives with their
    probabilities, then ``alternatives_note`` when given (e.g. why the alternatives show as ids). Pure HTML and CSS
    (:data:`HEATMAP_CSS`); no script.

    All text is HTML-escaped; control, bidi and zero-width characters show as :func:`visible_token` shows them (a
    newline also breaks the line). A token without text (bytes of a character that a later token completes) is a
    slim coloured bar rather than a glyph, so the text around it keeps its shape (Arabic letters still join across
    it); its card names the character. The answer's first strong character sets its direction (``dir="auto"``: an
    Arabic answer reads right to left); the cards stay left to right. Tokens longer than ``max_token_chars`` are
    shortened (the page says by how much).
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
    in_span: dict[int, tuple[int, SpanRisk]] = {}
    for rank, span in reversed(list(enumerate(spans, start=1))):  # a token in two boxed spans shows the riskier one
        for t in span.tokens.tolist():
            in_span[t] = (rank, span)
    parts = ['<div class="tr-heatmap" data-testid="trace-heatmap" dir="auto">']
    for i, token in enumerate(trace.tokens):
        classes, marks = ["tr-tok"], []
        badge = ""
        if i in in_span:
            rank, span = in_span[i]
            classes.append("tr-span")
            if in_span.get(i - 1, (None,))[0] != rank:
                classes.append("tr-span-first")
                badge = f'<sup class="tr-span-rank" aria-hidden="true">{rank}</sup>'
            if in_span.get(i + 1, (None,))[0] != rank:
                classes.append("tr-span-last")
            marks.append(f"riskiest span {rank} ({span.kind}"
                         + (f", {span.probability:.0%} likely right)" if span.probability is not None else ")"))
        if i in spikes:
            classes.append("tr-spike")
            marks.append("spike")
        if token == "":
            classes.append("tr-bytes")
        if start <= i < stop:
            classes.append("tr-peak")
            marks.append("peak window")
        card_id = f"{prefix}-{i}"
        card = _card_html(trace, i, card_id, probabilities[i], alt_p[i] if alt_p is not None else None,
                          alternatives=alternatives(trace, i) if alternatives is not None else None, marks=marks,
                          note=alternatives_note, limit=max_token_chars,
                          risk_share=risk[i] if risk is not None else None,
                          chosen_row=chosen_rows[i] if chosen_rows is not None else None)
        lead = _lead_spaces(token) if badge else ""
        if lead:  # the box and its number open at the span's first letter, not at the space before it
            parts.append(f'<span class="tr-lead" style="{styles[i]}">{lead}</span>')
        text = _token_html(token[len(lead):], max(max_token_chars - len(lead), 1))
        parts.append(f'{badge}<span class="{" ".join(classes)}" style="{styles[i]}" data-index="{i}" tabindex="0" '
                     f'aria-describedby="{card_id}">{text}{card}</span>')
    parts.append("</div>")
    return "".join(parts)


def _lead_spaces(token: str) -> str:
    """The spaces a token starts with, when letters or marks follow them (a token of spaces only keeps them)."""
    rest = token.lstrip(" ")
    return token[:len(token) - len(rest)] if rest else ""


def legend_html(scale: HeatmapScale, *, spans: bool = False, pieces: bool = False) -> str:
    """The colour legend: what the signal means, the ramp, the range it spans and which top was used, and samples of
    the spike and peak-window marks (and of the riskiest-span box when ``spans``, of the slim bar of a token without
    text when ``pieces``)."""
    title, _ = SIGNALS[scale.signal]
    stops = ", ".join(ramp(x) for x in np.linspace(0, 1, 6))
    unit = "" if scale.signal == "risk" else " nats"
    top = f"{scale.vmax:.2f}" + ("+" if scale.scale == "fixed" else "")  # a fixed top clips larger values
    return (f'<div class="tr-legend"><span>{html.escape(title)}</span>'
            f'<span class="tr-legend-bar" style="background:linear-gradient(to right, {stops})"></span>'
            f'<span class="tr-legend-range">0 … {top}{unit} ({SCALES[scale.scale]})</span>'
            '<span class="tr-sample tr-spike">spike</span><span class="tr-sample tr-peak">peak window</span>'
            + ('<span class="tr-sample tr-span tr-span-first tr-span-last">riskiest spans</span>' if spans else "")
            + (f'<span><span class="tr-sample tr-bytes" style="background:{ramp(0.5)}"></span> bytes of the next '
               'character</span>' if pieces else "")
            + '</div>')


# The card is placed under its token. Where the browser has anchor positioning with scoped anchor names, the card is
# fixed to the window and anchored to its token: under it, or above it where it would run past the window's bottom
# (flip-block: a token low in the window), and pushed left as far as needed to stay inside the window (a token near
# the right edge); fixed, it is also never cut by a scrolling box around the heatmap. Elsewhere it hangs from the
# token's left edge, at most 20rem (and 85% of the screen) wide.
HEATMAP_CSS = """
<style>
.tr-heatmap {position: relative; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 0.95rem;
  line-height: 2.1; white-space: pre-wrap; word-break: break-word; padding: 0.6rem 0.2rem;}
.tr-tok {position: relative; border-radius: 3px; padding: 1px 0; cursor: help;}
.tr-tok:focus {outline: none;}
.tr-tok:focus-visible {box-shadow: 0 0 0 2px #ffffff, 0 0 0 5px #2563eb;}
.tr-spike {outline: 2px solid #3b0764; outline-offset: 1px; font-weight: 700;}
.tr-peak {text-decoration: underline wavy #3b0764; text-underline-offset: 5px;}
.tr-span {border-top: 2px dashed #c2410c; border-bottom: 2px dashed #c2410c; border-radius: 0;}
.tr-span-first {border-inline-start: 2px dashed #c2410c; border-start-start-radius: 4px; border-end-start-radius: 4px;}
.tr-span-last {border-inline-end: 2px dashed #c2410c; border-start-end-radius: 4px; border-end-end-radius: 4px;}
.tr-lead {border-start-start-radius: 3px; border-end-start-radius: 3px; padding: 1px 0;}
.tr-span-rank {color: #c2410c; font: 700 0.65rem system-ui, sans-serif; margin-inline-end: 1px; user-select: none;}
.tr-mark {opacity: 0.55;}
.tr-bytes {padding: 1px 0.25em;}
.tr-esc {opacity: 0.8; font-style: italic;}
.tr-card {display: none; position: absolute; z-index: 1000; left: 0; top: calc(100% + 6px); box-sizing: border-box;
  width: max-content; min-width: 12rem; max-width: min(20rem, 85vw); padding: 0.45rem 0.6rem;
  background: #ffffff; color: #1f1f1f; border: 1px solid #c8c8c8; border-radius: 6px;
  box-shadow: 0 4px 14px rgba(0, 0, 0, 0.18); font: 400 0.8rem/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  white-space: normal; word-break: break-word; text-align: left; direction: ltr; unicode-bidi: isolate; cursor: auto;}
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
  .tr-card {position: fixed; position-anchor: --tr-tok; top: calc(anchor(bottom) + 6px);
    width: min(20rem, 100% - 16px); min-width: 0; max-width: none;
    left: clamp(8px, anchor(left), 100% - min(20rem, 100% - 16px) - 8px); position-try-fallbacks: flip-block;}
}
.tr-legend {display: flex; gap: 0.8rem; align-items: center; flex-wrap: wrap; font-size: 0.85rem; color: #555;}
.tr-legend-bar {display: inline-block; width: 140px; height: 12px; border-radius: 3px;}
.tr-sample {border-radius: 3px; padding: 1px 2px;}
.tr-sample.tr-bytes {padding: 1px 0.25em;}
</style>
"""

