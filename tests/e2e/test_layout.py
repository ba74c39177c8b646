"""Layout at a narrow window: the Compare page's decoding inputs keep their labels on one line at 800 px."""

from __future__ import annotations

import pytest
from conftest import skip_unless_ready, wait_idle

pytest.importorskip("playwright.sync_api")
skip_unless_ready()

pytestmark = pytest.mark.e2e


def test_compare_decoding_labels_are_not_cut_at_800_px(browser, server):
    context = browser.new_context(viewport={"width": 800, "height": 1000})
    page = context.new_page()
    page.goto(server)
    wait_idle(page)
    page.get_by_role("link", name="Compare").click()
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
    context.close()
