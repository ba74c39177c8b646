"""The Hugging Face backend: a local causal LM (:class:`~trace_core.record.LoadedModel`) run with torch.

* Generation runs ``model.generate`` with a ``LogitsProcessor`` that keeps O(T * k) numbers per answer (never the
  T x V logits). It sits before the sampling warpers (temperature, top-k, top-p), so it records the model's own
  distribution, and it returns the scores unchanged, so the decoded tokens are exactly those of plain ``generate``.
* Teacher forcing feeds prompt and answer through the model once, right padded, in chunks with the key/value cache
  so that memory stays bounded for long answers; for the same model and prompt it gives the same numbers as
  generation (both use :func:`~trace_core.record.stats.stats_in_place`).

torch and transformers are imported inside the methods.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from trace_core.record import stats
from trace_core.record.backends.base import RecordedAnswer
from trace_core.record.errors import torch_module
from trace_core.record.load import LoadedModel
from trace_core.record.threads import torch_threads
from trace_core.traces.trace import DecodingConfig

__all__ = ["HuggingFaceBackend", "generation_config"]

# generate() options that change the decoding algorithm away from one-token-at-a-time search.
_REFUSED_GENERATE_KWARGS = {
    "num_beams": "beam search",
    "num_beam_groups": "group beam search",
    "assistant_model": "assisted decoding",
    "prompt_lookup_num_tokens": "prompt-lookup (assisted) decoding",
    "penalty_alpha": "contrastive search",
    "dola_layers": "DoLa decoding",
    "num_return_sequences": "several sequences per prompt",
    "logits_processor": "custom logits processors",
    "generation_config": "a replacement generation config",
}

# Generation-config fields that add a logits processor *before* the recorder (it is appended after them), i.e. the
# recorded distribution is then processed, not the model's own. Value = the setting that means "off".
_PROCESSING_FIELDS = {
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "sequence_bias": None,
    "min_length": 0,
    "min_new_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "exponential_decay_length_penalty": None,
    "renormalize_logits": False,
    "guidance_scale": None,
    "watermarking_config": None,
    "remove_invalid_values": False,
}


class HuggingFaceBackend:
    """:class:`~trace_core.record.backends.base.Backend` for a :class:`LoadedModel`.

    Holds no state of its own: every call takes ``lm.lock``, so threads sharing one LoadedModel are serialised.
    """

    def __init__(self, lm: LoadedModel) -> None:
        self.lm = lm
        self.model_id = lm.model_id
        self.model_digest = lm.model_digest
        self.tokenizer = lm.tokenizer

    @property
    def vocab_size(self) -> int:
        return self.lm.vocab_size

    def context_length(self) -> int | None:
        value = getattr(getattr(self.lm.model, "config", None), "max_position_embeddings", None)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    def check_generate_options(self, options: Mapping[str, Any]) -> None:
        for key, what in _REFUSED_GENERATE_KWARGS.items():
            if key not in options:
                continue
            value = options[key]
            if key in ("num_beams", "num_beam_groups", "num_return_sequences") and value in (None, 1):
                continue
            raise ValueError(f"traced generation does not support {what} (`{key}`): the trace is defined for one "
                             "sequence decoded one token at a time. Use greedy or sampled decoding.")

    # ------------------------------------------------------------------------------------------------------------
    # Generation

    def generate(self, prompt_ids: Sequence[list[int]], config: DecodingConfig, options: Mapping[str, Any], *,
                 seed_offset: int) -> list[RecordedAnswer]:
        return self._generate(prompt_ids, config, options, seed_offset=seed_offset)

    def stream(self, prompt_ids: list[int], config: DecodingConfig, options: Mapping[str, Any], *,
               stop: threading.Event, min_interval: float = 0.0) -> Iterator[RecordedAnswer]:
        """One answer as it is generated: the answer so far after each new token (or after the tokens that arrived
        while the caller was busy; at most one per ``min_interval`` seconds), ``finish_reason="stopped"``, then the
        answer :meth:`generate` records.

        ``model.generate`` runs on a worker thread with a streamer that reads each new token's statistics from the
        recorder (:meth:`~trace_core.record.stats.TraceRecorder.step_stats`, on a copy: the recorded answer is the
        one :meth:`generate` gives) and a stopping criterion that ends generation after the current step once
        ``stop`` is set. Closing the iterator sets ``stop`` and waits for the worker to end: no thread is left
        generating. An answer ended by ``stop`` before the token limit has ``finish_reason="stopped"``.
        """
        recorder = stats.TraceRecorder(config.n_alternatives, greedy=not config.do_sample)
        events: queue.SimpleQueue = queue.SimpleQueue()  # unbounded: the worker never waits for the reader
        eos = _eos_ids(self.lm.model, self.lm.tokenizer)
        streamer, stopping = _stream_hooks(recorder, events, stop)

        def work() -> None:
            try:
                answer = self._generate([prompt_ids], config, options, seed_offset=0, recorder=recorder,
                                        streamer=streamer, stopping=stopping, stop=stop)
                events.put(("done", answer[0] if answer else None))
            except BaseException as exc:  # noqa: BLE001 - handed to the reader, who raises it
                events.put(("error", exc))

        processed = _is_processed(generation_config(self.lm, config, options))
        steps: list[tuple[int, tuple]] = []
        ended = at_eos = False
        worker = threading.Thread(target=work, name="trace-stream", daemon=True)
        worker.start()
        last, pending = -math.inf, False
        try:
            while True:
                wait = None if not pending else max(0.0, last + min_interval - time.monotonic())
                for kind, *payload in _arrived(events, wait):
                    if kind == "error":
                        raise payload[0]
                    if kind == "done":
                        ended = True
                        final = payload[0]
                        if final is None:  # stopped before the model was free: nothing generated
                            final = _partial([], config.n_alternatives, processed)
                        yield _stopped(final, stop, config)
                        return
                    token, numbers = payload
                    at_eos = at_eos or token in eos
                    if not at_eos:  # the answer stops before the first end-of-answer token
                        steps.append((token, numbers))
                        pending = True
                if pending and time.monotonic() - last >= min_interval:
                    yield _partial(steps, config.n_alternatives, processed)
                    last, pending = time.monotonic(), False
        finally:
            if not ended:
                stop.set()
            worker.join()

    def _generate(self, prompt_ids: Sequence[list[int]], config: DecodingConfig, options: Mapping[str, Any], *,
                  seed_offset: int, recorder: stats.TraceRecorder | None = None, streamer: Any = None,
                  stopping: Any = None, stop: threading.Event | None = None) -> list[RecordedAnswer]:
        torch = torch_module()
        from transformers import LogitsProcessorList

        lm = self.lm
        model, tokenizer = lm.model, lm.tokenizer
        device = lm.device
        width = max(len(ids) for ids in prompt_ids)
        input_ids = torch.full((len(prompt_ids), width), _pad_id(model, tokenizer), dtype=torch.long)
        attention_mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
        for row, ids in enumerate(prompt_ids):  # left padding: the answer starts at the same column for every row
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids):] = 1
        gen_config = generation_config(lm, config, options)
        if recorder is None:
            recorder = stats.TraceRecorder(config.n_alternatives, greedy=not config.do_sample)
        extra: dict[str, Any] = {}
        if streamer is not None:
            extra["streamer"] = streamer
        if stopping is not None:
            extra["stopping_criteria"] = stopping
        if not _acquire(lm.lock, stop):
            return []  # stopped while another caller had the model
        try:
            with torch.no_grad(), torch_threads(lm.threads):
                if config.seed is not None:
                    torch.manual_seed(config.seed + seed_offset)
                out = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                     generation_config=gen_config,
                                     logits_processor=LogitsProcessorList([_make_logits_processor(recorder)]),
                                     **extra)
        finally:
            lm.lock.release()
        sequences = out.sequences[:, width:]
        n_steps = sequences.shape[1]
        arrays = recorder.finish(sequences)
        seq = sequences.cpu().numpy()
        eos = list(_eos_ids(model, tokenizer))
        processed = _is_processed(gen_config)
        answers = []
        for row in range(len(prompt_ids)):
            # The answer stops before the first end-of-answer token (EOS is not part of the trace).
            stops = np.flatnonzero(np.isin(seq[row], eos)) if eos else np.zeros(0, dtype=np.int64)
            length = int(stops[0]) if stops.size else n_steps
            answers.append(RecordedAnswer(
                token_ids=seq[row, :length], chosen_logprobs=arrays["chosen_lp"][row, :length],
                entropy=arrays["entropy"][row, :length], top_logprobs=arrays["top_lp"][row, :length],
                top_ids=arrays["top_ids"][row, :length], ranks=arrays["rank"][row, :length], processed=processed,
                finish_reason="eos" if stops.size else "length", entropy_source="exact"))
        return answers

    # ------------------------------------------------------------------------------------------------------------
    # Teacher forcing

    def score(self, prompt_ids: Sequence[list[int]], answer_ids: Sequence[list[int]], *, n_alternatives: int,
              max_logits_bytes: int) -> list[RecordedAnswer]:
        torch = torch_module()
        lm, k = self.lm, n_alternatives
        model = lm.model
        device = lm.device
        input_ids, attention_mask, predicts, targets = _scoring_batch(prompt_ids, answer_ids,
                                                                      _pad_id(model, lm.tokenizer))
        n, width = input_ids.shape
        vocab = lm.vocab_size
        chunk = max(1, min(width, max_logits_bytes // (4 * n * vocab)))
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        chunks: list[tuple[np.ndarray, ...]] = []
        with lm.lock, torch.no_grad(), torch_threads(lm.threads):
            if chunk >= width:
                cache = None
            else:
                from transformers import DynamicCache

                cache = DynamicCache(config=model.config)
                # transformers 5.2x renamed the forward argument `past_key_values` to `cache`.
                cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
            # Most models can skip the vocabulary projection at positions nobody reads (prompt, padding): with long
            # prompts that projection is most of the work.
            keep_arg = "logits_to_keep" in inspect.signature(model.forward).parameters
            for start in range(0, width, chunk):
                stop = min(start + chunk, width)
                need = predicts[:, start:stop]
                extra: dict[str, Any] = {}
                kept = need.any(dim=0).nonzero(as_tuple=True)[0]
                if keep_arg and need.any():
                    extra["logits_to_keep"] = kept.to(device)
                if cache is None:
                    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                                   **extra).logits
                else:
                    logits = model(input_ids=input_ids[:, start:stop], attention_mask=attention_mask[:, :stop],
                                   use_cache=True, **{cache_arg: cache}, **extra).logits
                if not need.any():
                    continue
                hit_rows, cols = need.nonzero(as_tuple=True)
                if "logits_to_keep" in extra:  # logits hold the kept positions only, in order
                    position = torch.full((stop - start,), -1, dtype=torch.long)
                    position[kept] = torch.arange(kept.shape[0])
                    at = position[cols]
                else:
                    at = cols
                chosen = targets[:, start:stop][hit_rows, cols]
                block = max(1, stats.STATS_BLOCK_BYTES // (4 * vocab))
                for b in range(0, hit_rows.shape[0], block):
                    r, a = hit_rows[b:b + block].to(logits.device), at[b:b + block].to(logits.device)
                    # The gathered block is a copy, so it can be overwritten.
                    h_t, lp_t, ids_t, c_t, rank_t = stats.stats_in_place(
                        logits[r, a].float(), k, chosen[b:b + block].to(logits.device))
                    chunks.append(tuple(t.cpu().numpy() for t in (hit_rows[b:b + block], c_t, h_t, lp_t, ids_t,
                                                                   rank_t)))
                del logits
        return _scored_answers(chunks, answer_ids, k)

    # ------------------------------------------------------------------------------------------------------------
    # Beam search

    def beam_logprobs(self, prompt_ids: list[int], *, num_beams: int, max_new_tokens: int) -> list[float]:
        torch = torch_module()
        lm = self.lm
        ids = torch.tensor([prompt_ids], device=lm.device)
        gen = copy.deepcopy(lm.model.generation_config)
        gen.update(max_new_tokens=max_new_tokens, num_beams=num_beams, num_return_sequences=num_beams,
                   do_sample=False, length_penalty=0.0, early_stopping=True, output_scores=True,
                   return_dict_in_generate=True, pad_token_id=_pad_id(lm.model, lm.tokenizer),
                   temperature=None, top_k=None, top_p=None)
        with lm.lock, torch.no_grad(), torch_threads(lm.threads):
            out = lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gen)
        return sorted(out.sequences_scores.float().cpu().tolist(), reverse=True)


def generation_config(lm: LoadedModel, config: DecodingConfig, options: Mapping[str, Any]) -> Any:
    """The ``GenerationConfig`` traced generation passes to ``model.generate``.

    The model's own generation config with ``config``'s settings and the extra ``options`` applied; benchmarks use it
    to run plain ``generate`` with exactly the same settings.

    Parameters
    ----------
    lm : LoadedModel
    config : DecodingConfig
    options : mapping
        Extra ``generate`` options (``generate_kwargs``), applied last.

    Returns
    -------
    transformers.GenerationConfig
        A copy: the model's config is left as it was.
    """
    gen = copy.deepcopy(lm.model.generation_config)
    settings: dict[str, Any] = dict(max_new_tokens=config.max_new_tokens, do_sample=config.do_sample, num_beams=1,
                                    repetition_penalty=config.repetition_penalty,
                                    pad_token_id=_pad_id(lm.model, lm.tokenizer),
                                    return_dict_in_generate=True)
    if config.do_sample:
        settings.update(temperature=config.temperature, top_k=config.top_k, top_p=config.top_p)
    else:
        # Greedy: clear sampling settings a model's generation_config may carry, so generate() does not warn.
        settings.update(temperature=None, top_k=None, top_p=None)
    settings.update(options)
    gen.update(**settings)
    return gen


def _stream_hooks(recorder: stats.TraceRecorder, events: queue.SimpleQueue,
                  stop: threading.Event) -> tuple[Any, Any]:
    """What streamed generation hands ``model.generate``: a streamer that puts each new token, with its statistics
    from ``recorder``, on ``events``; and a stopping criterion that ends generation after the current step once
    ``stop`` is set."""
    from transformers import StoppingCriteria, StoppingCriteriaList
    from transformers.generation.streamers import BaseStreamer

    class _Streamer(BaseStreamer):
        seen_prompt = False
        step = 0

        def put(self, value: Any) -> None:
            if not self.seen_prompt:  # generate() hands over the prompt first
                self.seen_prompt = True
                return
            for token in value.reshape(-1)[:1].tolist():  # one sequence: one token per step
                events.put(("step", int(token), recorder.step_stats(self.step, int(token))))
                self.step += 1

        def end(self) -> None:
            pass

    class _Stop(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            torch = torch_module()
            return torch.full((input_ids.shape[0],), stop.is_set(), dtype=torch.bool, device=input_ids.device)

    return _Streamer(), StoppingCriteriaList([_Stop()])


def _arrived(events: queue.SimpleQueue, wait: float | None) -> list[tuple]:
    """The next event (waiting at most ``wait`` seconds; None: until one comes) and whatever else arrived
    meanwhile: one answer for all of it."""
    try:
        batch = [events.get(timeout=wait)]
    except queue.Empty:
        batch = []
    while True:
        try:
            batch.append(events.get_nowait())
        except queue.Empty:
            return batch


def _scoring_batch(prompt_ids: Sequence[list[int]], answer_ids: Sequence[list[int]], pad_id: int) -> tuple[Any, ...]:
    """Prompt + answer of each row, right-padded (causal attention never sees the pads): the input ids, the
    attention mask, ``predicts`` (True where position j's logits predict an answer token, the token at j + 1) and
    the targets (the token at j + 1)."""
    torch = torch_module()
    seqs = [list(p) + list(a) for p, a in zip(prompt_ids, answer_ids, strict=True)]
    n, width = len(seqs), max(len(s) for s in seqs)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    predicts = torch.zeros((n, width), dtype=torch.bool)
    for row, (p, s) in enumerate(zip(prompt_ids, seqs, strict=True)):
        input_ids[row, :len(s)] = torch.tensor(s, dtype=torch.long)
        attention_mask[row, :len(s)] = 1
        predicts[row, len(p) - 1:len(s) - 1] = True
    targets = torch.cat([input_ids[:, 1:], torch.full((n, 1), pad_id, dtype=torch.long)], dim=1)
    return input_ids, attention_mask, predicts, targets


def _scored_answers(chunks: list[tuple[np.ndarray, ...]], answer_ids: Sequence[list[int]],
                    k: int) -> list[RecordedAnswer]:
    """Each answer's arrays from the scored blocks ``(rows, chosen log-prob, entropy, top log-probs, top ids,
    rank)``, in position order; the entropy is the full distribution's."""
    if not chunks:  # every answer is empty
        empty = np.zeros(0)
        return [RecordedAnswer(token_ids=np.asarray(ids, dtype=np.int64), chosen_logprobs=empty, entropy=empty,
                               top_logprobs=np.zeros((0, k)), top_ids=np.zeros((0, k), dtype=np.int64),
                               ranks=np.zeros(0, dtype=np.int64), entropy_source="exact") for ids in answer_ids]
    # Chunks are in position order and rows ascend within each chunk: a stable sort by row gives each row's
    # tokens in position order.
    rows, chosen_lp, entropy, top_lp, top_ids, rank = (np.concatenate(col) for col in zip(*chunks, strict=True))
    order = np.argsort(rows, kind="stable")
    splits = np.cumsum([len(a) for a in answer_ids])[:-1]
    columns = [np.split(a[order], splits) for a in (chosen_lp, entropy, top_lp, top_ids, rank)]
    return [RecordedAnswer(token_ids=np.asarray(answer_ids[r], dtype=np.int64), chosen_logprobs=columns[0][r],
                           entropy=columns[1][r], top_logprobs=columns[2][r], top_ids=columns[3][r],
                           ranks=columns[4][r], entropy_source="exact")
            for r in range(len(answer_ids))]


def _acquire(lock: Any, stop: threading.Event | None) -> bool:
    """Take ``lock``; with ``stop``, give up (False) once it is set while another caller holds the lock."""
    if stop is None:
        lock.acquire()
        return True
    while not lock.acquire(timeout=0.05):
        if stop.is_set():
            return False
    return True


def _partial(steps: Sequence[tuple[int, tuple]], k: int, processed: bool) -> RecordedAnswer:
    """The answer so far from the streamed steps: (token, (entropy, top log-probs, top ids, log-prob, rank))."""
    n = len(steps)
    numbers = [s[1] for s in steps]
    return RecordedAnswer(
        token_ids=np.asarray([s[0] for s in steps], dtype=np.int64),
        chosen_logprobs=np.asarray([v[3] for v in numbers], dtype=np.float32),
        entropy=np.asarray([v[0] for v in numbers], dtype=np.float32),
        top_logprobs=np.stack([v[1] for v in numbers]).astype(np.float32) if n
        else np.zeros((0, k), dtype=np.float32),
        top_ids=np.stack([v[2] for v in numbers]).astype(np.int64) if n else np.zeros((0, k), dtype=np.int64),
        ranks=np.asarray([v[4] for v in numbers], dtype=np.int64), processed=processed, finish_reason="stopped",
        entropy_source="exact")


def _stopped(answer: RecordedAnswer, stop: threading.Event, config: DecodingConfig) -> RecordedAnswer:
    """``answer`` with ``finish_reason="stopped"`` when ``stop`` ended it before the token limit."""
    if stop.is_set() and answer.finish_reason != "eos" and len(answer.token_ids) < config.max_new_tokens:
        return dataclasses.replace(answer, finish_reason="stopped")
    return answer


def _make_logits_processor(recorder: stats.TraceRecorder) -> Any:
    from transformers import LogitsProcessor

    class _Recorder(LogitsProcessor):
        def __call__(self, input_ids, scores):  # noqa: D401 - transformers' signature
            return recorder(input_ids, scores)

    # LogitsProcessorList inspects each processor's signature at every step; a precomputed one makes that cheap.
    _Recorder.__call__.__signature__ = inspect.signature(_Recorder.__call__)  # type: ignore[attr-defined]  # any function takes it
    return _Recorder()


def _is_processed(gen_config: Any) -> bool:
    return any(getattr(gen_config, name, off) not in (None, off) for name, off in _PROCESSING_FIELDS.items())


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return set()
    return {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}


def _pad_id(model: Any, tokenizer: Any) -> int:
    for value in (tokenizer.pad_token_id, getattr(model.generation_config, "pad_token_id", None),
                  tokenizer.eos_token_id):
        if value is not None:
            return int(value if not isinstance(value, (list, tuple)) else value[0])
    return 0
