"""Train the demo model: a byte-level BPE tokenizer and a small GPT-2, with plain torch on CPU.

    python -m demo.train --out assets/demo-model            # the shipped model (about 25 minutes on 2 cores)
    python -m demo.train --out /tmp/smoke --smoke           # a few steps on a toy config, for tests

The corpus comes from ``demo.tasks.training_texts`` (deterministic from ``--seed``). Texts are joined with the EOS token
and cut into blocks; the model is trained with AdamW and a cosine schedule, then saved with ``save_pretrained``
(safetensors, float16 weights to keep the repository small; they load as float32).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

EOS = "<|endoftext|>"


def build_tokenizer(texts: list[str], *, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Digits are always single tokens, so a wrong digit is one token: errors stay local, as in the paper's setting.
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, pad_token=EOS,
                                   model_max_length=256)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train the bundled demo model.")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--block", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--embd", type=int, default=192)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=800)
    parser.add_argument("--n-arithmetic", type=int, default=40000)
    parser.add_argument("--smoke", action="store_true", help="tiny corpus and model, for the test suite")
    args = parser.parse_args(argv)
    if args.smoke:
        args.embd, args.layers, args.vocab, args.n_arithmetic, args.block, args.batch = 32, 1, 300, 200, 32, 4

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from .tasks import training_texts

    torch.manual_seed(args.seed)
    start = time.time()
    texts = training_texts(seed=args.seed, n_arithmetic=args.n_arithmetic)
    tokenizer = build_tokenizer(texts, vocab_size=args.vocab)
    eos = tokenizer.eos_token_id
    stream: list[int] = []
    for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        stream.extend(ids + [eos])
    data = torch.tensor(stream, dtype=torch.long)
    n_blocks = (len(data) - 1) // args.block
    print(f"{len(texts):,} texts, {len(data):,} tokens, vocab {len(tokenizer)}, {n_blocks:,} blocks of {args.block}")

    config = GPT2Config(vocab_size=len(tokenizer), n_positions=256, n_embd=args.embd, n_layer=args.layers,
                        n_head=max(1, args.embd // 32), bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95))
    warmup = max(1, min(100, args.steps // 10))

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    generator = torch.Generator().manual_seed(args.seed)
    model.train()
    for step in range(args.steps):
        starts = torch.randint(0, len(data) - args.block - 1, (args.batch,), generator=generator)
        x = torch.stack([data[s:s + args.block] for s in starts.tolist()])
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step:>5}  loss {loss.item():.3f}  lr {lr_at(step):.2e}  {time.time() - start:.0f}s",
                  flush=True)

    model.eval()
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = eos
    model.generation_config.max_new_tokens = 16
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.half().save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "training.json").write_text(json.dumps({**vars(args), "texts": len(texts), "tokens": len(data),
                                                   "seconds": round(time.time() - start)}, indent=2) + "\n")
    print(f"saved to {out} in {time.time() - start:.0f}s")


if __name__ == "__main__":
    main()
