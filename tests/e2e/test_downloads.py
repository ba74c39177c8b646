"""End-to-end: a download clicked straight after a setting changed arrives, every time, and is the file of the
new setting: the rows the page shows once it has run with the change (never the previous setting's, never a mix).

The click is made without waiting for the rerun the change started, so it reaches the server while that rerun is
requested or going, and the browser still holds the button of the run before.
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
    lost, wrong, changed = [], [], 0
    for i in range(ROUNDS):
        before = float(slider.input_value())
        slider.press("ArrowLeft")  # down by one step, and click at once
        after = round(before - 0.01, 2)
        got, why = _click_for_download(page, button)
        wait_idle(page)
        shown = _flagged_count(page)
        if got is None:
            lost.append((i, why))
        else:
            rows = _csv_rows(Path(got.path()))
            exported = {r["row"] for r in rows}
            if exported != flagged_at(after) or len(rows) != shown or list(rows[0]) != list(reference[0]):
                wrong.append((i, after, len(rows), len(flagged_at(after)), shown))
            changed += flagged_at(before) != flagged_at(after)
    assert not lost, f"{len(lost)} of {ROUNDS} downloads lost: {lost}"
    assert not wrong, f"files that are not the new setting's rows (round, threshold, rows, expected, shown): {wrong}"
    assert changed >= ROUNDS // 2  # most changes changed the file: the test measured something

    # A change of mode, clicked at once: the file of the new mode's rows.
    modes = page.locator(".st-key-flag_mode")
    for i in range(4):
        mode = "Coverage" if i % 2 == 0 else "Probability threshold"
        modes.get_by_text(mode, exact=True).click()
        got, why = _click_for_download(page, button)
        wait_idle(page)
        assert got is not None, why
        assert len(_csv_rows(Path(got.path()))) == _flagged_count(page), mode


def _flagged_count(page) -> int:
    """The Flag page's "Flagged N of M" count."""
    metric = page.locator('[data-testid="stMetric"]').filter(has_text="Flagged").first
    return int(metric.locator('[data-testid="stMetricValue"]').inner_text().split(" of ")[0].replace(",", ""))


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


def test_calibrate_traces_downloads_arrive_in_their_format_clicked_one_after_another(server, page):
    _calibrated(page, server)
    label = {"csv": "CSV", "jsonl": "JSON Lines", "parquet": "Parquet"}
    expected = _traces_file(Path((first := download(page, re.compile("^CSV$"))).path()), first.suggested_filename)[1]
    lost, wrong = [], []
    for i in range(ROUNDS):
        fmt = ("jsonl", "csv")[i % 2]  # no wait between clicks
        got, why = _click_for_download(page, page.get_by_role("button", name=label[fmt], exact=True))
        if got is None:
            lost.append((i, why))
        else:
            shown, n = _traces_file(Path(got.path()), got.suggested_filename)
            if shown != fmt or n != expected:
                wrong.append((i, got.suggested_filename, n))
    assert not lost, f"{len(lost)} of {ROUNDS} downloads lost: {lost}"
    assert not wrong, f"files that are not a whole export in the format clicked: {wrong}"
