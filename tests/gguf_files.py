"""Tiny GGUF files for the tests, written with the ``gguf`` package the way llama.cpp's converter writes a Llama
model with a GPT-2-style (byte-level BPE) tokenizer, as SmolLM2's GGUF is: float32 tensors under llama.cpp's names,
the query and key weights permuted as llama.cpp permutes them, the tokenizer as ``tokenizer.ggml.*`` fields.

Reading such a file back must give the very model it was written from, which is what the tests check.

For hostile files, :func:`read_parts` takes a file apart into :class:`Parts` (metadata, tensor infos, data bytes) and
:meth:`Parts.write` puts it together byte by byte with whatever a test changed: counts, array lengths, dims, offsets;
:func:`with_layers` and :func:`overlapping` make deep or wide models from the tiny one.
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


# ---- hostile files: a GGUF file taken apart and written back byte by byte, offsets, counts and dims as told ----

#: GGUF value types (the GGUF specification's numbering).
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_SCALARS = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
            I64: "<q", F64: "<d"}


class Tensor:
    """One tensor's info as a GGUF file declares it: name, dims (fastest first, as GGUF writes them), ggml type
    number and offset in the data section."""

    def __init__(self, name: str, dims: list[int], kind: int, offset: int) -> None:
        self.name, self.dims, self.kind, self.offset = name, list(dims), kind, offset


class Parts:
    """A GGUF file's parts: metadata ``(key, type, value)`` (an array's value is ``(item type, list)``), tensor
    infos and the data section's bytes. :func:`read_parts` takes a file apart, :meth:`write` puts one together,
    with any of it changed."""

    def __init__(self, kv: list[tuple[str, int, Any]], tensors: list[Tensor], data: bytes) -> None:
        self.kv, self.tensors, self.data = kv, tensors, data

    def get(self, key: str) -> Any:
        return next(value for name, _, value in self.kv if name == key)

    def set(self, key: str, kind: int, value: Any) -> None:
        self.kv = [item for item in self.kv if item[0] != key] + [(key, kind, value)]

    def write(self, path: Path, *, tensor_count: int | None = None, kv_count: int | None = None,
              lengths: dict[str, int] | None = None, alignment: int = 32) -> Path:
        """The file at ``path``; ``tensor_count``/``kv_count`` override the counts written in the header, and
        ``lengths`` the lengths written for the arrays of these keys (their values stay as they are)."""
        import struct

        out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors) if tensor_count is None else tensor_count,
                                              len(self.kv) if kv_count is None else kv_count))
        for key, kind, value in self.kv:
            out += _string(key) + struct.pack("<I", kind) + _value(kind, value, (lengths or {}).get(key))
        for t in self.tensors:
            out += _string(t.name) + struct.pack(f"<I{len(t.dims)}QIQ", len(t.dims), *t.dims, t.kind, t.offset)
        out += bytes(-len(out) % alignment)
        path.write_bytes(bytes(out) + self.data)
        return path


def _string(text: str | bytes) -> bytes:
    import struct

    raw = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _value(kind: int, value: Any, length: int | None = None) -> bytes:
    import struct

    if kind == STR:
        return _string(value)
    if kind == ARR:
        item, items = value
        head = struct.pack("<IQ", item, len(items) if length is None else length)
        if item in _SCALARS and not isinstance(items, list):  # a numpy array: its bytes at once
            return head + np.asarray(items).astype(_SCALARS[item]).tobytes()
        return head + b"".join(_value(item, v) for v in items)
    return struct.pack(_SCALARS[kind], value)


def read_parts(path: Path) -> Parts:
    """The parts of the (well-formed) GGUF file ``path``, read with the ``gguf`` package."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    kv = []
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        kind = int(field.types[0])
        if kind == ARR:
            item = int(field.types[1])
            values = [field.parts[i] for i in field.data]
            kv.append((name, kind, (item, [bytes(v) if item == STR else v.tolist()[0] for v in values])))
        else:
            part = field.parts[field.data[0]]
            kv.append((name, kind, bytes(part) if kind == STR else part.tolist()[0]))
    tensors = [Tensor(t.name, [int(d) for d in t.shape], int(t.tensor_type), int(t.data_offset - reader.data_offset))
               for t in reader.tensors]
    return Parts(kv, tensors, bytes(reader.data[reader.data_offset:]))


def with_layers(parts: Parts, n: int, *, shared: bool = False) -> Parts:
    """``parts`` with ``n`` copies of its layer 0 as layers 0 to n-1 (``block_count`` told so): each copy with bytes
    of its own, or, ``shared``, all at layer 0's offsets (a file that declares far more than it holds)."""
    first = [t for t in parts.tensors if t.name.startswith("blk.0.")]
    rest = [t for t in parts.tensors if not t.name.startswith("blk.")]
    data = bytearray(parts.data)
    tensors = list(rest)
    for layer in range(n):
        for t in first:
            offset = t.offset
            if not shared and layer:
                size = _nbytes(t)
                data += bytes(-len(data) % 32)
                offset = len(data)
                data += parts.data[t.offset:t.offset + size]
            tensors.append(Tensor(t.name.replace("blk.0.", f"blk.{layer}.", 1), t.dims, t.kind, offset))
    arch = parts.get("general.architecture")
    out = Parts(list(parts.kv), tensors, bytes(data))
    out.set(f"{arch.decode() if isinstance(arch, bytes) else arch}.block_count", U32, n)
    return out


def _nbytes(t: Tensor) -> int:
    import math

    import gguf

    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(t.kind)]
    return math.prod(t.dims) // block * size


def overlapping(parts: Parts, factor: int, layers: int) -> Parts:
    """``parts`` (a Llama from :func:`write_gguf`) made ``factor`` times wider and ``layers`` deep, every tensor in
    float16 at offset 0 of a data section as large as the largest one: a file of a few MiB that declares a model of
    hundreds of MiB, consistent in all but where its tensors lie."""
    arch = "llama"
    vocab = parts.get(f"{arch}.vocab_size")
    out = with_layers(parts, 1)
    for key in ("embedding_length", "feed_forward_length", "rope.dimension_count"):
        out.set(f"{arch}.{key}", U32, parts.get(f"{arch}.{key}") * factor)
    wide = [Tensor(t.name, [d if d == vocab else d * factor for d in t.dims], 1, 0) for t in out.tensors]
    largest = max(_nbytes(t) for t in wide)
    return with_layers(Parts(out.kv, wide, bytes(largest)), layers, shared=True)
