"""The flagging guarantee on real answers: certified on half of the test prompts, checked on the other half.

    python -m bench.guarantee_real [--section] [--draws N] [--alpha A ...] [--delta D]
                                   [--validation FILE] [--data FILE]

TRACE+ is fitted on the validation answers (default ``assets/datasets/real_large_validation.parquet``) and gives
P(correct) for every test answer (``real_large_test.parquet``). Each draw splits the test *prompts* at random into
two halves (a prompt's answers stay together: they are not independent): the guarantee
(:func:`trace_core.flagging.guarantee.guaranteed_threshold`, the procedure ``trace-core flag --max-risk`` runs) is
computed on the first half's labeled answers, and the threshold it certifies is applied to the second half, as to new
answers.

``--answers greedy`` uses only each prompt's greedy answer (one per prompt: independent answers, as the guarantee
assumes); ``--answers all`` uses every answer, greedy and sampled, although the answers to one prompt are not
independent: the guarantee's binomial tests count them as independent, so its level is not assured there (the table
shows by how much it is missed).

Columns, over the draws: *certified* is the share with a threshold; *kept* is the median share of the second half's
answers kept (over the certified draws); *error rate of the kept* is the error rate of all the answers kept on the
second halves together (every certified draw's kept answers pooled: what a user of the procedure would see on new
answers in the long run); *draws above alpha* is the share of all draws whose kept answers on the second half have an
error rate above alpha (the guarantee bounds by delta the share whose *true* rate is above alpha; the second half's
rate is an estimate of it, noisy when few answers are kept, so this share runs above the true one); *oracle kept* is
the largest share of the answers that a threshold keeps with an error rate of at most alpha among them (what a
procedure that knew the labels could keep).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "assets" / "datasets"


def oracle_kept(p: np.ndarray, y: np.ndarray, alpha: float) -> float:
    """The largest share of answers kept by a threshold on ``p`` whose kept answers have error rate <= alpha."""
    order = np.argsort(-p, kind="stable")
    errors = np.cumsum(1 - y[order])
    kept = np.arange(1, len(p) + 1)
    ok = errors / kept <= alpha
    ends = np.r_[p[order][1:] != p[order][:-1], True]  # a threshold keeps every tie
    good = np.flatnonzero(ok & ends)
    return float(kept[good[-1]] / len(p)) if len(good) else 0.0


def draws(p: np.ndarray, y: np.ndarray, groups: np.ndarray, alpha: float, delta: float, n_draws: int,
          seed: int = 0) -> dict[str, float]:
    from trace_core.flagging.guarantee import guaranteed_threshold

    rng = np.random.default_rng(seed)
    names = np.unique(groups)
    certified, kept, above, kept_total, errors_total = 0, [], 0, 0, 0
    for _ in range(n_draws):
        first = np.isin(groups, rng.choice(names, size=len(names) // 2, replace=False))
        found = guaranteed_threshold(p[first], y[first], max_risk=alpha, delta=delta)
        if found.threshold is None:
            continue
        certified += 1
        keep = p[~first] >= found.threshold
        kept.append(keep.mean())
        errors = int((1 - y[~first][keep]).sum())
        kept_total, errors_total = kept_total + int(keep.sum()), errors_total + errors
        above += errors > alpha * keep.sum()
    return {"certified": certified / n_draws, "kept": float(np.median(kept)) if kept else 0.0,
            "error": errors_total / kept_total if kept_total else float("nan"),
            "above": above / n_draws, "oracle": oracle_kept(p, y, alpha)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validation", type=Path, default=DATA / "real_large_validation.parquet")
    parser.add_argument("--data", type=Path, default=DATA / "real_large_test.parquet")
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--alpha", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    parser.add_argument("--delta", type=float, default=0.1)
    parser.add_argument("--answers", nargs="+", choices=["greedy", "all"], default=["greedy", "all"],
                        help="the test answers used: each prompt's greedy one, or all (default: both, in turn)")
    parser.add_argument("--section", action="store_true", help="print a Markdown section for docs/results.md")
    args = parser.parse_args(argv)

    from trace_core import TracePlus, read_dataset

    fit, test = read_dataset(args.validation), read_dataset(args.data)
    p_all = TracePlus().fit(fit.traces, fit.labels).predict_proba(test.traces)
    y_all = np.asarray(test.labels, dtype=np.int64)
    groups_all = test.frame["prompt"].to_numpy()
    greedy = (test.frame["sample"].to_numpy() == 0 if "sample" in test.frame.columns
              else np.ones(len(y_all), dtype=bool))
    shown = " ".join(str(a) for a in args.alpha)
    command = (f"python -m bench.guarantee_real --draws {args.draws} --alpha {shown} --delta {args.delta} "
               f"--validation {_shown(args.validation)} --data {_shown(args.data)}")
    if args.section:
        print("## The guarantee on real answers\n")
        print(f"Generated by `{command}`. TRACE+ is fitted on the validation answers; each draw certifies a threshold "
              "on the labeled answers of half of the test prompts (`trace-core flag --max-risk` runs the same "
              "procedure) and applies it to the other half's answers, as to new ones (the bench's docstring defines "
              "each column).\n")
    for answers in args.answers:
        use = greedy if answers == "greedy" else np.ones(len(y_all), dtype=bool)
        p, y, groups = p_all[use], y_all[use], groups_all[use]
        print(f"**{'Greedy answers only' if answers == 'greedy' else 'All answers, greedy and sampled'}** "
              f"(`--answers {answers}`): {len(y):,} test answers to {len(np.unique(groups)):,} prompts, "
              f"{y.mean():.1%} right; {args.draws} draws; delta = {args.delta}\n")
        print("| alpha | certified | kept (median) | error rate of the kept | draws above alpha | oracle kept |")
        print("|---|---|---|---|---|---|")
        for alpha in args.alpha:
            r = draws(p, y, groups, alpha, args.delta, args.draws)
            print(f"| {alpha:g} | {r['certified']:.0%} | {r['kept']:.1%} | {_share(r['error'])} | "
                  f"{r['above']:.1%} | {r['oracle']:.1%} |")
        print()


def _share(value: float) -> str:
    return "-" if np.isnan(value) else f"{value:.1%}"


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


if __name__ == "__main__":
    main()
