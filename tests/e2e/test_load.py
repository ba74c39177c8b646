"""The load test at a small size: concurrent sessions share one server and one model without errors, and a session
fed bad inputs gets its messages without disturbing the others."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, skip_unless_ready

pytest.importorskip("playwright.async_api")
skip_unless_ready()

pytestmark = pytest.mark.e2e


def test_load_test_small(tmp_path):
    out = tmp_path / "load.json"
    run = subprocess.run([sys.executable, "-m", "bench.load_test", "--sessions", "3", "--rounds", "1",
                          "--timeout", "240", "--json", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    print(run.stdout)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert "p50 s" in run.stdout and "p95 s" in run.stdout
    assert "errors in the 3 good sessions: 0; sessions completed without error: 3 of 3" in run.stdout
    result = json.loads(out.read_text())
    assert result["errors"] == []
    assert sorted(result["completed"]) == ["session 1", "session 2", "session 3"]
    assert result["bad_messages"] == {"bad: malformed CSV": True, "bad: missing path": True,
                                      "bad: prompt too long": True}
    assert {len(v) for v in result["latencies_s"].values()} == {3, 1}  # 3 good sessions, 1 bad one
    # 3 sessions, 2 prompts: one prompt was answered in two sessions at once, identically (greedy).
    assert sorted(len(shown) for shown in result["answers"].values()) == [1, 2]
    assert all(len(set(shown)) == 1 for shown in result["answers"].values())
    assert "same prompt, same answer in every session: yes" in run.stdout
