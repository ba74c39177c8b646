"""What the riskiest span costs when flagging: ``score_rows`` with its span columns vs the answer-level part alone.

    python -m bench.span_cost [--copies 20] [--repeats 3]

The real model's test answers (``assets/datasets/real_test.csv``, 458 answers, 1 to 160 tokens) repeated
``--copies`` times are scored by :func:`trace_core.flagging.flag.score_rows` with a TRACE+ calibrator fitted on them.
Printed per family and overall, best of ``--repeats``: the time of the span part (:func:`trace_core.segment`,
:func:`trace_core.span_risks` and the span calibrator, per answer), of ``explain_trace`` for the same answers (the
answer-level work the span part sits beside), and of the whole ``score_rows``; the ratios are against ``explain_trace``
in the same run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench._timing import best_of

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    import numpy as np
    import pandas as pd

    from trace_core import TracePlus, explain_trace, read_dataset, riskiest_span
    from trace_core.flagging.flag import score_rows
    from trace_core.methods.spans import default_span_calibrator

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / "assets" / "datasets" / "real_test.csv")
    parser.add_argument("--copies", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    data = read_dataset(args.data)
    calibrator = TracePlus().fit(list(data.traces), data.labels)
    spans = default_span_calibrator()
    families = data.frame["family"] if "family" in data.frame.columns else pd.Series(["all"] * len(data.frame))
    print(f"{'family':<16}{'answers':>9}{'tokens':>8}{'spans ms':>10}{'explain ms':>12}{'spans/explain':>15}"
          f"{'score_rows ms':>15}")
    for family in [*sorted(families.unique()), "all"]:
        rows = np.flatnonzero((families == family).to_numpy() | (family == "all"))
        traces = [data.traces[i] for i in rows] * args.copies
        frame = pd.concat([data.frame.iloc[rows]] * args.copies, ignore_index=True)
        explanations = [explain_trace(t) for t in traces]
        # the timed lambdas bind this family's data (defaults), not the loop's variables
        span_time = best_of(lambda traces=traces, explanations=explanations: [
            riskiest_span(t, calibrator=spans, explanation=e)
            for t, e in zip(traces, explanations, strict=True)], args.repeats)
        explain_time = best_of(lambda traces=traces: [explain_trace(t) for t in traces], args.repeats)
        whole = best_of(lambda frame=frame, traces=traces: score_rows(frame, traces, calibrator), args.repeats)
        tokens = np.mean([len(t) for t in traces])
        print(f"{family:<16}{len(traces):>9,}{tokens:>8.0f}{1e3 * span_time:>10.0f}{1e3 * explain_time:>12.0f}"
              f"{span_time / explain_time:>15.2f}{1e3 * whole:>15.0f}")


if __name__ == "__main__":
    main()
