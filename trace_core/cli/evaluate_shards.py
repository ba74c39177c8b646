"""``trace-core evaluate`` over shards: a folder or a glob pattern of datasets with traces and labels -> the same
table as for one file, read one shard at a time into the compact per-answer table that the protocol runs on
(:mod:`trace_core.scale.evaluate`). Each shard's rows left out are said on stderr, named by shard and row."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from trace_core.checks import counted, shorten
from trace_core.cli._support import CLIError, cli_words, shown
from trace_core.cli.common import protocol_run
from trace_core.cli.score_shards import check_out_folder, recorded_command, say_skipped, shard_engine
from trace_core.evaluation.run import NoUsableSplitError, average_results
from trace_core.policy import METRICS_UNDEFINED, one_class_message
from trace_core.scale import list_shards
from trace_core.scale.evaluate import UnreadableShardError, evaluate_table, read_compact
from trace_core.settings import redact_secrets

__all__ = ["evaluate_sharded"]


def _say_shard(account: Any, *, quiet: bool) -> None:
    """One line per shard (its rows read and kept; with --quiet only a shard with a problem), then its problems: the
    first of the rows it left out, and a warning that labels are likely wrong."""
    left = ", ".join(f"{n:,} {kind}" for kind, n in account.left_out.items())
    if quiet and not left and not account.problems:
        return
    print(f"{account.shard}: {counted(account.read, 'row')} read, {account.kept:,} kept"
          + (f" ({left} left out)" if left else ""), file=sys.stderr)
    for problem in account.problems:
        print(f"warning: {redact_secrets(problem)}", file=sys.stderr)


def _read(args: argparse.Namespace, methods: list[str] | None, embedder: Any) -> Any:
    """Every shard's compact table (:func:`trace_core.scale.evaluate.read_compact`); CLIError naming the shard
    when one cannot be read."""
    _, engine = shard_engine(args)  # checked before any work
    scores_out = check_out_folder(args.scores_out, option="--scores-out") if args.scores_out else None
    try:
        shards = list_shards(args.data, exclude=scores_out, on_skip=say_skipped)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if not args.quiet:
        print(f"evaluating {counted(len(shards), 'shard')} of {shown(args.data)}, one at a time", file=sys.stderr)
    try:
        return read_compact(shards, methods=methods, matcher=args.matcher, tolerance=args.tolerance,
                            group_by=args.group_by, embedder=embedder, split_by=getattr(args, "split_by", None),
                            on_shard=lambda account: _say_shard(account, quiet=args.quiet),
                            engine="ray" if engine else "stream", **engine, scores_out=scores_out,
                            command=recorded_command(getattr(args, "argv", [])))
    except UnreadableShardError as exc:  # the result would not be about the data asked for
        raise CLIError(f"{exc}; fix or move that shard and run again") from None
    except ValueError as exc:
        raise CLIError(cli_words(str(exc))) from None


def _one(table: Any, *, title: str, args: argparse.Namespace, config: Any) -> Any:
    """The protocol on one compact table (:func:`~trace_core.cli.common.protocol_run`)."""
    if not args.quiet:
        where = f" ({title})" if title else ""
        print(f"evaluating {counted(len(table), 'answer')}{where}", file=sys.stderr)
    return protocol_run(lambda update: evaluate_table(table, config=config, progress=update), title=title,
                        args=args, config=config)


def _by_group(args: argparse.Namespace, table: Any, config: Any) -> dict[str, Any]:
    """``--group-by`` on the compact table: each value on its own, then their average (groups with one class only,
    or too few of one class for any split, skipped with a warning line)."""
    keys = table.groups
    results, skipped = {}, 0
    for key in dict.fromkeys(keys):
        idx = np.flatnonzero(keys == key)
        reason = one_class_message(table.labels[idx], "this group cannot be evaluated")
        if not reason:
            try:
                results[f"{args.group_by} = {key}"] = _one(table.take(idx), title=f"{args.group_by} = {key}"[:200],
                                                            args=args, config=config)
                continue
            except NoUsableSplitError as exc:
                reason = cli_words(str(exc))
        skipped += 1
        print(f"warning: --group-by {shorten(args.group_by)}: skipped the group {shorten(key)}: {reason}",
              file=sys.stderr)
    if not results:
        none = "its one group cannot" if skipped == 1 else f"none of the {skipped:,} groups can"
        raise CLIError(f"--group-by {shorten(args.group_by)}: {none} be evaluated (each has one class only, or too few "
                       "answers of one class for any split)")
    return {**results, "average": average_results(results)}


def evaluate_sharded(args: argparse.Namespace, *, config: Any, methods: list[str] | None,
                     embedder: Any) -> tuple[dict[str, Any], str]:
    """The results (``{"": result}``, or one per group and their average) and how the labels were found."""
    scores = _read(args, methods, embedder)
    table = scores.table
    if not args.quiet:
        print(f"{counted(scores.rows('read'), 'row')} read from {counted(len(scores.accounts), 'shard')}, "
              f"{counted(len(table), 'answer')} kept", file=sys.stderr)
    message = one_class_message(table.labels, METRICS_UNDEFINED)
    if message:
        raise CLIError(f"{shown(args.data)}: {message}")
    if args.group_by:
        return _by_group(args, table, config), scores.label_source
    return {"": _one(table, title="", args=args, config=config)}, scores.label_source
