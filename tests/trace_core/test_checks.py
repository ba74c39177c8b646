"""trace_core.checks: the one set of input checks (wrong type -> TypeError, out of range -> ValueError)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trace_core.checks import (
    MAX_ECHO,
    as_1d,
    check_bool,
    check_choice,
    check_int,
    check_labels,
    check_real,
    check_scores,
    shorten,
)

# -- check_int ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [5, np.int8(5), np.int64(5), np.uint16(5)])
def test_check_int_accepts_python_and_numpy_integers_as_python_int(value):
    out = check_int(value, "n", minimum=1)
    assert out == 5 and type(out) is int


@pytest.mark.parametrize("value", [True, False, np.bool_(True), 2.0, 2.5, np.float64(3.0), "3", None, [3]])
def test_check_int_refuses_bools_floats_and_others_with_type_error(value):
    with pytest.raises(TypeError, match=r"`n` must be an int >= 1, got "):
        check_int(value, "n", minimum=1)


@pytest.mark.parametrize("value, kwargs, match", [
    (0, {"minimum": 1}, r"`n` must be an int >= 1, got 0"),
    (11, {"maximum": 10}, r"`n` must be an int <= 10, got 11"),
    (-1, {"minimum": 0, "maximum": 3}, r"`n` must be an int in \[0, 3\], got -1"),
    (np.int64(4), {"minimum": 0, "maximum": 3}, r"`n` must be an int in \[0, 3\], got 4"),
])
def test_check_int_out_of_range_is_a_value_error(value, kwargs, match):
    with pytest.raises(ValueError, match=match):
        check_int(value, "n", **kwargs)


def test_check_int_bounds_are_inclusive():
    assert check_int(1, "n", minimum=1, maximum=1) == 1


# -- check_real --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0.25, 1, np.float32(0.25), np.float64(0.25), np.int64(1), np.float16(0.25)])
def test_check_real_accepts_python_and_numpy_numbers_as_python_float(value):
    out = check_real(value, "x")
    assert out == float(value) and type(out) is float


@pytest.mark.parametrize("value", [True, np.bool_(False), "0.5", None, 1 + 2j, [0.5]])
def test_check_real_refuses_bools_strings_and_others_with_type_error(value):
    with pytest.raises(TypeError, match=r"`x` must be a finite real number, got "):
        check_real(value, "x")


@pytest.mark.parametrize("value", [math.nan, np.nan, math.inf, -np.inf])
def test_check_real_refuses_nan_and_infinity_with_value_error(value):
    with pytest.raises(ValueError, match=r"`x` must be a finite real number, got "):
        check_real(value, "x")


def test_check_real_finite_false_admits_infinity_but_never_nan():
    assert check_real(math.inf, "x", finite=False) == math.inf
    with pytest.raises(ValueError, match=r"`x` must be a real number, got nan"):
        check_real(math.nan, "x", finite=False)


@pytest.mark.parametrize("value, kwargs, match", [
    (0.0, {"minimum": 0, "maximum": 1, "low_open": True}, r"`x` must be a finite real number in \(0, 1\], got 0.0"),
    (1.0, {"minimum": 0, "maximum": 1, "high_open": True}, r"`x` must be a finite real number in \[0, 1\), got 1.0"),
    (-0.1, {"minimum": 0}, r"`x` must be a finite real number >= 0, got -0.1"),
    (0.0, {"minimum": 0, "low_open": True}, r"`x` must be a finite real number > 0, got 0.0"),
    (2.5, {"maximum": 2}, r"`x` must be a finite real number <= 2, got 2.5"),
    (0.5, {"minimum": 0.75}, r"`x` must be a finite real number >= 0.75, got 0.5"),
])
def test_check_real_out_of_range_is_a_value_error_with_the_interval(value, kwargs, match):
    with pytest.raises(ValueError, match=match):
        check_real(value, "x", **kwargs)


def test_check_real_closed_bounds_include_the_ends():
    assert check_real(0, "x", minimum=0, maximum=1) == 0.0
    assert check_real(1, "x", minimum=0, maximum=1) == 1.0


# -- check_choice and check_bool ---------------------------------------------------------------------------------------


def test_check_choice_returns_the_value_or_lists_the_choices():
    assert check_choice("b", "mode", ("a", "b")) == "b"
    assert check_choice(np.str_("a"), "mode", ("a", "b")) == "a"
    with pytest.raises(ValueError, match=r"`mode` must be one of 'a', 'b'; got 'c'"):
        check_choice("c", "mode", ("a", "b"))


@pytest.mark.parametrize("value", [["a"], {"a": 1}, None, 1])
def test_check_choice_refuses_unhashable_and_other_types_without_crashing(value):
    with pytest.raises(ValueError, match=r"`mode` must be one of 'a', 'b'; got "):
        check_choice(value, "mode", ("a", "b"))


def test_check_choice_does_not_confuse_equal_values_of_other_types():
    with pytest.raises(ValueError):
        check_choice(True, "k", (1, 2))  # True == 1 in Python, but it is not the choice 1
    assert check_choice(2, "k", (1, 2)) == 2


def test_check_bool_accepts_python_and_numpy_bools_only():
    assert check_bool(True, "flag") is True and check_bool(np.bool_(False), "flag") is False
    for value in (1, 0, "yes", None, 1.0):
        with pytest.raises(TypeError, match=r"`flag` must be True or False, got "):
            check_bool(value, "flag")


# -- shortening of echoed input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("check", [
    lambda v: check_int(v, "n"),
    lambda v: check_real(v, "x"),
    lambda v: check_choice(v, "mode", ("a", "b")),
    lambda v: check_bool(v, "flag"),
])
def test_long_input_is_shortened_in_messages(check):
    with pytest.raises((TypeError, ValueError)) as info:
        check("x" * 100_000)
    message = str(info.value)
    assert len(message) < MAX_ECHO + 150 and "characters in all" in message


def test_shorten_keeps_short_values_and_cuts_long_ones_to_about_the_limit():
    assert shorten("abc") == "'abc'"
    assert shorten(12) == "12"
    long = shorten("y" * 10_000)
    assert long.startswith("'yyy") and "10,000 characters in all" in long and len(long) < MAX_ECHO + 40
    assert len(shorten(list(range(1000)))) < MAX_ECHO + 40


# -- labels and scores -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("labels", [[1, 0, 1], [True, False, True], np.array([1.0, 0.0, 1.0]),
                                    np.array([1, 0, 1], dtype=np.uint8), np.array([1, 0, True], dtype=object)])
def test_check_labels_accepts_bools_and_zero_one_numbers(labels):
    out = check_labels(labels)
    assert out.dtype == np.int64 and out.tolist() == [1, 0, 1]


@pytest.mark.parametrize("labels, match", [
    ([1, 2, 0], r"`y_true` must contain only 0/1 labels .*index 1 is 2"),
    ([1, np.nan], r"index 1 is nan"),
    (["1", "0"], r"index 0 is '1'"),
    ([], r"`y_true` is empty"),
    ([[1, 0]], r"`y_true` must be 1-D"),
])
def test_check_labels_names_the_first_bad_entry(labels, match):
    with pytest.raises(ValueError, match=match):
        check_labels(labels)


def test_check_labels_checks_the_length_and_both_classes_when_asked():
    with pytest.raises(ValueError, match=r"`y` has 3 labels but there are 4 answers"):
        check_labels([0, 1, 0], "y", n=4)
    with pytest.raises(ValueError, match=r"fitting needs both correct \(1\) and incorrect \(0\) answers; all 3 labels "
                                         r"are 1"):
        check_labels([1, 1, 1], "y", purpose="fitting")
    assert check_labels([1, 1, 1], "y", n=3).tolist() == [1, 1, 1]  # one class is fine unless a purpose needs both


def test_check_labels_shortens_a_huge_bad_label():
    with pytest.raises(ValueError) as info:
        check_labels(np.array(["z" * 10_000, "1"], dtype=object))
    assert len(str(info.value)) < MAX_ECHO + 150


def test_check_scores_and_as_1d():
    assert check_scores([1, 2], "s", probability=False).dtype == np.float64
    with pytest.raises(ValueError, match=r"`p` must be probabilities in \[0, 1\]; index 1 is 1.5"):
        check_scores([0.5, 1.5], "p", probability=True)
    with pytest.raises(TypeError, match=r"`s` must be numeric"):
        check_scores(["a"], "s", probability=False)
    with pytest.raises(ValueError, match=r"`s` is empty"):
        as_1d([], "s")
