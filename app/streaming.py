"""Inspect's streamed answer: the heatmap fills in as the model writes, with a Stop that keeps what was written.

Stop is a button: its click reruns the page, which interrupts this loop at its next Streamlit call (a redraw). Every
partial trace is in the session before it is drawn, so the rerun finds the answer as far as it was written, its
``finish_reason`` "stopped" (:func:`trace_core.record.stream_trace`), and Inspect shows it like any answer.
"""

from __future__ import annotations

import contextlib
from typing import Any

import streamlit as st

from trace_core import DecodingConfig
from trace_core.record import stream_trace

from . import state
from .components import HEATMAP_CSS, heatmap_html
from .services import alternatives_for

#: Redraws of the growing heatmap per second, at most (each redraw sends the whole answer's HTML to the browser).
REDRAWS_PER_SECOND = 10
#: The session key of the Stop button.
STOP_KEY = "stop_inspect"


def stream_answer(lm: Any, prompt: str, config: DecodingConfig) -> None:
    """Generate the answer to ``prompt`` into the page: a Stop button and the heatmap of the answer so far, redrawn
    at most :data:`REDRAWS_PER_SECOND` times a second; each partial trace is stored as Inspect's answer
    (:func:`app.state.set_inspect_trace`) before it is drawn. Both are removed when the answer is complete, and the
    complete trace (the one :func:`trace_core.generate_trace` gives) is stored.

    Raises what :func:`~trace_core.record.stream_trace` raises (ValueError before anything is drawn, ServerError);
    the stream is closed however the loop ends (a Stop or another rerun included), so no generation goes on.
    """
    stop = st.empty()
    stop.button("Stop", key=STOP_KEY, help="Stops the answer here; the tokens written so far are kept.")
    view = st.empty()
    view.caption("Generating…")
    signal = st.session_state.get("signal", "surprisal")
    scale = st.session_state.get("colour_scale", "fixed")
    alternatives = alternatives_for(lm)
    try:
        with contextlib.closing(stream_trace(lm, prompt, config=config,
                                             min_interval=1 / REDRAWS_PER_SECOND)) as stream:
            for trace in stream:
                state.set_inspect_trace(trace)  # kept before it is drawn: a Stop during the redraw keeps it
                if not len(trace):
                    continue
                shown = signal if signal != "entropy" or trace.has_entropy else "surprisal"
                view.html(HEATMAP_CSS + f"<p>Writing… {len(trace):,} tokens</p>"
                          + heatmap_html(trace, signal=shown, alternatives=alternatives,
                                         scale=scale if shown != "risk" else "fixed"))
    finally:
        stop.empty()
        view.empty()
