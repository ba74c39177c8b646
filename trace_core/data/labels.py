"""Correctness labels: parsing a ``label`` cell, and labeling an answer from a gold reference with a matcher."""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from itertools import islice

import numpy as np

from trace_core.checks import check_choice, check_real
from trace_core.data.claim import claim_text
from trace_core.traces.cells import MAX_SHOWN, as_finite_float, is_blank, is_number, show

__all__ = ["MATCHERS", "common_label", "exact_match_hint", "label_from_reference", "normalize_answer", "parse_label"]

MATCHERS = ("exact", "contains", "claim", "numeric", "f1")
LABEL_EXPECTED = "0/1, true/false, yes/no, correct/incorrect"  # the spellings named in messages
_LABEL_WORDS = {"1": 1, "0": 0, "true": 1, "false": 0, "yes": 1, "no": 0, "correct": 1, "incorrect": 0,
                "y": 1, "n": 0, "t": 1, "f": 0}


def _show_number(value: object) -> str:
    """A number as written (2, 0.5), not as np.int64(2) or Decimal('0.5')."""
    if isinstance(value, Decimal):
        text = str(value)
        return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."
    return show(value.item() if isinstance(value, np.generic) else value)


def common_label(value: object) -> int | None:
    """:func:`parse_label` of a cell in the spellings nearly every file uses: a Python bool, the int 0 or 1, or one of
    the words (0/1, true/false, ...) in any case and with surrounding whitespace; None for anything else, which
    :func:`parse_label` decides (and words, when wrong). A reader checks most rows' labels with this alone."""
    if type(value) is str:
        return _LABEL_WORDS.get(value.strip().lower())
    if type(value) is bool:
        return int(value)
    if type(value) is int and (value == 0 or value == 1):
        return value
    return None


def parse_label(value: object) -> int:
    """A correctness label as 0 or 1.

    Accepted: booleans (numpy's too); the numbers 0 and 1 as int, float, numpy int/float or ``decimal.Decimal``
    (Parquet decimal columns), e.g. 0.0/1.0; the strings 0/1 (also "1.0"), true/false, yes/no, correct/incorrect,
    y/n, t/f -- case-insensitive, surrounding whitespace ignored.

    A numeric string must be exactly 0 or 1 as written, read as a decimal (not rounded to a float first):
    "1.0", "-0", "\u22120" (the minus signs :func:`normalize_answer` reads as "-") and "1e0" are accepted;
    "0.99999999999999999", "1.0000000000000001" and "1e-30" are not.

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
    >>> parse_label(" Yes "), parse_label(0.0), parse_label("1.0"), parse_label(Decimal("1.00"))
    (1, 0, 1, 1)
    """
    if is_blank(value) or (isinstance(value, Decimal) and value.is_nan()):
        raise ValueError(f"is missing; expected one of {LABEL_EXPECTED}")
    if isinstance(value, (bool, np.bool_)):
        return int(bool(value))
    if isinstance(value, (int, np.integer, float, np.floating, Decimal)):
        if value in (0, 1):
            return int(value)
        raise ValueError(f"{_show_number(value)} is not one of {LABEL_EXPECTED}")
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _LABEL_WORDS:
            return _LABEL_WORDS[word]
        try:  # Decimal, not float: float("0.99999999999999999") is 1.0, a label nobody wrote
            number = Decimal(word.translate(_MINUS_SIGNS))
        except InvalidOperation:
            number = Decimal("NaN")
        if number.is_finite() and number in (0, 1):
            return int(number)
    raise ValueError(f"{show(value)} is not one of {LABEL_EXPECTED}")


_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# Unicode minus signs read as "-": U+2212 minus, U+2012 figure dash, U+2013 en dash, U+FE63 small and U+FF0D
# full-width hyphen-minus (NFKC maps the last two already).
_MINUS_SIGNS = str.maketrans(dict.fromkeys("\u2212\u2012\u2013\ufe63\uff0d", "-"))
# normalize_answer's numbers: digits joined by single "." or "," ("5.9", "1,862", "1,2,3", "1.2.3"), with a leading
# minus sign unless it follows a letter, digit, "." or "-" ("-5", not the "-" of "2-3" or "x-5"), and a leading
# decimal point unless it follows a letter, digit or "." (".5", not the "." of "x.5" or "...5").
_NUMBER_RUN = re.compile(r"(?:(?<![\w.-])-)?(?:(?<![\w.])\.)?\d+(?:[.,]\d+)*")
_WORD = re.compile(r"\w")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")  # "1,000", "-12,345.6": the commas group thousands
# The numeric matcher's numbers: optional sign (not right after a letter/digit, so "2-3" is 2 and 3), digits with
# optional thousands separators, optional decimals and exponent. "1,234.5" -> 1234.5; ".5" -> 0.5.
_NUMBER = re.compile(r"(?:(?<![\w.])[-+])?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")
_SEPARATOR = re.compile(r"\s*\|\|\s*")  # between the references of one string: "a || b", "a||b"
# Case folding writes the Turkish capital "İ" as "i" and a combining dot above, which NFKC keeps: an "i" has its dot
# already, so "İstanbul" is "istanbul".
_DOTTED_I = "i\u0307"
# Numbers joined into something that is not one number: a time or ratio ("3:45", "1:2", "3/4", "12:30:00") or a
# date ("2024-05-01", "05/01/2024"); the numeric matcher reads none of their numbers ("pages 2-3" stays 2 and 3).
_COMPOUND = re.compile(r"\d+(?:[:/]\d+)+|\d+(?:-\d+){2,}")


def _is_punctuation(ch: str) -> bool:
    return ch in _PUNCTUATION or unicodedata.category(ch).startswith("P")


def _joins(ch: str) -> bool:
    """A letter, digit or combining mark: a "-" or "." written right after it is not a number's sign or point."""
    return bool(ch) and (_WORD.match(ch) is not None or unicodedata.category(ch).startswith("M"))


def _drop_punctuation(text: str) -> str:
    # Deleted, not replaced by a space (as SQuAD does): "U.S." is "us" and "A.I." is "ai", not "u s" and "i".
    return "".join(ch for ch in text if not _is_punctuation(ch))


def _number_text(number: str) -> str:
    """One number run as normalize_answer writes it: thousands commas dropped, other commas separate numbers."""
    return number.replace(",", "") if _THOUSANDS.fullmatch(number) else number.replace(",", " ")


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation that keeps numbers whole.

    On ASCII text without digits this is exactly SQuAD v1.1's ``normalize_answer``: lower case, punctuation
    characters deleted, the articles a/an/the removed as whole words, whitespace collapsed.

    1. NFKC, Unicode case folding (``str.casefold``: "STRASSE" and "straße" are both "strasse"), NFKC again (so
       that normalising twice changes nothing), the dot above that folding gives the Turkish "İ" dropped ("İstanbul"
       is "istanbul"); the minus signs U+2212, U+2012, U+2013, U+FE63, U+FF0D become "-".
    2. Numbers -- decimal digits (any script) joined by single "." or "," -- stay one word: a "." between digits
       stays ("5.9", "1.2.3"); commas that group thousands are dropped ("1,000" -> "1000", "1,234.5" -> "1234.5"),
       other commas separate numbers ("1,2,3" -> "1 2 3"). A "-" right before a number is its sign, and a "."
       right before digits its decimal point (".5"), when the nearest character before them that is not
       punctuation is not a letter, digit or combining mark, and the "-" does not follow "." or "-" ("-5" and
       "(-5)" stay; "x-5" -> "x5", "--5" -> "5"). Punctuation alone between two numbers separates them ("2-3" -> "2 3").
    3. Every other punctuation character (ASCII punctuation, Unicode categories P*) is deleted, not replaced by a
       space: "U.S." is "us", "A.I." is "ai" (not "i"), "O'Brien" is "obrien", "5." at the end of a sentence is
       "5", "+5" and "$5" are "5". Symbols such as "£", "°" or emoji stay.
    4. NFKC again (a deleted character may leave a letter next to a combining accent), then the articles
       a/an/the are removed as whole words (after step 3: "A-ha" is "aha") and whitespace is collapsed to single
       spaces.

    Examples
    --------
    >>> normalize_answer("The  Eiffel Tower!"), normalize_answer("U.S."), normalize_answer("A.I.")
    ('eiffel tower', 'us', 'ai')
    >>> normalize_answer("It is \u22125.9, not 1,000 or 1,2,3.")
    'it is -5.9 not 1000 or 1 2 3'
    """
    return _normalized(text, drop_articles=True)


def _normalized(text: str, *, drop_articles: bool) -> str:
    """:func:`normalize_answer`, with or without its last step's articles (a reference that is only an article,
    such as the multiple-choice letter "A", is compared with its article kept)."""
    text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold()).translate(_MINUS_SIGNS)
    text = text.replace(_DOTTED_I, "i")
    parts, end, last = [], 0, ""  # last: the last character written so far
    for match in _NUMBER_RUN.finditer(text):
        gap = _drop_punctuation(text[end:match.start()])
        last = gap[-1:] or last
        number = match.group()
        if number[0] in "-." and _joins(last):  # "x(-5)": the "-" is deleted punctuation, not a sign
            number = number.lstrip("-.")
        if not gap and end and match.start() > end:  # "2-3": two numbers, not "23"
            gap = " "
        parts += [gap, _number_text(number)]
        end, last = match.end(), number[-1]
    parts.append(_drop_punctuation(text[end:]))
    # NFKC once more: a deleted mark may leave a letter and a combining accent side by side ("s\u2010\u0301").
    text = unicodedata.normalize("NFKC", "".join(parts))
    return " ".join((_ARTICLES.sub(" ", text) if drop_articles else text).split())


_DIGIT_LIKE = "\x00"  # stands for a superscript, fraction, circled digit...: NFKC would make digits of it


def _looks_like_digit(ch: str) -> bool:
    """Not a decimal digit, but NFKC makes one of it: "²", "₂", "½", "①", "⒈"."""
    return not ch.isdecimal() and any(c.isdecimal() for c in unicodedata.normalize("NFKC", ch))


def _numeric_text(text: str) -> str:
    if not text.isascii():
        text = "".join(_DIGIT_LIKE if _looks_like_digit(ch) else ch for ch in text.replace(_DIGIT_LIKE, " "))
    return unicodedata.normalize("NFKC", text).translate(_MINUS_SIGNS)


def _without_compounds(text: str) -> str:
    """``text`` (after :func:`_numeric_text`) with every time, ratio and date replaced by a character that stops a
    number touching it from being read."""
    return _COMPOUND.sub(_DIGIT_LIKE, text)


def _parse_number(text: str) -> float:
    return float(text.replace(",", ""))


def _last_number_match(text: str) -> tuple[re.Match | None, str]:
    """The numeric matcher's last number in ``text`` (None when there is none) and the text it was found in."""
    text = _without_compounds(_numeric_text(text))
    found = [m for m in _NUMBER.finditer(text)  # "10²" is not 10
             if _DIGIT_LIKE not in text[max(m.start() - 1, 0):m.end() + 1]]
    return (found[-1] if found else None), text


def _last_number(text: str) -> float | None:
    match, _ = _last_number_match(text)
    return _parse_number(match.group()) if match else None


def last_number_span(text: str) -> tuple[int, int] | None:
    """Where the numeric matcher's last number is in ``text`` (its last occurrence as written when normalising
    changed the text's length); None when there is none."""
    match, read = _last_number_match(text)
    if match is None:
        return None
    if len(read) == len(text):
        return match.start(), match.end()
    start = text.rfind(match.group())
    return None if start < 0 else (start, start + len(match.group()))


def _reference_number(reference: object) -> float | None:
    """The reference as a finite float; None when it is not one."""
    if is_number(reference):
        return as_finite_float(reference)
    text = _numeric_text(str(reference)).strip()
    if not _NUMBER.fullmatch(text):
        return None
    number = _parse_number(text)
    return number if math.isfinite(number) else None


def reference_pieces(reference: object) -> list[object]:
    """The acceptable answers: a str split on "||" (any whitespace around it), a sequence's items, or the value;
    blank pieces (empty or whitespace text, None, NaN) are dropped."""
    if isinstance(reference, str):
        pieces: list[object] = _SEPARATOR.split(reference)
    elif isinstance(reference, (Sequence, np.ndarray)):
        pieces = list(reference)
    else:
        pieces = [reference]
    return [piece for piece in pieces if not is_blank(piece)]


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
    reference : str, number or sequence
        The gold answer. Several acceptable answers may be given as a sequence, or in one string separated by
        ``||`` (with or without spaces around it); the answer is correct when it matches any of them. Blank pieces
        (empty or whitespace text, None, NaN: "a||b||" is "a" and "b") are ignored. A piece empty after
        normalisation is an article: the exact matcher compares it with the article kept (the multiple-choice
        letter "A" matches "a)" and not "b"); contains and f1 skip it ("the" in "the||b") as long as one piece is
        left.
    matcher : {"exact", "contains", "claim", "numeric", "f1"}
        The texts are compared after :func:`normalize_answer` (case folded, punctuation and articles removed,
        numbers kept whole: "5.9", "-5", "1,000" -> "1000").

        - ``"exact"``: the normalized answer equals the normalized reference.
        - ``"contains"``: the normalized reference occurs in the normalized answer as whole words, so a number
          only as a whole number ("5" is not in "5.9", "-5", "1,500" or "x5"); a hyphen joins words as any
          punctuation does ("English-speaking" is one word, which does not hold "English").
        - ``"claim"``: ``contains`` over the answer's claim only (:func:`~trace_core.data.claim.claim_text`: its
          "Answer:" line, else its first sentence, without asides such as ", which ..." or "between X and Y"), so
          "Bahamiskat, which is a mix of English" does not hold "English".
        - ``"numeric"``: the last number in the answer (signs, decimals, exponents and thousands commas allowed)
          is within ``tolerance`` (absolute) of a reference number; an answer without a number is wrong.
          Digits are decimal digits of any script (after NFKC: "\uff15" is 5); superscripts, subscripts, fractions
          and other characters that only look like digits are not ("x\u00b2", "\u00bd" hold no number), and a
          number touching one is not read ("10\u00b2" holds no number). Times, ratios and dates ("3:45", "3/4",
          "2024-05-01") are not numbers: none of their parts is read. The minus signs of :func:`normalize_answer`
          count as "-".
          References that are not numbers are skipped, as long as one is a number.
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
        Unknown matcher or an option out of range; no reference; only references that are empty after
        normalisation (text matchers); no reference that is a number (numeric).

    Examples
    --------
    >>> label_from_reference("The STRASSE!", "straße"), label_from_reference("-1,000", "\u22121000")
    (1, 1)
    >>> label_from_reference("1.5", "1 5"), label_from_reference("Eiffel", "Eiffel Tower")
    (0, 0)
    >>> label_from_reference("Paris, France", "paris||lyon", matcher="contains")
    1
    >>> label_from_reference("It is 5.9", "5", matcher="contains"), label_from_reference("-5", "5", matcher="contains")
    (0, 0)
    >>> label_from_reference("It is 1,234.5 m.", "1234.5", matcher="numeric")
    1
    >>> label_from_reference("It is 5.", "five || 5", matcher="numeric")
    1
    >>> label_from_reference("Barack Hussein Obama", "Barack Obama", matcher="f1")  # F1 0.8
    1
    """
    check_matcher_options(matcher, tolerance, f1_threshold)
    if not isinstance(answer, str):
        raise TypeError(f"`answer` must be a str, got {type(answer).__name__}")
    references = reference_pieces(reference)
    if not references:
        raise ValueError(f"{show(reference)} holds no reference" if isinstance(reference, str)
                         else "is an empty list of references")
    if matcher == "numeric":
        gold = [number for number in map(_reference_number, references) if number is not None]
        if not gold:
            if len(references) > 1:
                raise ValueError(f"none of {show(reference)} is a number (the numeric matcher needs one)")
            ref = references[0]
            written = is_number(ref) or _NUMBER.fullmatch(_numeric_text(str(ref)).strip())  # inf, 1e999
            raise ValueError(f"{show(ref)} is not a finite number" if written else
                             f"{show(ref)} is not a number (the numeric matcher needs a numeric reference)")
        found = _last_number(answer)
        return int(found is not None and any(abs(found - g) <= tolerance for g in gold))
    # A piece that normalises to nothing ("a" in "a||b") cannot be matched: skipped, as long as one is left.
    texts = [r if isinstance(r, str) else str(r) for r in references]
    golds = [(norm, True) for norm in map(normalize_answer, texts) if norm]
    if matcher == "exact":  # "A", "an": an option's letter, compared with its article kept
        golds += [(norm, False) for text in texts if not normalize_answer(text)
                  for norm in [_normalized(text, drop_articles=False)] if norm]
    if not golds:
        ref = references[0] if len(references) == 1 else reference
        which = "" if len(references) == 1 else "every reference in "
        letter = any(_normalized(text, drop_articles=False) for text in texts)
        raise ValueError(f"{which}{show(ref)} is empty after normalisation (lower case, no punctuation or articles)"
                         + ("; an option letter such as 'A' is matched by the exact matcher only (every answer "
                            "with the word 'a' would contain it)" if letter else ""))
    if matcher == "claim":
        answer = claim_text(answer)
    preds = {drop: _normalized(answer, drop_articles=drop) for drop in {drop for _, drop in golds}}
    if matcher == "exact":
        return int(any(preds[drop] == g for g, drop in golds))
    if matcher in ("contains", "claim"):
        return int(any(f" {g} " in f" {preds[drop]} " for g, drop in golds))
    return int(any(_token_f1(preds[drop].split(), g.split()) >= f1_threshold for g, drop in golds))


EXACT_HINT_ROWS = 1000  # answers labeled wrong that :func:`exact_match_hint` looks at: enough to show the pattern


def exact_match_hint(answers: Sequence[str], references: Sequence[object], labels: Sequence[int | None],
                     rows: Sequence[int]) -> str | None:
    """A note when the exact matcher labeled answers wrong that hold their reference as whole words, else None.

    An instruct model answers in sentences ("The capital of France is Paris."), which the default ``"exact"``
    matcher labels wrong against the reference "Paris"; left unsaid, such labels make every later figure wrong.
    The first :data:`EXACT_HINT_ROWS` answers labeled 0 (``labels``: 0, 1 or None for unlabeled) are matched again
    with ``"contains"``; the note counts those it labels right and quotes the first (its row from ``rows``).
    """
    zeros = list(islice((i for i, label in enumerate(labels) if label == 0), EXACT_HINT_ROWS + 1))
    looked = zeros[:EXACT_HINT_ROWS]
    hits = []
    for i in looked:
        try:
            if label_from_reference(answers[i], references[i], matcher="contains"):
                hits.append(i)
        except (TypeError, ValueError):  # a reference the exact matcher could not use either
            continue
    if not hits:
        return None
    scope = f"of the first {len(looked):,}" if len(zeros) > len(looked) else f"of the {len(looked):,}"
    first = hits[0]
    lead = (f"{len(hits):,} {scope} answers that the exact matcher labeled wrong "
            f"{'holds its' if len(hits) == 1 else 'hold their'}" if len(looked) > 1
            else "the one answer that the exact matcher labeled wrong holds its")
    return (f"{lead} reference as whole words (row {rows[first]}: {show(answers[first])} against "
            f"{show(references[first])}); exact matching suits short answers: for answers written as sentences "
            f"the contains, numeric or f1 matcher may label them better (read a few labels before choosing)")
