"""``trace-core score``: a dataset of prompts and answers -> the same rows with traces (teacher forcing), recording
only the rows without one unless ``--rescore``. A folder or a glob pattern of datasets is scored shard by shard into
an output folder, resumably (:mod:`trace_core.cli.score_shards`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trace_core.checks import counted
from trace_core.cli import common
from trace_core.cli._support import DATASET_OUT, check_not_input, check_out, progress, shown
from trace_core.cli.score_shards import is_sharded, refuse_engine_options, score_shards
from trace_core.scale.score import ShardScorer

__all__ = ["cmd_score"]


def cmd_score(args: argparse.Namespace) -> None:
    """One file is scored by the work each shard of a sharded run does (:class:`~trace_core.scale.score.ShardScorer`),
    on the file as read here (its summary on stderr), written to ``--out`` in the format its name gives."""
    if is_sharded(args.data):
        score_shards(args)
        return
    refuse_engine_options(args)
    check_out(args.out, DATASET_OUT)
    check_not_input(args.out, [("the input file", args.data)], written="the scored dataset")
    dataset = common.read_data(args.data, require_label=False, args=args)
    scorer = ShardScorer(lambda: _model(args, scorer), rescore=args.rescore, chat_template=args.chat_template,
                         n_alternatives=args.alternatives, batch_size=common.request_batch(args),
                         num_beams=args.beams, progress=lambda total, what: progress(total, what, not args.quiet))
    todo = 0 if dataset.has_traces and not args.rescore else len(scorer.rows_to_score(dataset.traces))
    scored = scorer.score_dataset(dataset, name=shown(args.data))
    if not args.quiet:
        had = len(scored.frame) - todo
        print(f"recorded {counted(todo, 'trace')}; {counted(had, 'row')} already had one", file=sys.stderr)
    for note in scored.notes:
        print(f"warning: {note}", file=sys.stderr)
    common.write_data(scored.frame, scored.traces, args.out, quiet=args.quiet)


def _model(args: argparse.Namespace, scorer: ShardScorer) -> Any:
    """The model, loaded when the first row to score comes, with ``--chat-template`` resolved for it (and the note
    when its template goes unused), which the scorer then follows."""
    lm = common.load_model(args)
    common.resolve_chat_template(lm, args, generating=False)
    scorer.chat_template = args.chat_template
    return lm
