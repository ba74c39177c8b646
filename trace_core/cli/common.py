"""What several subcommands do with their inputs and outputs: load the model that records traces, read a dataset
(with its summary on stderr), keep its usable rows under the shared policy, and write a dataset.

Subcommands call these through the module (``common.read_data(...)``), so a test can stand in for one of them in a
single place."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from trace_core.checks import counted
from trace_core.cli._support import CLIError, plain_warnings, progress, shown
from trace_core.data import DatasetWarning, read_dataset, write_dataset
from trace_core.data.prompts import empty_answers_note, has_chat_template
from trace_core.data.prompts import template_unused as unused
from trace_core.evaluation.run import SkippedSplitsWarning, TruncatedDistributionWarning
from trace_core.policy import one_class_message, usable_rows
from trace_core.record import ServerError, connect_server, connect_servers
from trace_core.record import load_model as load_local_model
from trace_core.traces.table import TraceTable, gather

__all__ = ["chat_template_setting", "empty_answers_warning", "load_model", "protocol_run", "read_data", "request_batch",
           "resolve_chat_template", "row_numbers", "say_template_unused", "server_applies_template", "server_urls",
           "template_unused", "usable", "write_data"]


def server_urls(args: argparse.Namespace) -> list[str]:
    """The ``--server`` addresses, in the order given: none, one, or several (the option may be repeated)."""
    given = getattr(args, "server", None)
    if not given:
        return []
    return [given] if isinstance(given, str) else [str(url) for url in given]


def request_batch(args: argparse.Namespace) -> int:
    """Prompts per model call: ``--batch-size``; with several servers at least as many as they take in flight
    (servers x ``--concurrency``), so that every server is kept busy (a server's answers do not depend on it)."""
    urls = server_urls(args)
    return max(args.batch_size, len(urls) * args.concurrency) if len(urls) > 1 else args.batch_size


def load_model(args: argparse.Namespace):
    """The local model (``--model``), the model server (one ``--server``) or the servers of one model (several,
    :class:`~trace_core.record.MultiServer`) that record the traces."""
    urls = server_urls(args)
    if urls:

        options = {"tokenizer": args.server_tokenizer, "api_key_env": args.api_key_env, "timeout": args.timeout,
                   "max_retries": args.retries, "concurrency": args.concurrency,
                   "top_logprobs": max(args.alternatives, 1), "full_distribution": args.full_distribution,
                   "api": args.server_api}
        if len(urls) > 1:
            try:
                return connect_servers(urls, args.server_model, **options)
            except ServerError as exc:
                raise CLIError(f"--server: {exc}") from exc
        try:
            return connect_server(urls[0], args.server_model, **options)
        except ServerError as exc:
            raise CLIError(f"--server {shown(urls[0])}: {exc}") from exc

    # A flag opts in; without it the environment's policy (off by default) applies. --threads: None is automatic (a
    # sharded run's ModelLoader carries no --threads yet: its loads choose automatically).
    return load_local_model(args.model, device=args.device, trust_remote_code=args.trust_remote_code or None,
                            allow_pickle_weights=args.allow_pickle_weights or None,
                            threads=getattr(args, "threads", None))


def server_applies_template(args: argparse.Namespace, *, generating: bool) -> bool:
    """Whether the server wraps each prompt in its own chat template: generating through its chat endpoint
    (``--server-api chat``); scoring always goes through completions, with the template applied here."""
    return generating and bool(server_urls(args)) and getattr(args, "server_api", "completions") == "chat"


def chat_template_setting(lm: Any, args: argparse.Namespace, *, generating: bool) -> bool:
    """``--chat-template`` resolved for the model ``lm``, as the traces (and a sharded run's manifest) record it: as
    given, else on when the model's tokenizer has a chat template (as the dashboard does); always on when the
    server applies its own (:func:`server_applies_template`). CLIError when ``--chat-template`` is given for a model
    whose tokenizer has none."""
    given = getattr(args, "chat_template", None)
    if server_applies_template(args, generating=generating):
        return True
    has = has_chat_template(lm)
    if given is None:
        return has
    if given and not has:
        raise CLIError("--chat-template: the model's tokenizer has no chat template; leave the option out (or give "
                       "--no-chat-template) to send the prompts as they are")
    return bool(given)


def resolve_chat_template(lm: Any, args: argparse.Namespace, *, generating: bool) -> None:
    """Set ``args.chat_template`` to :func:`chat_template_setting` once the model is loaded (everything after reads
    it), with :func:`say_template_unused`'s note."""
    args.chat_template = chat_template_setting(lm, args, generating=generating)
    say_template_unused(lm, args)


def template_unused(lm: Any, args: argparse.Namespace) -> bool:
    """Whether the model has a chat template that the prompts will not go through (``--no-chat-template``): an
    instruct model given a bare prompt often ends its answer at once, and its traces are not those of the answers
    the dashboard gets (which uses the template by default)."""
    return unused(lm, bool(getattr(args, "chat_template", False)))


def say_template_unused(lm: Any, args: argparse.Namespace) -> None:
    """Before the model runs, a note (unless ``--quiet``) when :func:`template_unused`: the template was turned off
    for a model that has one."""
    if template_unused(lm, args) and not args.quiet:
        print("note: --no-chat-template: the model has a chat template and the prompts go to it bare; an instruct "
              "model often answers nothing that way (by default the template is used, as the dashboard does)",
              file=sys.stderr)


def warn_unseeded(config: Any, *, shards: bool) -> None:
    """The warning on sampling without a seed: such answers cannot be drawn again (shard by shard, a rerun draws the
    incomplete shards anew)."""
    if config.do_sample and config.seed is None:
        where = ("the manifest records \"seed\": null); a rerun keeps the complete shards and draws the others anew"
                 if shards else "their traces record \"seed\": null; --seed N draws the same answers again)")
        print(f"warning: --sample without --seed: the answers cannot be drawn again ({where}", file=sys.stderr)


def empty_answers_warning(answers: Sequence[str], lm: Any, args: argparse.Namespace) -> str:
    """The warning on generated answers that are empty (:func:`~trace_core.data.prompts.empty_answers_note`, with
    :func:`template_unused` as the likely cause); "" when none is."""
    return empty_answers_note(answers, template_unused=template_unused(lm, args)) or ""


def read_data(path: str, *, require_label: bool, args: argparse.Namespace):
    """The dataset at ``path`` (:func:`trace_core.data.read_dataset`), with byte progress while reading and its
    summary on stderr (only its problems with ``--quiet``); CLIError when no row is valid."""
    import inspect
    import warnings

    options: dict[str, Any] = {}
    show = not getattr(args, "quiet", True)
    update, close = None, lambda: None
    if show and "progress" in inspect.signature(read_dataset).parameters:  # byte progress while reading
        update, close = progress(0, f"reading {Path(path).name}", True, unit="B")
        options["progress"] = update
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            dataset = read_dataset(path, matcher=getattr(args, "matcher", "exact"),
                                   tolerance=getattr(args, "tolerance", 1e-6), require_label=require_label,
                                   **options)
        finally:
            close()
    plain_warnings(caught, skip=(DatasetWarning,))  # the summary below says what DatasetWarning says, once
    if show or dataset.n_rejected:  # --quiet: only the problems (the summary names the rejected rows)
        print(dataset.summary(), file=sys.stderr)
    elif dataset.label_note:  # --quiet still says that labels are likely wrong
        print(f"warning: {shown(path)}: {dataset.label_note}", file=sys.stderr)
    if dataset.n_valid == 0:
        raise CLIError(f"{shown(path)}: no valid rows to use")
    return dataset


def row_numbers(dataset) -> list[int]:
    """Each row's number in the file it was read from (what messages name)."""
    return dataset.frame[dataset.row_column].tolist()


def usable(dataset, path: str, *, consequence: str | None = None):
    """The dataset's usable rows under the shared policy (:func:`trace_core.policy.usable_rows`), as the dashboard
    uses them: missing traces are an error; empty answers are left out with a warning, or are an error when
    ``consequence`` is None (flagging must score every row); one class only is an error saying ``consequence``."""
    from dataclasses import replace

    rows = usable_rows(dataset.traces, row_numbers=row_numbers(dataset))
    if rows.missing:
        raise CLIError(f"{shown(path)}: {rows.missing_message()}; record traces first with "
                       "`trace-core score DATA --model MODEL --out FILE`")
    if consequence is None:
        if rows.empty:
            raise CLIError(f"{shown(path)}: {rows.empty_message(left_out=False)}; remove them or record them "
                           "again")
        return dataset
    if rows.nothing_left_message():
        raise CLIError(f"{shown(path)}: {rows.nothing_left_message()}")
    for note in rows.notes():
        print(f"warning: {note}", file=sys.stderr)
    if len(rows.keep) < len(dataset.traces):
        keep = rows.keep.tolist()
        dataset = replace(dataset, frame=dataset.frame.iloc[keep].reset_index(drop=True),
                          traces=gather(dataset.traces, keep))
    message = one_class_message(dataset.frame["label"].to_numpy(), consequence)
    if message:
        raise CLIError(f"{shown(path)}: {message}")
    return dataset


def trace_table(dataset) -> Any:
    """The traces of a dataset that :func:`usable` passed (every row has one) as one
    :class:`~trace_core.traces.table.TraceTable`: the reader's table itself, or one made once from the list."""
    return TraceTable.from_traces(dataset.traces)


def write_data(frame: pd.DataFrame, traces: Sequence[Any] | None, out: str, *, quiet: bool = False) -> None:
    """``frame`` with its traces written to ``out`` (:func:`trace_core.data.write_dataset`), said on stderr."""
    write_dataset(frame, out, traces=traces)
    if not quiet:
        print(f"wrote {counted(len(frame), 'row')} to {out}", file=sys.stderr)


def protocol_run(call: Any, *, title: str, args: argparse.Namespace, config: Any) -> Any:
    """``call(progress)`` (one evaluation) with a bar of its splits on stderr and the library's warnings as plain
    lines: skipped splits named with their group and the option that avoids them (a truncated distribution is said
    once for the whole report by ``evaluate``'s report)."""
    where = f" ({title})" if title else ""
    update, close = progress(config.n_splits, f"splits{where}", not args.quiet, unit="split")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = call(update)
        finally:
            close()
    plain_warnings(caught, skip=(SkippedSplitsWarning, TruncatedDistributionWarning))
    if result.skipped_splits:
        print(f"warning: {title or 'the data'}: {result.skipped_splits:,} of {counted(config.n_splits, 'split')} "
              "skipped (one "
              "class only in their calibration or evaluation part); use --stratified to keep both classes in every "
              "part", file=sys.stderr)
    return result
