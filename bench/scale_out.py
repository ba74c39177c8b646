"""Evaluating sharded traces: one process streaming the shards against Ray Data on this machine, on the same shards.

    python -m bench.scale_out [--answers 1000000] [--shards 20] [--mean-length 64] [--workers 2]
                              [--engines stream ray] [--folder DIR]

Synthetic traces (:func:`trace_core.synthetic_traces`, surprisal and entropy per token, 0/1 labels) are written as
``--shards`` Parquet files of the dataset format (``--folder`` keeps them for another run; without it they go to a
temporary folder). Then, for each engine, a fresh process reads every shard into the compact per-answer table
(:func:`trace_core.scale.evaluate.read_compact`: the reading, checking and per-answer scores of every default
method; with ``ray``, on a local Ray with ``--workers`` CPUs) and runs the protocol on it
(:func:`~trace_core.scale.evaluate.evaluate_table`, 20 splits, in the driver).

Printed per engine: seconds and answers per second of the per-shard pass, its speed as a ratio to the streaming
run's, the protocol's seconds, the driver's peak resident memory (from /proc, Linux only) and each Ray worker's
(sampled every 0.2 s while the pass runs); then the size of the compact table against the per-token data (float32
surprisal and entropy, and the Parquet files on disk).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


def write_shards(folder: Path, answers: int, shards: int, mean_length: float) -> int:
    """``shards`` Parquet dataset files of synthetic traces in ``folder`` (skipped when they are there already);
    returns the number of tokens."""
    import numpy as np
    import pandas as pd

    from trace_core import synthetic_traces
    from trace_core.data import write_dataset
    from trace_core.traces.table import TraceTable
    from trace_core.traces.trace import TraceMetadata

    tokens = 0
    bounds = np.linspace(0, answers, shards + 1).astype(int)
    for k in range(shards):
        n = int(bounds[k + 1] - bounds[k])
        path = folder / f"part-{k:05d}.parquet"
        surprisal, entropy, labels = synthetic_traces(n, mean_length=mean_length, seed=k)
        assert entropy is not None
        count = int(surprisal.values.shape[0])
        tokens += count
        if path.exists():
            continue
        piece = " w"  # every token's text: the answer is the tokens joined
        table = TraceTable(
            prompts=tuple(f"question {k}-{i}" for i in range(n)),
            answers=tuple(piece * int(length) for length in surprisal.lengths), metadata=(TraceMetadata(),) * n,
            offsets=surprisal.offsets.astype(np.int64), token_ids=np.zeros(count, np.int64), tokens=(piece,) * count,
            surprisal=surprisal.values, entropy=entropy.values, has_entropy=np.ones(n, bool),
            top_k=np.zeros(n, np.int64), top_offsets=np.zeros(n + 1, np.int64), top_ids=np.zeros(0, np.int64),
            top_logprobs=np.zeros(0), ranks=np.zeros(count, np.int64), has_ranks=np.zeros(n, bool),
            top_tokens=(None,) * n)
        frame = pd.DataFrame({"prompt": table.prompts, "answer": table.answers, "label": labels})
        write_dataset(frame, path, traces=table)
    return tokens


def _status_kib(field: str, pid: str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _descends_from_us(pid: str) -> bool:
    """Whether process ``pid`` is a descendant of this one (a local Ray's workers are: its raylet is our child)."""
    import os

    me, seen = os.getpid(), 0
    while pid not in ("0", "1") and seen < 64:
        parent = _status_kib("PPid", pid)  # the field as a number
        if parent == me:
            return True
        pid, seen = str(parent), seen + 1
    return False


class _WorkerPeaks:
    """The largest resident memory seen of every Ray worker process (``ray::`` in its command line), sampled on a
    thread while the pass runs."""

    def __init__(self) -> None:
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit():
                    continue
                try:
                    command = (proc / "cmdline").read_bytes()
                    if command.startswith(b"ray::") and _descends_from_us(proc.name):  # our Ray's workers
                        rss = _status_kib("VmRSS", proc.name)
                        self.peaks[proc.name] = max(self.peaks.get(proc.name, 0), rss)
                except OSError:
                    continue

    def __enter__(self) -> _WorkerPeaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _child(folder: Path, engine: str, workers: int) -> dict:
    import warnings

    from trace_core import EvaluationConfig
    from trace_core.scale import list_shards
    from trace_core.scale.evaluate import evaluate_table, read_compact

    shards = list_shards(str(folder))
    Path("/proc/self/clear_refs").write_text("5")
    start = time.perf_counter()
    with _WorkerPeaks() as workers_seen:
        options = {} if engine == "stream" else {"engine": "ray", "workers": workers}
        scores = read_compact(shards, **options)
    passed = time.perf_counter() - start
    table = scores.table
    compact = sum(a.nbytes for a in [*table.inputs.scalar.values(), *table.inputs.features.values(), table.labels,
                                     table.rows, table.shard])
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        evaluate_table(table, config=EvaluationConfig(n_splits=20, seed=0))
    protocol = time.perf_counter() - start
    return {"answers": len(table), "pass_s": passed, "protocol_s": protocol, "compact_bytes": compact,
            "driver_peak_kib": _status_kib("VmHWM"), "worker_peaks_kib": sorted(workers_seen.peaks.values())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=20)
    parser.add_argument("--mean-length", type=float, default=64.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--engines", nargs="+", default=["stream", "ray"], choices=["stream", "ray"])
    parser.add_argument("--folder", help="keep the shards here (reused when they are there)")
    parser.add_argument("--child", nargs=3, metavar=("FOLDER", "ENGINE", "WORKERS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(Path(args.child[0]), args.child[1], int(args.child[2]))))
        return
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(args.folder) if args.folder else Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        tokens = write_shards(folder, args.answers, args.shards, args.mean_length)
        on_disk = sum(p.stat().st_size for p in folder.glob("*.parquet"))
        print(f"{args.answers:,} answers, {tokens:,} tokens in {args.shards} Parquet shards ({on_disk / MIB:,.0f} MiB "
              f"on disk; written in {time.perf_counter() - start:.0f} s); per-token surprisal and entropy in float32: "
              f"{2 * 4 * tokens / MIB:,.0f} MiB")
        print(f"{'engine':<8} {'pass s':>8} {'answers/s':>10} {'vs stream':>10} {'protocol s':>11} "
              f"{'driver peak MiB':>16}  worker peaks MiB")
        baseline = None
        compact = 0
        for engine in args.engines:
            out = subprocess.run([sys.executable, "-m", "bench.scale_out", "--child", str(folder), engine,
                                  str(args.workers)], cwd=ROOT, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "?"
                print(f"{engine:<8} failed: {last[:300]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            speed = r["answers"] / r["pass_s"]
            baseline = baseline or (speed if engine == "stream" else None)
            ratio = f"{speed / baseline:.2f}x" if baseline else "-"
            workers = ", ".join(f"{k / 1024:,.0f}" for k in r["worker_peaks_kib"]) or "-"
            print(f"{engine:<8} {r['pass_s']:>8.1f} {speed:>10,.0f} {ratio:>10} {r['protocol_s']:>11.1f} "
                  f"{r['driver_peak_kib'] / 1024:>16,.0f}  {workers}")
            compact = r["compact_bytes"]
        if compact:
            print(f"compact per-answer table: {compact / MIB:,.0f} MiB ({compact / args.answers:,.0f} bytes per "
                  f"answer), {compact / (2 * 4 * tokens):.2f}x the float32 per-token arrays, "
                  f"{compact / on_disk:.2f}x the Parquet files")


if __name__ == "__main__":
    main()
