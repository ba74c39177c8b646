"""Traced generation: generate answers and record each answer's trace in the same pass."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trace_core.checks import AnswerValueError, check_int
from trace_core.record.backends import Backend, RecordedAnswer, backend_of
from trace_core.record.build import build_trace
from trace_core.record.load import LoadedModel
from trace_core.record.remote import ServerModel
from trace_core.record.tokens import check_prompts, encode_prompt
from trace_core.traces.table import TraceTable
from trace_core.traces.trace import DecodingConfig, Trace

__all__ = ["GenerationJob", "generate_trace", "generate_traces", "prepare_generation"]


def generate_trace(lm: LoadedModel | ServerModel, prompt: str, *, config: DecodingConfig = DecodingConfig(),
                   generate_kwargs: Mapping[str, Any] | None = None) -> Trace:
    """Generate an answer to one prompt and record its trace. See :func:`generate_traces`.

    Examples
    --------
    >>> config = DecodingConfig(max_new_tokens=8)
    >>> trace = generate_trace(lm, "Q: What is 12 plus 7? A:", config=config)  # doctest: +SKIP
    >>> trace.surprisal.shape == (len(trace),)  # doctest: +SKIP
    True
    """
    if not isinstance(prompt, str):
        raise TypeError(f"`prompt` must be a str, got {type(prompt).__name__}")
    return generate_traces(lm, [prompt], config=config, generate_kwargs=generate_kwargs)[0]


def generate_traces(lm: LoadedModel | ServerModel, prompts: Sequence[str], *, config: DecodingConfig = DecodingConfig(),
                    batch_size: int = 8, generate_kwargs: Mapping[str, Any] | None = None,
                    progress: Callable[[int, int], None] | None = None) -> TraceTable:
    """Generate answers and record each answer's trace in the same pass.

    For each step t the trace keeps the chosen token's surprisal ``s_t = -log p_t(y_t)``, the entropy
    ``H_t = -sum_v p_t(v) log p_t(v)`` over the whole vocabulary, the top ``k = config.n_alternatives`` alternatives
    and the chosen token's rank: O(T * k) numbers per answer, never the T x V logits.

    Parameters
    ----------
    lm : LoadedModel or ServerModel
        From :func:`~trace_core.record.load_model`, or a model server from :func:`~trace_core.record.connect_server`
        (one request per answer, ``concurrency`` at once, so ``batch_size`` bounds the requests in flight too).
    prompts : sequence of str
    config : DecodingConfig
        Greedy (default) or sampled decoding; the trace is of the distribution before temperature/top-k/top-p.
        A server connected with ``api="chat"`` applies its own chat template whatever ``config.chat_template``
        says (see :func:`~trace_core.record.connect_server`).
    batch_size : int, default 8
        Prompts per ``generate`` call (left-padded).
    generate_kwargs : mapping, optional
        Extra ``generate`` options. Beam search, assisted decoding and other multi-sequence methods are refused.
    progress : callable(done, total), optional
        Called after each batch; raise from it to cancel.

    Returns
    -------
    TraceTable
        One answer per prompt, in order (``table[i]`` is its :class:`~trace_core.traces.trace.Trace`; the table goes
        wherever a list of traces goes); the answer stops before the first EOS token (EOS is not part of the
        trace), and ``metadata.extra["finish_reason"]`` says "eos" or "length".

    Raises
    ------
    ValueError
        A prompt plus ``config.max_new_tokens`` does not fit the model's context (an
        :class:`~trace_core.evaluation.run.AnswerValueError` with the prompt's 0-based position), a prompt is empty
        after tokenization, or ``generate_kwargs`` asks for a multi-sequence decoding method.

    Examples
    --------
    >>> traces = generate_traces(lm, ["The capital of France is", "2 + 2 ="],  # doctest: +SKIP
    ...                          config=DecodingConfig(max_new_tokens=16, n_alternatives=3))
    >>> traces[0].top_logprobs.shape  # doctest: +SKIP
    (16, 3)
    """
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    job = prepare_generation(lm, prompts, config, generate_kwargs)
    traces: list[Trace] = []
    for start in range(0, len(job.prompts), batch_size):
        rows = range(start, min(start + batch_size, len(job.prompts)))
        text = {"prompts": [job.prompts[i] for i in rows]} if job.server_template else {}
        recorded = job.backend.generate([job.encoded[i] for i in rows], config, job.options, seed_offset=start,
                                        **text)
        traces.extend(job.trace(i, answer) for i, answer in zip(rows, recorded, strict=True))
        if progress is not None:
            progress(len(traces), len(job.prompts))
    return TraceTable.from_traces(traces)


@dataclass(frozen=True)
class GenerationJob:
    """Checked prompts, encoded, with what building their traces needs (shared by generation and streaming)."""

    backend: Backend
    prompts: list[str]
    encoded: list[list[int]]
    options: dict[str, Any]
    server_template: bool
    config: DecodingConfig

    def trace(self, i: int, answer: RecordedAnswer) -> Trace:
        """The trace of prompt ``i``'s recorded answer."""
        return build_trace(self.backend, self.prompts[i], answer, source="generate", decoding=self.config.to_dict(),
                           chat_template=self.config.chat_template or self.server_template,
                           prompt_tokens=len(self.encoded[i]))


def prepare_generation(lm: LoadedModel | ServerModel, prompts: Sequence[str], config: DecodingConfig,
                       generate_kwargs: Mapping[str, Any] | None) -> GenerationJob:
    """Validate, tokenize and check every prompt against the model's context (the errors of generate_traces)."""
    backend = backend_of(lm)
    prompts = check_prompts(prompts)
    if not isinstance(config, DecodingConfig):
        raise TypeError(f"`config` must be a DecodingConfig, got {type(config).__name__}")
    options = dict(generate_kwargs or {})
    backend.check_generate_options(options)
    # A backend that applies the chat template itself (a server's chat endpoint) gets the prompts' text; the ids
    # encoded here (with the local chat template when the tokenizer has one) then only estimate the prompt's length.
    server_template = bool(getattr(backend, "applies_chat_template", False))
    chat_template = (bool(getattr(backend.tokenizer, "chat_template", None)) if server_template
                     else config.chat_template)
    encoded = [encode_prompt(backend.tokenizer, p, chat_template=chat_template) for p in prompts]
    limit = backend.context_length()
    for i, ids in enumerate(encoded):
        if limit is not None and len(ids) + config.max_new_tokens > limit:
            # Past its last position a model fails deep inside torch (IndexError); say why instead.
            size = f"about {len(ids):,} tokens (estimated locally)" if server_template else f"{len(ids):,} tokens"
            # AnswerValueError: a caller that knows the prompts' file rows names the row (the command line does)
            raise AnswerValueError(i, f"cannot be generated: its prompt is {size} and `max_new_tokens` is "
                                      f"{config.max_new_tokens:,}, but the model reads at most {limit:,} tokens, "
                                      "prompt and answer together")
    return GenerationJob(backend=backend, prompts=prompts, encoded=encoded, options=options,
                         server_template=server_template, config=config)
