"""Rendering two answers to one prompt side by side: the aligned token grid (escaped HTML) and their numbers.

Pure functions: nothing here draws on the page. The grid is a row of small two-cell column blocks (answer A on top,
answer B below, one block per :class:`trace_core.traces.align.Alignment` column) that wraps like text, so a long answer
never needs a horizontal scroll bar. Every token is HTML-escaped and its control and bidi characters are shown as
escapes.
"""

from __future__ import annotations

import html
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from trace_core import DecodingConfig, ScoreCalibrator, Trace, TracePlus, explain_trace
from trace_core.traces.align import Alignment, align_tokens

from .explain import probability_title
from .heatmap import card_html, card_id_prefix, ramp, signal_values
from .text import text_direction, visible_token

#: The signals the grid can colour by: both have a fixed scale, so the two rows' colours compare.
GRID_SIGNALS = ("surprisal", "entropy")

Alternatives = Callable[[Trace, int], Sequence[str]]


@dataclass(frozen=True, eq=False)
class Comparison:
    """Two answers to one prompt, as the Compare page keeps them between reruns.

    Attributes
    ----------
    prompt : str
    a, b : Trace
        Side A (the sidebar's model and decoding) and side B.
    model_b : str or None
        The model name typed for side B; None when B used A's model.
    alignment : Alignment
        Computed from the two traces' tokens.
    """

    prompt: str
    a: Trace
    b: Trace
    model_b: str | None = None
    alignment: Alignment = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "alignment", align_tokens(self.a.tokens, self.b.tokens))


def describe_decoding(decoding: DecodingConfig | Mapping[str, Any]) -> str:
    """A short description of decoding settings: ``"greedy"`` or ``"sample · T 1.5 · top-p 0.9 · seed 0"``.

    A trace's ``metadata.decoding`` dict is accepted too; an empty one (an imported trace) gives ``"—"``.
    """
    if isinstance(decoding, Mapping):
        if not decoding:
            return "—"
        decoding = DecodingConfig.from_dict(decoding)
    if not decoding.do_sample:
        return "greedy"
    parts = ["sample", f"T {decoding.temperature:g}"]
    if decoding.top_p < 1.0:
        parts.append(f"top-p {decoding.top_p:g}")
    if decoding.top_k:
        parts.append(f"top-k {decoding.top_k}")
    if decoding.seed is not None:
        parts.append(f"seed {decoding.seed}")
    return " · ".join(parts)


def _entropy_source(trace: Trace) -> str:
    meta = trace.metadata
    if meta.entropy_source == "top_k" and meta.entropy_k is not None:
        return f"top_k (k={meta.entropy_k})"
    return meta.entropy_source


def compare_metrics(a: Trace, b: Trace, calibrator: Any = None, *,
                    labels: tuple[str, str] = ("A", "B")) -> pd.DataFrame:
    """The two answers' numbers, one row each (indexed by ``labels``).

    Columns: ``model``, ``decoding``, ``tokens``, ``TRACE confidence`` (``exp(-R)``, :func:`trace_core.explain_trace`),
    ``TRACE variant`` (``"TRACE"``, or the surprisal-only variant for a trace without entropy: the two do not rank on
    one scale), ``TRACE+ probability`` (when ``calibrator`` is a :class:`trace_core.TracePlus`; ``SeqLogP
    probability`` and so on for a :class:`trace_core.ScoreCalibrator`, :func:`app.explain.probability_title`),
    ``mean surprisal``, ``max surprisal`` (nats) and ``entropy source``. An empty answer has NaN numbers.

    A calibrator fitted on another model or entropy source warns in the library; the page shows those notes itself
    (:func:`app.calibrators.provenance_notes`), so the warning is silenced here.
    """
    rows = []
    for trace in (a, b):
        if not isinstance(trace, Trace):
            raise TypeError(f"expected two Trace objects, got {type(trace).__name__}")
        exp = explain_trace(trace)
        empty = len(trace) == 0
        row = {"model": trace.metadata.model_id or "—", "decoding": describe_decoding(trace.metadata.decoding),
               "tokens": len(trace), "TRACE confidence": exp.confidence, "TRACE variant": exp.variant}
        if isinstance(calibrator, (TracePlus, ScoreCalibrator)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                row[f"{probability_title(calibrator)} probability"] = (
                    math.nan if empty else float(calibrator.predict_proba([trace])[0]))
        row["mean surprisal"] = math.nan if empty else float(np.mean(trace.surprisal))
        row["max surprisal"] = math.nan if empty else float(np.max(trace.surprisal))
        row["entropy source"] = _entropy_source(trace)
        rows.append(row)
    return pd.DataFrame(rows, index=list(labels))


def _cell_text(token: str, limit: int) -> str:
    """A token for one grid cell, escaped, on one line (:func:`app.text.visible_token`: newline and tab as
    symbols, control and bidi characters as escapes); long tokens shortened. A token without text (bytes of a
    character the next token completes) has none here: its cell is a slim coloured bar, as on the Inspect page."""
    if token == "":
        return ""
    shown = visible_token(token)
    if len(shown) > limit:
        shown = shown[:limit] + "…"
    return html.escape(shown, quote=True)


def _cell(trace: Trace, i: int, side: str, label: str, norm: np.ndarray, spikes: set[int],
          peak: tuple[int, int], alternatives: Alternatives | None, limit: int) -> str:
    classes = ["tc-cell", "tr-tok"]
    if trace.tokens[i] == "":
        classes.append("tr-bytes")
    if i in spikes:
        classes.append("tr-spike")
    if peak[0] <= i < peak[1]:
        classes.append("tr-peak")
    # the Inspect page's hover card (hover, keyboard focus, tap), headed by the answer's label
    card_id = f"{card_id_prefix(trace)}-{side}-{i}"
    card = card_html(trace, i, card_id, alternatives=alternatives(trace, i) if alternatives is not None else None,
                     marks=[f"answer {label}"])
    colour = "#ffffff" if norm[i] > 0.62 else "#1f1f1f"
    return (f'<span class="{" ".join(classes)}" style="background:{ramp(norm[i])};color:{colour}" '
            f'data-side="{side}" data-index="{i}" tabindex="0" aria-describedby="{card_id}">'
            f"{_cell_text(trace.tokens[i], limit)}{card}</span>")


def aligned_heatmap_html(a: Trace, b: Trace, alignment: Alignment, *, signal: str = "surprisal",
                         labels: tuple[str, str] = ("A", "B"),
                         alternatives: tuple[Alternatives | None, Alternatives | None] = (None, None),
                         max_token_chars: int = 24) -> str:
    """Two answers as a wrapping grid of token columns: A on top, B below, a gap as an empty cell.

    Parameters
    ----------
    a, b : Trace
        The two answers; ``alignment`` must be ``align_tokens(a.tokens, b.tokens)``.
    alignment : Alignment
    signal : {"surprisal", "entropy"}
        What colours each token (one fixed scale for both rows, :func:`app.heatmap.signal_values`).
    labels : tuple of str
        The rows' names, shown at the start of the grid and in each token's hover text.
    alternatives : pair of callables or None
        Each side's function giving the text of a token's top-k alternatives
        (:func:`app.tokenizer_text.alternatives_for`).
    max_token_chars : int
        Longer tokens are shortened in their cell (the hover text has them whole).

    Returns
    -------
    str
        HTML (``data-testid="compare-heatmap"``, ``dir="rtl"`` when both answers are right to left:
        :func:`app.text.text_direction`): one ``tc-col`` block per column, the first divergence's block marked
        ``tc-diverge`` with a rule and the word "diverge", blocks whose tokens differ marked ``tc-differs``.
        Spikes and the peak window are marked as on the Inspect page (:data:`app.heatmap.HEATMAP_CSS`).

    Raises
    ------
    ValueError
        ``signal`` is not one of :data:`GRID_SIGNALS`, a trace has no entropy for ``signal="entropy"``, or
        ``alignment`` does not belong to these traces.
    """
    if signal not in GRID_SIGNALS:
        raise ValueError(f"`signal` must be one of {list(GRID_SIGNALS)}, got {signal!r}")
    if alignment.a != tuple(a.tokens) or alignment.b != tuple(b.tokens):
        raise ValueError("`alignment` was made from other tokens than these traces'; use align_tokens(a.tokens, "
                         "b.tokens)")
    sides = []
    for side, trace, label, alts in (("a", a, labels[0], alternatives[0]), ("b", b, labels[1], alternatives[1])):
        exp = explain_trace(trace)
        sides.append((side, trace, label, alts, signal_values(trace, signal, exp).normalized(),
                      {int(s) for s in exp.spikes}, exp.peak_window))

    names = "".join(f'<span class="tc-cell tc-label">{html.escape(label)}</span>' for label in labels)
    # Right to left when both answers are (an Arabic answer's columns), from their text: the row labels and the
    # cards, which come first in the grid, would decide it for dir="auto". One grid has one direction, so answers of
    # two directions (an Arabic one beside an English one) keep left to right, where neither reads backwards.
    found = {d for d in (text_direction(a.answer), text_direction(b.answer)) if d is not None}
    direction = "rtl" if found == {"rtl"} else "ltr"
    parts = [COMPARE_CSS, f'<div class="tc-grid" data-testid="compare-heatmap" dir="{direction}">',
             f'<div class="tc-col tc-head"><span class="tc-mark"></span>{names}</div>']
    for k, column in enumerate(alignment.columns):
        classes = ["tc-col"]
        if k == alignment.first_divergence:
            classes.append("tc-diverge")
        elif not alignment.agrees(k):
            classes.append("tc-differs")
        mark = '<span class="tc-flag">diverge</span>' if k == alignment.first_divergence else ""
        cells = []
        for (side, trace, label, alts, norm, spikes, peak), index in zip(sides, column, strict=True):
            if index is None:
                cells.append(f'<span class="tc-cell tc-gap" data-side="{side}" title="no token here"></span>')
            else:
                cells.append(_cell(trace, index, side, label, norm, spikes, peak, alts, max_token_chars))
        parts.append(f'<div class="{" ".join(classes)}" data-column="{k}"><span class="tc-mark">{mark}</span>'
                     + "".join(cells) + "</div>")
    parts.append("</div>")
    return "".join(parts)


COMPARE_CSS = """
<style>
.tc-grid {display: flex; flex-wrap: wrap; align-items: flex-start; row-gap: 0.5rem; padding: 0.4rem 0.2rem;
  font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 0.92rem;}
.tc-col {display: flex; flex-direction: column; margin-inline-end: 1px; border-inline-start: 2px solid transparent;
  position: relative;}
.tc-cell {display: block; min-width: 0.7rem; height: 1.55rem; line-height: 1.55rem; margin: 2px 0; padding: 0 1px;
  white-space: pre; border-radius: 3px;}
.tc-mark {display: block; height: 1rem; line-height: 1rem; font-size: 0.68rem; color: #b91c1c; font-weight: 700;
  font-family: sans-serif;}
/* the label never widens its column */
.tc-flag {position: absolute; inset-inline-start: 2px; top: 0; white-space: nowrap;}
.tc-cell.tr-peak {text-underline-offset: 3px;}
.tc-gap {background: repeating-linear-gradient(135deg, #f1f1f1 0 4px, #fafafa 4px 8px); border: 1px dashed #ccc;
  box-sizing: border-box; min-width: 1.2rem;}
.tc-head .tc-label {font-family: sans-serif; font-weight: 700; color: #444; padding-inline-end: 0.4rem;}
.tc-col.tc-diverge {border-inline-start-color: #b91c1c; padding-inline-start: 1px;}
.tc-col.tc-differs .tc-mark {border-bottom: 2px dotted #9ca3af; height: 0.6rem; margin-bottom: 0.4rem;}
/* Without anchor positioning a column (one token wide) is the card's containing block: the card gets a width of its
   own and opens towards the rest of the answer. With it, the card is fixed to the window as on Inspect
   (app.heatmap.HEATMAP_CSS). */
@supports not ((anchor-scope: --a) and (position-anchor: --a)) {
  .tc-col .tr-card {width: 20rem; min-width: 12rem; max-width: 85vw; left: 0;}
  .tc-grid[dir="rtl"] .tc-col .tr-card {left: auto; right: 0;}
}
.tc-cell.tr-bytes {min-width: 0.35rem;}
</style>
"""
