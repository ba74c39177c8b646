"""Peak memory of :func:`trace_core.evaluate_arrays` on many answers, against the float32 size of its per-token arrays.

    python -m bench.evaluate_memory [--answers 1000000] [--mean-length 64] [--splits 20] [--dtype float64 float32]

Synthetic traces (:func:`trace_core.synthetic_traces`: surprisal and entropy per token, 0/1 labels) are saved as
``.npy`` files; then, for each dtype, a fresh process loads them in that dtype and runs the whole protocol (every
default method, both calibrators, the paired comparison) on them. Printed, in MiB: the float32 size of the per-token
arrays (surprisal and entropy: the least any float per-token store needs), the inputs as loaded, and the peak
resident memory from just before loading to the end of ``evaluate_arrays`` (so the inputs count), with the peak as
a ratio to the float32 size (target: at most 2), and the peak above the inputs as loaded (what evaluate itself adds) in
the same unit. Then, in another fresh process, the memory a small evaluation adds (the libraries and compiled loops
loaded on first use): a fixed part of each peak. Linux only (reads the peak from /proc/self/status).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _child(folder: Path, dtype: str, splits: int) -> dict:
    import gc
    import time
    import warnings

    import numpy as np

    from trace_core import EvaluationConfig, evaluate_arrays
    from trace_core.traces.ragged import Ragged

    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from the current RSS
    before = _status_kib("VmRSS")
    offsets = np.load(folder / "offsets.npy")
    surprisal = Ragged(np.load(folder / "surprisal.npy").astype(dtype, copy=False), offsets)
    entropy = Ragged(np.load(folder / "entropy.npy").astype(dtype, copy=False), offsets)
    labels = np.load(folder / "labels.npy")
    loaded = _status_kib("VmRSS") - before
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        evaluate_arrays(surprisal, entropy, labels, config=EvaluationConfig(n_splits=splits, seed=0))
    seconds = time.perf_counter() - start
    return {"loaded_kib": loaded, "peak_kib": _status_kib("VmHWM") - before, "seconds": seconds,
            "stored_dtype": str(surprisal.values.dtype)}


def _libraries() -> dict:
    """The resident memory a small evaluation adds to a fresh process that has imported trace_core: the libraries
    and compiled loops the protocol loads on first use (numba's, scipy), the same whatever the data size."""
    import gc
    import warnings

    from trace_core import EvaluationConfig, evaluate_arrays, synthetic_traces

    surprisal, entropy, labels = synthetic_traces(3_000, mean_length=20, seed=0)
    gc.collect()
    before = _status_kib("VmRSS")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        evaluate_arrays(surprisal, entropy, labels, config=EvaluationConfig(n_splits=2, seed=0))
    gc.collect()
    return {"libraries_kib": _status_kib("VmRSS") - before}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=1_000_000)
    parser.add_argument("--mean-length", type=float, default=64.0)
    parser.add_argument("--splits", type=int, default=20)
    parser.add_argument("--dtype", nargs="+", default=["float64", "float32"], choices=["float64", "float32"])
    parser.add_argument("--child", nargs=3, metavar=("FOLDER", "DTYPE", "SPLITS"), help=argparse.SUPPRESS)
    parser.add_argument("--libraries", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(Path(args.child[0]), args.child[1], int(args.child[2]))))
        return
    if args.libraries:
        print(json.dumps(_libraries()))
        return

    import numpy as np

    from trace_core import synthetic_traces

    with tempfile.TemporaryDirectory() as folder:
        surprisal, entropy, labels = synthetic_traces(args.answers, mean_length=args.mean_length, seed=0)
        assert entropy is not None
        n_tokens = int(surprisal.values.shape[0])
        np.save(Path(folder) / "offsets.npy", surprisal.offsets)
        np.save(Path(folder) / "surprisal.npy", surprisal.values)
        np.save(Path(folder) / "entropy.npy", entropy.values)
        np.save(Path(folder) / "labels.npy", labels)
        del surprisal, entropy
        float32_mib = 2 * n_tokens * 4 / MIB
        print(f"{args.answers:,} answers, {n_tokens:,} tokens; per-token arrays (surprisal, entropy) in float32: "
              f"{float32_mib:,.0f} MiB; {args.splits} splits, every default method")
        print(f"{'loaded as':<10} {'stored as':<10} {'inputs MiB':>11} {'peak MiB':>9} {'peak / float32':>15} "
              f"{'above inputs / float32':>23} {'evaluate s':>11}")
        for dtype in args.dtype:
            out = subprocess.run([sys.executable, "-m", "bench.evaluate_memory", "--child", folder, dtype,
                                  str(args.splits)], cwd=ROOT, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(f"{dtype:<10} failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else '?'}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            peak = r["peak_kib"] / 1024
            above = peak - r["loaded_kib"] / 1024
            print(f"{dtype:<10} {r['stored_dtype']:<10} {r['loaded_kib'] / 1024:>11,.0f} {peak:>9,.0f} "
                  f"{peak / float32_mib:>14.2f}x {above / float32_mib:>22.2f}x {r['seconds']:>11.1f}")
        out = subprocess.run([sys.executable, "-m", "bench.evaluate_memory", "--libraries"], cwd=ROOT,
                             capture_output=True, text=True, check=False)
        if out.returncode == 0:
            libraries = json.loads(out.stdout.strip().splitlines()[-1])["libraries_kib"] / 1024
            print(f"of each peak, {libraries:,.0f} MiB ({libraries / float32_mib:.2f}x) are the libraries and compiled "
                  "loops the protocol loads on first use, whatever the data size (a small evaluation in a fresh "
                  "process adds that much)")


if __name__ == "__main__":
    main()
