"""``trace-core score``: a dataset of prompts and answers -> the same rows with traces (teacher forcing), recording
only the rows without one unless ``--rescore``. A folder or a glob pattern of datasets is scored shard by shard into
an output folder, resumably (:mod:`trace_core.cli.score_shards`)."""

from __future__ import annotations

import argparse
import json
import sys

from . import common
from ._support import DATASET_OUT, check_not_input, check_out, progress
from .score_shards import is_sharded, refuse_engine_options, score_shards

__all__ = ["cmd_score"]


def cmd_score(args: argparse.Namespace) -> None:
    from ..policy import usable_rows
    from ..record import beam_logprobs, score_answers

    if is_sharded(args.data):
        score_shards(args)
        return
    refuse_engine_options(args)
    check_out(args.out, DATASET_OUT)
    check_not_input(args.out, [("the input file", args.data)], written="the scored dataset")
    dataset = common.read_data(args.data, require_label=False, args=args)
    frame = dataset.frame
    traces = list(dataset.traces)
    todo = [i for i, t in enumerate(traces) if t is None or args.rescore]
    if todo:
        lm = common.load_model(args)
        common.say_template_unused(lm, args)
        update, close = progress(len(todo), "scoring", not args.quiet)
        try:
            new = score_answers(lm, [str(frame["prompt"].iloc[i]) for i in todo],
                                [str(frame["answer"].iloc[i]) for i in todo], chat_template=args.chat_template,
                                n_alternatives=args.alternatives, batch_size=common.request_batch(args),
                                progress=update)
        finally:
            close()
        for i, trace in zip(todo, new, strict=True):
            traces[i] = trace
        if args.beams:
            frame = frame.copy()
            frame["beam_logprobs"] = [json.dumps(b) for b in beam_logprobs(
                lm, frame["prompt"].astype(str).tolist(), num_beams=args.beams, chat_template=args.chat_template)]
    if not args.quiet:
        print(f"recorded {len(todo):,} traces; {len(traces) - len(todo):,} rows already had one", file=sys.stderr)
    unscorable = usable_rows(traces, row_numbers=common.row_numbers(dataset)).empty_message(left_out=False)
    if unscorable:
        print(f"warning: {unscorable}", file=sys.stderr)
    common.write_data(frame, traces, args.out, quiet=args.quiet)
