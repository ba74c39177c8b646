"""Tiny GGUF files for the tests, written with the ``gguf`` package the way llama.cpp's converter writes a Llama
model with a GPT-2-style (byte-level BPE) tokenizer, as SmolLM2's GGUF is: float32 tensors under llama.cpp's names,
the query and key weights permuted as llama.cpp permutes them, the tokenizer as ``tokenizer.ggml.*`` fields.

Reading such a file back must give the very model it was written from, which is what the tests check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def tiny_llama(tokenizer: Any, folder: Path) -> Path:
    """A random-weight Llama over ``tokenizer``'s vocabulary, saved with ``save_pretrained`` in ``folder``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         initializer_range=0.3, rope_theta=10000.0, tie_word_embeddings=False,
                         bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.eos_token_id)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _permute(weights: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """llama.cpp's permutation of query/key rows (transformers reverses it when reading)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def write_gguf(hf_folder: Path, path: Path, *, architecture: str = "llama") -> Path:
    """The model in ``hf_folder`` (from :func:`tiny_llama`) as a GGUF file at ``path``; ``architecture`` is written
    as given (another name makes a file transformers cannot load)."""
    import gguf
    from safetensors.numpy import load_file

    config = json.loads((hf_folder / "config.json").read_text())
    tokenizer = json.loads((hf_folder / "tokenizer.json").read_text())
    tokenizer_config = json.loads((hf_folder / "tokenizer_config.json").read_text())
    tensors = load_file(str(hf_folder / "model.safetensors"))
    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny-llama")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(float(config.get("rope_theta") or config["rope_parameters"]["rope_theta"]))
    writer.add_rope_dimension_count(config["hidden_size"] // n_head)
    writer.add_vocab_size(config["vocab_size"])

    vocab = tokenizer["model"]["vocab"]
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    specials = {t["content"] for t in tokenizer.get("added_tokens", []) if t.get("special")}
    merges = [" ".join(m) if isinstance(m, list) else m for m in tokenizer["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in specials else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_pad_token_id(config["pad_token_id"])
    writer.add_add_bos_token(False)
    template = tokenizer_config.get("chat_template")
    if template is None and (hf_folder / "chat_template.jinja").exists():
        template = (hf_folder / "chat_template.jinja").read_text()
    if template:
        writer.add_chat_template(template)

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    for name, value in tensors.items():
        value = np.ascontiguousarray(value.astype(np.float32))
        if name in names:
            out = names[name]
        else:
            _, _, layer, rest = name.split(".", 3)
            part = rest.rsplit(".", 1)[0]
            out = f"blk.{layer}.{per_layer[part]}.weight"
            if part == "self_attn.q_proj":
                value = _permute(value, n_head, n_head)
            elif part == "self_attn.k_proj":
                value = _permute(value, n_head, n_kv)
        writer.add_tensor(out, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
