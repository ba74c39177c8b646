"""``trace-core generate``: a prompts file -> answers with traces, from a local model or a model server (or several);
labeled against the file's `reference` column when it has one. A folder or a glob pattern of prompt files is
generated shard by shard into an output folder, resumably (:mod:`trace_core.cli.generate_shards`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import pandas as pd

from trace_core import settings
from trace_core.checks import AnswerValueError, clip, counted
from trace_core.cli import common
from trace_core.cli._support import DATASET_OUT, CLIError, check_not_input, check_out, progress, regular_file, shown
from trace_core.cli.generate_shards import generate_shards
from trace_core.cli.options import decoding
from trace_core.cli.score_shards import is_sharded, refuse_engine_options
from trace_core.data import DatasetError
from trace_core.data.prompts import answered_frame, matcher_hint, read_prompts, row_errors_text, unlabeled_message
from trace_core.record import generate_traces
from trace_core.scale.generate import beam_column

__all__ = ["cmd_generate"]


def _read_prompts(path: str, args: argparse.Namespace | None = None) -> tuple[pd.DataFrame, list[Any] | None,
                                                                               list[int]]:
    """The prompts to generate from (:func:`trace_core.data.prompts.read_prompts`): (the rows as a frame, each row's
    `reference` or None without that column, each row's number in the file). Rows without a prompt are named in one
    warning line; the columns that describe the input's answers are left out, and said so unless ``--quiet``."""
    quiet = bool(getattr(args, "quiet", False))
    p = regular_file(path)  # never /dev/zero (endless) or a FIFO (blocks)
    update, close = progress(0, f"reading {p.name}", not quiet and p.suffix.lower() not in (".txt", ""), unit="B")
    try:
        read = read_prompts(p, progress=update, max_bytes=settings.get("TRACE_MAX_DATA_MB") * 2**20,
                            max_cell_chars=settings.get("TRACE_MAX_CELL_MB") * 2**20)
    except DatasetError as exc:
        raise CLIError(f"{shown(path)}: {exc}") from None
    finally:
        close()
    if read.skipped:
        rows = len({e.row for e in read.skipped})
        print(f"warning: {shown(path)}: skipped {rows:,} of {counted(read.n_read, 'row')} "
              f"({row_errors_text(read.skipped)})", file=sys.stderr)
    if not quiet and p.suffix.lower() not in (".txt", ""):
        print(f"{counted(read.n_read, 'row')} read: {counted(len(read.rows), 'prompt')}", file=sys.stderr)
        if read.dropped:
            dropped = read.dropped
            labels = (f"; the generated answers are labeled against `reference` (--matcher "
                      f"{getattr(args, 'matcher', 'exact')})" if read.references is not None
                      else "; give a `reference` column to label the generated answers" if "label" in dropped
                      else "")
            names = ", ".join(f"`{clip(c, 60)}`" for c in dropped[:8]) + (", ..." if len(dropped) > 8 else "")
            verb = "it describes" if len(dropped) == 1 else "they describe"
            print(f"{shown(path)}: dropped {names}: {verb} the input's answers, which generate replaces{labels}",
                  file=sys.stderr)
    return read.frame, read.references, read.rows


def cmd_generate(args: argparse.Namespace) -> None:
    if is_sharded(args.prompts):
        generate_shards(args)
        return
    refuse_engine_options(args)
    check_out(args.out, DATASET_OUT)
    check_not_input(args.out, [("the prompts file", args.prompts)], written="the generated answers")
    frame, references, rows = _read_prompts(args.prompts, args)
    lm = common.load_model(args)
    common.resolve_chat_template(lm, args, generating=True)
    prompts = frame["prompt"].astype(str).tolist()
    config = decoding(args)
    common.warn_unseeded(config, shards=False)
    update, close = progress(len(prompts), "generating", not args.quiet)
    try:
        traces = generate_traces(lm, prompts, config=config, batch_size=common.request_batch(args),
                                 progress=update)
    except AnswerValueError as exc:  # the library counts prompts from 0; the user counts file rows
        raise CLIError(f"{shown(args.prompts)}: row {rows[exc.index]}: the answer {exc.reason}; shorten the prompt "
                       "or lower --max-new-tokens") from exc
    finally:
        close()
    answers = [t.answer for t in traces]
    empty = common.empty_answers_warning(answers, lm, args)
    if empty:
        print(f"warning: {empty}", file=sys.stderr)
    frame, problems = answered_frame(frame, answers, references, rows, matcher=args.matcher,
                                     tolerance=args.tolerance)
    if problems:  # the rows are named; evaluate rejects those rows, naming the label
        print(f"warning: {shown(args.prompts)}: {unlabeled_message(problems, len(traces))}", file=sys.stderr)
    hint = matcher_hint(frame, references, rows, args.matcher)
    if hint:
        print(f"warning: {shown(args.prompts)}: {hint}", file=sys.stderr)
    if args.beams:
        frame["beam_logprobs"] = beam_column(lm, prompts, num_beams=args.beams, max_new_tokens=args.max_new_tokens,
                                             chat_template=args.chat_template)
    common.write_data(frame, traces, args.out, quiet=args.quiet)
