"""How often each text matcher agrees with labels given by hand, on real answers.

    python -m bench.matchers                                     # the bundled hand labels
    python -m bench.matchers --data FILE.csv --show 20           # your own (columns answer, reference, hand_label)

``assets/datasets/real_hand_labels.csv`` holds SmolLM2-135M-Instruct's short-fact answers (greedy: 300 from
``real_validation.csv`` and ``real_test.csv``, read while the ``claim`` rules were written, and 100 from
``real_large_validation.parquet`` labeled after they were fixed, ``held_out``) with a label read and given by hand
(rules in ``docs/datasets.md``). The figures are given for each part and for all.
For each matcher: how many answers it calls right, precision (of those it calls right, the share right by hand),
recall (of those right by hand, the share it calls right), agreement, and the answers where it and the hand label
differ (the first ``--show``). Precision and recall come with 95% Wilson intervals: a few hundred answers leave a
few points of doubt either way.
"""

from __future__ import annotations

import argparse
import math

import pandas as pd

from trace_core.data.labels import label_from_reference

MATCHERS = ("contains", "claim")
HAND_LABELS = "assets/datasets/real_hand_labels.csv"


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of hits / n."""
    if n == 0:
        return (math.nan, math.nan)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (centre - half, centre + half)


def scores(hand: pd.Series, predicted: pd.Series) -> dict[str, float]:
    tp = int(((predicted == 1) & (hand == 1)).sum())
    fp = int(((predicted == 1) & (hand == 0)).sum())
    fn = int(((predicted == 0) & (hand == 1)).sum())
    return {"called right": int(predicted.sum()), "precision": tp / max(tp + fp, 1),
            "precision CI": wilson(tp, tp + fp), "recall": tp / max(tp + fn, 1), "recall CI": wilson(tp, tp + fn),
            "agreement": float((predicted == hand).mean()), "false right": fp, "false wrong": fn}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=HAND_LABELS)
    parser.add_argument("--matchers", nargs="+", default=list(MATCHERS))
    parser.add_argument("--show", type=int, default=10, help="disagreements shown per matcher")
    args = parser.parse_args(argv)
    frame = pd.read_csv(args.data, keep_default_na=False)
    hand = frame["hand_label"].astype(int)
    print(f"{len(frame)} answers labeled by hand ({args.data}); {int(hand.sum())} right by hand")
    predicted = {m: pd.Series([label_from_reference(a, r, matcher=m)
                               for a, r in zip(frame["answer"], frame["reference"], strict=True)])
                 for m in args.matchers}
    parts = {"all": frame.index}
    if "held_out" in frame.columns:  # answers labeled by hand after the claim rules were written
        held = frame["held_out"].astype(str).str.lower() == "true"
        parts = {"read while writing the claim rules": frame.index[~held],
                 "held out (labeled after the rules were fixed)": frame.index[held], "all": frame.index}
    for name, rows in parts.items():
        print(f"\n{name}: {len(rows)} answers, {int(hand[rows].sum())} right by hand\n")
        print("| matcher | called right | precision (95% CI) | recall (95% CI) | agreement | false right | "
              "false wrong |")
        print("|---|---|---|---|---|---|---|")
        for matcher, labels in predicted.items():
            s = scores(hand[rows], labels[rows])
            print(f"| {matcher} | {s['called right']} | {s['precision']:.3f} ({s['precision CI'][0]:.3f}-"
                  f"{s['precision CI'][1]:.3f}) | {s['recall']:.3f} ({s['recall CI'][0]:.3f}-"
                  f"{s['recall CI'][1]:.3f}) | {s['agreement']:.3f} | {s['false right']} | {s['false wrong']} |")
    for matcher, labels in predicted.items():
        differ = frame[labels != hand]
        print(f"\n{matcher}: {len(differ)} answers differ from the hand label"
              + (f" (the first {args.show})" if len(differ) > args.show else ""))
        for (_, row), label in zip(differ.head(args.show).iterrows(), labels[differ.index], strict=False):
            print(f"  {matcher} {label}, hand {row['hand_label']}: {row['answer'][:110]!r}  [{row['reference'][:40]}]")


if __name__ == "__main__":
    main()
