"""``trace-core flag``: a dataset with traces and a calibrator -> the low-confidence answers (CSV or JSON Lines, with
their traces; optionally their tokens): below a threshold, outside a coverage, over a target risk, or over an error
rate guaranteed on labeled answers; with the drift check of the answers against the calibration ones."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

from trace_core.calibration.calibrators import check_drift, load_calibrator, probability_correct
from trace_core.calibration.drift import DriftResult
from trace_core.calibration.reading import MAX_CALIBRATOR_BYTES
from trace_core.checks import AnswerValueError, counted, shorten
from trace_core.cli import common
from trace_core.cli._support import (
    FLAGGED_OUT,
    TOKENS_OUT,
    CLIError,
    check_not_input,
    check_out,
    cli_words,
    regular_file,
    say_drift,
    shown,
)
from trace_core.cli.flag_shards import flag_sharded
from trace_core.cli.score_shards import is_sharded, refuse_engine_options
from trace_core.data import export_flagged, token_table, with_trace_columns
from trace_core.flagging.flag import (
    OUTPUT_COLUMNS,
    flag_every,
    flag_summary,
    output_collisions,
    previous_export,
    score_rows,
    select_flagged,
    unscored,
)
from trace_core.flagging.guarantee import guaranteed_threshold, guaranteed_thresholds, repeated_prompts_note
from trace_core.methods.spans import other_script_warning

__all__ = ["cmd_flag"]


def _load_calibrator(args: argparse.Namespace) -> tuple[Any, bytes]:
    """The calibrator of ``--calibrator`` and its bytes; CLIError, one line per problem, when it is not one."""
    path = regular_file(args.calibrator)  # before it is opened: a FIFO would block
    if path.stat().st_size > MAX_CALIBRATOR_BYTES:  # before reading: a calibrator is a few kilobytes
        raise CLIError(f"{shown(args.calibrator)}: {path.stat().st_size:,} bytes is not a calibrator (at most "
                       f"{MAX_CALIBRATOR_BYTES:,})")
    raw = path.read_bytes()
    try:
        return load_calibrator(raw), raw
    except ValueError as exc:  # CalibratorFormatError: one line per problem
        problems = getattr(exc, "problems", None) or [str(exc)]
        raise CLIError(f"{shown(args.calibrator)}: " + "; ".join(problems)) from exc


def cmd_flag(args: argparse.Namespace) -> None:
    if args.by == "span" and args.max_risk is not None:
        raise CLIError("--by span cannot be used with --max-risk: the guarantee is on the answers' probability of "
                       "being correct")
    if is_sharded(args.data):
        if getattr(args, "guarantee_by", None):
            raise CLIError("--group-by works on one file, not on a folder of shards: flag each group's shards with "
                           "its own --risk-data, or join the shards into one file")

        flag_sharded(args, *_load_calibrator(args), certified=_certified)
        return
    refuse_engine_options(args)
    fmt = check_out(args.out, FLAGGED_OUT)
    check_not_input(args.out, [("the input file", args.data), ("--calibrator", args.calibrator)]
                    + ([("--risk-data", args.risk_data)] if args.risk_data else []), written="the flagged rows")
    if args.tokens:
        check_out(args.tokens, TOKENS_OUT, option="--tokens")
        check_not_input(args.tokens, [("the input file", args.data), ("--calibrator", args.calibrator),
                                      ("--out", args.out), ("--risk-data", args.risk_data)],
                        written="the flagged answers' tokens", option="--tokens")
    dataset = common.read_data(args.data, require_label=False, args=args)
    if previous_export(dataset.frame.columns):  # a flagged export scored again: its earlier scores are replaced
        dataset = dataclasses.replace(dataset, frame=unscored(dataset.frame))
        if not args.quiet:
            print(f"{shown(args.data)}: a flagged export; its earlier scores ({', '.join(OUTPUT_COLUMNS)}) are "
                  "replaced", file=sys.stderr)
    taken = output_collisions(list(dataset.frame.columns))
    if taken:
        raise CLIError(f"{shown(args.data)}: has column(s) {', '.join(shorten(c) for c in taken)} named like the "
                       "output of flag, which would overwrite them; rename them (e.g. to "
                       f"input_{shorten(taken[0].strip())[1:-1]}) and run again")
    dataset = common.usable(dataset, args.data)
    traces = common.trace_table(dataset)
    calibrator, _ = _load_calibrator(args)

    scored = _scored(args, dataset, traces, calibrator)
    _drift(args, calibrator, traces)
    if args.by == "span":

        other = other_script_warning(dataset.frame["answer"])
        if other:
            print(f"warning: {other}", file=sys.stderr)
    labels = dataset.labels if "label" in dataset.frame.columns else None
    if args.target_risk is not None and labels is None:
        raise CLIError("--target-risk needs labeled answers (a `label` or `reference` column) to measure the risk")
    flagged = _select(args, scored, labels, calibrator, traces)
    positions = scored.index.get_indexer(flagged.index)
    flagged_traces = [traces[i] for i in positions]
    # with the trace columns: the export reads back as a dataset and can be scored again
    export_flagged(with_trace_columns(flagged, flagged_traces), args.out, format=fmt)
    readout = flag_summary(scored.index.isin(flagged.index), scored["probability_correct"].to_numpy(), labels)
    print(f"flagged {len(flagged):,} of {counted(len(dataset.frame), 'answer')} ({readout}); "
          f"wrote {args.out}", file=sys.stderr)
    if args.tokens:
        rows = flagged[dataset.row_column].tolist() if dataset.row_column in flagged.columns else None
        export_flagged(token_table(flagged_traces, rows), args.tokens, format="csv")
        print(f"wrote the flagged answers' tokens to {args.tokens}", file=sys.stderr)


def _drift(args: argparse.Namespace, calibrator: Any, traces: list, reference: list | None = None) -> None:
    """The drift check of the answers being flagged (:func:`trace_core.calibration.calibrators.check_drift`): against
    the summary the calibrator keeps of its calibration answers, or against ``reference`` (the labeled answers of
    --risk-data); one line on stderr, a warning when they look drawn differently."""
    try:
        result = check_drift(calibrator, traces, reference=reference)
    except ValueError as exc:  # a feature the reference answers cannot give (e.g. entropy)
        result = DriftResult.unavailable(cli_words(str(exc)), n_new=len(traces))
    say_drift(result, quiet=args.quiet)


def _scored(args: argparse.Namespace, dataset: Any, traces: Any, calibrator: Any) -> Any:
    """Every row scored (:func:`trace_core.flagging.flag.score_rows`); an answer the calibrator cannot score is named by
    its row in the file."""
    try:
        return score_rows(dataset.frame, traces, calibrator)
    except AnswerValueError as exc:  # the library counts answers from 0; the user counts file rows
        raise CLIError(f"{shown(args.data)}: row {common.row_numbers(dataset)[exc.index]}: {exc.reason}") from exc


def _select(args: argparse.Namespace, scored: Any, labels: Any, calibrator: Any, traces: list) -> Any:
    """The rows to flag: by ``--threshold``, ``--coverage`` or ``--target-risk``, or below the threshold
    ``--max-risk`` certifies on ``--risk-data``; every row when none is certified (keeping none is the only choice
    guaranteed)."""
    threshold = args.threshold
    if args.max_risk is not None and getattr(args, "guarantee_by", None):  # one threshold per group
        return _select_by_group(args, scored, calibrator, traces)
    if args.max_risk is not None:  # the threshold that Learn-then-Test certifies on --risk-data
        guarantee = _guaranteed(args, calibrator, traces)
        if guarantee.threshold is None:
            return flag_every(scored)
        threshold = guarantee.threshold
    return select_flagged(scored, threshold=threshold, coverage=args.coverage, target_risk=args.target_risk,
                          labels=labels, by=args.by)


def _select_by_group(args: argparse.Namespace, scored: Any, calibrator: Any, traces: list) -> Any:
    """The rows below their group's certified threshold (:func:`trace_core.flagging.guarantee.guaranteed_thresholds` on
    ``--risk-data``), every row of a group with none; each group's guarantee (or why there is none) on stderr."""
    import numpy as np

    column = args.guarantee_by
    if column not in scored.columns:
        raise CLIError(f"--group-by: {shown(args.data)} has no column {shorten(column)}")
    risk, probability = _risk_probability(args, calibrator)
    if column not in risk.frame.columns:
        raise CLIError(f"--group-by: {shown(args.risk_data)} has no column {shorten(column)}")
    labeled_groups = risk.frame[column].astype(str).to_numpy()
    found = guaranteed_thresholds(probability, risk.frame["label"].to_numpy(), labeled_groups,
                                  max_risk=args.max_risk, delta=args.delta)
    rows, named = common.row_numbers(risk), shorten(column)[1:-1]  # the column as typed, bounded
    for name, guarantee in found.items():
        where = np.flatnonzero(labeled_groups == name)
        said = guarantee.sentence([rows[i] for i in where])
        if guarantee.threshold is None:
            print(f"warning: {named} = {shorten(name)}: {said}", file=sys.stderr)
        elif not args.quiet:
            print(f"{named} = {shorten(name)}: {said}", file=sys.stderr)
    groups = scored[column].astype(str)
    unseen = sorted(set(groups) - set(found))
    if unseen:
        print(f"warning: --group-by {shorten(column)}: {len(unseen):,} group(s) of {shown(args.data)} have no labeled "
              f"answers in {shown(args.risk_data)} (e.g. {shorten(unseen[0])}); their answers are all flagged",
              file=sys.stderr)
    _drift(args, calibrator, traces, common.trace_table(risk))
    limits = groups.map({name: g.threshold for name, g in found.items() if g.threshold is not None})
    return scored[~(scored["probability_correct"] >= limits.fillna(np.inf))]  # no threshold: flagged


def _guaranteed(args: argparse.Namespace, calibrator: Any, traces: list) -> Any:
    """The guarantee on ``--risk-data`` (:func:`_certify`): when it certifies no threshold, a warning that names the
    confident wrong answers that stop it (by their rows) and the labeled answers it would need; and the drift check
    of the new answers (``traces``) against the labeled ones (what the guarantee assumes)."""
    guarantee, risk = _certify(args, calibrator)
    if guarantee.threshold is None:
        print(f"warning: {shown(args.risk_data)}: {guarantee.sentence(common.row_numbers(risk))}", file=sys.stderr)
    _drift(args, calibrator, traces, common.trace_table(risk))
    return guarantee


def _certified(args: argparse.Namespace, calibrator: Any) -> float | None:
    """The threshold certified on ``--risk-data``, said on stderr (over shards: no drift check); None, with a warning
    naming what stops it and what it would need, when none is (every answer is then flagged)."""
    guarantee, risk = _certify(args, calibrator)
    if guarantee.threshold is None:
        print(f"warning: {shown(args.risk_data)}: {guarantee.sentence(common.row_numbers(risk))}", file=sys.stderr)
    return guarantee.threshold


def _certify(args: argparse.Namespace, calibrator: Any) -> tuple[Any, Any]:
    """The guarantee on ``--risk-data`` (:func:`trace_core.flagging.guarantee.guaranteed_threshold`), said on stderr
    when it certifies a threshold, and the labeled dataset."""
    risk, probability = _risk_probability(args, calibrator)
    guarantee = guaranteed_threshold(probability, risk.frame["label"].to_numpy(), max_risk=args.max_risk,
                                     delta=args.delta)
    if guarantee.threshold is not None and not args.quiet:
        print(guarantee.sentence(), file=sys.stderr)
    return guarantee, risk


def _risk_probability(args: argparse.Namespace, calibrator: Any) -> tuple[Any, Any]:
    """``--risk-data`` read (labeled, usable rows) and the calibrator's P(correct) of each of its answers; a warning
    when its answers repeat prompts (the guarantee assumes independent answers)."""
    if os.path.realpath(args.risk_data) == os.path.realpath(args.data):
        print(f"warning: --risk-data {shown(args.risk_data)} is the file being flagged: the guarantee is for new "
              "answers drawn like the labeled ones, not for the answers it was chosen on", file=sys.stderr)
    risk = common.usable(common.read_data(args.risk_data, require_label=True, args=args), args.risk_data)
    try:
        probability = probability_correct(calibrator, common.trace_table(risk))
    except AnswerValueError as exc:  # the library counts answers from 0; the user counts file rows
        raise CLIError(f"{shown(args.risk_data)}: row {common.row_numbers(risk)[exc.index]}: {exc.reason}") from exc
    except ValueError as exc:  # e.g. a score that needs entropy, on traces without
        raise CLIError(f"{shown(args.risk_data)}: {exc}") from exc
    note = repeated_prompts_note(risk.frame["prompt"]) if "prompt" in risk.frame.columns else None
    if note:
        print(f"warning: {shown(args.risk_data)}: {note}", file=sys.stderr)
    return risk, probability
