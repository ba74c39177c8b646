"""Page parts that several pages draw the same way: the active calibrator's note, loading a saved calibrator, the
choice to use a newly fitted one, and the detail view of one answer."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd
import streamlit as st

from trace_core import Trace, explain_trace
from trace_core.calibrate import load_calibrator

from . import state
from .components import HEATMAP_CSS, control_safe, heatmap_html, legend_html, md_literal, signal_values
from .services import alternatives_for, alternatives_note, describe_calibrator, digest, fitted_calibrator

#: Where the calibrator is used, for the sentences that say so.
USED_BY = "Inspect, Compare and Flag & export"


def active_calibrator_note() -> state.ActiveCalibrator | None:
    """A caption naming the active calibrator (kind, origin, what it was fitted on, model, entropy source), or
    saying there is none; returns it."""
    active = state.active_calibrator()
    if active is None:
        st.caption("No calibrator yet: fit one on the Calibrate page, or load a saved one on Flag & export.")
    else:
        st.caption(f"**Active calibrator:** {md_literal(describe_calibrator(active))}.")
    return active


def load_calibrator_panel() -> None:
    """An uploader for a calibrator JSON; a file that reads makes it the active calibrator (uploading is the user's
    choice), a file that does not leaves the active one in place and says why. Each file is loaded once: a rerun
    with the same file in the uploader does not undo a later choice."""
    with st.expander("Load a saved calibrator"):
        uploaded = st.file_uploader("Calibrator JSON (from the Calibrate page or `trace-core fit`)", type=["json"],
                                    key="calibrator_upload")
        if uploaded is None:
            return
        data = uploaded.getvalue()
        ident = (uploaded.name, digest(data))
        if state.loaded_calibrator_file() == ident:
            st.caption(f"{md_literal(uploaded.name)} was loaded; upload another file to load it.")
            return
        try:
            model = load_calibrator(data)
        except ValueError as exc:
            problems = getattr(exc, "problems", None) or [str(exc)]
            st.error(md_literal(f"{uploaded.name}: not a calibrator this version can read: " + "; ".join(problems)))
            return
        state.set_loaded_calibrator_file(ident)
        state.set_calibrator(fitted_calibrator(model, origin=f"loaded from '{uploaded.name}'", pinned=True))
        st.success(f"Loaded {md_literal(uploaded.name)}: it is now the active calibrator.")


def offer_calibrator(candidate: state.ActiveCalibrator) -> None:
    """The calibrator the Calibrate page fitted: made active when there is none or the active one was not chosen by
    the user (it was this page's earlier fit); a loaded or chosen one is replaced only with the button."""
    active = state.active_calibrator()
    if active is not None and active.key == candidate.key:
        st.caption(f"It is the active calibrator, used by {USED_BY}.")
    elif active is None or not active.pinned:
        state.set_calibrator(candidate)
        st.caption(f"It is now the active calibrator, used by {USED_BY}.")
    else:
        st.info(f"The active calibrator is another one: {md_literal(describe_calibrator(active))}. It stays in use "
                "until you choose the one fitted here.")
        if st.button("Use the calibrator fitted here", key="use_fitted_calibrator"):
            state.set_calibrator(dataclasses.replace(candidate, pinned=True))
            st.rerun()


def answer_details(trace: Trace, row: pd.Series, *, row_column: str, extra: dict[str, Any] | None = None) -> None:
    """One answer in full: its row, prompt, the answer's heatmap, reference and label when the file has them."""
    exp = explain_trace(trace)
    facts = [f"**Row {int(row[row_column])}**", f"TRACE confidence {exp.confidence:.3f}"]
    facts += [f"{k} {v}" for k, v in (extra or {}).items()]
    if "label" in row.index:
        facts.append("labeled **correct**" if int(row["label"]) == 1 else "labeled **wrong**")
    st.markdown(" · ".join(facts))
    st.caption("Prompt")
    st.code(control_safe(str(row.get("prompt", trace.prompt))), language=None, wrap_lines=True)
    lm = state.model()
    note = alternatives_note(lm, trace)
    st.caption("Answer (hover or focus a token for its details)")
    st.html(HEATMAP_CSS + legend_html(signal_values(trace, "surprisal", exp))
            + heatmap_html(trace, signal="surprisal", explanation=exp, alternatives=alternatives_for(lm),
                           alternatives_note=note))
    if "reference" in row.index and not pd.isna(row["reference"]):
        st.caption("Reference")
        st.code(control_safe(str(row["reference"])), language=None, wrap_lines=True)
