"""Shared by the browser end-to-end tests: a real Streamlit server on a free loopback port, Debian's headless
Chromium driven by Playwright, and helpers to wait for the app.

The test modules skip themselves when Chromium, Playwright or the demo model is missing; the fixtures here only
start things.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest

from bench.load_test import CHROMIUM, CHROMIUM_ARGS, start_server, stop_server
from trace_core import settings

ROOT = Path(__file__).resolve().parents[2]


def skip_unless_ready() -> None:
    """Skip the calling test module (at import) when Chromium or the demo model is missing."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)
    if not (ROOT / "assets" / "demo-model" / "model.safetensors").exists():
        pytest.skip("the demo model is not built", allow_module_level=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    try:
        proc, url = start_server(tmp_path_factory.mktemp("server") / "streamlit.log")
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield url
    stop_server(proc)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 2000}, accept_downloads=True)
    pg = context.new_page()
    pg.dialogs = []
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
    yield pg
    context.close()


def wait_idle(page, timeout: float = 60_000) -> None:
    """Wait until the app has finished running its script."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    # The status widget is hidden in the minimal toolbar: read the script state the app root carries instead.
    state = "document.querySelector('[data-testid=\"stApp\"]')?.getAttribute('data-test-script-state')"
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout)
    # first the run the last action asked for (it may be over already, or the action asked for none)
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(f"() => {state} !== 'notRunning'", polling=50, timeout=2_000)
    page.wait_for_function(f"() => {state} === 'notRunning'", polling=100, timeout=timeout)
    page.wait_for_timeout(300)


def download(page, button: str, timeout: float = 60_000):
    """Click the download button named ``button`` once the page has settled (the button drawn, the script idle: a
    click during a page switch's first run is answered by that run, not by a download) and return the download."""
    target = page.get_by_role("button", name=button)
    target.wait_for(state="visible", timeout=timeout)
    wait_idle(page)
    with page.expect_download(timeout=timeout) as info:
        target.click()
    return info.value


def screenshot(page, tmp_path: Path, name: str, publish: bool = True) -> None:
    """A full-page screenshot in ``tmp_path``, also copied into TRACE_SCREENSHOTS (the README's) when ``publish``."""
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    target = settings.get("TRACE_SCREENSHOTS")
    if target and publish:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)


def generate(page, prompt: str) -> None:
    box = page.get_by_label("Prompt", exact=True)
    box.fill(prompt)
    page.get_by_role("button", name="Generate").click()
    page.wait_for_selector('[data-testid="trace-heatmap"] .tr-tok', timeout=60_000)
    wait_answered(page)


def wait_answered(page, timeout: float = 120_000) -> None:
    """Wait for the finished answer on Inspect: the answer streams in first (its heatmap grows), and its numbers
    come with the finished answer, in a rerun of the page after the stream."""
    page.wait_for_function("() => document.body.innerText.includes('TRACE confidence')", polling=200,
                           timeout=timeout)
    wait_idle(page)


def open_calibrate_upload(page, server: str) -> None:
    """Open the app, go to Calibrate and choose "Upload a file", waiting for each script run."""
    page.goto(server)
    wait_idle(page)
    page.get_by_role("link", name="Calibrate").click()
    wait_idle(page)
    page.get_by_text("Upload a file").click()
    wait_idle(page)
