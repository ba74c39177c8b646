"""Inspect in a real browser: while a new answer streams in, the previous answer (its heatmap and its numbers) is no
longer on the page, faded or not."""

from __future__ import annotations

import pytest
from conftest import generate, skip_unless_ready, wait_idle

pytest.importorskip("playwright.sync_api")
skip_unless_ready()

pytestmark = pytest.mark.e2e

# At every change of the page while it streams (its Stop button is drawn): whether the first answer's heatmap
# (marked) or any answer's numbers are on the page.
WATCH_JS = """() => {
    window.__watch = {streaming: 0, old_heatmap: 0, numbers: 0};
    const look = () => {
        if (!document.querySelector('.st-key-stop_inspect')) return;
        window.__watch.streaming += 1;
        if (document.querySelector('[data-testid="trace-heatmap"][data-first]')) window.__watch.old_heatmap += 1;
        if (document.body.innerText.includes('TRACE confidence')) window.__watch.numbers += 1;
    };
    window.__observer = new MutationObserver(look);
    window.__observer.observe(document.body, {childList: true, subtree: true, characterData: true});
}"""


def test_a_new_answer_streams_without_the_previous_one_on_the_page(server, page, tmp_path):
    page.goto(server)
    wait_idle(page)
    generate(page, "Q: What is 23 plus 19?\nA:")
    heatmap = page.locator('[data-testid="trace-heatmap"]')
    first = heatmap.inner_text()
    heatmap.evaluate("h => h.setAttribute('data-first', '')")
    page.evaluate(WATCH_JS)

    # a paragraph of the demo model's invented world: tens of tokens, so that the page streams for a while
    page.get_by_label("Prompt", exact=True).fill("Q: Tell me about Yakiia.\nA:")
    page.get_by_role("button", name="Generate").click()
    page.wait_for_function("() => window.__watch.streaming > 0", polling=20, timeout=60_000)
    wait_idle(page, timeout=120_000)
    page.wait_for_function("() => document.body.innerText.includes('TRACE confidence')", timeout=60_000)
    watch = page.evaluate("() => { window.__observer.disconnect(); return window.__watch; }")
    page.screenshot(path=str(tmp_path / "second_answer.png"), full_page=True)

    assert watch["streaming"] > 0, watch  # the new answer was seen streaming
    assert watch["old_heatmap"] == 0 and watch["numbers"] == 0, watch
    second = page.locator('[data-testid="trace-heatmap"]')
    assert second.count() == 1 and second.first.get_attribute("data-first") is None
    assert second.first.inner_text() != first  # the answer shown is the new one
