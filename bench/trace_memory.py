"""Peak extra memory of recording a trace vs keeping full logits, as the answer length T and vocabulary V grow.

    python -m bench.trace_memory [--lengths 128 512 2048] [--vocabs 32000 128000]

Each measurement runs in a fresh process on a random-weight GPT-2-shaped model (batch 1, greedy, k = 5, no
end-of-answer token so every run generates exactly T tokens): plain ``model.generate``, traced generation
(trace_core), and ``output_logits=True`` with entropy computed afterwards (what many tools do). Printed: the peak
resident memory each adds over plain generation and the bytes its result keeps per token. The recorder's extra is a
bounded buffer (a few MiB, whatever T) plus 112 bytes per token; full logits add several copies of 4 x V per token.
Linux only (reads the peak from /proc/self/status).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> None:
    # Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0).
    Path("/proc/self/clear_refs").write_text("5")


def _child(variant: str, length: int, vocab: int, hidden: int, layers: int) -> dict:
    import gc

    import torch

    from trace_core import DecodingConfig, generate_traces
    from trace_core.record import encode_prompt
    from trace_core.record.backends.hf import generation_config

    from ._models import random_lm

    torch.set_num_threads(1)
    lm = random_lm(arch="gpt2", vocab_size=vocab, hidden=hidden, layers=layers)
    config = DecodingConfig(max_new_tokens=length, n_alternatives=5)
    prompt = "w1 w2 w3 w4 w5 w6 w7 w8"
    ids = torch.tensor([encode_prompt(lm.tokenizer, prompt)])
    plain_config = generation_config(lm, config, {})
    naive_config = generation_config(lm, config, {"output_logits": True})
    with torch.no_grad():  # warm-up: allocator pools, lazy imports
        lm.model.generate(input_ids=ids, generation_config=generation_config(
            lm, DecodingConfig(max_new_tokens=4), {}))
    gc.collect()
    _reset_peak()
    before = _status_kib("VmRSS")
    kept = 0
    if variant == "plain":
        with torch.no_grad():
            out = lm.model.generate(input_ids=ids, generation_config=plain_config)
        n = out.shape[1] - ids.shape[1] if isinstance(out, torch.Tensor) else out.sequences.shape[1] - ids.shape[1]
    elif variant == "traced":
        trace = generate_traces(lm, [prompt], config=config, batch_size=1)[0]
        n = len(trace)
        kept = trace.nbytes
    else:
        with torch.no_grad():
            out = lm.model.generate(input_ids=ids, generation_config=naive_config)
        logits = torch.stack(out.logits, dim=1)
        logp = torch.log_softmax(logits.float(), dim=-1)
        entropy = -(logp.exp() * logp).sum(-1)
        n = logits.shape[1]
        kept = logits.element_size() * logits.numel()
        del entropy
    peak = _status_kib("VmHWM")
    return {"extra_bytes": (peak - before) * 1024, "tokens": int(n), "kept_bytes": int(kept)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2048])
    parser.add_argument("--vocabs", type=int, nargs="+", default=[32000, 128000])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--child", nargs=3, metavar=("VARIANT", "T", "V"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        variant, length, vocab = args.child[0], int(args.child[1]), int(args.child[2])
        print(json.dumps(_child(variant, length, vocab, args.hidden, args.layers)))
        return
    if not Path("/proc/self/clear_refs").exists():
        sys.exit("this benchmark reads peak memory from /proc (Linux only)")

    print(f"random GPT-2 (hidden {args.hidden}, layers {args.layers}), batch 1, greedy, k = 5; peak resident memory "
          "added over plain generate, each run in a fresh process")
    print(f"{'T':>6} {'V':>8} {'traced extra':>13} {'kept B/token':>12} "
          f"{'full-logits extra':>18} {'extra B/token':>13} {'kept B/token':>12}")
    for vocab in args.vocabs:
        for length in args.lengths:
            result = {}
            for variant in ("plain", "traced", "naive"):
                cmd = [sys.executable, "-m", "bench.trace_memory", "--hidden", str(args.hidden), "--layers",
                       str(args.layers), "--child", variant, str(length), str(vocab)]
                out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
                result[variant] = json.loads(out.stdout.strip().splitlines()[-1])
            t = result["traced"]["tokens"]
            traced = max(0, result["traced"]["extra_bytes"] - result["plain"]["extra_bytes"])
            naive = max(0, result["naive"]["extra_bytes"] - result["plain"]["extra_bytes"])
            print(f"{length:>6} {vocab:>8,} {_mb(traced):>13} {result['traced']['kept_bytes'] / t:>12,.0f} "
                  f"{_mb(naive):>18} {naive / t:>13,.0f} {result['naive']['kept_bytes'] / t:>12,.0f}")


def _mb(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


if __name__ == "__main__":
    main()
