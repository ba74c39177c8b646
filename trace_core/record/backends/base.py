"""What a model backend provides: the seam between the public recording functions and what runs the model.

:func:`trace_core.record.generate_traces`, :func:`~trace_core.record.score_answers`,
:func:`~trace_core.record.beam_logprobs` and :func:`~trace_core.record.context_length` validate their arguments,
tokenize, check the context and build the :class:`~trace_core.traces.trace.Trace` objects themselves; a backend only
turns token ids into per-token arrays (:class:`RecordedAnswer`). The Hugging Face backend (:mod:`.hf`) runs a local
model; another backend (a model server) implements the same :class:`Backend` protocol and is picked by
:func:`trace_core.record.backends.backend_of`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from trace_core.traces.trace import DecodingConfig

__all__ = ["Backend", "RecordedAnswer"]


@dataclass(frozen=True)
class RecordedAnswer:
    """The raw per-token arrays a backend records for one answer of T tokens with k alternatives.

    Attributes
    ----------
    token_ids : ndarray of int, shape (T,)
        The answer's tokens (for generation: stopped before the end-of-answer token).
    chosen_logprobs : ndarray of float, shape (T,)
        ``log p(y_t | x, y_<t)`` of each answer token.
    entropy : ndarray of float, shape (T,), or None
        Entropy of each step's distribution, in nats; None when the backend cannot know it (a server returning only
        the chosen token's log-probability; ``entropy_source`` is then ``"absent"``).
    top_logprobs, top_ids : ndarray, shape (T, k)
        The k most likely tokens of each step, most likely first.
    ranks : ndarray of int, shape (T,)
        1-based rank of each answer token in its step's distribution.
    processed : bool, default False
        The recorded distribution was changed by logits processing (e.g. a repetition penalty).
    finish_reason : str or None, default None
        Why generation stopped ("eos" or "length"); None for teacher forcing.
    entropy_source : {"exact", "top_k", "absent"}, default "exact"
        Where the entropy comes from (``TraceMetadata.entropy_source``): a local model computes it over the whole
        vocabulary (``"exact"``).
    entropy_k : int or None, default None
        k of a ``"top_k"`` estimate (``TraceMetadata.entropy_k``).
    top_tokens : tuple of tuple of str, shape (T, k), or None, default None
        The alternatives' text, for a backend that knows it (a server returning token texts, whose ids may be -1);
        None lets the trace builder decode ``top_ids`` with the tokenizer
        (:func:`~trace_core.record.tokens.alternative_pieces`).
    extra : mapping, default {}
        Details for the trace's ``metadata.extra`` (a server's API, URL, log-probability mode, per-token entropy
        bounds); JSON values only.

    Small rounding outside the valid ranges (a log-probability of +1e-7) is clipped when the Trace is built.
    """

    token_ids: np.ndarray
    chosen_logprobs: np.ndarray
    entropy: np.ndarray | None
    top_logprobs: np.ndarray
    top_ids: np.ndarray
    ranks: np.ndarray
    processed: bool = False
    finish_reason: str | None = None
    entropy_source: str = "exact"
    entropy_k: int | None = None
    top_tokens: tuple[tuple[str, ...], ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    """What generation, teacher forcing and beam search need from whatever runs the model.

    Arguments arrive validated (types, ranges, context length) and tokenized; a backend raises only for what it
    alone can judge (e.g. :meth:`check_generate_options`).

    Attributes
    ----------
    model_id : str
        Recorded in every trace's metadata.
    model_digest : str, optional
        The model's content digest (:func:`trace_core.record.load.model_digest`), recorded in every trace's metadata;
        absent or "" when unknown (a server's model).
    tokenizer : Hugging Face-compatible tokenizer
        Used to encode prompts and answers and to decode token pieces (:mod:`trace_core.record.tokens`), so every
        backend sees exactly the same token ids.
    applies_chat_template : bool, optional
        True for a backend that generates from the prompts' text and applies the chat template itself (a server's
        chat endpoint): :meth:`generate` then also gets ``prompts=``, and the prompt ids it gets only estimate the
        prompt's length. Absent means False.
    """

    model_id: str
    tokenizer: Any

    @property
    def vocab_size(self) -> int:
        """V, the size of the distribution over next tokens."""
        ...

    def context_length(self) -> int | None:
        """Tokens the model reads, prompt and answer together; None when the model does not say."""
        ...

    def check_generate_options(self, options: Mapping[str, Any]) -> None:
        """Raise ValueError for extra generation options this backend cannot trace (called once per request)."""
        ...

    def generate(self, prompt_ids: Sequence[list[int]], config: DecodingConfig, options: Mapping[str, Any], *,
                 seed_offset: int) -> list[RecordedAnswer]:
        """Generate one answer per prompt and record it, in the order given.

        ``seed_offset`` is added to ``config.seed`` so that each batch of a request draws differently yet
        reproducibly. A backend with ``applies_chat_template`` also takes ``prompts`` (keyword): the prompts' text,
        aligned with ``prompt_ids``.
        """
        ...

    def score(self, prompt_ids: Sequence[list[int]], answer_ids: Sequence[list[int]], *, n_alternatives: int,
              max_logits_bytes: int) -> list[RecordedAnswer]:
        """Record existing answers by teacher forcing, in the order given (answers may be empty).

        ``max_logits_bytes`` bounds the float32 logits held at once, whatever the answer length.
        """
        ...

    def beam_logprobs(self, prompt_ids: list[int], *, num_beams: int, max_new_tokens: int) -> list[float]:
        """Sequence log-probabilities of the ``num_beams`` beams of one beam search, most likely first."""
        ...
