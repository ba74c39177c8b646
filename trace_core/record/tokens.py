"""Tokens: the prompt as the model sees it, each answer token's text, and how many tokens the model reads.

Encoding and decoding work on any Hugging Face-compatible tokenizer, whatever backend runs the model, so every
backend sees the same token ids.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from trace_core.checks import check_bool, check_strings
from trace_core.record.backends import backend_of

__all__ = ["alternative_pieces", "check_prompts", "context_length", "encode_prompt", "token_pieces"]


def encode_prompt(tokenizer: Any, prompt: str, *, chat_template: bool = False) -> list[int]:
    """Token ids of the prompt as the model sees it (with the chat template when asked).

    Parameters
    ----------
    tokenizer : Hugging Face tokenizer
        ``LoadedModel.tokenizer`` (or ``ServerModel.tokenizer``).
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


def token_pieces(tokenizer: Any, ids: Sequence[int] | np.ndarray) -> list[str]:
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
    if all(p.startswith(q) and "\ufffd" not in p for p, q in zip(pairs, prefixes, strict=True)):
        pieces = [p[len(q):] for p, q in zip(pairs, prefixes, strict=True)]
        if "".join(pieces) == full:
            return pieces
    return _token_pieces_incremental(tokenizer, ids, full)


def alternative_pieces(tokenizer: Any, top_ids: Any) -> tuple[tuple[str, ...], ...]:
    """The text of an answer's top-k alternatives, decoded by the rule :func:`token_pieces` uses for the answer.

    An alternative's text is the piece it would have added to the answer had it been chosen at that step: at the
    first step the id is decoded alone (as the answer's first token is), at later steps after an ordinary token (as
    every later answer token is decoded after the token before it). So an alternative that is the chosen token has
    exactly the chosen token's piece, also with SentencePiece-style tokenizers, whose decoders drop the leading space
    of a text's first token (decoded alone, "▁Paris" and "Paris" would both read "Paris").

    Each id is decoded on its own (``skip_special_tokens=False``, ``clean_up_tokenization_spaces=False``), never
    merged with its neighbours. A byte-level piece that is not valid UTF-8 by itself (part of a multi-byte character)
    therefore reads with U+FFFD where its bytes are incomplete, as the tokenizer's own lossy decoding gives it (the
    answer's pieces instead move such a character onto the token that completes it, which needs the next token); a
    tokenizer that raises on such bytes gives "\ufffd". Special tokens are kept as text, an id the tokenizer does
    not know (a model vocabulary padded past the tokenizer's) reads as the tokenizer decodes it (usually ""), and a
    negative id (no token) reads "".

    Texts are cached per tokenizer (at most two per vocabulary entry, decoded lazily, only for ids met), so
    recording pays one batched decode for the ids it has not seen before and a dictionary lookup for the others;
    equal texts are the same string object across traces.

    Parameters
    ----------
    tokenizer : Hugging Face tokenizer
    top_ids : array-like of int, shape (T, k)
        An answer's alternatives, row 0 being its first token's.

    Returns
    -------
    tuple of tuple of str, shape (T, k)

    Examples
    --------
    >>> alternative_pieces(lm.tokenizer, trace.top_ids)  # doctest: +SKIP
    ((' Paris', ' Lyon'), ('.', ','))
    """
    ids = np.asarray(top_ids, dtype=np.int64)
    if ids.ndim != 2:
        raise ValueError(f"`top_ids` must be 2-D (T, k), got shape {ids.shape}")
    if ids.shape[0] == 0:
        return ()
    texts = _texts_of(tokenizer)
    first = texts.lookup(ids[:1], after=False)
    later = texts.lookup(ids[1:], after=True) if ids.shape[0] > 1 else ()
    return first + later


class _TokenTexts:
    """One tokenizer's decoded token texts: ``alone[id]`` (a text's first token) and ``after[id]`` (any later one)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = weakref.proxy(tokenizer) if _weakrefable(tokenizer) else tokenizer
        self.size = _size(tokenizer)
        self.alone: dict[int, str] = {}
        self.after: dict[int, str] = {}
        self.anchor = _anchor(tokenizer)

    def lookup(self, ids: np.ndarray, *, after: bool) -> tuple[tuple[str, ...], ...]:
        cache = self.after if after and self.anchor is not None else self.alone
        missing = [i for i in np.unique(ids).tolist() if i not in cache]
        if missing:  # one batched decode of the ids never met before
            cache.update(zip(missing, self._decode(missing, after=cache is self.after), strict=True))
        get = cache.__getitem__
        return tuple(tuple(map(get, row)) for row in ids.tolist())

    def _decode(self, ids: list[int], *, after: bool) -> list[str]:
        valid = [i for i in ids if i >= 0]
        if not after:
            decoded = _decode_each(self.tokenizer, [[i] for i in valid])
        else:
            anchor_id, anchor_text = self.anchor  # type: ignore[misc]
            with_anchor = _decode_each(self.tokenizer, [[anchor_id, i] for i in valid])
            alone = None
            decoded = []
            for i, text in zip(valid, with_anchor, strict=True):
                if text.startswith(anchor_text):
                    decoded.append(text[len(anchor_text):])
                else:  # the decoder merged the id into the anchor: fall back to the id alone
                    if alone is None:
                        alone = dict(zip(valid, _decode_each(self.tokenizer, [[v] for v in valid]), strict=True))
                    decoded.append(alone[i])
        by_id = dict(zip(valid, decoded, strict=True))
        return [by_id.get(i, "") for i in ids]


# Keyed by the tokenizer object (weakly: the texts go when the tokenizer goes); a tokenizer that cannot be weakly
# referenced gets a fresh cache per call. The lock only guards creating an entry; filling one is idempotent.
_CACHE: weakref.WeakKeyDictionary[Any, _TokenTexts] = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()


def _texts_of(tokenizer: Any) -> _TokenTexts:
    try:
        with _CACHE_LOCK:
            texts = _CACHE.get(tokenizer)
            if texts is None or texts.size != _size(tokenizer):  # tokens were added: start again
                texts = _CACHE[tokenizer] = _TokenTexts(tokenizer)
            return texts
    except TypeError:  # not hashable or not weakly referenceable
        return _TokenTexts(tokenizer)


def _weakrefable(obj: Any) -> bool:
    try:
        weakref.ref(obj)
    except TypeError:
        return False
    return True


def _size(tokenizer: Any) -> int | None:
    try:
        return len(tokenizer)
    except TypeError:
        return None


def _anchor(tokenizer: Any) -> tuple[int, str] | None:
    """An ordinary token to decode alternatives after, and its text; None when the tokenizer offers none."""
    special = set(getattr(tokenizer, "all_special_ids", None) or ())
    for text in ("a", "x", "0", "."):
        try:
            ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        except Exception:  # noqa: BLE001 - a tokenizer that cannot encode: alternatives are decoded alone
            return None
        for i in reversed(ids):  # the last id is the letter itself (SentencePiece puts "▁" first)
            decoded = _decode_each(tokenizer, [[i]])[0]
            if i not in special and decoded and "\ufffd" not in decoded:
                return int(i), decoded
    return None


def _decode_each(tokenizer: Any, batches: list[list[int]]) -> list[str]:
    """``tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)`` for each list."""
    if not batches:
        return []
    backend = getattr(tokenizer, "backend_tokenizer", None)
    try:
        if backend is not None:  # one call into the Rust tokenizer, as in token_pieces
            return list(backend.decode_batch(batches, skip_special_tokens=False))
        return list(tokenizer.batch_decode(batches, skip_special_tokens=False, clean_up_tokenization_spaces=False))
    except Exception:  # noqa: BLE001 - one bad id (strict UTF-8 errors, unknown id): find it, keep the rest
        return [_decode_one(tokenizer, ids) for ids in batches]


def _decode_one(tokenizer: Any, ids: list[int]) -> str:
    try:
        return _decode(tokenizer, ids)
    except (UnicodeDecodeError, ValueError, TypeError, IndexError, KeyError, OverflowError):
        return "\ufffd"


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
    lm : LoadedModel or ServerModel

    Returns
    -------
    int or None
        For a Hugging Face model, its config's ``max_position_embeddings``; for a model server, the
        ``max_model_len`` it lists (vLLM).

    Examples
    --------
    >>> context_length(lm)  # doctest: +SKIP
    512
    """
    return backend_of(lm).context_length()


def check_prompts(prompts: Any, name: str = "prompts") -> list[str]:
    """``prompts`` as a list of str; a bare str is refused (it would be read as one prompt per character)."""
    if isinstance(prompts, str):
        raise TypeError(f"`{name}` must be a list of strings; use the singular function for one prompt")
    return check_strings(prompts, name)
