"""``trace-core score`` over shards: a folder or a glob pattern of datasets -> one output folder of Parquet shards
with a manifest, shard by shard, resuming where an earlier run stopped (:mod:`trace_core.scale`).

Sharded mode is chosen by ``data`` alone (:func:`is_sharded`): a folder or a glob pattern. ``--out`` is then a
folder, created when missing (its parent must exist). ``--engine`` picks what works the shards: this process, one
at a time (``stream``, the default), or Ray Data actors on this machine or a cluster (``ray``,
:mod:`trace_core.scale.ray_engine`); the output folder is the same byte for byte."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ..settings import redact_secrets
from . import common
from ._support import DATASET_OUT, CLIError, progress, shown

__all__ = ["ModelLoader", "check_out_folder", "finish_report", "is_sharded", "model_settings", "recorded_command",
           "refuse_engine_options", "score_shards", "shard_engine", "shard_reporter", "shard_run"]

_SHOWN_PROBLEMS = 3  # rejected rows quoted per shard on stderr (all are in its manifest entry)
# How the shards are worked, not what they hold: left out of the command that the entries record.
_ENGINE_OPTIONS = ("--engine", "--workers", "--ray-address")


@dataclass(frozen=True)
class ModelLoader:
    """The command line's model options, picklable (a Ray worker gets a copy): calling it loads the model as
    :func:`trace_core.cli.common.load_model` does. It holds the name of the API key's environment variable, never
    the key: whoever loads the model reads the key from its own environment."""

    model: str | None
    device: str
    trust_remote_code: bool
    allow_pickle_weights: bool
    server: str | tuple[str, ...] | None  # one address as given, or several
    server_model: str | None
    server_tokenizer: str | None
    api_key_env: str
    timeout: float
    retries: int
    concurrency: int
    alternatives: int
    full_distribution: bool
    server_api: str

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ModelLoader:
        values = {f.name: getattr(args, f.name) for f in fields(cls)}
        urls = common.server_urls(args)
        values["server"] = None if not urls else urls[0] if len(urls) == 1 else tuple(urls)
        return cls(**values)

    def __call__(self) -> Any:
        return common.load_model(argparse.Namespace(**asdict(self)))


def recorded_command(argv: Sequence[str]) -> str:
    """The command line as the manifest records it: secrets removed, and the engine options left out (they choose
    how the shards are worked, not a byte of them, so either engine writes the same entries)."""
    kept: list[str] = []
    skip_value = False
    for token in argv:
        if skip_value:
            skip_value = False
            continue
        name = token.split("=", 1)[0]
        if name in _ENGINE_OPTIONS:
            skip_value = "=" not in token
            continue
        kept.append(token)
    return redact_secrets(shlex.join(["trace-core", *kept]))


def is_sharded(data: str) -> bool:
    """Whether ``score`` works shard by shard: ``data`` is a folder, or a glob pattern (``*``, ``?``, ``[``) that is
    not the name of an existing file."""
    from ..scale import is_pattern

    return os.path.isdir(data) or (is_pattern(data) and not os.path.exists(data))


def check_out_folder(out: str, *, option: str = "--out") -> Path:
    """``--out`` (or ``option``) of a sharded run: a folder that exists or can be created (its parent exists and is
    writable), and not a dataset file name (``scored.jsonl``: most likely a single-file run meant). Checked before
    any work."""
    where = f"{option} {shown(out)}"
    if not out.strip():
        raise CLIError(f"{option}: empty; give the output folder of the shards")
    path = Path(out)
    if os.path.lexists(out):
        if not path.is_dir():
            raise CLIError(f"{where}: exists and is not a folder; with a folder or pattern of shards as input, "
                           f"{option} is the output folder")
        if not os.access(path, os.W_OK):
            raise CLIError(f"{where}: cannot write in this folder")
        return path
    if path.suffix.lower() in DATASET_OUT[0]:
        raise CLIError(f"{where}: with a folder or pattern of shards as input, {option} is a folder (one Parquet file "
                       "per shard), not a file name; give a folder name without a dataset extension")
    parent = path.parent
    if not parent.is_dir():
        raise CLIError(f"{where}: the folder {shown(str(parent))} does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise CLIError(f"{where}: cannot write in the folder {shown(str(parent))}")
    return path


def model_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Which model records the traces, as named on the command line: a server's address without credentials (one
    address as a string, several as a list)."""
    urls = [redact_secrets(re.sub(r"//[^/@]*@", "//***@", url)) for url in common.server_urls(args)]
    if urls:
        return {"server": urls[0] if len(urls) == 1 else urls, "server_model": args.server_model,
                "server_tokenizer": args.server_tokenizer, "full_distribution": args.full_distribution}
    return {"model": args.model}


def shard_reporter(quiet: bool):
    """The runners' ``on_shard``: a line per shard on stderr (not with ``--quiet``), then always its rejected rows
    and notes."""
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


def refuse_engine_options(args: argparse.Namespace) -> None:
    """CLIError when the engine options are given with one dataset file (they work a folder or pattern of shards)."""
    if getattr(args, "engine", "stream") != "stream" or getattr(args, "workers", None) is not None or getattr(
            args, "ray_address", None):
        raise CLIError("--engine, --workers and --ray-address work a folder or a glob pattern of shards; DATA is one "
                       "file (give its folder or a pattern, or leave these options out)")


def shard_engine(args: argparse.Namespace) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The runner that ``--engine`` names (:func:`~trace_core.scale.run_shards` or
    :func:`~trace_core.scale.ray_engine.run_shards_ray`) and the keyword arguments to add, checked before any work:
    Ray installed, ``--workers`` a whole number, the engine options only with ``--engine ray``, and no credentials
    in ``--server`` (the model options travel to Ray's workers; the API key stays in its environment variable).
    Any subcommand that takes :func:`~trace_core.cli.parser`'s engine options can call it."""
    from ..scale import run_shards

    engine = getattr(args, "engine", "stream")
    workers, address = getattr(args, "workers", None), getattr(args, "ray_address", None)
    if engine != "ray":
        given = [o for o, v in (("--workers", workers is not None), ("--ray-address", address)) if v]
        if given:
            raise CLIError(f"{', '.join(given)}: only with --engine ray")
        return run_shards, {}
    if workers is not None and workers < 1:
        raise CLIError(f"--workers: expected a whole number >= 1, got {workers}")
    if getattr(args, "server", None):
        from ..record.addresses import base_url_of

        try:
            for url in common.server_urls(args):
                base_url_of(url)
        except ValueError as exc:
            raise CLIError(f"--server: {exc}") from None
    from ..scale.ray_engine import RayNotInstalledError, import_ray, run_shards_ray

    try:
        import_ray()
    except RayNotInstalledError as exc:
        raise CLIError(f"--engine ray: {exc}") from None
    return run_shards_ray, {"address": address, "workers": workers}


def shard_run(args: argparse.Namespace, data: str, *,
              formats: Mapping[str, str] | None = None) -> tuple[Path, Callable[..., Any], dict[str, Any], list[Any]]:
    """What a sharded subcommand that writes a folder checks before any work: the ``--out`` folder, the engine
    (:func:`shard_engine`: its runner and options) and the shards of ``data`` (none inside the output folder;
    ``formats``: the files taken, default the dataset files)."""
    from ..scale import SHARD_FORMATS, list_shards

    out = check_out_folder(args.out)
    runner, engine_options = shard_engine(args)
    try:
        shards = list_shards(data, exclude=out, formats=formats or SHARD_FORMATS)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    return out, runner, engine_options, shards


def score_shards(args: argparse.Namespace) -> None:
    """Score every shard of ``args.data`` into the folder ``args.out`` (see the module's docstring)."""
    from ..data import DatasetError
    from ..scale.score import ShardScorer

    out, runner, engine_options, shards = shard_run(args, args.data)
    show = not args.quiet
    # Ray's workers draw no bars: each shard's line on the driver is the progress
    bars = None if engine_options else (lambda total, what: progress(total, what, show))
    scorer = ShardScorer(ModelLoader.from_args(args), rescore=args.rescore, chat_template=args.chat_template,
                         n_alternatives=args.alternatives, batch_size=common.request_batch(args), num_beams=args.beams,
                         matcher=args.matcher, tolerance=args.tolerance, progress=bars)
    settings = {**model_settings(args), **scorer.settings()}
    command = recorded_command(getattr(args, "argv", []))
    summary = runner(shards, out, scorer, settings=settings, command=command, skip_errors=(DatasetError,),
                     on_shard=shard_reporter(args.quiet), **engine_options)
    finish_report(summary, len(shards), show=show)


def finish_report(summary: Any, total: int, *, show: bool) -> None:
    """A sharded run's last line on stderr (not with ``--quiet``), and CLIError naming the shards that failed."""
    if show:
        print(f"{summary.sentence()}; manifest: {summary.manifest}", file=sys.stderr)
    if summary.failed:
        names = ", ".join(r.shard.name for r in summary.failed[:3]) + (", ..." if len(summary.failed) > 3 else "")
        raise CLIError(f"{len(summary.failed):,} of {total:,} shards failed ({shown(names)}); the others are "
                       "written; fix them and run the same command again to do only those")
