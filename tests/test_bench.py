"""The benchmarks run (at a tiny size); their timings are reported, never asserted."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")


def test_recording_overhead_bench_runs(capsys):
    from bench.recording_overhead import main

    main(["--vocab", "300", "--hidden", "32", "--new-tokens", "6", "--repeats", "1", "--batch", "1", "2"])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(lines) == 2 and "ratio" in out


def test_protocol_scale_bench_runs(capsys):
    from bench.protocol_scale import main

    main(["--sizes", "300", "600", "--splits", "2", "--mean-length", "10"])
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if line.strip()[:1].isdigit()]) == 2
