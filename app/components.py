"""Rendering: the token heatmap (escaped HTML), the Plotly figures and the metrics table. Pure functions: nothing
here draws on the page (the table's column settings are plain Streamlit config objects).

Every piece of text that comes from a model or a file goes through :func:`html.escape` before it reaches HTML, so a
token such as ``<img src=x onerror=alert(1)>`` shows literally.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from trace_core import EvaluationResult, Trace, TraceExplanation, explain_trace, reliability_table, roc_curve
from trace_core.metrics import risk_coverage_curve
from trace_core.registry import METRICS

#: The longest message (characters, before escaping) an alert or caption shows; user input inside it is shortened
#: to about 200 characters where it is quoted, so only a message quoting many inputs reaches this.
MAX_MESSAGE = 2_000

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
        if not trace.has_entropy:
            raise ValueError("this trace has no entropy (its data held only the chosen tokens' log-probabilities); "
                             "colour by surprisal instead")
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


def md_literal(text: str, limit: int = MAX_MESSAGE) -> str:
    """Untrusted text for a Streamlit Markdown string (``st.error``, ``st.warning``, ``st.caption``), shown literally.

    Backslash escapes are not enough (``:material/...:`` and ``:red[...]`` still render), so every ASCII punctuation
    character becomes a numeric character reference, which Markdown shows as that character and never parses.
    Text longer than ``limit`` characters is cut (the cut says how long it was): a message quoting a huge input never
    becomes a huge alert.
    """
    text = str(text)
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text):,} characters in all)"
    return "".join(f"&#{ord(ch)};" if ch.isascii() and not ch.isalnum() and not ch.isspace() else ch
                   for ch in control_safe(text))


def token_tooltip(trace: Trace, i: int, alternatives: Sequence[str] | None) -> str:
    """Plain-text hover details of token i: probability, surprisal, entropy, rank and the top-k alternatives."""
    p = float(np.exp(-trace.surprisal[i]))
    lines = [f"token {i + 1}: {control_safe(trace.tokens[i])!r}",
             f"probability {p:.1%} · surprisal {trace.surprisal[i]:.2f}"
             + (f" · entropy {trace.entropy[i]:.2f}" if trace.has_entropy else " · entropy not recorded")]
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
    """Surprisal and entropy (when recorded) over token positions, the peak window shaded and spikes marked."""
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
    if trace.has_entropy:
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


# One colour per method, in the order a figure's caller lists them (the same list for every figure of a page).
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
            "#7f7f7f")


def _colour(position: int) -> str:
    return _COLOURS[position % len(_COLOURS)]


def histogram_bars(table: pd.DataFrame, name: str, colour: str) -> go.Bar:
    """How many answers fall in each bin, drawn from a :func:`trace_core.reliability_table`'s ``count``, ``lower``
    and ``upper`` columns: the very bins of the points above and of the ECE (one binning, never ``np.histogram``,
    whose ``[a, b)`` bins differ from ``bin_probabilities``' ``(a, b]``)."""
    lower, upper = table["lower"].to_numpy(), table["upper"].to_numpy()
    # Tied probabilities can make an equal-mass bin zero-wide; give it a sliver so that its answers still show.
    width = np.maximum(upper - lower, 0.01)
    # Overlaid per method: a light fill with an outline in the method's colour keeps each method's bars readable.
    fill = f"rgba({int(colour[1:3], 16)}, {int(colour[3:5], 16)}, {int(colour[5:7], 16)}, 0.2)"
    return go.Bar(x=(lower + upper) / 2, y=table["count"].to_numpy(), width=width, name=name, legendgroup=name,
                  showlegend=False, marker=dict(color=fill, line=dict(color=colour, width=1.5)),
                  customdata=np.stack([lower, upper], axis=1),
                  hovertemplate="bin %{customdata[0]:.2f}–%{customdata[1]:.2f}<br>%{y} answers<extra>" + name
                                + "</extra>")


def reliability_figure(y: np.ndarray, probabilities: dict[str, np.ndarray], *, n_bins: int = 10,
                       strategy: str = "uniform") -> go.Figure:
    """Reliability diagram: per-bin accuracy with Wilson intervals vs mean confidence, the diagonal, and a histogram
    of confidences underneath; ECE in the legend (from the same bins)."""
    from plotly.subplots import make_subplots

    from trace_core import expected_calibration_error

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.75, 0.25], vertical_spacing=0.04)
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration",
                             line=dict(color="#999", dash="dash")), row=1, col=1)
    for position, (name, p) in enumerate(probabilities.items()):
        colour = _colour(position)
        table = reliability_table(y, p, n_bins=n_bins, strategy=strategy)
        table = table[table["count"] > 0]
        ece = expected_calibration_error(y, p, n_bins=n_bins, strategy=strategy)
        err = dict(type="data", symmetric=False, array=table["wilson_high"] - table["accuracy"],
                   arrayminus=table["accuracy"] - table["wilson_low"])
        fig.add_trace(go.Scatter(x=table["mean_confidence"], y=table["accuracy"], error_y=err, mode="lines+markers",
                                 name=f"{name} (ECE {ece:.3f})", legendgroup=name, marker_color=colour,
                                 customdata=np.stack([table["count"], table["lower"], table["upper"]], axis=1),
                                 hovertemplate=("bin %{customdata[1]:.2f}–%{customdata[2]:.2f}<br>"
                                                "confidence %{x:.2f}<br>accuracy %{y:.2f}<br>"
                                                "%{customdata[0]} answers<extra>" + name + "</extra>")),
                      row=1, col=1)
        fig.add_trace(histogram_bars(table, name, colour), row=2, col=1)
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
    for position, (name, score) in enumerate(scores.items()):
        coverage, risk = risk_coverage_curve(y, score)
        fig.add_trace(go.Scatter(x=coverage, y=risk, mode="lines", name=f"{name} (AURC {aurc(y, score):.3f})",
                                 line=dict(color=_colour(position))))
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=30, b=10), xaxis_title="coverage (share of answers kept)",
                      yaxis_title="risk (error rate among kept)", legend=dict(orientation="h", y=1.15))
    return fig


def roc_figure(y: np.ndarray, scores: dict[str, np.ndarray]) -> go.Figure:
    """ROC curves of raw scores (correct answers are the positives), with chance."""
    from trace_core import auroc

    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="chance", line=dict(color="#999", dash="dash")))
    for position, (name, score) in enumerate(scores.items()):
        fpr, tpr, _ = roc_curve(y, score)
        fig.add_trace(go.Scatter(x=fpr, y=tpr, mode="lines", name=f"{name} (AUROC {auroc(y, score):.3f})",
                                 line=dict(color=_colour(position))))
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=30, b=10),
                      xaxis_title="false positive rate (wrong answers accepted)",
                      yaxis_title="true positive rate (correct answers accepted)", legend=dict(orientation="h", y=1.15))
    return fig


def metrics_frame(result: EvaluationResult, calibrator: str | None = None) -> pd.DataFrame:
    """The page's metrics table: :meth:`EvaluationResult.table` under ``calibrator`` (one row per method, in method
    order; ``family``, ``<metric>`` and ``<metric>_std`` columns) with the method as its first column and each
    method's note (uninformative, supervised reference) as its last."""
    table = result.table(calibrator=calibrator).rename_axis("method").reset_index()
    table["note"] = table["method"].map(result.note)
    return table


def paired_frame(result: EvaluationResult, calibrator: str | None = None) -> pd.DataFrame:
    """TRACE+ and TRACE minus the best baseline (chosen on each split's calibration part) and minus the supervised
    reference: ``"+0.012 ± 0.004 (18/20)"`` cells, headers from the metric registry."""
    from trace_core.compare import BEST_BASELINE
    from trace_core.registry import REFERENCE

    if result.paired is None:
        return pd.DataFrame()
    table = result.paired.table(calibrator=calibrator or result.config.scalar_calibrator,
                                versus=(BEST_BASELINE, REFERENCE))
    return table.rename(columns={"versus": "minus", **{m: METRICS[m].title for m in METRICS if m in table}})


def metric_columns(metrics: Sequence[str]) -> dict[str, Any]:
    """Streamlit column settings for :func:`metrics_frame`: headers and help from the metric registry
    (``"AUROC ↑"`` over ``auroc``, ``"±"`` over ``auroc_std``)."""
    import streamlit as st

    columns: dict[str, Any] = {}
    for name in metrics:
        spec = METRICS[name]
        basis = "each method's raw score" if spec.on == "score" else "calibrated probabilities"
        direction = "higher" if spec.higher_is_better else "lower"
        columns[name] = st.column_config.NumberColumn(spec.title, format="%.3f",
                                                      help=f"{spec.label} on {basis}; {direction} is better.")
        columns[f"{name}_std"] = st.column_config.NumberColumn("±", format="%.3f",
                                                               help=f"{spec.label}: standard deviation over splits.")
    return columns


def sentence(message: str) -> str:
    """A library message (lower case, no full stop) as a sentence for the page."""
    return message[:1].upper() + message[1:] + ("" if message.endswith((".", "…")) else ".")
