"""The protocol against its floor and against a plain scikit-learn loop, on the same scores, in one process.

    python -m bench.protocol_floor [--sizes 100000 1000000] [--splits 20] [--sklearn-splits 2] [--repeat 3]

For each size, on synthetic traces (spike, mean length 64), every method's score or features are computed once
(``protocol_inputs``, not timed), then three things are timed on them:

- ``protocol``: the split loop (both scalar calibrators for TRACE and every scalar baseline, TRACE+, the fitted
  baselines and the reference fitted per split, every metric), the paired comparison and the summary: what
  :func:`~trace_core.evaluate_arrays` does after the scores;
- ``floor``: the unavoidable work on the same input: one argsort of each method's score (a feature method's first
  column stands in for its score) and, per split and method, one cumulative pass over the evaluation part's labels
  in score order;
- ``sklearn``: the same protocol written as a plain loop over splits and methods with scikit-learn
  (``LogisticRegression`` for Platt on each score's transform and for TRACE+ and the reference on standardised
  features, ``IsotonicRegression``, ``roc_auc_score``, ``brier_score_loss``); it runs ``--sklearn-splits`` splits
  and is scaled to the protocol's number (each split is the same work).

The protocol and the floor are each timed ``--repeat`` times, alternating, and the fastest of each is printed: on a
shared machine another process's load only ever adds time, so the fastest run is the one least disturbed, for both
alike (the slowest are printed too). Before the table, the first call's cost of the compiled loops (numba): a small
protocol run in a fresh process with an empty compile cache (every loop compiled) and again with that cache filled
(loaded from disk, what every later process pays), against a run in the same process once warm.

Printed: seconds of each and the ratios protocol / floor and sklearn / protocol.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np


def _floor(scores: list[np.ndarray], y: np.ndarray, splits: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """Seconds of one argsort per score and one cumulative pass over each split's evaluation labels in its order."""
    start = time.perf_counter()
    in_ev = []
    for _, ev in splits:
        mask = np.zeros(y.shape[0], dtype=bool)
        mask[ev] = True
        in_ev.append(mask)
    for score in scores:
        order = np.argsort(score, kind="stable")
        y_sorted = y[order]
        for mask in in_ev:
            np.cumsum(y_sorted[mask[order]])
    return time.perf_counter() - start


def _sklearn_split(inputs, y: np.ndarray, cal: np.ndarray, ev: np.ndarray) -> None:
    """One split of the protocol, method by method, with scikit-learn's estimators and metrics."""
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import brier_score_loss, roc_auc_score
    from sklearn.preprocessing import StandardScaler

    from trace_core import METHODS
    from trace_core.methods.logistic import transform_scores

    for method, score in inputs.scalar.items():
        z = transform_scores(score, METHODS[method].transform)
        platt = LogisticRegression(C=1e4).fit(z[cal, None], y[cal])
        iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(z[cal], y[cal])
        roc_auc_score(y[ev], score[ev])
        brier_score_loss(y[ev], platt.predict_proba(z[ev, None])[:, 1])
        brier_score_loss(y[ev], iso.predict(z[ev]))
    for features in inputs.features.values():
        scaler = StandardScaler().fit(features[cal])
        model = LogisticRegression(C=1.0).fit(scaler.transform(features[cal]), y[cal])
        p = model.predict_proba(scaler.transform(features[ev]))[:, 1]
        roc_auc_score(y[ev], p)
        brier_score_loss(y[ev], p)


_FIRST_CALL = """
import time
import numpy as np
from trace_core import EvaluationConfig, synthetic_traces
from trace_core.evaluation.inputs import protocol_inputs
from trace_core.evaluation.protocol import run_splits
surprisal, entropy, labels = synthetic_traces(2000, kind="spike", mean_length=16, seed=0)
y = np.asarray(labels, dtype=np.int64)
inputs = protocol_inputs(surprisal, entropy)
methods = [m for m in inputs.wanted if m in inputs.scalar or m in inputs.features]
for _ in range(2):
    start = time.perf_counter()
    run_splits(y, inputs.scalar, inputs.features, config=EvaluationConfig(n_splits=2), methods=methods)
    print(time.perf_counter() - start)
"""


def _first_call() -> str:
    """The compiled loops' first-call cost, in words (see the module docstring), or why there is none."""
    import importlib.util

    if importlib.util.find_spec("numba") is None:
        return "numba not installed: the numpy path runs, nothing is compiled"
    with tempfile.TemporaryDirectory() as cache:
        runs = []
        for _ in range(2):  # an empty cache, then the one the first run filled
            out = subprocess.run([sys.executable, "-c", _FIRST_CALL], capture_output=True, text=True, check=True,
                                 env={**os.environ, "NUMBA_CACHE_DIR": cache}).stdout.split()
            runs.append([float(x) for x in out])
    (cold, warm), (cached, _) = runs
    return (f"first call (2,000 answers, 2 splits): {cold:.2f} s compiling every loop, {cached:.2f} s with the loops "
            f"cached on disk, {warm:.2f} s once warm")


def _protocol(y: np.ndarray, inputs, config, methods: list[str]) -> None:
    """What :func:`~trace_core.evaluate_arrays` does after the scores: the split loop, the paired comparison and
    the summary."""
    from trace_core.evaluation.paired import paired_comparison
    from trace_core.evaluation.protocol import run_splits
    from trace_core.evaluation.results import split_frame, summarise

    run = run_splits(y, inputs.scalar, inputs.features, config=config, methods=methods)
    per_split = split_frame(run.rows)
    paired_comparison(per_split, split_frame(run.calibration), methods=methods, metrics=config.metrics,
                      uninformative=list(run.uninformative))
    summarise(per_split, list(run.uninformative))


def _fastest(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, list[float]]:
    """Seconds of each function's calls, ``repeat`` rounds of one call each, alternating."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--splits", type=int, default=20)
    parser.add_argument("--sklearn-splits", type=int, default=2)
    parser.add_argument("--mean-length", type=float, default=64.0)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of the protocol and of the floor")
    parser.add_argument("--no-first-call", action="store_true", help="skip the compiled loops' first-call timing")
    args = parser.parse_args(argv)

    from trace_core import EvaluationConfig, synthetic_traces
    from trace_core.evaluation.inputs import protocol_inputs
    from trace_core.evaluation.protocol import draw_splits

    config = EvaluationConfig(n_splits=args.splits)
    if not args.no_first_call:
        print(_first_call())
    print(f"synthetic spike traces, mean length {args.mean_length:g}; every method the data allow, {config.n_splits} "
          f"splits; protocol and floor: fastest of {args.repeat} alternating runs; sklearn: {args.sklearn_splits} "
          f"splits timed, scaled to {config.n_splits}")
    print(f"{'answers':>10} {'methods':>7} {'protocol':>9} {'floor':>7} {'sklearn':>8} {'protocol/floor':>14} "
          f"{'sklearn/protocol':>16}")
    for n in args.sizes:
        surprisal, entropy, labels = synthetic_traces(n, kind="spike", mean_length=args.mean_length, seed=0)
        y = np.asarray(labels, dtype=np.int64)
        inputs = protocol_inputs(surprisal, entropy)
        methods = [m for m in inputs.wanted if m in inputs.scalar or m in inputs.features]
        splits = draw_splits(y, config)
        scores = [*inputs.scalar.values(), *(F[:, 0] for F in inputs.features.values())]
        times = _fastest({"protocol": functools.partial(_protocol, y, inputs, config, methods),
                          "floor": functools.partial(_floor, scores, y, splits)}, max(1, args.repeat))
        protocol, floor = min(times["protocol"]), min(times["floor"])
        start = time.perf_counter()
        for cal, ev in splits[:args.sklearn_splits]:
            _sklearn_split(inputs, y, cal, ev)
        sklearn = (time.perf_counter() - start) * config.n_splits / max(1, min(args.sklearn_splits, len(splits)))
        print(f"{n:>10,} {len(methods):>7} {protocol:>9.2f} {floor:>7.2f} {sklearn:>8.1f} {protocol / floor:>14.1f} "
              f"{sklearn / protocol:>16.1f}")
        print(f"{'':>10} slowest runs: protocol {max(times['protocol']):.2f} s, floor {max(times['floor']):.2f} s")


if __name__ == "__main__":
    main()
