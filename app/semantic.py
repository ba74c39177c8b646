"""The semantic baselines' input on the Calibrate page: every answer's token relevances from the sentence-embedding
model, computed in steps with a progress bar and a Stop (each answer is embedded once per token: the slow part).

What is computed is kept in the session, so Stop keeps it and "Continue" goes on from there; while stopped, the
evaluation runs without the semantic baselines and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import streamlit as st

from trace_core import Trace
from trace_core.methods.semantic import token_relevance_batch

from . import state

#: Answers embedded per step (one progress update each).
STEP = 64


def _stop(key: str) -> None:
    state.relevances(key)["stopped"] = True


def relevance_panel(traces: Sequence[Trace], key: str, embedder: Any) -> list[np.ndarray] | None:
    """The token relevances of ``traces`` (``key`` names them: the data and its traces), computed with a progress bar
    and a Stop; None while stopped (an info line and a Continue button say so)."""
    entry = state.relevances(key)
    done: list[np.ndarray] = entry["done"]
    n = len(traces)
    if len(done) >= n:
        return done
    if entry["stopped"]:
        cols = st.columns([4, 1], vertical_alignment="center")
        cols[0].info(f"Semantic baselines stopped after {len(done):,} of {n:,} answers: the results below are "
                     "without TokenSAR and MARS-style.")
        if cols[1].button("Continue", key="semantic_continue"):
            entry["stopped"] = False
            st.rerun()
        return None
    slot = st.empty()  # the Stop and the bar, gone once the relevances are complete
    with slot.container():
        st.button("Stop", key="semantic_stop", on_click=_stop, args=(key,),
                  help="Stops the semantic baselines; what is embedded is kept, and Continue goes on from there.")
        bar = st.progress(len(done) / n, text=_progress_text(len(done), n))
    for start in range(len(done), n, STEP):
        # each step is kept at once: Stop interrupts the script at its next Streamlit call (the progress update)
        done.extend(token_relevance_batch(embedder, [t.tokens for t in traces[start:start + STEP]]))
        bar.progress(len(done) / n, text=_progress_text(len(done), n))
    slot.empty()
    return done


def _progress_text(done: int, n: int) -> str:
    return f"Semantic baselines: embedding the answers' tokens ({done:,} of {n:,} answers)…"
