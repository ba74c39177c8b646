"""Shared fixtures: tiny random-weight causal LMs (GPT-2 and Llama architectures) with tokenizers trained in-process.

Nothing here touches the network; models are built from configs and saved to a temporary folder, then loaded back
through ``trace_core.load_model`` exactly as a user's model would be.
"""

from __future__ import annotations

import os

import pytest

# The dashboard starts on the tiny demo model in tests (the real SmolLM2 only where a test asks for it).
os.environ["TRACE_DEFAULT_MODEL"] = "demo"

# The tiny models' training text and chat template; the engine bench builds its served model from the same ones.
from bench.server_throughput import CHAT_TEMPLATE, CORPUS  # noqa: E402


def _byte_level_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _metaspace_tokenizer():
    """SentencePiece-style ("▁" for spaces, byte fallback) like Llama's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1, right=0)])
    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    from tokenizers import processors

    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="</s>")


def _build(arch: str, tmp_path_factory, *, n_positions: int = 512):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if arch == "gpt2":
        tokenizer = _byte_level_tokenizer()
        config = GPT2Config(vocab_size=len(tokenizer), n_positions=n_positions, n_embd=32, n_layer=2, n_head=2,
                            initializer_range=0.3, bos_token_id=tokenizer.eos_token_id,
                            eos_token_id=tokenizer.eos_token_id)
        model = GPT2LMHeadModel(config)
    else:
        tokenizer = _metaspace_tokenizer()
        config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=n_positions,
                             initializer_range=0.3, bos_token_id=tokenizer.bos_token_id,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    folder = tmp_path_factory.mktemp(f"tiny-{arch}" + ("" if n_positions == 512 else f"-ctx{n_positions}"))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def byte_level_tokenizer():
    """The GPT-2-style tokenizer of the tiny GPT-2 (byte-level BPE with merges, and the chat template)."""
    pytest.importorskip("transformers")
    return _byte_level_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory):
    pytest.importorskip("torch")
    return {arch: _build(arch, tmp_path_factory) for arch in ("gpt2", "llama")}


@pytest.fixture(scope="session")
def tiny_models(tiny_model_dirs):
    from trace_core import load_model

    return {arch: load_model(folder, device="cpu") for arch, folder in tiny_model_dirs.items()}


@pytest.fixture(params=["gpt2", "llama"])
def lm(request, tiny_models):
    return tiny_models[request.param]


@pytest.fixture(scope="session")
def short_context_lm(tmp_path_factory):
    """A tiny GPT-2 that reads at most 24 tokens, prompt and answer together (for context-fit rules)."""
    pytest.importorskip("torch")
    from trace_core import load_model

    return load_model(_build("gpt2", tmp_path_factory, n_positions=24), device="cpu")
