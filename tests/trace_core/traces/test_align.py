"""Token alignment of two answers: every token once and in order, sensible columns, divergence found by text."""

from __future__ import annotations

import doctest
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trace_core.traces import align
from trace_core.traces.align import Alignment, align_tokens, divergence_summary

token = st.one_of(st.text(alphabet="ab 7<\u202e\n", max_size=3), st.sampled_from(["", "xy", " 76", "é"]))
tokens = st.lists(token, max_size=25)


def split(text: str, cuts: list[int]) -> list[str]:
    """``text`` cut at the given offsets (an independent way of tokenizing it)."""
    points = sorted({min(max(c, 0), len(text)) for c in cuts} | {0, len(text)})
    return [text[s:e] for s, e in zip(points, points[1:], strict=False)]


def first_differing_char(x: str, y: str) -> int | None:
    if x == y:
        return None
    return len(os.path.commonprefix([x, y]))


def holder(tokens: list[str], char: int) -> int | None:
    """Index of the token that holds character ``char`` (a plain loop)."""
    position = 0
    for k, t in enumerate(tokens):
        if position <= char < position + len(t):
            return k
        position += len(t)
    return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tokens, tokens)
def test_every_token_appears_exactly_once_in_order(a, b):
    al = align_tokens(a, b)
    assert [i for i, _ in al.columns if i is not None] == list(range(len(a)))
    assert [j for _, j in al.columns if j is not None] == list(range(len(b)))
    assert all(i is not None or j is not None for i, j in al.columns)
    assert len(al) <= len(a) + len(b)
    # concatenating each row of the grid gives back each answer
    assert "".join(x for x, _ in map(al.tokens_at, range(len(al))) if x is not None) == "".join(a)
    assert "".join(y for _, y in map(al.tokens_at, range(len(al))) if y is not None) == "".join(b)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tokens, tokens)
def test_first_divergence_holds_the_first_differing_character(a, b):
    al = align_tokens(a, b)
    char = first_differing_char("".join(a), "".join(b))
    if char is None:
        assert al.first_divergence is None
        return
    i, j = holder(a, char), holder(b, char)
    expected = min(int(cols[k]) for cols, k in ((al.columns_of("a"), i), (al.columns_of("b"), j)) if k is not None)
    assert al.first_divergence == expected
    assert al.common_chars == char


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet="ab 7.\n", max_size=30), st.lists(st.integers(0, 30), max_size=8),
       st.lists(st.integers(0, 30), max_size=8))
def test_one_text_tokenized_two_ways_never_diverges(text, cuts_a, cuts_b):
    a, b = split(text, cuts_a), split(text, cuts_b)
    al = align_tokens(a, b)
    assert al.first_divergence is None and al.same_text
    # columns fall where both tokenizations cut the text: a shared column's tokens start at the same character
    starts_a = [len("".join(a[:i])) for i in range(len(a))]
    starts_b = [len("".join(b[:j])) for j in range(len(b))]
    assert {(starts_a[i], starts_b[j]) for i, j in al.columns if i is not None and j is not None} == {
        (s, s) for s in set(starts_a) & set(starts_b)}


@given(tokens)
def test_identical_answers_pair_every_token_with_itself(a):
    al = align_tokens(a, a)
    assert al.columns == tuple((k, k) for k in range(len(a))) and al.first_divergence is None


def test_one_changed_number_diverges_at_that_token():
    a = ["The", " answer", " is", " 76", "."]
    b = ["The", " answer", " is", " 75", "."]
    al = align_tokens(a, b)
    assert al.columns == ((0, 0), (1, 1), (2, 2), (3, 3), (4, 4))
    assert al.first_divergence == 3 and al.tokens_at(3) == (" 76", " 75")
    assert [al.agrees(k) for k in range(5)] == [True, True, True, False, True]
    assert divergence_summary(al) == "The answers agree for 3 tokens, then diverge at token 4: ' 76' vs ' 75'."


def test_brief_example_sentence():
    al = align_tokens(["The", " answer", " is", " 7", "6", "."], ["The", " answer", " is", " 7", "5", "."])
    assert divergence_summary(al) == "The answers agree for 4 tokens, then diverge at token 5: '6' vs '5'."


def test_inserted_and_deleted_tokens_get_gaps():
    al = align_tokens(["It", " is", " 9", "."], ["It", " is", " about", " 9", "."])
    assert al.columns == ((0, 0), (1, 1), (None, 2), (2, 3), (3, 4))
    assert al.first_divergence == 2 and al.tokens_at(2) == (None, " about")
    assert "' 9' vs ' about'" not in divergence_summary(al) and "nothing vs ' about'" in divergence_summary(al)


def test_different_tokenizers_share_columns_at_common_boundaries():
    al = align_tokens(["The", " answer", " is", " 7", "6", "."], ["Th", "e", " ans", "wer", " is", " 75", "."])
    assert al.columns == ((0, 0), (None, 1), (1, 2), (None, 3), (2, 4), (3, 5), (4, None), (5, 6))
    assert al.first_divergence == 5 and al.tokens_at(5) == (" 7", " 75")
    assert divergence_summary(al, labels=("greedy", "sampled")) == (
        "The answers agree for their first 15 characters (greedy: 3 tokens, sampled: 5 tokens), then diverge at "
        "column 6: ' 7' vs ' 75'.")


def test_one_answer_continuing_the_other():
    al = align_tokens(["1", "2"], ["1", "2", "3"])
    assert al.columns == ((0, 0), (1, 1), (None, 2)) and al.first_divergence == 2
    assert divergence_summary(al) == "The answers agree for 2 tokens, then diverge at token 3: nothing vs '3'."
    assert align_tokens([], ["x"]).first_divergence == 0
    assert align_tokens([], []).columns == () and divergence_summary(align_tokens([], [])) == (
        "The answers are identical (0 tokens).")


def test_same_text_other_tokens_is_not_a_divergence():
    al = align_tokens([" 7", "6"], [" 76"])
    assert al.columns == ((0, 0), (1, None)) and al.same_text
    assert divergence_summary(al) == "The answers are the same text, tokenized differently (A: 2 tokens, B: 1 tokens)."


def test_empty_byte_pieces_do_not_push_tokens_apart():
    # a byte-level tokenizer gives "" for a piece that the next token completes
    al = align_tokens(["a", "", "é", "b"], ["a", "é", "c"])
    assert al.columns == ((0, 0), (1, None), (2, 1), (3, 2)) and al.first_divergence == 3


def test_summary_quotes_hostile_tokens_with_escapes():
    al = align_tokens(["x", "a\u202eb"], ["x", "<img src=x onerror=alert(1)>" + "y" * 500])
    text = divergence_summary(al)
    assert "\u202e" not in text and "\\u202e" in text
    assert len(text) < 200 and "characters in all" in text


def test_bad_inputs_are_refused():
    with pytest.raises(TypeError, match="sequence of token strings"):
        align_tokens("abc", ["a"])
    with pytest.raises(TypeError, match=r"`b\[1\]` must be a str"):
        align_tokens(["a"], ["a", 3])
    with pytest.raises(ValueError, match="every token of `a` once"):
        Alignment(("x", "y"), ("x",), ((0, 0), (0, None)), None, 1)
    with pytest.raises(ValueError, match="at least one token"):
        Alignment(("x",), ("x",), ((0, 0), (None, None)), None, 1)
    with pytest.raises(ValueError, match="first_divergence"):
        Alignment(("x",), ("x",), ((0, 0),), 1, 1)
    with pytest.raises(ValueError, match="labels"):
        divergence_summary(align_tokens(["a"], ["b"]), labels=("A",))
    with pytest.raises(ValueError, match="side"):
        align_tokens(["a"], ["b"]).columns_of("c")


def test_docstring_examples():
    assert doctest.testmod(align, raise_on_error=False).failed == 0


def test_one_text_with_equal_tokens_at_different_places_is_laid_out_by_offsets():
    # token matching alone would put the two "a" tokens (offsets 0 and 2) in one column
    assert align_tokens(["a", "ba"], ["ab", "a"]).columns == ((0, 0), (1, None), (None, 1))
