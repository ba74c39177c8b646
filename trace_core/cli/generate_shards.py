"""``trace-core generate`` over shards: a folder or a glob pattern of prompt files -> one output folder of Parquet
shards (the rows a one-file run writes: answer, traces, labels against `reference`, beams if asked) with a manifest,
shard by shard, resuming where an earlier run stopped (:mod:`trace_core.scale`).

Sharded mode is chosen by ``prompts`` alone, as for ``score`` (:func:`~trace_core.cli.score_shards.is_sharded`).
``--engine`` picks what works the shards: this process (``stream``) or Ray Data actors (``ray``), each actor loading
the model or connecting to every ``--server`` once; with several servers each actor keeps at most ``--concurrency``
requests in flight at each server, so a server sees at most workers x ``--concurrency``.

A shard whose prompts cannot be read, or whose requests still fail after their retries (a server down mid-run),
fails alone: it gets no entry and the same command redoes it. Sampling without ``--seed`` draws anew on every run:
said on stderr, and the manifest's settings record ``"seed": null``; a rerun still skips the complete shards.

The chat template is settled once, before the shards, as a one-file run settles it, and the manifest records the
value (:func:`~trace_core.cli.score_shards.template_settings`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from trace_core.cli import common
from trace_core.cli._support import progress
from trace_core.cli.options import decoding
from trace_core.cli.score_shards import (
    ModelLoader,
    finish_report,
    loaded,
    locked,
    model_settings,
    recorded_command,
    say_template_change,
    shard_reporter,
    shard_run,
    template_settings,
)
from trace_core.data import DatasetError
from trace_core.record import ServerError
from trace_core.scale import PROMPT_FORMATS
from trace_core.scale.generate import ShardGenerator

__all__ = ["generate_settings", "generate_shards"]


def generate_settings(args: argparse.Namespace, work: Any) -> dict[str, Any]:
    """What shapes the output shards, as the manifest records them: the model or the servers (addresses without
    credentials, the served name, tokenizer, endpoint) and the work's decoding and labeling settings."""
    server = {"server_api": args.server_api} if common.server_urls(args) else {}
    return {**model_settings(args), **server, **work.settings()}


def generate_shards(args: argparse.Namespace) -> None:
    """Generate the answers of every shard of ``args.prompts`` into the folder ``args.out`` (see the module's
    docstring), the folder's lock held from before the model loads to the end."""
    out, runner, engine_options, shards = shard_run(args, args.prompts, formats=PROMPT_FORMATS)
    with locked(out):
        _generate_locked(args, out, runner, engine_options, shards)


def _generate_locked(args: argparse.Namespace, out: Any, runner: Callable[..., Any], engine_options: dict[str, Any],
                     shards: list[Any]) -> None:
    show = not args.quiet
    # Ray's workers draw no bars: each shard's line on the driver is the progress
    bars = None if engine_options else (lambda total, what: progress(total, what, show))
    loader = ModelLoader.from_args(args)

    def generator_with(chat_template: bool, load: Callable[[], Any] = loader) -> Any:
        return ShardGenerator(load, config=decoding(args, chat_template=chat_template),
                              batch_size=common.request_batch(args), num_beams=args.beams, matcher=args.matcher,
                              tolerance=args.tolerance, progress=bars)

    settings, lm = template_settings(args, out, shards, lambda v: generate_settings(args, generator_with(v)), loader,
                                     generating=True)
    say_template_change(out, shards, settings)
    generator = generator_with(args.chat_template, loaded(lm, loader, engine_options))
    del lm  # on Ray each worker loads its own: the driver keeps none
    common.warn_unseeded(generator.config, shards=True)
    summary = runner(shards, out, generator, settings=settings,
                     command=recorded_command(getattr(args, "argv", [])), skip_errors=(DatasetError, ServerError),
                     on_shard=shard_reporter(args.quiet), **engine_options)
    finish_report(summary, len(shards), show=show)
