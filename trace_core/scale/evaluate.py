"""Evaluating shards: each shard read, its usable answers scored by every method and its per-token arrays let go,
then the protocol on the compact per-answer table of all of them (:func:`evaluate_shards`).

The result is the one :func:`trace_core.evaluation.run.evaluate` gives on the same answers in one file (tested to 1e-9):
every method's score of an answer depends on that answer alone, and the splits are drawn over the whole table.
Rejected rows, rows without a trace and empty answers are left out and counted per shard, each named by its shard
and row; the other rows of their shard are kept. A shard that cannot be read at all stops the evaluation (a result
without it would not be about the data asked for).
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trace_core.data import DatasetError, DatasetWarning, RowError, parse_beam_logprobs, read_dataset
from trace_core.evaluation.run import EvaluationConfig, data_note, evaluate_scores
from trace_core.methods.fitted_baselines import TopKPlan
from trace_core.policy import usable_rows
from trace_core.scale.compact import CompactScores, compact_scores, concat_compact
from trace_core.scale.compact_io import compact_bytes, compact_from_bytes
from trace_core.scale.ray_compact import compact_on_ray
from trace_core.scale.ray_engine import run_shards_ray
from trace_core.scale.shards import Shard
from trace_core.scale.stream import ShardOutput, run_shards
from trace_core.traces.table import gather

__all__ = ["ShardAccount", "ShardedScores", "UnreadableShardError", "evaluate_shards", "evaluate_table",
           "named_shard_scores", "read_compact", "shard_scores"]

#: Problems kept per shard for messages (all are counted).
SHOWN_PROBLEMS = 3


@dataclass
class ShardAccount:
    """What became of one shard's rows: read, kept, and the first problems of those left out (by kind: rejected by
    the reader, no trace, empty answer), each message prefixed with the shard's name; ``errors``: a
    :class:`~trace_core.data.RowError` for every row left out."""

    shard: str
    read: int
    kept: int
    left_out: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    errors: list[Any] = field(default_factory=list)


@dataclass
class ShardedScores:
    """The compact table of every shard, with each shard's account and how the labels were found."""

    table: CompactScores
    accounts: list[ShardAccount]
    label_source: str

    def rows(self, which: str) -> int:
        """Rows ``"read"`` or ``"kept"`` over every shard."""
        return sum(getattr(a, which) for a in self.accounts)


def _read(shard: Shard, matcher: str, tolerance: float) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DatasetWarning)  # the rejected rows are in dataset.errors
        return read_dataset(shard.path, format=shard.format, matcher=matcher, tolerance=tolerance,
                            require_label=True)


def shard_scores(shard: Shard, *, methods: Sequence[str] | None = None, matcher: str = "exact",
                 tolerance: float = 1e-6, group_by: str | None = None, embedder: Any = None,
                 use_entropy: bool = True, top_k: TopKPlan | None = None,
                 split_by: str | None = None) -> tuple[CompactScores | None, ShardAccount, str]:
    """One shard's compact table (None when no row of it is usable), its account and its labels' source
    (``use_entropy``, ``top_k``: as :func:`~trace_core.scale.compact.compact_scores` takes them; ``split_by``: the
    column whose groups every split keeps whole, every kept row with a value).

    Raises
    ------
    trace_core.data.DatasetError
        The shard cannot be read (or has no valid row).
    ValueError
        ``group_by`` is not a column of the shard, or a score is not finite (naming the shard and row).
    """
    dataset = _read(shard, matcher, tolerance)
    rows = dataset.frame[dataset.row_column].to_numpy()
    numbers = rows.tolist()
    usable = usable_rows(dataset.traces, row_numbers=numbers)
    account = ShardAccount(shard=shard.name, read=dataset.n_read, kept=len(usable.keep))
    left = {"rejected": len(dataset.errors), "no trace": len(usable.missing), "empty": len(usable.empty)}
    account.left_out = {kind: n for kind, n in left.items() if n}
    account.problems = [f"{shard.name}: {e}" for e in dataset.errors[:SHOWN_PROBLEMS]]
    account.errors = sorted([*dataset.errors,
                             *(RowError(numbers[i], "", "has no trace; left out") for i in usable.missing),
                             *(RowError(numbers[i], "", "empty answer (no tokens); left out") for i in usable.empty)],
                            key=lambda e: e.row)
    if usable.missing:
        account.problems.append(f"{shard.name}: {usable.missing_message()}; left out")
    if usable.empty:
        account.problems.append(f"{shard.name}: {usable.empty_message()}")
    if dataset.label_note:  # labels likely wrong: answers in sentences under the exact matcher
        account.problems.append(f"{shard.name}: {dataset.label_note}")
    for option, column in (("group by", group_by), ("split by", split_by)):
        if column is not None and column not in dataset.frame.columns:
            raise ValueError(f"{shard.name}: no column {column[:200]!r} to {option}")
    if not len(usable.keep):
        return None, account, dataset.label_source
    keep = usable.keep
    frame = dataset.frame.iloc[keep]
    if split_by is not None and frame[split_by].isna().any():
        row = int(rows[keep][np.flatnonzero(frame[split_by].isna().to_numpy())[0]])
        raise ValueError(f"{shard.name}: row {row}: no value in {split_by[:200]!r}; every answer needs its group")
    beams = None
    if "beam_logprobs" in frame.columns:
        beams = parse_beam_logprobs(frame["beam_logprobs"], rows[keep].tolist())
    table = compact_scores(gather(dataset.traces, keep), frame["label"].to_numpy(), rows=rows[keep],
                           shard_name=shard.name, methods=methods, beam_logprobs=beams, embedder=embedder,
                           groups=None if group_by is None else frame[group_by].tolist(), use_entropy=use_entropy,
                           top_k=top_k, split_groups=None if split_by is None else frame[split_by].tolist())
    return table, account, dataset.label_source


def read_compact(shards: Sequence[Shard], *, methods: Sequence[str] | None = None, matcher: str = "exact",
                 tolerance: float = 1e-6, group_by: str | None = None, embedder: Any = None,
                 on_shard: Callable[[ShardAccount], None] | None = None, engine: str = "stream",
                 address: str | None = None, workers: int | None = None, split_by: str | None = None,
                 scores_out: str | os.PathLike[str] | None = None, command: str = "") -> ShardedScores:
    """Every shard's compact table, put together in shard order. ``on_shard(account)`` after each shard (e.g. to
    say it on stderr).

    ``engine="stream"`` reads the shards one at a time in this process; ``"ray"`` on Ray Data
    (:func:`~trace_core.scale.ray_compact.compact_on_ray`: ``workers`` shards at a time, on a local Ray or the
    cluster at ``address``), each shard's per-token arrays staying in the worker that read it. ``scores_out``: a
    folder that keeps each shard's compact table (:mod:`~trace_core.scale.compact_io`) with a manifest
    (``command`` recorded in it), so that a rerun reads the complete ones back instead of the shards.

    Raises UnreadableShardError (naming the shard) for a shard that cannot be read. Shards are scored as one pass
    over all their answers would score them: when some shards' traces hold entropy and others' do not, or when they
    store different numbers of alternatives per token, the shards scored otherwise are read again (without entropy;
    with the fewest alternatives any answer stores).
    """
    options = dict(methods=methods, matcher=matcher, tolerance=tolerance, group_by=group_by, embedder=embedder,
                   split_by=split_by)
    parts: dict[int, CompactScores] = {}
    accounts: list[ShardAccount] = []
    sources: list[str] = []
    if scores_out is not None:
        computed = _through_folder(shards, options, Path(scores_out), engine=engine, address=address,
                                   workers=workers, command=command)
        if on_shard is not None:
            for _, account, _ in computed:
                on_shard(account)
    elif engine == "ray":
        step = functools.partial(named_shard_scores, options=dict(options))
        computed = compact_on_ray(shards, step, address=address, workers=workers,
                                  on_result=lambda _, result: on_shard(result[1]) if on_shard else None)
    elif engine == "stream":
        computed = []
        for shard in shards:
            computed.append(named_shard_scores(shard, options))
            if on_shard is not None:
                on_shard(computed[-1][1])
    else:
        raise ValueError(f"unknown engine {str(engine)[:40]!r}; use 'stream' or 'ray'")
    for i, (part, account, source) in enumerate(computed):
        accounts.append(account)
        sources.append(source)
        if part is not None:
            parts[i] = part
    if not parts:
        raise ValueError(f"none of the {len(shards):,} shards has a usable answer (each row rejected, without a "
                         "trace or empty)")
    use_entropy = all(p.has_entropy for p in parts.values())
    plan = TopKPlan.merge([p.top_k for p in parts.values() if p.top_k is not None])
    for i, part in list(parts.items()):
        if part.has_entropy != use_entropy or _reads_other_alternatives(part, plan):
            again, _, _ = named_shard_scores(shards[i], {**options, "use_entropy": use_entropy, "top_k": plan})
            assert again is not None  # the same rows as the first time
            parts[i] = again
    source = sources[0] if len(set(sources)) == 1 else "mixed"
    return ShardedScores(table=concat_compact([parts[i] for i in sorted(parts)]), accounts=accounts,
                         label_source=source)


class UnreadableShardError(ValueError):
    """A shard that cannot be read at all (not a dataset, or no valid row); the message starts with its name."""


def named_shard_scores(shard: Shard, options: dict[str, Any]) -> tuple[CompactScores | None, ShardAccount, str]:
    """:func:`shard_scores` with its keyword options as a mapping, a shard that cannot be read named in the error
    (:class:`UnreadableShardError`)."""
    try:
        return shard_scores(shard, **options)
    except DatasetError as exc:
        raise UnreadableShardError(f"{shard.name}: {exc}") from None


class CompactWork:
    """The per-shard work of ``evaluate --scores-out``: a shard's compact table (:func:`named_shard_scores`) written
    as its output file (:mod:`~trace_core.scale.compact_io`), its rows left out as row errors; picklable, so Ray
    actors run it too."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)

    def __call__(self, shard: Shard) -> Any:
        import pandas as pd

        part, account, source = named_shard_scores(shard, self.options)
        kept = pd.DataFrame(index=range(0 if part is None else len(part)))
        return ShardOutput(frame=kept, traces=None, n_read=account.read, errors=account.errors,
                           data=compact_bytes(part, label_source=source))


def _stored_compact(out: Path, results: Sequence[Any]) -> list[tuple[CompactScores | None, ShardAccount, str]]:
    """Each complete shard's compact table read back from its output file, with its account from its entry."""
    computed = []
    for result in results:
        entry = result.entry
        part, source = compact_from_bytes((out / result.shard.output).read_bytes())  # its entry names it (checked)
        if part is not None:
            part.shard_names = [result.shard.name]
        account = ShardAccount(shard=result.shard.name, read=entry.rows_read, kept=entry.rows_kept,
                               left_out={"left out": entry.rows_rejected} if entry.rows_rejected else {})
        computed.append((part, account, source))
    return computed


def _reads_other_alternatives(part: CompactScores, plan: TopKPlan) -> bool:
    """Whether a shard scored on its own plan read other alternatives than the whole's ``plan`` has it read."""
    own = part.top_k
    if own is None or not own.n:
        return False
    if plan.reason:  # the whole runs no top-k baseline: only a shard that ran them differs
        return not own.reason
    return own.k != plan.k


def _through_folder(shards: Sequence[Shard], options: dict[str, Any], out: Path, *, engine: str,
                    address: str | None, workers: int | None, command: str) -> list[Any]:
    """Every shard's compact table by way of the folder ``out`` (written where missing or stale, read back)."""
    settings = {"evaluate": {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in options.items()
                             if k != "embedder"}, "embedder": options.get("embedder") is not None}
    runner: Callable[..., Any] = run_shards
    extra: dict[str, Any] = {}
    if engine == "ray":

        runner, extra = run_shards_ray, {"address": address, "workers": workers}
    summary = runner(shards, out, CompactWork(options), settings=settings, command=command, **extra)
    if summary.failed:  # a Ray worker that died on every try: no table for it, so no result about all the data
        names = ", ".join(r.shard.name[:80] for r in summary.failed[:5])
        n = len(summary.failed)
        raise ValueError(f"{n:,} shard{'' if n == 1 else 's'} could not be scored ({names}); run the same command "
                         "again")
    by_name = {r.shard.name: r for r in summary.results}
    return _stored_compact(out, [by_name[s.name] for s in shards])


def evaluate_shards(shards: Sequence[Shard], *, config: Any = None, methods: Sequence[str] | None = None,
                    matcher: str = "exact", tolerance: float = 1e-6, embedder: Any = None,
                    progress: Callable[[int, int], None] | None = None) -> tuple[Any, ShardedScores]:
    """The protocol on every shard's usable answers (:func:`read_compact`, then
    :func:`trace_core.evaluation.run.evaluate_scores`): the :class:`~trace_core.evaluation.results.EvaluationResult`
    (``config``: an :class:`~trace_core.evaluation.run.EvaluationConfig`, default the paper's) and the shards' compact
    table with their accounts."""
    scores = read_compact(shards, methods=methods, matcher=matcher, tolerance=tolerance, embedder=embedder)
    result = evaluate_table(scores.table, config=EvaluationConfig() if config is None else config,
                            progress=progress)
    return result, scores


def evaluate_table(table: CompactScores, *, config: Any, progress: Callable[[int, int], None] | None = None) -> Any:
    """:func:`trace_core.evaluation.run.evaluate_scores` on a compact table, with its data note and entropy summary."""
    result = evaluate_scores(table.inputs, table.labels.astype(np.int64), config=config,
                             certain_tokens=table.certain_tokens,
                             note=data_note(table.entropy_summary, has_entropy=table.has_entropy), progress=progress,
                             split_groups=table.split_groups)
    result.entropy_summary = table.entropy_summary
    return result
