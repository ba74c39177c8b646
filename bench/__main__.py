"""Run every benchmark in turn: ``python -m bench [names ...]`` (default: all); ``python -m bench --list``.

Each prints its own table of timings as ratios against a baseline run in the same process. docs/performance.md
gives the exact command behind each published figure.
"""

from __future__ import annotations

import argparse
import importlib
import time

BENCHES = {
    "recording_overhead": "traced generation vs plain generate vs keeping full logits",
    "trace_memory": "peak extra memory of a trace vs full logits as T and V grow",
    "scoring_throughput": "teacher-forced scoring, batched vs a per-example loop",
    "protocol_scale": "features + baselines + TRACE+ + 20-split protocol at 10k / 100k / 1M answers",
    "protocol_floor": "the 20-split protocol vs its floor (one sort per score, one pass per split) and vs scikit-learn",
    "evaluate_memory": "peak memory of evaluate on 1M answers x 64 tokens vs the float32 per-token arrays",
    "scale_out": "evaluating 1M answers in 20 Parquet shards: one process streaming vs Ray Data with 2 workers",
    "dashboard": "Inspect and Calibrate page update times",
    "load_test": "8 concurrent browser sessions against one server",
    "large_jsonl": "reading and evaluating a 200 MB JSON Lines file: peak memory and time vs json.loads",
    "read_traces": "read_dataset on 10,000 rows with stored traces (CSV, JSONL, Parquet) vs pandas.read_csv + "
                   "json.loads / pyarrow read_table + to_pandas",
    "span_cost": "score_rows' riskiest-span columns vs explain_trace on the real model's test answers",
    "localisation": "spikes and peak window against the first wrong token, demo test split (vs random and last token)",
    "server_throughput": "scoring via a vLLM server at concurrency 1/4/16 vs local; bytes of top-20 vs full log-probs",
    "import_cost": "import trace_core vs import pandas alone; the first trace_core.evaluate",
    "threads": "SmolLM2 streaming tokens/s and generate answers/s per torch thread count, idle and under a competing "
               "process",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"benchmarks to run: {', '.join(BENCHES)}")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BENCHES]
    if unknown:  # checked here: argparse's `choices` with nargs="*" would also test the empty default
        parser.error(f"unknown benchmark {', '.join(map(repr, unknown))}; choose from {', '.join(BENCHES)}")
    if args.list:
        for name, what in BENCHES.items():
            print(f"{name:<20} {what}")
        return
    for name in args.names or list(BENCHES):
        print(f"\n=== {name}: {BENCHES[name]}", flush=True)
        start = time.perf_counter()
        importlib.import_module(f"bench.{name}").main([])
        print(f"({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
