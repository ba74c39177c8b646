"""The report's figures make room for their tick labels and axis titles whatever plotly's default template is: the
dashboard imports Streamlit, which sets its own default (without automargin), and the HTML report it writes had its
reliability diagram's labels cut at the edge (".8", "00"). The browser check is tests/e2e/test_report_labels.py."""

from __future__ import annotations

import numpy as np
import pytest

pio = pytest.importorskip("plotly.io")

from trace_core.report.figures import reliability_figure, risk_coverage_figure, roc_figure  # noqa: E402


@pytest.mark.parametrize("template", ["none", "plotly"])
def test_every_axis_grows_its_margin_to_fit_its_labels(template, monkeypatch):
    monkeypatch.setattr(pio.templates, "default", template)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    p = np.clip(0.3 * y + rng.uniform(0, 0.7, 200), 0, 1)
    figures = [reliability_figure(y, {"TRACE+": p, "SeqLogP": p ** 2}, subtitle="First held-out split"),
               risk_coverage_figure(y, {"TRACE+": p}), roc_figure(y, {"TRACE+": p})]
    for fig in figures:
        axes = [fig.layout[name] for name in fig.layout if name.startswith(("xaxis", "yaxis"))]
        assert len(axes) == (4 if fig is figures[0] else 2)  # the diagram and its histogram share x
        assert all(axis.automargin is True for axis in axes), [(a.plotly_name, a.automargin) for a in axes]
