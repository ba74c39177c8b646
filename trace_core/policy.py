"""Rules that the command line and the dashboard share: which rows are usable, and what fits a model's context.

Both front ends call these and show the messages they return, so a rule (and its wording) lives once. Rows are named
by the file's own row numbers (``LabeledDataset.row_column``), never by positions in a filtered list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trace_core.checks import check_int
from trace_core.record import context_length, encode_prompt
from trace_core.traces.table import TraceTable

__all__ = ["METRICS_UNDEFINED", "NO_CALIBRATOR", "ContextFit", "Usable", "fit_new_tokens", "one_class_message",
           "rows_over_context", "rows_text", "usable_rows"]

_SHOWN_ROWS = 10


def rows_text(rows: Sequence[Any], *, limit: int = _SHOWN_ROWS) -> str:
    """``"row 7"`` or ``"rows 2, 5, 9 …"``: file row numbers for a message, at most ``limit`` shown.

    >>> rows_text([3])
    'row 3'
    >>> rows_text([1, 2, 3], limit=2)
    'rows 1, 2 …'
    """
    rows = list(rows)
    shown = ", ".join(str(r) for r in rows[:limit]) + (" …" if len(rows) > limit else "")
    return f"row{'s' if len(rows) != 1 else ''} {shown}"


def _count(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n:,} {singular if n == 1 else (plural or singular + 's')}"


# What one class only makes impossible, as the CLI and the dashboard both say it.
METRICS_UNDEFINED = ("the metrics are undefined (AUROC and AUPRC need both classes; Brier and ECE need a calibrator "
                     "fitted on both)")
NO_CALIBRATOR = "no calibrator can be fitted"


def one_class_message(labels: np.ndarray, consequence: str) -> str | None:
    """Why a set of labels cannot be calibrated or scored (one class only), or None when both classes are there."""
    labels = np.asarray(labels)
    if labels.size == 0 or np.unique(labels).shape[0] >= 2:
        return None
    which = "correct (1)" if labels[0] == 1 else "wrong (0)"
    who = "the only usable answer is" if labels.size == 1 else f"all {labels.size:,} usable answers are"
    return f"{who} labeled {which}, so {consequence}; this needs both correct and wrong answers"


@dataclass(frozen=True)
class Usable:
    """Which rows of a table can be used, and why the others cannot.

    Positions index the table's rows (0-based); ``row_numbers`` maps a position to the file's row number.

    Attributes
    ----------
    keep : ndarray of int
        Positions that have a non-empty trace and fit the model (in order).
    missing : list of int
        Positions with no trace (they need recording).
    empty : list of int
        Positions whose answer has no tokens (no method can score them).
    untokenized : list of int
        The positions of ``empty`` whose answer text is not empty: their token list is missing, not the answer.
    too_long : list of int
        Positions whose prompt and answer do not fit the model's context (they cannot be recorded).
    row_numbers : list
        The file's row number of every position.
    context_limit : int or None
        The model's context length when ``too_long`` was checked.
    """

    keep: np.ndarray
    missing: list[int] = field(default_factory=list)
    empty: list[int] = field(default_factory=list)
    too_long: list[int] = field(default_factory=list)
    row_numbers: list[Any] = field(default_factory=list)
    context_limit: int | None = None
    untokenized: list[int] = field(default_factory=list)

    def rows(self, positions: Sequence[int]) -> list[Any]:
        """File row numbers of ``positions``."""
        return [self.row_numbers[i] for i in positions]

    def missing_message(self) -> str | None:
        """``"3 rows have no trace (rows 2, 5, 9)"`` or None."""
        if not self.missing:
            return None
        have = "row has" if len(self.missing) == 1 else "rows have"
        return f"{len(self.missing):,} {have} no trace ({rows_text(self.rows(self.missing))})"

    def empty_message(self, *, left_out: bool = True) -> str | None:
        """``"2 empty answers (no tokens) left out: rows 4, 7"``, or None when no answer is empty.

        ``left_out=False`` says ``cannot be scored`` instead, for callers that must score every row (flagging). An
        answer with text but an empty token list is not called empty: the message says its tokens are missing.
        """
        if not self.empty:
            return None
        verdict = "left out" if left_out else "cannot be scored"
        n = len(self.empty)
        if not self.untokenized:
            return f"{_count(n, 'empty answer')} (no tokens) {verdict}: {rows_text(self.rows(self.empty))}"
        them = "it has" if len(self.untokenized) == 1 else "they have"
        return (f"{_count(n, 'answer')} with no tokens {verdict}: {rows_text(self.rows(self.empty))}; "
                f"{rows_text(self.rows(self.untokenized))}: the answer text is not empty but {them} an empty token "
                "list (an incomplete trace: record it again)")

    def too_long_message(self) -> str | None:
        """Answers that do not fit the model's context, left out, or None."""
        if not self.too_long:
            return None
        n = len(self.too_long)
        return (f"{_count(n, 'answer')} {'does' if n == 1 else 'do'} not fit the model's context "
                f"({self.context_limit:,} tokens, prompt and answer together) and {'is' if n == 1 else 'are'} left "
                f"out: {rows_text(self.rows(self.too_long))}")

    def notes(self) -> list[str]:
        """Warnings about rows left out (empty, too long), in that order."""
        return [m for m in (self.empty_message(), self.too_long_message()) if m]

    def nothing_left_message(self) -> str | None:
        """Why no row at all is usable (every answer empty or too long), or None. Missing traces are reported
        separately."""
        if len(self.keep) or self.missing or not (self.empty or self.too_long):
            return None
        if not self.too_long:
            if self.untokenized:
                return "no answer has tokens (empty answers or empty token lists), so there is nothing to score"
            return "every answer is empty (no tokens), so there is nothing to score"
        return "no answer is left to score: every one is empty or does not fit the model's context"


def usable_rows(traces: Sequence[Any], *, row_numbers: Sequence[Any] | None = None,
                too_long: Sequence[int] = (), context_limit: int | None = None) -> Usable:
    """Sort the rows of a table into usable, missing a trace, empty and too long for the model.

    Parameters
    ----------
    traces : sequence of Trace or None, length n_rows
        None where a row has no trace yet.
    row_numbers : sequence, optional
        The file's row number of every row (default: 1, 2, ...).
    too_long : sequence of int
        Positions that do not fit the model's context (from :func:`rows_over_context`); they count as neither usable
        nor missing.
    context_limit : int, optional
        The context length used for ``too_long`` (for the message).

    Examples
    --------
    >>> u = usable_rows([None, [], [1, 2]], row_numbers=[10, 11, 12])
    >>> u.keep.tolist(), u.missing_message()
    ([2], '1 row has no trace (row 10)')
    """
    if not isinstance(traces, TraceTable):  # a table's rows are read from its columns (no Trace made per row)
        traces = list(traces)
    numbers = list(row_numbers) if row_numbers is not None else list(range(1, len(traces) + 1))
    if len(numbers) != len(traces):
        raise ValueError(f"got {len(numbers)} row numbers for {len(traces)} rows")
    long_set = set(int(i) for i in too_long)
    if isinstance(traces, TraceTable):
        lengths: list[int | None] = np.diff(traces.offsets).tolist()
        answers: list[Any] = list(traces.answers)
    else:
        lengths = [None if t is None else len(t) for t in traces]
        answers = [getattr(t, "answer", None) for t in traces]
    missing = [i for i, n in enumerate(lengths) if n is None and i not in long_set]
    empty = [i for i, n in enumerate(lengths) if n == 0]
    keep = np.array([i for i, n in enumerate(lengths) if n and i not in long_set], dtype=np.int64)
    untokenized = [i for i in empty if isinstance(answers[i], str) and answers[i].strip()]
    return Usable(keep=keep, missing=missing, empty=empty, too_long=sorted(long_set), row_numbers=numbers,
                  context_limit=context_limit, untokenized=untokenized)


def rows_over_context(lm: Any, prompts: Sequence[str], answers: Sequence[str], *,
                      chat_template: bool = False) -> list[int]:
    """Positions of the (prompt, answer) pairs too long for the model to score.

    Tokenized as :func:`trace_core.record.score_answers` does (the prompt as the model sees it, the answer without
    special tokens). Empty when the model does not state its context length.
    """
    limit = context_length(lm)
    if limit is None or not len(prompts):
        return []
    if chat_template:
        prompt_lengths = [len(encode_prompt(lm.tokenizer, p, chat_template=True)) for p in prompts]
    else:
        prompt_lengths = [len(ids) for ids in lm.tokenizer(list(prompts), add_special_tokens=True)["input_ids"]]
    answer_ids = lm.tokenizer(list(answers), add_special_tokens=False)["input_ids"]
    return [i for i, (p, a) in enumerate(zip(prompt_lengths, answer_ids, strict=True)) if p + len(a) > limit]


@dataclass(frozen=True)
class ContextFit:
    """How a generation request fits the model's context.

    Attributes
    ----------
    max_new_tokens : int
        What can be generated (the request, or less when the context ends first).
    prompt_tokens : int
    limit : int or None
        The model's context length (None when it does not say).
    note : str or None
        Says that the answer was shortened to fit, when it was.
    """

    max_new_tokens: int
    prompt_tokens: int
    limit: int | None
    note: str | None = None


def fit_new_tokens(lm: Any, prompt: str, *, max_new_tokens: int, chat_template: bool = False) -> ContextFit:
    """How many new tokens fit after ``prompt``; ValueError when the prompt alone fills the context.

    Past its last position a model fails inside its forward pass, so the answer is stopped there instead.
    """
    max_new_tokens = check_int(max_new_tokens, "max_new_tokens", minimum=1)
    limit = context_length(lm)
    if getattr(lm, "api", None) == "chat":  # the server applies its template: count it as the server will see it
        chat_template = bool(getattr(lm.tokenizer, "chat_template", None))
    n_prompt = len(encode_prompt(lm.tokenizer, prompt, chat_template=chat_template))
    if limit is None or n_prompt + max_new_tokens <= limit:
        return ContextFit(max_new_tokens, n_prompt, limit)
    if n_prompt >= limit:
        # No full stop at the end, as every library message: the page that shows it ends the sentence.
        raise ValueError(f"The prompt is {n_prompt:,} tokens; this model reads at most {limit:,} tokens, prompt and "
                         "answer together. Shorten the prompt")
    allowed = limit - n_prompt
    return ContextFit(allowed, n_prompt, limit, f"The answer is limited to {allowed:,} new tokens: this model reads "
                                                 f"at most {limit:,} tokens, prompt and answer together.")
