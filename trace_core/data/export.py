"""Export for people: rows written for spreadsheets and readers, with spreadsheet formula injection neutralised."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from trace_core.checks import check_bool, check_choice
from trace_core.data.read import PathOrBuffer
from trace_core.data.write import csv_bytes, csv_text, jsonl_bytes, to_plain, write_bytes
from trace_core.traces.table import traces_to_columns

if TYPE_CHECKING:
    from trace_core.traces.trace import Trace

__all__ = ["export_flagged", "sanitize_cell", "token_table", "with_trace_columns"]

# OWASP's list of characters that start a formula, plus their full-width forms (which spreadsheets also accept).
_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
# A plain decimal number, ASCII only: an optional sign, digits with an optional point (or a point and digits), an
# optional exponent. "-4.5", "+3", "1e-3", "-0.25", "-.5", "7." match; "-inf", "1,000", "-1+1", "0x1F" do not.
_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# Characters that show as nothing (or as blank) but that a spreadsheet may skip before a formula: besides the
# Unicode categories Z* (spaces, line and paragraph separators), Cc (controls: \t \n \r ...) and Cf (format: zero
# width space, BOM, bidirectional marks, ...), these letters that render blank.
_BLANK_LETTERS = frozenset("\u115f\u1160\u2800\u3164\uffa0")


def _invisible(char: str) -> bool:
    return char.isspace() or char in _BLANK_LETTERS or unicodedata.category(char)[0] == "Z" \
        or unicodedata.category(char) in ("Cc", "Cf")


def sanitize_cell(value: object) -> object:
    """Neutralise spreadsheet formula injection in one exported cell.

    The rule: a string cell gets a leading single quote (so spreadsheet programs show it as text instead of running
    it) when

    * its first character is ``=``, ``+``, ``-``, ``@``, tab or carriage return (OWASP's list, plus the full-width
      ``＝ ＋ － ＠``), or
    * it starts with whitespace or invisible characters (spaces of any kind, no-break space, line breaks, tabs,
      zero-width characters, a byte order mark, bidirectional marks, other control and format characters) followed
      by one of those characters: ``" =1+1"``, ``"\\u00a0=..."``, ``"\\u200b=..."``, ``"\\ufeff=..."``,
      ``"\\n=..."``,

    unless the string is exactly a plain decimal number (ASCII digits with an optional sign, decimal point and
    exponent: ``"-4.5"``, ``"+3"``, ``"1e-3"``, ``"-0.25"``), which a spreadsheet reads as that number and never as a
    formula: real numbers are never changed. Numbers of numeric type (int, float) and every other non-string value
    are returned unchanged.

    Parameters
    ----------
    value : object
        One cell.

    Returns
    -------
    object
        The cell, quoted when it is a string that a spreadsheet would run.

    Examples
    --------
    >>> sanitize_cell("=HYPERLINK(\\"http://x\\")"), sanitize_cell(" =1+1"), sanitize_cell("\\u200b@SUM(A1)")
    ('\\'=HYPERLINK("http://x")', "' =1+1", "'\\u200b@SUM(A1)")
    >>> sanitize_cell("-4.5"), sanitize_cell("+3"), sanitize_cell(-3), sanitize_cell("-2+3"), sanitize_cell("ok")
    ('-4.5', '+3', -3, "'-2+3", 'ok')
    """
    if not isinstance(value, str) or not value:
        return value
    if _PLAIN_NUMBER.fullmatch(value):
        return value
    if value.startswith(_FORMULA_PREFIXES):
        return "'" + value
    start = 0
    while start < len(value) and _invisible(value[start]):
        start += 1
    if 0 < start < len(value) and value.startswith(_FORMULA_PREFIXES, start):
        return "'" + value
    return value


def _finite(value: Any) -> Any:
    """A plain value with every non-finite float (inf, -inf, NaN), also inside lists and dicts, as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def export_flagged(frame: pd.DataFrame, dest: PathOrBuffer, *, format: str = "csv",
                   sanitize: bool | None = None) -> None:
    """Export rows (e.g. the flagged answers) for people, as CSV or JSON Lines.

    Every value is exported, whatever it is: a non-finite number (``inf``, ``-inf``, NaN), which neither JSON nor a
    spreadsheet holds as a number, is written as ``null`` in JSON Lines and as an empty cell in CSV (like a missing
    value), also inside lists and dicts.

    Parameters
    ----------
    frame : pandas.DataFrame
        The rows to export, every column as is (lists and dicts become JSON text in CSV).
    dest : str, Path, or binary or text file-like
    format : {"csv", "jsonl"}
    sanitize : bool or None
        Pass every text cell (and column name) through :func:`sanitize_cell`. None (default): True for CSV, which
        spreadsheets open, and False for JSON Lines, which programs read and where a changed value (``"=1+1"`` ->
        ``"'=1+1"``) would be a corruption rather than a protection.

    Examples
    --------
    >>> import io
    >>> buffer = io.BytesIO()
    >>> export_flagged(pd.DataFrame({"answer": ["=1+1"], "x": [float("inf")]}), buffer)
    >>> buffer.getvalue()
    b"answer,x\\r\\n'=1+1,\\r\\n"
    """
    check_choice(format, "format", ("csv", "jsonl"))
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"`frame` must be a pandas DataFrame, got {type(frame).__name__}")
    sanitize = format == "csv" if sanitize is None else check_bool(sanitize, "sanitize")
    clean = sanitize_cell if sanitize else (lambda v: v)
    header = [str(clean(str(c))) for c in frame.columns]
    if format == "csv":
        # Sanitise before turning values into text: numbers of numeric type are not strings and stay as they are.
        rows = ([csv_text(clean(_finite(to_plain(v)))) for v in values]
                for values in frame.itertuples(index=False, name=None))
        data = csv_bytes(header, rows)
    else:
        records = ({h: clean(_finite(to_plain(v))) for h, v in zip(header, values, strict=True)}
                   for values in frame.itertuples(index=False, name=None))
        data = jsonl_bytes(records)
    write_bytes(dest, data)


def with_trace_columns(frame: pd.DataFrame, traces: Sequence[Trace | None]) -> pd.DataFrame:
    """``frame`` with each row's trace as the dataset's trace columns (``tokens``, ``surprisal``, ``entropy``,
    ``top_*``, ``ranks``, ``trace_metadata``; :func:`trace_core.data.traces_to_columns`), replacing any of those
    columns it had: an export that :func:`trace_core.data.read_dataset` reads back with the same traces, so it can
    be scored again. One trace per row, in order."""
    traces = list(traces)
    if len(traces) != len(frame):
        raise ValueError(f"got {len(traces)} traces for {len(frame)} rows")
    columns = traces_to_columns(traces)
    out = frame.drop(columns=[c for c in columns if c in frame.columns]).copy()
    for name, values in columns.items():
        out[name] = values
    return out


def token_table(traces: Sequence[Trace], rows: Sequence[Any] | None = None) -> pd.DataFrame:
    """One row per token of each answer: ``row`` (``rows[i]``, default 1, 2, ...), ``position`` (from 1),
    ``token`` (its text), ``token_id``, ``probability`` (``exp(-surprisal)``), ``surprisal``, ``entropy`` (empty
    when the trace holds none), ``rank`` (empty when unknown) and ``alternatives`` (the stored top alternatives as
    ``token (p%)`` joined by ``" | "``; their ids when the trace has no texts).

    Examples
    --------
    >>> import numpy as np
    >>> from trace_core import Trace
    >>> t = Trace(prompt="q", answer=" 4", token_ids=[604], tokens=[" 4"], surprisal=[0.105], entropy=[0.4],
    ...           top_ids=[[604, 605]], top_logprobs=np.log([[0.9, 0.05]]), top_tokens=[[" 4", " 5"]])
    >>> token_table([t], rows=[7])[["row", "position", "token", "alternatives"]].to_dict("records")
    [{'row': 7, 'position': 1, 'token': ' 4', 'alternatives': "' 4' (90.0%) | ' 5' (5.0%)"}]
    """
    traces = list(traces)
    rows = list(range(1, len(traces) + 1)) if rows is None else list(rows)
    if len(rows) != len(traces):
        raise ValueError(f"got {len(rows)} row numbers for {len(traces)} traces")
    records = []
    for row, trace in zip(rows, traces, strict=True):
        texts, entropy = trace.top_tokens, trace.entropy
        for i in range(len(trace)):
            alternatives = [f"{texts[i][k]!r} ({math.exp(lp):.1%})" if texts is not None else
                            f"id {int(trace.top_ids[i][k])} ({math.exp(lp):.1%})"
                            for k, lp in enumerate(trace.top_logprobs[i])]
            records.append({"row": row, "position": i + 1, "token": trace.tokens[i],
                            "token_id": int(trace.token_ids[i]), "probability": math.exp(-float(trace.surprisal[i])),
                            "surprisal": float(trace.surprisal[i]),
                            "entropy": float(entropy[i]) if entropy is not None else None,
                            "rank": int(trace.ranks[i]) if trace.ranks is not None else None,
                            "alternatives": " | ".join(alternatives)})
    columns = ["row", "position", "token", "token_id", "probability", "surprisal", "entropy", "rank", "alternatives"]
    return pd.DataFrame.from_records(records, columns=columns)
