"""``trace-core score``: a dataset of prompts and answers -> the same rows with traces (teacher forcing), recording
only the rows without one unless ``--rescore``. A folder or a glob pattern of datasets is scored shard by shard into
an output folder, resumably (:mod:`trace_core.cli.score_shards`)."""

from __future__ import annotations

import argparse
import json
import sys

from trace_core.checks import counted
from trace_core.cli import common
from trace_core.cli._support import DATASET_OUT, CLIError, check_not_input, check_out, progress, shown
from trace_core.cli.score_shards import is_sharded, refuse_engine_options, score_shards
from trace_core.policy import usable_rows
from trace_core.record import beam_logprobs, score_answers
from trace_core.scale.score import over_context_message

__all__ = ["cmd_score"]


def cmd_score(args: argparse.Namespace) -> None:
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
        common.resolve_chat_template(lm, args, generating=False)
        prompts = [str(frame["prompt"].iloc[i]) for i in todo]
        answers = [str(frame["answer"].iloc[i]) for i in todo]
        update, close = progress(len(todo), "scoring", not args.quiet)
        try:
            new = score_answers(lm, prompts, answers, chat_template=args.chat_template,
                                n_alternatives=args.alternatives, batch_size=common.request_batch(args),
                                progress=update)
        except ValueError as exc:  # the library counts the answers it was given from 0; the user counts file rows
            rows = common.row_numbers(dataset)
            message = over_context_message(lm, prompts, answers, [rows[i] for i in todo],
                                           chat_template=args.chat_template)
            if message is None:
                raise
            raise CLIError(f"{shown(args.data)}: {message}") from exc
        finally:
            close()
        for i, trace in zip(todo, new, strict=True):
            traces[i] = trace
        if args.beams:
            frame = frame.copy()
            frame["beam_logprobs"] = [json.dumps(b) for b in beam_logprobs(
                lm, frame["prompt"].astype(str).tolist(), num_beams=args.beams, chat_template=args.chat_template)]
    if not args.quiet:
        had = len(traces) - len(todo)
        print(f"recorded {counted(len(todo), 'trace')}; {counted(had, 'row')} already had one", file=sys.stderr)
    unscorable = usable_rows(traces, row_numbers=common.row_numbers(dataset)).empty_message(left_out=False)
    if unscorable:
        print(f"warning: {unscorable}", file=sys.stderr)
    common.write_data(frame, traces, args.out, quiet=args.quiet)
