"""``trace-core flag`` over shards: a folder or a glob pattern of datasets with traces -> one output folder of
Parquet shards holding every usable row with its scores and a ``flagged`` column, and a manifest; resumable
(:mod:`trace_core.scale.flag`).

A threshold (``--threshold``, or certified on ``--risk-data`` by ``--max-risk``) is applied shard by shard. A
``--coverage`` or ``--target-risk`` is decided over every shard's answers first (a pass that keeps only their
probabilities), then the shards are written; the decision (how many answers it flags, a digest of each shard's flags
and of the inputs) is one of the settings the manifest records, so a resumed run after an input changed decides
again and writes what a clean run writes. The drift check is not run over shards (it compares every answer's
features at once); run ``flag`` on a sample file to see it."""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
from functools import partial
from pathlib import Path
from typing import Any

from trace_core.checks import counted
from trace_core.cli._support import CLIError, shown
from trace_core.cli.score_shards import locked, recorded_command, shard_reporter, shard_run
from trace_core.data import DatasetError
from trace_core.flagging.flag import flag_summary
from trace_core.methods.spans import other_script_warning
from trace_core.scale import file_digest, read_entry, stored_result
from trace_core.scale.flag import FLAGGED_COLUMN, ShardFlagger, flag_decisions, score_shard

__all__ = ["flag_sharded"]


def _settings(args: argparse.Namespace, calibrator_bytes: bytes, threshold: float | None) -> dict[str, Any]:
    """What shapes the output shards: the calibrator (its digest), the rule and its value, how labels are found."""
    return {"calibrator_sha256": hashlib.sha256(calibrator_bytes).hexdigest(), "threshold": threshold,
            "coverage": args.coverage, "target_risk": args.target_risk, "max_risk": args.max_risk,
            "delta": args.delta if args.max_risk is not None else None, "by": args.by, "matcher": args.matcher,
            "tolerance": args.tolerance}


def _flagged_summary(folder: Path, summary: Any, *, by_span: bool = False) -> tuple[int, int, str, str | None]:
    """Rows flagged and rows written over every complete output shard (read from their ``flagged`` column),
    :func:`~trace_core.flagging.flag.flag_summary` of them (by their labels when every such shard has a ``label``
    column), and, when the answers were judged by their spans, :func:`~trace_core.methods.spans.other_script_warning` of
    their ``answer`` column (read in the same pass)."""
    import numpy as np
    import pyarrow.parquet as pq

    flagged, probability, labels = [], [], []
    answers: list[str] = []
    for result in summary.results:
        if result.entry is None:
            continue
        path = folder / result.shard.output  # the shard's own output (its entry was checked to name it)
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


def _decided(shards: list[Any], decisions: dict[str, Any], digests: list[str]) -> dict[str, Any]:
    """What a ``--coverage`` or ``--target-risk`` decided over every shard, as the settings record it: the answers
    flagged of all, a digest of each shard's flags, and a digest of the inputs they were decided on (each shard's
    name and SHA-256). A shard's output depends on every other shard's rows, so a resumed run whose decision differs
    redoes every shard, and one whose inputs changed decides again: the folder is what a clean run writes."""
    import numpy as np

    flags = hashlib.sha256()
    for shard in shards:
        mask = np.asarray(decisions[shard.name], dtype=bool)
        flags.update(f"{shard.name}\t{len(mask)}\n".encode("utf-8", "surrogateescape"))
        flags.update(np.packbits(mask).tobytes())
    flagged = sum(int(np.count_nonzero(decisions[s.name])) for s in shards)
    answers = sum(len(decisions[s.name]) for s in shards)
    return {"flagged": flagged, "answers": answers, "flags_sha256": flags.hexdigest(),
            "inputs_sha256": _inputs_digest([s.name for s in shards], digests)}


def _inputs_digest(names: list[str], digests: list[str]) -> str:
    text = "".join(f"{name}\t{digest}\n" for name, digest in zip(names, digests, strict=True))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _stored_decision(shards: list[Any], out: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The decision an earlier run recorded, when every shard's output is complete with it and it was decided on
    exactly these inputs (else None: it is decided again)."""
    found = [read_entry(out, shard.output) for shard in shards]
    entries = [e for e in found if e is not None]
    if len(entries) != len(shards):
        return None
    decided = entries[0].settings.get("decided")
    if not isinstance(decided, dict) or any(e.settings.get("decided") != decided for e in entries):
        return None
    if any(stored_result(shard, out, settings={**settings, "decided": decided}) is None for shard in shards):
        return None
    names = [shard.name for shard in shards]
    if decided.get("inputs_sha256") != _inputs_digest(names, [e.input_sha256 for e in entries]):
        return None
    return decided


def _decisions(args: argparse.Namespace, shards: list[Any], out: Path, settings: dict[str, Any],
               calibrator: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The flags a ``--coverage`` or ``--target-risk`` gives every shard's rows, decided over all of them
    (:func:`trace_core.scale.flag.flag_decisions`), and the decision as the settings record it (:func:`_decided`);
    no flags to make when every shard's output is complete with the decision an earlier run made on these inputs."""
    stored = _stored_decision(shards, out, settings)
    if stored is not None:
        return {}, stored
    if not args.quiet:
        print(f"reading {counted(len(shards), 'shard')} for the answers' probabilities (--coverage and --target-risk "
              "are decided over all of them)", file=sys.stderr)
    try:
        decisions = flag_decisions(shards, partial(score_shard, calibrator=calibrator, matcher=args.matcher,
                                                   tolerance=args.tolerance),
                                   coverage=args.coverage, target_risk=args.target_risk, by=args.by)
    except (DatasetError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    return decisions, _decided(shards, decisions, [file_digest(shard.path)[1] for shard in shards])


def flag_sharded(args: argparse.Namespace, calibrator: Any, calibrator_bytes: bytes,
                 certified: Any = None) -> None:
    """Flag every shard of ``args.data`` into the folder ``args.out`` (see the module's docstring), the folder's
    lock held from before the first shard is read to the end. ``certified(args, calibrator)``: the threshold
    ``--max-risk`` certifies on ``--risk-data``."""
    if args.tokens:
        raise CLIError("--tokens: not with shards (the output shards hold every flagged answer's trace); run flag "
                       "on one shard's output to get its tokens")
    out, runner, engine_options, shards = shard_run(args, args.data)
    with locked(out):
        _flag_locked(args, calibrator, calibrator_bytes, certified, (out, runner, engine_options, shards))


def _flag_locked(args: argparse.Namespace, calibrator: Any, calibrator_bytes: bytes, certified: Any,
                 run: tuple[Path, Any, dict[str, Any], list[Any]]) -> None:
    out, runner, engine_options, shards = run
    threshold = args.threshold
    keep_none = False
    if args.max_risk is not None and certified is not None:  # --risk-data is checked with the options
        threshold = certified(args, calibrator)
        keep_none = threshold is None  # nothing certified: flagging every answer is the guaranteed choice
    settings = _settings(args, calibrator_bytes, threshold)
    decisions = None
    if keep_none:
        settings, threshold = {**settings, "keep_none": True}, math.inf
    elif threshold is None:
        decisions, decided = _decisions(args, shards, out, settings, calibrator)
        settings = {**settings, "decided": decided}
    work = ShardFlagger(calibrator, threshold=threshold, decisions=decisions, by=args.by, matcher=args.matcher,
                        tolerance=args.tolerance)
    summary = runner(shards, out, work, settings=settings,
                     command=recorded_command(getattr(args, "argv", [])), skip_errors=(DatasetError, ValueError),
                     on_shard=shard_reporter(args.quiet), **engine_options)
    flagged, written, readout, other = _flagged_summary(out, summary, by_span=args.by == "span")
    if other:
        print(f"warning: {other}", file=sys.stderr)
    if summary.unlisted:
        print(f"warning: {shown(str(out))}: {summary.unlisted_sentence()}", file=sys.stderr)
    print(f"flagged {flagged:,} of {counted(written, 'answer')} in {shown(str(out))} (column `flagged`; {readout}); "
          f"{summary.sentence()}", file=sys.stderr)
    if not args.quiet:
        print("the drift check is not run over shards: run flag on one shard to see it", file=sys.stderr)
    if summary.failed:
        names = ", ".join(shown(r.shard.name) for r in summary.failed[:5])
        raise CLIError(f"{len(summary.failed):,} of {counted(len(shards), 'shard')} failed ({names}); the others are "
                       "written; fix them and run the same command again to do only those")
