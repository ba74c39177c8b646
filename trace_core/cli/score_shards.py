"""``trace-core score`` over shards: a folder or a glob pattern of datasets -> one output folder of Parquet shards
with a manifest, shard by shard, resuming where an earlier run stopped (:mod:`trace_core.scale`).

Sharded mode is chosen by ``data`` alone (:func:`is_sharded`): a folder or a glob pattern. ``--out`` is then a
folder, created when missing (its parent must exist)."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from ..settings import redact_secrets
from . import common
from ._support import DATASET_OUT, CLIError, progress, shown

__all__ = ["is_sharded", "score_shards"]

_SHOWN_PROBLEMS = 3  # rejected rows quoted per shard on stderr (all are in its manifest entry)


def is_sharded(data: str) -> bool:
    """Whether ``score`` works shard by shard: ``data`` is a folder, or a glob pattern (``*``, ``?``, ``[``) that is
    not the name of an existing file."""
    from ..scale import is_pattern

    return os.path.isdir(data) or (is_pattern(data) and not os.path.exists(data))


def check_out_folder(out: str) -> Path:
    """``--out`` of a sharded run: a folder that exists or can be created (its parent exists and is writable),
    and not a dataset file name (``scored.jsonl``: most likely a single-file run meant). Checked before any work."""
    where = f"--out {shown(out)}"
    if not out.strip():
        raise CLIError("--out: empty; give the output folder of the shards")
    path = Path(out)
    if os.path.lexists(out):
        if not path.is_dir():
            raise CLIError(f"{where}: exists and is not a folder; with a folder or pattern of shards as input, "
                           "--out is the output folder")
        if not os.access(path, os.W_OK):
            raise CLIError(f"{where}: cannot write in this folder")
        return path
    if path.suffix.lower() in DATASET_OUT[0]:
        raise CLIError(f"{where}: with a folder or pattern of shards as input, --out is a folder (one Parquet file "
                       "per shard), not a file name; give a folder name without a dataset extension")
    parent = path.parent
    if not parent.is_dir():
        raise CLIError(f"{where}: the folder {shown(str(parent))} does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise CLIError(f"{where}: cannot write in the folder {shown(str(parent))}")
    return path


def _model_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Which model records the traces, as named on the command line (a server's address without credentials)."""
    if args.server:
        server = redact_secrets(re.sub(r"//[^/@]*@", "//***@", args.server))
        return {"server": server, "server_model": args.server_model, "server_tokenizer": args.server_tokenizer,
                "full_distribution": args.full_distribution}
    return {"model": args.model}


def _reporter(quiet: bool):
    """The per-shard lines on stderr: progress (not with ``--quiet``), then always the rejected rows and notes."""
    def report(result: Any, index: int, total: int) -> None:
        shard, entry = result.shard, result.entry
        if result.status == "failed":
            print(f"warning: [{index}/{total}] {shown(shard.name)}: failed: {result.error}", file=sys.stderr)
            return
        if not quiet:
            what = ("already complete, skipped" if result.status == "skipped" else
                    f"{entry.rows_read:,} rows read: {entry.rows_kept:,} kept, {entry.rows_rejected:,} rejected "
                    f"-> {entry.output}")
            print(f"[{index}/{total}] {shard.name}: {what}", file=sys.stderr)
        for problem in result.problems[:_SHOWN_PROBLEMS]:
            print(f"rejected: {problem}", file=sys.stderr)
        if len(result.problems) > _SHOWN_PROBLEMS:
            more = len(result.problems) - _SHOWN_PROBLEMS
            print(f"rejected: {shard.name}: and {more:,} more (all in {shown(entry.output)}'s manifest entry)",
                  file=sys.stderr)
        for note in result.notes:
            print(f"warning: {note}", file=sys.stderr)
    return report


def score_shards(args: argparse.Namespace) -> None:
    """Score every shard of ``args.data`` into the folder ``args.out`` (see the module's docstring)."""
    from ..data import DatasetError
    from ..scale import list_shards, run_shards
    from ..scale.score import ShardScorer

    out = check_out_folder(args.out)
    try:
        shards = list_shards(args.data, exclude=out)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    show = not args.quiet
    scorer = ShardScorer(lambda: common.load_model(args), rescore=args.rescore, chat_template=args.chat_template,
                         n_alternatives=args.alternatives, batch_size=args.batch_size, num_beams=args.beams,
                         matcher=args.matcher, tolerance=args.tolerance,
                         progress=lambda total, what: progress(total, what, show))
    settings = {**_model_settings(args), **scorer.settings()}
    command = redact_secrets(shlex.join(["trace-core", *getattr(args, "argv", [])]))
    summary = run_shards(shards, out, scorer, settings=settings, command=command, skip_errors=(DatasetError,),
                         on_shard=_reporter(args.quiet))
    if show:
        print(f"{summary.sentence()}; manifest: {summary.manifest}", file=sys.stderr)
    if summary.failed:
        names = ", ".join(r.shard.name for r in summary.failed[:3]) + (", ..." if len(summary.failed) > 3 else "")
        raise CLIError(f"{len(summary.failed):,} of {len(shards):,} shards could not be read ({shown(names)}); the "
                       "others are written; fix them and run the same command again to do only those")
