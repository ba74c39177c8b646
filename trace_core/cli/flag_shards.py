"""``trace-core flag`` over shards: a folder or a glob pattern of datasets with traces -> one output folder of
Parquet shards holding every usable row with its scores and a ``flagged`` column, and a manifest; resumable
(:mod:`trace_core.scale.flag`).

A threshold (``--threshold``, or certified on ``--risk-data`` by ``--max-risk``) is applied shard by shard. A
``--coverage`` or ``--target-risk`` is decided over every shard's answers first (a pass that keeps only their
probabilities), then the shards are written. The drift check is not run over shards (it compares every answer's
features at once); run ``flag`` on a sample file to see it."""

from __future__ import annotations

import argparse
import hashlib
import sys
from functools import partial
from pathlib import Path
from typing import Any

from .._checks import counted
from ._support import CLIError, shown

__all__ = ["flag_sharded"]


def _settings(args: argparse.Namespace, calibrator_bytes: bytes, threshold: float | None) -> dict[str, Any]:
    """What shapes the output shards: the calibrator (its digest), the rule and its value, how labels are found."""
    return {"calibrator_sha256": hashlib.sha256(calibrator_bytes).hexdigest(), "threshold": threshold,
            "coverage": args.coverage, "target_risk": args.target_risk, "max_risk": args.max_risk,
            "delta": args.delta if args.max_risk is not None else None, "by": args.by, "matcher": args.matcher,
            "tolerance": args.tolerance}


def _flagged_summary(folder: Path, summary: Any, *, by_span: bool = False) -> tuple[int, int, str, str | None]:
    """Rows flagged and rows written over every complete output shard (read from their ``flagged`` column),
    :func:`~trace_core.flag.flag_summary` of them (by their labels when every such shard has a ``label`` column),
    and, when the answers were judged by their spans, :func:`~trace_core.spans.other_script_warning` of their
    ``answer`` column (read in the same pass)."""
    import numpy as np
    import pyarrow.parquet as pq

    from ..flag import flag_summary
    from ..scale.flag import FLAGGED_COLUMN
    from ..spans import other_script_warning

    flagged, probability, labels = [], [], []
    answers: list[str] = []
    for result in summary.results:
        if result.entry is None:
            continue
        path = folder / result.entry.output
        labeled = "label" in pq.read_schema(path).names
        table = pq.read_table(path, columns=[FLAGGED_COLUMN, "probability_correct", *(["label"] if labeled else []),
                                             *(["answer"] if by_span else [])])
        flagged.append(table.column(FLAGGED_COLUMN).to_numpy(zero_copy_only=False).astype(bool))
        probability.append(table.column("probability_correct").to_numpy(zero_copy_only=False))
        labels.append(table.column("label").to_numpy(zero_copy_only=False) if labeled else None)
        answers += table.column("answer").to_pylist() if by_span else []
    if not flagged:
        return 0, 0, "no shard written", None
    every = np.concatenate(flagged)
    given = [part for part in labels if part is not None]
    y = np.concatenate(given) if len(given) == len(labels) else None
    other = other_script_warning(answers) if answers else None
    return int(every.sum()), len(every), flag_summary(every, np.concatenate(probability), y), other


def _decisions(args: argparse.Namespace, shards: list[Any], out: Path, settings: dict[str, Any],
               calibrator: Any) -> dict[str, Any]:
    """The flags a ``--coverage`` or ``--target-risk`` gives every shard's rows, decided over all of them
    (:func:`trace_core.scale.flag.flag_decisions`); nothing to decide when every shard's output is complete."""
    from ..data import DatasetError
    from ..scale import stored_result
    from ..scale.flag import flag_decisions, score_shard

    if all(stored_result(shard, out, settings=settings) is not None for shard in shards):
        return {}
    if not args.quiet:
        print(f"reading {counted(len(shards), 'shard')} for the answers' probabilities (--coverage and --target-risk "
              "are decided over all of them)", file=sys.stderr)
    try:
        return flag_decisions(shards, partial(score_shard, calibrator=calibrator, matcher=args.matcher,
                                              tolerance=args.tolerance),
                              coverage=args.coverage, target_risk=args.target_risk, by=args.by)
    except (DatasetError, ValueError) as exc:
        raise CLIError(str(exc)) from None


def flag_sharded(args: argparse.Namespace, calibrator: Any, calibrator_bytes: bytes,
                 certified: Any = None) -> None:
    """Flag every shard of ``args.data`` into the folder ``args.out`` (see the module's docstring).
    ``certified(args, calibrator)``: the threshold ``--max-risk`` certifies on ``--risk-data``."""
    from ..data import DatasetError
    from ..scale.flag import ShardFlagger
    from .score_shards import recorded_command, shard_reporter, shard_run

    if args.tokens:
        raise CLIError("--tokens: not with shards (the output shards hold every flagged answer's trace); run flag "
                       "on one shard's output to get its tokens")
    out, runner, engine_options, shards = shard_run(args, args.data)
    threshold = args.threshold
    if args.max_risk is not None and certified is not None:  # --risk-data is checked with the options
        threshold = certified(args, calibrator)
    settings = _settings(args, calibrator_bytes, threshold)
    decisions = _decisions(args, shards, out, settings, calibrator) if threshold is None else None
    work = ShardFlagger(calibrator, threshold=threshold, decisions=decisions, by=args.by, matcher=args.matcher,
                        tolerance=args.tolerance)
    summary = runner(shards, out, work, settings=settings,
                     command=recorded_command(getattr(args, "argv", [])), skip_errors=(DatasetError, ValueError),
                     on_shard=shard_reporter(args.quiet), **engine_options)
    flagged, written, readout, other = _flagged_summary(out, summary, by_span=args.by == "span")
    if other:
        print(f"warning: {other}", file=sys.stderr)
    print(f"flagged {flagged:,} of {counted(written, 'answer')} in {shown(str(out))} (column `flagged`; {readout}); "
          f"{summary.sentence()}", file=sys.stderr)
    if not args.quiet:
        print("the drift check is not run over shards: run flag on one shard to see it", file=sys.stderr)
    if summary.failed:
        names = ", ".join(shown(r.shard.name) for r in summary.failed[:5])
        raise CLIError(f"{len(summary.failed):,} of {counted(len(shards), 'shard')} failed ({names}); the others are "
                       "written; fix them and run the same command again to do only those")
