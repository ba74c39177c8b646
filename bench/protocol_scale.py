"""Evaluation at scale: features, all trace-only baselines, TRACE+ fits and the 20-split protocol.

    python -m bench.protocol_scale [--sizes 10000 100000 1000000] [--mean-length 64] [--kind surprisal_spike]
                                   [--cost-of CES "Trace Profile"]

Prints the wall time per size and its ratio to the smallest size (linear growth gives ratios equal to the size
ratios), on synthetic traces (spike by default; ``surprisal_spike`` has no entropy, as saved runs with chosen-token
log-probabilities only). Every scalar method gets both calibrators (Platt and isotonic) on every split.
``--cost-of M ...`` also times each size without those methods, in the same process, and prints the ratio (what
those methods add). ``--profile`` then profiles the largest size on one thread: the top functions, and the time by
part of the protocol (fits, predictions, metrics, scores, sorts, the rest).
"""

from __future__ import annotations

import argparse
import time


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--mean-length", type=float, default=64.0)
    parser.add_argument("--splits", type=int, default=20)
    from trace_core.traces.synthetic import KINDS

    parser.add_argument("--kind", default="spike", choices=list(KINDS))
    parser.add_argument("--cost-of", nargs="+", default=[], metavar="METHOD",
                        help="also time each size without these methods and print the ratio")
    parser.add_argument("--profile", action="store_true",
                        help="profile the largest size on one thread; prints the time by part")
    args = parser.parse_args(argv)

    from trace_core import METHODS, EvaluationConfig, evaluate_arrays, method_names, synthetic_traces

    unknown = [m for m in args.cost_of if m not in METHODS]
    if unknown:
        parser.error(f"unknown methods {unknown}; known: {list(METHODS)}")
    without = [m for m in method_names() if m not in args.cost_of]

    config = EvaluationConfig(n_splits=args.splits)
    n_trace_only = sum(m.is_baseline and m.needs == "trace" for m in METHODS.values())
    n_fitted = sum(m.kind == "fitted_baseline" and m.needs == "trace" for m in METHODS.values())
    print(f"synthetic {args.kind} traces, mean length {args.mean_length:g}; TRACE+, TRACE, the {n_trace_only} "
          f"trace-only baselines ({n_fitted} fitted per split; those the data allow) and the likelihood reference; "
          f"{config.n_splits} splits at {config.calibration_fraction:.0%} calibration, Platt and isotonic for every "
          "scalar score")
    extra = f" {'without':>8} {'ratio':>6}" if args.cost_of else ""
    if args.cost_of:
        print(f"'without': the same run without {', '.join(args.cost_of)}; 'ratio': with / without")
    print(f"{'answers':>10} {'tokens':>12} {'seconds':>8} {'x smallest':>10} {'size ratio':>10}{extra}")
    first = None
    for n in args.sizes:
        surprisal, entropy, labels = synthetic_traces(n, kind=args.kind, mean_length=args.mean_length, seed=0)
        start = time.perf_counter()
        evaluate_arrays(surprisal, entropy, labels, config=config)
        seconds = time.perf_counter() - start
        first = first or (n, seconds)
        line = (f"{n:>10,} {len(surprisal.values):>12,} {seconds:>8.2f} {seconds / first[1]:>10.2f} "
                f"{n / first[0]:>10.1f}")
        if args.cost_of:
            start = time.perf_counter()
            evaluate_arrays(surprisal, entropy, labels, config=config, methods=without)
            base = time.perf_counter() - start
            line += f" {base:>8.2f} {seconds / base:>6.2f}"
        print(line)
    if args.profile:
        _profile(surprisal, entropy, labels, config)


def _profile(surprisal, entropy, labels, config) -> None:
    import cProfile
    import pstats
    import sys

    from threadpoolctl import threadpool_limits

    from trace_core import evaluate_arrays

    protocol_module = sys.modules["trace_core.evaluation.protocol"]
    threads_from = protocol_module.THREADS_FROM
    protocol_module.THREADS_FROM = sys.maxsize  # methods serially: the profiler sees every call
    profiler = cProfile.Profile()
    try:
        with threadpool_limits(1):
            profiler.enable()
            evaluate_arrays(surprisal, entropy, labels, config=config)
            profiler.disable()
    finally:
        protocol_module.THREADS_FROM = threads_from
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats("trace_core", 30)
    _print_shares(stats.stats)


# Where the protocol's time goes, by part: (file, function) pairs whose cumulative times add up to each part.
_PARTS = {
    "Platt fits": [("logistic.py", "fit_logistic_1d")],
    "TRACE+, reference and fitted-baseline fits": [("logistic.py", "standardised_logistic")],
    "isotonic fits": [("scalar.py", "fit_presorted")],
    "predictions": [("scalar.py", "predict_checked"), ("logistic.py", "__call__")],
    "ranking metrics": [("protocol.py", "ranking_part"), ("protocol.py", "ranking_of_scores"),
                        ("ranking.py", "ranking_metrics")],
    "Brier and ECE": [("protocol.py", "probability_metrics")],
    "baselines": [("baselines.py", "baseline_scores")],
    "TRACE's score, TRACE+ and reference features": [("run.py", "_scores")],
    "one sort per score": [("protocol.py", "of")],
    "paired comparison and summary": [("paired.py", "paired_comparison"), ("results.py", "summarise")],
}


def _print_shares(stats: dict) -> None:
    def cumulative(file: str, function: str) -> float:
        return sum(v[3] for (path, _, name), v in stats.items() if path.endswith(file) and name == function)

    total = cumulative("run.py", "evaluate_arrays")
    parts = {part: sum(cumulative(f, fn) for f, fn in pairs) for part, pairs in _PARTS.items()}
    parts["the rest (gathers of each split's parts, checks, Python overhead)"] = total - sum(parts.values())
    print(f"\nby part ({total:.2f} s under the profiler, one thread):")
    for part, seconds in parts.items():
        print(f"  {part:<66} {seconds:7.2f} s {100 * seconds / total:5.1f}%")


if __name__ == "__main__":
    main()
