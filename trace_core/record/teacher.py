"""Teacher forcing: the trace of an existing answer, without generating it again."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from trace_core.checks import check_bool, check_int
from trace_core.record.backends import backend_of
from trace_core.record.build import build_trace
from trace_core.record.load import LoadedModel
from trace_core.record.remote import ServerModel
from trace_core.record.tokens import check_prompts, encode_prompt
from trace_core.traces.table import TraceTable
from trace_core.traces.trace import Trace

__all__ = ["score_answer", "score_answers"]

_DEFAULT_MAX_LOGITS_BYTES = 256 * 2**20


def score_answer(lm: LoadedModel | ServerModel, prompt: str, answer: str | Sequence[int], *,
                 chat_template: bool = False, n_alternatives: int = 5,
                 max_logits_bytes: int = _DEFAULT_MAX_LOGITS_BYTES) -> Trace:
    """Trace of an existing answer by teacher forcing. See :func:`score_answers`.

    Examples
    --------
    >>> trace = score_answer(lm, "The capital of France is", " Paris")  # doctest: +SKIP
    >>> float(trace.surprisal.sum())  # -log P(answer | prompt)  # doctest: +SKIP
    """
    if not isinstance(prompt, str):
        raise TypeError(f"`prompt` must be a str, got {type(prompt).__name__}")
    return score_answers(lm, [prompt], [answer], chat_template=chat_template, n_alternatives=n_alternatives,
                         batch_size=1, max_logits_bytes=max_logits_bytes)[0]


def score_answers(lm: LoadedModel | ServerModel, prompts: Sequence[str], answers: Sequence[str | Sequence[int]], *,
                  chat_template: bool = False, n_alternatives: int = 5, batch_size: int = 8,
                  max_logits_bytes: int = _DEFAULT_MAX_LOGITS_BYTES,
                  progress: Callable[[int, int], None] | None = None) -> TraceTable:
    """Record the traces of existing (prompt, answer) pairs by teacher forcing.

    The prompt and answer tokens go through the model once (answers of similar length are batched together, right
    padded). Long inputs are fed in chunks with the key/value cache, so the float32 logits held at once stay under
    ``max_logits_bytes`` whatever the answer length. For the same model, prompt and tokens the numbers equal those
    recorded by :func:`~trace_core.record.generate_traces`.

    Parameters
    ----------
    lm : LoadedModel or ServerModel
        A model from :func:`~trace_core.record.load_model` or :func:`~trace_core.record.connect_server`, as for
        :func:`~trace_core.record.generate_traces`.
    prompts : sequence of str
    answers : sequence of str or of token-id sequences
        A string is tokenized on its own (no special tokens added). Pass the token ids to score exactly the tokens
        a model generated (e.g. ``trace.token_ids``), since re-tokenizing text can split it differently.
    chat_template : bool, default False
        Encode each prompt with the chat template, as generation with ``DecodingConfig(chat_template=True)`` does.
    n_alternatives : int, default 5
        k, the top alternatives stored per token.
    batch_size : int, default 8
        Answers per forward pass; a model server takes one request per answer, ``concurrency`` at once, so it bounds
        the requests in flight too.
    max_logits_bytes : int, default 256 MiB
        Bound on the float32 logits held at once.
    progress : callable(done, total), optional
        Called after each batch; raise from it to cancel.

    Returns
    -------
    TraceTable
        In the order of the inputs (``table[i]`` is answer i's :class:`~trace_core.traces.trace.Trace`; the table goes
        wherever a list of traces goes); ``metadata.source == "teacher_forced"``. An empty answer gives an empty
        trace.

    Raises
    ------
    ValueError
        A prompt and its answer together do not fit the model's context, or the counts differ.

    Examples
    --------
    >>> traces = score_answers(lm, ["Q: 2 + 2 =", "Q: 3 + 4 ="], [" 4", " 8"], n_alternatives=3)  # doctest: +SKIP
    >>> [t.metadata.source for t in traces]  # doctest: +SKIP
    ['teacher_forced', 'teacher_forced']
    """
    backend = backend_of(lm)
    prompts = check_prompts(prompts)
    if isinstance(answers, str):
        raise TypeError("`answers` must be a list; use score_answer for one answer")
    answers = list(answers)
    if len(answers) != len(prompts):
        raise ValueError(f"got {len(prompts)} prompts but {len(answers)} answers")
    chat_template = check_bool(chat_template, "chat_template")
    n_alternatives = check_int(n_alternatives, "n_alternatives", minimum=0)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    max_logits_bytes = check_int(max_logits_bytes, "max_logits_bytes", minimum=1)
    tokenizer = backend.tokenizer
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
    vocab = backend.vocab_size
    for i, ids in enumerate(answer_ids):  # an id outside the vocabulary would fail deep inside the model
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"`answers[{i}]` has token id {bad[0]}, outside the model's vocabulary (0 to {vocab - 1})")
    limit = backend.context_length()
    for i, (p, a) in enumerate(zip(prompt_ids, answer_ids, strict=True)):
        if limit is not None and len(p) + len(a) > limit:
            raise ValueError(f"answer {i}: prompt and answer are {len(p) + len(a):,} tokens, but the model reads at "
                             f"most {limit:,}")
    # Similar lengths share a batch, so that padding stays small.
    order = sorted(range(len(prompts)), key=lambda i: len(prompt_ids[i]) + len(answer_ids[i]))
    results: dict[int, Trace] = {}
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        recorded = backend.score([prompt_ids[i] for i in rows], [answer_ids[i] for i in rows],
                                 n_alternatives=n_alternatives, max_logits_bytes=max_logits_bytes)
        for i, recorded_answer in zip(rows, recorded, strict=True):
            results[i] = build_trace(backend, prompts[i], recorded_answer, source="teacher_forced", decoding={},
                                     chat_template=chat_template, prompt_tokens=len(prompt_ids[i]))
        if progress is not None:
            progress(len(results), len(prompts))
    return TraceTable.from_traces([results[i] for i in range(len(prompts))])
