"""Prompt files: the prompts a model is to answer (``trace-core generate``, the Calibrate page's batch generation),
and the labels of the answers it gives.

A ``.txt`` file holds one prompt per line, a line break inside a prompt written ``\\n`` (a tab ``\\t``, a backslash
``\\\\``). A CSV / JSON Lines / Parquet file needs a ``prompt`` column and nothing else: it is read as a raw table (the
reader's bounds on size and cells hold), not as a labeled dataset, whose checks of answers and labels would refuse a
prompts-only file and label answers that generation replaces. Rows without a prompt are skipped and reported; the
columns that describe the input's answers (the trace columns and :data:`OLD_ANSWER_COLUMNS`) are left out. A
``reference`` column labels the generated answers (:func:`label_answers`).
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, BinaryIO

import pandas as pd

from trace_core.checks import clip, shorten
from trace_core.data.errors import DatasetError, RowError
from trace_core.data.labels import exact_match_hint, label_from_reference
from trace_core.data.read import Progress, read_table
from trace_core.traces.cells import is_blank, is_missing, show
from trace_core.traces.columns import TRACE_COLUMNS

__all__ = ["OLD_ANSWER_COLUMNS", "PromptsFile", "answered_frame", "empty_answers_note", "label_answers",
           "has_chat_template", "prompt_problem", "read_prompts", "matcher_hint", "row_errors_text", "template_unused",
           "unescape_prompt", "unlabeled_message"]

#: Columns of a prompts file that describe its answers: generation replaces the answers, so these would describe
#: answers no longer in the file (the label would be theirs, the trace theirs). The label is made again from
#: ``reference``.
OLD_ANSWER_COLUMNS = ("label", "response", "answer_tokens", "beam_logprobs")

_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}


@dataclass
class PromptsFile:
    """The prompts read from a file.

    Attributes
    ----------
    frame : DataFrame
        The rows with a prompt (index 0..n-1), their columns less those describing the input's answers.
    references : list or None
        Each kept row's ``reference`` cell; None when the file has no such column.
    rows : list of int
        Each kept row's number in the file (from 1; a ``.txt`` file: its line).
    skipped : list of RowError
        The rows left out (no prompt, or rejected by the reader), in file order.
    n_read : int
        Data rows read.
    dropped : list of str
        The columns left out (they describe the input's answers).
    """

    frame: pd.DataFrame
    references: list[Any] | None
    rows: list[int]
    skipped: list[RowError] = field(default_factory=list)
    n_read: int = 0
    dropped: list[str] = field(default_factory=list)


def unescape_prompt(line: str) -> str:
    r"""A ``.txt`` prompt line with ``\n`` (a line break), ``\t`` (a tab) and ``\\`` (a backslash) written out;
    any other backslash stays as it is.

    >>> unescape_prompt(r"Q: 2 + 2?\nA:")
    'Q: 2 + 2?\nA:'
    >>> unescape_prompt(r"a path C:\\new \d")
    'a path C:\\new \\d'
    """
    return re.sub(r"\\([nt\\])", lambda m: _ESCAPES[m.group(1)], line)


def prompt_problem(value: object) -> str | None:
    """Why a prompt cell cannot be generated from (the dataset reader's words), or None when it holds text."""
    if is_missing(value):
        return "is missing; expected non-empty text"
    if not isinstance(value, str):
        return f"is {show(value)}; expected text"
    if not value.strip():
        return "is empty; expected non-empty text"
    return None


def _name(source: Any, name: str | None) -> str:
    if name is not None:
        return name
    if isinstance(source, (str, PurePath)):
        return str(source)
    return str(getattr(source, "name", ""))


def read_prompts(source: str | Path | bytes | BinaryIO, *, name: str | None = None, progress: Progress | None = None,
                 max_bytes: int | None = None, max_cell_chars: int | None = None) -> PromptsFile:
    """Read a prompts file (see the module docstring); ``name`` gives the file name of bytes or a buffer (its
    extension says the format: ``.txt`` or no extension is one prompt per line).

    Raises
    ------
    DatasetError
        No ``prompt`` column, no row with a prompt, or what the table reader refuses (size, format).
    """
    shown = _name(source, name)
    if PurePath(shown).suffix.lower() in (".txt", ""):
        raw = Path(source).read_bytes() if isinstance(source, (str, PurePath)) else (
            bytes(source) if isinstance(source, (bytes, bytearray, memoryview)) else source.read())
        if max_bytes is not None and len(raw) > max_bytes:
            raise DatasetError(f"the file is {len(raw):,} bytes; at most {max_bytes:,} are read")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise DatasetError(f"not UTF-8 text (byte {exc.start:,}); a prompts file is one prompt per line") from None
        numbered = [(i, unescape_prompt(line)) for i, line in enumerate(text.splitlines(), 1) if line.strip()]
        if not numbered:
            raise DatasetError("no prompts (expected one per line)")
        return PromptsFile(pd.DataFrame({"prompt": [t for _, t in numbered]}), None, [i for i, _ in numbered],
                           n_read=len(numbered))
    if isinstance(source, (bytes, bytearray, memoryview)):
        source = io.BytesIO(bytes(source))
        source.name = shown  # the reader takes the format from the buffer's name
    table, _ = read_table(source, format=None, max_rows=None, progress=progress, max_bytes=max_bytes,
                          max_cell_chars=max_cell_chars)
    old = set(TRACE_COLUMNS) | set(OLD_ANSWER_COLUMNS)
    kept: list[dict[str, Any]] = []
    numbers: list[int] = []
    skipped: list[RowError] = []
    n_read = 0
    for number, row in table.rows:  # cells of the old answers are not kept: trace cells can be large
        n_read += 1
        if row is None:  # the reader's row error says why
            continue
        problem = prompt_problem(row.get("prompt"))
        if problem:
            skipped.append(RowError(number, "prompt", problem))
            continue
        kept.append({k: v for k, v in row.items() if k not in old})
        numbers.append(number)
    if "prompt" not in table.columns:

        raise DatasetError(f"needs a `prompt` column; found columns {shorten(table.columns)}{table.hint}")
    problems = sorted(table.errors + skipped, key=lambda e: e.row)
    if not kept:
        shown_problems = "; ".join(str(e) for e in problems[:3])
        # a row the reader refused (a cell over max_cell_chars, bad JSON) may have a prompt: "no prompt" would be
        # untrue of it, and its own error says what is wrong
        what = "a prompt" if not table.errors else "a prompt that can be read"
        raise DatasetError(f"no row has {what} ({shown_problems})")
    columns = [c for c in table.columns if c not in old]
    if table.frame is not None:  # Parquet: pyarrow's typed columns, as the dataset reader keeps them
        frame = table.frame(columns).iloc[[n - 1 for n in numbers]].reset_index(drop=True)
    else:
        frame = pd.DataFrame.from_records(kept, columns=columns)
    references = [row.get("reference") for row in kept] if "reference" in table.columns else None
    return PromptsFile(frame, references, numbers, problems, n_read, [c for c in table.columns if c in old])


def label_answers(answers: Sequence[str], references: Sequence[Any], rows: Sequence[int], *, matcher: str = "exact",
                  tolerance: float = 1e-6) -> tuple[list[int | None], list[RowError]]:
    """Each generated answer's 0/1 label against its row's ``reference``, by ``matcher`` / ``tolerance`` as the
    dataset reader labels (:func:`~trace_core.data.label_from_reference`); None, with a :class:`RowError` naming the
    row, where the reference is missing or cannot label it."""
    labels: list[int | None] = []
    problems: list[RowError] = []
    for answer, reference, row in zip(answers, references, rows, strict=True):
        try:
            if is_blank(reference):
                raise ValueError("is missing; expected the gold answer")
            labels.append(label_from_reference(answer, reference, matcher=matcher, tolerance=tolerance))
        except (TypeError, ValueError) as exc:
            labels.append(None)
            problems.append(RowError(row, "reference", str(exc)))
    return labels, problems


def answered_frame(frame: pd.DataFrame, answers: Sequence[str], references: Sequence[Any] | None,
                   rows: Sequence[int], *, matcher: str = "exact",
                   tolerance: float = 1e-6) -> tuple[pd.DataFrame, list[RowError]]:
    """The prompts' rows (:attr:`PromptsFile.frame`) with their generated answers, as ``trace-core generate`` writes
    them: an ``answer`` column (in place of the input's, else right after ``prompt``) and, when the file has a
    ``reference`` column, each answer's 0/1 ``label`` (:func:`label_answers`; nullable Int64, empty where the
    reference cannot label it). Returns the new frame and the labeling problems, each naming its row."""
    frame = frame.copy()
    answers = list(answers)
    if "answer" in frame.columns:
        frame["answer"] = answers
    else:  # a prompts-only file: the answer next to its prompt
        frame.insert(frame.columns.get_loc("prompt") + 1, "answer", answers)
    problems: list[RowError] = []
    if references is not None:  # the generated answers' labels; the input's label column was left out on reading
        labels, problems = label_answers(answers, references, rows, matcher=matcher, tolerance=tolerance)
        frame["label"] = pd.Series(labels, index=frame.index, dtype="Int64")  # 0/1, empty where unlabeled
    return frame, problems


def row_errors_text(errors: Sequence[Any], shown_rows: int = 3) -> str:
    """The first ``shown_rows`` row errors, and how many more, for a one-line message (each quotes at most ~60
    characters of the file)."""
    more = len(errors) - shown_rows
    return "; ".join(clip(str(e)) for e in errors[:shown_rows]) + (f"; and {more:,} more" if more > 0 else "")


def unlabeled_message(problems: Sequence[RowError], total: int) -> str:
    """What :func:`answered_frame`'s labeling problems mean, in one line.

    >>> unlabeled_message([RowError(3, "reference", "is missing")], 1)
    'left 1 of 1 generated answer unlabeled, its `reference` cannot label it (row 3: reference: is missing)'
    """
    them = "its `reference` cannot label it" if len(problems) == 1 else "their `reference` cannot label them"
    return (f"left {len(problems):,} of {_count(total, 'generated answer')} unlabeled, {them} "
            f"({row_errors_text(problems)})")


def _count(n: int, singular: str) -> str:
    """``"1 answer"``, ``"2 answers"``."""
    return f"{n:,} {singular}{'' if n == 1 else 's'}"


def has_chat_template(model: Any) -> bool:
    """Whether ``model`` (a loaded model, or a model server with its local tokenizer) has a chat template.

    >>> from types import SimpleNamespace
    >>> has_chat_template(SimpleNamespace(tokenizer=SimpleNamespace(chat_template="{{ messages }}")))
    True
    """
    given = getattr(model, "has_chat_template", None)
    if given is not None:
        return bool(given)
    return bool(getattr(getattr(model, "tokenizer", None), "chat_template", None))


def template_unused(model: Any, chat_template: bool) -> bool:
    """Whether ``model`` has a chat template that prompts given with ``chat_template`` off do not go through (an
    instruct model given a bare prompt often ends its answer at once).

    >>> from types import SimpleNamespace
    >>> template_unused(SimpleNamespace(has_chat_template=True), False)
    True
    """
    return not chat_template and has_chat_template(model)


def empty_answers_note(answers: Sequence[str], *, template_unused: bool) -> str | None:
    """The note on generated answers that are empty (the model ended at once), with the likely cause when the
    model has a chat template that the prompts did not go through (``template_unused``: an instruct model given a
    bare prompt often answers nothing); None when no answer is empty.

    >>> empty_answers_note(["Paris", ""], template_unused=False)
    '1 of 2 answers is empty (the model ended its answer at once)'
    """
    empty = sum(1 for a in answers if not a.strip())
    if not empty:
        return None
    cause = ("; the model has a chat template that the prompts did not go through: an instruct model needs it "
             "(leave out --no-chat-template)" if template_unused else "")
    verb = "is" if empty == 1 else "are"
    return f"{empty:,} of {_count(len(answers), 'answer')} {verb} empty (the model ended its answer at once){cause}"


def matcher_hint(frame: pd.DataFrame, references: Sequence[Any] | None, rows: Sequence[int],
                 matcher: str) -> str | None:
    """The note on :func:`answered_frame`'s answers that the exact matcher labeled wrong although they hold their
    reference as whole words (:func:`~trace_core.data.labels.exact_match_hint`); None when there is none, or the
    answers were not labeled with ``"exact"``."""
    if references is None or matcher != "exact":
        return None
    labels = [None if pd.isna(v) else int(v) for v in frame["label"]]
    return exact_match_hint(frame["answer"].tolist(), references, labels, rows)
