"""The benchmarks run (at a tiny size); their timings are reported, never asserted."""

from __future__ import annotations

import importlib.util

import pytest

# Every benchmark but large_jsonl and protocol_scale runs a model (torch); the runner and those two need none.
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")


@pytest.mark.slow
@needs_torch
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


def test_protocol_scale_prints_the_cost_of_named_methods(capsys):
    from bench.protocol_scale import main

    main(["--sizes", "300", "--splits", "2", "--mean-length", "10", "--cost-of", "CES", "Trace Profile"])
    out = capsys.readouterr().out
    row = [line for line in out.splitlines() if line.strip()[:1].isdigit()][0].split()
    assert "without CES, Trace Profile" in out and len(row) == 7
    assert float(row[-1]) > 0 and float(row[-2]) > 0  # with / without, from unrounded times
    with pytest.raises(SystemExit):
        main(["--sizes", "300", "--cost-of", "Oracle"])


def test_protocol_scale_profile_names_where_the_time_goes(capsys):
    from bench.protocol_scale import main

    main(["--sizes", "400", "--splits", "2", "--mean-length", "10", "--profile"])
    out = capsys.readouterr().out.split("by part (")[1]
    shares = [float(line.rsplit(None, 1)[1].rstrip("%")) for line in out.splitlines()[1:] if line.strip()]
    assert len(shares) == 11 and all(s > 0 for s in shares[:2])  # Platt and TRACE+ fits ran
    assert sum(shares) == pytest.approx(100, abs=0.6)  # the parts and the rest cover the run (11 rounded shares)


def _table_rows(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.strip()[:1].isdigit()]


@pytest.mark.slow
@needs_torch
def test_scoring_throughput_bench_runs(capsys):
    from bench.scoring_throughput import main

    main(["--answers", "6", "--batch", "4", "--repeats", "1", "--vocab", "300", "--hidden", "32", "--layers", "1"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("demo", "random"))]
    assert len(rows) == 2 and all(row.split()[-3] == "yes" for row in rows), out
    assert all(float(row.split()[-1]) > 0 for row in rows)  # forward / batched


@pytest.mark.slow
@pytest.mark.scale
@needs_torch
def test_trace_memory_bench_runs(capsys):
    from bench.trace_memory import main

    main(["--lengths", "8", "--vocabs", "300", "--hidden", "32", "--layers", "1"])
    out = capsys.readouterr().out
    rows = _table_rows(out)
    assert len(rows) == 1 and "MiB" in rows[0], out


@pytest.mark.slow
@needs_torch
def test_dashboard_bench_runs(capsys, monkeypatch):
    from bench.dashboard import main

    monkeypatch.setenv("TRACE_LOCAL_FILES", "1")
    monkeypatch.delenv("TRACE_DATA_DIR", raising=False)  # the bench points it at its own temporary folder
    main(["--tokens", "8", "--rows", "120", "--repeats", "1"])
    out = capsys.readouterr().out
    assert out.count("Inspect:") == 2 and "Calibrate: 120 rows" in out, out
    assert "outside the page: read_dataset" in out, out


def test_bench_runner_lists_every_benchmark(capsys):
    from bench.__main__ import BENCHES, main

    main(["--list"])
    out = capsys.readouterr().out
    assert all(name in out for name in BENCHES)


@pytest.mark.slow
def test_large_jsonl_bench_runs(capsys, tmp_path):
    from bench.large_jsonl import main

    main(["--rows", "60", "--splits", "2", "--keep", str(tmp_path / "small.jsonl")])
    out = capsys.readouterr().out
    names = ("json.loads", "read_dataset", "evaluate")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(names)}
    assert set(rows) == set(names), out
    assert all(row[-1] == "ok" for row in rows.values()), out  # every run exited 0
    assert (tmp_path / "small.jsonl").stat().st_size > 0 and "60 answers" in out


def test_server_throughput_bench_skips_cleanly_without_vllm(capsys, monkeypatch):
    from bench.server_throughput import main

    monkeypatch.delenv("TRACE_VLLM_PYTHON", raising=False)
    main([])
    out = capsys.readouterr().out
    assert "server_throughput skipped:" in out and "TRACE_VLLM_PYTHON is not set" in out


@pytest.mark.slow
def test_span_cost_bench_runs(capsys):
    from bench.span_cost import main

    main(["--copies", "1", "--repeats", "1"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows[-1][0] == "all" and int(rows[-1][1].replace(",", "")) == 458 and float(rows[-1][5]) > 0


@pytest.mark.slow
@pytest.mark.scale
def test_protocol_floor_bench_runs(capsys):
    from bench.protocol_floor import main

    main(["--sizes", "400", "--splits", "2", "--sklearn-splits", "1", "--mean-length", "8"])
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 1 and len(rows[0]) == 7  # answers, methods, three timings, two ratios


def test_scale_out_bench_runs(capsys):
    from bench.scale_out import main

    main(["--answers", "600", "--shards", "2", "--mean-length", "8", "--engines", "stream"])
    out = capsys.readouterr().out
    row = next(line.split() for line in out.splitlines() if line.startswith("stream"))
    assert row[3] == "1.00x" and float(row[2].replace(",", "")) > 0, out
    assert "compact per-answer table" in out and "bytes per answer" in out, out


def test_evaluate_memory_bench_runs(capsys):
    from bench.evaluate_memory import main

    main(["--answers", "300", "--mean-length", "8", "--splits", "2"])
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("float")]
    assert [r[0] for r in rows] == ["float64", "float32"] and [r[1] for r in rows] == ["float64", "float32"], out
    assert all(r[-2].endswith("x") for r in rows), out
    libraries = [line for line in out.splitlines() if line.startswith("of each peak")]
    assert len(libraries) == 1 and float(libraries[0].split()[3].replace(",", "")) > 0, out


@pytest.mark.slow
@needs_torch
def test_threads_bench_runs(capsys):
    """One wait policy (each policy is a worker process of its own, started the same way)."""
    from bench.threads import main

    main(["--model", "random", "--vocab", "300", "--hidden", "32", "--layers", "1", "--new-tokens", "4",
          "--answers", "2", "--batch", "2", "--repeats", "1", "--loads", "idle", "one", "--wait-policy", "default"])
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith(("idle ", "one "))]
    idle = [row for row in rows if row[0] == "idle"]
    assert len(idle) >= 2 and len(rows) == 2 * len(idle), out  # every setting under both loads
    assert {row[1] for row in rows} == {"default"}
    baseline = [row for row in rows if "default" in row[3]]
    assert len(baseline) == 2 and all(row[-1] == row[-3] == "1.00" for row in baseline), out
    assert sum("auto" in " ".join(row) for row in rows) == 2, out
    assert "target: the automatic choice streams >= 5 tokens/s" in out and "under load 'one'" in out


def test_import_cost_bench_runs(capsys):
    from bench.import_cost import main

    main(["--repeats", "1"])
    out = capsys.readouterr().out
    assert "import pandas (baseline)" in out and "import trace_core adds" in out
