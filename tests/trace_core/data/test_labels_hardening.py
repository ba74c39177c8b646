"""Labels from references and label cells, hardened: SQuAD's punctuation rule, empty alternatives, digit-like
characters, exact 0/1 labels, and ``evaluate --group-by`` with a group of one class.

The normalisation is checked against SQuAD v1.1's official ``normalize_answer``, written again below.
"""

from __future__ import annotations

import io
import json
import re
import string

import numpy as np
import pandas as pd
import pytest
from helpers import synthetic_trace_objects
from hypothesis import given, settings
from hypothesis import strategies as st

from trace_core.cli import main
from trace_core.data import label_from_reference, normalize_answer, parse_label, read_dataset, write_dataset

LABEL_WORDS = "is not one of 0/1, true/false, yes/no, correct/incorrect"


def squad_normalize(s: str) -> str:
    """SQuAD v1.1's ``normalize_answer`` (evaluate-v1.1.py), as published."""
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def label(answer, reference, matcher="exact", **options):
    return label_from_reference(answer, reference, matcher=matcher, **options)


# --------------------------------------------------------------------------------------------------
# Item 14: normalisation deletes punctuation (SQuAD), empty alternatives, digit-like characters
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("answer, reference, expected", [
    ("A.I.", "I", 0), ("A.M.", "M", 0), ("A-ha", "ha", 0), ("An.t", "t", 0),
    ("U.S.", "US", 1), ("Ph.D.", "PhD", 1), ("O'Brien", "OBrien", 1), ("O\u2019Brien", "obrien", 1),
    ("A.I.", "AI", 1), ("e.g.", "eg", 1), ("the U.S.A.", "usa", 1),
])
def test_in_word_punctuation_is_deleted_not_a_space(answer, reference, expected):
    assert label(answer, reference) == expected


ASCII_CASES = [
    "A.I.", "A.M.", "A-ha", "U.S.", "Ph.D.", "O'Brien", "The Eiffel-Tower!", "  the  Quick, brown fox -- an ANIMAL! ",
    "a", "an", "the", "The.", "a.b.c", "(the)", "an_the", "a_", "_a_", "then", "A", "x-a-y", "a-the-an", "...",
    "'", "\"the\"", "Mr. & Mrs. Smith", "rock'n'roll", "well-known", "\ta\nb\x0bc\x1fd", "THE END", "[a] {an} <the>",
    "a\\b", "back`tick", "e.g.,i.e.", "a.m./p.m.", "~the~", "@an@", "",
]


@pytest.mark.parametrize("text", ASCII_CASES)
def test_agrees_with_squad_on_listed_ascii(text):
    assert normalize_answer(text) == squad_normalize(text)


ASCII_NO_DIGITS = [chr(c) for c in range(128) if not chr(c).isdigit()]
PIECES = ASCII_NO_DIGITS + ["a", "an", "the", "A", "The", " a ", " the ", "-", ".", "'", "_", "  "]


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(ASCII_NO_DIGITS), max_size=30)
       | st.lists(st.sampled_from(PIECES), max_size=12).map("".join))
def test_agrees_with_squad_on_ascii_without_digits(text):
    assert normalize_answer(text) == squad_normalize(text)


def _no_punctuation(text: str) -> str:
    return "".join(ch for ch in text if ch not in string.punctuation)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES + list("0123456789") + ["1,000", "5.9", "-5", "(-5)", ".5", "2-3"]),
                max_size=12).map("".join))
def test_on_ascii_with_digits_only_number_signs_points_and_separations_differ_from_squad(text):
    """Numbers stay whole ("5.9", "-5", "2-3" -> "2 3"); with their punctuation and the spaces removed the two
    normalisations agree, so every other character is treated as SQuAD treats it."""
    ours = normalize_answer(text)
    assert "".join(_no_punctuation(ours).split()) == "".join(squad_normalize(text).split())
    assert normalize_answer(ours) == ours


@pytest.mark.parametrize("text, expected", [
    ("l\u2019avion", "lavion"), ("U\u00b7S", "us"), ("\u00abThe\u00bb end", "end"), ("\u00bfQu\u00e9?", "qu\u00e9"),
    ("A\u2010ha", "aha"), ("A\u2013ha", "aha"), ("Ph.D\u3002", "phd"), ("\uff35\uff0e\uff33\uff0e", "us"),
    ("the\u2014end", "theend"), ("x(\u22125)", "x5"), ("(\u22125)", "-5"), ("\u00a3-5", "\u00a3-5"),
    ("a\u200b\u00a0the b", "\u200b b"), ("\u201cA\u201d", ""), ("caf\u00e9!", "caf\u00e9"),
])
def test_unicode_punctuation_is_deleted_too(text, expected):
    assert normalize_answer(text) == expected
    assert normalize_answer(expected) == expected


@pytest.mark.parametrize("reference", ["a||b||", "b||", "||b", "a || b || ", " || the ||b", ["a", "b", ""],
                                       "the||a||b"])
def test_empty_alternatives_are_skipped(reference):
    assert label("b", reference) == 1
    assert label("c", reference) == 0
    assert label("the b!", reference, "contains") == 1


@pytest.mark.parametrize("reference, match", [
    ("a||the||", r"^every reference in 'a\|\|the\|\|' is empty after normalisation"),
    (["An", "..."], r"^every reference in \['An', '\.\.\.'\] is empty after normalisation"),
    ("The", r"^'The' is empty after normalisation"),
    (" || ||", r"^' \|\| \|\|' holds no reference$"),
])
def test_only_empty_alternatives_is_an_error(reference, match):
    with pytest.raises(ValueError, match=match):
        label("b", reference, "contains")
    if "holds no reference" in match:
        with pytest.raises(ValueError, match=match):
            label("b", reference)


@pytest.mark.parametrize("answer, reference, expected", [
    ("A", "A", 1), ("a)", "A", 1), ("B", "A", 0), ("The answer is A", "A", 0), ("an", "An", 1), ("the", "a||the", 1),
    ("b", "a||the||", 0), ("B", "A||B", 1), ("A", "A||B", 1), ("C", "A||B", 0), ("The", "The", 1),
])
def test_an_option_letter_or_article_is_an_exact_reference(answer, reference, expected):
    """A multiple-choice reference "A" is only an article once normalised: the exact matcher compares it with its
    article kept, and contains refuses it (every answer with the word "a" would contain it)."""
    assert label(answer, reference) == expected


def test_reference_of_only_empty_alternatives_is_a_row_error_naming_the_row():
    text = "prompt,answer,reference\np1,b,a||b||\np2,b,a||the\np3,c,b||c\n"
    with pytest.warns(Warning, match="rejected"):
        ds = read_dataset(_upload(text, "data.csv"), matcher="contains")
    assert ds.frame["prompt"].tolist() == ["p1", "p3"] and ds.labels.tolist() == [1, 1]
    assert [(e.row, e.field) for e in ds.errors] == [(2, "reference")]
    assert str(ds.errors[0]).startswith("row 2: reference: every reference in 'a||the' is empty after normalisation")


@pytest.mark.parametrize("answer, reference, expected", [
    ("x\u00b2", "2", 0), ("\u00b2", "2", 0), ("10\u00b2", "10", 0), ("10\u00b2", "102", 0), ("\u00bd", "0.5", 0),
    ("\u00bd", "2", 0), ("H\u2082O", "2", 0), ("\u2460", "1", 0), ("\u2488", "1", 0), ("2\u00b2 = 4", "4", 1),
    ("\uff11\uff12", "12", 1), ("\u0663", "3", 1), ("\u22123", "-3", 1), ("x\u00b2 is 7", "7", 1),
])
def test_numeric_reads_decimal_digits_only(answer, reference, expected):
    assert label(answer, reference, "numeric") == expected


@pytest.mark.parametrize("reference", ["\u00b2", "\u00bd", "\u2460"])
def test_numeric_reference_of_a_digit_like_is_not_a_number(reference):
    with pytest.raises(ValueError, match="is not a number"):
        label("2", reference, "numeric")


# --------------------------------------------------------------------------------------------------
# Item 15: a label is exactly 0 or 1 as written; U+2212 is a minus sign
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0.99999999999999999", "1.0000000000000001", "1e-30", "0.00000000000000001",
                                   "-1e-400", "\u22121", "1e-400"])
def test_label_only_approximately_0_or_1_is_refused(value):
    with pytest.raises(ValueError, match=f"^{re.escape(repr(value))} {LABEL_WORDS}$"):
        parse_label(value)


@pytest.mark.parametrize("value, expected", [
    ("\u22120", 0), ("\u22120.0", 0), ("-0", 0), (" \u22120 ", 0), ("1.0", 1), ("1.000", 1), ("1e0", 1), ("0e5", 0),
    ("+1", 1), (".0", 0), ("1", 1), ("0", 0),
])
def test_label_exactly_0_or_1_is_accepted(value, expected):
    assert parse_label(value) == expected


LABEL_CELLS = ["1", "0.99999999999999999", "\u22120", "1.0000000000000001", "1e-30", "-0", "0", "1.0"]
KEPT = [(1, 1), (3, 0), (6, 0), (7, 0), (8, 1)]  # (row, label)
REFUSED = [2, 4, 5]


def _upload(data, name):
    buffer = io.BytesIO(data.encode("utf-8") if isinstance(data, str) else data)
    buffer.name = name
    return buffer


def _frame():
    return pd.DataFrame({"prompt": [f"p{i}" for i in range(len(LABEL_CELLS))],
                         "answer": ["a"] * len(LABEL_CELLS), "label": LABEL_CELLS})


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_every_format_keeps_exact_labels_only(fmt):
    frame = _frame()
    if fmt == "csv":
        data = frame.to_csv(index=False)
    elif fmt == "jsonl":
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in frame.to_dict("records"))
    else:
        pytest.importorskip("pyarrow")
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        data = buffer.getvalue()
    with pytest.warns(Warning, match="rejected"):
        ds = read_dataset(_upload(data, f"data.{fmt}"))
    assert list(zip(ds.frame["row"].tolist(), ds.labels.tolist(), strict=True)) == KEPT
    assert [(e.row, e.field) for e in ds.errors] == [(r, "label") for r in REFUSED]
    for error, row in zip(ds.errors, REFUSED, strict=True):
        assert str(error) == f"row {row}: label: {LABEL_CELLS[row - 1]!r} {LABEL_WORDS}"


# --------------------------------------------------------------------------------------------------
# Item 13: evaluate --group-by skips a group of one class, naming it
# --------------------------------------------------------------------------------------------------

LONG_GROUP = "g" * 500


def _grouped_file(tmp_path, family_of):
    traces, y = synthetic_trace_objects(200, seed=5)
    family = np.array([family_of(i, label) for i, label in enumerate(y)], dtype=object)
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y,
                          "family": family})
    path = tmp_path / "grouped.jsonl"
    write_dataset(frame, path, traces=traces)
    return path, y, family


def test_group_of_one_class_is_skipped_with_one_warning_naming_it(tmp_path, capsys):
    ones = []

    def family_of(i, label):  # the first 30 correct answers form one group: all labeled 1
        if label == 1 and len(ones) < 30:
            ones.append(i)
            return LONG_GROUP
        return "mixed"

    path, _, _ = _grouped_file(tmp_path, family_of)
    assert main(["evaluate", str(path), "--splits", "2", "--methods", "TRACE", "--group-by", "family",
                 "--quiet"]) == 0
    captured = capsys.readouterr()
    skipped = [line for line in captured.err.splitlines() if "skipped the group" in line]
    assert len(skipped) == 1
    line = skipped[0]
    assert line.startswith("warning: --group-by 'family': skipped the group 'ggg")
    assert "(500 characters in all)" in line and "all 30 usable answers are labeled correct (1)" in line
    assert len(line) < 450 and LONG_GROUP not in captured.err and LONG_GROUP not in captured.out
    assert "### family = mixed (170 answers" in captured.out


def test_no_group_left_is_a_one_line_error(tmp_path, capsys):
    path, _, _ = _grouped_file(tmp_path, lambda i, label: f"only {label}")
    assert main(["evaluate", str(path), "--splits", "2", "--methods", "TRACE", "--group-by", "family",
                 "--quiet"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert sum("skipped the group" in line for line in err) == 2
    errors = [line for line in err if line.startswith("error:")]
    assert len(errors) == 1 and "--group-by 'family': none of the 2 groups can be evaluated" in errors[0]


def test_group_with_too_few_of_one_class_for_any_split_is_skipped(tmp_path, capsys):
    """One right answer among many wrong (a real model's hardest family): no split can hold it on both sides; that
    group is skipped with a line, the others are evaluated."""
    seen = []

    def family_of(i, label):
        if label == 1 and not seen:  # the first right answer joins a group of wrong ones
            seen.append(i)
            return "hard"
        return "hard" if label == 0 and i % 3 == 0 else "mixed"

    path, _, _ = _grouped_file(tmp_path, family_of)
    assert main(["evaluate", str(path), "--splits", "2", "--methods", "TRACE", "--group-by", "family",
                 "--quiet"]) == 0
    captured = capsys.readouterr()
    skipped = [line for line in captured.err.splitlines() if "skipped the group" in line]
    assert len(skipped) == 1 and "'hard'" in skipped[0] and "every split left one class only" in skipped[0]
    assert "### family = mixed" in captured.out and "### family = hard" not in captured.out


@pytest.mark.parametrize("answer, reference, matcher", [
    ("istanbul", "İstanbul", "exact"), ("İSTANBUL", "istanbul", "exact"), ("I went to İzmir", "izmir", "contains"),
])
def test_the_turkish_dotted_capital_i_is_an_i(answer, reference, matcher):
    assert label(answer, reference, matcher) == 1
    assert normalize_answer("İstanbul") == "istanbul"


@pytest.mark.parametrize("answer, reference, expected", [
    ("2024-05-01", "1", 0), ("On 2024-05-01.", "2024", 0), ("It is 3:45", "45", 0), ("It is 3:45", "3", 0),
    ("12:30:00", "0", 0), ("3/4", "4", 0), ("05/01/2024", "2024", 0), ("a ratio of 1:2", "2", 0),
    ("pages 2-3", "3", 1), ("3:45, so 7", "7", 1), ("-5", "-5", 1), ("about 5.75", "5.75", 1),
])
def test_times_ratios_and_dates_are_not_numbers(answer, reference, expected):
    """The numeric matcher reads the last number; the parts of a time, ratio or date are not numbers of their own."""
    assert label(answer, reference, "numeric") == expected
