"""Layout: the Compare page's decoding inputs keep their labels on one line at 800 px; the Calibrate page's paired table
fits a 1,400 px window."""

from __future__ import annotations

import contextlib

import pytest
from conftest import skip_unless_ready, wait_idle

pytest.importorskip("playwright.sync_api")
skip_unless_ready()

pytestmark = pytest.mark.e2e


@contextlib.contextmanager
def window(browser, server, width: int, link: str):
    """A fresh window ``width`` px wide (1,000 high) on the app, after clicking the page ``link``; closed after."""
    context = browser.new_context(viewport={"width": width, "height": 1000})
    try:
        page = context.new_page()
        page.goto(server)
        wait_idle(page)
        page.get_by_role("link", name=link).click()
        yield page
    finally:
        context.close()


def test_compare_decoding_labels_are_not_cut_at_800_px(browser, server):
    with window(browser, server, 800, "Compare") as page:
        wait_idle(page)
        # the number of lines each label's text takes (distinct tops of its text's boxes)
        lines = page.evaluate("""(labels) => Object.fromEntries(labels.map((label) => {
            const el = [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stWidgetLabel"]')]
                .find((e) => e.textContent.trim() === label);
            if (!el) return [label, -1];
            const tops = new Set();
            const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
                const range = document.createRange();
                range.selectNodeContents(node);
                for (const r of range.getClientRects()) tops.add(Math.round(r.top));
            }
            return [label, tops.size];
        }))""", ["Temperature", "Top-p", "Top-k (0 = off)", "Seed", "Max new tokens"])
        # one line each ("Temperatu re" took two in three columns); -1: not found in the page's main area
        assert all(n == 1 for n in lines.values()), lines


def test_the_paired_table_fits_a_1400_px_window(browser, server):
    with window(browser, server, 1400, "Calibrate") as page:
        page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=120_000)
        wait_idle(page, timeout=120_000)
        # the second table of the page: TRACE+ and TRACE minus the best baseline and the reference, every column shown
        widths = page.evaluate("""() => {
            const table = document.querySelectorAll('[data-testid="stDataFrame"]')[1];
            const scroller = table && table.querySelector('.dvn-scroller');
            return scroller ? [scroller.scrollWidth, scroller.clientWidth, table.innerText] : null;
        }""")
        assert widths is not None
        assert widths[0] <= widths[1], widths[:2]
