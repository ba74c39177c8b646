"""Load test of the dashboard: concurrent browser sessions on one Streamlit server, loopback only.

    python -m bench.load_test [--sessions 8] [--rounds 2] [--timeout 900] [--json results.json]

Starts its own server on a free 127.0.0.1 port and one headless Chromium (Debian's, driven by Playwright) with a
browser context per session, all running at once. Each session, every round: opens Inspect, generates an answer and
waits for its heatmap; opens Calibrate, uploads assets/datasets/demo_validation.csv and waits for the metrics table
and the reliability plot. One more "bad" session runs at the same time: a malformed CSV, a path that does not exist
and a prompt longer than the model's context must each give their clear error message, and a session that
disconnects while its upload is being processed must not disturb the others. Errors are exceptions shown in a page,
dialogs, time-outs and failed checks; greedy answers to the same prompt must be the same in every session (the model
is shared). Prints per action: count, errors, p50, p95 and max latency in seconds (from the action to the end of the
script run it caused, as the browser sees it). TRACE_LOAD_SHOTS=folder saves a screenshot of each failed action.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from trace_core import settings

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DATASET = ROOT / "assets" / "datasets" / "demo_validation.csv"
# Two prompts, so that from 3 sessions on several sessions ask the same one at the same time.
PROMPTS = ["Q: What is 23 plus 19?\nA:", "Q: Tell me the year Drahustan was founded.\nA:"]
# The bad session's inputs and the message each must produce (a sentence, not a traceback).
MALFORMED = b"this is,not\na dataset\n"
BAD_EXPECTED = {
    "bad: malformed CSV": "missing required columns",
    "bad: missing path": "No file at",
    "bad: prompt too long": "Shorten the prompt",
}
ACTION_TIMEOUT_MS = 180_000


@dataclass
class Results:
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: list[tuple[str, str, str]] = field(default_factory=list)  # (session, action, what)
    bad_messages: dict[str, bool] = field(default_factory=dict)
    completed: list[str] = field(default_factory=list)
    answers: dict[str, list[str]] = field(default_factory=dict)  # prompt -> the answers shown for it

    def record(self, action: str, seconds: float) -> None:
        self.latencies.setdefault(action, []).append(seconds)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(log_path: Path, timeout: float = 90, default_model: str | None = None) -> tuple[subprocess.Popen, str]:
    """The dashboard on a free loopback port; returns the process and its URL once it answers. ``default_model``
    (TRACE_DEFAULT_MODEL) overrides the environment's choice."""
    port = _free_port()
    # the demo model unless told: the load test and the browser tests measure the app, not a 135M-parameter model
    env = {"TRACE_DEFAULT_MODEL": "demo", **os.environ, "TRACE_LOCAL_FILES": "1", "PYTHONPATH": str(ROOT)}
    if default_model is not None:
        env["TRACE_DEFAULT_MODEL"] = default_model
    with log_path.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "main.py"),
                                 "--server.port", str(port), "--server.address", "127.0.0.1",
                                 "--server.headless", "true", "--browser.gatherUsageStats", "false",
                                 # no reloading of edited modules mid-run: a model cached before an edit would no
                                 # longer be an instance of the reloaded LoadedModel class
                                 "--server.fileWatcherType", "none"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    stop_server(proc)
    raise RuntimeError("the Streamlit server did not start:\n" + log_path.read_text()[-3000:])


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


IDLE_JS = ("() => document.querySelector('[data-testid=\"stApp\"]')"
           "?.getAttribute('data-test-script-state') === 'notRunning'")


async def wait_idle(page, timeout: float = ACTION_TIMEOUT_MS) -> None:
    """Until the session's script run is over (the app root carries its state). Callers first wait for something
    the run they caused shows, so that this is not the run before it."""
    await page.wait_for_selector('[data-testid="stApp"]', timeout=timeout)
    # Timed polling: animation frames, the default, are throttled in pages that are not in front.
    await page.wait_for_function(IDLE_JS, polling=100, timeout=timeout)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200] if text else ''}"


def _watch_dialogs(page, results: Results, session: str) -> None:
    """A dialog would be injected script running: count it as an error."""

    async def on_dialog(dialog):
        results.errors.append((session, "dialog", dialog.message[:200]))
        await dialog.dismiss()

    page.on("dialog", on_dialog)


async def page_exception(page) -> str | None:
    shown = page.locator('[data-testid="stException"]')
    if await shown.count():
        return (await shown.first.inner_text())[:300]
    return None


async def timed(results: Results, session: str, action: str, step) -> bool:
    """Run one action, record its latency, and any error (exception in the page, time-out, failed check)."""
    start = time.perf_counter()
    try:
        await step()
        problem = await page_exception(step.page)
    except Exception as exc:  # a time-out or a failed check is this session's error, not the run's
        problem = _one_line(exc)
    results.record(action, time.perf_counter() - start)
    if problem:
        results.errors.append((session, action, problem))
        shots = settings.get("TRACE_LOAD_SHOTS")
        if shots:
            await step.page.screenshot(path=str(Path(shots) / f"{session}-{action}.png"))
    return problem is None


class Step:
    """An action bound to its page (so ``timed`` can look for an exception shown there)."""

    def __init__(self, page, fn):
        self.page, self.fn = page, fn

    async def __call__(self):
        await self.fn(self.page)


async def open_inspect(page, url):
    await page.goto(url)
    await wait_idle(page)
    await page.get_by_label("Prompt").wait_for(timeout=ACTION_TIMEOUT_MS)


async def generate(page, prompt, results: Results):
    await page.get_by_label("Prompt").fill(prompt)
    await page.get_by_role("button", name="Generate").click()
    await page.wait_for_selector('[data-testid="trace-heatmap"] .tr-tok', timeout=ACTION_TIMEOUT_MS)
    await wait_idle(page)
    # Greedy decoding: every session must show the same answer, whoever else is using the model.
    results.answers.setdefault(prompt, []).append(await page.inner_text('[data-testid="trace-heatmap"]'))


async def open_calibrate(page):
    await page.get_by_role("link", name="Calibrate").click()
    await page.get_by_role("heading", name="Calibrate and compare").wait_for()
    await wait_idle(page)
    await page.get_by_text("Upload a file").click()
    await page.locator('input[type="file"]').wait_for(state="attached")
    await wait_idle(page)


@functools.lru_cache(maxsize=4)
def _rows(path: Path) -> int:
    """Data rows of a CSV file (a quoted cell may hold newlines); counted once, before the timed actions."""
    import csv

    with open(path, newline="", encoding="utf-8") as handle:
        return sum(1 for _ in csv.reader(handle)) - 1


async def upload_and_evaluate(page):
    await page.locator('input[type="file"]').set_input_files(str(DATASET))
    await page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=ACTION_TIMEOUT_MS)
    await page.get_by_role("button", name="Download calibrator (JSON)").wait_for(timeout=ACTION_TIMEOUT_MS)
    await wait_idle(page)
    shown = await page.inner_text('[data-testid="stMain"]')
    if f"{_rows(DATASET):,} rows read" not in shown or "Metrics (mean" not in shown:
        raise AssertionError("the Calibrate page shows no metrics for the uploaded file")


async def new_context(browser):
    context = await browser.new_context(viewport={"width": 1400, "height": 1600})
    # Slow is measured, not failed: every wait gets the same bound (Playwright's default is 30 s).
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    return context


async def good_session(browser, url: str, index: int, rounds: int, results: Results) -> None:
    name = f"session {index + 1}"
    context = await new_context(browser)
    try:
        page = await context.new_page()
        _watch_dialogs(page, results, name)
        ok = True
        for r in range(rounds):
            prompt = PROMPTS[(index + r) % len(PROMPTS)]
            ok &= await timed(results, name, "open Inspect", Step(page, lambda p: open_inspect(p, url)))
            ok &= await timed(results, name, "generate", Step(page, lambda p, q=prompt: generate(p, q, results)))
            ok &= await timed(results, name, "open Calibrate", Step(page, open_calibrate))
            ok &= await timed(results, name, "upload + evaluate", Step(page, upload_and_evaluate))
        if ok:
            results.completed.append(name)
    finally:
        await context.close()


async def expect_error(page, expected: str) -> None:
    alert = page.locator('[data-testid="stAlertContentError"]')
    await alert.first.wait_for(timeout=ACTION_TIMEOUT_MS)
    await wait_idle(page)
    text = await alert.first.inner_text()
    if expected not in text:
        raise AssertionError(f"expected an error saying {expected!r}, got {text[:200]!r}")


async def bad_session(browser, url: str, results: Results) -> None:
    """Bad inputs and a disconnect, at the same time as the good sessions; their messages are checked."""
    name = "bad"
    context = await new_context(browser)
    try:
        page = await context.new_page()
        _watch_dialogs(page, results, name)

        async def malformed(p):
            await p.goto(url)
            await wait_idle(p)
            await open_calibrate(p)
            await p.locator('input[type="file"]').set_input_files(
                files=[{"name": "malformed.csv", "mimeType": "text/csv", "buffer": MALFORMED}])
            await expect_error(p, BAD_EXPECTED["bad: malformed CSV"])

        async def missing_path(p):
            await p.get_by_text("File path").click()
            await wait_idle(p)
            box = p.get_by_label("Path of a dataset file on this machine")
            await box.fill(str(Path(tempfile.gettempdir()) / "trace-load-test" / "no-such-file.csv"))
            await box.press("Enter")
            await expect_error(p, BAD_EXPECTED["bad: missing path"])

        async def long_prompt(p):
            await open_inspect(p, url)
            await p.get_by_label("Prompt").fill("Q: " + "W" * 2000 + "\nA:")
            await p.get_by_role("button", name="Generate").click()
            await expect_error(p, BAD_EXPECTED["bad: prompt too long"])

        for action, fn in [("bad: malformed CSV", malformed), ("bad: missing path", missing_path),
                           ("bad: prompt too long", long_prompt)]:
            got = await timed(results, name, action, Step(page, fn))
            results.bad_messages[action] = got
    finally:
        await context.close()

    # A session that leaves while the server is still reading its upload.
    context = await new_context(browser)
    try:
        page = await context.new_page()
        await open_inspect(page, url)
        await open_calibrate(page)
        await page.locator('input[type="file"]').set_input_files(str(DATASET))
        await page.wait_for_timeout(200)
    except Exception as exc:
        results.errors.append(("bad", "disconnect", _one_line(exc)))
    finally:
        await context.close()


async def run(url: str, sessions: int, rounds: int, results: Results) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True,
            args=[*CHROMIUM_ARGS,
                  # Every session's page is "in front": no throttled timers or frames in the ones that are not.
                  "--disable-background-timer-throttling", "--disable-backgrounding-occluded-windows",
                  "--disable-renderer-backgrounding"])
        try:
            jobs = [good_session(browser, url, i, rounds, results) for i in range(sessions)]
            outcomes = await asyncio.gather(*jobs, bad_session(browser, url, results), return_exceptions=True)
            for i, outcome in enumerate(outcomes):
                if isinstance(outcome, BaseException):  # a session's own set-up failed
                    who = f"session {i + 1}" if i < sessions else "bad"
                    results.errors.append((who, "session", _one_line(outcome)))
        finally:
            await browser.close()


def percentile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def report(results: Results, sessions: int, rounds: int, wall: float) -> str:
    lines = [f"load test: {sessions} sessions x {rounds} rounds, plus 1 bad session, one server on 127.0.0.1; "
             f"wall {wall:.1f} s",
             f"{'action':<22} {'count':>5} {'errors':>6} {'p50 s':>7} {'p95 s':>7} {'max s':>7}"]
    order = ["open Inspect", "generate", "open Calibrate", "upload + evaluate", *BAD_EXPECTED]
    for action in sorted(results.latencies, key=lambda a: order.index(a) if a in order else len(order)):
        values = results.latencies[action]
        errors = sum(1 for _, a, _ in results.errors if a == action)
        lines.append(f"{action:<22} {len(values):>5} {errors:>6} {statistics.median(values):>7.2f} "
                     f"{percentile(values, 95):>7.2f} {max(values):>7.2f}")
    good_errors = [e for e in results.errors if e[0] != "bad"]
    lines.append(f"errors in the {sessions} good sessions: {len(good_errors)}; sessions completed without error: "
                 f"{len(results.completed)} of {sessions}")
    differing = [p for p, shown in results.answers.items() if len(set(shown)) > 1]
    lines.append(f"same prompt, same answer in every session: {'yes' if not differing else 'NO'} "
                 f"({sum(map(len, results.answers.values()))} answers to {len(results.answers)} prompts)")
    got = sum(results.bad_messages.values())
    lines.append(f"bad session: {got} of {len(BAD_EXPECTED)} clear error messages "
                 + ", ".join(f"{a.removeprefix('bad: ')} {'ok' if ok else 'MISSING'}"
                             for a, ok in results.bad_messages.items()))
    for session, action, what in results.errors:
        lines.append(f"  error: {session} / {action}: {what}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900, help="overall limit in seconds")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if not 1 <= args.sessions <= 32 or not 1 <= args.rounds <= 10:
        parser.error("--sessions must be 1..32 and --rounds 1..10")
    if not CHROMIUM.exists():
        parser.error("Debian's chromium is not installed (apt-get install chromium)")

    results = Results()
    _rows(DATASET)  # the row count the Calibrate page must show, read before any action is timed
    with tempfile.TemporaryDirectory(prefix="trace-load-") as tmp:
        proc, url = start_server(Path(tmp) / "streamlit.log")
        start = time.perf_counter()
        try:
            asyncio.run(asyncio.wait_for(run(url, args.sessions, args.rounds, results), timeout=args.timeout))
        except asyncio.TimeoutError:
            results.errors.append(("all", "run", f"did not finish within {args.timeout:g} s"))
        finally:
            wall = time.perf_counter() - start
            stop_server(proc)
    print(report(results, args.sessions, args.rounds, wall))
    if args.json:
        args.json.write_text(json.dumps({
            "sessions": args.sessions, "rounds": args.rounds, "wall_s": wall, "latencies_s": results.latencies,
            "errors": results.errors, "bad_messages": results.bad_messages, "completed": results.completed,
            "answers": results.answers}, indent=1))
    passed = (not results.errors and len(results.completed) == args.sessions
              and all(results.bad_messages.get(a) for a in BAD_EXPECTED)
              and all(len(set(shown)) == 1 for shown in results.answers.values()))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
