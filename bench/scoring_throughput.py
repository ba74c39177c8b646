"""Teacher-forced scoring: ``score_answers`` with batching and padding vs a per-example loop.

    python -m bench.scoring_throughput [--answers 64] [--batch 16] [--repeats 3]

Scores the same (prompt, answer) pairs both ways on the bundled demo model and on a larger random-weight GPT-2 with a
realistic vocabulary, and prints tokens per second, their ratio, and how far the two results differ: the largest
absolute difference of any log-probability or entropy, whether the token and top-k ids are identical, and the largest
difference of a chosen token's rank.
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
    pairs = list(zip(frame["prompt"], frame["answer"]))
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
    for x, y in zip(a, b):
        same_ids &= np.array_equal(x.token_ids, y.token_ids) and np.array_equal(x.top_ids, y.top_ids)
        rank_diff = max(rank_diff, int(np.max(np.abs(x.ranks - y.ranks), initial=0)))
        for name in ("surprisal", "entropy", "top_logprobs"):
            u, v = getattr(x, name), getattr(y, name)
            diff = max(diff, float(np.max(np.abs(u - v), initial=0.0)))
    return diff, same_ids, rank_diff


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=32000, help="vocabulary of the random model")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--models", nargs="+", default=["demo", "random"], choices=["demo", "random"])
    args = parser.parse_args(argv)

    import torch

    from trace_core import load_model, score_answers

    from ._models import random_lm

    print(f"{args.answers} answers, batch {args.batch} vs a loop of batch 1, {torch.get_num_threads()} threads, "
          f"median of {args.repeats}")
    print(f"{'model':<34} {'tokens':>7} {'loop tok/s':>11} {'batched tok/s':>14} {'ratio':>6} "
          f"{'max |diff|':>10} {'same ids':>8} {'max Δrank':>9}")
    for which in args.models:
        if which == "demo":
            lm = load_model(ROOT / "assets" / "demo-model", device="cpu")
            pairs, label = _demo_pairs(args.answers), "demo (vocab 800, 192 x 4)"
        else:
            lm = random_lm(arch="gpt2", vocab_size=args.vocab, hidden=args.hidden, layers=args.layers)
            pairs, label = _random_pairs(args.answers), f"random GPT-2 (vocab {args.vocab}, {args.hidden} x {args.layers})"
        prompts, answers = [p for p, _ in pairs], [a for _, a in pairs]

        def loop():
            return [t for p, a in zip(prompts, answers) for t in score_answers(lm, [p], [a], batch_size=1)]

        def batched():
            return score_answers(lm, prompts, answers, batch_size=args.batch)

        reference, fast = loop(), batched()  # also warms up
        n_tokens = sum(len(t) for t in reference)
        diff, same_ids, rank_diff = _max_difference(reference, fast)
        times: dict[str, list[float]] = {"loop": [], "batched": []}
        for _ in range(args.repeats):  # interleaved, so drift affects both alike
            for name, fn in (("loop", loop), ("batched", batched)):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        loop_rate = n_tokens / statistics.median(times["loop"])
        batch_rate = n_tokens / statistics.median(times["batched"])
        print(f"{label:<34} {n_tokens:>7,} {loop_rate:>11,.0f} {batch_rate:>14,.0f} {batch_rate / loop_rate:>6.2f} "
              f"{diff:>10.1e} {'yes' if same_ids else 'NO':>8} {rank_diff:>9}")


if __name__ == "__main__":
    main()
