"""Tokens: the prompt as the model sees it, each answer token's text, and how many tokens the model reads.

Encoding and decoding work on any Hugging Face-compatible tokenizer, whatever backend runs the model, so every
backend sees the same token ids.
"""

from __future__ import annotations

from typing import Any, Sequence

from .._checks import check_bool
from .backends import backend_of

__all__ = ["context_length", "encode_prompt", "token_pieces"]


def encode_prompt(tokenizer: Any, prompt: str, *, chat_template: bool = False) -> list[int]:
    """Token ids of the prompt as the model sees it (with the chat template when asked).

    Parameters
    ----------
    tokenizer : Hugging Face tokenizer
        ``LoadedModel.tokenizer``.
    prompt : str
        The user's text.
    chat_template : bool, default False
        Wrap the prompt as one user message with the tokenizer's chat template and add the assistant's
        generation prompt; without it the tokenizer's own special tokens (e.g. BOS) are added.

    Returns
    -------
    list of int
        At least one id.

    Raises
    ------
    ValueError
        The tokenizer has no chat template and ``chat_template`` is True, or the prompt gives no tokens.

    Examples
    --------
    >>> encode_prompt(lm.tokenizer, "The capital of France is")  # doctest: +SKIP
    [464, 3139, 286, 4881, 318]
    """
    if not isinstance(prompt, str):
        raise TypeError(f"`prompt` must be a str, got {type(prompt).__name__}")
    chat_template = check_bool(chat_template, "chat_template")
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

    Parameters
    ----------
    tokenizer : Hugging Face tokenizer
    ids : sequence of int, length T

    Returns
    -------
    list of str, length T
        The pieces; special tokens are kept as text.

    Examples
    --------
    >>> token_pieces(lm.tokenizer, trace.token_ids)  # doctest: +SKIP
    [' Paris', '.']
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


def context_length(lm: Any) -> int | None:
    """How many tokens (prompt and answer together) the model reads; None when it does not say.

    Parameters
    ----------
    lm : LoadedModel

    Returns
    -------
    int or None
        For a Hugging Face model, its config's ``max_position_embeddings``.

    Examples
    --------
    >>> context_length(lm)  # doctest: +SKIP
    512
    """
    return backend_of(lm).context_length()


def _check_prompts(prompts: Any, name: str = "prompts") -> list[str]:
    """``prompts`` as a list of str; a bare str is refused (it would be read as one prompt per character)."""
    if isinstance(prompts, str):
        raise TypeError(f"`{name}` must be a list of strings; use the singular function for one prompt")
    prompts = list(prompts)
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise TypeError(f"`{name}[{i}]` must be a str, got {type(p).__name__}")
    return prompts
