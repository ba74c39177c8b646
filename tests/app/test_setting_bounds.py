"""Settings past their bound are one clear line on every page and on the command line, never a crash deeper down
(``TRACE_MAX_DATA_MB=2**43`` used to overflow every read, ``TRACE_MAX_NEW_TOKENS=2**53`` every page)."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from trace_core.cli import main

ROOT = Path(__file__).resolve().parents[2]
CASES = [("TRACE_MAX_DATA_MB", 2**43, "1,048,576"), ("TRACE_MAX_NEW_TOKENS", 2**53, "131,072")]


@pytest.mark.parametrize("name, value, bound", CASES)
def test_every_page_names_the_setting_and_its_bound(monkeypatch, name, value, bound):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TRACE_DEFAULT_MODEL", "demo")
    monkeypatch.setenv(name, str(value))
    for page in (None, "../pages/calibrate.py", "../pages/flag.py", "../pages/compare.py"):
        at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=60)
        at.run()
        if page:
            at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        errors = [html.unescape(e.value) for e in at.error]
        assert errors == [f"{name}='{value}': expected a whole number from 1 to {bound}"], (page, errors)


def test_the_command_line_names_the_data_limit(monkeypatch, capsys):
    monkeypatch.setenv("TRACE_MAX_DATA_MB", str(2**43))
    assert main(["evaluate", str(ROOT / "assets" / "datasets" / "demo_test.csv"), "--splits", "2", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err == f"error: TRACE_MAX_DATA_MB='{2**43}': expected a whole number from 1 to 1,048,576\n", err
