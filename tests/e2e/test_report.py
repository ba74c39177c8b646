"""The HTML report opened in Chromium: its figures draw, nothing errors, nothing is fetched, a hostile group name
runs nothing, and it fits a laptop's window."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import skip_unless_ready

pytest.importorskip("playwright.sync_api")
skip_unless_ready()

pytestmark = pytest.mark.e2e

HOSTILE = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=1</script>"


def test_report_opens_offline_with_every_figure_drawn(browser, tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from helpers import random_traces

    from trace_core import EvaluationConfig, evaluate
    from trace_core.evaluation.results import average_results
    from trace_core.report.html import report_html

    traces = random_traces(200, seed=4)
    y = (np.array([t.surprisal.mean() for t in traces]) < 1.0).astype(int)
    config = EvaluationConfig(n_splits=3, stratified=True)
    groups = {f"task = {HOSTILE}": evaluate(traces[:100], y[:100], config=config),
              "task = b": evaluate(traces[100:], y[100:], config=config)}
    path = tmp_path / "report.html"
    path.write_text(report_html({**groups, "average": average_results(groups)}, title=HOSTILE), encoding="utf-8")

    context = browser.new_context(offline=True)  # the report must not need the network
    page = context.new_page()
    errors, requests = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    page.goto(path.as_uri())
    page.wait_for_function("document.querySelectorAll('.plotly-graph-div .main-svg').length >= 6", timeout=30_000)
    assert errors == [] and requests == []
    assert page.evaluate("window.__pwned") is None
    assert page.locator("h2", has_text=HOSTILE).count() == 1  # shown as text
    assert page.locator(".verdict").count() == 3  # each group and the average
    context.close()


def _report(tmp_path: Path, n_splits: int) -> Path:
    """A report of 200 random answers, written to ``tmp_path``."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from helpers import random_traces

    from trace_core import EvaluationConfig, evaluate
    from trace_core.report.html import report_html

    traces = random_traces(200, seed=5)
    y = (np.array([t.surprisal.mean() for t in traces]) < 1.0).astype(int)
    result = evaluate(traces, y, config=EvaluationConfig(n_splits=n_splits, stratified=True))
    path = tmp_path / "report.html"
    path.write_text(report_html({"": result}, title="Report"), encoding="utf-8")
    return path


@pytest.mark.parametrize("width", [1024, 1366])
def test_the_report_fits_a_laptop_window(browser, tmp_path, width):
    """Nothing needs a horizontal scroll of the page: the paired table's wins move under their values."""
    path = _report(tmp_path, 20)
    page = browser.new_page(viewport={"width": width, "height": 900})
    try:
        page.goto(path.as_uri())
        page.wait_for_selector("table.paired")
        overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"the page is {overflow} px wider than a {width} px window"
        # each paired cell's value stays on one line; its wins may sit under it
        cells = page.evaluate("""() => [...document.querySelectorAll('table.paired td span.nw:first-child')]
                                         .map(s => s.getClientRects().length)""")
        assert cells and max(cells) == 1
    finally:
        page.close()


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
    """Written under a plotly default template without automargin (as in the dashboard, where Streamlit sets its
    own), every tick label and axis title lies inside its figure, none cut at the edge (the reliability diagram's
    ".8" for "0.8" and "00" for "100")."""
    pio = pytest.importorskip("plotly.io")
    monkeypatch.setattr(pio.templates, "default", "none")  # plotly.js's own defaults: no automargin
    path = _report(tmp_path, 3)
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
