"""The label review in a real browser: SmolLM2's short-fact answers labeled by the claim matcher, what each label
rests on marked, and a flip that the evaluation follows."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from conftest import ROOT, open_calibrate_upload, screenshot, skip_unless_ready, wait_idle

playwright = pytest.importorskip("playwright.sync_api")
skip_unless_ready()


def _share(page) -> float:
    found = re.search(r"([\d,]+) answers, ([\d.]+)% correct", page.inner_text('[data-testid="stMain"]'))
    assert found, "the metrics caption"
    return float(found.group(2))


def test_review_marks_matches_and_a_flip_changes_the_evaluation(server, page, tmp_path):
    frame = pd.read_csv(ROOT / "assets" / "datasets" / "real_validation.csv")
    frame = frame[frame["family"] == "short_facts"].drop(columns=["label"]).head(60)
    path = tmp_path / "short_facts.csv"
    frame.to_csv(path, index=False)
    open_calibrate_upload(page, server)
    page.locator('input[type="file"]').set_input_files(str(path))
    wait_idle(page, timeout=120_000)
    page.locator(".st-key-matcher").click()
    page.get_by_role("option", name="claim").click()
    wait_idle(page, timeout=120_000)
    before = _share(page)
    page.get_by_text(re.compile(r"Review labels \(60 answers labeled by the claim matcher")).click()
    wait_idle(page)
    marks = page.locator('[data-testid="stMain"] mark')
    assert marks.count() >= 3  # the reference found in the answers labeled right
    screenshot(page, tmp_path, "label_review")
    page.get_by_role("button", name="Flip").first.click()
    wait_idle(page, timeout=120_000)
    after = _share(page)
    assert abs(after - before) == pytest.approx(100 / 60, abs=0.11)  # one of 60 labels changed
    assert "1 corrected by hand" in page.inner_text('[data-testid="stMain"]')
