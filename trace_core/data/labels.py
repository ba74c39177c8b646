"""Correctness labels: parsing a ``label`` cell, and labeling an answer from a gold reference with a matcher."""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from typing import Sequence

import numpy as np

from .._checks import check_choice, check_real
from ._values import is_blank, is_number, show

__all__ = ["MATCHERS", "label_from_reference", "normalize_answer", "parse_label"]

MATCHERS = ("exact", "contains", "numeric", "f1")
LABEL_EXPECTED = "0/1, true/false, yes/no, correct/incorrect"  # the spellings named in messages
_LABEL_WORDS = {"1": 1, "0": 0, "true": 1, "false": 0, "yes": 1, "no": 0, "correct": 1, "incorrect": 0,
                "y": 1, "n": 0, "t": 1, "f": 0}


def parse_label(value: object) -> int:
    """A correctness label as 0 or 1.

    Accepted: booleans; the numbers 0 and 1 (also 0.0/1.0); the strings 0/1 (also "1.0"), true/false, yes/no,
    correct/incorrect, y/n, t/f -- case-insensitive, surrounding whitespace ignored.

    Parameters
    ----------
    value : object
        One ``label`` cell as read.

    Returns
    -------
    int
        1 (correct) or 0 (wrong).

    Raises
    ------
    ValueError
        For anything else, with a message naming the value and the accepted spellings (used as the row error).

    Examples
    --------
    >>> parse_label(" Yes "), parse_label(0.0), parse_label("1.0")
    (1, 0, 1)
    """
    if is_blank(value):
        raise ValueError(f"is missing; expected one of {LABEL_EXPECTED}")
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
    raise ValueError(f"{show(value)} is not one of {LABEL_EXPECTED}")


_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# A number: optional sign (not right after a letter/digit, so "2-3" is 2 and 3), digits with optional
# thousands separators, optional decimals and exponent. "1,234.5" -> 1234.5; ".5" -> 0.5.
_NUMBER = re.compile(r"(?:(?<![\w.])[-+\u2212])?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation: NFKC, lower case, no punctuation, no articles (a/an/the), single spaces.

    Examples
    --------
    >>> normalize_answer("The  Eiffel-Tower!")
    'eiffel tower'
    """
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
    if is_number(reference):
        number = float(reference)  # type: ignore[arg-type]
    else:
        text = unicodedata.normalize("NFKC", str(reference)).strip()
        if not _NUMBER.fullmatch(text):
            raise ValueError(f"{show(reference)} is not a number (the numeric matcher needs a numeric reference)")
        number = _parse_number(text)
    if not math.isfinite(number):
        raise ValueError(f"{show(reference)} is not a finite number")
    return number


def _token_f1(prediction: list[str], gold: list[str]) -> float:
    if not prediction or not gold:
        return float(prediction == gold)
    same = sum((Counter(prediction) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(prediction), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def check_matcher_options(matcher: str, tolerance: float, f1_threshold: float) -> None:
    """Validate the matcher options once, before any row is read (shared with :func:`read_dataset`)."""
    check_choice(matcher, "matcher", MATCHERS)
    check_real(tolerance, "tolerance", minimum=0.0, finite=False)  # inf: any number counts as a match
    check_real(f1_threshold, "f1_threshold", minimum=0.0, maximum=1.0)


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
        Absolute tolerance of the numeric matcher, >= 0.
    f1_threshold : float
        F1 at or above which the f1 matcher calls the answer correct, in [0, 1].

    Returns
    -------
    int
        1 or 0.

    Raises
    ------
    TypeError
        ``answer`` is not a str, or an option has the wrong type.
    ValueError
        Unknown matcher or an option out of range; a reference that is empty after normalisation (text matchers)
        or not a number (numeric).

    Examples
    --------
    >>> label_from_reference("It is 1,234.5 m.", "1234.5", matcher="numeric")
    1
    >>> label_from_reference("Paris, France", "paris || lyon", matcher="contains")
    1
    """
    check_matcher_options(matcher, tolerance, f1_threshold)
    if not isinstance(answer, str):
        raise TypeError(f"`answer` must be a str, got {type(answer).__name__}")
    if isinstance(reference, str):
        references: list[object] = list(reference.split(" || "))
    elif isinstance(reference, (Sequence, np.ndarray)):
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
        ref = ref if isinstance(ref, str) else str(ref)
        norm = normalize_answer(ref)
        if not norm:
            raise ValueError(f"{show(ref)} is empty after normalisation (lower case, no punctuation or articles)")
        golds.append(norm)
    pred = normalize_answer(answer)
    if matcher == "exact":
        return int(pred in golds)
    if matcher == "contains":
        return int(any(f" {g} " in f" {pred} " for g in golds))
    return int(any(_token_f1(pred.split(), g.split()) >= f1_threshold for g in golds))
