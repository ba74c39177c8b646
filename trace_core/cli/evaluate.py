"""``trace-core evaluate``: a dataset with traces and labels -> the table of TRACE+, TRACE and the baselines on
held-out splits (Markdown, CSV or JSON), for the whole file or for each value of a column and their average; an
HTML report on request."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trace_core.checks import AnswerValueError, clip, counted, shorten
from trace_core.cli import common
from trace_core.cli._support import (
    HTML_OUT,
    REPORT_OUT,
    CLIError,
    check_not_input,
    check_out,
    cli_words,
    shown,
)
from trace_core.cli.common import protocol_run
from trace_core.cli.evaluate_shards import evaluate_sharded
from trace_core.cli.options import evaluation_config
from trace_core.cli.score_shards import is_sharded, refuse_engine_options
from trace_core.data import parse_beam_logprobs
from trace_core.evaluation.results import (
    extended_entropy_note,
    extended_needing_entropy,
    report_markdown,
    truncation_note,
)
from trace_core.evaluation.run import (
    NoUsableSplitError,
    average_results,
    evaluate,
)
from trace_core.methods.registry import METHODS, method_names
from trace_core.methods.semantic import load_embedder
from trace_core.policy import METRICS_UNDEFINED, one_class_message
from trace_core.report.html import report_html
from trace_core.traces.table import TraceTable

__all__ = ["cmd_evaluate"]


def _beams(dataset) -> list[list[float]] | None:
    if "beam_logprobs" not in dataset.frame.columns:
        return None
    return parse_beam_logprobs(dataset.frame["beam_logprobs"], common.row_numbers(dataset))


def _evaluate_one(traces: TraceTable, labels: np.ndarray, beams: list | None, *, title: str, args: argparse.Namespace,
                  config: Any, methods: list[str] | None, embedder: Any, rows: list[int], split_groups: Any = None):
    """One evaluation of a file's answers (:func:`protocol_run`), a bad answer named by its row in the file."""
    if not args.quiet:
        where = f" ({title})" if title else ""
        print(f"scoring {counted(len(traces), 'answer')}{where}: TRACE features and baselines", file=sys.stderr)

    def call(update: Any) -> Any:
        try:
            return evaluate(traces, labels, config=config, methods=methods, beam_logprobs=beams, embedder=embedder,
                            progress=update, split_groups=split_groups)
        except AnswerValueError as exc:  # the library counts answers from 0; the user counts file rows
            raise CLIError(f"{shown(args.data)}: row {rows[exc.index]}: {exc.reason}") from exc

    return protocol_run(call, title=title, args=args, config=config)


def _report_warnings(results: dict[str, Any]) -> None:
    """The report's notes that need a ``warning:`` line, one line each: a truncated distribution (over every answer
    evaluated; else each group where it is), extended TRACE+ variants that need entropy (asked for by --extended on
    data without it)."""
    last = list(results.values())[-1]  # the only result, or the average over the groups
    truncated = truncation_note(*last.certain_tokens)
    if truncated:
        print(f"warning: {truncated}", file=sys.stderr)
    else:
        for title, result in results.items():
            note = truncation_note(*result.certain_tokens) if result is not last else ""
            if note:
                print(f"warning: {clip(title)}: {note}", file=sys.stderr)
    extended = extended_needing_entropy(last.skipped)
    if extended and extended_entropy_note(extended) in last.notes:
        print(f"warning: {extended_entropy_note(extended)}", file=sys.stderr)


def _report_dependency() -> None:
    """Plotly, which the HTML report's figures need: checked before any work."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise CLIError("--report needs plotly: pip install 'trace-core[report]'") from None


def _check_outputs(args: argparse.Namespace) -> str | None:
    """The format ``--out`` names (None without ``--out``), after checking ``--out`` and ``--report`` before any
    work: writable names with the right extensions, neither over an input, and plotly there for the report."""
    out_format = None
    if args.out:
        out_format = check_out(args.out, REPORT_OUT)
        if args.format and args.format != out_format:
            raise CLIError(f"--out {shown(args.out)}: its extension names {out_format}, not --format {args.format}; "
                           "give a name that matches")
        check_not_input(args.out, [("the input file", args.data)], written="the report")
    if args.report:
        check_out(args.report, HTML_OUT, option="--report")
        check_not_input(args.report, [("the input file", args.data), ("--out", args.out)],
                        written="the HTML report")
        _report_dependency()
    return out_format


def _methods(args: argparse.Namespace) -> list[str] | None:
    """The methods to evaluate: ``--methods`` (None: the default ones), then with ``--extended`` the TRACE+
    feature-set and surprisal-only variants."""
    methods = args.methods or None
    if args.extended:  # the TRACE+ feature-set and surprisal-only variants, after the asked-for (or default) methods
        methods = (methods or method_names()) + [m.name for m in METHODS.values() if m.extended]
    return methods


def _embedder(args: argparse.Namespace) -> Any:
    """The sentence-embedding model of the semantic baselines (``--embedder``), or None without the option."""
    if args.embedder is None:
        return None

    return load_embedder(args.embedder or None)


def _by_group(args: argparse.Namespace, dataset, traces: TraceTable, labels: np.ndarray, beams: list | None,
              rows: list[int], options: dict[str, Any], split_groups: np.ndarray | None = None) -> dict[str, Any]:
    """``--group-by``: each value of the column evaluated on its own, then their average; a group with one class
    only, or too few of one class for any split, is skipped with a warning line; CLIError when none is left."""
    if args.group_by not in dataset.frame.columns:
        raise CLIError(f"--group-by: no column {shorten(args.group_by)}; columns are "
                       f"{shorten(list(dataset.frame.columns))}")
    keys = dataset.frame[args.group_by].astype(str).to_numpy()
    groups, skipped = {}, 0
    for key in dict.fromkeys(keys):
        idx = np.flatnonzero(keys == key)
        one_class = one_class_message(labels[idx], "this group cannot be evaluated")
        if one_class:  # one such group must not stop the others: skipped, named (shortened: user data)
            skipped += 1
            print(f"warning: --group-by {shorten(args.group_by)}: skipped the group {shorten(key)}: {one_class}",
                  file=sys.stderr)
            continue
        title = f"{args.group_by} = {key}"
        try:
            groups[title] = _evaluate_one(traces.take(idx), labels[idx],
                                          None if beams is None else [beams[i] for i in idx],
                                          title=f"{clip(args.group_by)} = {clip(key)}",
                                          rows=[rows[i] for i in idx], **options,
                                          split_groups=None if split_groups is None else split_groups[idx])
        except NoUsableSplitError as exc:  # too few of one class for any split: this group only
            skipped += 1
            print(f"warning: --group-by {shorten(args.group_by)}: skipped the group {shorten(key)}: "
                  f"{cli_words(str(exc))}", file=sys.stderr)
    if not groups:
        none = "its one group cannot" if skipped == 1 else f"none of the {skipped:,} groups can"
        raise CLIError(f"--group-by {shorten(args.group_by)}: {none} be evaluated "
                       "(each has one class only, or too few answers of one class for any split); group by a "
                       "column whose groups hold enough correct and wrong answers")
    return {**groups, "average": average_results(groups)}


def _table_text(results: dict[str, Any], fmt: str, calibrator: str) -> str:
    """The results as ``fmt``: Markdown (under ``calibrator``), CSV or JSON (both scalar calibrators)."""
    if fmt == "markdown":
        return report_markdown(results, calibrator=calibrator)
    if fmt == "csv":  # both scalar calibrators, one row per (method, metric, calibrator)
        return pd.concat([r.summary.assign(group=title or "all") for title, r in results.items()]).to_csv(index=False)
    if fmt == "json":
        return json.dumps({title or "all": r.to_dict() for title, r in results.items()}, indent=2) + "\n"
    raise CLIError(f"unknown --format {shorten(fmt)}; use markdown, csv or json")


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def _command_line(args: argparse.Namespace) -> str:
    """The command as typed (each argument quoted for a shell), for the files it writes."""
    return " ".join(["trace-core", *(_quote(a) for a in args.argv)])


def _labels_words(label_source: str, matcher: str) -> str:
    """Where the labels came from, for the report."""
    if label_source == "label":
        return "the file's `label` column"
    if label_source == "mixed":
        return f"each shard's `label` column, or matched against its `reference` ({matcher})"
    return f"matched against `reference` ({matcher})"


def _write_report(args: argparse.Namespace, results: dict[str, Any], label_source: str, calibrator: str) -> None:
    """``--report``: the self-contained HTML report, with what data it was run on and how."""
    answers = sum(r.n_answers for t, r in results.items() if t != "average")
    data = {"file": Path(args.data).name, "answers": f"{answers:,}",
            "labels": _labels_words(label_source, args.matcher),
            "command": _command_line(args)}
    Path(args.report).write_text(report_html(results, title=f"TRACE evaluation of {Path(args.data).name}",
                                             data=data, calibrator=calibrator), encoding="utf-8")
    print(f"wrote the report to {args.report}", file=sys.stderr)


def _evaluate_file(args: argparse.Namespace, *, config: Any, methods: list[str] | None,
                   embedder: Any) -> tuple[dict[str, Any], str]:
    """One dataset file: the results (``{"": result}``, or one per group and their average) and how the labels
    were found."""
    dataset = common.usable(common.read_data(args.data, require_label=True, args=args), args.data,
                            consequence=METRICS_UNDEFINED)
    traces = common.trace_table(dataset)
    labels = dataset.frame["label"].to_numpy()
    beams = _beams(dataset)
    rows = common.row_numbers(dataset)
    options = dict(args=args, config=config, methods=methods, embedder=embedder)
    groups = _split_groups(args, dataset.frame)
    if args.group_by:
        return _by_group(args, dataset, traces, labels, beams, rows, options, groups), dataset.label_source
    return ({"": _evaluate_one(traces, labels, beams, title="", rows=rows, **options, split_groups=groups)},
            dataset.label_source)


def _split_groups(args: argparse.Namespace, frame: pd.DataFrame) -> np.ndarray | None:
    """``--split-by``: each row's value of that column, which every split keeps whole (None without the option)."""
    if not getattr(args, "split_by", None):
        return None
    if args.split_by not in frame.columns:
        raise CLIError(f"--split-by: no column {shorten(args.split_by)}; columns are {shorten(list(frame.columns))}")
    values = frame[args.split_by]
    missing = np.flatnonzero(values.isna().to_numpy())
    if missing.size:
        row = frame["row"].iloc[int(missing[0])] if "row" in frame.columns else int(missing[0]) + 1
        raise CLIError(f"--split-by {shorten(args.split_by)}: row {row} has no value; every answer needs its group")
    return values.astype(str).to_numpy()


def cmd_evaluate(args: argparse.Namespace) -> None:
    out_format = _check_outputs(args)
    if getattr(args, "split_by", None) and args.stratified:
        raise CLIError("--split-by keeps each group whole in every split and cannot also --stratified; use one")
    config = evaluation_config(args)
    options = dict(config=config, methods=_methods(args), embedder=_embedder(args))
    if is_sharded(args.data):
        results, label_source = evaluate_sharded(args, **options)
    else:
        refuse_engine_options(args)
        if getattr(args, "scores_out", None):
            raise CLIError("--scores-out keeps the per-answer scores of a folder or pattern of shards; DATA is one "
                           "file")
        results, label_source = _evaluate_file(args, **options)
    _report_warnings(results)
    fmt = args.format or out_format or "markdown"
    text = _table_text(results, fmt, config.scalar_calibrator)
    # The table goes to --out when given, else to standard output; --report is always in addition.
    if args.out:
        if fmt == "markdown":
            text = f"Generated by `{_command_line(args)}`.\n\n" + text
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote results to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    if args.report:
        _write_report(args, results, label_source, config.scalar_calibrator)
