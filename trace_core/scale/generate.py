"""The per-shard work of ``trace-core generate`` over shards: read a shard of prompts, generate an answer to each
with its trace, label the answers against the shard's ``reference`` column when it has one, and hand back the rows
with every skipped row's problem.

:class:`ShardGenerator` is a callable object that loads its model (or connects to its servers) on first use and keeps
it for the following shards, the shape a worker pool or a Ray Data actor wants, as
:class:`~trace_core.scale.score.ShardScorer` is for scoring. The rows it makes are those a one-file run writes
(:func:`~trace_core.data.prompts.answered_frame`, :func:`beam_column`).

Seeds: when sampling with a seed, the answer at position i of a shard draws with ``seed + offset + i``, the offset
derived from the shard's name (:func:`shard_seed`), so that two shards never repeat each other's draws (shards
holding the same prompts give different samples) and a rerun draws the same. Without a seed the draws differ each
run; a rerun still skips the complete shards.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from hashlib import sha256
from typing import Any

from trace_core import settings as env
from trace_core.checks import AnswerValueError
from trace_core.data.prompts import (
    answered_frame,
    empty_answers_note,
    matcher_hint,
    read_prompts,
    template_unused,
    unlabeled_message,
)
from trace_core.record import beam_logprobs, generate_traces
from trace_core.scale.score import LazyModel
from trace_core.scale.shards import Shard
from trace_core.scale.stream import ShardOutput
from trace_core.traces.trace import DecodingConfig

__all__ = ["SEED_SPAN", "ShardGenerator", "beam_column", "shard_seed"]

#: The offsets of the shards' seeds lie in [0, SEED_SPAN).
SEED_SPAN = 2**31
_SEED_MAX = 2**63 - 1

#: (total, description) -> (update(done, total) or None, close()): a progress bar, as the command line makes them.
ProgressFactory = Callable[[int, str], tuple[Any, Callable[[], None]]]


def shard_seed(seed: int | None, name: str) -> int | None:
    """The seed a shard's answers draw from: ``seed`` plus a number in [0, 2**31) from the SHA-256 of the shard's
    name (None without a seed); the sum wraps to stay a valid seed.

    >>> shard_seed(7, "a.jsonl") == shard_seed(7, "a.jsonl") != shard_seed(7, "b.jsonl")
    True
    """
    if seed is None:
        return None
    offset = int.from_bytes(sha256(name.encode("utf-8")).digest()[:8], "big") % SEED_SPAN
    return (seed + offset) % (_SEED_MAX + 1 - SEED_SPAN)


def beam_column(lm: Any, prompts: Sequence[str], *, num_beams: int, max_new_tokens: int,
                chat_template: bool) -> list[str]:
    """The ``beam_logprobs`` column of generated answers: one beam search per prompt
    (:func:`trace_core.record.beam_logprobs`), as JSON text per row."""
    return [json.dumps(b) for b in beam_logprobs(lm, list(prompts), num_beams=num_beams,
                                                 max_new_tokens=max_new_tokens, chat_template=chat_template)]


class ShardGenerator(LazyModel):
    """Generate the answers of one shard of prompts: ``ShardGenerator(load_model, config=...)(shard) ->
    ShardOutput``.

    Parameters
    ----------
    load_model : callable() -> model
        Loads the model or connects to the server(s) (a ``LoadedModel``, ``ServerModel`` or ``MultiServer``); called
        once, on the first shard with a prompt. To run on Ray it must pickle and hold no secret (as for
        :class:`~trace_core.scale.score.ShardScorer`).
    config : DecodingConfig
        Decoding: max new tokens, greedy or sampling (temperature, top-k, top-p, seed), chat template, alternatives.
    batch_size : int
        Prompts per model call (a server: requests in flight, at most its concurrency at each server).
    num_beams : int
        With 2 or more, also one beam search per prompt (a ``beam_logprobs`` column; a local model only).
    matcher, tolerance : str, float
        How answers are labeled against a ``reference`` column.
    max_bytes, max_cell_chars : int or None
        The reader's bounds on a shard's size and on a cell; None: ``TRACE_MAX_DATA_MB`` and ``TRACE_MAX_CELL_MB``
        MiB, read when the object is made (as ``trace-core generate`` reads a prompts file).
    progress : callable(total, description) -> (update, close), optional
        Makes a progress bar for each shard's generation.
    """

    def __init__(self, load_model: Callable[[], Any], *, config: Any, batch_size: int = 8, num_beams: int = 0,
                 matcher: str = "exact", tolerance: float = 1e-6, max_bytes: int | None = None,
                 max_cell_chars: int | None = None, progress: ProgressFactory | None = None) -> None:
        if not isinstance(config, DecodingConfig):
            raise TypeError(f"`config` must be a DecodingConfig, got {type(config).__name__}")
        super().__init__(load_model)
        self.config, self.batch_size, self.num_beams = config, batch_size, num_beams
        self.matcher, self.tolerance = matcher, tolerance

        # The driver's limits travel with the object (a worker's environment may say otherwise).
        self.max_bytes = env.get("TRACE_MAX_DATA_MB") * 2**20 if max_bytes is None else max_bytes
        self.max_cell_chars = env.get("TRACE_MAX_CELL_MB") * 2**20 if max_cell_chars is None else max_cell_chars
        self._progress = progress

    def settings(self) -> dict[str, Any]:
        """The options that shape the output shards (``batch_size`` and progress do not). ``seed`` is None when
        sampling without one: such answers cannot be drawn again."""
        c = self.config
        return {"max_new_tokens": c.max_new_tokens, "sample": c.do_sample,
                "temperature": c.temperature, "top_k": c.top_k, "top_p": c.top_p, "seed": c.seed,
                "chat_template": c.chat_template, "alternatives": c.n_alternatives, "beams": self.num_beams,
                "matcher": self.matcher, "tolerance": self.tolerance}

    def _read(self, shard: Shard) -> Any:
        return read_prompts(shard.path, max_bytes=self.max_bytes, max_cell_chars=self.max_cell_chars)

    def generate_answers(self, prompts: list[str], config: Any, description: str) -> Sequence[Any]:
        model = self.model  # loaded before the bar starts, so a loading error is not printed after a bar's residue
        update, close = self._progress(len(prompts), description) if self._progress else (None, lambda: None)
        try:
            return generate_traces(model, prompts, config=config, batch_size=self.batch_size, progress=update)
        finally:
            close()

    def __call__(self, shard: Shard) -> ShardOutput:
        """Generate one shard: its rows with a prompt, answered, with their traces; the rows without a prompt as
        errors; notes on answers that are empty, that their reference cannot label, or that the exact matcher labeled
        wrong although they hold their reference."""
        read = self._read(shard)
        prompts = read.frame["prompt"].astype(str).tolist()
        config = self.config
        if config.do_sample:  # greedy answers draw nothing: the seed stays as given
            config = replace(config, seed=shard_seed(config.seed, shard.name))
        try:
            traces = self.generate_answers(prompts, config, f"generating {shard.name}")
        except AnswerValueError as exc:  # named by the shard's row, not by the prompt's position among its prompts
            raise ValueError(f"{shard.name}: row {read.rows[exc.index]}: the answer {exc.reason}") from None
        answers = [t.answer for t in traces]
        frame, problems = answered_frame(read.frame, answers, read.references, read.rows,
                                         matcher=self.matcher, tolerance=self.tolerance)
        notes = [unlabeled_message(problems, len(traces))] if problems else []
        # (a shard without prompts has no answers: the model is not loaded for it)
        unused = bool(traces) and template_unused(self.model, config.chat_template)
        empty = empty_answers_note(answers, template_unused=unused)
        notes += [empty] if empty else []
        hint = matcher_hint(frame, read.references, read.rows, self.matcher)
        notes += [hint] if hint else []
        if self.num_beams:
            frame["beam_logprobs"] = beam_column(self.model, prompts, num_beams=self.num_beams,
                                                 max_new_tokens=config.max_new_tokens,
                                                 chat_template=config.chat_template)
        return ShardOutput(frame=frame, traces=traces, n_read=read.n_read, errors=list(read.skipped),
                           notes=notes)
