"""``trace-core fit``: a dataset with traces and labels -> a calibrator (JSON): TRACE+ on a feature set, or TRACE or
a trace-only baseline through Platt scaling or isotonic regression."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from trace_core.calibration.calibrators import CALIBRATOR_WORDS, ScoreCalibrator, TracePlus
from trace_core.checks import AnswerValueError, counted, shorten
from trace_core.cli import common
from trace_core.cli._support import CALIBRATOR_OUT, CLIError, check_not_input, check_out, shown
from trace_core.evaluation.small_sample import SMALL_CLASS, SMALL_SAMPLE, small_sample_note
from trace_core.methods.features import default_feature_set, needs_entropy
from trace_core.methods.registry import METHODS, flaggable_methods
from trace_core.policy import NO_CALIBRATOR

__all__ = ["cmd_fit"]


def _fit_choice(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(TRACE+ feature set, None) or (None, scalar method) from --method and --feature-set; CLIError when they
    disagree or name something that cannot be saved as a calibrator."""
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
    check_out(args.out, CALIBRATOR_OUT)
    check_not_input(args.out, [("the input file", args.data)], written="the calibrator")
    chosen_set, method = _fit_choice(args)
    dataset = common.usable(common.read_data(args.data, require_label=True, args=args), args.data,
                            consequence=NO_CALIBRATOR)
    traces = common.trace_table(dataset)
    labels = dataset.frame["label"].to_numpy()
    if method is not None:
        try:
            model: ScoreCalibrator | TracePlus = ScoreCalibrator(method=method, calibrator=args.calibrator).fit(traces,
                                                                                                             labels)
        except AnswerValueError as exc:
            raise CLIError(f"{shown(args.data)}: row {common.row_numbers(dataset)[exc.index]}: {exc.reason}") from exc
        except ValueError as exc:  # the traces lack what the method needs (entropy, top-k alternatives)
            raise CLIError(f"{shown(args.data)}: {exc}") from exc
        Path(args.out).write_text(model.to_json(), encoding="utf-8")
        _say_fitted(f"{method} with {CALIBRATOR_WORDS[args.calibrator]}", labels, args.out)
        return
    fitting = default_feature_set(traces)  # "paper", or "surprisal" when the traces hold no entropy
    feature_set = chosen_set or fitting
    if chosen_set is None and feature_set != "paper":
        print("warning: these traces hold no entropy (chosen-token log-probabilities only): fitting TRACE+ "
              "(surprisal-only), --feature-set surprisal", file=sys.stderr)
    elif needs_entropy(feature_set) and fitting != "paper":
        raise CLIError(f"{shown(args.data)}: --feature-set {feature_set} needs token entropy and these traces hold "
                       "only the chosen tokens' log-probabilities; use --feature-set surprisal")
    try:
        model = TracePlus(feature_set=feature_set, C=args.C).fit(traces, labels)
    except AnswerValueError as exc:
        raise CLIError(f"{shown(args.data)}: row {common.row_numbers(dataset)[exc.index]}: {exc.reason}") from exc
    Path(args.out).write_text(model.to_json(), encoding="utf-8")
    _say_fitted(f"TRACE+ ({feature_set})", labels, args.out)


def _say_fitted(what: str, labels: np.ndarray, out: str) -> None:
    """The line saying what was fitted on how many answers of each class ("fitted TRACE+ (paper) on 328 answers (12
    correct, 316 wrong); wrote cal.json"), and a warning when they are too few, or too few of one class, for the
    probabilities to be trusted (where ``evaluate`` calls its figures unreliable: :func:`small_sample_note`)."""
    correct = int(np.sum(labels == 1))
    print(f"fitted {what} on {counted(len(labels), 'answer')} ({correct:,} correct, {len(labels) - correct:,} wrong); "
          f"wrote {out}", file=sys.stderr)
    if small_sample_note(len(labels), correct):
        print(f"warning: a calibrator fitted on fewer than {SMALL_SAMPLE} answers, or fewer than {SMALL_CLASS} "
              "of either class, gives unreliable probabilities; label more answers", file=sys.stderr)
