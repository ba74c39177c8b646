"""One answer's decoding trace: the per-token record that every TRACE score is computed from."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trace_core.checks import check_bool, check_choice, check_int, check_real, set_checked

__all__ = ["ENTROPY_SOURCES", "LEGACY_ENTROPY_SOURCES", "LOGPROB_TOLERANCE", "DecodingConfig", "Trace", "TraceMetadata"]

#: How far a log-probability may lie above 0 (or a surprisal or an entropy below 0) and still be accepted: rounding in
#: a float32 log-softmax puts a near-certain token a little above 0 (about 1e-7, more for large logits). The one slack
#: for every sign check, in Trace and in the dataset reader, so that a value the reader accepts is never refused by
#: Trace (with two slacks, a top-k log-prob of 5e-6 was accepted by one and refused by the other).
LOGPROB_TOLERANCE = 1e-5

#: Where a trace's entropy comes from (``TraceMetadata.entropy_source``): the full distribution, an estimate from the
#: top-k log-probabilities, or nowhere (only the chosen token's log-probability is known).
ENTROPY_SOURCES = ("exact", "top_k", "absent")
#: Values written by earlier versions, still read: the meaning is unchanged, only the name.
LEGACY_ENTROPY_SOURCES = {"full_vocabulary": "exact", "top_k_approximation": "top_k"}
_TRACE_SOURCES = ("generate", "teacher_forced", "imported")
#: The most new tokens one answer may ask for (beyond any model's context: a larger number is a typo).
MAX_NEW_TOKENS = 1_048_576
#: The most alternatives stored per token (servers give at most 20; a local model's k is stored per token).
MAX_ALTERNATIVES = 1_000


@dataclass(frozen=True)
class DecodingConfig:
    """Decoding settings for traced generation (serialisable to JSON).

    Parameters
    ----------
    max_new_tokens : int
        Upper bound on generated tokens, 1 to :data:`MAX_NEW_TOKENS`.
    do_sample : bool
        Sample from the (warped) distribution instead of greedy argmax.
    temperature, top_k, top_p : float, int, float
        Sampling warpers. They change which token is *drawn*, never what is *recorded*: the trace always holds the
        model's distribution before these warpers. ``top_k=0`` and ``top_p=1.0`` mean "off".
    repetition_penalty : float
        1.0 is off. Any other value changes the recorded distribution (``TraceMetadata.processed`` is then True).
    seed : int or None
        Seed for sampling, 0 to 2**63 - 1; None leaves torch's global generator alone.
    n_alternatives : int
        How many top alternatives (ids and log-probs) to store per token, k in the (T, k) arrays; 0 to
        :data:`MAX_ALTERNATIVES`.
    chat_template : bool
        Wrap the prompt with the tokenizer's chat template (when it has one).
    """

    max_new_tokens: int = 64
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    n_alternatives: int = 5
    chat_template: bool = False

    def __post_init__(self) -> None:
        checked = {
            "max_new_tokens": check_int(self.max_new_tokens, "max_new_tokens", minimum=1,
                                        maximum=MAX_NEW_TOKENS),
            "do_sample": check_bool(self.do_sample, "do_sample"),
            "temperature": check_real(self.temperature, "temperature", minimum=0.0, low_open=True),
            "top_k": check_int(self.top_k, "top_k", minimum=0, maximum=2**31 - 1),
            "top_p": check_real(self.top_p, "top_p", minimum=0.0, maximum=1.0, low_open=True),
            "repetition_penalty": check_real(self.repetition_penalty, "repetition_penalty", minimum=0.0,
                                             low_open=True),
            "seed": None if self.seed is None else check_int(self.seed, "seed", minimum=0, maximum=2**63 - 1),
            "n_alternatives": check_int(self.n_alternatives, "n_alternatives", minimum=0,
                                        maximum=MAX_ALTERNATIVES),
            "chat_template": check_bool(self.chat_template, "chat_template"),
        }
        set_checked(self, checked)  # numpy scalars become Python ones, so to_dict() is JSON-ready

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DecodingConfig:
        return _from_known_fields(cls, data, "decoding settings")


@dataclass(frozen=True)
class TraceMetadata:
    """Where a trace came from, so that scores are only compared between like traces.

    Attributes
    ----------
    model_id : str
        The model's name or local path as given to ``load_model``.
    source : {"generate", "teacher_forced", "imported"}
        Recorded during generation, by one teacher-forced pass over an existing answer, or imported from elsewhere.
    decoding : dict
        ``DecodingConfig.to_dict()`` for generated traces, empty otherwise.
    processed : bool
        True when logits processors that reshape the distribution (repetition penalty, forced or suppressed tokens,
        minimum length) ran before recording; the trace is then of that processed distribution. Sampling warpers
        (temperature, top-k, top-p) never count: they run after recording.
    entropy_source : {"exact", "top_k", "absent"}
        ``"exact"``: entropy over the whole vocabulary (a local model, a server returning every log-probability).
        ``"top_k"``: estimated from the top-k log-probabilities (most APIs). ``"absent"``: only the chosen token's
        log-probability is known (many saved runs); the trace then has ``entropy=None``. The names of earlier
        versions are read too (:data:`LEGACY_ENTROPY_SOURCES`: ``"full_vocabulary"`` -> ``"exact"``,
        ``"top_k_approximation"`` -> ``"top_k"``).
    entropy_k : int or None
        k of a ``"top_k"`` estimate (>= 1); None when unknown or for the other sources. A :class:`Trace` fills it
        from its top-k width when it is None.
    tokenizer : str
        Tokenizer name or path.
    chat_template : bool
        Whether the prompt was wrapped with the tokenizer's chat template.
    extra : dict
        Free-form JSON-serialisable details.
    model_digest : str
        A digest of the model's content (``sha256:`` and 16 hex digits; see
        :func:`trace_core.record.load.model_digest`), the same whatever path or name loaded it; "" when unknown (a
        server's model, traces of earlier versions). Traces are of the same model when their digests are equal.
    """

    model_id: str = ""
    source: str = "generate"
    decoding: Mapping[str, Any] = field(default_factory=dict)
    processed: bool = False
    entropy_source: str = "exact"
    tokenizer: str = ""
    chat_template: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)
    entropy_k: int | None = None
    model_digest: str = ""

    def __post_init__(self) -> None:
        check_choice(self.source, "source", _TRACE_SOURCES)
        source = self.entropy_source
        if isinstance(source, str) and source in LEGACY_ENTROPY_SOURCES:  # saved by an earlier version
            source = LEGACY_ENTROPY_SOURCES[source]
        check_choice(source, "entropy_source", ENTROPY_SOURCES)
        k = None if self.entropy_k is None else check_int(self.entropy_k, "entropy_k", minimum=1)
        if k is not None and source != "top_k":
            raise ValueError(f"`entropy_k` is {k} but `entropy_source` is {source!r}; k belongs to a 'top_k' "
                             f"estimate only (leave it None)")
        if not isinstance(self.model_digest, str) or len(self.model_digest) > 100:
            raise ValueError("`model_digest` must be text of at most 100 characters (sha256: and hex digits), got "
                             f"{type(self.model_digest).__name__}")
        set_checked(self, {"processed": check_bool(self.processed, "processed"),
                           "chat_template": check_bool(self.chat_template, "chat_template"),
                           "decoding": dict(self.decoding), "extra": dict(self.extra),
                           "entropy_source": source, "entropy_k": k})

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (dict(v) if isinstance(v := getattr(self, f.name), Mapping) else v)
                for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TraceMetadata:
        return _from_known_fields(cls, data, "metadata fields")


@dataclass(frozen=True, eq=False)
class Trace:
    """One answer's per-token decoding trace.

    All per-token arrays have length T (the number of answer tokens, EOS excluded); they are stored read-only.

    Attributes
    ----------
    prompt : str
        The prompt as given (before any chat template).
    answer : str
        The answer text. Not checked against ``tokens``: a recorded trace (``trace_core.record``) stores
        ``"".join(tokens)``, the tokenizer's decoding of ``token_ids`` (for teacher forcing this can differ from the
        text that was passed in, when the tokenizer does not round-trip it); an imported trace keeps the text as given
        (the API response's text, or the dataset's ``answer`` column), which may differ from ``"".join(tokens)``.
    token_ids : ndarray of int64, shape (T,)
    tokens : tuple of str, length T
        Each token's text as it appears in the answer. Byte-level pieces that split a multi-byte character are
        joined onto the token that completes it (the others are ""), so that concatenation gives the decoded text.
    surprisal : ndarray of float64, shape (T,)
        ``s_t = -log P(y_t | x, y_<t)`` in nats, >= 0.
    entropy : ndarray of float64, shape (T,), or None
        ``H_t = -sum_v P(v | .) log P(v | .)`` in nats, >= 0: exact, or a top-k estimate (see
        ``metadata.entropy_source``). None exactly when ``metadata.entropy_source == "absent"`` (only the chosen
        token's log-probability is known); :attr:`has_entropy` says which.
    top_ids : ndarray of int64, shape (T, k)
        The k most likely tokens at each step, most likely first (k may be 0).
    top_logprobs : ndarray of float64, shape (T, k)
        Their log-probabilities, non-increasing along each row.
    ranks : ndarray of int64, shape (T,), or None
        1-based rank of the chosen token in the distribution (1 = the argmax); None when unknown.
    metadata : TraceMetadata
    top_tokens : tuple of tuple of str, shape (T, k), or None
        The alternatives' text: stored by the recorder (each as it would read in the answer had it been chosen) and
        by the API-response importers (whose ``top_ids`` may be -1). None for traces from files without the column;
        their alternatives are then known by id only. Not counted in :attr:`nbytes` (texts are shared per id).
    """

    prompt: str
    answer: str
    token_ids: np.ndarray
    tokens: tuple[str, ...]
    surprisal: np.ndarray
    entropy: np.ndarray | None
    top_ids: np.ndarray
    top_logprobs: np.ndarray
    ranks: np.ndarray | None = None
    metadata: TraceMetadata = field(default_factory=TraceMetadata)
    top_tokens: tuple[tuple[str, ...], ...] | None = None

    def __post_init__(self) -> None:
        for name in ("prompt", "answer"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"`{name}` must be a str, got {type(getattr(self, name)).__name__}")
        if not isinstance(self.metadata, TraceMetadata):
            raise TypeError(f"`metadata` must be a TraceMetadata, got {type(self.metadata).__name__}")
        token_ids, tokens = _checked_tokens(self.token_ids, self.tokens)
        n_tokens = token_ids.shape[0]
        surprisal = _as_array(self.surprisal, "surprisal", np.float64, ndim=1, length=n_tokens)
        _check_finite_nonneg(surprisal, "surprisal")
        entropy = _checked_entropy(self.entropy, self.metadata, n_tokens)
        top_ids, top_logprobs = _checked_top_k(self.top_ids, self.top_logprobs, n_tokens)
        ranks = None
        if self.ranks is not None:
            ranks = _as_array(self.ranks, "ranks", np.int64, ndim=1, length=n_tokens)
            if (ranks < 1).any():
                raise ValueError(f"`ranks` are 1-based, got a minimum of {int(ranks.min())}")
        top_tokens = None if self.top_tokens is None else _checked_top_tokens(self.top_tokens, top_ids.shape)
        metadata = self.metadata
        if metadata.entropy_source == "top_k" and metadata.entropy_k is None and top_ids.shape[1] > 0:
            metadata = dataclasses.replace(metadata, entropy_k=int(top_ids.shape[1]))  # k is the stored width
        for name, value in (("token_ids", token_ids), ("tokens", tokens), ("surprisal", surprisal),
                            ("entropy", entropy), ("top_ids", top_ids), ("top_logprobs", top_logprobs),
                            ("ranks", ranks), ("top_tokens", top_tokens), ("metadata", metadata)):
            if isinstance(value, np.ndarray):
                value.setflags(write=False)
            object.__setattr__(self, name, value)

    @classmethod
    def from_checked(cls, *, prompt: str, answer: str, token_ids: np.ndarray, tokens: tuple[str, ...],
                      surprisal: np.ndarray, entropy: np.ndarray | None, top_ids: np.ndarray,
                      top_logprobs: np.ndarray, ranks: np.ndarray | None, metadata: TraceMetadata,
                      top_tokens: tuple[tuple[str, ...], ...] | None) -> Trace:
        """A Trace from parts whose values a reader has already checked as ``__post_init__`` would (the CSV fast path
        checks whole chunks at once): only the checks that cost nothing per token are made again (types, dtypes,
        shapes, the metadata's entropy source); anything they refuse goes through the full constructor, which raises
        or normalises exactly as for any other trace. The arrays are kept as given (not copied) and made read-only.
        """
        plain = cls._plain_parts(prompt=prompt, answer=answer, token_ids=token_ids, tokens=tokens,
                                 surprisal=surprisal, entropy=entropy, top_ids=top_ids, top_logprobs=top_logprobs,
                                 ranks=ranks, metadata=metadata, top_tokens=top_tokens)
        if not plain:
            return cls(prompt=prompt, answer=answer, token_ids=token_ids, tokens=tokens, surprisal=surprisal,
                       entropy=entropy, top_ids=top_ids, top_logprobs=top_logprobs, ranks=ranks, metadata=metadata,
                       top_tokens=top_tokens)
        trace = object.__new__(cls)
        for name, value in (("prompt", prompt), ("answer", answer), ("token_ids", token_ids), ("tokens", tokens),
                            ("surprisal", surprisal), ("entropy", entropy), ("top_ids", top_ids),
                            ("top_logprobs", top_logprobs), ("ranks", ranks), ("metadata", metadata),
                            ("top_tokens", top_tokens)):
            if isinstance(value, np.ndarray):
                value.setflags(write=False)
            object.__setattr__(trace, name, value)
        return trace

    @staticmethod
    def _plain_parts(*, prompt: Any, answer: Any, token_ids: Any, tokens: Any, surprisal: Any, entropy: Any,
                     top_ids: Any, top_logprobs: Any, ranks: Any, metadata: Any, top_tokens: Any) -> bool:
        """Whether checked parts are already exactly what ``__post_init__`` would keep (types, dtypes, shapes, the
        metadata's entropy source), so that they may be used as they are (:meth:`from_checked`, and the readers'
        rows that go into a :class:`~trace_core.traces.table.TraceTable` without a Trace)."""
        n = len(tokens)
        shape = (n, top_ids.shape[1]) if isinstance(top_ids, np.ndarray) and top_ids.ndim == 2 else None
        return (isinstance(prompt, str) and isinstance(answer, str) and isinstance(metadata, TraceMetadata)
                and type(tokens) is tuple and _is(token_ids, np.int64, (n,)) and _is(surprisal, np.float64, (n,))
                and shape is not None and _is(top_ids, np.int64, shape) and _is(top_logprobs, np.float64, shape)
                and (ranks is None or _is(ranks, np.int64, (n,)))
                and (entropy is None) == (metadata.entropy_source == "absent")
                and (entropy is None or _is(entropy, np.float64, (n,)))
                and not (metadata.entropy_source == "top_k" and metadata.entropy_k is None and shape[1] > 0)
                and (top_tokens is None or (type(top_tokens) is tuple and len(top_tokens) == n)))

    def __len__(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def n_alternatives(self) -> int:
        """k, the number of stored alternatives per token."""
        return int(self.top_ids.shape[1])

    @property
    def has_entropy(self) -> bool:
        """Whether the trace has per-token entropy (False exactly when ``metadata.entropy_source == "absent"``)."""
        return self.entropy is not None

    @property
    def nbytes(self) -> int:
        """Bytes held by the trace's arrays (token ids, surprisal, entropy when present, top-k, ranks).

        The memory figure of a trace; token texts and metadata are not counted.
        """
        arrays = (self.token_ids, self.surprisal, self.entropy, self.top_ids, self.top_logprobs, self.ranks)
        return int(sum(a.nbytes for a in arrays if a is not None))

    @property
    def token_probs(self) -> np.ndarray:
        """``p_t = exp(-s_t)``, shape (T,)."""
        return np.exp(-self.surprisal)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        if (self.prompt, self.answer, self.tokens, self.metadata, self.top_tokens) != (
                other.prompt, other.answer, other.tokens, other.metadata, other.top_tokens):
            return False
        if (self.ranks is None) != (other.ranks is None) or (self.entropy is None) != (other.entropy is None):
            return False
        pairs = [(self.token_ids, other.token_ids), (self.surprisal, other.surprisal),
                 (self.top_ids, other.top_ids), (self.top_logprobs, other.top_logprobs)]
        for a, b in ((self.ranks, other.ranks), (self.entropy, other.entropy)):
            if a is not None and b is not None:  # both or neither, checked above
                pairs.append((a, b))
        return all(a.shape == b.shape and np.array_equal(a, b) for a, b in pairs)

    __hash__ = None  # type: ignore[assignment]  # mutable-looking arrays: not hashable, like numpy arrays

    def to_dict(self) -> dict[str, Any]:
        """Plain Python types only (lists, floats, ints, str), JSON-serialisable and lossless.

        ``entropy`` is None for a trace without entropy (``entropy_source == "absent"``).
        """
        return {
            "prompt": self.prompt,
            "answer": self.answer,
            "token_ids": self.token_ids.tolist(),
            "tokens": list(self.tokens),
            "surprisal": self.surprisal.tolist(),
            "entropy": None if self.entropy is None else self.entropy.tolist(),
            "top_ids": self.top_ids.tolist(),
            "top_logprobs": self.top_logprobs.tolist(),
            "ranks": None if self.ranks is None else self.ranks.tolist(),
            "metadata": self.metadata.to_dict(),
            "top_tokens": None if self.top_tokens is None else [list(row) for row in self.top_tokens],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trace:
        required = ("prompt", "answer", "token_ids", "tokens", "surprisal", "entropy")
        missing = [k for k in required if k not in data]
        if missing:
            raise ValueError(f"trace dict is missing {missing}")
        known = set(required) | {"top_ids", "top_logprobs", "ranks", "metadata", "top_tokens"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown trace fields {unknown}")
        n_tokens = len(data["token_ids"])
        return cls(
            prompt=data["prompt"],
            answer=data["answer"],
            token_ids=data["token_ids"],
            tokens=tuple(data["tokens"]),
            surprisal=data["surprisal"],
            entropy=data["entropy"],
            top_ids=_list2d(data.get("top_ids"), n_tokens, np.int64),
            top_logprobs=_list2d(data.get("top_logprobs"), n_tokens, np.float64),
            ranks=data.get("ranks"),
            metadata=TraceMetadata.from_dict(data.get("metadata") or {}),
            top_tokens=data.get("top_tokens"),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Trace:
        return cls.from_dict(json.loads(text))


def _from_known_fields(cls: type, data: Mapping[str, Any], what: str) -> Any:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown {what} {unknown}; expected some of {sorted(known)}")
    return cls(**dict(data))


def _list2d(value: Any, n_rows: int, dtype: type) -> np.ndarray:
    if value is None:
        return np.zeros((n_rows, 0), dtype=dtype)
    arr: np.ndarray = np.asarray(value, dtype=dtype)
    if arr.size == 0:
        return arr.reshape(n_rows, 0)
    return arr


def _is(arr: Any, dtype: type, shape: tuple[int, ...]) -> bool:
    return isinstance(arr, np.ndarray) and arr.dtype == dtype and arr.shape == shape


def _as_array(value: Any, name: str, dtype: type, *, ndim: int, length: int | None = None,
              empty_shape: tuple[int, ...] | None = None) -> np.ndarray:
    try:
        arr: np.ndarray = np.array(value, dtype=dtype, copy=True)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"`{name}` must be an array of {np.dtype(dtype).name}, got {type(value).__name__}: "
                        f"{exc}") from exc
    if arr.size == 0 and empty_shape is not None:
        arr = arr.reshape(empty_shape)
    if arr.ndim != ndim:
        raise ValueError(f"`{name}` must be {ndim}-D, got shape {arr.shape}")
    if length is not None and arr.shape[0] != length:
        raise ValueError(f"`{name}` has {arr.shape[0]} rows but the trace has {length} tokens")
    if arr.dtype.kind in "iu":
        original = np.asarray(value)
        if original.size and original.dtype.kind == "f" and not np.array_equal(original, np.round(original)):
            raise ValueError(f"`{name}` must hold integers, got non-integral values")
    return arr


def _check_finite_nonneg(arr: np.ndarray, name: str) -> None:
    if not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"`{name}` must be finite, got {arr[bad]} at token {bad}")
    # A float32 log-softmax can give -1e-7 for a certain token; beyond LOGPROB_TOLERANCE it is a bug upstream.
    if (arr < -LOGPROB_TOLERANCE).any():
        bad = int(np.flatnonzero(arr < -LOGPROB_TOLERANCE)[0])
        raise ValueError(f"`{name}` must be >= 0 (nats), got {arr[bad]} at token {bad}")


def _checked_tokens(token_ids: Any, tokens: Any) -> tuple[np.ndarray, tuple[str, ...]]:
    """The token ids as an int64 vector and the token texts as a tuple of as many strings."""
    ids = _as_array(token_ids, "token_ids", np.int64, ndim=1)
    texts = tuple(tokens)
    if len(texts) != ids.shape[0]:
        raise ValueError(f"`tokens` has {len(texts)} entries but `token_ids` has {ids.shape[0]}")
    if not set(map(type, texts)) <= {str}:  # one C-level pass; the loop below only finds the culprit
        for i, tok in enumerate(texts):
            if not isinstance(tok, str):
                raise TypeError(f"`tokens[{i}]` must be a str, got {type(tok).__name__}")
    return ids, texts


def _checked_entropy(entropy: Any, metadata: TraceMetadata, n_tokens: int) -> np.ndarray | None:
    """The entropy vector, present exactly when the metadata says where it comes from."""
    if entropy is None:
        if metadata.entropy_source != "absent":
            raise ValueError(f"`entropy` is None but `metadata.entropy_source` is {metadata.entropy_source!r}; "
                             f"a trace without entropy says entropy_source='absent'")
        return None
    if metadata.entropy_source == "absent":
        raise ValueError("`metadata.entropy_source` is 'absent' but `entropy` was given; give entropy=None "
                         "or say where the entropy comes from ('exact' or 'top_k')")
    out = _as_array(entropy, "entropy", np.float64, ndim=1, length=n_tokens)
    _check_finite_nonneg(out, "entropy")
    return out


def _checked_top_k(top_ids: Any, top_logprobs: Any, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-k ids and log-probabilities, both (T, k), the log-probabilities at most 0 (within the tolerance)."""
    ids = _as_array(top_ids, "top_ids", np.int64, ndim=2, length=n_tokens, empty_shape=(n_tokens, 0))
    logprobs = _as_array(top_logprobs, "top_logprobs", np.float64, ndim=2, length=n_tokens,
                         empty_shape=(n_tokens, 0))
    if ids.shape != logprobs.shape:
        raise ValueError(f"`top_ids` has shape {ids.shape} but `top_logprobs` has shape {logprobs.shape}")
    if logprobs.size and (np.isnan(logprobs).any() or (logprobs > LOGPROB_TOLERANCE).any()):
        raise ValueError("`top_logprobs` must be log-probabilities (<= 0, not NaN)")
    return ids, logprobs


def _checked_top_tokens(top_tokens: Any, shape: tuple[int, ...]) -> tuple[tuple[str, ...], ...]:
    """The alternatives' texts as a tuple of tuples of strings, shaped like ``top_ids``."""
    out = tuple(tuple(row) for row in top_tokens)
    if len(out) != shape[0] or any(len(row) != shape[1] for row in out):
        raise ValueError(f"`top_tokens` must have shape {shape} like `top_ids`")
    if not all(isinstance(tok, str) for row in out for tok in row):
        raise TypeError("`top_tokens` must hold strings")
    return out
