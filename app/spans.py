"""Inspect's span view: the answer's spans ranked by risk, boxed on the heatmap and listed with their probability."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from trace_core import Trace, TraceExplanation, rank_spans, span_risks
from trace_core.methods.spans import OTHER_SCRIPT_NOTE, SpanRisk, default_span_calibrator, mostly_other_script

from .text import md_literal, visible_token

BOXED = 3  # riskiest spans boxed on the heatmap
SPAN_NOTE = ("Spans are cut by fixed rules (sentences; dates, numbers and names inside them). A span's probability of "
             "being right comes from the span calibrator shipped with the package, fitted on SmolLM2-135M's "
             "paragraphs about countries: it ranks spans better than chance there but is no sharper than the base "
             "rate (docs/results.md), so read it as a ranking, and fit your own for another model or task.")
#: What the table's ranks count: two rankings, each from 1, the first numbered as the boxes on the answer are.
RANK_NOTE = ("Names, numbers and dates are ranked among themselves, riskiest first (the boxes on the answer carry "
             "these numbers); sentences are ranked among sentences.")


@st.cache_resource(show_spinner=False)
def _calibrator():
    return default_span_calibrator()


def ranked_spans(trace: Trace, explanation: TraceExplanation) -> tuple[list[SpanRisk], list[SpanRisk]]:
    """(the dates, numbers and names, the sentences), each riskiest first, with their probability of being right."""
    risks = span_risks(trace, explanation=explanation, calibrator=_calibrator())
    return rank_spans(risks, level="fine"), rank_spans(risks, level="sentence")


def boxed_spans(fine: list[SpanRisk], sentences: list[SpanRisk]) -> list[SpanRisk]:
    """The spans to box on the heatmap: the riskiest dates, numbers and names, else the riskiest sentence."""
    return fine[:BOXED] if fine else sentences[:1]


def spans_frame(fine: list[SpanRisk], sentences: list[SpanRisk]) -> pd.DataFrame:
    """One row per span, riskiest first within each group (dates/numbers/names, then sentences)."""
    rows = []
    for group in (fine, sentences):
        for rank, r in enumerate(group, start=1):
            rows.append({"rank": rank, "kind": r.kind, "span": visible_token(r.span.text)[:200],
                         "probability right": r.probability, "peak surprisal": r.peak_surprisal,
                         "share of TRACE risk": r.risk_share, "tokens": len(r.tokens),
                         "characters": f"{r.span.start}–{r.span.end}"})
    return pd.DataFrame(rows, columns=["rank", "kind", "span", "probability right", "peak surprisal",
                                       "share of TRACE risk", "tokens", "characters"])


def other_script_note(text: str) -> str | None:
    """A caution for an answer mostly outside the Latin alphabet (:func:`trace_core.methods.spans.mostly_other_script`);
    None for a mostly Latin one (or one without letters).

    >>> other_script_note("The capital is Ulaanbaatar.") is None, other_script_note("東京は日本の首都です。") is None
    (True, False)
    """
    if not mostly_other_script(text):
        return None
    return f"Most of this answer is not in the Latin alphabet: {OTHER_SCRIPT_NOTE}."


def spans_panel(fine: list[SpanRisk], sentences: list[SpanRisk], answer: str = "") -> None:
    """The list of spans by risk, under the heatmap (``answer``: its text, for :func:`other_script_note`)."""
    st.subheader("Spans by risk")
    if not fine and not sentences:
        st.caption("This answer has no span (only whitespace).")
        return
    caution = other_script_note(answer)
    if caution:
        st.warning(caution)
    if fine:
        top = fine[0]
        st.markdown(f"Riskiest name, number or date: **{_escaped(top.span.text)}** ({top.kind}, "
                    f"{top.probability:.0%} likely right, peak surprisal {top.peak_surprisal:.2f} nats).")
    both = bool(fine and sentences)
    if both:  # two rankings in one table, each from 1: say so, or the second 1 reads as a tie
        st.caption(RANK_NOTE)
    st.dataframe(spans_frame(fine, sentences), hide_index=True, width="stretch", column_config={
        "rank": st.column_config.NumberColumn("rank in group" if both else "rank"),
        "probability right": st.column_config.ProgressColumn("probability right", min_value=0.0, max_value=1.0,
                                                             format="percent"),
        "peak surprisal": st.column_config.NumberColumn(format="%.2f"),
        "share of TRACE risk": st.column_config.NumberColumn(format="percent")})
    st.caption(SPAN_NOTE)


def _escaped(text: str) -> str:
    return md_literal(visible_token(text)[:200])


def riskiest_span_words(row: pd.Series) -> str:
    """A flagged row's riskiest span in words: ``'Khantak' (name, 38% likely right)``; "—" when it has none."""
    if not row.get("riskiest_span_kind"):
        return "—"
    return _escaped(f"'{str(row['riskiest_span_text'])[:200]}' ({row['riskiest_span_kind']}, "
                    f"{float(row['riskiest_span_probability']):.0%} likely right)")
