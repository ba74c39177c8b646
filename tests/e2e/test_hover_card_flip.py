"""The token cards in a short browser window: a token near the window's bottom opens its card above it, a token near
the top below it, and either card lies wholly inside the window (on Inspect; in Compare's aligned grid, the low
token)."""

from __future__ import annotations

import pytest
from conftest import generate, skip_unless_ready, wait_idle

pytest.importorskip("playwright.sync_api")
skip_unless_ready()

pytestmark = pytest.mark.e2e

WINDOW = {"width": 1100, "height": 640}


@pytest.fixture
def short_page(browser):
    context = browser.new_context(viewport=WINDOW)
    page = context.new_page()
    yield page
    context.close()


def _card_at(page, token, block: str) -> tuple[dict, dict]:
    """Scroll ``token`` to the window's ``block`` edge ("start" or "end"), hover it, and return its box and its open
    card's box."""
    page.mouse.move(0, 0)
    token.evaluate("(t, block) => t.scrollIntoView({block})", block)
    page.wait_for_timeout(300)
    token.hover()
    card = token.locator(".tr-card")
    card.wait_for(state="visible", timeout=10_000)
    page.wait_for_timeout(200)  # the fallback position is chosen at layout: let it settle
    return token.bounding_box(), card.bounding_box()


def _inside_window(box: dict) -> bool:
    return (box["x"] >= 0 and box["y"] >= 0 and box["x"] + box["width"] <= WINDOW["width"]
            and box["y"] + box["height"] <= WINDOW["height"])


def _check_low(page, token, tmp_path, name: str) -> None:
    low, card = _card_at(page, token, "end")
    assert low["y"] + low["height"] > 0.8 * WINDOW["height"], low  # the token sits in the window's lower part
    page.screenshot(path=str(tmp_path / f"{name}_low.png"))
    assert _inside_window(card), (low, card)
    assert card["y"] + card["height"] <= low["y"] + 1, (low, card)  # opened above its token


def _check_high(page, token, tmp_path, name: str) -> None:
    high, card = _card_at(page, token, "start")
    assert high["y"] < 0.2 * WINDOW["height"], high  # the token sits at the window's top
    page.screenshot(path=str(tmp_path / f"{name}_high.png"))
    assert _inside_window(card), (high, card)
    assert card["y"] >= high["y"] + high["height"] - 1, (high, card)  # under its token, as by default


def test_inspect_card_opens_above_a_token_low_in_the_window(server, short_page, tmp_path):
    short_page.goto(server)
    wait_idle(short_page)
    generate(short_page, "Q: What is 23 plus 19?\nA:")
    token = short_page.locator('[data-testid="trace-heatmap"] .tr-tok').first
    _check_low(short_page, token, tmp_path, "inspect_card")
    _check_high(short_page, token, tmp_path, "inspect_card")


def test_compare_card_opens_above_a_token_low_in_the_window(server, short_page, tmp_path):
    short_page.goto(server)
    wait_idle(short_page)
    short_page.get_by_role("link", name="Compare").click()
    wait_idle(short_page)
    short_page.get_by_label("Prompt", exact=True).fill("Q: What is 23 plus 19?\nA:")
    short_page.get_by_role("button", name="Compare").click()
    short_page.wait_for_selector('[data-testid="compare-heatmap"] .tr-tok', timeout=60_000)
    wait_idle(short_page)
    # the grid is near the page's end, so its tokens cannot be scrolled to the window's top: the low case only
    token = short_page.locator('[data-testid="compare-heatmap"] .tr-tok').last  # B's last token: the grid's end
    _check_low(short_page, token, tmp_path, "compare_card")
