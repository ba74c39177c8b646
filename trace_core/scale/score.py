"""The per-shard work of ``trace-core score``: read a shard, record the traces its rows lack (teacher forcing), and
hand back its rows with every rejected row's problem.

:class:`ShardScorer` is a callable object that loads its model on first use and keeps it for the following shards,
the shape a worker pool (or a Ray Data actor) wants: built once per worker, called once per shard.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from trace_core.data import DatasetWarning, read_dataset
from trace_core.policy import rows_over_context, rows_text, usable_rows
from trace_core.record import beam_logprobs, context_length, score_answers
from trace_core.scale.shards import Shard
from trace_core.scale.stream import ShardOutput

__all__ = ["LazyModel", "ShardScorer", "over_context_message"]

#: (total, description) -> (update(done, total) or None, close()): a progress bar, as the command line makes them.
ProgressFactory = Callable[[int, str], tuple[Any, Callable[[], None]]]


def over_context_message(lm: Any, prompts: Sequence[str], answers: Sequence[str], rows: Sequence[Any], *,
                          chat_template: bool) -> str | None:
    """The rows whose prompt and answer do not fit the model's context
    (:func:`~trace_core.policy.rows_over_context`), named by ``rows`` (each pair's row number in its file), in one
    line; None when every pair fits. What a caller says when :func:`~trace_core.record.score_answers` refused the
    answers: the library names its first such answer by its 0-based position in the list it was given."""
    over = rows_over_context(lm, prompts, answers, chat_template=chat_template)
    if not over:
        return None
    which = "the row" if len(over) == 1 else "those rows"
    return (f"{rows_text([rows[i] for i in over])}: prompt and answer do not fit the model's context "
            f"({context_length(lm):,} tokens, prompt and answer together); shorten them or leave {which} out")


class LazyModel:
    """A per-shard work holding a model loader: the model loaded on first use and kept for the following shards,
    and pickled (sent to a worker) without it, so that each worker loads (or connects) its own, once."""

    def __init__(self, load_model: Callable[[], Any]) -> None:
        if not callable(load_model):
            raise TypeError(f"`load_model` must be callable, got {type(load_model).__name__}")
        self._load_model = load_model
        self._model: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_model": None}

    @property
    def model(self) -> Any:
        """The model, loaded on first use."""
        if self._model is None:
            self._model = self._load_model()
        return self._model


class ShardScorer(LazyModel):
    """Record the traces of one shard's answers: ``ShardScorer(load_model, ...)(shard) -> ShardOutput``.

    Parameters
    ----------
    load_model : callable() -> model
        Loads the model that records the traces (:func:`trace_core.record.load_model` or
        :func:`~trace_core.record.connect_server` with its options); called once, when the first shard with a row
        to score comes. To run on Ray it must pickle (a module-level function or a small object of the load
        arguments, not a lambda), and hold no secret: an API key is read from its environment variable by the
        worker.
    rescore : bool
        Re-record rows that already have a trace (else only the rows without one are scored).
    chat_template, n_alternatives, batch_size
        As :func:`trace_core.record.score_answers` takes them.
    num_beams : int
        With 2 or more, also run one beam search per prompt (a ``beam_logprobs`` column, for the beam baselines).
    matcher, tolerance : str, float
        How answers are labeled against a ``reference`` column (:func:`trace_core.data.read_dataset`).
    progress : callable(total, description) -> (update, close), optional
        Makes a progress bar for each shard's scoring.

    Notes
    -----
    Settings that shape the output are :meth:`settings`; a run records them in every shard's manifest entry.
    """

    def __init__(self, load_model: Callable[[], Any], *, rescore: bool = False, chat_template: bool = False,
                 n_alternatives: int = 5, batch_size: int = 8, num_beams: int = 0, matcher: str = "exact",
                 tolerance: float = 1e-6, progress: ProgressFactory | None = None) -> None:
        super().__init__(load_model)
        self.rescore, self.chat_template, self.n_alternatives = rescore, chat_template, n_alternatives
        self.batch_size, self.num_beams, self.matcher, self.tolerance = batch_size, num_beams, matcher, tolerance
        self._progress = progress

    def settings(self) -> dict[str, Any]:
        """The options that shape the output shards (``batch_size`` and progress do not)."""
        return {"rescore": self.rescore, "chat_template": self.chat_template, "alternatives": self.n_alternatives,
                "beams": self.num_beams, "matcher": self.matcher, "tolerance": self.tolerance}

    def _read(self, shard: Shard):
        """The shard's dataset, its reader's warnings about rejected rows kept as row errors (not warned again)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DatasetWarning)  # the rejected rows are in dataset.errors
            return read_dataset(shard.path, format=shard.format, matcher=self.matcher, tolerance=self.tolerance,
                                require_label=False)

    def _score(self, prompts: list[str], answers: list[str], description: str) -> Sequence[Any]:
        model = self.model  # loaded before the bar starts, so a loading error is not printed after a bar's residue
        update, close = self._progress(len(prompts), description) if self._progress else (None, lambda: None)
        try:
            return score_answers(model, prompts, answers, chat_template=self.chat_template,
                                 n_alternatives=self.n_alternatives, batch_size=self.batch_size, progress=update)
        finally:
            close()

    def __call__(self, shard: Shard) -> ShardOutput:
        """Score one shard: its valid rows with their traces, its rejected rows' errors, and a note on answers that
        cannot be scored (empty)."""
        return self.score_dataset(self._read(shard), name=shard.name)

    def rows_to_score(self, traces: Sequence[Any]) -> list[int]:
        """The positions this work records: the rows without a trace, or every row with ``rescore``."""
        return [i for i, t in enumerate(traces) if t is None or self.rescore]

    def score_dataset(self, dataset: Any, *, name: str) -> ShardOutput:
        """The work of one shard on its dataset once read (a shard's, or the one file ``trace-core score`` is
        given): the rows of :meth:`rows_to_score` recorded, with beams when asked; ``name`` (the shard's, or the
        file's as the user gave it) starts the message on rows that do not fit the model's context."""
        frame = dataset.frame
        traces = list(dataset.traces)
        todo = self.rows_to_score(traces)
        rows = frame[dataset.row_column].tolist()
        if todo:
            prompts = [str(frame["prompt"].iloc[i]) for i in todo]
            answers = [str(frame["answer"].iloc[i]) for i in todo]
            try:
                new = self._score(prompts, answers, f"scoring {name}")
            except ValueError:  # named by the file's rows, not by positions in the list scored
                if self._model is None:  # the model did not load: nothing was scored
                    raise
                message = over_context_message(self._model, prompts, answers, [rows[i] for i in todo],
                                               chat_template=self.chat_template)
                if message is None:
                    raise
                raise ValueError(f"{name}: {message}") from None
            for i, trace in zip(todo, new, strict=True):
                traces[i] = trace
            if self.num_beams:
                frame = self._with_beams(frame)
        unscorable = usable_rows(traces, row_numbers=rows).empty_message(left_out=False)
        return ShardOutput(frame=frame, traces=traces, n_read=dataset.n_read, errors=list(dataset.errors),
                           notes=[unscorable] if unscorable else [])

    def _with_beams(self, frame: Any) -> Any:
        """``frame`` with a ``beam_logprobs`` column (JSON text per row), one beam search per prompt."""
        frame = frame.copy()
        frame["beam_logprobs"] = [json.dumps(b) for b in beam_logprobs(
            self.model, frame["prompt"].astype(str).tolist(), num_beams=self.num_beams,
            chat_template=self.chat_template)]
        return frame

