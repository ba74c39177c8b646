"""Command line: ``python -m trace_core`` or ``trace-core``.

Subcommands::

    generate   prompts file -> answers + traces (a local model)
    score      labeled dataset -> the same rows with traces (teacher forcing with a local model)
    evaluate   dataset with traces and labels -> TRACE / TRACE+ / baselines results table
    fit        dataset with traces and labels -> calibrator (JSON): TRACE+, or TRACE or a baseline calibrated
    flag       dataset with traces + calibrator -> the low-confidence answers (CSV / JSONL)

Errors are one line on stderr with exit status 1 (2 for usage errors); ``--debug`` shows the traceback. Which rows
are usable (missing traces, empty answers, one class) and the words that say so come from :mod:`trace_core.policy`,
shared with the dashboard; environment settings are read by :mod:`trace_core.settings` (through the library), never
here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._checks import AnswerValueError, clip, shorten
from ._cli_support import (
    _CALIBRATOR_OUT,
    _DATASET_OUT,
    _FLAGGED_OUT,
    _HTML_OUT,
    _REPORT_OUT,
    _TOKENS_OUT,
    CLIError,
    _check_not_input,
    _check_out,
    _cli_words,
    _plain_warnings,
    _progress,
    _regular_file,
    _say_drift,
    _shown,
    close_progress_bars,
)
from .settings import redact_secrets

__all__ = ["CLIError", "build_parser", "main"]




def _load_model(args: argparse.Namespace):
    """The local model (``--model``) or the model server (``--server``) that records the traces."""
    if args.server:
        from .record.server import ServerError, connect_server

        try:
            return connect_server(args.server, args.server_model, tokenizer=args.server_tokenizer,
                                  api_key_env=args.api_key_env, timeout=args.timeout, max_retries=args.retries,
                                  concurrency=args.concurrency, top_logprobs=max(args.alternatives, 1),
                                  full_distribution=args.full_distribution, api=args.server_api)
        except ServerError as exc:
            raise CLIError(f"--server {_shown(args.server)}: {exc}") from exc
    from .record import load_model

    # A flag opts in; without it the environment's policy (off by default) applies.
    return load_model(args.model, device=args.device, trust_remote_code=args.trust_remote_code or None,
                      allow_pickle_weights=args.allow_pickle_weights or None)


def _check_model_choice(args: argparse.Namespace) -> None:
    """Exactly one of --model and --server; --server needs --server-model and cannot run beam search."""
    if not hasattr(args, "server"):
        return
    if bool(args.model) == bool(args.server):
        raise CLIError("give --model (a local model) or --server URL with --server-model NAME (a model server), "
                       "not both or neither")
    if args.server and not args.server_model:
        raise CLIError("--server needs --server-model: the name the server serves the model under")
    if args.server and args.beams:
        raise CLIError("--beams needs a local model (--model): model servers do not return beam scores")
    if not args.server:
        given = [o for o, v in (("--server-model", args.server_model), ("--server-tokenizer", args.server_tokenizer),
                                ("--full-distribution", args.full_distribution),
                                ("--server-api", args.server_api != "completions")) if v]
        if given:
            raise CLIError(f"{', '.join(given)}: only with --server")


def _read(path: str, *, require_label: bool, args: argparse.Namespace):
    import inspect
    import warnings

    from .data import DatasetWarning, read_dataset

    options: dict[str, Any] = {}
    show = not getattr(args, "quiet", True)
    update, close = None, lambda: None
    if show and "progress" in inspect.signature(read_dataset).parameters:  # byte progress while reading
        update, close = _progress(0, f"reading {Path(path).name}", True, unit="B")
        options["progress"] = update
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            dataset = read_dataset(path, matcher=getattr(args, "matcher", "exact"),
                                   tolerance=getattr(args, "tolerance", 1e-6), require_label=require_label,
                                   **options)
        finally:
            close()
    _plain_warnings(caught, skip=(DatasetWarning,))  # the summary below says what DatasetWarning says, once
    if show or dataset.n_rejected:  # --quiet: only the problems (the summary names the rejected rows)
        print(dataset.summary(), file=sys.stderr)
    if dataset.n_valid == 0:
        raise CLIError(f"{_shown(path)}: no valid rows to use")
    return dataset


def _row_numbers(dataset) -> list[int]:
    return dataset.frame[dataset.row_column].tolist()


def _usable(dataset, path: str, *, consequence: str | None = None):
    """The dataset's usable rows under the shared policy (:func:`trace_core.policy.usable_rows`), as the dashboard
    uses them: missing traces are an error; empty answers are left out with a warning, or are an error when
    ``consequence`` is None (flagging must score every row); one class only is an error saying ``consequence``."""
    from dataclasses import replace

    from .policy import one_class_message, usable_rows

    usable = usable_rows(dataset.traces, row_numbers=_row_numbers(dataset))
    if usable.missing:
        raise CLIError(f"{_shown(path)}: {usable.missing_message()}; record traces first with "
                       "`trace-core score DATA --model MODEL --out FILE`")
    if consequence is None:
        if usable.empty:
            raise CLIError(f"{_shown(path)}: {usable.empty_message(left_out=False)}; remove them or record them "
                           "again")
        return dataset
    if usable.nothing_left_message():
        raise CLIError(f"{_shown(path)}: {usable.nothing_left_message()}")
    for note in usable.notes():
        print(f"warning: {note}", file=sys.stderr)
    if len(usable.keep) < len(dataset.traces):
        keep = usable.keep.tolist()
        dataset = replace(dataset, frame=dataset.frame.iloc[keep].reset_index(drop=True),
                          traces=[dataset.traces[i] for i in keep])
    message = one_class_message(dataset.frame["label"].to_numpy(), consequence)
    if message:
        raise CLIError(f"{_shown(path)}: {message}")
    return dataset


def _decoding(args: argparse.Namespace):
    from .trace import DecodingConfig

    return DecodingConfig(max_new_tokens=args.max_new_tokens, do_sample=args.sample, temperature=args.temperature,
                          top_k=args.top_k, top_p=args.top_p, seed=args.seed, n_alternatives=args.alternatives,
                          chat_template=args.chat_template)


def _evaluation_config(args: argparse.Namespace):
    from .evaluate import EvaluationConfig

    return EvaluationConfig(n_splits=args.splits, calibration_fraction=args.calibration_fraction,
                            stratified=args.stratified, seed=args.seed, n_bins=args.bins,
                            scalar_calibrator=args.calibrator)


def _check_options(args: argparse.Namespace) -> None:
    """Every numeric option, checked by the library's own rules before a file is read or a model loaded, so that a
    bad value never costs a run (the messages name keyword arguments; :func:`_cli_words` turns them into options)."""
    from ._checks import check_int, check_real

    _check_model_choice(args)
    if getattr(args, "server", None):
        check_int(args.concurrency, "concurrency", minimum=1)
        check_int(args.retries, "max_retries", minimum=0)
        check_real(args.timeout, "timeout", minimum=0, low_open=True)
    if hasattr(args, "max_new_tokens"):
        _decoding(args)
    if hasattr(args, "splits"):
        _evaluation_config(args)
    for option, keyword, minimum in (("batch_size", "batch_size", 1), ("alternatives", "n_alternatives", 0)):
        if hasattr(args, option):
            check_int(getattr(args, option), keyword, minimum=minimum)
    if getattr(args, "beams", 0):  # 0 is off; beams need at least 2
        check_int(args.beams, "num_beams", minimum=2)
    if hasattr(args, "C"):
        check_real(args.C, "C", minimum=0, low_open=True)
    if hasattr(args, "tolerance"):
        check_real(args.tolerance, "tolerance", minimum=0.0, finite=False)
    if getattr(args, "threshold", None) is not None:
        check_real(args.threshold, "threshold", minimum=0, maximum=1)
    if getattr(args, "coverage", None) is not None:
        check_real(args.coverage, "coverage", minimum=0, maximum=1, low_open=True)
    if getattr(args, "target_risk", None) is not None:
        check_real(args.target_risk, "target_risk", minimum=0, maximum=1)
    if getattr(args, "max_risk", None) is not None:
        check_real(args.max_risk, "max_risk", minimum=0, maximum=1, low_open=True, high_open=True)
        check_real(args.delta, "delta", minimum=0, maximum=1, low_open=True, high_open=True)
        if not args.risk_data:
            raise CLIError("--max-risk needs --risk-data: labeled answers, not those the calibrator was fitted on, "
                           "to choose the guaranteed threshold")
    elif getattr(args, "risk_data", None):
        raise CLIError("--risk-data is for --max-risk (a guaranteed error rate); give --max-risk ALPHA too")


def _rows_text(errors: Sequence[Any], shown: int = 3) -> str:
    """The first ``shown`` row errors, and how many more, for a one-line message (each quotes at most ~60 characters
    of the file)."""
    more = len(errors) - shown
    return "; ".join(clip(str(e)) for e in errors[:shown]) + (f"; and {more:,} more" if more > 0 else "")


def _read_prompts(path: str, args: argparse.Namespace | None = None) -> tuple[pd.DataFrame, list[Any] | None,
                                                                               list[int]]:
    """The prompts to generate from (:func:`trace_core.data.prompts.read_prompts`): (the rows as a frame, each row's
    `reference` or None without that column, each row's number in the file). Rows without a prompt are named in one
    warning line; the columns that describe the input's answers are left out, and said so unless ``--quiet``."""
    from . import settings
    from .data import DatasetError
    from .data.prompts import read_prompts

    quiet = bool(getattr(args, "quiet", False))
    p = _regular_file(path)  # never /dev/zero (endless) or a FIFO (blocks)
    update, close = _progress(0, f"reading {p.name}", not quiet and p.suffix.lower() not in (".txt", ""), unit="B")
    try:
        read = read_prompts(p, progress=update, max_bytes=settings.get("TRACE_MAX_DATA_MB") * 2**20,
                            max_cell_chars=settings.get("TRACE_MAX_CELL_MB") * 2**20)
    except DatasetError as exc:
        raise CLIError(f"{_shown(path)}: {exc}") from None
    finally:
        close()
    if read.skipped:
        rows = len({e.row for e in read.skipped})
        print(f"warning: {_shown(path)}: skipped {rows:,} of {read.n_read:,} rows ({_rows_text(read.skipped)})",
              file=sys.stderr)
    if not quiet and p.suffix.lower() not in (".txt", ""):
        print(f"{read.n_read:,} rows read: {len(read.rows):,} prompts", file=sys.stderr)
        if read.dropped:
            dropped = read.dropped
            labels = (f"; the generated answers are labeled against `reference` (--matcher "
                      f"{getattr(args, 'matcher', 'exact')})" if read.references is not None
                      else "; give a `reference` column to label the generated answers" if "label" in dropped
                      else "")
            names = ", ".join(f"`{clip(c, 60)}`" for c in dropped[:8]) + (", ..." if len(dropped) > 8 else "")
            verb = "it describes" if len(dropped) == 1 else "they describe"
            print(f"{_shown(path)}: dropped {names}: {verb} the input's answers, which generate replaces{labels}",
                  file=sys.stderr)
    return read.frame, read.references, read.rows


def _labels_of(answers: Sequence[str], references: Sequence[Any], rows: Sequence[int], path: str,
               args: argparse.Namespace) -> list[int | None]:
    """Each generated answer's 0/1 label against its row's `reference` (:func:`trace_core.data.prompts.label_answers`,
    by ``--matcher`` / ``--tolerance``); None, with one warning line naming the rows, where the reference is missing
    or unusable (``evaluate`` then rejects those rows, naming the label)."""
    from .data.prompts import label_answers

    labels, problems = label_answers(answers, references, rows, matcher=args.matcher, tolerance=args.tolerance)
    if problems:
        print(f"warning: {_shown(path)}: left {len(problems):,} of {len(labels):,} generated answers unlabeled, their "
              f"`reference` cannot label them ({_rows_text(problems)})", file=sys.stderr)
    return labels


def _write(frame: pd.DataFrame, traces: Sequence[Any] | None, out: str, *, quiet: bool = False) -> None:
    from .data import write_dataset

    write_dataset(frame, out, traces=traces)
    if not quiet:
        print(f"wrote {len(frame):,} rows to {out}", file=sys.stderr)


def cmd_generate(args: argparse.Namespace) -> None:
    from .record import beam_logprobs, generate_traces

    _check_out(args.out, _DATASET_OUT)
    _check_not_input(args.out, [("the prompts file", args.prompts)], written="the generated answers")
    frame, references, rows = _read_prompts(args.prompts, args)
    lm = _load_model(args)
    prompts = frame["prompt"].astype(str).tolist()
    update, close = _progress(len(prompts), "generating", not args.quiet)
    try:
        traces = generate_traces(lm, prompts, config=_decoding(args), batch_size=args.batch_size, progress=update)
    finally:
        close()
    frame = frame.copy()
    answers = [t.answer for t in traces]
    if "answer" in frame.columns:
        frame["answer"] = answers
    else:  # a prompts-only file: the answer next to its prompt
        frame.insert(frame.columns.get_loc("prompt") + 1, "answer", answers)
    if references is not None:  # the generated answers' labels; the input's label column was left out on reading
        labels = _labels_of(answers, references, rows, args.prompts, args)
        frame["label"] = pd.Series(labels, index=frame.index, dtype="Int64")  # 0/1, empty where unlabeled
    if args.beams:
        frame["beam_logprobs"] = [json.dumps(b) for b in beam_logprobs(lm, prompts, num_beams=args.beams,
                                                                          max_new_tokens=args.max_new_tokens,
                                                                          chat_template=args.chat_template)]
    _write(frame, traces, args.out, quiet=args.quiet)


def cmd_score(args: argparse.Namespace) -> None:
    from .policy import usable_rows
    from .record import beam_logprobs, score_answers

    _check_out(args.out, _DATASET_OUT)
    _check_not_input(args.out, [("the input file", args.data)], written="the scored dataset")
    dataset = _read(args.data, require_label=False, args=args)
    frame = dataset.frame
    traces = list(dataset.traces)
    todo = [i for i, t in enumerate(traces) if t is None or args.rescore]
    if todo:
        lm = _load_model(args)
        update, close = _progress(len(todo), "scoring", not args.quiet)
        try:
            new = score_answers(lm, [str(frame["prompt"].iloc[i]) for i in todo],
                                [str(frame["answer"].iloc[i]) for i in todo], chat_template=args.chat_template,
                                n_alternatives=args.alternatives, batch_size=args.batch_size, progress=update)
        finally:
            close()
        for i, trace in zip(todo, new):
            traces[i] = trace
        if args.beams:
            frame = frame.copy()
            frame["beam_logprobs"] = [json.dumps(b) for b in beam_logprobs(
                lm, frame["prompt"].astype(str).tolist(), num_beams=args.beams, chat_template=args.chat_template)]
    if not args.quiet:
        print(f"recorded {len(todo):,} traces; {len(traces) - len(todo):,} rows already had one", file=sys.stderr)
    unscorable = usable_rows(traces, row_numbers=_row_numbers(dataset)).empty_message(left_out=False)
    if unscorable:
        print(f"warning: {unscorable}", file=sys.stderr)
    _write(frame, traces, args.out, quiet=args.quiet)


def _beams(dataset) -> list[list[float]] | None:
    from .data import parse_beam_logprobs

    if "beam_logprobs" not in dataset.frame.columns:
        return None
    return parse_beam_logprobs(dataset.frame["beam_logprobs"], _row_numbers(dataset))


def _evaluate_one(traces: list, labels: np.ndarray, beams: list | None, *, title: str, args: argparse.Namespace,
                  config: Any, methods: list[str] | None, embedder: Any, rows: list[int]):
    """One evaluation with progress on stderr and the library's warnings as plain lines (skipped splits named with
    their group and the option that avoids them; a truncated distribution is said once for the whole report by
    :func:`_report_warnings`)."""
    import warnings

    from .evaluate import SkippedSplitsWarning, TruncatedDistributionWarning, evaluate

    show = not args.quiet
    where = f" ({title})" if title else ""
    if show:
        print(f"scoring {len(traces):,} answers{where}: TRACE features and baselines", file=sys.stderr)
    update, close = _progress(config.n_splits, f"splits{where}", show, unit="split")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = evaluate(traces, labels, config=config, methods=methods, beam_logprobs=beams, embedder=embedder,
                              progress=update)
        except AnswerValueError as exc:  # the library counts answers from 0; the user counts file rows
            raise CLIError(f"{_shown(args.data)}: row {rows[exc.index]}: {exc.reason}") from exc
        finally:
            close()
    _plain_warnings(caught, skip=(SkippedSplitsWarning, TruncatedDistributionWarning))
    if result.skipped_splits:
        print(f"warning: {title or 'the data'}: {result.skipped_splits} of {config.n_splits} splits skipped (one "
              "class only in their calibration or evaluation part); use --stratified to keep both classes in every "
              "part", file=sys.stderr)
    return result


def _report_warnings(results: dict[str, Any]) -> None:
    """The report's notes that need a ``warning:`` line, one line each: a truncated distribution (over every answer
    evaluated; else each group where it is), extended TRACE+ variants that need entropy (asked for by --extended on
    data without it)."""
    from .results import extended_entropy_note, extended_needing_entropy, truncation_note

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


def cmd_evaluate(args: argparse.Namespace) -> None:  # noqa: C901 (one branch per command-line option)
    from .evaluate import NoUsableSplitError, average_results
    from .policy import METRICS_UNDEFINED, one_class_message
    from .registry import METHODS, method_names
    from .results import report_markdown

    out_format = None
    if args.out:
        out_format = _check_out(args.out, _REPORT_OUT)
        if args.format and args.format != out_format:
            raise CLIError(f"--out {_shown(args.out)}: its extension names {out_format}, not --format {args.format}; "
                           "give a name that matches")
        _check_not_input(args.out, [("the input file", args.data)], written="the report")
    if args.report:
        _check_out(args.report, _HTML_OUT, option="--report")
        _check_not_input(args.report, [("the input file", args.data), ("--out", args.out)],
                         written="the HTML report")
        _report_dependency()
    dataset = _usable(_read(args.data, require_label=True, args=args), args.data,
                      consequence=METRICS_UNDEFINED)
    traces = list(dataset.traces)
    labels = dataset.frame["label"].to_numpy()
    methods = args.methods or None
    if args.extended:  # the TRACE+ feature-set and surprisal-only variants, after the asked-for (or default) methods
        methods = (methods or method_names()) + [m.name for m in METHODS.values() if m.extended]
    embedder = None
    if args.embedder is not None:
        from .semantic import load_embedder

        embedder = load_embedder(args.embedder or None)
    config = _evaluation_config(args)
    beams = _beams(dataset)
    rows = _row_numbers(dataset)
    options = dict(args=args, config=config, methods=methods, embedder=embedder)
    if args.group_by:
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
                groups[title] = _evaluate_one([traces[i] for i in idx], labels[idx],
                                              None if beams is None else [beams[i] for i in idx],
                                              title=f"{clip(args.group_by)} = {clip(key)}",
                                              rows=[rows[i] for i in idx], **options)
            except NoUsableSplitError as exc:  # too few of one class for any split: this group only
                skipped += 1
                print(f"warning: --group-by {shorten(args.group_by)}: skipped the group {shorten(key)}: "
                      f"{_cli_words(str(exc))}", file=sys.stderr)
        if not groups:
            raise CLIError(f"--group-by {shorten(args.group_by)}: none of the {skipped:,} groups can be evaluated "
                           "(each has one class only, or too few answers of one class for any split); group by a "
                           "column whose groups hold enough correct and wrong answers")
        results = {**groups, "average": average_results(groups)}
    else:
        results = {"": _evaluate_one(traces, labels, beams, title="", rows=rows, **options)}
    _report_warnings(results)
    fmt = args.format or out_format or "markdown"
    if fmt == "markdown":
        text = report_markdown(results, calibrator=config.scalar_calibrator)
    elif fmt == "csv":  # both scalar calibrators, one row per (method, metric, calibrator)
        text = pd.concat([r.summary.assign(group=title or "all") for title, r in results.items()]).to_csv(index=False)
    elif fmt == "json":
        text = json.dumps({title or "all": r.to_dict() for title, r in results.items()}, indent=2) + "\n"
    else:
        raise CLIError(f"unknown --format {shorten(fmt)}; use markdown, csv or json")
    if args.out:
        if fmt == "markdown":
            command = " ".join(["trace-core", *(_quote(a) for a in args.argv)])
            text = f"Generated by `{command}`.\n\n" + text
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote results to {args.out}", file=sys.stderr)
    if args.report:
        from .report import report_html

        answers = sum(r.n_answers for t, r in results.items() if t != "average")
        data = {"file": Path(args.data).name, "answers": f"{answers:,}",
                "labels": "the file's `label` column" if dataset.label_source == "label" else
                f"matched against `reference` ({args.matcher})",
                "command": " ".join(["trace-core", *(_quote(a) for a in args.argv)])}
        Path(args.report).write_text(report_html(results, title=f"TRACE evaluation of {Path(args.data).name}",
                                                 data=data, calibrator=config.scalar_calibrator), encoding="utf-8")
        print(f"wrote the report to {args.report}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def _fit_choice(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(TRACE+ feature set, None) or (None, scalar method) from --method and --feature-set; CLIError when they
    disagree or name something that cannot be saved as a calibrator."""
    from .calibrate import flaggable_methods
    from .registry import METHODS

    method = args.method
    if method is None or (method in METHODS and METHODS[method].kind == "trace_plus"):
        feature_set = METHODS[method].feature_set if method is not None else None
        if feature_set is not None and args.feature_set is not None and args.feature_set != feature_set:
            raise CLIError(f"--method {method!r} is TRACE+ on the {feature_set!r} features, and --feature-set says "
                           f"{args.feature_set!r}; give one of them")
        return args.feature_set or feature_set, None
    if method not in flaggable_methods():
        why = ("is fitted on each calibration part and cannot be saved as a calibrator yet"
               if method in METHODS and METHODS[method].kind == "fitted_baseline" else
               "needs more than a trace (beams or a sentence-embedding model)" if method in METHODS else
               "is not a method")
        raise CLIError(f"--method {shorten(method)} {why}; give TRACE+ (or a TRACE+ variant such as "
                       f"'TRACE+ (extended)') or one of: {', '.join(flaggable_methods())}")
    if args.feature_set is not None:
        raise CLIError(f"--feature-set is for TRACE+; --method {method!r} is calibrated with --calibrator")
    return None, method


def cmd_fit(args: argparse.Namespace) -> None:
    from .calibrate import CALIBRATOR_WORDS, ScoreCalibrator, TracePlus
    from .features import default_feature_set, needs_entropy
    from .policy import NO_CALIBRATOR

    _check_out(args.out, _CALIBRATOR_OUT)
    _check_not_input(args.out, [("the input file", args.data)], written="the calibrator")
    chosen_set, method = _fit_choice(args)
    dataset = _usable(_read(args.data, require_label=True, args=args), args.data, consequence=NO_CALIBRATOR)
    traces = list(dataset.traces)
    labels = dataset.frame["label"].to_numpy()
    if method is not None:
        try:
            model: ScoreCalibrator | TracePlus = ScoreCalibrator(method=method, calibrator=args.calibrator).fit(traces,
                                                                                                             labels)
        except AnswerValueError as exc:
            raise CLIError(f"{_shown(args.data)}: row {_row_numbers(dataset)[exc.index]}: {exc.reason}") from exc
        except ValueError as exc:  # the traces lack what the method needs (entropy, top-k alternatives)
            raise CLIError(f"{_shown(args.data)}: {exc}") from exc
        Path(args.out).write_text(model.to_json(), encoding="utf-8")
        print(f"fitted {method} with {CALIBRATOR_WORDS[args.calibrator]} on {model.n_samples_:,} answers; wrote "
              f"{args.out}", file=sys.stderr)
        return
    fitting = default_feature_set(traces)  # "paper", or "surprisal" when the traces hold no entropy
    feature_set = chosen_set or fitting
    if chosen_set is None and feature_set != "paper":
        print("warning: these traces hold no entropy (chosen-token log-probabilities only): fitting TRACE+ "
              "(surprisal-only), --feature-set surprisal", file=sys.stderr)
    elif needs_entropy(feature_set) and fitting != "paper":
        raise CLIError(f"{_shown(args.data)}: --feature-set {feature_set} needs token entropy and these traces hold "
                       "only the chosen tokens' log-probabilities; use --feature-set surprisal")
    try:
        model = TracePlus(feature_set=feature_set, C=args.C).fit(traces, labels)
    except AnswerValueError as exc:
        raise CLIError(f"{_shown(args.data)}: row {_row_numbers(dataset)[exc.index]}: {exc.reason}") from exc
    Path(args.out).write_text(model.to_json(), encoding="utf-8")
    print(f"fitted TRACE+ ({feature_set}) on {model.n_samples_:,} answers; wrote {args.out}", file=sys.stderr)


def cmd_flag(args: argparse.Namespace) -> None:
    from .calibrate import load_calibrator
    from .calibrator_io import MAX_CALIBRATOR_BYTES
    from .data import export_flagged, token_table, with_trace_columns
    from .flag import OUTPUT_COLUMNS, output_collisions, previous_export, unscored

    fmt = _check_out(args.out, _FLAGGED_OUT)
    _check_not_input(args.out, [("the input file", args.data), ("--calibrator", args.calibrator)]
                     + ([("--risk-data", args.risk_data)] if args.risk_data else []), written="the flagged rows")
    if args.tokens:
        _check_out(args.tokens, _TOKENS_OUT, option="--tokens")
        _check_not_input(args.tokens, [("the input file", args.data), ("--calibrator", args.calibrator),
                                       ("--out", args.out)], written="the flagged answers' tokens")
    if args.by == "span" and args.max_risk is not None:
        raise CLIError("--by span cannot be used with --max-risk: the guarantee is on the answers' probability of "
                       "being correct")
    dataset = _read(args.data, require_label=False, args=args)
    if previous_export(dataset.frame.columns):  # a flagged export scored again: its earlier scores are replaced
        dataset = dataclasses.replace(dataset, frame=unscored(dataset.frame))
        if not args.quiet:
            print(f"{_shown(args.data)}: a flagged export; its earlier scores ({', '.join(OUTPUT_COLUMNS)}) are "
                  "replaced", file=sys.stderr)
    taken = output_collisions(list(dataset.frame.columns))
    if taken:
        raise CLIError(f"{_shown(args.data)}: has column(s) {', '.join(shorten(c) for c in taken)} named like the "
                       "output of flag, which would overwrite them; rename them (e.g. to "
                       f"input_{shorten(taken[0].strip())[1:-1]}) and run again")
    dataset = _usable(dataset, args.data)
    traces = list(dataset.traces)
    path = _regular_file(args.calibrator)  # before it is opened: a FIFO would block
    if path.stat().st_size > MAX_CALIBRATOR_BYTES:  # before reading: a calibrator is a few kilobytes
        raise CLIError(f"{_shown(args.calibrator)}: {path.stat().st_size:,} bytes is not a calibrator (at most "
                       f"{MAX_CALIBRATOR_BYTES:,})")
    try:
        calibrator = load_calibrator(path.read_bytes())
    except ValueError as exc:  # CalibratorFormatError: one line per problem
        problems = getattr(exc, "problems", None) or [str(exc)]
        raise CLIError(f"{_shown(args.calibrator)}: " + "; ".join(problems)) from exc
    from .flag import score_rows, select_flagged

    scored = score_rows(dataset.frame, traces, calibrator)
    _drift(args, calibrator, traces)
    labels = dataset.labels if "label" in dataset.frame.columns else None
    if args.target_risk is not None and labels is None:
        raise CLIError("--target-risk needs labeled answers (a `label` or `reference` column) to measure the risk")
    threshold = args.threshold
    if args.max_risk is not None:  # the threshold that Learn-then-Test certifies on --risk-data
        threshold = _guaranteed(args, calibrator, traces)
    flagged = select_flagged(scored, threshold=threshold, coverage=args.coverage, target_risk=args.target_risk,
                             labels=labels, by=args.by)
    positions = scored.index.get_indexer(flagged.index)
    flagged_traces = [traces[i] for i in positions]
    # with the trace columns: the export reads back as a dataset and can be scored again
    export_flagged(with_trace_columns(flagged, flagged_traces), args.out, format=fmt)
    print(f"flagged {len(flagged):,} of {len(dataset.frame):,} answers; wrote {args.out}", file=sys.stderr)
    if args.tokens:
        rows = flagged[dataset.row_column].tolist() if dataset.row_column in flagged.columns else None
        export_flagged(token_table(flagged_traces, rows), args.tokens, format="csv")
        print(f"wrote the flagged answers' tokens to {args.tokens}", file=sys.stderr)


def _drift(args: argparse.Namespace, calibrator: Any, traces: list, reference: list | None = None) -> None:
    """The drift check of the answers being flagged (:func:`trace_core.calibrate.check_drift`): against the summary
    the calibrator keeps of its calibration answers, or against ``reference`` (the labeled answers of --risk-data);
    one line on stderr, a warning when they look drawn differently."""
    from .calibrate import check_drift
    from .drift import DriftResult

    try:
        result = check_drift(calibrator, traces, reference=reference)
    except ValueError as exc:  # a feature the reference answers cannot give (e.g. entropy)
        result = DriftResult.unavailable(_cli_words(str(exc)), n_new=len(traces))
    _say_drift(result, quiet=args.quiet)


def _guaranteed(args: argparse.Namespace, calibrator: Any, traces: list) -> float:
    """The threshold certified on ``--risk-data`` (:func:`trace_core.guarantee.guaranteed_threshold`), with the
    guarantee said on stderr and the drift check of the new answers (``traces``) against the labeled ones (what
    the guarantee assumes); CLIError, saying what it would need, when none can be."""
    from .calibrate import probability_correct
    from .guarantee import guaranteed_threshold

    if os.path.realpath(args.risk_data) == os.path.realpath(args.data):
        print(f"warning: --risk-data {_shown(args.risk_data)} is the file being flagged: the guarantee is for new "
              "answers drawn like the labeled ones, not for the answers it was chosen on", file=sys.stderr)
    risk = _usable(_read(args.risk_data, require_label=True, args=args), args.risk_data)
    try:
        probability = probability_correct(calibrator, list(risk.traces))
    except ValueError as exc:  # e.g. a score that needs entropy, on traces without
        raise CLIError(f"{_shown(args.risk_data)}: {exc}") from exc
    guarantee = guaranteed_threshold(probability, risk.frame["label"].to_numpy(), max_risk=args.max_risk,
                                     delta=args.delta)
    if guarantee.threshold is None:
        raise CLIError(f"{_shown(args.risk_data)}: {guarantee.sentence()}")
    if not args.quiet:
        print(guarantee.sentence(), file=sys.stderr)
    _drift(args, calibrator, traces, list(risk.traces))
    return guarantee.threshold


def _model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="local model folder, GGUF file (converted once, then cached) or a model id in the "
                                  "local Hugging Face cache")
    p.add_argument("--device", default="auto", help="auto (default: CUDA, then MPS, then CPU), cpu, cuda, mps")
    server = p.add_argument_group("model server (instead of --model)")
    server.add_argument("--server", metavar="URL",
                        help="an OpenAI-compatible model server (vLLM), e.g. http://127.0.0.1:8000")
    server.add_argument("--server-model", metavar="NAME", help="the model's name on the server")
    server.add_argument("--server-tokenizer", metavar="FOLDER_OR_ID",
                        help="the served model's tokenizer (a local folder, GGUF file or cached id); default: "
                             "--server-model")
    server.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                        help="environment variable holding the server's API key (default OPENAI_API_KEY; unset: none)")
    server.add_argument("--concurrency", type=int, default=4, help="requests in flight at once (default %(default)s)")
    server.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default %(default)g)")
    server.add_argument("--retries", type=int, default=4,
                        help="retries on 429, 5xx and lost connections (default %(default)s)")
    server.add_argument("--server-api", choices=["completions", "chat"], default="completions",
                        help="generate through /v1/completions with token ids and the chat template applied here "
                             "(default), or through /v1/chat/completions with the server's template; scoring always "
                             "uses completions")
    server.add_argument("--full-distribution", action="store_true",
                        help="ask for every token's log-probability (exact entropy; the server needs "
                             "--max-logprobs -1; sensible for small vocabularies only)")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per model call (default %(default)s)")
    p.add_argument("--alternatives", type=int, default=5,
                   help="top alternatives stored per token (default %(default)s)")
    p.add_argument("--chat-template", action="store_true", help="wrap prompts with the tokenizer's chat template")
    p.add_argument("--beams", type=int, default=0,
                   help="also run one beam search with this many beams per prompt (for the beam baselines)")
    p.add_argument("--trust-remote-code", action="store_true", help="run code shipped with the model (off)")
    p.add_argument("--allow-pickle-weights", action="store_true", help="accept pickle weights (off)")


def _label_options(p: argparse.ArgumentParser, *,
                   matcher_help: str = "how answers are labeled against a `reference` column when there is no "
                                       "`label` column") -> None:
    from .data import MATCHERS

    p.add_argument("--matcher", default="exact", choices=list(MATCHERS), help=matcher_help + " (default %(default)s)")
    p.add_argument("--tolerance", type=float, default=1e-6,
                   help="absolute tolerance of the numeric matcher (default %(default)g)")


def _subcommand(sub: Any, common: argparse.ArgumentParser, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand parser that also takes the options every subcommand shares (``--debug``, ``--quiet``)."""
    return sub.add_parser(name, parents=[common], **kwargs)


def build_parser() -> argparse.ArgumentParser:
    from .evaluate import SCALAR_CALIBRATORS
    from .features import FEATURE_SETS

    parser = argparse.ArgumentParser(prog="trace-core", description="TRACE / TRACE+ confidence for LLM answers.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks")
    common.add_argument("--quiet", action="store_true", help="no progress on stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    p = _subcommand(sub, common, "generate", help="generate answers with traces from a prompts file")
    p.add_argument("prompts", help="a .txt file (one prompt per line; write a line break inside a prompt as \\n) "
                                   "or a CSV/JSONL/Parquet with a `prompt` column (any text)")
    p.add_argument("--out", required=True, help="output dataset (.jsonl, .csv or .parquet), checked before any work")
    _model_options(p)
    p.add_argument("--max-new-tokens", type=int, default=64,
                   help="at most this many answer tokens (default %(default)s)")
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature, with --sample (default %(default)g)")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens; 0: off (default)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass; 1: off (default)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: none, a different draw each run)")
    _label_options(p, matcher_help="how the generated answers are labeled against a `reference` column (an input "
                                   "`label` column labeled other answers and is never kept)")
    p.set_defaults(func=cmd_generate)

    p = _subcommand(sub, common, "score", help="record traces of existing answers (teacher forcing)")
    p.add_argument("data", help="dataset with `prompt` and `answer` columns")
    p.add_argument("--out", required=True, help="output dataset (.jsonl, .csv or .parquet)")
    p.add_argument("--rescore", action="store_true", help="re-record rows that already have a trace")
    _model_options(p)
    _label_options(p)
    p.set_defaults(func=cmd_score)

    p = _subcommand(sub, common, "evaluate", help="compare TRACE+, TRACE and the baselines on held-out splits")
    p.add_argument("data", help="dataset with traces and labels (or references)")
    p.add_argument("--splits", type=int, default=20, help="random calibration/evaluation splits (default %(default)s)")
    p.add_argument("--calibration-fraction", type=float, default=0.35,
                   help="share of the answers that fit the calibrators on each split (default %(default)g)")
    p.add_argument("--stratified", action="store_true",
                   help="keep each class's share in every calibration part (no split is skipped for one class)")
    p.add_argument("--seed", type=int, default=0, help="seed of the splits (default %(default)s)")
    p.add_argument("--bins", type=int, default=10, help="ECE bins (default %(default)s)")
    p.add_argument("--calibrator", default="platt", choices=list(SCALAR_CALIBRATORS),
                   help="scalar calibrator of TRACE and the baselines that the Markdown table shows (CSV and JSON "
                        "carry both; TRACE+ has its own logistic regression; default %(default)s)")
    p.add_argument("--methods", nargs="+", help="restrict to these methods")
    p.add_argument("--extended", action="store_true", help="also report the TRACE+ feature-set variants")
    p.add_argument("--embedder", nargs="?", const="", default=None,
                   help="run the semantic baselines with the packaged embedding model (or a local folder)")
    p.add_argument("--group-by", help="also evaluate each value of this column separately (e.g. a task family) "
                                      "and report their average")
    p.add_argument("--format", choices=["markdown", "csv", "json"],
                   help="output format (default: from --out's extension, else markdown)")
    p.add_argument("--out", help="write the table here instead of standard output (.md, .csv or .json)")
    p.add_argument("--report", metavar="FILE.html",
                   help="also write one self-contained HTML report (tables, verdict, interactive figures, settings, "
                        "versions); needs plotly")
    _label_options(p)
    p.set_defaults(func=cmd_evaluate)

    p = _subcommand(sub, common, "fit", help="fit a calibrator (JSON) on labeled traces: TRACE+, or TRACE or a "
                                             "baseline with Platt scaling or isotonic regression")
    p.add_argument("data", help="dataset with traces and labels (or references)")
    p.add_argument("--out", required=True, help="calibrator JSON (.json)")
    p.add_argument("--method", metavar="NAME",
                   help="the score to calibrate, named as in `evaluate`'s table: TRACE+ (default) or a TRACE+ variant "
                        "such as 'TRACE+ (extended)', TRACE, or a baseline computed from the trace alone such as "
                        "SeqLogP or 'Mean Entropy' (pick the one that won `evaluate` on your data)")
    p.add_argument("--calibrator", default="platt", choices=list(SCALAR_CALIBRATORS),
                   help="for TRACE and the baselines: Platt scaling or isotonic regression (default %(default)s); "
                        "TRACE+ has its own logistic regression")
    p.add_argument("--feature-set", choices=list(FEATURE_SETS),
                   help="TRACE+ features (default: paper, the paper's 8; surprisal when the traces hold no entropy)")
    p.add_argument("--C", type=float, default=1.0,
                   help="TRACE+'s inverse regularisation strength (default %(default)g)")
    _label_options(p)
    p.set_defaults(func=cmd_fit)

    p = _subcommand(sub, common, "flag", help="flag low-confidence answers with a fitted calibrator")
    p.add_argument("data", help="dataset with traces (labels optional; needed for --target-risk)")
    p.add_argument("--calibrator", required=True, help="calibrator JSON from `trace-core fit` or the Calibrate page "
                                                       "(TRACE+, or the score it names)")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--threshold", type=float, help="flag answers whose probability of being correct is below this")
    group.add_argument("--coverage", type=float, help="keep this share of the most confident answers, flag the rest")
    group.add_argument("--target-risk", type=float,
                       help="keep as many answers as possible with at most this error rate (measured on the labels)")
    group.add_argument("--max-risk", type=float, metavar="ALPHA",
                       help="keep answers with an error rate of at most ALPHA among them, guaranteed with probability "
                            "1 - DELTA: the threshold is chosen on --risk-data (Learn-then-Test)")
    p.add_argument("--risk-data", metavar="LABELED",
                   help="with --max-risk: labeled answers with traces, drawn like the new ones and not those the "
                        "calibrator was fitted on, that choose the guaranteed threshold")
    p.add_argument("--delta", type=float, default=0.1,
                   help="with --max-risk: the chance the guarantee fails, over the draw of --risk-data (default "
                        "%(default)g)")
    p.add_argument("--by", choices=["answer", "span"], default="answer",
                   help="judge each answer by its probability of being correct (default) or by its riskiest span's "
                        "probability of being right (the riskiest_span_* columns; not with --max-risk)")
    p.add_argument("--out", required=True, help="flagged rows"
                   " (.csv or .jsonl) with every input column and their traces, so the file can be scored again; "
                   "CSV safe to open in a spreadsheet; not the input file")
    p.add_argument("--tokens", metavar="FILE.csv",
                   help="also write one row per token of the flagged answers (token, probability, entropy, rank, "
                        "alternatives)")
    _label_options(p)
    p.set_defaults(func=cmd_flag)
    return parser


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        with warnings.catch_warnings(record=True) as caught:  # library warnings become plain lines, never raw
            warnings.simplefilter("always")
            try:
                _check_options(args)
                args.func(args)
            finally:
                _plain_warnings(caught)
    except KeyboardInterrupt:
        close_progress_bars()
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one clear line for the user; the traceback only on request
        close_progress_bars()  # the error starts its own line, not after a bar's residue
        if args.debug:
            raise
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"error: {redact_secrets(_cli_words(message))}", file=sys.stderr)  # a server may echo a key
        return 1
    return 0
