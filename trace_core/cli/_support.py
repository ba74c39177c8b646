"""What the command line's subcommands share: its error type, the checks of ``--out`` paths made before any work,
progress bars on stderr, and library warnings turned into plain lines in the command line's words."""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trace_core.checks import clip, shorten
from trace_core.settings import redact_secrets

__all__ = ["CALIBRATOR_OUT", "DATASET_OUT", "FLAGGED_OUT", "HTML_OUT", "REPORT_OUT", "TOKENS_OUT", "CLIError",
           "check_not_input", "check_out", "cli_words", "close_progress_bars", "plain_warnings", "progress",
           "regular_file", "say_drift", "shown"]


class CLIError(Exception):
    """A user-facing error: printed as one line."""


# What each subcommand's --out may be: extension -> format, and the words that say so. Checked before any work.
DATASET_OUT = ({".csv": "csv", ".tsv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
                ".parquet": "parquet", ".pq": "parquet"},
               "expected .csv, .jsonl or .parquet (or .tsv, .json, .ndjson, .pq)")
TOKENS_OUT = ({".csv": "csv"}, "expected .csv")
HTML_OUT = ({".html": "html", ".htm": "html"}, "expected .html")
REPORT_OUT = ({".md": "markdown", ".markdown": "markdown", ".csv": "csv", ".json": "json"},
              "expected .md (Markdown), .csv or .json")
CALIBRATOR_OUT = ({".json": "json"}, "expected .json (the calibrator is JSON)")
FLAGGED_OUT = ({".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}, "expected .csv or .jsonl")


def shown(path: str) -> str:
    """A path as typed, cut to about 200 characters; quoted with its line breaks and other control characters
    escaped (as Python writes it) when it has any, so that a message naming it stays one line."""
    return clip(path) if path.isprintable() else shorten(path)


def regular_file(path: str) -> Path:
    """``path`` when it names a regular file (symlinks followed); else a one-line :class:`CLIError`. Checked before
    the file is opened: a device (``/dev/zero``) never ends and a FIFO blocks until someone writes to it."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, a NUL byte, no permission
        raise CLIError(f"{shown(path)}: no such file") from None
    if not stat.S_ISREG(mode):
        what = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a device, a pipe or a socket)"
        raise CLIError(f"{shown(path)}: is {what}; give a file")
    return Path(path)


def check_out(out: str, kind: tuple[dict[str, str], str], *, option: str = "--out") -> str:
    """The format that ``out`` names by its extension, after checking that it can be written: a file name (not a
    folder) with a known extension, in a folder that exists and is writable. Called before any work, so that a bad
    name never costs a run; raises a one-line :class:`CLIError` naming the option."""
    extensions, expected = kind
    where = f"{option} {shown(out)}"
    if not out.strip():
        raise CLIError(f"{option}: empty; {expected}")
    path = Path(out)
    if out.endswith(("/", os.sep)) or path.is_dir():
        raise CLIError(f"{where}: is a folder; give a file name in it ({expected})")
    suffix = path.suffix.lower()
    if suffix not in extensions:
        what = "no extension" if not suffix else f"unknown extension {shown(path.suffix)}"
        raise CLIError(f"{where}: {what}; {expected}")
    folder = path.parent
    if not folder.exists():
        raise CLIError(f"{where}: the folder {shown(str(folder))} does not exist; create it first")
    if not folder.is_dir():
        raise CLIError(f"{where}: {shown(str(folder))} is not a folder")
    if not os.access(folder, os.W_OK):
        raise CLIError(f"{where}: cannot write in the folder {shown(str(folder))}")
    if path.exists() and not path.is_file():
        raise CLIError(f"{where}: exists and is not a regular file")
    return extensions[suffix]


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name the same file (symlinks and hard links too)."""
    try:
        if Path(a).exists() and Path(b).exists():
            return os.path.samefile(a, b)
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def check_not_input(out: str | None, inputs: Sequence[tuple[str, str | None]], *, written: str,
                    option: str = "--out") -> None:
    """A one-line :class:`CLIError` when ``out`` (given as ``option``) names one of ``inputs`` ((what it is, path)
    pairs): the same file, through a symlink or a hard link. No command writes over a file it reads; checked before
    any work, so the input is left byte for byte as it was."""
    if not out:
        return
    for what, given in inputs:
        if given and _same_file(out, given):
            raise CLIError(f"{option} {shown(out)}: is {what} ({shown(given)}); it would be replaced by {written}: "
                           "write it to another file")


def progress(total: int, description: str, enabled: bool, *, unit: str = "answer"):
    """A tqdm bar on stderr (silent when disabled or when tqdm is missing); returns (update callback, close)."""
    if not enabled:
        return None, lambda: None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is in the pinned set
        return None, lambda: None
    bar = tqdm(total=total or None, desc=description, unit=unit, unit_scale=unit == "B", file=sys.stderr,
               dynamic_ncols=True, leave=False)
    _OPEN_BARS.append(bar)

    def update(done: int, total_now: int) -> None:
        if total_now and bar.total != total_now:
            bar.total = total_now
        bar.update(done - bar.n)

    def close() -> None:
        bar.close()
        if bar in _OPEN_BARS:
            _OPEN_BARS.remove(bar)

    return update, close


#: Progress bars not yet closed: an error closes (clears) them first, so its line never shares a bar's line.
_OPEN_BARS: list[Any] = []


def close_progress_bars() -> None:
    """Close every open progress bar (each clears its line), e.g. before printing an error."""
    while _OPEN_BARS:
        _OPEN_BARS.pop().close()


# Library names -> the command line's: keyword arguments (as the library's checks quote them, "`n_splits`") and
# opt-ins ("allow_pickle_weights=True"). Only these exact spellings are rewritten.
_OPTION_OF = {"n_splits": "--splits", "calibration_fraction": "--calibration-fraction", "n_bins": "--bins",
              "seed": "--seed", "C": "--C", "max_new_tokens": "--max-new-tokens", "batch_size": "--batch-size",
              "n_alternatives": "--alternatives", "num_beams": "--beams", "temperature": "--temperature",
              "top_k": "--top-k", "top_p": "--top-p", "threshold": "--threshold", "coverage": "--coverage",
              "target_risk": "--target-risk", "tolerance": "--tolerance", "matcher": "--matcher",
              "feature_set": "--feature-set", "scalar_calibrator": "--calibrator", "methods": "--methods",
              "embedder": "--embedder", "concurrency": "--concurrency", "max_retries": "--retries",
              "timeout": "--timeout", "tokenizer": "--server-tokenizer", "full_distribution": "--full-distribution",
              "api_key_env": "--api-key-env", "base_url": "--server"}
_OPT_IN = {"allow_pickle_weights=True": "--allow-pickle-weights", "trust_remote_code=True": "--trust-remote-code",
           "stratified=True": "--stratified", "local_files_only=False": "(no option: the command line never "
                                                                        "downloads)"}
_LIBRARY_ONLY = ((re.compile(r",? or pass format= one of \([^)]*\)"), ""),  # the command line reads the extension
                 (re.compile(r"use format='(\w+)' or an? \.(\w+) extension"), r"give it a .\2 extension"),
                 (re.compile(r", or read_dataset\(\w+=\.\.\.\)"), ""))  # the setting is the command line's way
_KEYWORD = re.compile(r"`(\w+)`")
_PYTHON_CALL = re.compile(r"\b(?:pass|give|set) (\w+)=(?:True|False|None|\w+)\b")


def cli_words(message: str) -> str:
    """A library message in the command line's words: options instead of keyword arguments."""
    for keyword, option in _OPT_IN.items():
        message = message.replace(f"`{keyword}`", option).replace(keyword, option)
    message = message.replace("stratified splits", "--stratified")
    for pattern, replacement in _LIBRARY_ONLY:
        message = pattern.sub(replacement, message)
    message = _KEYWORD.sub(lambda m: _OPTION_OF.get(m.group(1), m.group(0)), message)
    return _PYTHON_CALL.sub(lambda m: (f"use {_OPTION_OF[m.group(1)]}" if m.group(1) in _OPTION_OF
                                       else m.group(0)), message)


def say_drift(result: Any, *, quiet: bool) -> None:
    """The drift check's result (:class:`trace_core.calibration.drift.DriftResult`) as one line on stderr: ``warning:
    drift: ...`` when a shift was found, else ``drift check: ...`` (left out with ``--quiet``)."""
    text = result.sentence()
    line = text[:1].lower() + text[1:]
    if result.detected:
        print(f"warning: {line}", file=sys.stderr)
    elif not quiet:
        print(line, file=sys.stderr)


def plain_warnings(caught: Sequence[Any], *, skip: tuple[type, ...] = ()) -> None:
    """Library warnings as plain ``warning: ...`` lines on stderr (each text once), never with source paths; numpy's
    floating-point RuntimeWarnings ("divide by zero encountered in log") become one line that says what they mean."""
    seen = set()
    numeric = []
    for w in caught:
        if skip and issubclass(w.category, skip):
            continue
        text = redact_secrets(cli_words(str(w.message).strip()))
        if issubclass(w.category, RuntimeWarning) and "encountered in" in text:
            numeric.append(text)
            continue
        if text and text not in seen:
            seen.add(text)
            print(f"warning: {clip(text)}", file=sys.stderr)
    if numeric:
        kinds = ", ".join(dict.fromkeys(numeric))
        print(f"warning: a computation met values it could not handle ({clip(kinds)}); results may hold NaN or "
              "infinite values; rerun with --debug to see where", file=sys.stderr)
