"""``trace-core generate``: a prompts file -> answers with traces, from a local model or a model server; labeled
against the file's `reference` column when it has one."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import pandas as pd

from .._checks import clip
from . import common
from ._support import DATASET_OUT, CLIError, check_not_input, check_out, progress, regular_file, shown
from .options import decoding

__all__ = ["cmd_generate"]


def _rows_text(errors: Sequence[Any], shown_rows: int = 3) -> str:
    """The first ``shown_rows`` row errors, and how many more, for a one-line message (each quotes at most ~60
    characters of the file)."""
    more = len(errors) - shown_rows
    return "; ".join(clip(str(e)) for e in errors[:shown_rows]) + (f"; and {more:,} more" if more > 0 else "")


def _read_prompts(path: str, args: argparse.Namespace | None = None) -> tuple[pd.DataFrame, list[Any] | None,
                                                                               list[int]]:
    """The prompts to generate from (:func:`trace_core.data.prompts.read_prompts`): (the rows as a frame, each row's
    `reference` or None without that column, each row's number in the file). Rows without a prompt are named in one
    warning line; the columns that describe the input's answers are left out, and said so unless ``--quiet``."""
    from .. import settings
    from ..data import DatasetError
    from ..data.prompts import read_prompts

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
        print(f"warning: {shown(path)}: skipped {rows:,} of {read.n_read:,} rows ({_rows_text(read.skipped)})",
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
            print(f"{shown(path)}: dropped {names}: {verb} the input's answers, which generate replaces{labels}",
                  file=sys.stderr)
    return read.frame, read.references, read.rows


def _labels_of(answers: Sequence[str], references: Sequence[Any], rows: Sequence[int], path: str,
               args: argparse.Namespace) -> list[int | None]:
    """Each generated answer's 0/1 label against its row's `reference` (:func:`trace_core.data.prompts.label_answers`,
    by ``--matcher`` / ``--tolerance``); None, with one warning line naming the rows, where the reference is missing
    or unusable (``evaluate`` then rejects those rows, naming the label)."""
    from ..data.prompts import label_answers

    labels, problems = label_answers(answers, references, rows, matcher=args.matcher, tolerance=args.tolerance)
    if problems:
        print(f"warning: {shown(path)}: left {len(problems):,} of {len(labels):,} generated answers unlabeled, their "
              f"`reference` cannot label them ({_rows_text(problems)})", file=sys.stderr)
    return labels


def cmd_generate(args: argparse.Namespace) -> None:
    from ..record import beam_logprobs, generate_traces

    check_out(args.out, DATASET_OUT)
    check_not_input(args.out, [("the prompts file", args.prompts)], written="the generated answers")
    frame, references, rows = _read_prompts(args.prompts, args)
    lm = common.load_model(args)
    prompts = frame["prompt"].astype(str).tolist()
    update, close = progress(len(prompts), "generating", not args.quiet)
    try:
        traces = generate_traces(lm, prompts, config=decoding(args), batch_size=args.batch_size, progress=update)
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
    common.write_data(frame, traces, args.out, quiet=args.quiet)
