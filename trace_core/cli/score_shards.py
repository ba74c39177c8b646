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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from trace_core.checks import counted
from trace_core.cli import common
from trace_core.cli._support import DATASET_OUT, CLIError, progress, shown
from trace_core.data import DatasetError
from trace_core.record.addresses import base_url_of
from trace_core.scale import SHARD_FORMATS, check_output_names, is_pattern, list_shards, run_shards
from trace_core.scale.lock import FolderInUseError, folder_lock
from trace_core.scale.manifest import plain_settings, read_entry
from trace_core.scale.ray_engine import RayNotInstalledError, import_ray, run_shards_ray
from trace_core.scale.score import ShardScorer
from trace_core.settings import redact_secrets

__all__ = ["TEMPLATE_DEFAULT", "ModelLoader", "check_out_folder", "finish_report", "is_sharded", "loaded", "locked",
           "model_settings", "recorded_command", "refuse_engine_options", "say_skipped", "say_template_change",
           "score_shards", "shard_engine", "shard_reporter", "shard_run", "template_settings"]

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
    threads: int | None = None  # torch's CPU threads for a local model (not a setting of the shards: same answers)

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
            print(f"warning: [{index}/{total}] {shown(shard.name)}: failed: {redact_secrets(result.error)}",
                  file=sys.stderr)
            return
        if not quiet:
            what = ("already complete, skipped" if result.status == "skipped" else
                    f"{counted(entry.rows_read, 'row')} read: {entry.rows_kept:,} kept, "
                    f"{entry.rows_rejected:,} rejected -> {entry.output}")
            print(f"[{index}/{total}] {shard.name}: {what}", file=sys.stderr)
        for problem in result.problems[:_SHOWN_PROBLEMS]:
            print(f"rejected: {redact_secrets(problem)}", file=sys.stderr)
        if len(result.problems) > _SHOWN_PROBLEMS:
            more = len(result.problems) - _SHOWN_PROBLEMS
            print(f"rejected: {shard.name}: and {more:,} more (all in {shown(entry.output)}'s manifest entry)",
                  file=sys.stderr)
        for note in result.notes:
            print(f"warning: {redact_secrets(note)}", file=sys.stderr)
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

        try:
            for url in common.server_urls(args):
                base_url_of(url)
        except ValueError as exc:
            raise CLIError(f"--server: {exc}") from None

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
    out = check_out_folder(args.out)
    runner, engine_options = shard_engine(args)
    try:
        shards = list_shards(data, exclude=out, formats=formats or SHARD_FORMATS, on_skip=say_skipped)
        check_output_names(shards)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    return out, runner, engine_options, shards


def say_skipped(line: str) -> None:
    """:func:`~trace_core.scale.list_shards`'s ``on_skip``: a file left out, said as a warning line on stderr."""
    print(f"warning: {redact_secrets(line)}", file=sys.stderr)


@contextmanager
def locked(out: Path) -> Iterator[Path]:
    """Hold the output folder's lock (:func:`~trace_core.scale.lock.folder_lock`) for a whole sharded command, taken
    before any work (a model loaded, a shard read): a second command writing the same folder meanwhile is refused
    in one line."""
    try:
        with folder_lock(out):
            yield out
    except FolderInUseError as exc:
        raise CLIError(str(exc)) from None


#: The settings' mark of a chat template resolved from the model's tokenizer (neither --chat-template nor
#: --no-chat-template given).
TEMPLATE_DEFAULT = "chat_template_default"
_TEMPLATE_KEYS = ("chat_template", TEMPLATE_DEFAULT)


def _stored_settings(out: Path, shard: Any) -> dict[str, Any] | None:
    """The settings that the manifest entry of ``shard`` in ``out`` records (None without an entry)."""
    entry = read_entry(out, shard.output)
    return None if entry is None else entry.settings


def template_settings(args: argparse.Namespace, out: Path, shards: Sequence[Any],
                      settings_of: Callable[[bool], dict[str, Any]], loader: Callable[[], Any], *,
                      generating: bool) -> tuple[dict[str, Any], Any]:
    """A sharded run's settings (``settings_of(chat_template)``) with ``--chat-template`` resolved as a one-file run
    resolves it (:func:`~trace_core.cli.common.chat_template_setting`), and the model when it was loaded for that
    (else None); ``args.chat_template`` is set to the value.

    An option given is stored as given. The default depends on the model's tokenizer, so the settings also mark it
    (``"chat_template_default": true``): a shard that an earlier run of the same command completed tells the value
    without loading the model (a rerun of complete shards needs no model), and a folder made before the template
    became the default (which stored ``false`` without the mark) is never taken for this run's: its shards are made
    again (:func:`say_template_change`)."""
    given = getattr(args, "chat_template", None)
    lm, value = None, given
    if given is None:
        if common.server_applies_template(args, generating=generating):
            value = True
        else:
            stored = [_stored_settings(out, shard) for shard in shards]
            value = next((v for v in (True, False)
                          if plain_settings({**settings_of(v), TEMPLATE_DEFAULT: True}) in stored), None)
        if value is None:  # no earlier run of this command to tell: the model's tokenizer does
            lm = loader()
            value = common.chat_template_setting(lm, args, generating=generating)
    args.chat_template = bool(value)
    settings = settings_of(args.chat_template)
    return ({**settings, TEMPLATE_DEFAULT: True} if given is None else settings), lm


def say_template_change(out: Path, shards: Sequence[Any], settings: Mapping[str, Any]) -> None:
    """A warning naming the shards in ``out`` made with another chat-template setting and otherwise the same: they
    do not match this run's settings, so they are made again, never mixed with this run's shards (e.g. a folder made
    before the model's chat template became the default)."""
    settings = plain_settings(settings)
    rest = {k: v for k, v in settings.items() if k not in _TEMPLATE_KEYS}
    other: list[tuple[str, dict[str, Any]]] = []
    for shard in shards:
        stored = _stored_settings(out, shard)
        if stored is not None and stored != settings and {
                k: v for k, v in stored.items() if k not in _TEMPLATE_KEYS} == rest:
            other.append((shard.name, stored))
    if not other:
        return
    names = ", ".join(name for name, _ in other[:3]) + (", ..." if len(other) > 3 else "")
    state = "on" if settings["chat_template"] else "off"
    was = "was" if len(other) == 1 else "were"
    first = other[0][1]
    keep = ("" if TEMPLATE_DEFAULT in first or any(s != first for _, s in other) else
            f"; give {'--chat-template' if first.get('chat_template') else '--no-chat-template'} to keep them")
    print(f"warning: {shown(str(out))}: {counted(len(other), 'shard')} ({shown(names)}) {was} made with another "
          f"chat-template setting (e.g. by a run before the model's chat template became the default); this run has "
          f"the template {state} and makes them again{keep}", file=sys.stderr)


def score_shards(args: argparse.Namespace) -> None:
    """Score every shard of ``args.data`` into the folder ``args.out`` (see the module's docstring), the folder's
    lock held from before the model loads to the end."""
    out, runner, engine_options, shards = shard_run(args, args.data)
    with locked(out):
        _score_locked(args, out, runner, engine_options, shards)


def _score_locked(args: argparse.Namespace, out: Path, runner: Callable[..., Any], engine_options: dict[str, Any],
                  shards: list[Any]) -> None:
    show = not args.quiet
    # Ray's workers draw no bars: each shard's line on the driver is the progress
    bars = None if engine_options else (lambda total, what: progress(total, what, show))
    loader = ModelLoader.from_args(args)

    def scorer_with(chat_template: bool, load: Callable[[], Any] = loader) -> Any:
        return ShardScorer(load, rescore=args.rescore, chat_template=chat_template, n_alternatives=args.alternatives,
                           batch_size=common.request_batch(args), num_beams=args.beams, matcher=args.matcher,
                           tolerance=args.tolerance, progress=bars)

    settings, lm = template_settings(args, out, shards, lambda v: {**model_settings(args), **scorer_with(v).settings()},
                                     loader, generating=False)
    say_template_change(out, shards, settings)
    scorer = scorer_with(args.chat_template, loaded(lm, loader, engine_options))
    del lm  # on Ray each worker loads its own: the driver keeps none
    command = recorded_command(getattr(args, "argv", []))
    summary = runner(shards, out, scorer, settings=settings, command=command, skip_errors=(DatasetError,),
                     on_shard=shard_reporter(args.quiet), **engine_options)
    finish_report(summary, len(shards), show=show)


def loaded(lm: Any, loader: Callable[[], Any], engine_options: Mapping[str, Any]) -> Callable[[], Any]:
    """What a shard's work loads its model with: the model the driver loaded already (:func:`template_settings`)
    when the shards run in this process, else ``loader`` (Ray's workers each load their own)."""
    if lm is None or engine_options:
        return loader
    return lambda: lm


def finish_report(summary: Any, total: int, *, show: bool) -> None:
    """A sharded run's last line on stderr (not with ``--quiet``), and CLIError naming the shards that failed."""
    if summary.unlisted:
        print(f"warning: {shown(str(summary.manifest.parent))}: {summary.unlisted_sentence()}", file=sys.stderr)
    if show:
        print(f"{summary.sentence()}; manifest: {summary.manifest}", file=sys.stderr)
    if summary.failed:
        names = ", ".join(r.shard.name for r in summary.failed[:3]) + (", ..." if len(summary.failed) > 3 else "")
        raise CLIError(f"{len(summary.failed):,} of {counted(total, 'shard')} failed ({shown(names)}); the others are "
                       "written; fix them and run the same command again to do only those")
