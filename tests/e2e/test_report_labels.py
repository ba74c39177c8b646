"""The HTML report's figures in Chromium, written under a plotly default template without automargin (as the
dashboard's, where Streamlit sets its own): every tick label and axis title lies inside its figure, none cut at the
edge (the reliability diagram's ".8" for "0.8" and "00" for "100")."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import skip_unless_ready

pytest.importorskip("playwright.sync_api")
pio = pytest.importorskip("plotly.io")
skip_unless_ready()

pytestmark = pytest.mark.e2e

# Each label's box against its figure's: [figure index, label text, how far it sticks out on any side (px)].
OUTSIDE_JS = """() => [...document.querySelectorAll('.plotly-graph-div')].flatMap((div, i) => {
    const frame = div.querySelector('.main-svg').getBoundingClientRect();
    return [...div.querySelectorAll('.xtick text, .ytick text, .g-xtitle text, .g-ytitle text')].map(t => {
        const r = t.getBoundingClientRect();
        return [i, t.textContent, Math.max(frame.left - r.left, r.right - frame.right, frame.top - r.top,
                                           r.bottom - frame.bottom)];
    });
})"""


@pytest.mark.parametrize("width", [1024, 1366])
def test_the_reports_axis_labels_are_not_cut(browser, tmp_path, width, monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from helpers import random_traces

    from trace_core import EvaluationConfig, evaluate
    from trace_core.report import report_html

    monkeypatch.setattr(pio.templates, "default", "none")  # plotly.js's own defaults: no automargin
    traces = random_traces(200, seed=5)
    y = (np.array([t.surprisal.mean() for t in traces]) < 1.0).astype(int)
    result = evaluate(traces, y, config=EvaluationConfig(n_splits=3, stratified=True))
    path = tmp_path / "report.html"
    path.write_text(report_html({"": result}, title="Report"), encoding="utf-8")
    page = browser.new_page(viewport={"width": width, "height": 900})
    try:
        page.goto(path.as_uri())
        page.wait_for_function("document.querySelectorAll('.plotly-graph-div .main-svg').length >= 3",
                               timeout=30_000)
        labels = page.evaluate(OUTSIDE_JS)
        assert len({i for i, _, _ in labels}) == 3 and len(labels) > 20  # every figure's ticks and titles
        cut = [(i, text, round(out, 1)) for i, text, out in labels if out > 0.5]
        assert cut == [], f"labels cut at a figure's edge: {cut}"
        page.locator(".plotly-graph-div").first.screenshot(path=str(tmp_path / f"reliability_{width}.png"))
    finally:
        page.close()
