"""The evaluation's figures as Plotly objects: reliability diagrams with a histogram of confidences, risk–coverage
and ROC curves, each method in one colour everywhere. Shared by the dashboard and the HTML report
(:mod:`trace_core.report.html`); needs plotly (``pip install 'trace-core[report]'``), imported only with this module.

Every label that comes from data (method names, titles) is escaped for Plotly, which reads tags in names and hover
text.
"""

from __future__ import annotations

import colorsys
import hashlib
import html
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from trace_core.checks import check_choice
from trace_core.evaluation.results import EvaluationResult
from trace_core.methods.registry import METHODS, METRICS
from trace_core.metrics import (
    aurc,
    auroc,
    expected_calibration_error,
    reliability_table,
    risk_coverage_curve,
    roc_curve,
)

__all__ = ["histogram_bars", "legend_stats", "method_colour", "plotly_text", "reliability_figure",
           "risk_coverage_figure", "roc_figure"]


# One colour per method name, the same in every figure and tab whatever order or subset a caller passes. TRACE+ and
# TRACE get the two strong colours (red, blue); their variants are shades of the same hue (the surprisal-only ones
# lighter); the baselines take a qualitative palette free of that red and blue, in registry order; the supervised
# reference is near-black.
_TRACE_PLUS_COLOUR, _TRACE_COLOUR, _REFERENCE_COLOUR = "#d62728", "#1f77b4", "#252525"
_SURPRISAL_ONLY_COLOURS = {"TRACE+": "#f08a8b", "TRACE": "#74b3e3"}
_TRACE_PLUS_SHADES = ("#8b0000", "#e8603c", "#b2182b", "#ff9e80")  # TRACE+ feature-set variants
_TRACE_SHADES = ("#08306b", "#4292c6")  # any further TRACE variant
_BASELINE_PALETTE = ("#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
                     "#1b9e77", "#ffbb78", "#c5b0d5", "#c49c94", "#f7b6d2", "#9edae5", "#dbdb8d", "#393b79",
                     "#637939", "#8c6d31", "#7b4173", "#98df8a", "#a55194", "#fdae6b", "#74c476")


def _registry_colours() -> dict[str, str]:
    colours: dict[str, str] = {}
    surprisal_only = {METHODS[m].surprisal_only: c for m, c in _SURPRISAL_ONLY_COLOURS.items()
                      if m in METHODS and METHODS[m].surprisal_only}
    counts = {"trace_plus": 0, "trace": 0, "baseline": 0}
    for method in METHODS.values():
        name, kind = method.name, method.kind
        if name == "TRACE+":
            colours[name] = _TRACE_PLUS_COLOUR
        elif name == "TRACE":
            colours[name] = _TRACE_COLOUR
        elif name in surprisal_only:
            colours[name] = surprisal_only[name]
        elif kind == "reference":
            colours[name] = _REFERENCE_COLOUR
        else:
            palette = {"trace_plus": _TRACE_PLUS_SHADES, "trace": _TRACE_SHADES}.get(kind, _BASELINE_PALETTE)
            key = kind if kind in counts else "baseline"
            colours[name] = palette[counts[key] % len(palette)]  # cycles only if the registry outgrows the palette
            counts[key] += 1
    return colours


_METHOD_COLOURS = _registry_colours()


def method_colour(name: str) -> str:
    """The colour of a method in every figure (``"#rrggbb"``): fixed by the method registry, so a method looks the
    same in every figure and tab whichever methods are shown; a name the registry does not know gets a colour
    derived from a hash of the name (the same in every run).

    Examples
    --------
    >>> method_colour("TRACE+"), method_colour("TRACE")
    ('#d62728', '#1f77b4')
    """
    if not isinstance(name, str):
        raise TypeError(f"`name` must be a str, got {type(name).__name__}")
    if name in _METHOD_COLOURS:
        return _METHOD_COLOURS[name]
    hue = int.from_bytes(hashlib.blake2s(name.encode("utf-8", "surrogatepass"), digest_size=4).digest(), "big")
    r, g, b = colorsys.hls_to_rgb((hue % 360) / 360, 0.42, 0.55)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def plotly_text(text: str) -> str:
    """Text for a Plotly label: Plotly reads tags (``<b>``, ``<a>``) in names and hover text, so escape them."""
    return html.escape(str(text), quote=False)


def _legend_name(name: str, this_split: str, legend_stats: Mapping[str, str] | None) -> str:
    """``"TRACE+ (AUROC ↑ 0.899 ± 0.012, mean of 20 splits)"`` from ``legend_stats``, else the plotted split's own
    value, saying so (``"TRACE+ (AUROC 0.904 on this split)"``)."""
    if legend_stats is not None and name in legend_stats:
        return plotly_text(f"{name} ({legend_stats[name]})")
    return plotly_text(f"{name} ({this_split} on this split)")


def _title(subtitle: str | None) -> dict[str, Any]:
    """A small left-aligned title line (e.g. which split the figure shows); nothing when ``subtitle`` is None."""
    if subtitle is None:
        return {}
    return dict(title=dict(text=plotly_text(subtitle), x=0.01, xanchor="left", font=dict(size=13, color="#555")))


def _labels_fit(fig: go.Figure) -> go.Figure:
    """``fig`` with margins that grow to hold its tick labels and axis titles. Plotly.js leaves that off by default
    and only plotly.py's default template turns it on: under another default (Streamlit sets its own when the
    dashboard imports it) a figure written to HTML has its labels cut at the edge (".8" for "0.8")."""
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig


def _legend_below(y: float = -0.3) -> dict[str, Any]:
    """A horizontal legend under the plot: entries quoting mean ± std are long and wrap into rows, which above the
    plot would run into the title."""
    return dict(orientation="h", x=0, xanchor="left", y=y, yanchor="top")


def legend_stats(result: EvaluationResult, metric: str, calibrator: str | None = None) -> dict[str, str]:
    """Legend texts that quote the metrics table: each method's mean ± std over the held-out splits of ``metric``,
    from :meth:`EvaluationResult.table` under ``calibrator`` (the table :func:`metrics_frame` shows).

    Returns
    -------
    dict
        Method -> ``"ECE ↓ 0.031 ± 0.006, mean of 20 splits"`` (the metric's title from
        :data:`trace_core.methods.registry.METRICS`), for every method in the table, in table order; pass it as the
        figures' ``legend_stats``.

    Examples
    --------
    >>> roc_figure(y, scores, legend_stats=legend_stats(result, "auroc"))  # doctest: +SKIP
    """
    check_choice(metric, "metric", METRICS)
    table = result.metric_table(calibrator=calibrator)
    if metric not in table.metrics:
        raise ValueError(f"`metric` {metric!r} was not computed in this evaluation; computed: "
                         f"{', '.join(m for m in METRICS if m in table.metrics)}")
    n = result.n_splits_used
    where = f"mean of {n} split{'s' if n != 1 else ''}"
    title = METRICS[metric].title
    out = {}
    for method in table.methods:
        mean, std = float(table.mean.at[method, metric]), float(table.std.at[method, metric])
        out[method] = (f"{title} n/a" if not np.isfinite(mean) else f"{title} {mean:.3f} ± {std:.3f}, {where}")
    return out


def histogram_bars(table: pd.DataFrame, name: str, colour: str) -> go.Bar:
    """Where the answers are, drawn from a :func:`trace_core.reliability_table`'s ``count``, ``lower`` and ``upper``
    columns: the very bins of the points above and of the ECE (one binning, never ``np.histogram``, whose ``[a, b)``
    bins differ from ``bin_probabilities``' ``(a, b]``).

    Each bar spans its bin ``[lower, upper]`` and its height is the bin's count of answers, so the axis never reads
    more answers than there are; with equal-mass bins the heights are about equal and the widths show where the
    answers are (narrow bins where they crowd). A zero-wide bin (tied probabilities) is drawn 0.01 wide. The bars
    share the method's ``legendgroup``: its legend entry toggles points and bars together.
    """
    lower, upper = table["lower"].to_numpy(float), table["upper"].to_numpy(float)
    counts = table["count"].to_numpy()
    # Tied probabilities can make an equal-mass bin zero-wide; give it a sliver so that its answers still show.
    width = np.maximum(upper - lower, 0.01)
    fill = f"rgba({int(colour[1:3], 16)}, {int(colour[3:5], 16)}, {int(colour[5:7], 16)}, 0.35)"
    label = plotly_text(name)
    return go.Bar(x=(lower + upper) / 2, y=counts, width=width, name=label, legendgroup=name,
                  showlegend=False, marker=dict(color=fill, line=dict(color=colour, width=1.5)),
                  customdata=np.stack([lower, upper, counts], axis=1),
                  hovertemplate="bin %{customdata[0]:.2f}–%{customdata[1]:.2f}<br>%{customdata[2]} answers"
                                "<extra>" + label + "</extra>")


def reliability_figure(y: np.ndarray, probabilities: dict[str, np.ndarray], *, n_bins: int = 10,
                       strategy: str = "uniform", legend_stats: Mapping[str, str] | None = None,
                       subtitle: str | None = None) -> go.Figure:
    """Reliability diagram: per-bin accuracy with Wilson intervals vs mean confidence, the diagonal, and a histogram
    of confidences underneath (same bins; each method's bars in its colour, toggled with its points).

    The legend quotes ``legend_stats[name]`` when given (see :func:`legend_stats`: the table's mean over splits),
    else the ECE of these answers, marked "on this split". ``subtitle`` is a small title line.
    """
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.75, 0.25], vertical_spacing=0.04)
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration",
                             line=dict(color="#999", dash="dash")), row=1, col=1)
    for name, p in probabilities.items():
        colour = method_colour(name)
        table = reliability_table(y, p, n_bins=n_bins, strategy=strategy)
        table = table[table["count"] > 0]
        ece = expected_calibration_error(y, p, n_bins=n_bins, strategy=strategy)
        err = dict(type="data", symmetric=False, array=table["wilson_high"] - table["accuracy"],
                   arrayminus=table["accuracy"] - table["wilson_low"])
        fig.add_trace(go.Scatter(x=table["mean_confidence"], y=table["accuracy"], error_y=err, mode="lines+markers",
                                 name=_legend_name(name, f"ECE {ece:.3f}", legend_stats), legendgroup=name,
                                 marker_color=colour, line_color=colour,
                                 customdata=np.stack([table["count"], table["lower"], table["upper"]], axis=1),
                                 hovertemplate=("bin %{customdata[1]:.2f}–%{customdata[2]:.2f}<br>"
                                                "confidence %{x:.2f}<br>accuracy %{y:.2f}<br>"
                                                "%{customdata[0]} answers<extra>" + plotly_text(name) + "</extra>")),
                      row=1, col=1)
        fig.add_trace(histogram_bars(table, name, colour), row=2, col=1)
    fig.update_layout(height=540, margin=dict(l=10, r=10, t=60 if subtitle else 30, b=10), barmode="overlay",
                      legend=_legend_below(-0.14), **_title(subtitle))
    fig.update_xaxes(range=[0, 1], row=2, col=1, title="predicted probability of a correct answer")
    fig.update_yaxes(range=[0, 1.02], row=1, col=1, title="observed accuracy")
    fig.update_yaxes(title="answers", row=2, col=1)
    return _labels_fit(fig)


def risk_coverage_figure(y: np.ndarray, scores: dict[str, np.ndarray], *,
                         legend_stats: Mapping[str, str] | None = None, subtitle: str | None = None) -> go.Figure:
    """Selective risk (error rate of the answers kept) against coverage, with the oracle. The legend quotes
    ``legend_stats[name]`` when given, else the AURC of these answers, marked "on this split"."""
    fig = go.Figure()
    y = np.asarray(y)
    order_oracle = np.sort(1 - y)
    k = np.arange(1, len(y) + 1)
    fig.add_trace(go.Scatter(x=k / len(y), y=np.cumsum(order_oracle) / k, mode="lines", name="oracle",
                             line=dict(color="#999", dash="dash")))
    for name, score in scores.items():
        coverage, risk = risk_coverage_curve(y, score)
        fig.add_trace(go.Scatter(x=coverage, y=risk, mode="lines", legendgroup=name,
                                 name=_legend_name(name, f"AURC {aurc(y, score):.3f}", legend_stats),
                                 line=dict(color=method_colour(name))))
    fig.update_layout(height=440, margin=dict(l=10, r=10, t=60 if subtitle else 30, b=10),
                      xaxis_title="coverage (share of answers kept)", yaxis_title="risk (error rate among kept)",
                      legend=_legend_below(), **_title(subtitle))
    return _labels_fit(fig)


def roc_figure(y: np.ndarray, scores: dict[str, np.ndarray], *, legend_stats: Mapping[str, str] | None = None,
               subtitle: str | None = None) -> go.Figure:
    """ROC curves of raw scores (correct answers are the positives), with chance. The legend quotes
    ``legend_stats[name]`` when given, else the AUROC of these answers, marked "on this split"."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="chance", line=dict(color="#999", dash="dash")))
    for name, score in scores.items():
        fpr, tpr, _ = roc_curve(y, score)
        fig.add_trace(go.Scatter(x=fpr, y=tpr, mode="lines", legendgroup=name,
                                 name=_legend_name(name, f"AUROC {auroc(y, score):.3f}", legend_stats),
                                 line=dict(color=method_colour(name))))
    fig.update_layout(height=440, margin=dict(l=10, r=10, t=60 if subtitle else 30, b=10),
                      xaxis_title="false positive rate (wrong answers accepted)",
                      yaxis_title="true positive rate (correct answers accepted)", legend=_legend_below(),
                      **_title(subtitle))
    return _labels_fit(fig)
