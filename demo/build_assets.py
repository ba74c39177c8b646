"""Build the demo datasets from the shipped demo model: greedy answers with recorded traces, labeled.

    python -m demo.build_assets --model assets/demo-model --out assets/datasets

Writes, for the validation and test splits, ``demo_<split>.csv`` (prompt, answer, reference, label, family, detail,
split, the log-probabilities of a 4-beam search on the prompt, and the trace columns of trace_core's dataset format), plus ``try_prompts.json`` (a few right and wrong test questions) for the dashboard, and prints
the accuracy per task family. The answers come from the model loaded through ``trace_core.load_model``, exactly like a
user's model.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pandas as pd

MATCHER = {"arithmetic": "numeric", "facts": "exact"}


def build_split(lm, split: str, *, n_arithmetic: int, seed: int, batch_size: int = 32):
    from trace_core import DecodingConfig, beam_logprobs, generate_traces, label_from_reference

    from .tasks import arithmetic_problems, fact_problems

    problems = arithmetic_problems(n_arithmetic, split=split, seed=seed) + fact_problems(split, seed=seed)
    config = DecodingConfig(max_new_tokens=12, n_alternatives=5)
    traces = generate_traces(lm, [p.prompt for p in problems], config=config, batch_size=batch_size)
    labels = [label_from_reference(t.answer, p.answer, matcher=MATCHER[p.family]) for t, p in zip(traces, problems)]
    frame = pd.DataFrame({
        "prompt": [p.prompt for p in problems],
        "answer": [t.answer for t in traces],
        "reference": [p.answer for p in problems],
        "label": labels,
        "family": [p.family for p in problems],
        "detail": [p.detail for p in problems],
        "split": split,
        # One extra beam search per prompt, for the beam baselines (the traced answer is the greedy one above).
        "beam_logprobs": [json.dumps([round(v, 6) for v in b]) for b in beam_logprobs(
            lm, [p.prompt for p in problems], num_beams=4, max_new_tokens=12)],
    })
    return frame, traces


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build the demo datasets with the demo model.")
    parser.add_argument("--model", default="assets/demo-model")
    parser.add_argument("--out", default="assets/datasets")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-arithmetic", type=int, default=800, help="arithmetic problems per split")
    parser.add_argument("--splits", nargs="+", default=["validation", "test"], choices=["validation", "test"])
    args = parser.parse_args(argv)

    from trace_core import load_model, write_dataset

    lm = load_model(args.model, device="cpu")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for split in args.splits:
        frame, traces = build_split(lm, split, n_arithmetic=args.n_arithmetic, seed=args.seed)
        empty = sum(len(t) == 0 for t in traces)
        path = out / f"demo_{split}.csv"
        write_dataset(frame, path, traces=traces)
        print(f"{split}: {len(frame):,} rows -> {path} ({empty} empty answers)")
        for family, group in frame.groupby("family"):
            print(f"  {family:<10} accuracy {group['label'].mean():.1%} ({len(group):,} questions)")
            for detail, sub in group.groupby(group["detail"].str.replace(r"exposure=(\d+)", lambda m: (
                    "exposure=0" if m.group(1) == "0" else "exposure=1-2" if int(m.group(1)) <= 2 else
                    "exposure>=4"), regex=True)):
                print(f"    {detail:<12} {sub['label'].mean():.1%} ({len(sub):,})")
        if split == "test":
            rng = random.Random(args.seed)
            picks = []
            for family in ("arithmetic", "facts"):
                rows = frame[frame["family"] == family]
                right = rows[rows["label"] == 1].index.tolist()
                wrong = rows[rows["label"] == 0].index.tolist()
                picks += rng.sample(right, min(3, len(right))) + rng.sample(wrong, min(3, len(wrong)))
            examples = [{"prompt": frame.loc[i, "prompt"], "family": frame.loc[i, "family"],
                         "reference": frame.loc[i, "reference"]} for i in sorted(picks)]
            (out / "try_prompts.json").write_text(json.dumps(examples, indent=2, ensure_ascii=False) + "\n",
                                                  encoding="utf-8")


if __name__ == "__main__":
    main()
