"""The protocol's numbers on six fixed synthetic sets, to check that a change to the protocol changes none of them.

    python -m bench.protocol_harness --check tests/data/protocol_reference.json   # max difference, exit 1 if > 1e-9
    python -m bench.protocol_harness --write tests/data/protocol_reference.json   # record the current numbers

Every method runs on each set: five kinds of synthetic traces with entropy, and one without (chosen-token
log-probabilities only, the surprisal-only variants), 3,000 answers, 5 splits. Recorded per set: every per-split value
(each metric of each method on each split's evaluation part, under each calibrator), every calibration-part value
(what chooses the best baseline), and each method's held-out raw score and probabilities (their sums, sums of squares
and first values). ``--check`` compares them
with the file and prints the largest absolute difference; values missing on either side count as a failure.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

#: (name, synthetic_traces keywords, whether the set keeps its entropy)
SETS: tuple[tuple[str, dict[str, Any], bool], ...] = (
    ("spike", {"kind": "spike", "seed": 11}, True),
    ("diffuse", {"kind": "diffuse", "seed": 12}, True),
    ("length", {"kind": "length", "seed": 13}, True),
    ("likelihood", {"kind": "likelihood", "seed": 14, "error_rate": 0.1}, True),
    ("surprisal_spike", {"kind": "surprisal_spike", "seed": 15}, True),
    ("no_entropy", {"kind": "spike", "seed": 16, "error_rate": 0.85}, False),
)
N_ANSWERS = 3_000
N_SPLITS = 5
TOLERANCE = 1e-9
HELD_OUT_SHOWN = 16


def _digest(values: Any) -> list[float]:
    """A held-out column in brief: its sum, its sum of squares and its first :data:`HELD_OUT_SHOWN` values."""
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    return [float(x.sum()), float((x * x).sum()), *x[:HELD_OUT_SHOWN].tolist()]


def _values(frame: Any) -> dict[str, float]:
    return {f"{r.split}|{r.method}|{r.metric}|{r.calibrator}": float(r.value) for r in frame.itertuples()}


def snapshot() -> dict[str, Any]:
    """The numbers of every set, keyed so that two snapshots compare entry by entry."""
    from trace_core import EvaluationConfig, evaluate_arrays, synthetic_traces

    out: dict[str, Any] = {}
    for name, kwargs, with_entropy in SETS:
        surprisal, entropy, labels = synthetic_traces(N_ANSWERS, mean_length=24, **kwargs)
        result = evaluate_arrays(surprisal, entropy if with_entropy else None, labels,
                                 config=EvaluationConfig(n_splits=N_SPLITS, seed=3))
        held = {"rows": _digest(result.held_out.rows)}
        for method, values in result.held_out.methods.items():
            held[f"{method}|score"] = _digest(values.score)
            held.update({f"{method}|{c}": _digest(p) for c, p in values.probabilities.items()})
        out[name] = {"per_split": _values(result.per_split), "calibration": _values(result.calibration_values),
                     "held_out": held}
    return out


def _differences(reference: Any, current: Any, where: str, problems: list[str]) -> float:
    """Largest absolute difference between two nested snapshots; keys or lengths that differ go to ``problems``."""
    if isinstance(reference, dict) and isinstance(current, dict):
        missing = sorted(set(reference) ^ set(current))
        if missing:
            problems.append(f"{where}: keys on one side only: {missing[:5]}{' …' if len(missing) > 5 else ''}")
        return max((_differences(reference[k], current[k], f"{where}/{k}", problems)
                    for k in reference if k in current), default=0.0)
    if isinstance(reference, list) and isinstance(current, list):
        if len(reference) != len(current):
            problems.append(f"{where}: {len(reference)} values recorded, {len(current)} now")
            return math.inf
        return max((_differences(a, b, where, problems) for a, b in zip(reference, current, strict=True)), default=0.0)
    a, b = float(reference), float(current)
    if math.isnan(a) and math.isnan(b):
        return 0.0
    return abs(a - b) if math.isfinite(a - b) else math.inf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", type=Path, metavar="FILE", help="compare with the numbers recorded in FILE")
    action.add_argument("--write", type=Path, metavar="FILE", help="record the current numbers in FILE")
    args = parser.parse_args(argv)
    current = snapshot()
    if args.write:
        args.write.write_text(json.dumps(current, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"recorded {sum(len(v['per_split']) for v in current.values()):,} per-split values of "
              f"{len(current)} sets in {args.write}")
        return 0
    reference = json.loads(args.check.read_text(encoding="utf-8"))
    problems: list[str] = []
    worst = _differences(reference, current, "", problems)
    for problem in problems:
        print(problem)
    print(f"{len(current)} sets; largest absolute difference from the recorded numbers: {worst:.3g} "
          f"(tolerance {TOLERANCE:g})")
    return 0 if worst <= TOLERANCE and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
