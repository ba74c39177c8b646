"""From a backend's raw arrays to a :class:`~trace_core.traces.trace.Trace`: one builder for generation and teacher
forcing.

Sharing it keeps the two sources of traces alike in everything but ``metadata.source``: the same token pieces, the
same dtypes, the same clipping of rounding noise and the same metadata fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from trace_core.record.backends import Backend, RecordedAnswer
from trace_core.record.backends.completions import ServerBackend
from trace_core.record.http_policy import ServerError
from trace_core.record.tokens import alternative_pieces, token_pieces
from trace_core.traces.columns import check_trace
from trace_core.traces.trace import Trace, TraceMetadata


def build_trace(backend: Backend, prompt: str, recorded: RecordedAnswer, *, source: str,
                decoding: Mapping[str, Any], chat_template: bool, prompt_tokens: int) -> Trace:
    """The Trace of one recorded answer.

    Parameters
    ----------
    backend : Backend
        Gives the model id and the tokenizer (for the token pieces and ``metadata.tokenizer``).
    prompt : str
        The prompt as the user wrote it.
    recorded : RecordedAnswer
        The backend's arrays for the answer.
    source : {"generate", "teacher_forced"}
        ``metadata.source``.
    decoding : mapping
        ``DecodingConfig.to_dict()`` for generation, ``{}`` for teacher forcing.
    chat_template : bool
        Whether the prompt was wrapped in the chat template.
    prompt_tokens : int
        Length of the encoded prompt, kept in ``metadata.extra``; so is ``vocab_size`` (V, the backend's
        distribution size), which bounds the entropy (at most log V) when the trace is read back from a table, and
        whatever a backend adds in ``recorded.extra`` (a server's URL, API and per-token entropy bounds).

    Returns
    -------
    Trace
        ``surprisal = max(-log p, 0)``, ``entropy = max(H, 0)`` (None when the backend has none) and
        ``top_logprobs = min(log p, 0)`` in float64: float32 rounding can put a certain token's log-probability a
        hair above 0. ``metadata.entropy_source``/``entropy_k`` are the backend's (``"exact"`` for a local model).
        ``top_tokens`` holds the alternatives' text: the backend's when it gives it, else decoded from ``top_ids``
        with the tokenizer now (:func:`~trace_core.record.tokens.alternative_pieces`), so that the trace reads the
        same whichever tokenizer is loaded later.
    """
    tokenizer = backend.tokenizer
    pieces = token_pieces(tokenizer, recorded.token_ids)
    extra: dict[str, Any] = {}
    if recorded.finish_reason is not None:
        extra["finish_reason"] = recorded.finish_reason
    extra["prompt_tokens"] = prompt_tokens
    extra["vocab_size"] = int(backend.vocab_size)
    extra.update(recorded.extra)  # a server backend's details (URL, entropy bounds)
    metadata = TraceMetadata(
        model_id=backend.model_id, source=source, decoding=dict(decoding), processed=recorded.processed,
        entropy_source=recorded.entropy_source, entropy_k=recorded.entropy_k,
        tokenizer=str(getattr(tokenizer, "name_or_path", "")), chat_template=chat_template, extra=extra,
        model_digest=str(getattr(backend, "model_digest", "") or ""))
    entropy = None if recorded.entropy is None else np.maximum(recorded.entropy.astype(np.float64), 0.0)
    trace = Trace(
        prompt=prompt, answer="".join(pieces), token_ids=recorded.token_ids, tokens=tuple(pieces),
        surprisal=np.maximum(-recorded.chosen_logprobs.astype(np.float64), 0.0),
        entropy=entropy,
        top_ids=recorded.top_ids, top_logprobs=np.minimum(recorded.top_logprobs.astype(np.float64), 0.0),
        ranks=recorded.ranks, metadata=metadata, top_tokens=_top_tokens(tokenizer, recorded))
    if isinstance(backend, ServerBackend):  # a server's numbers: what the dataset readers would refuse is refused
        try:
            check_trace(trace)
        except ValueError as exc:
            raise ServerError(f"the server's numbers for this answer are impossible: {exc}") from None
    return trace


def _top_tokens(tokenizer: Any, recorded: RecordedAnswer) -> tuple[tuple[str, ...], ...]:
    if recorded.top_tokens is not None:  # a backend that knows the texts (a server returning them)
        return tuple(tuple(row) for row in recorded.top_tokens)
    return alternative_pieces(tokenizer, recorded.top_ids)
