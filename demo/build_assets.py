"""Build the demo datasets from the shipped demo model: greedy answers with recorded traces, labeled.

    python -m demo.build_assets                      # the shipped datasets, from the shipped model
    python -m demo.build_assets --tasks short --model short-model --out short-datasets

Writes, for the validation and test splits, ``demo_<split>.csv`` (prompt, answer, reference, label, family, detail,
split, the log-probabilities of a 4-beam search on the prompt, and the trace columns of trace_core's dataset
format), plus ``try_prompts.json`` (a few right and wrong test questions, with the label of the model's answer) for
the dashboard, and prints the accuracy per task family. ``--tasks long`` adds the long-answer families (worked
arithmetic and descriptions) and a ``solution`` column (the gold answer in full), and prints how local the mistakes
are. The answers come from the model loaded through ``trace_core.load_model``, exactly like a user's model.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pandas as pd

MATCHER = {"arithmetic": "numeric", "facts": "exact", "worked_arithmetic": "numeric", "descriptions": "exact"}
MAX_NEW_TOKENS = {"short": 12, "long": 64}


def problems_of(split: str, *, tasks: str, n_arithmetic: int, n_worked: int, n_facts: int | None, seed: int,
                n_descriptions: int | None = None):
    from .tasks import arithmetic_problems, description_problems, description_world, fact_problems, worked_problems

    if tasks == "short":
        return arithmetic_problems(n_arithmetic, split=split, seed=seed) + fact_problems(split, seed=seed)
    facts = description_world(seed).questions(split)
    facts = random.Random(f"facts-{split}-{seed}").sample(facts, min(n_facts or len(facts), len(facts)))
    return (arithmetic_problems(n_arithmetic, split=split, seed=seed) + facts
            + worked_problems(n_worked, split=split, seed=seed)
            + description_problems(split, seed=seed)[:n_descriptions])


def detail_of(problem, answer: str, seed: int) -> str:
    """The problem's detail; for a description, also the facts it got wrong."""
    if problem.family != "descriptions":
        return problem.detail
    from .tasks import description_world, wrong_facts

    country = problem.question.removeprefix("Tell me about ").removesuffix(".")
    wrong = wrong_facts(answer, description_world(seed), country)
    return f"{problem.detail} wrong={'+'.join(wrong) if wrong else 'none'}"


def build_split(lm, split: str, *, n_arithmetic: int, seed: int, batch_size: int = 32, tasks: str = "short",
                n_worked: int = 600, n_facts: int | None = 360, n_descriptions: int | None = None,
                beams: bool = True):
    from trace_core import DecodingConfig, beam_logprobs, generate_traces, label_from_reference

    problems = problems_of(split, tasks=tasks, n_arithmetic=n_arithmetic, n_worked=n_worked, n_facts=n_facts,
                           seed=seed, n_descriptions=n_descriptions)
    config = DecodingConfig(max_new_tokens=MAX_NEW_TOKENS[tasks], n_alternatives=5)
    traces = generate_traces(lm, [p.prompt for p in problems], config=config, batch_size=batch_size)
    labels = [label_from_reference(t.answer, p.answer, matcher=MATCHER[p.family])
              for t, p in zip(traces, problems, strict=True)]
    columns = {
        "prompt": [p.prompt for p in problems],
        "answer": [t.answer for t in traces],
        "reference": [p.answer for p in problems],
        "label": labels,
        "family": [p.family for p in problems],
        "detail": [detail_of(p, t.answer, seed) for p, t in zip(problems, traces, strict=True)],
        "split": split,
    }
    if tasks == "long":
        columns["solution"] = [p.solution or f" {p.answer}" for p in problems]
    if beams:
        # One extra beam search per prompt, for the beam baselines (the traced answer is the greedy one above).
        columns["beam_logprobs"] = [json.dumps([round(v, 6) for v in b]) for b in beam_logprobs(
            lm, [p.prompt for p in problems], num_beams=4, max_new_tokens=MAX_NEW_TOKENS[tasks])]
    return pd.DataFrame(columns), traces


def local_mistakes(frame: pd.DataFrame, traces) -> tuple[pd.Series, pd.Series]:
    """Per row of a wrong answer: the index of its first wrong token against its ``solution``, as
    ``bench.localisation`` finds it, and how many right tokens come before it (blank tokens, e.g. a leading space, not
    counted). NaN for right answers and where no token covers the departure."""
    from bench.localisation import first_wrong_token

    first, right = [], []
    for trace, label, solution in zip(traces, frame["label"], frame["solution"], strict=True):
        at = None if label == 1 else first_wrong_token(trace.tokens, trace.answer, solution)
        first.append(float("nan") if at is None else at)
        right.append(float("nan") if at is None else sum(1 for tok in trace.tokens[:at] if tok.strip()))
    return pd.Series(first, index=frame.index), pd.Series(right, index=frame.index)


def pick_examples(frame: pd.DataFrame, traces, *, tasks: str, seed: int) -> list[dict]:
    """A few right and wrong test questions per family; for the long families, the wrong ones are answers whose
    first wrong token is one the heatmap marks (a spike), so the example shows the method at work."""
    from trace_core import spike_indices

    rng = random.Random(seed)
    families = ("arithmetic", "facts") if tasks == "short" else ("worked_arithmetic", "descriptions", "arithmetic",
                                                                  "facts")
    first, right_before = local_mistakes(frame, traces) if tasks == "long" else (None, None)
    picks = []
    for family in families:
        rows = frame[frame["family"] == family]
        right = rows[rows["label"] == 1].index.tolist()
        wrong = rows[rows["label"] == 0].index.tolist()
        n = 3 if tasks == "short" or family in ("worked_arithmetic", "descriptions") else 1
        if first is not None and family in ("worked_arithmetic", "descriptions"):
            marked = [i for i in wrong if right_before[i] >= 5
                      and int(first[i]) in spike_indices(traces[i].surprisal).tolist()]
            wrong = marked or wrong
        picks += rng.sample(right, min(n, len(right))) + rng.sample(wrong, min(n, len(wrong)))
    order = {family: k for k, family in enumerate(families)}
    return [{"prompt": frame.loc[i, "prompt"], "family": frame.loc[i, "family"],
             "reference": frame.loc[i, "reference"], "label": int(frame.loc[i, "label"])}
            for i in sorted(picks, key=lambda i: (order[frame.loc[i, "family"]], i))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build the demo datasets with the demo model.")
    parser.add_argument("--model", default="assets/demo-model")
    parser.add_argument("--out", default="assets/datasets")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", choices=["short", "long"], default="long")
    parser.add_argument("--n-arithmetic", type=int, default=None,
                        help="arithmetic problems per split (default 800; 400 with --tasks long)")
    parser.add_argument("--n-worked", type=int, default=600, help="worked-arithmetic problems per split (long)")
    parser.add_argument("--n-facts", type=int, default=360, help="fact questions per split (long)")
    parser.add_argument("--n-descriptions", type=int, default=None, help="descriptions per split (long; all)")
    parser.add_argument("--splits", nargs="+", default=["validation", "test"], choices=["validation", "test"])
    parser.add_argument("--quick", action="store_true",
                        help="only print the accuracies (no beams, nothing written): to choose a checkpoint")
    parser.add_argument("--no-beams", action="store_true",
                        help="write the datasets without the beam search (the beam baselines are then skipped)")
    args = parser.parse_args(argv)
    if args.n_arithmetic is None:
        args.n_arithmetic = 800 if args.tasks == "short" else 400

    from trace_core import load_model, write_dataset

    lm = load_model(args.model, device="cpu")
    out = Path(args.out)
    for split in args.splits:
        frame, traces = build_split(lm, split, n_arithmetic=args.n_arithmetic, seed=args.seed, tasks=args.tasks,
                                    n_worked=args.n_worked, n_facts=args.n_facts,
                                    n_descriptions=args.n_descriptions, beams=not (args.quick or args.no_beams))
        empty = sum(len(t) == 0 for t in traces)
        if not args.quick:
            out.mkdir(parents=True, exist_ok=True)
            path = out / f"demo_{split}.csv"
            write_dataset(frame, path, traces=traces)
            print(f"{split}: {len(frame):,} rows -> {path} ({empty} empty answers)")
        else:
            print(f"{split}: {len(frame):,} rows ({empty} empty answers)")
        right_before = local_mistakes(frame, traces)[1] if args.tasks == "long" else None
        lengths = pd.Series([len(t) for t in traces], index=frame.index)
        for family, group in frame.groupby("family", sort=False):
            line = (f"  {family:<18} accuracy {group['label'].mean():.1%} ({len(group):,} questions, "
                    f"median {lengths[group.index].median():.0f} tokens)")
            if right_before is not None and family in ("worked_arithmetic", "descriptions"):
                wrong = right_before[group.index][group["label"] == 0]
                line += (f"; first wrong token after >= 5 right ones in {(wrong >= 5).sum()}/{len(wrong)} "
                         f"wrong answers ({wrong.isna().sum()} not located)")
            print(line)
            for detail, sub in group.groupby(group["detail"].str.replace(
                    r"exposure=([\d,]+)( wrong=.*)?", lambda m: _exposure_bucket(m.group(1)), regex=True)):
                print(f"    {detail:<14} {sub['label'].mean():.1%} ({len(sub):,})")
        if split == "test" and not args.quick:
            examples = pick_examples(frame, traces, tasks=args.tasks, seed=args.seed)
            text = json.dumps(examples, indent=2, ensure_ascii=False) + "\n"
            (out / "try_prompts.json").write_text(text, encoding="utf-8")


def _exposure_bucket(counts: str) -> str:
    """"exposure=0", "exposure=1-2" or "exposure>=4" by the least-exposed fact."""
    least = min(int(c) for c in counts.split(","))
    return "exposure=0" if least == 0 else "exposure=1-2" if least <= 2 else "exposure>=4"


if __name__ == "__main__":
    main()
