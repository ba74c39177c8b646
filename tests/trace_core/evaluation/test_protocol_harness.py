"""The protocol's numbers on the six harness sets (bench/protocol_harness.py) equal the recorded ones to 1e-9: a
change to the protocol, the calibrators or the metric kernels that moves any per-split value shows here."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[2] / "data" / "protocol_reference.json"


@pytest.mark.slow
def test_the_protocol_gives_the_recorded_numbers_on_the_harness_sets(capsys):
    from bench.protocol_harness import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the sets include a truncated distribution on purpose
        assert main(["--check", str(REFERENCE)]) == 0, capsys.readouterr().out


def test_the_harness_check_fails_on_a_moved_number(tmp_path, capsys, monkeypatch):
    """The check can fail: one per-split value moved by 1e-6 is reported."""
    import bench.protocol_harness as harness

    reference = json.loads(REFERENCE.read_text(encoding="utf-8"))
    recorded = json.loads(json.dumps(reference))
    monkeypatch.setattr(harness, "snapshot", lambda: recorded)
    first = next(iter(reference))
    key = next(iter(reference[first]["per_split"]))
    reference[first]["per_split"][key] += 1e-6
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(reference), encoding="utf-8")
    assert harness.main(["--check", str(moved)]) == 1
    assert "1e-06" in capsys.readouterr().out
    del reference[first]["per_split"][key]
    moved.write_text(json.dumps(reference), encoding="utf-8")
    assert harness.main(["--check", str(moved)]) == 1
    assert "keys on one side only" in capsys.readouterr().out
