"""Recording traces with a Hugging Face causal LM: the only module that touches torch and transformers.

Both are imported lazily, inside functions, so ``import trace_core`` stays light.

* :func:`load_model` loads a local folder or a locally cached model id: offline (``local_files_only``), safetensors
  weights only and ``trust_remote_code=False`` unless the caller explicitly opts in.
* :func:`generate_traces` generates answers with ``model.generate`` and records each step's distribution with a
  ``LogitsProcessor`` that keeps O(T * k) numbers per answer (never the T x V logits). It sits before the sampling
  warpers (temperature, top-k, top-p), so it records the model's own distribution, and it returns the scores
  unchanged, so the decoded tokens are exactly those of plain ``generate``.
* :func:`score_answers` records the trace of existing answers by teacher forcing, in chunks so that memory stays
  bounded for long answers; for the same model and prompt it gives the same numbers as generation.
"""

from __future__ import annotations

import copy
import inspect
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from .trace import DecodingConfig, Trace, TraceMetadata

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "LoadedModel",
    "beam_logprobs",
    "check_model_allowed",
    "ModelLoadError",
    "ModelNotAllowedError",
    "ModelNotFoundError",
    "UnsafeModelError",
    "encode_prompt",
    "generate_trace",
    "generate_traces",
    "load_model",
    "score_answer",
    "score_answers",
    "token_pieces",
]

# generate() options that change the decoding algorithm away from one-token-at-a-time search.
_REFUSED_GENERATE_KWARGS = {
    "num_beams": "beam search",
    "num_beam_groups": "group beam search",
    "assistant_model": "assisted decoding",
    "prompt_lookup_num_tokens": "prompt-lookup (assisted) decoding",
    "penalty_alpha": "contrastive search",
    "dola_layers": "DoLa decoding",
    "num_return_sequences": "several sequences per prompt",
    "logits_processor": "custom logits processors",
    "generation_config": "a replacement generation config",
}

# Generation-config fields that add a logits processor *before* the recorder (it is appended after them), i.e. the
# recorded distribution is then processed, not the model's own. Value = the setting that means "off".
_PROCESSING_FIELDS = {
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "sequence_bias": None,
    "min_length": 0,
    "min_new_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "exponential_decay_length_penalty": None,
    "renormalize_logits": False,
    "guidance_scale": None,
    "watermarking_config": None,
    "remove_invalid_values": False,
}


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message says why and what to do."""


class ModelNotFoundError(ModelLoadError, FileNotFoundError):
    """The model is neither a local folder nor in the local Hugging Face cache."""


class UnsafeModelError(ModelLoadError):
    """Loading would need pickle weights or remote code, and the caller did not opt in."""


class ModelNotAllowedError(ModelLoadError):
    """The deployment's allow-list (``TRACE_MODEL_ALLOWLIST``) does not include this model."""


@dataclass(eq=False)
class LoadedModel:
    """A causal LM with its tokenizer, ready for recording.

    ``lock`` serialises use of the model: several threads (dashboard sessions) may share one LoadedModel.
    """

    model: Any
    tokenizer: Any
    model_id: str
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @property
    def device(self) -> "torch.device":
        return next(self.model.parameters()).device

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))


def _torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised only without torch
        raise ImportError("recording traces needs torch and transformers: pip install 'trace-core[record]'") from exc
    return torch


def _resolve_device(device: str | Any) -> Any:
    torch = _torch()
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    return torch.device(device)


def _resolve_dtype(dtype: str | Any, device: Any) -> Any:
    torch = _torch()
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if isinstance(dtype, str):
        names = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
        if dtype not in names:
            raise ValueError(f"`dtype` must be 'auto' or one of {sorted(names)}, got {dtype!r}")
        return names[dtype]
    return dtype


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def model_allowlist() -> tuple[str, ...] | None:
    """Models a shared deployment allows, from ``TRACE_MODEL_ALLOWLIST`` (comma-separated ids or folder paths);
    None when the variable is unset or empty (every local model allowed)."""
    entries = tuple(e.strip() for e in os.environ.get("TRACE_MODEL_ALLOWLIST", "").split(",") if e.strip())
    return entries or None


def check_model_allowed(name_or_path: str | Path) -> None:
    """Raise :class:`ModelNotAllowedError` if an allow-list is set and the model is not on it."""
    allowed = model_allowlist()
    if allowed is None:
        return
    name = str(name_or_path)
    resolved = Path(name).expanduser().resolve() if name else None
    for entry in allowed:
        if name == entry or (resolved is not None and Path(entry).expanduser().resolve() == resolved):
            return
    raise ModelNotAllowedError(f"Model '{name}' is not on this deployment's allow-list (TRACE_MODEL_ALLOWLIST); "
                               f"allowed: {', '.join(allowed)}.")


def load_model(name_or_path: str | Path, *, device: str = "auto", dtype: str | Any = "auto",
               local_files_only: bool = True, trust_remote_code: bool | None = None,
               allow_pickle_weights: bool | None = None) -> LoadedModel:
    """Load a causal LM and its tokenizer from a local folder or the local Hugging Face cache.

    Parameters
    ----------
    name_or_path : str or Path
        A folder saved with ``save_pretrained``, or a model id already in the local cache.
    device : str, default "auto"
        "auto" picks CUDA, then MPS, then CPU.
    dtype : str or torch.dtype, default "auto"
        "auto" is float32 on CPU and bfloat16 (or float16) on CUDA.
    local_files_only : bool, default True
        Never reach a model hub. Set False only on a connected machine, deliberately.
    trust_remote_code : bool or None, default None
        Run Python code shipped with the model. None: off unless the environment variable ``TRACE_TRUST_REMOTE_CODE``
        is 1/true; only opt in when you trust the model's source.
    allow_pickle_weights : bool or None, default None
        Accept ``pytorch_model.bin`` (pickle) weights when there are no safetensors weights. Loading a pickle can run
        arbitrary code. None: off unless ``TRACE_ALLOW_PICKLE_WEIGHTS`` is 1/true.

    A shared deployment can restrict which models load with ``TRACE_MODEL_ALLOWLIST`` (see
    :func:`check_model_allowed`); the check runs before anything is read.

    Raises
    ------
    ModelNotFoundError
        Nothing found locally under that name.
    UnsafeModelError
        Only pickle weights are present and ``allow_pickle_weights`` is False.
    ModelNotAllowedError
        An allow-list is set and the model is not on it.
    """
    _torch()
    import transformers

    name = str(name_or_path)
    check_model_allowed(name)
    if trust_remote_code is None:
        trust_remote_code = _env_flag("TRACE_TRUST_REMOTE_CODE")
    if allow_pickle_weights is None:
        allow_pickle_weights = _env_flag("TRACE_ALLOW_PICKLE_WEIGHTS")
    if not name.strip():
        raise ModelNotFoundError("No model given: pass a local model folder or a cached Hugging Face model id.")
    path = Path(name).expanduser()
    if path.is_dir():
        has_safetensors = any(path.glob("*.safetensors")) or (path / "model.safetensors.index.json").exists()
        has_pickle = any(path.glob("pytorch_model*.bin")) or any(path.glob("*.pt")) or any(path.glob("*.pth"))
        if not has_safetensors and has_pickle and not allow_pickle_weights:
            raise UnsafeModelError(
                f"Model folder '{name}' has only pickle weights (pytorch_model.bin), which can run code when loaded; "
                "convert them to safetensors, or opt in with allow_pickle_weights=True if you trust the file.")
        if not has_safetensors and not has_pickle:
            raise ModelNotFoundError(f"Model folder '{name}' has no weights (*.safetensors); save the model there "
                                     "with save_pretrained(..., safe_serialization=True).")
        source = str(path)
    elif _looks_like_path(name) or path.exists():
        raise ModelNotFoundError(f"No model folder at '{name}'; check the path (it must be a folder made by "
                                 "save_pretrained, with config.json and *.safetensors).")
    else:
        source = name

    resolved_device = _resolve_device(device)
    resolved_dtype = _resolve_dtype(dtype, resolved_device)
    options = dict(local_files_only=local_files_only, trust_remote_code=trust_remote_code)
    hf_logging = transformers.utils.logging
    bar_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a "Loading weights" bar per load is noise in a CLI or a server log
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, **options)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            source, dtype=resolved_dtype, use_safetensors=None if allow_pickle_weights else True, **options)
    except (OSError, ValueError) as exc:
        text = str(exc)
        if "trust_remote_code" in text and not trust_remote_code:
            raise UnsafeModelError(f"Model '{name}' needs its own Python code (trust_remote_code); it is off by "
                                   "default. Opt in only if you trust the model's source.") from exc
        if "safetensors" in text.lower() and not allow_pickle_weights:
            raise UnsafeModelError(f"Model '{name}' has no safetensors weights in the local cache; only pickle "
                                   "weights, which can run code when loaded. Convert them to safetensors, or opt in "
                                   "with allow_pickle_weights=True if you trust the file.") from exc
        if path.is_dir():
            raise ModelLoadError(f"Model folder '{name}' could not be loaded: {text.splitlines()[0]}") from exc
        raise ModelNotFoundError(
            f"Model '{name}' was not found locally: it is not a folder, and not in the Hugging Face cache "
            f"({_cache_dir()}); download it once on a connected machine (huggingface-cli download {name}) or pass "
            "the path of a folder made by save_pretrained.") from exc
    finally:
        if bar_was_on:
            hf_logging.enable_progress_bar()
    model.to(resolved_device)
    model.eval()
    return LoadedModel(model=model, tokenizer=tokenizer, model_id=name)


def _cache_dir() -> str:
    try:
        from huggingface_hub import constants

        return str(constants.HF_HUB_CACHE)
    except Exception:  # pragma: no cover - hub package layout differs
        return "the Hugging Face cache"


# ----------------------------------------------------------------------------------------------------------------
# Tokens


def encode_prompt(tokenizer: Any, prompt: str, *, chat_template: bool = False) -> list[int]:
    """Token ids of the prompt as the model sees it (with the chat template when asked)."""
    if not isinstance(prompt, str):
        raise TypeError(f"`prompt` must be a str, got {type(prompt).__name__}")
    if chat_template:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("this tokenizer has no chat template; turn the chat template option off")
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    if len(ids) == 0:
        raise ValueError("the prompt is empty after tokenization; the model needs at least one prompt token")
    return list(ids)


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def token_pieces(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token's text, such that ``"".join(pieces) == tokenizer.decode(ids)``.

    Each token is decoded after the token before it (so context-dependent decoders, such as SentencePiece's
    leading-space rule, are respected), in one batched call. When that does not reproduce the decoded text (a
    byte-level piece that ends inside a multi-byte UTF-8 character), an exact incremental decoding is used instead:
    a token that leaves a character incomplete gives "" and the token that completes it carries the character.
    """
    ids = [int(i) for i in ids]
    if not ids:
        return []
    full = _decode(tokenizer, ids)
    windows = [ids[max(0, i - 1):i + 1] for i in range(len(ids))] + [ids[i - 1:i] for i in range(1, len(ids))]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # one call into the Rust tokenizer instead of a Python loop of decode() calls
        texts = backend.decode_batch(windows, skip_special_tokens=False)
    else:
        texts = tokenizer.batch_decode(windows, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    pairs, prefixes = texts[:len(ids)], [""] + texts[len(ids):]
    if all(p.startswith(q) and "\ufffd" not in p for p, q in zip(pairs, prefixes)):
        pieces = [p[len(q):] for p, q in zip(pairs, prefixes)]
        if "".join(pieces) == full:
            return pieces
    return _token_pieces_incremental(tokenizer, ids, full)


def _token_pieces_incremental(tokenizer: Any, ids: list[int], full: str) -> list[str]:
    pieces: list[str] = []
    prefix_offset = read_offset = 0
    for i in range(len(ids)):
        prefix_text = _decode(tokenizer, ids[prefix_offset:read_offset])
        new_text = _decode(tokenizer, ids[prefix_offset:i + 1])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            pieces.append(new_text[len(prefix_text):])
            prefix_offset, read_offset = read_offset, i + 1
        else:
            pieces.append("")
    if read_offset < len(ids):  # trailing incomplete bytes: give them to the last token as decoded
        tail = _decode(tokenizer, ids[prefix_offset:])[len(_decode(tokenizer, ids[prefix_offset:read_offset])):]
        pieces[-1] = tail
    if "".join(pieces) != full:
        # A decoder whose output is not prefix-stable: fall back to exact prefix differences (quadratic, rare).
        pieces, previous = [], ""
        for i in range(len(ids)):
            current = _decode(tokenizer, ids[:i + 1])
            common = len(previous) if current.startswith(previous) else 0
            pieces.append(current[common:])
            previous = current
        if "".join(pieces) != full:
            pieces[-1] += full[len("".join(pieces)):] if full.startswith("".join(pieces[:-1])) else ""
    return pieces


# ----------------------------------------------------------------------------------------------------------------
# Per-step statistics


def _stats_in_place(x: "torch.Tensor", k: int, chosen: "torch.Tensor | None", *, work: "torch.Tensor | None" = None,
                    above: "torch.Tensor | None" = None) -> tuple["torch.Tensor", ...]:
    """Entropy (n,), top-k log-probs and ids (n, k), and the chosen tokens' log-probs and 1-based ranks (n,) from
    float32 logits x (n, V), which are overwritten. ``chosen`` None means greedy: the chosen token is the argmax.

    Computed inside x and workspaces of its shape (``work`` float32, ``above`` bool; made here if not given): no
    other vocabulary-sized temporaries, so the allocator has nothing to strand between the long-lived tensors
    generate() keeps growing (at some vocabulary sizes that stranding cost hundreds of MiB over a long answer). No
    host synchronisation, so a GPU is never stalled.
    """
    torch = _torch()
    work = torch.empty_like(x) if work is None else work
    x.sub_(x.amax(dim=-1, keepdim=True))
    torch.exp(x, out=work)
    total = work.sum(dim=-1, keepdim=True)
    x.sub_(total.log())  # log p
    top_lp, top_ids = torch.topk(x, k=min(max(k, 1), x.shape[-1]), dim=-1)
    if chosen is None:
        chosen_lp, rank = top_lp[:, 0], torch.ones_like(top_ids[:, 0])
    else:
        chosen_lp = x.gather(-1, chosen[:, None]).squeeze(-1)
        above = torch.empty(x.shape, dtype=torch.bool, device=x.device) if above is None else above
        torch.gt(x, chosen_lp[:, None], out=above)
        rank = above.sum(dim=-1) + 1  # sum of a bool tensor: twice as fast as count_nonzero
    work.div_(total)  # p
    # -sum p log p as one dot product per row (several times faster than torch.special.entr on CPU); the clamp
    # makes masked tokens (log p = -inf, p = 0) add 0 instead of 0 * -inf = nan.
    entropy = -torch.linalg.vecdot(work, x.clamp_(min=torch.finfo(x.dtype).min))
    return entropy, top_lp[:, :k], top_ids[:, :k], chosen_lp, rank


_STATS_BLOCK_BYTES = 4 * 2**20


class _TraceRecorder:
    """LogitsProcessor body that records per-step entropy, top-k, and the chosen token's log-prob and rank.

    Each step's scores are copied into a preallocated buffer of at most ``buffer_bytes`` (and 64 steps); when it is
    full, the statistics of all buffered steps are computed in one vectorised call (inside the buffer, see
    :func:`_stats_in_place`) and the rows are dropped. Memory is
    therefore bounded by the buffer, never T x V, and the per-step cost is one copy: on small models the fixed cost
    of a dozen tensor operations per step would otherwise rival the model itself.

    Chosen tokens: under greedy decoding nothing runs after the recorder, so the chosen token is the argmax of the
    row it saw (log-prob = top-1 value, rank 1, ties included). Under sampling the token chosen at step t is read from
    ``input_ids`` at a later step, or from the final sequences.
    """

    max_steps = 64

    def __init__(self, k: int, *, greedy: bool, buffer_bytes: int = 2 * 2**20) -> None:
        self.k = k
        self.greedy = greedy
        self.buffer_bytes = buffer_bytes
        self.prompt_width: int | None = None
        self._buffer = None  # (limit, B, V) float32: steps _flushed .. _flushed + _n - 1 are buffered
        self._work = None  # workspaces of the buffer's shape (float32, bool), made on first use
        self._above = None
        self._n = 0
        self._flushed = 0
        self._limit = 1
        self._parts: dict[str, list] = {"entropy": [], "top_lp": [], "top_ids": [], "chosen_lp": [], "rank": []}

    def __call__(self, input_ids: "torch.Tensor", scores: "torch.Tensor") -> "torch.Tensor":
        if self.prompt_width is None:
            self.prompt_width = input_ids.shape[1]
            row_bytes = 4 * scores.shape[0] * scores.shape[1]
            self._limit = max(1, min(self.max_steps, self.buffer_bytes // row_bytes))
            self._buffer = _torch().empty((self._limit,) + tuple(scores.shape), dtype=_torch().float32,
                                          device=scores.device)
        if self._n >= self._limit:
            # Every buffered step is before this one, so its chosen token is already in input_ids.
            self._flush(input_ids[:, self.prompt_width:])
        self._buffer[self._n].copy_(scores)  # one copy into preallocated memory (and to float32)
        self._n += 1
        return scores

    def _flush(self, generated: "torch.Tensor", n_rows: int | None = None) -> None:
        torch = _torch()
        n_steps = self._n if n_rows is None else min(n_rows, self._n)
        if n_steps == 0:
            return
        batch = self._buffer.shape[1]
        # Rows in step-major order (step, sequence): a view of the buffer, no copy.
        chosen = None
        if not self.greedy:
            chosen = generated[:, self._flushed:self._flushed + n_steps].T.reshape(-1).to(self._buffer.device)
        width = self._buffer.shape[-1]
        if self._work is None:
            self._work = torch.empty_like(self._buffer)
            self._above = None if self.greedy else torch.empty(self._buffer.shape, dtype=torch.bool,
                                                                device=self._buffer.device)
        n = n_steps * batch
        entropy, top_lp, top_ids, chosen_lp, rank = _stats_in_place(
            self._buffer.view(-1, width)[:n], self.k, chosen, work=self._work.view(-1, width)[:n],
            above=None if self._above is None else self._above.view(-1, width)[:n])
        for name, value in (("entropy", entropy), ("top_lp", top_lp), ("top_ids", top_ids),
                            ("chosen_lp", chosen_lp), ("rank", rank)):
            value = value.reshape((n_steps, batch) + tuple(value.shape[1:])).transpose(0, 1)
            self._parts[name].append(value)
        self._flushed += n_steps
        self._n = 0

    def finish(self, sequences: "torch.Tensor") -> dict[str, np.ndarray]:
        """Per-step arrays of shape (B, T[, k]) for the T generated steps in ``sequences`` (B, T)."""
        torch = _torch()
        n_steps = sequences.shape[1]
        if n_steps > self._flushed + self._n:  # pragma: no cover - generate() skipped the processor
            raise RuntimeError("the trace recorder saw fewer steps than were generated; is this a custom generate()?")
        # Steps beyond n_steps were undone by generate() (deferred stop checks): they are never scored.
        self._flush(sequences, n_rows=max(0, n_steps - self._flushed))
        self._n = 0
        self._buffer = self._work = self._above = None
        return {name: torch.cat(parts, dim=1)[:, :n_steps].cpu().numpy() for name, parts in self._parts.items()}


def _make_logits_processor(recorder: _TraceRecorder) -> Any:
    from transformers import LogitsProcessor

    class _Recorder(LogitsProcessor):
        def __call__(self, input_ids, scores):  # noqa: D401 - transformers' signature
            return recorder(input_ids, scores)

    # LogitsProcessorList inspects each processor's signature at every step; a precomputed one makes that cheap.
    _Recorder.__call__.__signature__ = inspect.signature(_Recorder.__call__)
    return _Recorder()


def _check_generate_kwargs(generate_kwargs: Mapping[str, Any]) -> None:
    for key, what in _REFUSED_GENERATE_KWARGS.items():
        if key not in generate_kwargs:
            continue
        value = generate_kwargs[key]
        if key in ("num_beams", "num_beam_groups", "num_return_sequences") and value in (None, 1):
            continue
        raise ValueError(f"traced generation does not support {what} (`{key}`): the trace is defined for one "
                         "sequence decoded one token at a time. Use greedy or sampled decoding.")


def _is_processed(generation_config: Any) -> bool:
    return any(getattr(generation_config, name, off) not in (None, off) for name, off in _PROCESSING_FIELDS.items())


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return set()
    return {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}


def _pad_id(model: Any, tokenizer: Any) -> int:
    for value in (tokenizer.pad_token_id, getattr(model.generation_config, "pad_token_id", None),
                  tokenizer.eos_token_id):
        if value is not None:
            return int(value if not isinstance(value, (list, tuple)) else value[0])
    return 0


def context_length(lm: LoadedModel) -> int | None:
    """How many tokens (prompt and answer together) the model reads, from its config; None when it does not say."""
    value = getattr(getattr(lm.model, "config", None), "max_position_embeddings", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _check_lm(lm: Any) -> LoadedModel:
    if not isinstance(lm, LoadedModel):
        raise TypeError(f"`lm` must be a LoadedModel (from load_model), got {type(lm).__name__}")
    return lm


def _check_prompts(prompts: Any, name: str = "prompts") -> list[str]:
    if isinstance(prompts, str):
        raise TypeError(f"`{name}` must be a list of strings; use the singular function for one prompt")
    prompts = list(prompts)
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise TypeError(f"`{name}[{i}]` must be a str, got {type(p).__name__}")
    return prompts


def _check_batch_size(batch_size: int) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be an int >= 1, got {batch_size!r}")


# ----------------------------------------------------------------------------------------------------------------
# Generation


def generate_trace(lm: LoadedModel, prompt: str, *, config: DecodingConfig = DecodingConfig(),
                   generate_kwargs: Mapping[str, Any] | None = None) -> Trace:
    """Generate an answer to one prompt and record its trace. See :func:`generate_traces`."""
    if not isinstance(prompt, str):
        raise TypeError(f"`prompt` must be a str, got {type(prompt).__name__}")
    return generate_traces(lm, [prompt], config=config, generate_kwargs=generate_kwargs)[0]


def generate_traces(lm: LoadedModel, prompts: Sequence[str], *, config: DecodingConfig = DecodingConfig(),
                    batch_size: int = 8, generate_kwargs: Mapping[str, Any] | None = None,
                    progress: Callable[[int, int], None] | None = None) -> list[Trace]:
    """Generate answers with ``model.generate`` and record each answer's trace in the same pass.

    Parameters
    ----------
    lm : LoadedModel
    prompts : sequence of str
    config : DecodingConfig
        Greedy (default) or sampled decoding; the trace is of the distribution before temperature/top-k/top-p.
    batch_size : int
        Prompts per ``generate`` call (left-padded).
    generate_kwargs : mapping, optional
        Extra ``generate`` options. Beam search, assisted decoding and other multi-sequence methods are refused.
    progress : callable(done, total), optional
        Called after each batch; raise from it to cancel.

    Returns
    -------
    list of Trace
        One per prompt; the answer stops before the first EOS token (EOS is not part of the trace).
    """
    lm = _check_lm(lm)
    prompts = _check_prompts(prompts)
    _check_batch_size(batch_size)
    if not isinstance(config, DecodingConfig):
        raise TypeError(f"`config` must be a DecodingConfig, got {type(config).__name__}")
    extra = dict(generate_kwargs or {})
    _check_generate_kwargs(extra)
    encoded = [encode_prompt(lm.tokenizer, p, chat_template=config.chat_template) for p in prompts]
    limit = context_length(lm)
    for i, ids in enumerate(encoded):
        if limit is not None and len(ids) + config.max_new_tokens > limit:
            # Past its last position a model fails deep inside torch (IndexError); say why instead.
            raise ValueError(f"prompt {i} is {len(ids):,} tokens and max_new_tokens is {config.max_new_tokens:,}, "
                             f"but the model reads at most {limit:,} tokens, prompt and answer together")
    traces: list[Trace] = []
    for start in range(0, len(prompts), batch_size):
        chunk = range(start, min(start + batch_size, len(prompts)))
        traces.extend(_generate_batch(lm, [prompts[i] for i in chunk], [encoded[i] for i in chunk], config, extra,
                                      seed_offset=start))
        if progress is not None:
            progress(len(traces), len(prompts))
    return traces


def _generation_config(lm: LoadedModel, config: DecodingConfig, extra: Mapping[str, Any]) -> Any:
    gen = copy.deepcopy(lm.model.generation_config)
    settings: dict[str, Any] = dict(max_new_tokens=config.max_new_tokens, do_sample=config.do_sample, num_beams=1,
                                    repetition_penalty=config.repetition_penalty,
                                    pad_token_id=_pad_id(lm.model, lm.tokenizer),
                                    return_dict_in_generate=True)
    if config.do_sample:
        settings.update(temperature=config.temperature, top_k=config.top_k, top_p=config.top_p)
    else:
        # Greedy: clear sampling settings a model's generation_config may carry, so generate() does not warn.
        settings.update(temperature=None, top_k=None, top_p=None)
    settings.update(extra)
    gen.update(**settings)
    return gen


def _generate_batch(lm: LoadedModel, prompts: list[str], encoded: list[list[int]], config: DecodingConfig,
                    extra: Mapping[str, Any], *, seed_offset: int) -> list[Trace]:
    torch = _torch()
    from transformers import LogitsProcessorList

    model, tokenizer = lm.model, lm.tokenizer
    device = lm.device
    pad_id = _pad_id(model, tokenizer)
    width = max(len(ids) for ids in encoded)
    input_ids = torch.full((len(encoded), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, ids in enumerate(encoded):  # left padding: the answer starts at the same column for every row
        input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, width - len(ids):] = 1
    gen_config = _generation_config(lm, config, extra)
    recorder = _TraceRecorder(config.n_alternatives, greedy=not config.do_sample)
    with lm.lock, torch.no_grad():
        if config.seed is not None:
            torch.manual_seed(config.seed + seed_offset)
        out = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                             generation_config=gen_config,
                             logits_processor=LogitsProcessorList([_make_logits_processor(recorder)]))
    sequences = out.sequences[:, width:]
    n_steps = sequences.shape[1]
    arrays = recorder.finish(sequences)
    entropy, chosen_lp, rank = arrays["entropy"], arrays["chosen_lp"], arrays["rank"]
    top_lp, top_ids = arrays["top_lp"], arrays["top_ids"]
    seq = sequences.cpu().numpy()
    eos = _eos_ids(model, tokenizer)
    processed = _is_processed(gen_config)
    traces = []
    for row, prompt in enumerate(prompts):
        ids = seq[row]
        stops = np.flatnonzero(np.isin(ids, list(eos))) if eos else np.zeros(0, dtype=np.int64)
        length = int(stops[0]) if stops.size else n_steps
        finish = "eos" if stops.size else "length"
        token_ids = ids[:length]
        pieces = token_pieces(tokenizer, token_ids)
        metadata = TraceMetadata(
            model_id=lm.model_id, source="generate", decoding=config.to_dict(), processed=processed,
            entropy_source="full_vocabulary", tokenizer=str(getattr(tokenizer, "name_or_path", "")),
            chat_template=config.chat_template,
            extra={"finish_reason": finish, "prompt_tokens": len(encoded[row])})
        traces.append(Trace(
            prompt=prompt, answer="".join(pieces), token_ids=token_ids, tokens=tuple(pieces),
            surprisal=np.maximum(-chosen_lp[row, :length].astype(np.float64), 0.0),
            entropy=np.maximum(entropy[row, :length].astype(np.float64), 0.0),
            top_ids=top_ids[row, :length], top_logprobs=np.minimum(top_lp[row, :length].astype(np.float64), 0.0),
            ranks=rank[row, :length], metadata=metadata))
    return traces


# ----------------------------------------------------------------------------------------------------------------
# Beam search (inputs of the beam baselines)


def beam_logprobs(lm: LoadedModel, prompts: Sequence[str], *, num_beams: int = 5, max_new_tokens: int = 64,
                  chat_template: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> list[list[float]]:
    """Log-probabilities of the ``num_beams`` beams of one beam-search call per prompt, most likely first.

    This is the one extra (near-single-pass) call the beam baselines need; it never changes the traced answer. A beam's
    log-probability is the sum of its tokens' log-probabilities (no length penalty), EOS included when a beam ends.
    """
    lm = _check_lm(lm)
    prompts = _check_prompts(prompts)
    if isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams < 2:
        raise ValueError(f"`num_beams` must be an int >= 2, got {num_beams!r}")
    torch = _torch()
    results: list[list[float]] = []
    for i, prompt in enumerate(prompts):
        ids = torch.tensor([encode_prompt(lm.tokenizer, prompt, chat_template=chat_template)], device=lm.device)
        gen = copy.deepcopy(lm.model.generation_config)
        gen.update(max_new_tokens=max_new_tokens, num_beams=num_beams, num_return_sequences=num_beams,
                   do_sample=False, length_penalty=0.0, early_stopping=True, output_scores=True,
                   return_dict_in_generate=True, pad_token_id=_pad_id(lm.model, lm.tokenizer),
                   temperature=None, top_k=None, top_p=None)
        with lm.lock, torch.no_grad():
            out = lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gen)
        results.append(sorted(out.sequences_scores.float().cpu().tolist(), reverse=True))
        if progress is not None:
            progress(i + 1, len(prompts))
    return results


# ----------------------------------------------------------------------------------------------------------------
# Teacher forcing


def score_answer(lm: LoadedModel, prompt: str, answer: str | Sequence[int], *, chat_template: bool = False,
                 n_alternatives: int = 5, max_logits_bytes: int = 256 * 2**20) -> Trace:
    """Trace of an existing answer by teacher forcing. See :func:`score_answers`."""
    if not isinstance(prompt, str):
        raise TypeError(f"`prompt` must be a str, got {type(prompt).__name__}")
    return score_answers(lm, [prompt], [answer], chat_template=chat_template, n_alternatives=n_alternatives,
                         batch_size=1, max_logits_bytes=max_logits_bytes)[0]


def score_answers(lm: LoadedModel, prompts: Sequence[str], answers: Sequence[str | Sequence[int]], *,
                  chat_template: bool = False, n_alternatives: int = 5, batch_size: int = 8,
                  max_logits_bytes: int = 256 * 2**20,
                  progress: Callable[[int, int], None] | None = None) -> list[Trace]:
    """Record the traces of existing (prompt, answer) pairs by teacher forcing.

    The prompt and answer tokens go through the model once (answers of similar length are batched together, right
    padded). Long inputs are fed in chunks with the key/value cache, so the float32 logits held at once stay under
    ``max_logits_bytes`` whatever the answer length.

    Parameters
    ----------
    answers : sequence of str or of token-id sequences
        A string is tokenized on its own (no special tokens added). Pass the token ids to score exactly the tokens
        a model generated (e.g. ``trace.token_ids``), since re-tokenizing text can split it differently.
    n_alternatives : int
        k, the top alternatives stored per token.
    progress : callable(done, total), optional
        Called after each batch; raise from it to cancel.

    Returns
    -------
    list of Trace, in the order of the inputs.
    """
    lm = _check_lm(lm)
    prompts = _check_prompts(prompts)
    if isinstance(answers, str):
        raise TypeError("`answers` must be a list; use score_answer for one answer")
    answers = list(answers)
    if len(answers) != len(prompts):
        raise ValueError(f"got {len(prompts)} prompts but {len(answers)} answers")
    _check_batch_size(batch_size)
    if isinstance(n_alternatives, bool) or not isinstance(n_alternatives, int) or n_alternatives < 0:
        raise ValueError(f"`n_alternatives` must be an int >= 0, got {n_alternatives!r}")
    if not isinstance(max_logits_bytes, int) or max_logits_bytes < 1:
        raise ValueError(f"`max_logits_bytes` must be a positive int, got {max_logits_bytes!r}")
    tokenizer = lm.tokenizer
    prompt_ids = [encode_prompt(tokenizer, p, chat_template=chat_template) for p in prompts]
    answer_ids: list[list[int]] = []
    for i, answer in enumerate(answers):
        if isinstance(answer, str):
            answer_ids.append(list(tokenizer(answer, add_special_tokens=False)["input_ids"]))
        else:
            try:
                answer_ids.append([int(t) for t in answer])
            except (TypeError, ValueError) as exc:
                raise TypeError(f"`answers[{i}]` must be a str or a sequence of token ids") from exc
    limit = context_length(lm)
    for i, (p, a) in enumerate(zip(prompt_ids, answer_ids)):
        if limit is not None and len(p) + len(a) > limit:
            raise ValueError(f"answer {i}: prompt and answer are {len(p) + len(a):,} tokens, but the model reads at "
                             f"most {limit:,}")
    order = sorted(range(len(prompts)), key=lambda i: len(prompt_ids[i]) + len(answer_ids[i]))
    results: dict[int, Trace] = {}
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        batch = _score_batch(lm, [prompt_ids[i] for i in rows], [answer_ids[i] for i in rows], n_alternatives,
                             max_logits_bytes)
        for i, (ids, surprisal, entropy, top_lp, top_ids, rank) in zip(rows, batch):
            pieces = token_pieces(tokenizer, ids)
            metadata = TraceMetadata(
                model_id=lm.model_id, source="teacher_forced", decoding={}, processed=False,
                entropy_source="full_vocabulary", tokenizer=str(getattr(tokenizer, "name_or_path", "")),
                chat_template=chat_template, extra={"prompt_tokens": len(prompt_ids[i])})
            results[i] = Trace(prompt=prompts[i], answer="".join(pieces), token_ids=ids, tokens=tuple(pieces),
                               surprisal=np.maximum(surprisal, 0.0), entropy=np.maximum(entropy, 0.0),
                               top_ids=top_ids, top_logprobs=np.minimum(top_lp, 0.0), ranks=rank, metadata=metadata)
        if progress is not None:
            progress(len(results), len(prompts))
    return [results[i] for i in range(len(prompts))]


def _score_batch(lm: LoadedModel, prompt_ids: list[list[int]], answer_ids: list[list[int]], k: int,
                 max_logits_bytes: int) -> list[tuple]:
    torch = _torch()
    model = lm.model
    device = lm.device
    pad_id = _pad_id(model, lm.tokenizer)
    seqs = [p + a for p, a in zip(prompt_ids, answer_ids)]
    n, width = len(seqs), max(len(s) for s in seqs)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    # predicts[r, j] is True where position j's logits predict an answer token (the token at j + 1).
    predicts = torch.zeros((n, width), dtype=torch.bool)
    for row, (p, s) in enumerate(zip(prompt_ids, seqs)):  # right padding: causal attention never sees the pads
        input_ids[row, :len(s)] = torch.tensor(s, dtype=torch.long)
        attention_mask[row, :len(s)] = 1
        predicts[row, len(p) - 1:len(s) - 1] = True
    targets = torch.cat([input_ids[:, 1:], torch.full((n, 1), pad_id, dtype=torch.long)], dim=1)
    vocab = lm.vocab_size
    chunk = max(1, min(width, max_logits_bytes // (4 * n * vocab)))
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    chunks: list[tuple[np.ndarray, ...]] = []
    with lm.lock, torch.no_grad():
        if chunk >= width:
            cache = None
        else:
            from transformers import DynamicCache

            cache = DynamicCache(config=model.config)
            # transformers 5.2x renamed the forward argument `past_key_values` to `cache`.
            cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        # Most models can skip the vocabulary projection at positions nobody reads (prompt, padding): with long
        # prompts that projection is most of the work.
        keep_arg = "logits_to_keep" in inspect.signature(model.forward).parameters
        for start in range(0, width, chunk):
            stop = min(start + chunk, width)
            need = predicts[:, start:stop]
            extra: dict[str, Any] = {}
            kept = need.any(dim=0).nonzero(as_tuple=True)[0]
            if keep_arg and need.any():
                extra["logits_to_keep"] = kept.to(device)
            if cache is None:
                logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **extra).logits
            else:
                logits = model(input_ids=input_ids[:, start:stop], attention_mask=attention_mask[:, :stop],
                               use_cache=True, **{cache_arg: cache}, **extra).logits
            if not need.any():
                continue
            rows, cols = need.nonzero(as_tuple=True)
            if "logits_to_keep" in extra:  # logits hold the kept positions only, in order
                position = torch.full((stop - start,), -1, dtype=torch.long)
                position[kept] = torch.arange(kept.shape[0])
                at = position[cols]
            else:
                at = cols
            chosen = targets[:, start:stop][rows, cols]
            # Statistics in blocks of about 4 MiB of float32 rows: the half-dozen passes over the vocabulary then
            # stay in cache instead of streaming a (tokens x V) tensor from memory each time.
            block = max(1, _STATS_BLOCK_BYTES // (4 * vocab))
            for b in range(0, rows.shape[0], block):
                r, a = rows[b:b + block].to(logits.device), at[b:b + block].to(logits.device)
                # The gathered block is a copy, so it can be overwritten.
                entropy, top_lp, top_ids, chosen_lp, rank = _stats_in_place(
                    logits[r, a].float(), k, chosen[b:b + block].to(logits.device))
                chunks.append(tuple(t.cpu().numpy() for t in (rows[b:b + block], chosen_lp, entropy, top_lp,
                                                               top_ids, rank)))
            del logits
    # Chunks are in position order and rows ascend within each chunk: a stable sort by row gives each row's tokens
    # in position order.
    if not chunks:  # every answer is empty
        return [(ids, np.zeros(0), np.zeros(0), np.zeros((0, k)), np.zeros((0, k), dtype=np.int64),
                 np.zeros(0, dtype=np.int64)) for ids in answer_ids]
    rows, chosen_lp, entropy, top_lp, top_ids, rank = (np.concatenate(col) for col in zip(*chunks))
    counts = [len(a) for a in answer_ids]
    order = np.argsort(rows, kind="stable")
    splits = np.cumsum(counts)[:-1]
    columns = [np.split(a[order], splits) for a in (chosen_lp, entropy, top_lp, top_ids, rank)]
    return [(answer_ids[r], -columns[0][r].astype(np.float64), columns[1][r].astype(np.float64),
             columns[2][r].astype(np.float64), columns[3][r].astype(np.int64), columns[4][r].astype(np.int64))
            for r in range(n)]
