"""End-to-end: the real Streamlit server driven by Playwright in Debian's headless Chromium.

Skipped when Chromium or Playwright is missing (``.ci/run`` installs both). Screenshots of each page are saved under
the test's temporary folder (and, with TRACE_SCREENSHOTS=folder, copied there for the README).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import ROOT, download, generate, open_calibrate_upload, screenshot, skip_unless_ready, wait_idle

playwright = pytest.importorskip("playwright.sync_api")
skip_unless_ready()

pytestmark = pytest.mark.e2e


def _first_wrong_example() -> str:
    examples = json.loads((ROOT / "assets" / "datasets" / "try_prompts.json").read_text(encoding="utf-8"))
    return next(e["prompt"] for e in examples if e["label"] == 0)


def test_inspect_generates_heatmap(server, page, tmp_path):
    page.goto(server)
    wait_idle(page)
    # The first wrong "try these" answer of the demo model (a long one, whose spike marks the step that went wrong).
    generate(page, _first_wrong_example())
    tokens = page.locator('[data-testid="trace-heatmap"] .tr-tok')
    assert tokens.count() >= 1
    page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=30_000)
    assert "TRACE confidence" in page.inner_text("body")
    screenshot(page, tmp_path, "demo_inspect", publish=False)  # the README shows the real model's

    # The hover card: reached by keyboard focus (a tap focuses too), visible, with the token's numbers.
    token = tokens.nth(min(3, tokens.count() - 1))
    token.focus()
    card = token.locator(".tr-card")
    card.wait_for(state="visible", timeout=10_000)
    text = card.inner_text()
    assert "probability" in text and "surprisal" in text and "alternatives" in text
    assert tokens.nth(0).locator(".tr-card").is_hidden()  # only the focused token's card opens
    page.mouse.move(0, 0)
    shot = tmp_path / "inspect_card.png"
    page.locator('[data-testid="stMain"]').screenshot(path=str(shot))
    screenshot(page, tmp_path, "demo_inspect_card", publish=False)  # the README shows the real model's


def test_compare_aligns_greedy_and_sampled_answers(server, page, tmp_path):
    page.goto(server)
    wait_idle(page)
    page.get_by_role("link", name="Compare").click()
    wait_idle(page)
    # The first wrong "try these" answer: sampled at the page's default temperature (0.7, seed 0) the model writes
    # another digit at the step it slips on.
    page.get_by_label("Prompt", exact=True).fill(_first_wrong_example())
    page.get_by_role("button", name="Compare").click()
    page.wait_for_selector('[data-testid="compare-heatmap"] .tr-tok', timeout=60_000)
    wait_idle(page)
    main = page.inner_text('[data-testid="stMain"]')
    assert "Where the answers part" in main and "diverge" in main, main[:3000]
    # a token's card is readable: as wide as Inspect's, not one character per line
    token = page.locator('[data-testid="compare-heatmap"] .tr-tok').nth(2)
    token.focus()
    card = token.locator(".tr-card")
    card.wait_for(state="visible", timeout=10_000)
    box = card.bounding_box()
    assert box["width"] >= 150 and box["height"] <= 400, box
    page.mouse.move(0, 0)
    token.blur()
    screenshot(page, tmp_path, "demo_compare", publish=False)  # the README shows the real model's


def test_hostile_prompt_renders_as_text_and_no_dialog_fires(server, page, tmp_path):
    page.goto(server)
    wait_idle(page)
    payload = 'Q: <img src=x onerror=alert(1)> <script>alert(2)</script> :red[x] $x$\nA:'
    generate(page, payload)
    page.wait_for_timeout(1000)
    assert page.dialogs == []
    assert page.locator('img[src="x"]').count() == 0
    assert page.locator('[data-testid="trace-heatmap"] script').count() == 0


def test_calibrate_upload_shows_reliability_and_flag_downloads(server, page, tmp_path):
    open_calibrate_upload(page, server)
    dataset = ROOT / "assets" / "datasets" / "demo_validation.csv"
    page.locator('input[type="file"]').set_input_files(str(dataset))
    page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=120_000)
    wait_idle(page, timeout=120_000)
    assert "TRACE+" in page.inner_text("body")
    screenshot(page, tmp_path, "calibrate")
    # the production calibrator: the score with the lowest held-out Brier by default, named in the saved file
    choice = page.locator('.st-key-flag_score')
    choice.scroll_into_view_if_needed()
    shown = choice.locator("input").input_value()
    assert "held-out Brier" in shown and "(lowest)" in shown
    saved = json.loads(Path(download(page, "Download calibrator (JSON)").path()).read_text(encoding="utf-8"))
    named = saved["params"].get("method") or ("TRACE+" if saved["params"]["feature_set"] == "paper" else "TRACE+ (")
    assert shown.split(" — ")[0].strip().startswith(named)
    page.locator('[data-testid="stMain"]').screenshot(path=str(tmp_path / "calibrate_production.png"))

    page.get_by_role("link", name="Flag & export").click()
    wait_idle(page)
    path = tmp_path / "flagged.csv"
    download(page, "Download flagged (CSV)").save_as(str(path))
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows and {"prompt", "answer", "probability_correct", "peak_risk_tokens"} <= set(rows[0])
    assert all(float(r["probability_correct"]) < 0.5 for r in rows)
    screenshot(page, tmp_path, "flag")

    # a guaranteed error rate, chosen on the other bundled split (the calibrator was fitted on this one)
    page.get_by_text("Guaranteed error rate", exact=True).click()
    wait_idle(page, timeout=120_000)
    main = page.inner_text('[data-testid="stMain"]')
    assert "guarantees an error rate of at most 10.0% among the kept answers" in main, main[-3000:]
    assert "exchangeable" in main
    screenshot(page, tmp_path, "flag_guarantee")
