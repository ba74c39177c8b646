"""What ``import trace_core`` costs beyond importing pandas, and what the first use of a public name costs.

Each figure is the best of ``--repeats`` fresh interpreters (``python -X importtime`` is not used: it slows every
import). The baseline is ``import pandas`` in the same kind of interpreter, timed in the same run, so the difference
is what the package adds on this machine. The package loads its public names on first use (PEP 562): ``import
trace_core`` alone imports none of numpy, pandas or scikit-learn; the first ``trace_core.evaluate`` imports what an
evaluation needs.

    python -m bench.import_cost [--repeats 7]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from bench._timing import best_of

#: What each interpreter runs: the baseline, then the package on top of it.
CASES = {
    "import pandas (baseline)": "import pandas",
    "import pandas, trace_core": "import pandas, trace_core",
    "import trace_core alone": "import trace_core",
    "import pandas; trace_core.evaluate": "import pandas, trace_core; trace_core.evaluate",
}
#: The budget the package keeps to: at most this many seconds beyond importing pandas.
BUDGET_S = 0.1


def interpreter_time(code: str, repeats: int) -> float:
    """The shortest wall-clock time of a fresh interpreter running ``code`` (start-up included)."""
    return best_of(lambda: subprocess.run([sys.executable, "-c", code], check=True), repeats)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.import_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="fresh interpreters per case (the best is kept)")
    args = parser.parse_args(argv)
    empty = interpreter_time("pass", args.repeats)
    times = {name: interpreter_time(code, args.repeats) for name, code in CASES.items()}
    base = times["import pandas (baseline)"]
    print(f"interpreter start-up alone: {empty:.3f} s (best of {args.repeats})")
    print(f"{'case':<38} {'seconds':>8} {'beyond pandas':>14}")
    for name, seconds in times.items():
        print(f"{name:<38} {seconds - empty:>8.3f} {seconds - base:>+14.3f}")
    added = times["import pandas, trace_core"] - base
    print(f"import trace_core adds {added:+.3f} s to import pandas (budget {BUDGET_S} s): "
          f"{'within' if added <= BUDGET_S else 'OVER'} budget")


if __name__ == "__main__":
    main()
