"""trace_core.policy: the usable-row and context-fit rules the CLI and the dashboard share, and their messages."""

from __future__ import annotations

import numpy as np
import pytest

from trace_core.policy import ContextFit, fit_new_tokens, one_class_message, rows_over_context, rows_text, usable_rows


class _T(list):
    """Stands in for a Trace: the policy only asks for len()."""


def test_rows_text_names_one_or_many_rows_and_cuts_long_lists():
    assert rows_text([7]) == "row 7"
    assert rows_text([2, 5, 9]) == "rows 2, 5, 9"
    assert rows_text(list(range(1, 13))) == "rows 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 …"
    assert rows_text([1, 2, 3], limit=2) == "rows 1, 2 …"


def test_usable_rows_sorts_rows_into_kept_missing_and_empty():
    traces = [_T([1]), None, _T([]), _T([1, 2]), None, _T([])]
    usable = usable_rows(traces, row_numbers=[3, 4, 6, 7, 9, 12])
    assert usable.keep.tolist() == [0, 3] and usable.keep.dtype == np.int64
    assert usable.missing == [1, 4] and usable.empty == [2, 5] and usable.too_long == []
    assert usable.rows(usable.missing) == [4, 9]
    assert usable.missing_message() == "2 rows have no trace (rows 4, 9)"
    assert usable.empty_message() == "2 empty answers (no tokens) left out: rows 6, 12"
    assert usable.empty_message(left_out=False) == "2 empty answers (no tokens) cannot be scored: rows 6, 12"
    assert usable.notes() == ["2 empty answers (no tokens) left out: rows 6, 12"]
    assert usable.nothing_left_message() is None


def test_usable_rows_default_row_numbers_count_from_one():
    usable = usable_rows([None, _T([1])])
    assert usable.missing_message() == "1 row has no trace (row 1)"
    assert usable.empty_message() is None and usable.notes() == []


def test_usable_rows_with_rows_too_long_for_the_model():
    traces = [_T([1]), None, _T([1]), None]
    usable = usable_rows(traces, row_numbers=[10, 11, 12, 13], too_long=[1, 2], context_limit=1024)
    assert usable.keep.tolist() == [0]  # a too-long row is neither usable nor missing
    assert usable.missing == [3] and usable.too_long == [1, 2]
    assert usable.too_long_message() == ("2 answers do not fit the model's context (1,024 tokens, prompt and answer "
                                         "together) and are left out: rows 11, 12")
    single = usable_rows([None], too_long=[0], context_limit=24)
    assert single.too_long_message() == ("1 answer does not fit the model's context (24 tokens, prompt and answer "
                                         "together) and is left out: row 1")
    assert usable.notes() == [usable.too_long_message()]


def test_nothing_left_when_every_answer_is_empty():
    usable = usable_rows([_T([]), _T([])])
    assert usable.nothing_left_message() == "every answer is empty (no tokens), so there is nothing to score"
    # missing traces are reported on their own, not as "nothing left"
    assert usable_rows([_T([]), None]).nothing_left_message() is None


def test_usable_rows_needs_one_row_number_per_row():
    with pytest.raises(ValueError, match="got 1 row numbers for 2 rows"):
        usable_rows([None, None], row_numbers=[1])


def test_one_class_message():
    assert one_class_message(np.array([0, 1, 1]), "x") is None
    assert one_class_message(np.array([], dtype=int), "x") is None
    assert one_class_message(np.array([1, 1, 1]), "no calibrator can be fitted") == (
        "all 3 usable answers are labeled correct (1), so no calibrator can be fitted; this needs both correct and "
        "wrong answers")
    assert one_class_message(np.array([0]), "the metrics are undefined") == (
        "the only usable answer is labeled wrong (0), so the metrics are undefined; this needs both correct and "
        "wrong answers")


# -- context fit on a tiny GPT-2 that reads 24 tokens ------------------------------------------------------------------


def _prompt_of(lm, n_tokens: int) -> str:
    """A prompt that the tokenizer encodes to exactly ``n_tokens`` tokens."""
    from trace_core.record import encode_prompt

    text = ""
    while len(encode_prompt(lm.tokenizer, text + " 1")) <= n_tokens:
        text += " 1"
    assert len(encode_prompt(lm.tokenizer, text)) == n_tokens
    return text


def test_fit_new_tokens_keeps_a_request_that_fits(short_context_lm):
    prompt = _prompt_of(short_context_lm, 10)
    fit = fit_new_tokens(short_context_lm, prompt, max_new_tokens=14)
    assert fit == ContextFit(max_new_tokens=14, prompt_tokens=10, limit=24, note=None)


def test_fit_new_tokens_shortens_a_long_request_with_a_note(short_context_lm):
    prompt = _prompt_of(short_context_lm, 10)
    fit = fit_new_tokens(short_context_lm, prompt, max_new_tokens=np.int64(100))
    assert (fit.max_new_tokens, fit.prompt_tokens, fit.limit) == (14, 10, 24)
    assert fit.note == ("The answer is limited to 14 new tokens: this model reads at most 24 tokens, prompt and "
                        "answer together.")


@pytest.mark.parametrize("n_tokens", [24, 30])
def test_fit_new_tokens_refuses_a_prompt_that_fills_the_context(short_context_lm, n_tokens):
    prompt = " 1" * 40 if n_tokens == 30 else _prompt_of(short_context_lm, 24)
    with pytest.raises(ValueError, match=r"this model reads at most 24 tokens, prompt and answer together. "
                                         r"Shorten the prompt"):
        fit_new_tokens(short_context_lm, prompt, max_new_tokens=1)


def test_the_prompt_too_long_message_leaves_its_full_stop_to_the_page(short_context_lm):
    """Pages end a library message with one full stop (the Inspect page's `sentence`, the batch list's "."): a message
    ending in its own would be shown "Shorten the prompt.."."""
    with pytest.raises(ValueError) as caught:
        fit_new_tokens(short_context_lm, " 1" * 40, max_new_tokens=1)
    assert str(caught.value).endswith("answer together. Shorten the prompt")


def test_fit_new_tokens_checks_its_number(short_context_lm):
    with pytest.raises(TypeError, match="`max_new_tokens` must be an int >= 1"):
        fit_new_tokens(short_context_lm, "hi", max_new_tokens=2.5)
    with pytest.raises(ValueError, match="`max_new_tokens` must be an int >= 1"):
        fit_new_tokens(short_context_lm, "hi", max_new_tokens=0)


def test_rows_over_context_finds_the_pairs_that_do_not_fit(short_context_lm):
    from trace_core.record import encode_prompt

    lm = short_context_lm
    prompt = _prompt_of(lm, 10)
    answer_ids = lambda a: lm.tokenizer(a, add_special_tokens=False)["input_ids"]  # noqa: E731
    fits, exact, over = " 2" * 5, " 2" * 14, " 2" * 15
    assert len(encode_prompt(lm.tokenizer, prompt)) + len(answer_ids(exact)) == 24
    assert rows_over_context(lm, [prompt, prompt, prompt], [fits, exact, over]) == [2]
    assert rows_over_context(lm, [], []) == []
    # the same rule through usable_rows: the long row is left out with the context length in the message
    usable = usable_rows([None] * 3, too_long=[2], context_limit=24)
    assert usable.missing == [0, 1] and "24 tokens" in usable.too_long_message()


def test_short_requests_fit_a_model_with_a_long_context(tiny_models):
    lm = tiny_models["gpt2"]  # reads 512 tokens: a short request passes unchanged
    assert fit_new_tokens(lm, "hello", max_new_tokens=5).note is None
    assert rows_over_context(lm, ["q"], ["a"]) == []
