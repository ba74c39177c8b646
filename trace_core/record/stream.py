"""Streamed generation: the trace of one answer as the model writes it, token by token."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from trace_core.checks import check_real
from trace_core.record.generate import prepare_generation
from trace_core.record.load import LoadedModel
from trace_core.record.remote import ServerModel
from trace_core.traces.trace import DecodingConfig, Trace

__all__ = ["stream_trace"]


def stream_trace(lm: LoadedModel | ServerModel, prompt: str, *, config: DecodingConfig = DecodingConfig(),
                 generate_kwargs: Mapping[str, Any] | None = None, stop: threading.Event | None = None,
                 min_interval: float = 0.0) -> Iterator[Trace]:
    """Generate an answer to one prompt and yield its trace as it grows; the last trace is the finished one.

    Every trace before the last holds the answer so far (its tokens with their surprisal, entropy, alternatives and
    ranks) and ``metadata.extra["finish_reason"] == "stopped"``: what the answer is if the caller stops there. When
    the caller is slower than the model, the tokens that arrived meanwhile come in one trace (never one trace per
    token behind). The last trace is :func:`~trace_core.record.generate_trace`'s with the same arguments: the same
    tokens, token ids, surprisal, entropy, alternatives, ranks and metadata, for greedy and for seeded sampling.

    * A local model runs ``generate`` on a worker thread with a streamer and a stopping criterion. Closing the
      iterator (``close()``, leaving a ``for`` loop with ``break``, an exception in the caller, garbage collection)
      stops generation after the current step and waits for the worker: no thread goes on generating.
    * A model server is asked with ``"stream": true`` (server-sent events, ``data: {...}`` lines ending with
      ``data: [DONE]``) and each chunk's log-probabilities are read as the non-streamed answer's are, under the same
      rules: the answer's size capped by what was asked (the whole stream and each line), one deadline of
      ``timeout`` seconds for the whole exchange, no redirect followed, the API key never shown. Closing the iterator
      closes the connection. A server that answers with one JSON body instead of a stream (it ignores
      ``stream``) gives one trace, the finished one: that is the fallback, so nothing is lost where streaming is not
      available.

    Parameters
    ----------
    lm : LoadedModel or ServerModel
    prompt : str
    config : DecodingConfig
        As for :func:`~trace_core.record.generate_traces`.
    generate_kwargs : mapping, optional
        Extra ``generate`` options (a local model only), as for :func:`~trace_core.record.generate_traces`.
    stop : threading.Event, optional
        Set it (from any thread) to end generation after the current step and still get a last, finished trace,
        whose ``finish_reason`` is "stopped" unless the answer ended on its own at that step. A local model stops
        after its current step; a server's connection is closed at the next chunk read.

    min_interval : float, default 0
        At most one partial trace per ``min_interval`` seconds (the tokens in between come with the next one): a
        dashboard that redraws ten times a second passes 0.1. Building a trace costs time in its length, so an
        answer of thousands of tokens read with 0 pays that cost for every token. A model server's tokens that
        arrive within the interval wait for its next chunk.

    Yields
    ------
    Trace
        The answer so far, then the finished answer (``finish_reason`` "eos", "length" or, after ``stop``,
        "stopped"). An answer the model ends at once yields one empty trace.

    Raises
    ------
    ValueError, TypeError
        As :func:`~trace_core.record.generate_trace`, before anything is yielded.
    ServerError
        The server failed, refused, or sent a stream that cannot be read (a malformed line, too many bytes, a stream
        that does not end within the deadline); the message names what was wrong.

    Examples
    --------
    >>> for trace in stream_trace(lm, "The capital of France is",  # doctest: +SKIP
    ...                           config=DecodingConfig(max_new_tokens=8)):
    ...     print(len(trace), trace.metadata.extra["finish_reason"])
    1 stopped
    2 stopped
    8 length
    """
    if not isinstance(prompt, str):
        raise TypeError(f"`prompt` must be a str, got {type(prompt).__name__}")
    if stop is not None and not isinstance(stop, threading.Event):
        raise TypeError(f"`stop` must be a threading.Event, got {type(stop).__name__}")
    min_interval = check_real(min_interval, "min_interval", minimum=0.0, maximum=3600.0)
    job = prepare_generation(lm, [prompt], config, generate_kwargs)  # errors are raised here, before the first next()
    return _streamed(job, stop if stop is not None else threading.Event(), min_interval)


def _streamed(job: Any, stop: threading.Event, min_interval: float) -> Iterator[Trace]:
    backend = job.backend
    text = {"prompt": job.prompts[0]} if job.server_template else {}
    stream = getattr(backend, "stream", None)
    if stream is None:  # a backend that cannot stream: one call, one trace
        yield job.trace(0, backend.generate([job.encoded[0]], job.config, job.options, seed_offset=0,
                                            **({"prompts": [text["prompt"]]} if text else {}))[0])
        return
    answers = stream(job.encoded[0], job.config, job.options, stop=stop, min_interval=min_interval, **text)
    try:
        for answer in answers:
            yield job.trace(0, answer)
    finally:
        answers.close()
