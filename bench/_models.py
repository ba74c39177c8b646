"""Random-weight models with a realistic vocabulary, built offline for benchmarks."""

from __future__ import annotations

import shutil
import tempfile


def word_tokenizer(vocab_size: int):
    """A word-level tokenizer with `vocab_size` entries ("w0" ... ) and no EOS, so generation runs to the limit."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", pad_token="w0")


def save_random_lm(folder: str, *, arch: str = "gpt2", vocab_size: int = 32000, hidden: int = 64, layers: int = 2,
                   seed: int = 0) -> str:
    """Save a random-weight causal LM and its word tokenizer into `folder` (no end-of-answer token)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tokenizer = word_tokenizer(vocab_size)
    if arch == "gpt2":
        config = GPT2Config(vocab_size=vocab_size, n_positions=4096, n_embd=hidden, n_layer=layers,
                            n_head=max(1, hidden // 32), initializer_range=0.2, eos_token_id=None,
                            bos_token_id=None)
        model = GPT2LMHeadModel(config)
    else:
        config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=hidden * 4,
                             num_hidden_layers=layers, num_attention_heads=max(1, hidden // 32),
                             max_position_embeddings=4096, initializer_range=0.2, eos_token_id=None,
                             bos_token_id=None, pad_token_id=0)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def random_lm(*, arch: str = "gpt2", vocab_size: int = 32000, hidden: int = 64, layers: int = 2, seed: int = 0):
    """A LoadedModel with random weights (saved and reloaded through load_model, like a user's model)."""
    from trace_core import load_model

    folder = tempfile.mkdtemp(prefix=f"bench-{arch}-")
    try:
        save_random_lm(folder, arch=arch, vocab_size=vocab_size, hidden=hidden, layers=layers, seed=seed)
        return load_model(folder, device="cpu")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
