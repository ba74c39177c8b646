"""Rendering: the token heatmap (escaped HTML) and the Plotly figures. Pure functions, no Streamlit calls.

Every piece of text that comes from a model or a file goes through :func:`html.escape` before it reaches HTML, so a
token such as ``<img src=x onerror=alert(1)>`` shows literally.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from trace_core import Trace, TraceExplanation, bin_probabilities, explain_trace, reliability_table, roc_curve
from trace_core.metrics import risk_coverage_curve

SIGNALS = {
    "surprisal": ("Surprisal (nats): how unexpected the chosen token was", 6.0),
    "entropy": ("Entropy (nats): how undecided the model was", 4.0),
    "risk": ("TRACE risk share: how much the token adds to the answer's risk", None),
}

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


@dataclass(frozen=True)
class HeatmapScale:
    signal: str
    values: np.ndarray  # (T,) raw values
    vmax: float

    def normalized(self) -> np.ndarray:
        return np.clip(self.values / self.vmax, 0.0, 1.0) if self.vmax > 0 else np.zeros_like(self.values)


def signal_values(trace: Trace, signal: str, explanation: TraceExplanation | None = None) -> HeatmapScale:
    """Per-token values of the chosen signal and the top of its colour scale."""
    if signal not in SIGNALS:
        raise ValueError(f"`signal` must be one of {list(SIGNALS)}, got {signal!r}")
    if signal == "surprisal":
        return HeatmapScale(signal, trace.surprisal, SIGNALS["surprisal"][1])
    if signal == "entropy":
        return HeatmapScale(signal, trace.entropy, SIGNALS["entropy"][1])
    exp = explanation or explain_trace(trace)
    values = exp.contributions
    return HeatmapScale(signal, values, float(values.max()) if values.size else 1.0)


def _visible(token: str) -> str:
    """Escaped token text with whitespace made visible but kept: newlines break lines, tabs and spaces stay."""
    text = html.escape(token, quote=True)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text.replace("\n", '<span class="tr-nl">↵</span><br/>').replace("\t", "&emsp;")


def control_safe(text: str) -> str:
    """Replace control and bidi-override characters with visible escapes (they could reorder or hide text)."""
    out = []
    for ch in text:
        code = ord(ch)
        if (code < 32 and ch not in "\n\t") or 0x7F <= code < 0xA0 or 0x202A <= code <= 0x202E \
                or 0x2066 <= code <= 0x2069 or code in (0x200E, 0x200F, 0x061C):
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def md_literal(text: str) -> str:
    """Untrusted text for a Streamlit Markdown string (``st.error``, ``st.warning``, ``st.caption``), shown literally.

    Backslash escapes are not enough (``:material/...:`` and ``:red[...]`` still render), so every ASCII punctuation
    character becomes a numeric character reference, which Markdown shows as that character and never parses.
    """
    return "".join(f"&#{ord(ch)};" if ch.isascii() and not ch.isalnum() and not ch.isspace() else ch
                   for ch in control_safe(str(text)))


def token_tooltip(trace: Trace, i: int, alternatives: Sequence[str] | None) -> str:
    """Plain-text hover details of token i: probability, surprisal, entropy, rank and the top-k alternatives."""
    p = float(np.exp(-trace.surprisal[i]))
    lines = [f"token {i + 1}: {control_safe(trace.tokens[i])!r}",
             f"probability {p:.1%} · surprisal {trace.surprisal[i]:.2f} · entropy {trace.entropy[i]:.2f}"]
    if trace.ranks is not None:
        lines.append(f"rank {int(trace.ranks[i])} of the vocabulary")
    if trace.n_alternatives:
        lines.append("alternatives:")
        for j in range(trace.n_alternatives):
            label = alternatives[j] if alternatives is not None else f"id {int(trace.top_ids[i, j])}"
            lines.append(f"  {np.exp(trace.top_logprobs[i, j]):6.1%}  {control_safe(label)!r}")
    return "\n".join(lines)


def heatmap_html(trace: Trace, *, signal: str = "surprisal", explanation: TraceExplanation | None = None,
                 alternatives: Callable[[Trace, int], Sequence[str]] | None = None, max_token_chars: int = 200) -> str:
    """The answer as coloured token spans, spikes outlined, peak window underlined; hover shows the details.

    All token text is HTML-escaped (``<``, ``>``, ``&``, quotes); control and bidi characters are shown as escapes.
    Tokens longer than ``max_token_chars`` are shortened in the page (the hover text says so).
    """
    exp = explanation or explain_trace(trace)
    scale = signal_values(trace, signal, exp)
    norm = scale.normalized()
    spikes = set(int(i) for i in exp.spikes)
    start, stop = exp.peak_window
    parts = ['<div class="tr-heatmap" data-testid="trace-heatmap">']
    for i, token in enumerate(trace.tokens):
        shown = control_safe(token)
        if len(shown) > max_token_chars:
            shown = shown[:max_token_chars] + f"… (+{len(shown) - max_token_chars} chars)"
        if shown == "":
            shown = "∅"  # a byte-level piece completed by the next token
        classes = ["tr-tok"]
        if i in spikes:
            classes.append("tr-spike")
        if start <= i < stop:
            classes.append("tr-peak")
        tip = token_tooltip(trace, i, alternatives(trace, i) if alternatives is not None else None)
        style = f"background:{ramp(norm[i])};color:{_text_colour(norm[i])}"
        parts.append(f'<span class="{" ".join(classes)}" style="{style}" data-index="{i}" '
                     f'title="{html.escape(tip, quote=True)}">{_visible(shown)}</span>')
    parts.append("</div>")
    return "".join(parts)


def legend_html(scale: HeatmapScale) -> str:
    title, _ = SIGNALS[scale.signal]
    stops = ", ".join(ramp(x) for x in np.linspace(0, 1, 6))
    top = f"{scale.vmax:.2f}" + ("+" if scale.signal != "risk" else "")
    return (f'<div class="tr-legend"><span>{html.escape(title)}</span>'
            f'<span class="tr-legend-bar" style="background:linear-gradient(to right, {stops})"></span>'
            f'<span>0 … {top}</span>'
            '<span class="tr-tok tr-spike">spike</span><span class="tr-tok tr-peak">peak window</span></div>')


HEATMAP_CSS = """
<style>
.tr-heatmap {font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 0.95rem; line-height: 2.1;
  white-space: pre-wrap; word-break: break-word; padding: 0.6rem 0.2rem;}
.tr-tok {border-radius: 3px; padding: 1px 0; cursor: help;}
.tr-tok.tr-spike {outline: 2px solid #3b0764; outline-offset: 1px; font-weight: 700;}
.tr-tok.tr-peak {text-decoration: underline wavy #3b0764; text-underline-offset: 5px;}
.tr-nl {opacity: 0.45;}
.tr-legend {display: flex; gap: 0.8rem; align-items: center; flex-wrap: wrap; font-size: 0.85rem; color: #555;}
.tr-legend-bar {display: inline-block; width: 140px; height: 12px; border-radius: 3px;}
</style>
"""


def trace_figure(trace: Trace, explanation: TraceExplanation | None = None) -> go.Figure:
    """Surprisal and entropy over token positions, the peak window shaded and spikes marked."""
    exp = explanation or explain_trace(trace)
    x = np.arange(1, len(trace) + 1)
    # Plotly reads tags in hover text (<b>, <span style>, <a>): escaped, a token shows as typed.
    labels = [html.escape(control_safe(t)[:40], quote=False) for t in trace.tokens]
    fig = go.Figure()
    start, stop = exp.peak_window
    if stop > start:
        fig.add_vrect(x0=start + 0.5, x1=stop + 0.5, fillcolor="#fdae6b", opacity=0.3, line_width=0,
                      annotation_text="peak window", annotation_position="top left")
    fig.add_trace(go.Scatter(x=x, y=trace.surprisal, mode="lines+markers", name="surprisal", customdata=labels,
                             hovertemplate="token %{x}: %{customdata}<br>surprisal %{y:.2f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=x, y=trace.entropy, mode="lines+markers", name="entropy", customdata=labels,
                             line=dict(dash="dot"),
                             hovertemplate="token %{x}: %{customdata}<br>entropy %{y:.2f}<extra></extra>"))
    if len(exp.spikes):
        spikes = np.asarray(exp.spikes)
        fig.add_trace(go.Scatter(x=spikes + 1, y=trace.surprisal[spikes], mode="markers", name="spike",
                                 marker=dict(symbol="diamond-open", size=14, line=dict(width=2)), hoverinfo="skip"))
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=30, b=10), xaxis_title="token position",
                      yaxis_title="nats", legend=dict(orientation="h", y=1.15))
    return fig


def reliability_figure(y: np.ndarray, probabilities: dict[str, np.ndarray], *, n_bins: int = 10,
                       strategy: str = "uniform") -> go.Figure:
    """Reliability diagram: per-bin accuracy with Wilson intervals vs mean confidence, the diagonal, and a histogram
    of confidences underneath; ECE in the legend (from the same bins)."""
    from plotly.subplots import make_subplots

    from trace_core import expected_calibration_error

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.75, 0.25], vertical_spacing=0.04)
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration",
                             line=dict(color="#999", dash="dash")), row=1, col=1)
    for name, p in probabilities.items():
        table = reliability_table(y, p, n_bins=n_bins, strategy=strategy)
        table = table[table["count"] > 0]
        ece = expected_calibration_error(y, p, n_bins=n_bins, strategy=strategy)
        err = dict(type="data", symmetric=False, array=table["wilson_high"] - table["accuracy"],
                   arrayminus=table["accuracy"] - table["wilson_low"])
        fig.add_trace(go.Scatter(x=table["mean_confidence"], y=table["accuracy"], error_y=err, mode="lines+markers",
                                 name=f"{name} (ECE {ece:.3f})", legendgroup=name,
                                 customdata=np.stack([table["count"], table["lower"], table["upper"]], axis=1),
                                 hovertemplate=("bin %{customdata[1]:.2f}–%{customdata[2]:.2f}<br>"
                                                "confidence %{x:.2f}<br>accuracy %{y:.2f}<br>"
                                                "%{customdata[0]} answers<extra>" + name + "</extra>")),
                      row=1, col=1)
        edges, _ = bin_probabilities(p, n_bins=n_bins, strategy=strategy)
        counts, _ = np.histogram(p, bins=np.unique(edges))
        centers = (np.unique(edges)[:-1] + np.unique(edges)[1:]) / 2
        fig.add_trace(go.Bar(x=centers, y=counts, name=name, legendgroup=name, showlegend=False, opacity=0.5),
                      row=2, col=1)
    fig.update_layout(height=520, margin=dict(l=10, r=10, t=30, b=10), barmode="overlay",
                      legend=dict(orientation="h", y=1.08))
    fig.update_xaxes(range=[0, 1], row=2, col=1, title="predicted probability of a correct answer")
    fig.update_yaxes(range=[0, 1.02], row=1, col=1, title="observed accuracy")
    fig.update_yaxes(title="answers", row=2, col=1)
    return fig


def risk_coverage_figure(y: np.ndarray, scores: dict[str, np.ndarray]) -> go.Figure:
    """Selective risk (error rate of the answers kept) against coverage, with the oracle."""
    from trace_core import aurc

    fig = go.Figure()
    y = np.asarray(y)
    order_oracle = np.sort(1 - y)
    k = np.arange(1, len(y) + 1)
    fig.add_trace(go.Scatter(x=k / len(y), y=np.cumsum(order_oracle) / k, mode="lines", name="oracle",
                             line=dict(color="#999", dash="dash")))
    for name, score in scores.items():
        coverage, risk = risk_coverage_curve(y, score)
        fig.add_trace(go.Scatter(x=coverage, y=risk, mode="lines", name=f"{name} (AURC {aurc(y, score):.3f})"))
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=30, b=10), xaxis_title="coverage (share of answers kept)",
                      yaxis_title="risk (error rate among kept)", legend=dict(orientation="h", y=1.15))
    return fig


def roc_figure(y: np.ndarray, scores: dict[str, np.ndarray]) -> go.Figure:
    from trace_core import auroc

    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="chance", line=dict(color="#999", dash="dash")))
    for name, score in scores.items():
        fpr, tpr, _ = roc_curve(y, score)
        fig.add_trace(go.Scatter(x=fpr, y=tpr, mode="lines", name=f"{name} (AUROC {auroc(y, score):.3f})"))
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=30, b=10),
                      xaxis_title="false positive rate (wrong answers accepted)",
                      yaxis_title="true positive rate (correct answers accepted)", legend=dict(orientation="h", y=1.15))
    return fig


def metrics_table(summary: pd.DataFrame, metrics: Sequence[str], order: Sequence[str]) -> pd.DataFrame:
    """Wide table for display: one row per method (in ``order``), mean and std columns per metric."""
    wide = summary.pivot_table(index=["method", "family"], columns="metric", values=["mean", "std"])
    out = pd.DataFrame(index=wide.index)
    for m in metrics:
        if ("mean", m) in wide.columns:
            out[m] = wide[("mean", m)]
            out[f"{m} ±"] = wide[("std", m)]
    out = out.reset_index()
    rank = {m: i for i, m in enumerate(order)}
    return out.sort_values("method", key=lambda col: col.map(rank)).reset_index(drop=True)
