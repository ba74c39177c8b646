"""Command line: ``python -m trace_core`` or ``trace-core``.

Subcommands::

    generate   prompts file -> answers + traces (a local model, a model server or several); a folder or a glob
               pattern of prompt files -> an output folder of Parquet shards with a manifest, resumable
    score      labeled dataset -> the same rows with traces (teacher forcing with a local model); a folder or a
               glob pattern of datasets -> an output folder of Parquet shards with a manifest, resumable
    evaluate   dataset with traces and labels -> TRACE / TRACE+ / baselines results table
    fit        dataset with traces and labels -> calibrator (JSON): TRACE+, or TRACE or a baseline calibrated
    flag       dataset with traces + calibrator -> the low-confidence answers (CSV / JSONL)

Errors are one line on stderr with exit status 1 (2 for usage errors); ``--debug`` shows the traceback. Which rows
are usable (missing traces, empty answers, one class) and the words that say so come from :mod:`trace_core.policy`,
shared with the dashboard; environment settings are read by :mod:`trace_core.settings` (through the library), never
here.

Each subcommand runs in its own module (``generate`` and ``score``, with ``generate_shards`` and ``score_shards``
for sharded input, ``evaluate``, ``fit``, ``flag``); ``parser`` builds the arguments, ``options`` checks them before
any work, ``common`` reads and writes the datasets and loads the model, and ``_support`` holds the error type, the
``--out`` checks, progress bars and the warnings' words.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

from trace_core.cli._support import CLIError, cli_words, close_progress_bars, plain_warnings
from trace_core.cli.options import check_options
from trace_core.cli.parser import build_parser
from trace_core.settings import redact_secrets

__all__ = ["CLIError", "build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: the process's arguments); the exit status: 0, 1 on an error (one
    line on stderr), 130 when interrupted (usage errors exit 2 from argparse)."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        with warnings.catch_warnings(record=True) as caught:  # library warnings become plain lines, never raw
            warnings.simplefilter("always")
            try:
                check_options(args)
                args.func(args)
            finally:
                plain_warnings(caught)
    except KeyboardInterrupt:
        close_progress_bars()
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one clear line for the user; the traceback only on request
        close_progress_bars()  # the error starts its own line, not after a bar's residue
        if args.debug:
            raise
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"error: {redact_secrets(cli_words(message))}", file=sys.stderr)  # a server may echo a key
        return 1
    return 0
