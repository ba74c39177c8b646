"""Reading and validating labeled datasets, labeling answers from references, importing API traces, exporting rows.

A labeled dataset is a table (CSV, JSON Lines or Parquet) with one answer per row:

==================  ==========================================================================================
column              meaning
==================  ==========================================================================================
``prompt``          the prompt (required, non-empty text)
``answer``          the answer to score (may be empty; when missing or empty, ``response`` gives it)
``label``           1 = the answer is correct, 0 = wrong; accepted spellings: see :func:`parse_label`
``reference``       the gold answer, used to label the answer with a matcher when there is no ``label`` column
``tokens`` ...      an optional pre-recorded trace (see below)
``response``        a raw OpenAI-compatible API response with logprobs (:func:`trace_from_openai`), used for
                    the row's trace when the file has none of the trace columns below
==================  ==========================================================================================

Column names are matched ignoring case and surrounding spaces and are lower-cased in the returned frame; any other
column is kept as read. Every data row is numbered from 1 (the header is not counted; blank lines are skipped and not
counted), and every rejected row is reported with that number, the column and the reason -- nothing is dropped
silently. Problems that leave nothing to read (an empty or binary file, missing columns, ...) raise
:class:`DatasetError`.

Trace columns (all per token, length T; in CSV cells they are JSON text, in JSONL and Parquet native lists too):
``tokens`` (list of str), ``surprisal`` (>= 0 nats) or ``logprobs`` (<= 0; surprisal = -logprob), ``entropy``
(>= 0 nats; or estimated from ``top_logprobs``, see :func:`entropy_from_top_k`), and optionally ``token_ids``,
``top_logprobs`` (T x k, each row sorted from most to least likely), ``top_ids`` and ``top_tokens`` (T x k),
``ranks`` (1-based) and ``trace_metadata`` (a JSON object, :meth:`TraceMetadata.to_dict`). A row whose trace cells
are all empty has no trace (``None``), so a dataset may mix recorded and not-yet-recorded answers. The trace's answer
is the ``answer`` column as given, even when ``"".join(tokens)`` differs from it (the row is not rejected for that).

:func:`write_dataset` writes what :func:`read_dataset` reads back unchanged (floats as exact JSON reprs);
:func:`export_flagged` writes files for people, with spreadsheet formula injection neutralised (:func:`sanitize_cell`).
"""

from __future__ import annotations

import codecs
import csv
import io
import itertools
import json
import math
import re
import string
import unicodedata
import warnings
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Iterable, Mapping, Sequence, Union

import numpy as np
import pandas as pd

from .trace import Trace, TraceMetadata

__all__ = [
    "DatasetError",
    "DatasetWarning",
    "FORMATS",
    "LabeledDataset",
    "MATCHERS",
    "RowError",
    "TRACE_COLUMNS",
    "entropy_from_top_k",
    "export_flagged",
    "label_from_reference",
    "normalize_answer",
    "parse_beam_logprobs",
    "parse_label",
    "read_dataset",
    "sanitize_cell",
    "trace_from_openai",
    "traces_to_columns",
    "write_dataset",
]

FORMATS = ("csv", "jsonl", "parquet")
MATCHERS = ("exact", "contains", "numeric", "f1")
#: Columns that carry a pre-recorded trace (``response`` is separate: it is used only when none of these exist).
TRACE_COLUMNS = ("tokens", "token_ids", "surprisal", "logprobs", "entropy", "top_ids", "top_logprobs", "top_tokens",
                 "ranks", "trace_metadata")

PathOrBuffer = Union[str, Path, IO[bytes], IO[str]]

_EXTENSIONS = {".csv": "csv", ".tsv": "csv", ".txt": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
               ".parquet": "parquet", ".pq": "parquet"}
_EXTENSIONS_TEXT = ".csv/.tsv (csv), .jsonl/.json/.ndjson (jsonl), .parquet/.pq (parquet)"
_LABEL_WORDS = {"1": 1, "0": 0, "true": 1, "false": 0, "yes": 1, "no": 0, "correct": 1, "incorrect": 0,
                "y": 1, "n": 0, "t": 1, "f": 0}
_LABEL_EXPECTED = "0/1, true/false, yes/no, correct/incorrect"
_DELIMITERS = (",", ";", "\t", "|")
_DELIMITER_NAMES = {",": "','", ";": "';'", "\t": "tab", "|": "'|'"}
_NEG_TOLERANCE = 1e-5  # same slack as Trace: a float32 log-softmax can give -1e-7 for a certain token
_MAX_SHOWN = 60
_CSV_FIELD_LIMIT = 2**31 - 1  # trace cells of long answers exceed the csv module's default 128 KiB per field
_NO_LOGPROBS = "response has no choices[0].logprobs: ask the server for logprobs=true (and top_logprobs=k)"
_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


class DatasetError(ValueError):
    """A problem with the whole file that leaves nothing to keep (empty, unreadable, not a table, missing columns)."""


class DatasetWarning(UserWarning):
    """Emitted by :func:`read_dataset` when some rows were rejected (they are listed in ``LabeledDataset.errors``)."""


@dataclass(frozen=True)
class RowError:
    """Why one row (or, with ``row == 0``, the file) was rejected.

    Attributes
    ----------
    row : int
        1-based data-row number (the header is not counted); 0 for a file-level problem.
    field : str
        The column at fault, or "" when the problem is the row as a whole.
    message : str
        What was wrong and what was expected, with the offending value (repr'd, truncated).
    """

    row: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"row {self.row}" if self.row > 0 else "file"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


@dataclass
class LabeledDataset:
    """The valid rows of a dataset, their traces, and every rejected row with its reason.

    Attributes
    ----------
    frame : pandas.DataFrame, shape (n_valid, ...)
        The valid rows, every input column kept as read (names lower-cased), an int column ``label`` (0/1; the
        input's ``label`` column is replaced by its parsed value; absent when ``label_source == "none"``), an
        ``answer`` column (added when taken from ``response``), and an int column ``row_column`` holding each row's
        1-based data-row number in the file. The index is 0..n_valid-1.
    traces : list of Trace or None, length n_valid
        One per valid row, None where the row carries no trace.
    errors : list of RowError
        Every problem found; a rejected row has one or more entries.
    n_read : int
        Data rows read from the file.
    label_source : str
        ``"label"``, ``"reference:<matcher>"`` or ``"none"``.
    row_column : str
        Name of the row-number column: ``"row"``, or ``"_row"`` when the input already has a ``row`` column.
    """

    frame: pd.DataFrame
    traces: list[Trace | None]
    errors: list[RowError]
    n_read: int
    label_source: str
    row_column: str = "row"

    @property
    def n_valid(self) -> int:
        return int(len(self.frame))

    @property
    def n_rejected(self) -> int:
        return self.n_read - self.n_valid

    @property
    def has_traces(self) -> bool:
        """True when there is at least one valid row and every valid row has a trace."""
        return bool(self.traces) and all(t is not None for t in self.traces)

    @property
    def labels(self) -> np.ndarray:
        """The 0/1 labels of the valid rows, shape (n_valid,), int64."""
        if "label" not in self.frame.columns:
            raise ValueError("this dataset has no labels (label_source is 'none')")
        return self.frame["label"].to_numpy(dtype=np.int64)

    def summary(self, *, max_errors: int = 3) -> str:
        """One line, e.g. ``"1,000 rows read: 997 kept, 3 rejected (row 4: label: 'maybe' is not one of ...)"``."""
        text = f"{self.n_read:,} rows read: {self.n_valid:,} kept, {self.n_rejected:,} rejected"
        if self.errors:
            shown = "; ".join(str(e) for e in self.errors[:max_errors])
            more = len(self.errors) - max_errors
            text += f" ({shown}{f'; and {more:,} more' if more > 0 else ''})"
        return text


# --------------------------------------------------------------------------------------------------
# Labels and matchers
# --------------------------------------------------------------------------------------------------

def _show(value: object) -> str:
    """repr of a value for a message, truncated to about 60 characters."""
    if isinstance(value, str) and len(value) > _MAX_SHOWN - 10:
        return repr(value[:_MAX_SHOWN - 10]) + "..."
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN - 3] + "..."


def _is_missing(value: object) -> bool:
    """None, NaN or pandas NA (an empty string is not missing: callers decide what it means)."""
    if value is None or value is pd.NA:
        return True
    return isinstance(value, (float, np.floating)) and math.isnan(value)


def parse_label(value: object) -> int:
    """A correctness label as 0 or 1.

    Accepted: booleans; the numbers 0 and 1 (also 0.0/1.0); the strings 0/1 (also "1.0"), true/false, yes/no,
    correct/incorrect, y/n, t/f -- case-insensitive, surrounding whitespace ignored.

    Raises
    ------
    ValueError
        For anything else, with a message naming the value and the accepted spellings (used as the row error).
    """
    if _is_missing(value) or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"is missing; expected one of {_LABEL_EXPECTED}")
    if isinstance(value, (bool, np.bool_)):
        return int(bool(value))
    if isinstance(value, (int, np.integer, float, np.floating)):
        if value in (0, 1):
            return int(value)
    elif isinstance(value, str):
        word = value.strip().lower()
        if word in _LABEL_WORDS:
            return _LABEL_WORDS[word]
        try:
            number = float(word)
        except ValueError:
            number = math.nan
        if number in (0.0, 1.0):
            return int(number)
    raise ValueError(f"{_show(value)} is not one of {_LABEL_EXPECTED}")


_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# A number: optional sign (not right after a letter/digit, so "2-3" is 2 and 3), digits with optional
# thousands separators, optional decimals and exponent. "1,234.5" -> 1234.5; ".5" -> 0.5.
_NUMBER = re.compile(r"(?:(?<![\w.])[-+\u2212])?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation: NFKC, lower case, no punctuation, no articles (a/an/the), single spaces."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if (ch in _PUNCTUATION or unicodedata.category(ch).startswith("P")) else ch for ch in text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _parse_number(text: str) -> float:
    return float(text.replace(",", "").replace("\u2212", "-"))


def _last_number(text: str) -> float | None:
    found = _NUMBER.findall(unicodedata.normalize("NFKC", text))
    return _parse_number(found[-1]) if found else None


def _reference_number(reference: object) -> float:
    if isinstance(reference, (int, float, np.integer, np.floating)) and not isinstance(reference, (bool, np.bool_)):
        number = float(reference)
    else:
        text = unicodedata.normalize("NFKC", str(reference)).strip()
        if not _NUMBER.fullmatch(text):
            raise ValueError(f"{_show(reference)} is not a number (the numeric matcher needs a numeric reference)")
        number = _parse_number(text)
    if not math.isfinite(number):
        raise ValueError(f"{_show(reference)} is not a finite number")
    return number


def _token_f1(prediction: list[str], gold: list[str]) -> float:
    if not prediction or not gold:
        return float(prediction == gold)
    same = sum((Counter(prediction) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(prediction), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def _check_matcher_options(matcher: str, tolerance: float, f1_threshold: float) -> None:
    if matcher not in MATCHERS:
        raise ValueError(f"`matcher` must be one of {MATCHERS}, got {matcher!r}")
    for name, value, high in (("tolerance", tolerance, math.inf), ("f1_threshold", f1_threshold, 1.0)):
        if (isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating))
                or not 0.0 <= float(value) <= high):
            raise ValueError(f"`{name}` must be a number in [0, {high}], got {value!r}")


def label_from_reference(answer: str, reference: object, *, matcher: str = "exact", tolerance: float = 1e-6,
                         f1_threshold: float = 0.5) -> int:
    """Label an answer 1 (correct) or 0 by comparing it with a gold reference.

    Parameters
    ----------
    answer : str
    reference : str, number or sequence of str
        The gold answer. Several acceptable answers may be given as a sequence, or in one string separated by
        ``" || "``; the answer is correct when it matches any of them.
    matcher : {"exact", "contains", "numeric", "f1"}
        - ``"exact"``: ``normalize_answer(answer) == normalize_answer(reference)``.
        - ``"contains"``: the normalized reference occurs in the normalized answer on word boundaries.
        - ``"numeric"``: the last number in the answer (signs, decimals, exponents and thousands commas allowed)
          is within ``tolerance`` (absolute) of the reference number; an answer without a number is wrong.
        - ``"f1"``: SQuAD token F1 between the normalized texts is ``>= f1_threshold``.
    tolerance : float
        Absolute tolerance of the numeric matcher.
    f1_threshold : float
        F1 at or above which the f1 matcher calls the answer correct.

    Returns
    -------
    int
        1 or 0.

    Raises
    ------
    ValueError
        Unknown matcher; a reference that is empty after normalisation (text matchers) or not a number (numeric).
    """
    _check_matcher_options(matcher, tolerance, f1_threshold)
    if not isinstance(answer, str):
        raise TypeError(f"`answer` must be a str, got {type(answer).__name__}")
    if isinstance(reference, str):
        references: list[object] = [r for r in reference.split(" || ")]
    elif isinstance(reference, Sequence) or isinstance(reference, np.ndarray):
        references = list(reference)
    else:
        references = [reference]
    if not references:
        raise ValueError("is an empty list of references")
    if matcher == "numeric":
        gold = [_reference_number(r) for r in references]
        found = _last_number(answer)
        return int(found is not None and any(abs(found - g) <= tolerance for g in gold))
    golds = []
    for ref in references:
        if not isinstance(ref, str):
            ref = str(ref)
        norm = normalize_answer(ref)
        if not norm:
            raise ValueError(f"{_show(ref)} is empty after normalisation (lower case, no punctuation or articles)")
        golds.append(norm)
    pred = normalize_answer(answer)
    if matcher == "exact":
        return int(pred in golds)
    if matcher == "contains":
        return int(any(f" {g} " in f" {pred} " for g in golds))
    return int(any(_token_f1(pred.split(), g.split()) >= f1_threshold for g in golds))


# --------------------------------------------------------------------------------------------------
# Entropy estimate and the OpenAI-compatible importer
# --------------------------------------------------------------------------------------------------

def entropy_from_top_k(top_logprobs: Any) -> np.ndarray:
    """Entropy estimated from the top-k log-probabilities, with the rest of the mass as one extra outcome.

    ``p_i = exp(l_i)``, ``r = max(0, 1 - sum_i p_i)``, ``H = -sum_i p_i l_i - r log r``. Merging the unseen tokens into
    one bucket can only lower the entropy, so (for exact top-k log-probs) this is a lower bound on the full-vocabulary
    entropy; it is exact when the top-k hold all the mass. ``-inf`` entries count as probability 0.

    Parameters
    ----------
    top_logprobs : array-like of float, shape (T, k)

    Returns
    -------
    ndarray of float64, shape (T,)
    """
    lp = np.asarray(top_logprobs, dtype=np.float64)
    if lp.ndim != 2:
        raise ValueError(f"`top_logprobs` must be 2-D (T, k), got shape {lp.shape}")
    if np.isnan(lp).any() or (lp > _NEG_TOLERANCE).any():
        raise ValueError("`top_logprobs` must be log-probabilities (<= 0, not NaN)")
    lp = np.minimum(lp, 0.0)
    p = np.exp(lp)
    known = -np.sum(np.where(p > 0, p * np.where(np.isfinite(lp), lp, 0.0), 0.0), axis=1)
    rest = np.clip(1.0 - p.sum(axis=1), 0.0, None)
    tail = -np.where(rest > 0, rest * np.log(np.where(rest > 0, rest, 1.0)), 0.0)
    return np.maximum(known + tail, 0.0)


_BYTES_TOKEN = re.compile(r"bytes:((?:\\x[0-9a-fA-F]{2})+)")


def _token_bytes(token: str) -> bytes:
    # The legacy OpenAI API writes a token that is part of a UTF-8 character as "bytes:\xe6\x97".
    match = _BYTES_TOKEN.fullmatch(token)
    if match:
        return bytes(int(h, 16) for h in match.group(1).split("\\x")[1:])
    return token.encode("utf-8")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def trace_from_openai(response: Mapping[str, Any], *, prompt: str = "", model_id: str = "") -> Trace:
    """A Trace from an OpenAI-compatible response with logprobs (OpenAI, vLLM, TGI, llama.cpp server).

    Two shapes are read:

    - chat.completions: ``choices[0].logprobs.content`` is a list of ``{"token", "logprob", "bytes",
      "top_logprobs": [{"token", "logprob", "bytes"}, ...]}``; the answer is ``choices[0].message.content``.
    - legacy completions: ``choices[0].logprobs`` is ``{"tokens", "token_logprobs", "top_logprobs": [{token:
      logprob} or null, ...]}``; the answer is ``choices[0].text``.

    Surprisal is ``-logprob`` of the chosen token (exact). Entropy is estimated per step with
    :func:`entropy_from_top_k` from that step's alternatives, plus the chosen token when it is not among them (a
    step without alternatives uses the chosen token alone, the rest of the mass as one bucket); metadata then says
    ``entropy_source="top_k_approximation"``. Alternatives are sorted most likely first, ``-inf`` ones dropped, and
    truncated to the smallest number offered at any step, so every step has the same k (``top_ids`` are -1,
    ``top_tokens`` their text as the server gives it).

    Token texts come from each token's ``bytes`` when present (decoded incrementally as UTF-8, so a character split
    across tokens is carried by the token that completes it and the others are ""), else from ``token`` (where the
    legacy ``"bytes:\\xe6\\x97"`` form is understood). The answer is the response's text when present, even if it
    differs from the joined tokens; otherwise the joined tokens.

    Parameters
    ----------
    response : Mapping
        The parsed JSON response.
    prompt : str
        Stored on the trace.
    model_id : str
        Stored in the metadata; defaults to ``response["model"]``.

    Raises
    ------
    ValueError
        When the response lacks choices or logprobs, or holds malformed values; the message names the field.
    """
    if not isinstance(response, Mapping):
        raise TypeError(f"`response` must be a mapping (the parsed JSON response), got {type(response).__name__}")
    for name, value in (("prompt", prompt), ("model_id", model_id)):
        if not isinstance(value, str):
            raise TypeError(f"`{name}` must be a str, got {type(value).__name__}")
    choices = response.get("choices")
    if not isinstance(choices, Sequence) or isinstance(choices, (str, bytes)) or not choices:
        raise ValueError("response has no choices: expected an OpenAI-style response with a non-empty `choices` list")
    choice = choices[0]
    if not isinstance(choice, Mapping):
        raise ValueError(f"response choices[0] must be an object, got {_show(choice)}")
    logprobs = choice.get("logprobs")
    if logprobs is None:
        raise ValueError(_NO_LOGPROBS)
    if not isinstance(logprobs, Mapping):
        raise ValueError(f"choices[0].logprobs must be an object, got {_show(logprobs)}")
    if "content" in logprobs:
        api = "chat"
        steps = _chat_steps(logprobs["content"])
        message = choice.get("message")
        text = message.get("content") if isinstance(message, Mapping) else None
    elif "tokens" in logprobs:
        api = "completions"
        steps = _completion_steps(logprobs)
        text = choice.get("text")
    else:
        raise ValueError("choices[0].logprobs has neither `content` (chat.completions) nor `tokens` (completions); "
                         + _NO_LOGPROBS.split(": ", 1)[1])
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pieces = [decoder.decode(raw) for raw, _, _ in steps]
    tail = decoder.decode(b"", final=True)
    if tail and pieces:  # bytes left incomplete at the end: the last token carries them (as U+FFFD)
        pieces[-1] += tail
    if text is not None and not isinstance(text, str):
        raise ValueError(f"the response's answer text must be a string, got {_show(text)}")
    answer = "".join(pieces) if text is None else text
    n = len(steps)
    surprisal = np.array([-lp for _, lp, _ in steps], dtype=np.float64)
    entropy = np.empty(n, dtype=np.float64)
    alternatives = []
    for t, (raw, lp, offered) in enumerate(steps):
        alts = sorted(((tok, a) for tok, _, a in offered if a > -math.inf), key=lambda pair: -pair[1])
        alternatives.append(alts)
        known = [a for _, a in alts]
        if raw not in {key for _, key, a in offered if a > -math.inf}:  # the chosen token's mass is known too
            known.append(lp)
        entropy[t] = entropy_from_top_k(np.array([known], dtype=np.float64))[0]
    k = min((len(a) for a in alternatives), default=0)
    top_logprobs = np.array([[a for _, a in alts[:k]] for alts in alternatives], dtype=np.float64).reshape(n, k)
    top_tokens = tuple(tuple(tok for tok, _ in alts[:k]) for alts in alternatives)
    extra: dict[str, Any] = {"api": api}
    if isinstance(choice.get("finish_reason"), str):
        extra["finish_reason"] = choice["finish_reason"]
    model = model_id or (response.get("model") if isinstance(response.get("model"), str) else "")
    metadata = TraceMetadata(model_id=model, source="imported", entropy_source="top_k_approximation", extra=extra)
    return Trace(prompt=prompt, answer=answer, token_ids=np.full(n, -1, dtype=np.int64), tokens=tuple(pieces),
                 surprisal=surprisal, entropy=entropy, top_ids=np.full((n, k), -1, dtype=np.int64),
                 top_logprobs=top_logprobs, ranks=None, metadata=metadata, top_tokens=top_tokens)


# One decoding step: the chosen token's bytes, its log-prob, and the alternatives as (text, bytes, log-prob).
_Step = tuple[bytes, float, list[tuple[str, bytes, float]]]


def _byte_list(value: object, where: str) -> bytes | None:
    if value is None:
        return None
    if (isinstance(value, Sequence) and not isinstance(value, (str, bytes))
            and all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in value)):
        return bytes(value)
    raise ValueError(f"{where} must be a list of ints 0..255 or null, got {_show(value)}")


def _check_logprob(value: object, where: str) -> float:
    if not _is_number(value) or math.isnan(float(value)) or float(value) > _NEG_TOLERANCE:
        raise ValueError(f"{where} is {_show(value)}; expected a log-probability (a number <= 0)")
    return float(value)


def _chat_steps(content: object) -> list[_Step]:
    if content is None:
        raise ValueError("choices[0].logprobs.content is null: " + _NO_LOGPROBS.split(": ", 1)[1])
    if not isinstance(content, Sequence) or isinstance(content, (str, bytes)):
        raise ValueError(f"choices[0].logprobs.content must be a list, got {_show(content)}")
    steps = []
    for i, entry in enumerate(content):
        where = f"choices[0].logprobs.content[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("token"), str):
            raise ValueError(f"{where} must be an object with a string `token`, got {_show(entry)}")
        lp = _check_logprob(entry.get("logprob"), f"{where}.logprob")
        if not math.isfinite(lp):
            raise ValueError(f"{where}.logprob is {lp}; the chosen token needs a finite log-probability")
        raw = _byte_list(entry.get("bytes"), f"{where}.bytes")
        raw = _token_bytes(entry["token"]) if raw is None else raw
        alts = []
        for j, alt in enumerate(entry.get("top_logprobs") or []):
            at = f"{where}.top_logprobs[{j}]"
            if not isinstance(alt, Mapping) or not isinstance(alt.get("token"), str):
                raise ValueError(f"{at} must be an object with a string `token`, got {_show(alt)}")
            key = _byte_list(alt.get("bytes"), f"{at}.bytes")
            alts.append((alt["token"], _token_bytes(alt["token"]) if key is None else key,
                         _check_logprob(alt.get("logprob"), f"{at}.logprob")))
        steps.append((raw, lp, alts))
    return steps


def _completion_steps(logprobs: Mapping[str, Any]) -> list[_Step]:
    tokens, token_logprobs = logprobs.get("tokens"), logprobs.get("token_logprobs")
    tops = logprobs.get("top_logprobs")
    for name, value in (("tokens", tokens), ("token_logprobs", token_logprobs)):
        if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
            raise ValueError(f"choices[0].logprobs.{name} must be a list, got {_show(value)}")
    if len(token_logprobs) != len(tokens):
        raise ValueError(f"choices[0].logprobs.token_logprobs has {len(token_logprobs)} values but tokens has "
                         f"{len(tokens)}")
    if tops is None:
        tops = [None] * len(tokens)
    elif not isinstance(tops, Sequence) or len(tops) != len(tokens):
        raise ValueError(f"choices[0].logprobs.top_logprobs must be a list with one entry per token, got {_show(tops)}")
    steps = []
    for i, (token, lp, top) in enumerate(zip(tokens, token_logprobs, tops)):
        where = "choices[0].logprobs"
        if not isinstance(token, str):
            raise ValueError(f"{where}.tokens[{i}] must be a string, got {_show(token)}")
        if lp is None:
            raise ValueError(f"{where}.token_logprobs[{i}] is null (with echo=true the prompt's tokens come first "
                             "and have no log-probability; import the answer's tokens only)")
        lp = _check_logprob(lp, f"{where}.token_logprobs[{i}]")
        if not math.isfinite(lp):
            raise ValueError(f"{where}.token_logprobs[{i}] is {lp}; the chosen token needs a finite log-probability")
        if top is not None and not isinstance(top, Mapping):
            raise ValueError(f"{where}.top_logprobs[{i}] must be an object {{token: logprob}} or null, "
                             f"got {_show(top)}")
        alts = [(str(tok), _token_bytes(str(tok)), _check_logprob(a, f"{where}.top_logprobs[{i}][{tok!r}]"))
                for tok, a in (top or {}).items()]
        steps.append((_token_bytes(token), lp, alts))
    return steps


# --------------------------------------------------------------------------------------------------
# Reading: bytes -> table of raw rows (format specific)
# --------------------------------------------------------------------------------------------------

@dataclass
class _Table:
    columns: list[str]                      # normalized names, in file order
    rows: list[dict[str, Any] | None]       # one per data row; None where the row could not be parsed
    errors: list[RowError] = field(default_factory=list)
    frame: pd.DataFrame | None = None       # Parquet: the typed frame of all rows, normalized names
    hint: str = ""                          # added to the missing-column message


def _read_source(source: object) -> tuple[bytes, str]:
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no dataset file at {str(path)!r}")
        return path.read_bytes(), path.name
    if isinstance(source, (bytes, bytearray)):
        return bytes(source), ""
    if hasattr(source, "read"):
        if hasattr(source, "seek"):
            try:  # Streamlit's UploadedFile (a BytesIO) may have been read already
                source.seek(0)
            except (OSError, ValueError):
                pass
        data = source.read()
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"`source.read()` must return bytes, got {type(data).__name__}")
        return bytes(data), str(getattr(source, "name", "") or "")
    raise TypeError(f"`source` must be a path or a binary file-like object, got {type(source).__name__}")


def _format_from_name(name: str, format: str | None, what: str) -> str:
    if format is not None:
        if format not in FORMATS:
            raise ValueError(f"`format` must be one of {FORMATS} or None, got {format!r}")
        return format
    suffix = Path(name).suffix.lower() if name else ""
    if suffix in _EXTENSIONS:
        return _EXTENSIONS[suffix]
    shown = repr(name) if name else f"this {what} (it has no name)"
    raise DatasetError(f"cannot tell the format of {shown} from its extension; expected one of {_EXTENSIONS_TEXT}, "
                       f"or pass format= one of {FORMATS}")


def _check_binary(data: bytes, format: str) -> None:
    head = data[:8192]
    signatures = ((b"PAR1", "a Parquet file: use format='parquet' or a .parquet extension"),
                  (b"PK\x03\x04", "a ZIP archive (an Excel .xlsx workbook?): save it as CSV UTF-8"),
                  (b"\x1f\x8b", "gzip-compressed: decompress it first"),
                  (b"\xff\xfe", "UTF-16 text: save it as UTF-8"), (b"\xfe\xff", "UTF-16 text: save it as UTF-8"))
    for magic, what in signatures:
        if head.startswith(magic):
            raise DatasetError(f"the file is not {format} text; it looks like {what}")
    if b"\x00" in head:
        raise DatasetError(f"the file looks binary (it contains NUL bytes), not {format} text; expected a UTF-8 "
                           f"text file")


def _decode_text(data: bytes, format: str) -> str:
    _check_binary(data, format)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise DatasetError(f"the file is not valid UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                           f"(line {line}) cannot be decoded; save the file as UTF-8 (in Excel: 'CSV UTF-8') and "
                           f"try again") from None


def _normalize_columns(raw: Sequence[object]) -> list[str]:
    names = []
    for i, name in enumerate(raw):
        norm = str(name).strip().lower()
        names.append(norm if norm else f"unnamed_{i}")  # e.g. the index column pandas writes without a name
    counts = Counter(names)
    dupes = [n for n in counts if counts[n] > 1]
    if dupes:
        groups = "; ".join(" and ".join(repr(str(r)) for r, n in zip(raw, names) if n == d) for d in dupes)
        raise DatasetError(f"duplicate column names (ignoring case and surrounding spaces): {groups}; "
                           f"each column needs a distinct name")
    return names


def _too_many(limit: int | None, count: int) -> None:
    if limit is not None and count > limit:
        raise DatasetError(f"the file has more than {limit:,} data rows (max_rows={limit}); split it or raise "
                           f"the limit")


def _is_blank(record: list[str]) -> bool:
    return not record or (len(record) == 1 and not record[0].strip())


def _header_delimiter(text: str, preferred: str) -> str:
    """The delimiter whose header holds the required columns (tried: , ; tab |); else the one that splits the
    header into the most columns (the preferred one on ties), so a missing column is reported by its name."""
    candidates = (preferred,) + tuple(d for d in _DELIMITERS if d != preferred)
    widths = {}
    for delimiter in candidates:
        try:
            header = next((r for r in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
                           if not _is_blank(r)), [])
        except csv.Error:
            continue
        names = {str(h).strip().lower() for h in header}
        if "prompt" in names and ({"answer", "response"} & names):
            return delimiter
        widths[delimiter] = len(header)
    return max(widths, key=lambda d: widths[d], default=preferred)  # max keeps the first of equals


def _read_csv(text: str, *, name: str, max_rows: int | None) -> _Table:
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)  # only ever raised, never lowered: harmless for other readers
    preferred = "\t" if name.lower().endswith(".tsv") else ","
    delimiter = _header_delimiter(text, preferred)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header: list[str] | None = None
    rows: list[dict[str, Any] | None] = []
    errors: list[RowError] = []
    last_line = 0
    try:
        for record in reader:
            first_line, last_line = last_line + 1, reader.line_num
            if _is_blank(record):
                continue
            if header is None:
                header = _normalize_columns(record)
                continue
            _too_many(max_rows, len(rows) + 1)
            if len(record) != len(header):
                message = f"has {len(record)} fields but the header has {len(header)}"
                if last_line > first_line:  # an unclosed quote swallows the lines after it: say so, they are lost
                    message += (f", and it runs from line {first_line} to line {last_line} of the file: a quote on "
                                f"line {first_line} is probably never closed, so those lines were read as this one "
                                f"row")
                else:
                    message += " (a stray delimiter or quote?)"
                errors.append(RowError(len(rows) + 1, "", message))
                rows.append(None)
            else:
                rows.append(dict(zip(header, record)))
    except csv.Error as exc:
        raise DatasetError(f"cannot parse the CSV near data row {len(rows) + 1}: {exc}") from None
    if header is None:
        raise DatasetError("the file is empty (no header row)")
    hint = ""
    if len(header) == 1:
        hint = (f"; the header was read as one column, so the file may use a delimiter other than "
                f"{', '.join(_DELIMITER_NAMES[d] for d in _DELIMITERS)} -- save it as comma-separated CSV")
    return _Table(columns=header, rows=rows, errors=errors, hint=hint)


def _row_from_json(obj: object, row: int, errors: list[RowError]) -> dict[str, Any] | None:
    if not isinstance(obj, dict):
        errors.append(RowError(row, "", f"is {_show(obj)}; expected a JSON object {{\"prompt\": ..., ...}}"))
        return None
    out: dict[str, Any] = {}
    raw_names: dict[str, str] = {}
    for key, value in obj.items():
        norm = str(key).strip().lower() or "unnamed"
        if norm in out:
            raise DatasetError(f"duplicate column names (ignoring case and surrounding spaces) in row {row}: "
                               f"{raw_names[norm]!r} and {str(key)!r}; each key needs a distinct name")
        out[norm], raw_names[norm] = value, str(key)
    return out


def _read_jsonl(text: str, *, max_rows: int | None) -> _Table:
    rows: list[dict[str, Any] | None] = []
    errors: list[RowError] = []
    if text.lstrip().startswith("["):  # a JSON array of objects (a common ".json" export)
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"the file starts like a JSON array but is not valid JSON ({exc.msg} at line "
                               f"{exc.lineno}, column {exc.colno})") from None
        _too_many(max_rows, len(items))
        for i, obj in enumerate(items, start=1):
            rows.append(_row_from_json(obj, i, errors))
    else:
        first_error = ""
        for line_no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            row = len(rows) + 1
            _too_many(max_rows, row)
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                message = f"not valid JSON ({exc.msg} at column {exc.colno})"
                first_error = first_error or f"line {line_no}: {message}"
                errors.append(RowError(row, "", message))
                rows.append(None)
                continue
            rows.append(_row_from_json(obj, row, errors))
        if rows and all(r is None for r in rows):
            raise DatasetError(f"the file is not JSON Lines: no line holds a JSON object ({first_error or errors[0]}); "
                               f"expected one object per line, like {{\"prompt\": \"...\", \"answer\": \"...\", "
                               f"\"label\": 1}}")
    columns: list[str] = []
    seen: set[str] = set()
    for r in rows:
        for key in r or ():
            if key not in seen:
                seen.add(key)
                columns.append(key)
    return _Table(columns=columns, rows=rows, errors=errors)


def _read_parquet(data: bytes, *, max_rows: int | None) -> _Table:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("reading Parquet needs pyarrow: pip install pyarrow") from exc
    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(f"the file is not a readable Parquet file ({exc}); expected a Parquet table") from None
    _too_many(max_rows, table.num_rows)
    columns = _normalize_columns(table.column_names)
    table = table.rename_columns(columns)
    rows: list[dict[str, Any] | None] = list(table.to_pylist())
    frame = table.to_pandas()
    return _Table(columns=columns, rows=rows, frame=frame)


# --------------------------------------------------------------------------------------------------
# Reading: per-row validation
# --------------------------------------------------------------------------------------------------

class _Bad(Exception):
    """A problem with one cell; carries the field name and the message for the RowError."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


_ABSENT = object()


def _cell(value: object, name: str) -> Any:
    """Decode one trace cell: JSON text or a native list; _ABSENT when empty."""
    if _is_missing(value) or (isinstance(value, str) and not value.strip()):
        return _ABSENT
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise _Bad(name, f"not valid JSON ({exc.msg} at char {exc.pos}): {_show(value)}") from None
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple, dict)):
        return value
    raise _Bad(name, f"is {_show(value)}; expected a list (or its JSON text)")


def _list(value: object, name: str, where: str = "") -> list[Any]:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise _Bad(name, f"{where + ' ' if where else ''}is {_show(value)}; expected a list")
    return list(value)


_ALLOWED_TYPES = {"float": {float, int}, "int": {int}, "str": {str}}


def _floats(value: object, name: str) -> np.ndarray:
    items = _list(value, name)
    if set(map(type, items)) <= _ALLOWED_TYPES["float"]:  # fast path; the loop below finds the first bad value
        arr = np.array(items, dtype=np.float64)
        if np.isfinite(arr).all():
            return arr
    for i, x in enumerate(items):
        if not _is_number(x):
            raise _Bad(name, f"{name}[{i}] is {_show(x)}; expected a number")
        if not math.isfinite(float(x)):
            raise _Bad(name, f"{name}[{i}] is {float(x)}; expected a finite number")
    return np.array(items, dtype=np.float64)


def _is_int64(x: object) -> bool:
    return _is_number(x) and math.isfinite(float(x)) and float(x) == int(x) and -2**63 <= int(x) < 2**63


def _ints(value: object, name: str) -> np.ndarray:
    items = _list(value, name)
    if set(map(type, items)) <= _ALLOWED_TYPES["int"]:
        try:
            return np.array(items, dtype=np.int64)
        except OverflowError:
            pass
    for i, x in enumerate(items):
        if not _is_int64(x):
            raise _Bad(name, f"{name}[{i}] is {_show(x)}; expected an integer")
    return np.array([int(x) for x in items], dtype=np.int64)


def _matrix(value: object, name: str, n_tokens: int, element: str) -> Any:
    """A (n_tokens, k) table: an ndarray for "float"/"int" elements, a list of lists for "str"."""
    rows = _list(value, name)
    if not rows and n_tokens > 0:
        rows = [[] for _ in range(n_tokens)]  # [] means "no alternatives"
    if len(rows) != n_tokens:
        raise _Bad(name, f"{name} has {len(rows)} rows but tokens has {n_tokens}")
    k = len(rows[0]) if rows else 0
    if (set(map(type, rows)) <= {list} and set(map(len, rows)) <= {k}
            and set(map(type, itertools.chain.from_iterable(rows))) <= _ALLOWED_TYPES[element]):
        if element == "str":
            return rows
        arr = np.array(rows, dtype=np.float64 if element == "float" else np.int64).reshape(n_tokens, k)
        if element == "int" or np.isfinite(arr).all():
            return arr
    out = [_list(r, name, f"{name}[{i}]") for i, r in enumerate(rows)]
    for i, r in enumerate(out):
        if len(r) != k:
            raise _Bad(name, f"{name}[{i}] has {len(r)} values but {name}[0] has {k} (every token needs "
                             f"the same number k of alternatives)")
        for j, x in enumerate(r):
            where = f"{name}[{i}][{j}]"
            if element == "str" and not isinstance(x, str):
                raise _Bad(name, f"{where} is {_show(x)}; expected a string")
            if element == "float" and (not _is_number(x) or not math.isfinite(float(x))):
                raise _Bad(name, f"{where} is {_show(x)}; expected a finite number")
            if element == "int" and not _is_int64(x):
                raise _Bad(name, f"{where} is {_show(x)}; expected an integer")
    if element == "str":
        return out
    return np.array(out, dtype=np.float64 if element == "float" else np.int64).reshape(n_tokens, k)


def _check_length(arr: np.ndarray, name: str, n_tokens: int) -> None:
    if len(arr) != n_tokens:
        raise _Bad(name, f"{name} has {len(arr)} values but tokens has {n_tokens}")


def _trace_from_cells(cells: dict[str, Any], *, prompt: str, answer: str) -> Trace:
    """Validate one row's trace cells (already JSON-decoded, _ABSENT where empty) and build its Trace."""
    if cells.get("tokens", _ABSENT) is _ABSENT:
        raise _Bad("tokens", "is missing; a row with trace columns needs `tokens` (leave every trace column empty "
                             "for a row without a trace)")
    tokens = _list(cells["tokens"], "tokens")
    if not set(map(type, tokens)) <= _ALLOWED_TYPES["str"]:
        for i, tok in enumerate(tokens):
            if not isinstance(tok, str):
                raise _Bad("tokens", f"tokens[{i}] is {_show(tok)}; expected a string")
    n = len(tokens)

    surprisal = None
    if cells.get("surprisal", _ABSENT) is not _ABSENT:
        surprisal = _floats(cells["surprisal"], "surprisal")
        _check_length(surprisal, "surprisal", n)
        if (surprisal < -_NEG_TOLERANCE).any():
            i = int(np.flatnonzero(surprisal < -_NEG_TOLERANCE)[0])
            raise _Bad("surprisal", f"surprisal[{i}] is {float(surprisal[i])!r}; surprisal must be >= 0 (nats) -- "
                                    f"log-probabilities (<= 0) go in a `logprobs` column")
    if cells.get("logprobs", _ABSENT) is not _ABSENT:
        logprobs = _floats(cells["logprobs"], "logprobs")
        _check_length(logprobs, "logprobs", n)
        if (logprobs > _NEG_TOLERANCE).any():
            i = int(np.flatnonzero(logprobs > _NEG_TOLERANCE)[0])
            raise _Bad("logprobs", f"logprobs[{i}] is {float(logprobs[i])!r}; log-probabilities must be <= 0 -- "
                                   f"surprisal (>= 0) goes in a `surprisal` column")
        if surprisal is None:
            surprisal = -logprobs
        elif not np.allclose(surprisal, -logprobs, rtol=0.0, atol=1e-6):
            i = int(np.flatnonzero(~np.isclose(surprisal, -logprobs, rtol=0.0, atol=1e-6))[0])
            raise _Bad("logprobs", f"logprobs[{i}] is {float(logprobs[i])!r} but surprisal[{i}] is "
                                   f"{float(surprisal[i])!r}; expected surprisal = -logprob (or give only one of them)")
    if surprisal is None:
        raise _Bad("surprisal", "is missing; a trace needs `surprisal` (or `logprobs`)")

    top_logprobs = np.zeros((n, 0))
    if cells.get("top_logprobs", _ABSENT) is not _ABSENT:
        top_logprobs = _matrix(cells["top_logprobs"], "top_logprobs", n, "float")
        if (top_logprobs > _NEG_TOLERANCE).any():
            i, j = (int(v[0]) for v in np.nonzero(top_logprobs > _NEG_TOLERANCE))
            raise _Bad("top_logprobs", f"top_logprobs[{i}][{j}] is {float(top_logprobs[i, j])!r}; "
                                       f"log-probabilities must be <= 0")
        unsorted = (np.diff(top_logprobs, axis=1) > 1e-12).any(axis=1)
        if unsorted.any():
            i = int(np.flatnonzero(unsorted)[0])
            raise _Bad("top_logprobs", f"top_logprobs[{i}] is {_show(top_logprobs[i].tolist())}; each row must be "
                                       f"sorted from most to least likely")
    k = top_logprobs.shape[1]
    top_ids = np.full((n, k), -1, dtype=np.int64)
    if cells.get("top_ids", _ABSENT) is not _ABSENT:
        top_ids = _matrix(cells["top_ids"], "top_ids", n, "int")
        if top_ids.shape != top_logprobs.shape:
            raise _Bad("top_ids", f"top_ids has shape {top_ids.shape} but top_logprobs has shape "
                                  f"{top_logprobs.shape}")
    top_tokens = None
    if cells.get("top_tokens", _ABSENT) is not _ABSENT:
        rows = _matrix(cells["top_tokens"], "top_tokens", n, "str")
        if any(len(r) != k for r in rows):
            raise _Bad("top_tokens", f"top_tokens has {len(rows[0]) if rows else 0} alternatives per token but "
                                     f"top_logprobs has {k}")
        top_tokens = tuple(tuple(r) for r in rows)

    estimated = False
    if cells.get("entropy", _ABSENT) is not _ABSENT:
        entropy = _floats(cells["entropy"], "entropy")
        _check_length(entropy, "entropy", n)
        if (entropy < -_NEG_TOLERANCE).any():
            i = int(np.flatnonzero(entropy < -_NEG_TOLERANCE)[0])
            raise _Bad("entropy", f"entropy[{i}] is {float(entropy[i])!r}; entropy must be >= 0 (nats)")
    elif k > 0 or n == 0:
        entropy, estimated = entropy_from_top_k(top_logprobs), True
    else:
        raise _Bad("entropy", "is missing; a trace needs `entropy` (or `top_logprobs` to estimate it)")

    token_ids = np.full(n, -1, dtype=np.int64)
    if cells.get("token_ids", _ABSENT) is not _ABSENT:
        token_ids = _ints(cells["token_ids"], "token_ids")
        _check_length(token_ids, "token_ids", n)
    ranks = None
    if cells.get("ranks", _ABSENT) is not _ABSENT:
        ranks = _ints(cells["ranks"], "ranks")
        _check_length(ranks, "ranks", n)
        if (ranks < 1).any():
            raise _Bad("ranks", f"ranks[{int(np.argmin(ranks))}] is {int(ranks.min())}; ranks are 1-based (>= 1)")

    metadata = TraceMetadata(source="imported")
    if cells.get("trace_metadata", _ABSENT) is not _ABSENT:
        meta = cells["trace_metadata"]
        if not isinstance(meta, Mapping):
            raise _Bad("trace_metadata", f"is {_show(meta)}; expected a JSON object")
        try:
            metadata = TraceMetadata.from_dict(meta)
        except (TypeError, ValueError) as exc:
            raise _Bad("trace_metadata", str(exc)) from None
    if estimated:
        metadata = replace(metadata, entropy_source="top_k_approximation")
    try:
        return Trace(prompt=prompt, answer=answer, token_ids=token_ids, tokens=tuple(tokens), surprisal=surprisal,
                     entropy=entropy, top_ids=top_ids, top_logprobs=top_logprobs, ranks=ranks, metadata=metadata,
                     top_tokens=top_tokens)
    except (TypeError, ValueError) as exc:  # a check above should have caught it first; report it all the same
        raise _Bad("tokens", f"inconsistent trace: {exc}") from None


def _text_cell(value: object, name: str, *, allow_empty: bool) -> str | None:
    """A text cell as str; None when missing (callers decide); raises _Bad for non-text or forbidden empty."""
    if _is_missing(value):
        return None
    if not isinstance(value, str):
        raise _Bad(name, f"is {_show(value)}; expected text")
    if not allow_empty and not value.strip():
        raise _Bad(name, "is empty; expected non-empty text")
    return value


def _response_cell(value: object) -> Mapping[str, Any] | None:
    if _is_missing(value) or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise _Bad("response", f"not valid JSON ({exc.msg} at char {exc.pos}): {_show(value)}") from None
    if not isinstance(value, Mapping):
        raise _Bad("response", f"is {_show(value)}; expected an OpenAI-style response object")
    return value


def read_dataset(source: PathOrBuffer | bytes, *, format: str | None = None, matcher: str = "exact",
                 tolerance: float = 1e-6, f1_threshold: float = 0.5, require_label: bool = True,
                 max_rows: int | None = None) -> LabeledDataset:
    """Read and validate a labeled dataset (CSV, JSON Lines or Parquet); see the module docstring for the columns.

    Parameters
    ----------
    source : str, Path, bytes or binary file-like
        A path, the file's bytes, or an open binary file (a Streamlit ``UploadedFile`` works: it is rewound first
        and its ``.name`` gives the format).
    format : {"csv", "jsonl", "parquet"} or None
        None: from the extension (.csv/.tsv/.txt, .jsonl/.json/.ndjson, .parquet/.pq). CSV delimiters ``,`` ``;``
        tab and ``|`` are recognised from the header; a ``.json`` file may also hold one JSON array of objects.
    matcher, tolerance, f1_threshold
        How answers are labeled from a ``reference`` column when there is no ``label`` column; see
        :func:`label_from_reference`.
    require_label : bool
        When False, a file without ``label`` and ``reference`` columns is read unlabeled (``label_source="none"``).
    max_rows : int or None
        Refuse files with more data rows than this.

    Returns
    -------
    LabeledDataset
        The valid rows and their traces, and one :class:`RowError` per problem. When rows were rejected a
        :class:`DatasetWarning` with the summary is also emitted.

    Raises
    ------
    DatasetError
        The file is empty, has no data rows, is not UTF-8 text (CSV/JSONL), not a table, lacks required columns,
        has duplicate column names, has more than ``max_rows`` rows, or its format cannot be told.
    """
    _check_matcher_options(matcher, tolerance, f1_threshold)
    if not isinstance(require_label, bool):
        raise TypeError(f"`require_label` must be a bool, got {require_label!r}")
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, (int, np.integer))
                                 or max_rows < 1):
        raise ValueError(f"`max_rows` must be an int >= 1 or None, got {max_rows!r}")
    data, name = _read_source(source)
    fmt = _format_from_name(name, format, "upload")
    if not data:
        raise DatasetError("the file is empty (0 bytes)")
    if fmt == "parquet":
        table = _read_parquet(data, max_rows=max_rows)
    else:
        text = _decode_text(data, fmt)
        if not text.strip():
            raise DatasetError("the file is empty (only whitespace)")
        table = _read_csv(text, name=name, max_rows=max_rows) if fmt == "csv" else _read_jsonl(text,
                                                                                               max_rows=max_rows)
    if not table.rows:
        raise DatasetError(f"no data rows: the file has columns {table.columns} but no rows below the header")
    return _validate_table(table, fmt=fmt, matcher=matcher, tolerance=tolerance, f1_threshold=f1_threshold,
                           require_label=require_label)


def _columns_text(columns: Sequence[str]) -> str:
    shown = ", ".join(repr(c) for c in columns[:20])
    return f"[{shown}{', ...' if len(columns) > 20 else ''}]"


def _validate_table(table: _Table, *, fmt: str, matcher: str, tolerance: float, f1_threshold: float,
                    require_label: bool) -> LabeledDataset:
    columns = table.columns
    has = set(columns)
    trace_columns = [c for c in TRACE_COLUMNS if c in has]
    use_response = "response" in has and not trace_columns
    missing = [c for c in ("prompt", "answer") if c not in has and not (c == "answer" and use_response)]
    if missing:
        needed = " and ".join(f"`{c}`" for c in missing)
        raise DatasetError(f"missing required column{'s' if len(missing) > 1 else ''} {needed}; found columns "
                           f"{_columns_text(columns)}{table.hint}")
    if "label" in has:
        label_source = "label"
    elif "reference" in has:
        label_source = f"reference:{matcher}"
    elif require_label:
        raise DatasetError(f"the dataset needs a `label` column ({_LABEL_EXPECTED}) or a `reference` column (the "
                           f"gold answer, to label answers with a matcher); found columns {_columns_text(columns)}"
                           f"{table.hint}")
    else:
        label_source = "none"

    errors = list(table.errors)
    valid_index: list[int] = []
    traces: list[Trace | None] = []
    labels: list[int] = []
    answers: list[str] = []
    for i, raw in enumerate(table.rows):
        if raw is None:
            continue
        row = i + 1
        row_errors: list[RowError] = []

        def bad(exc: _Bad) -> None:
            row_errors.append(RowError(row, exc.field, exc.message))

        prompt = answer = None
        try:
            prompt = _text_cell(raw.get("prompt"), "prompt", allow_empty=False)
            if prompt is None:
                raise _Bad("prompt", "is missing; expected non-empty text")
        except _Bad as exc:
            bad(exc)
        try:
            answer = _text_cell(raw.get("answer"), "answer", allow_empty=True)
        except _Bad as exc:
            bad(exc)
            answer = ""  # reported; keep going to report other problems too

        trace: Trace | None = None
        response_failed = False
        if use_response:
            try:
                response = _response_cell(raw.get("response"))
                if response is not None:
                    trace = trace_from_openai(response, prompt=prompt or "")
            except _Bad as exc:
                bad(exc)
                response_failed = True
            except (TypeError, ValueError) as exc:
                bad(_Bad("response", str(exc)))
                response_failed = True
            if trace is not None and not answer:  # missing or empty answer: the response's text
                answer = trace.answer
        if answer is None:
            if not response_failed:  # a broken response was reported already; it was to give the answer
                bad(_Bad("answer", "is missing; expected text (it may be empty)"))
        elif trace_columns:
            try:
                cells = {c: _cell(raw.get(c), c) for c in trace_columns}
                if any(v is not _ABSENT for v in cells.values()):
                    trace = _trace_from_cells(cells, prompt=prompt or "", answer=answer)
            except _Bad as exc:
                bad(exc)
        if trace is not None and answer is not None and (trace.answer != answer or trace.prompt != (prompt or "")):
            trace = replace(trace, answer=answer, prompt=prompt or "")

        label = -1
        if label_source == "label":
            try:
                label = parse_label(raw.get("label"))
            except ValueError as exc:
                bad(_Bad("label", str(exc)))
        elif label_source != "none" and answer is not None:
            reference = raw.get("reference")
            if _is_missing(reference) or (isinstance(reference, str) and not reference.strip()):
                bad(_Bad("reference", "is missing; expected the gold answer"))
            else:
                try:
                    label = label_from_reference(answer, reference, matcher=matcher, tolerance=tolerance,
                                                 f1_threshold=f1_threshold)
                except (TypeError, ValueError) as exc:
                    bad(_Bad("reference", str(exc)))
        if row_errors:
            errors.extend(row_errors)
            continue
        valid_index.append(i)
        traces.append(trace)
        labels.append(label)
        answers.append(answer if answer is not None else "")

    errors.sort(key=lambda e: e.row)  # stable: a row's errors keep their order
    frame = _valid_frame(table, valid_index, fmt)
    if "answer" not in frame.columns:
        frame.insert(columns.index("prompt") + 1, "answer", pd.Series(answers, index=frame.index, dtype=str))
    elif use_response:  # answers filled in from responses where missing
        frame["answer"] = pd.Series(answers, index=frame.index, dtype=str)
    if label_source != "none":  # replaces the input's label column in place, or is added at the end
        frame["label"] = pd.Series(labels, index=frame.index, dtype=np.int64)
    row_column = "row"
    while row_column in frame.columns:
        row_column = "_" + row_column
    frame[row_column] = pd.Series([i + 1 for i in valid_index], index=frame.index, dtype=np.int64)
    frame.attrs["trace_core_row_column"] = row_column
    dataset = LabeledDataset(frame=frame, traces=traces, errors=errors, n_read=len(table.rows),
                             label_source=label_source, row_column=row_column)
    if dataset.n_rejected:
        warnings.warn(f"{dataset.summary()}; every problem is listed in LabeledDataset.errors", DatasetWarning,
                      stacklevel=3)
    return dataset


def _valid_frame(table: _Table, valid_index: list[int], fmt: str) -> pd.DataFrame:
    if table.frame is not None:
        return table.frame.iloc[valid_index].reset_index(drop=True)
    records = [table.rows[i] for i in valid_index]
    if fmt == "csv":
        values = [[r[c] for c in table.columns] for r in records]  # type: ignore[index]
        return pd.DataFrame(values, columns=table.columns, dtype=str) if values else pd.DataFrame(
            {c: pd.Series([], dtype=str) for c in table.columns})
    frame = pd.DataFrame.from_records(records, columns=table.columns)
    return frame.reset_index(drop=True)


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------

def traces_to_columns(traces: Sequence[Trace | None]) -> dict[str, list[Any]]:
    """Trace columns as plain Python lists, one entry per trace (None where a trace is None).

    Returns
    -------
    dict
        ``tokens``, ``token_ids``, ``surprisal``, ``entropy``, ``top_ids``, ``top_logprobs`` (lists per trace),
        ``top_tokens`` and ``ranks`` (None where the trace has none) and ``trace_metadata`` (dicts). Together they
        rebuild each trace exactly (with its row's prompt and answer).
    """
    out: dict[str, list[Any]] = {c: [] for c in ("tokens", "token_ids", "surprisal", "entropy", "top_ids",
                                                 "top_logprobs", "top_tokens", "ranks", "trace_metadata")}
    for i, trace in enumerate(traces):
        if trace is None:
            for values in out.values():
                values.append(None)
            continue
        if not isinstance(trace, Trace):
            raise TypeError(f"`traces[{i}]` must be a Trace or None, got {type(trace).__name__}")
        d = trace.to_dict()
        for c in ("tokens", "token_ids", "surprisal", "entropy", "top_ids", "top_logprobs", "top_tokens", "ranks"):
            out[c].append(d[c])
        out["trace_metadata"].append(d["metadata"])
    return out


_PLAIN_SCALARS = {int, float, str, bool, type(None)}


def _to_plain(value: Any) -> Any:
    """Numpy and pandas values as JSON-able Python values (NaN/NA -> None)."""
    if isinstance(value, np.ndarray):
        return [_to_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        types = set(map(type, value))
        if types <= _PLAIN_SCALARS and not (float in types and any(v != v for v in value)):
            return list(value)  # fast path: already plain, no NaN
        return [_to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_plain(v) for k, v in value.items()}
    if _is_missing(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _csv_text(value: Any) -> str:
    value = _to_plain(value)
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _frame_for_writing(frame: pd.DataFrame, traces: Sequence[Trace | None] | None) -> tuple[pd.DataFrame, dict]:
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"`frame` must be a pandas DataFrame, got {type(frame).__name__}")
    row_column = frame.attrs.get("trace_core_row_column")
    if row_column in frame.columns:  # the row numbers read_dataset added are recomputed on reading again
        frame = frame.drop(columns=[row_column])
    columns: dict[str, list[Any]] = {}
    if traces is not None:
        traces = list(traces)
        if len(traces) != len(frame):
            raise ValueError(f"`traces` has {len(traces)} entries but `frame` has {len(frame)} rows")
        columns = {c: v for c, v in traces_to_columns(traces).items() if any(x is not None for x in v)}
        frame = frame.drop(columns=[c for c in TRACE_COLUMNS if c in frame.columns])
    return frame, columns


def _records(frame: pd.DataFrame, extra: Mapping[str, list[Any]]) -> Iterable[dict[str, Any]]:
    names = [str(c) for c in frame.columns] + list(extra)
    for i, values in enumerate(frame.itertuples(index=False, name=None)):
        yield dict(zip(names, list(values) + [v[i] for v in extra.values()]))


def _write(dest: object, data: bytes, *, text: bool = True) -> None:
    if isinstance(dest, (str, Path)):
        Path(dest).write_bytes(data)
        return
    if not hasattr(dest, "write"):
        raise TypeError(f"`dest` must be a path or a writable file-like object, got {type(dest).__name__}")
    if isinstance(dest, io.TextIOBase):
        if not text:
            raise TypeError("Parquet is binary: `dest` must be a path or a binary buffer (e.g. io.BytesIO)")
        dest.write(data.decode("utf-8"))
    else:
        dest.write(data)


def _dest_name(dest: object) -> str:
    return Path(dest).name if isinstance(dest, (str, Path)) else str(getattr(dest, "name", "") or "")


def _csv_bytes(header: list[str], rows: Iterable[list[str]], *, delimiter: str = ",") -> bytes:
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, delimiter=delimiter)
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue().encode("utf-8")


def _jsonl_bytes(records: Iterable[dict[str, Any]]) -> bytes:
    lines = [json.dumps({k: _to_plain(v) for k, v in r.items()}, ensure_ascii=False, allow_nan=False)
             for r in records]
    return ("\n".join(lines) + ("\n" if lines else "")).encode("utf-8")


_ARROW_TYPES = {"tokens": ("list", "string"), "token_ids": ("list", "int64"), "surprisal": ("list", "float64"),
                "entropy": ("list", "float64"), "top_ids": ("list2", "int64"), "top_logprobs": ("list2", "float64"),
                "top_tokens": ("list2", "string"), "ranks": ("list", "int64")}


def _parquet_bytes(frame: pd.DataFrame, extra: Mapping[str, list[Any]]) -> bytes:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("writing Parquet needs pyarrow: pip install pyarrow") from exc
    table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
    for name, values in extra.items():
        if name == "trace_metadata":  # a free-form object: stored as JSON text, decoded on reading
            array = pa.array([None if v is None else json.dumps(v, ensure_ascii=False) for v in values],
                             type=pa.string())
        else:
            kind, element = _ARROW_TYPES[name]
            arrow_type = pa.list_(getattr(pa, element)())
            array = pa.array(values, type=pa.list_(arrow_type) if kind == "list2" else arrow_type)
        table = table.append_column(name, array)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def write_dataset(frame: pd.DataFrame, dest: PathOrBuffer, *, traces: Sequence[Trace | None] | None = None,
                  format: str | None = None) -> None:
    """Write a dataset that :func:`read_dataset` reads back unchanged.

    CSV cells of lists (trace columns included) are JSON text; floats are written as their exact repr, so values
    survive the round trip bit for bit. No spreadsheet sanitising is done here (it would change values): use
    :func:`export_flagged` for files meant to be opened by people.

    Parameters
    ----------
    frame : pandas.DataFrame
        The rows, e.g. ``LabeledDataset.frame``; the row-number column that :func:`read_dataset` added is left out
        (it is recomputed on reading).
    dest : str, Path or file-like
        Where to write (binary buffers get bytes; text buffers get text, except Parquet).
    traces : sequence of Trace or None, optional
        One per row; written as the trace columns (:func:`traces_to_columns`), replacing any trace columns of
        ``frame``. Rows whose trace is None get empty cells.
    format : {"csv", "jsonl", "parquet"} or None
        None: from the extension of ``dest`` (or its ``.name``); a ``.tsv`` name gets tab-separated CSV.
    """
    name = _dest_name(dest)
    fmt = _format_from_name(name, format, "destination")
    frame, extra = _frame_for_writing(frame, traces)
    if fmt == "csv":
        header = [str(c) for c in frame.columns] + list(extra)
        data = _csv_bytes(header, ([_csv_text(v) for v in r.values()] for r in _records(frame, extra)),
                          delimiter="\t" if name.lower().endswith(".tsv") else ",")
    elif fmt == "jsonl":
        data = _jsonl_bytes(_records(frame, extra))
    else:
        data = _parquet_bytes(frame, extra)
    _write(dest, data, text=fmt != "parquet")


# --------------------------------------------------------------------------------------------------
# Export for people
# --------------------------------------------------------------------------------------------------

def parse_beam_logprobs(values: Iterable[object], rows: Iterable[int]) -> list[list[float]]:
    """The ``beam_logprobs`` column: per answer, the log-probabilities of a beam search's beams (a JSON list in CSV
    cells, a list in JSONL/Parquet). ``rows`` are the data-row numbers used in error messages.

    Raises
    ------
    ValueError
        ``"row 7: beam_logprobs: ..."`` for a cell that is not a list of at least 2 numbers.
    """
    out = []
    for row, value in zip(rows, values):
        try:
            parsed = json.loads(value) if isinstance(value, str) else list(value)
            beams = [float(v) for v in parsed]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"row {row}: beam_logprobs: not a JSON list of numbers ({exc})") from exc
        if len(beams) < 2:
            raise ValueError(f"row {row}: beam_logprobs: needs at least 2 beam log-probabilities, got {len(beams)}")
        out.append(beams)
    return out


def sanitize_cell(value: object) -> object:
    """Neutralise spreadsheet formula injection in one exported cell.

    A string whose first character is ``=``, ``+``, ``-``, ``@``, tab or carriage return (OWASP's list, plus their
    full-width forms) gets a leading single quote, so spreadsheet programs show it as text instead of running it.
    A negative number written as a *string* (``"-3"``) is quoted too; numbers of numeric type are not strings and are
    returned unchanged, as is every other non-string value.
    """
    if isinstance(value, str) and value.startswith(_FORMULA_PREFIXES):
        return "'" + value
    return value


def export_flagged(frame: pd.DataFrame, dest: PathOrBuffer, *, format: str = "csv",
                   sanitize: bool | None = None) -> None:
    """Export rows (e.g. the flagged answers) for people, as CSV or JSON Lines.

    Parameters
    ----------
    frame : pandas.DataFrame
        The rows to export, every column as is (lists and dicts become JSON text in CSV).
    dest : str, Path, or binary or text file-like
    format : {"csv", "jsonl"}
    sanitize : bool or None
        Pass every text cell (and column name) through :func:`sanitize_cell`. None (default): True for CSV, which
        spreadsheets open, and False for JSON Lines, which programs read and where a changed value (``"-3"`` ->
        ``"'-3"``) would be a corruption rather than a protection.
    """
    if format not in ("csv", "jsonl"):
        raise ValueError(f"`format` must be 'csv' or 'jsonl', got {format!r}")
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"`frame` must be a pandas DataFrame, got {type(frame).__name__}")
    if sanitize is None:
        sanitize = format == "csv"
    if not isinstance(sanitize, bool):
        raise TypeError(f"`sanitize` must be a bool or None, got {sanitize!r}")
    clean = sanitize_cell if sanitize else (lambda v: v)
    header = [str(clean(str(c))) for c in frame.columns]
    if format == "csv":
        # Sanitise before turning values into text: numbers of numeric type are not strings and stay as they are.
        rows = ([_csv_text(clean(_to_plain(v))) for v in values]
                for values in frame.itertuples(index=False, name=None))
        data = _csv_bytes(header, rows)
    else:
        records = ({h: clean(_to_plain(v)) for h, v in zip(header, values)}
                   for values in frame.itertuples(index=False, name=None))
        data = _jsonl_bytes(records)
    _write(dest, data)
