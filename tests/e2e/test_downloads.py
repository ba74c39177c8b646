"""End-to-end: a download clicked straight after a setting changed arrives, every time, and is a whole export made
for one state of the settings: the one the button was drawn for, or the new one (never a mix, never empty).

The click is made without waiting for the rerun the change started, so it can reach the server before, during or
after that rerun, and the browser may still hold the button of the run before.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from conftest import ROOT, download, open_calibrate_upload, skip_unless_ready, wait_idle

playwright = pytest.importorskip("playwright.sync_api")
skip_unless_ready()

pytestmark = pytest.mark.e2e

ROUNDS = 20
WAIT_MS = 60_000  # per download: generous, the machine may be busy


def _calibrated(page, server: str) -> None:
    """The demo validation set (traces stored in the file) evaluated on the Calibrate page."""
    open_calibrate_upload(page, server)
    page.locator('input[type="file"]').set_input_files(str(ROOT / "assets" / "datasets" / "demo_validation.csv"))
    page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=180_000)
    wait_idle(page, timeout=180_000)


def _click_for_download(page, button):
    """Click at once (no wait for the script) and return (download, None), or (None, why it did not come): the
    button's error message, a failed transfer, or nothing within ``WAIT_MS``."""
    error = page.locator('[data-testid="stDownloadButtonError"]')
    error.wait_for(state="detached", timeout=WAIT_MS)  # a previous click's message, shown for 5 s
    arrived = []

    def listener(d):
        arrived.append(d)

    page.on("download", listener)
    try:
        button.click(timeout=WAIT_MS)
        for _ in range(WAIT_MS // 100):
            if arrived or error.count():
                break
            page.wait_for_timeout(100)
    finally:
        page.remove_listener("download", listener)
    if not arrived:
        return None, f"error: {error.first.inner_text()}" if error.count() else "no download"
    failure = arrived[0].failure()
    return (None, f"failed: {failure}") if failure else (arrived[0], None)


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_flag_csv_arrives_after_each_threshold_change(server, page, tmp_path):
    from trace_core.cli import main

    _calibrated(page, server)
    page.get_by_role("link", name="Flag & export").click()
    wait_idle(page)
    slider = page.locator('.st-key-flag_threshold input[type="range"]')
    slider.press("End")  # threshold 1: every answer, the reference the other files are checked against
    wait_idle(page)
    first = tmp_path / "flagged_answers.csv"
    download(page, "Download flagged (CSV)").save_as(first)
    reference = _csv_rows(first)
    assert reference and {"row", "prompt", "answer", "probability_correct", "spike_context"} <= set(reference[0])
    # the export can be flagged again from the command line, as the page says: its scores replaced, not refused
    calibrator, again = tmp_path / "cal.json", tmp_path / "again.csv"
    assert main(["fit", str(ROOT / "assets" / "datasets" / "demo_validation.csv"), "--out", str(calibrator),
                 "--quiet"]) == 0
    assert main(["flag", str(first), "--calibrator", str(calibrator), "--coverage", "0.5", "--out", str(again),
                 "--quiet"]) == 0
    assert 0 < len(_csv_rows(again)) < len(reference)
    probability = {r["row"]: float(r["probability_correct"]) for r in reference}

    def flagged_at(threshold: float) -> set[str]:
        return {row for row, p in probability.items() if p < threshold}

    button = page.get_by_role("button", name="Download flagged (CSV)")
    lost, mixed, changed = [], [], 0
    for i in range(ROUNDS):
        before = float(slider.input_value())
        slider.press("ArrowLeft")  # down by one step, and click at once
        after = round(before - 0.01, 2)
        got, why = _click_for_download(page, button)
        if got is None:
            lost.append((i, why))
        else:
            rows = _csv_rows(Path(got.path()))
            exported = {r["row"] for r in rows}
            states = [t for t in (before, after) if exported == flagged_at(t)]
            if not rows or not states or list(rows[0]) != list(reference[0]):
                mixed.append((i, before, after, len(rows)))
            changed += flagged_at(before) != flagged_at(after)
        wait_idle(page)
    assert not lost, f"{len(lost)} of {ROUNDS} downloads lost: {lost}"
    assert not mixed, f"files that match neither threshold: {mixed}"
    assert changed >= ROUNDS // 2  # most changes changed the file: the test measured something


def _traces_file(path: Path, name: str) -> tuple[str, int]:
    """The format of a downloaded traces file (by its name) and its rows, after checking that it is whole."""
    text = path.read_text(encoding="utf-8")
    assert text, name
    if name.endswith(".jsonl"):
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
        assert all({"prompt", "answer", "surprisal"} <= set(r) for r in records), name
        return "jsonl", len(records)
    assert name.endswith(".csv"), name
    assert not text.lstrip().startswith("{"), name  # a JSON Lines file named .csv would be a mix
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert rows and {"prompt", "answer", "surprisal"} <= set(rows[0]), name
    return "csv", len(rows)


def test_calibrate_traces_download_arrives_after_each_format_change(server, page):
    _calibrated(page, server)
    page.get_by_role("button", name=re.compile(r"^Prepare the dataset with its [\d,]+ traces for download$")).click()
    name = re.compile(r"^Download the dataset with its [\d,]+ traces$")
    expected = _traces_file(Path((first := download(page, name)).path()), first.suggested_filename)[1]
    button = page.get_by_role("button", name=name)
    choices = page.locator(".st-key-trace_format")
    lost, wrong = [], []
    for i in range(ROUNDS):
        before, after = ("csv", "jsonl") if i % 2 == 0 else ("jsonl", "csv")
        choices.get_by_text("JSON Lines" if after == "jsonl" else "CSV", exact=True).click()
        got, why = _click_for_download(page, button)
        if got is None:
            lost.append((i, why))
        else:
            fmt, n = _traces_file(Path(got.path()), got.suggested_filename)
            if fmt not in (before, after) or n != expected:
                wrong.append((i, got.suggested_filename, n))
        wait_idle(page)
    assert not lost, f"{len(lost)} of {ROUNDS} downloads lost: {lost}"
    assert not wrong, f"files that are not a whole export: {wrong}"
