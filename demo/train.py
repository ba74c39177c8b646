"""Train the demo model: a byte-level BPE tokenizer and a small GPT-2, with plain torch on CPU.

    python -m demo.train --out assets/demo-model             # the shipped model: long and short answers (~50 min)
    python -m demo.train --tasks short --out short-model     # the earlier short-answer model (~10 min)
    python -m demo.train --out smoke-model --smoke           # a few steps on a toy config, for tests

The training set comes from ``demo.tasks.long_training_pairs`` (``--tasks short``: ``training_pairs``), deterministic
from ``--seed``: (prompt, answer) pairs.
Each example is prompt + answer + EOS and the loss is on the answer and EOS only, so the model's capacity goes to
answering (not to predicting the random numbers in questions). AdamW with a cosine schedule; the model is saved with
``save_pretrained`` (safetensors, float16 weights to keep the repository small; they load as float32).
``--checkpoints N M ...`` also saves the model at those steps (under ``<out>-step<N>``), so that the shipped one can be
chosen on the validation split; ``--stop-after N`` then rebuilds checkpoint N directly. The size and schedule
default per ``--tasks`` (``SIZES``).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

EOS = "<|endoftext|>"
# Defaults per --tasks: steps, batch, hidden size, vocabulary.
SIZES = {"long": {"steps": 4400, "batch": 64, "embd": 256, "vocab": 1000},
         "short": {"steps": 3000, "batch": 96, "embd": 192, "vocab": 800}}


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
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--checkpoints", type=int, nargs="*", default=[], help="also save the model at these steps")
    parser.add_argument("--stop-after", type=int, default=None,
                        help="stop after this many steps (the learning-rate schedule still spans --steps)")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--embd", type=int, default=None)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=None)
    parser.add_argument("--n-arithmetic", type=int, default=10000)
    parser.add_argument("--tasks", choices=["short", "long"], default="long",
                        help="long: arithmetic, facts, worked arithmetic and descriptions; short: the first two only")
    parser.add_argument("--n-worked", type=int, default=20000, help="worked-arithmetic problems (--tasks long)")
    parser.add_argument("--fact-form", choices=["varied", "partial", "sentence"], default="varied",
                        help="how the long world's facts are shown (--tasks long; see long_training_pairs)")
    parser.add_argument("--fact-repeats", type=int, default=3,
                        help="times over each long-world fact is shown (--tasks long; see long_training_pairs)")
    parser.add_argument("--smoke", action="store_true", help="tiny corpus and model, for the test suite")
    args = parser.parse_args(argv)
    for name, value in SIZES[args.tasks].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.smoke:
        args.embd, args.layers, args.vocab, args.n_arithmetic, args.batch, args.n_worked = 32, 1, 300, 200, 4, 100

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from .tasks import long_training_pairs, training_pairs

    torch.manual_seed(args.seed)
    start = time.time()
    if args.tasks == "long":
        pairs = long_training_pairs(seed=args.seed, n_arithmetic=args.n_arithmetic, n_worked=args.n_worked,
                                    fact_form=args.fact_form, fact_repeats=args.fact_repeats)
    else:
        pairs = training_pairs(seed=args.seed, n_arithmetic=args.n_arithmetic)
    tokenizer = build_tokenizer([p + a for p, a in pairs], vocab_size=args.vocab)
    eos = tokenizer.eos_token_id
    prompt_ids = tokenizer([p for p, _ in pairs], add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer([a for _, a in pairs], add_special_tokens=False)["input_ids"]
    examples = [(p, a + [eos]) for p, a in zip(prompt_ids, answer_ids, strict=True)]
    longest = max(len(p) + len(a) for p, a in examples)
    print(f"{len(pairs):,} examples, longest {longest} tokens, vocab {len(tokenizer)}")

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

    def batch_at(indices: list[int]):
        width = max(len(examples[i][0]) + len(examples[i][1]) for i in indices)
        ids = torch.full((len(indices), width), eos, dtype=torch.long)
        labels = torch.full((len(indices), width), -100, dtype=torch.long)
        mask = torch.zeros((len(indices), width), dtype=torch.long)
        for row, i in enumerate(indices):
            p, a = examples[i]
            ids[row, :len(p) + len(a)] = torch.tensor(p + a)
            labels[row, len(p):len(p) + len(a)] = torch.tensor(a)
            mask[row, :len(p) + len(a)] = 1
        return ids, labels, mask

    def save(folder: Path) -> None:
        model.eval()
        model.generation_config.eos_token_id = eos
        model.generation_config.pad_token_id = eos
        model.generation_config.max_new_tokens = 64 if args.tasks == "long" else 16
        folder.mkdir(parents=True, exist_ok=True)
        copy = GPT2LMHeadModel(config)
        copy.load_state_dict(model.state_dict())
        copy.generation_config = model.generation_config
        copy.half().save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
        settings = {k: v for k, v in vars(args).items() if k != "out"}  # no local paths in the shipped files
        (folder / "training.json").write_text(json.dumps({**settings, "examples": len(pairs),
                                                          "seconds": round(time.time() - start)}, indent=2) + "\n")
        model.train()

    generator = torch.Generator().manual_seed(args.seed)
    model.train()
    for step in range(min(args.steps, args.stop_after or args.steps)):
        indices = torch.randint(0, len(examples), (args.batch,), generator=generator).tolist()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        # The batch runs as two halves sorted by length (less padding: a long worked answer no longer widens the
        # short questions' rows); each half's mean loss is weighted by its share of answer tokens, so the gradient is
        # the whole batch's mean-token-loss gradient.
        indices.sort(key=lambda i: len(examples[i][0]) + len(examples[i][1]))
        halves = [indices[:len(indices) // 2], indices[len(indices) // 2:]]
        batches = [batch_at(half) for half in halves if half]
        counts = [int((y[:, 1:] != -100).sum()) for _, y, _ in batches]
        loss = 0.0
        for (x, y, mask), count in zip(batches, counts, strict=True):
            part = model(input_ids=x, attention_mask=mask, labels=y).loss * (count / sum(counts))
            part.backward()
            loss += part.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step:>5}  loss {loss.item():.3f}  lr {lr_at(step):.2e}  {time.time() - start:.0f}s",
                  flush=True)
        if step + 1 in args.checkpoints and step + 1 < args.steps:
            save(Path(f"{args.out}-step{step + 1}"))

    out = Path(args.out)
    save(out)
    print(f"saved to {out} in {time.time() - start:.0f}s")


if __name__ == "__main__":
    main()
