"""The Plotly figure of one answer: surprisal and entropy over token positions. The evaluation's figures
(reliability, risk–coverage, ROC, each method's colour) are :mod:`trace_core.report.figures`, shared with the HTML
report.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import plotly.graph_objects as go

from trace_core import Trace, TraceExplanation, explain_trace

from .text import shortened, visible_token


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
    labels = [html.escape(shortened(visible_token(t), 40), quote=False) for t in trace.tokens]
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
