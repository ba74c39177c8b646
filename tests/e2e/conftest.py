"""Shared by the browser end-to-end tests: a real Streamlit server on a free loopback port, Debian's headless
Chromium driven by Playwright, and helpers to wait for the app.

The test modules skip themselves when Chromium, Playwright or the demo model is missing; the fixtures here only
start things.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = _free_port()
    env = {**os.environ, "TRACE_LOCAL_FILES": "1", "PYTHONPATH": str(ROOT)}
    log = tmp_path_factory.mktemp("server") / "streamlit.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "main.py"),
                                 "--server.port", str(port), "--server.address", "127.0.0.1",
                                 "--server.headless", "true", "--browser.gatherUsageStats", "false"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("the Streamlit server did not start:\n" + log.read_text()[-3000:])
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


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
    try:  # first the run the last action asked for (it may be over already, or the action asked for none)
        page.wait_for_function(f"() => {state} !== 'notRunning'", polling=50, timeout=2_000)
    except PlaywrightTimeout:
        pass
    page.wait_for_function(f"() => {state} === 'notRunning'", polling=100, timeout=timeout)
    page.wait_for_timeout(300)


def screenshot(page, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    target = os.environ.get("TRACE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)


def generate(page, prompt: str) -> None:
    box = page.get_by_label("Prompt")
    box.fill(prompt)
    page.get_by_role("button", name="Generate").click()
    page.wait_for_selector('[data-testid="trace-heatmap"] .tr-tok', timeout=60_000)
    wait_idle(page)
