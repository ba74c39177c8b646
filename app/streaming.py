"""Inspect's streamed answer: the heatmap fills in as the model writes, with a Stop that keeps what was written.

Stop is a button: its click reruns the page, which interrupts this loop at its next Streamlit call (a redraw). Every
partial trace is in the session before it is drawn, so the rerun finds the answer as far as it was written, its
``finish_reason`` "stopped" (:func:`trace_core.record.stream_trace`), and Inspect shows it like any answer.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Generator
from typing import Any, cast

import streamlit as st

from trace_core import DecodingConfig, Trace
from trace_core.record import stream_trace

from . import state
from .heatmap import HEATMAP_CSS, heatmap_html
from .tokenizer_text import alternatives_for

#: Redraws of the growing heatmap per second, at most.
REDRAWS_PER_SECOND = 10
#: Bytes of heatmap HTML sent per second, at most: each redraw sends the whole answer's (about 1 kB per token with
#: its hover card) and the browser lays it all out again, so a long answer is redrawn less often (about every 1.2 s
#: at 512 tokens). Measured on 2 cores with the browser beside the server, 512 tokens: 76 s with ten redraws a
#: second whatever the size, 13 s at 1 MB/s, 8 s at 400 kB/s (the model alone: 5 s).
HTML_BYTES_PER_SECOND = 400_000
#: The session key of the Stop button.
STOP_KEY = "stop_inspect"


def stream_answer(lm: Any, prompt: str, config: DecodingConfig) -> None:
    """Generate the answer to ``prompt`` into the page: a Stop button and the heatmap of the answer so far, redrawn
    at most :data:`REDRAWS_PER_SECOND` times a second and within :data:`HTML_BYTES_PER_SECOND`; each partial trace
    is stored as Inspect's answer (:func:`app.state.set_inspect_trace`) before it is drawn. Both are removed when
    the answer is complete, and the complete trace (the one :func:`trace_core.generate_trace` gives) is stored.

    Raises what :func:`~trace_core.record.stream_trace` raises (ValueError before anything is drawn, ServerError);
    the stream is closed however the loop ends (a Stop or another rerun included), so no generation goes on.
    """
    stop = st.empty()
    stop.button("Stop", key=STOP_KEY, help="Stops the answer here; the tokens written so far are kept.")
    view = st.empty()
    view.caption("Generating…")
    signal, scale = state.heatmap_choice()
    alternatives = alternatives_for(lm)
    next_draw = 0.0
    try:
        # stream_trace returns a generator (its Iterator annotation hides close(), which stops the generation)
        traces = cast("Generator[Trace, None, None]",
                      stream_trace(lm, prompt, config=config, min_interval=1 / REDRAWS_PER_SECOND))
        with contextlib.closing(traces) as stream:
            for trace in stream:
                state.set_inspect_trace(trace)  # kept before it is drawn: a Stop during the redraw keeps it
                if not len(trace) or time.monotonic() < next_draw:
                    continue
                shown = signal if signal != "entropy" or trace.has_entropy else "surprisal"
                page = (HEATMAP_CSS + f"<p>Writing… {len(trace):,} token{'' if len(trace) == 1 else 's'}</p>"
                        + heatmap_html(trace, signal=shown, alternatives=alternatives,
                                       scale=scale if shown != "risk" else "fixed"))
                view.html(page)
                next_draw = time.monotonic() + max(1 / REDRAWS_PER_SECOND, len(page) / HTML_BYTES_PER_SECOND)
    finally:
        stop.empty()
        view.empty()
