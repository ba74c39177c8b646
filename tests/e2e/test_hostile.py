"""Hostile content end to end: prompts, tokens, file names and dataset cells carrying HTML/JS, Streamlit Markdown
directives, control and bidi characters and a 10,000-character token are shown literally on every page, run
nothing, inject nothing, and the CSV export neutralises spreadsheet formulas.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from conftest import download, generate, open_calibrate_upload, skip_unless_ready, wait_idle

pytest.importorskip("playwright.sync_api")
skip_unless_ready()

pytestmark = pytest.mark.e2e

# Every script payload also sets window.__pwned, so code that ran without a dialog is caught too.
SCRIPT = "<script>window.__pwned=1;alert('xss-script')</script>"
IMG = "<img src=x onerror=\"window.__pwned=1;alert('xss-img')\">"
LINK = "<a href=\"javascript:window.__pwned=1\">html-link</a> [md-link](javascript:alert('xss-md'))"
RED = ":red[HOSTILE-RED]"
MATH = "$HOSTILE^2$"
ICON = ":material/bug_report:"
CONTROL = "bell\x07 escape\x1b[31m backspace\x08"
RLO = "abc\u202eevil.exe\u202c"
LONG = "L" * 10_000
FORMULAS = ["=1+1", "+1+1", "-1+1", "@SUM(A1)", "\t=1+1", "\r=1+1"]
EVERYTHING = " ".join([SCRIPT, IMG, LINK, RED, MATH, ICON, CONTROL, RLO])

# The hostile trace's tokens, one payload per token (as an API's logprobs could give them).
HOSTILE_TOKENS = [SCRIPT, " ", IMG, " ", LINK, " ", RED, " ", MATH, " ", ICON, " ", CONTROL, " ", RLO, " ", LONG,
                  " ", *FORMULAS]

INJECTED_JS = """() => {
    const main = document.querySelector('[data-testid="stMain"]') || document.body;
    const having = (sel, text) => [...main.querySelectorAll(sel)].filter(e => e.textContent.includes(text)).length;
    return {
        pwned: window.__pwned === 1,
        img: document.querySelectorAll('img[src="x"], [onerror]').length,
        script: main.querySelectorAll('script').length,
        jslink: document.querySelectorAll('a[href^="javascript" i]').length,
        katex: having('.katex', 'HOSTILE'),
        red: having('.stMarkdownColoredText', 'HOSTILE-RED'),
        icon: having('[role="img"]', 'bug_report'),
        bold: having('strong, b', 'HOSTILE-BOLD'),
    };
}"""


def assert_nothing_injected(page) -> None:
    assert page.dialogs == []
    found = page.evaluate(INJECTED_JS)
    assert found == {"pwned": False, "img": 0, "script": 0, "jslink": 0, "katex": 0, "red": 0, "icon": 0,
                     "bold": 0}, found
    assert page.locator('[data-testid="stException"]').count() == 0, page.inner_text('[data-testid="stMain"]')


def hostile_csv(path: Path) -> dict[int, dict[str, str]]:
    """A labeled dataset full of payloads; returns the rows as written, by 1-based row number."""
    rows: list[dict[str, str]] = []

    def add(prompt, answer, label, notes="", **trace):
        rows.append({"prompt": prompt, "answer": answer, "label": label, "notes": notes, "@risk": "@" + notes[:20],
                     "tokens": json.dumps(trace["tokens"]) if trace else "",
                     "surprisal": json.dumps(trace["surprisal"]) if trace else "",
                     "entropy": json.dumps(trace["entropy"]) if trace else ""})

    n = len(HOSTILE_TOKENS)
    # One recorded trace holding every payload as a token, very unsure.
    add(f"Q: {SCRIPT}\nA:", "".join(HOSTILE_TOKENS), "0", EVERYTHING,
        tokens=HOSTILE_TOKENS, surprisal=[6.0] * n, entropy=[5.0] * n)
    # Answers without a trace: the demo model records them (teacher forcing), splitting the payloads into tokens.
    for i, payload in enumerate([SCRIPT, IMG, LINK, RED, MATH, ICON, CONTROL, RLO, *FORMULAS]):
        add(f"Q: {payload} What is {i} plus 1?\nA:", f" {payload}", str(i % 2), payload)
        add(payload if payload[:1] in "=+-@\t\r" else f"{payload}?", f"{payload}", str((i + 1) % 2), f"-{i}")
    # A 10,000-character answer: longer than the demo model's context.
    add("Q: Say L ten thousand times.\nA:", LONG, "0", LONG)
    # Plain rows so both labels are well represented.
    for i in range(12):
        add(f"Q: What is {i} plus {i}?\nA:", f" {2 * i}", "1", "plain")
        add(f"Q: What is {i} times 3?\nA:", f" {i + 7}", "0", "plain")
    # Rejected: the label is a payload (its message is shown in a table).
    add("Q: bad label\nA:", " 1", SCRIPT + RED)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return {i + 1: r for i, r in enumerate(rows)}


def test_inspect_hostile_prompts(server, page):
    page.goto(server)
    wait_idle(page)
    box = page.get_by_label("Prompt", exact=True)
    for prompt in [f"Q: {SCRIPT} {IMG}\nA:", f"Q: {LINK}\nA:", f"Q: {RED} {MATH} {ICON} {CONTROL} {RLO}\nA:"]:
        generate(page, prompt)
        assert_nothing_injected(page)
        assert box.input_value() == prompt  # kept as typed, nothing stripped or run

    # Longer than the demo model's 256 positions: one clear sentence, not a traceback.
    box.fill(f"Q: {'W' * 7000}\nA:")
    page.get_by_role("button", name="Generate").click()
    page.wait_for_selector('[data-testid="stAlertContentError"]', timeout=60_000)
    wait_idle(page)
    assert_nothing_injected(page)
    assert "Shorten the prompt" in page.inner_text('[data-testid="stAlertContentError"]')

    # The error cleared the previous answer: no heatmap of another prompt under the message.
    assert page.locator('[data-testid="trace-heatmap"]').count() == 0

    # Close to the limit: the answer stops at the model's last position instead of failing there; an answer the
    # model ends at once is said in words instead of an empty heatmap.
    box.fill(f"Q: What is {'1' * 235} plus 1?\nA:")
    page.get_by_role("button", name="Generate").click()
    page.get_by_text("The answer is limited to").wait_for(timeout=60_000)
    wait_idle(page)
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0
    assert ("ended the answer at once" in page.inner_text('[data-testid="stMain"]')
            or page.locator('[data-testid="trace-heatmap"] .tr-tok').count() >= 1)
    assert_nothing_injected(page)


def test_calibrate_and_flag_hostile_dataset(server, page, tmp_path):
    path = tmp_path / "hostile.csv"
    written = hostile_csv(path)
    open_calibrate_upload(page, server)
    page.locator('input[type="file"]').set_input_files(str(path))
    wait_idle(page)
    assert_nothing_injected(page)
    page.get_by_role("button", name="Record").click()
    page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=120_000)
    wait_idle(page, timeout=120_000)
    assert_nothing_injected(page)
    main = page.inner_text('[data-testid="stMain"]')
    assert "TRACE+" in main and "1 rejected" in main
    # The 10,000-character answer is longer than the model's context: left out with a reason, not a crash.
    too_long = next(n for n, r in written.items() if r["answer"] == LONG)
    assert f"1 answer does not fit the model's context (256 tokens, prompt and answer together) and is left out: " \
           f"row {too_long}." in main
    page.get_by_text("Rejected rows and why").click()
    wait_idle(page)
    rejected = page.locator('[data-testid="stExpander"] [data-testid="stDataFrame"]').text_content()
    assert "<script>" in rejected
    calibrator = json.loads(Path(download(page, "Download calibrator (JSON)").path()).read_text(encoding="utf-8"))
    assert isinstance(calibrator, dict)

    page.get_by_role("link", name="Flag & export").click()
    wait_idle(page)
    slider = page.locator('.st-key-flag_threshold input[type="range"]')
    slider.focus()
    slider.press("End")
    wait_idle(page)
    assert_nothing_injected(page)
    table = page.locator('.st-key-flag_table [data-testid="stDataFrame"]')
    # Sort by row number (a click on the "row" header, right of the row markers), so the hostile row 1 comes first
    # whatever probability the calibrator gives it.
    box = table.bounding_box()
    page.mouse.click(box["x"] + 70, box["y"] + 17)
    wait_idle(page)
    cells = table.text_content()
    assert SCRIPT in cells and "abc\\u202eevil.exe" in cells and "\u202e" not in cells
    # Select the hostile trace's row (row 1 of the file) through the grid's row marker.
    index = page.evaluate("""() => [...document.querySelectorAll('.st-key-flag_table table tr')]
        .find(tr => tr.children[0].textContent === '1')?.getAttribute('aria-rowindex') ?? null""")
    assert index is not None and int(index) <= 10, "the hostile row is not among the rows the grid shows first"
    box = table.bounding_box()
    page.mouse.click(box["x"] + 18, box["y"] + 35 * (int(index) - 1) + 17)
    page.wait_for_selector('[data-testid="trace-heatmap"] .tr-tok', timeout=30_000)
    wait_idle(page)
    assert_nothing_injected(page)
    assert "Row 1 · TRACE confidence" in page.inner_text('[data-testid="stMain"]')
    heatmap = page.inner_text('[data-testid="trace-heatmap"]')
    for literal in [SCRIPT, IMG, RED, MATH, ICON, "\\u0007", "\\u001b", "\\u202e"]:
        assert literal in heatmap
    assert "\u202e" not in heatmap and "\x07" not in heatmap
    assert "… (+9800 chars)" in heatmap  # the 10k-character token is shortened in the page
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 1400 + 20  # the long token wraps instead of widening the page

    with Path(download(page, "Download flagged (CSV)").path()).open(newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader)
        exported = [dict(zip(header, r, strict=True)) for r in reader]
    assert "'@risk" in header
    assert len(exported) == len(written) - 2  # all but the rejected row and the one too long to score
    neutralised = kept_numbers = 0
    plain_number = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
    for row in exported:
        original = written[int(row["row"])]
        for column in ("prompt", "answer", "notes", "@risk"):
            shown = row["'" + column if column == "@risk" else column]
            if plain_number.fullmatch(original[column]):  # a real number is never changed
                assert shown == original[column], (column, row)
                kept_numbers += 1
            elif original[column][:1] in ("=", "+", "-", "@", "\t", "\r"):
                assert shown == "'" + original[column], (column, row)
                neutralised += 1
        for column, value in row.items():
            assert value[:1] not in ("=", "+", "-", "@", "\t", "\r") or plain_number.fullmatch(value), (column, value)
    assert neutralised >= 3 * len(FORMULAS) + len(exported)  # prompt and answer of the formula rows, every @risk
    assert kept_numbers >= 8  # the "-i" notes


def assert_shown_literally(page, *texts: str) -> None:
    shown = page.inner_text('[data-testid="stMain"]')
    for text in texts:
        assert text in shown, (text, shown[-2000:])


MARKDOWN_PAYLOADS = f"{IMG} {RED} {MATH} {ICON} [md-link](javascript:alert(1)) **HOSTILE-BOLD**"


def test_hostile_file_names_and_paths_in_messages(server, page):
    open_calibrate_upload(page, server)
    # Not a dataset: the error message repeats the file's name.
    page.locator('input[type="file"]').set_input_files(
        files=[{"name": f"{RED} {MATH} {SCRIPT}.csv", "mimeType": "text/csv", "buffer": b"not,a,dataset\n1,2,3\n"}])
    page.wait_for_selector('[data-testid="stAlertContentError"]', timeout=30_000)
    wait_idle(page)
    assert_nothing_injected(page)
    assert_shown_literally(page, f"{RED} {MATH} {SCRIPT}.csv")

    page.get_by_text("File path").click()
    wait_idle(page)
    box = page.get_by_label("Path of a dataset file on this machine")
    box.fill(f"/no/such/{MARKDOWN_PAYLOADS}.csv")
    box.press("Enter")
    page.wait_for_selector('[data-testid="stAlertContentError"]', timeout=30_000)
    wait_idle(page)
    assert_nothing_injected(page)
    assert_shown_literally(page, MARKDOWN_PAYLOADS)

    page.get_by_role("link", name="Flag & export").click()
    wait_idle(page)
    page.get_by_text("Load a saved calibrator").click()
    wait_idle(page)
    page.locator('input[type="file"]').set_input_files(
        files=[{"name": f"{RED} {MATH} {SCRIPT}.json", "mimeType": "application/json",
                "buffer": json.dumps({RED: SCRIPT}).encode()}])
    page.wait_for_selector('[data-testid="stAlertContentError"]', timeout=30_000)
    wait_idle(page)
    assert_nothing_injected(page)
    assert_shown_literally(page, f"{RED} {MATH} {SCRIPT}.json")
