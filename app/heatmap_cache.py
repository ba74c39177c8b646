"""The Inspect page's heatmap HTML, kept by content: a rerun that changes another widget (the token details, the
colour scale and back) reuses the HTML instead of building a card for every token again."""

from __future__ import annotations

from collections.abc import Callable, Hashable

import streamlit as st

from trace_core import LoadedModel, Trace

from .keys import model_key, trace_digest
from .tokenizer_text import reads_alternatives

#: How many heatmaps the process keeps, for every session together (about 0.5 MB each for a 500-token answer).
HEATMAPS_KEPT = 16


def heatmap_cached(trace: Trace, lm: LoadedModel | None, key: tuple[Hashable, ...], render: Callable[[], str]) -> str:
    """``render()`` (the heatmap HTML of ``trace``), kept while the answer's content, the model that reads its
    alternatives and ``key`` (everything else the HTML depends on: the signal, the scale, the alternatives note) stay
    the same. Keyed by :func:`app.keys.trace_digest`, and by :func:`app.keys.model_key` only where the loaded
    model's tokenizer writes the alternatives' text (:func:`app.tokenizer_text.reads_alternatives`): equal answers
    render once, whichever session holds them, and every caller gets its own copy of the text."""
    reader = model_key(lm) if reads_alternatives(lm, trace) else None
    return _rendered(trace_digest(trace), reader, key, render)


@st.cache_data(max_entries=HEATMAPS_KEPT, show_spinner=False)
def _rendered(trace: str, reader: str | None, key: tuple[Hashable, ...], _render: Callable[[], str]) -> str:
    return _render()
