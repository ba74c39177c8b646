"""Validating a table row by row: every valid row kept with its label and trace, every rejected row reported with its
number, column and reason (nothing is dropped silently). :func:`trace_core.data.read_dataset` makes the
:class:`~trace_core.data.LabeledDataset` of what is kept.

Rows are validated as they are read (see :mod:`trace_core.data.read`) and only what the dataset keeps is held: the
non-trace cells of valid rows and their traces, never every raw row at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from trace_core.checks import counted
from trace_core.data.errors import DatasetError, RowError
from trace_core.data.fastread import FastRow, decode_chunk, table_row
from trace_core.data.labels import LABEL_EXPECTED, common_label, label_from_reference, parse_label
from trace_core.data.responses import trace_from_openai
from trace_core.data.table import Table, columns_text
from trace_core.traces.cells import ABSENT, CellError, is_blank, is_int64, is_missing, json_cell, show
from trace_core.traces.columns import TRACE_COLUMNS, decode_cell, trace_from_cells
from trace_core.traces.trace import Trace

__all__ = ["Options", "Rules", "ValidRows", "validate_rows"]

_TRACE_SET = frozenset(TRACE_COLUMNS)
_TEXT_COLUMNS = ("tokens", "top_tokens")  # trace columns of token text, whose strings are shared (see _share)
CHUNK_ROWS = 256  # rows whose trace cells are decoded together (fastread.decode_chunk)


@dataclass(frozen=True)
class Options:
    """How a dataset is read (see :func:`trace_core.data.read_dataset`): the matcher that labels answers from a
    ``reference`` column, and whether a label is required."""

    matcher: str
    tolerance: float
    f1_threshold: float
    require_label: bool


@dataclass(frozen=True)
class Rules:
    """What every row of one table is checked against (decided once, from its columns and the options)."""

    trace_columns: tuple[str, ...]  # the trace columns the table has
    use_response: bool              # a row without trace cells takes its trace (and a missing answer) from its
                                    # `response` cell
    label_source: str
    matcher: str
    tolerance: float
    f1_threshold: float


def _rules_for(columns: Sequence[str], hint: str, options: Options) -> Rules | DatasetError:
    """The rules for a table with these columns, or the error that a table without the required ones raises."""
    has = set(columns)
    trace_columns = tuple(c for c in TRACE_COLUMNS if c in has)
    use_response = "response" in has
    missing = [c for c in ("prompt", "answer") if c not in has and not (c == "answer" and use_response)]
    if missing:
        needed = " and ".join(f"`{c}`" for c in missing)
        return DatasetError(f"missing required column{'s' if len(missing) > 1 else ''} {needed}; found columns "
                            f"{columns_text(columns)}{hint}")
    if "label" in has:
        label_source = "label"
    elif "reference" in has:
        label_source = f"reference:{options.matcher}"
    elif options.require_label:
        return DatasetError(f"the dataset needs a `label` column ({LABEL_EXPECTED}) or a `reference` column (the "
                            f"gold answer, to label answers with a matcher); found columns {columns_text(columns)}"
                            f"{hint}")
    else:
        label_source = "none"
    return Rules(trace_columns, use_response, label_source, options.matcher, options.tolerance,
                 options.f1_threshold)


@dataclass
class ValidRows:
    """What one pass over a table keeps of its valid rows (in file order): no raw trace cells, so memory stays near
    the traces'. ``errors`` holds every problem of the table, by row."""

    n_read: int = 0
    numbers: list[int] = field(default_factory=list)       # the valid rows' numbers
    cells: list[Any] = field(default_factory=list)         # their non-trace cells (CSV: lists; JSON: dicts)
    traces: list[Trace | FastRow | None] = field(default_factory=list)  # FastRow: a checked row (fastread)
    labels: list[int] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    unused_responses: list[int] = field(default_factory=list)  # kept rows with trace cells and a response too
    errors: list[RowError] = field(default_factory=list)


def validate_rows(table: Table, fmt: str, options: Options) -> tuple[Table, ValidRows, Rules]:
    """Validate every row of ``table`` (read as ``fmt``) and keep the valid ones.

    Returns the table the rows were kept from (``table``, or the file read again when a row met late changed the
    rules: a JSON Lines file's columns are known only at its end), the rows, and the rules they were checked against.

    Raises
    ------
    DatasetError
        A problem with the whole file, or columns that a dataset cannot have (a required one missing).
    """
    done = _validate_pass(table, fmt, options, None)
    if done is None and table.again is not None:
        final = _rules_for(table.columns, table.hint, options)
        assert isinstance(final, Rules)  # checked by the first pass
        table = table.again()
        done = _validate_pass(table, fmt, options, final)
    assert done is not None  # a pass with fixed rules always completes
    kept, rules = done
    return table, kept, rules


def _validate_pass(table: Table, fmt: str, options: Options,
                   fixed: Rules | None) -> tuple[ValidRows, Rules] | None:
    """Validate each row as it is read and keep only what the dataset needs; None when a second pass is needed.

    The rules come from the columns. A JSON Lines file's columns are known only at its end, so rows are checked
    under the columns seen so far; should a later row bring a column that changes the rules (rare: a file whose
    records differ in shape), the rows already checked are stale and the caller reads the file again with the rules
    of all its columns (``fixed``).
    """
    kept = ValidRows()
    rules: Rules | DatasetError | None = fixed
    width, used, stale = -1, False, False
    strings: dict[str, str] = {}  # one str object per distinct token text: traces repeat a vocabulary's tokens
    csv_columns = [c for c in table.columns if c not in _TRACE_SET]  # a CSV's columns are known from its header
    pending: list[tuple[int, Any, Rules]] = []  # rows read, checked a chunk at a time (in order)
    for number, raw in table.rows:
        kept.n_read += 1
        if fixed is None and len(table.columns) != width:
            width = len(table.columns)
            now = _rules_for(table.columns, table.hint, options)
            if now != rules:
                stale, rules = stale or used, now
        if raw is None:
            continue
        if stale or not isinstance(rules, Rules):  # this row waits for the second pass
            stale = True
            continue
        used = True
        if pending and pending[0][2] is not rules:
            _keep_chunk(kept, pending, strings, fmt, csv_columns)
        pending.append((number, raw, rules))
        if len(pending) >= CHUNK_ROWS:
            _keep_chunk(kept, pending, strings, fmt, csv_columns)
    _keep_chunk(kept, pending, strings, fmt, csv_columns)
    final = fixed or _rules_for(table.columns, table.hint, options)  # the rows are read: the columns are complete
    if isinstance(final, DatasetError):
        if not table.columns and table.errors:  # JSON Lines rows that could not be parsed bring no columns
            raise DatasetError(f"no row could be read: {counted(len(table.errors), 'row')} rejected, none kept "
                               f"(the first: {table.errors[0]})")
        raise final
    if stale or (used and rules != final):
        return None
    kept.errors = sorted(table.errors + kept.errors, key=lambda e: e.row)  # stable: a row keeps its errors' order
    return kept, final


def _keep_chunk(kept: ValidRows, pending: list[tuple[int, Any, Rules]], strings: dict[str, str], fmt: str,
                csv_columns: list[str]) -> None:
    """Check the rows in ``pending`` (all under one set of rules) and keep the valid ones, in order; empties it.

    Their trace cells are decoded together (:func:`decode_chunk`); a row that the fast path leaves out is checked
    on its own, as every row is without it."""
    if not pending:
        return
    rules = pending[0][2]
    fast = decode_chunk([raw for _, raw, _ in pending], rules.trace_columns, strings)  # None: no trace column
    plain = plain_cells(pending, rules) if fast is not None else None
    for i, (number, raw, _) in enumerate(pending):
        row = None if fast is None else fast[i]
        cells = None if row is None or plain is None else plain[i]
        if cells is not None:
            prompt, answer, label = cells
            try:
                trace = table_row(row, prompt=prompt, answer=answer)  # type: ignore[arg-type]  # row is set
            except (TypeError, ValueError):  # the per-row path below names the cell
                pass
            else:
                _append(kept, number, raw, trace, answer, label, fmt, csv_columns)
                continue
        keep_row(kept, number, raw, rules, strings, fmt, csv_columns, row)
    pending.clear()


def plain_cells(pending: list[tuple[int, Any, Rules]], rules: Rules) -> list[tuple[str, str, int] | None] | None:
    """Per row, its prompt, answer and label when its cells are what nearly every row holds, so that the per-row
    checks could only accept it: a non-blank text prompt, a text answer, no ``response`` to weigh, and a label in a
    common spelling (:func:`~trace_core.data.labels.common_label`) or none asked for; None for any other row, which
    :func:`keep_row` checks and reports. None for the whole chunk when its labels come from a reference (a matcher
    decides them)."""
    if rules.label_source not in ("label", "none"):
        return None
    labelled, response = rules.label_source == "label", rules.use_response
    out: list[tuple[str, str, int] | None] = []
    for _, raw, _ in pending:
        prompt, answer = raw.get("prompt"), raw.get("answer")
        if (type(prompt) is not str or type(answer) is not str or not prompt.strip()
                or (response and not is_blank(raw.get("response")))):
            out.append(None)
            continue
        label = common_label(raw.get("label")) if labelled else -1
        out.append(None if label is None else (prompt, answer, label))
    return out


def keep_row(kept: ValidRows, number: int, raw: Any, rules: Rules, strings: dict[str, str], fmt: str,
              csv_columns: list[str], fast: FastRow | None) -> None:
    problems: list[CellError] = []
    trace, answer, label, unused_response = _check_row(raw, rules, problems, strings, fast)
    if problems:
        kept.errors.extend(RowError(number, p.field, p.message) for p in problems)
        return
    if unused_response:
        kept.unused_responses.append(number)
    _append(kept, number, raw, trace, answer, label, fmt, csv_columns)


def _append(kept: ValidRows, number: int, raw: Any, trace: Trace | FastRow | None, answer: str | None, label: int,
            fmt: str, csv_columns: list[str]) -> None:
    """Keep a valid row: its number, trace, label, answer and non-trace cells."""
    kept.numbers.append(number)
    kept.traces.append(trace)
    kept.labels.append(label)
    kept.answers.append(answer if answer is not None else "")
    if fmt == "csv":
        kept.cells.append([raw[c] for c in csv_columns])
    elif fmt == "jsonl":
        kept.cells.append({k: raw[k] for k in raw if k not in _TRACE_SET})  # trace cells never looked at


def _check_row(raw: Mapping[str, Any], rules: Rules, problems: list[CellError], strings: dict[str, str],
               fast: FastRow | None = None) -> tuple[Trace | FastRow | None, str | None, int, bool]:
    """One row's trace, answer and label (-1 when unlabeled), and whether it had a ``response`` that was not used
    (its trace cells were); every problem found is appended to ``problems``, so a row with several bad cells
    reports them all. ``strings`` maps token texts to the one object kept for each. ``fast``: the row's trace cells
    as :func:`decode_chunk` decoded and checked them, when it did; the row's trace is then that row itself, as a
    :class:`~trace_core.traces.table.TableBuilder` takes it (:func:`table_row`), not a Trace.

    The trace comes from the row's trace cells when any is non-empty, else from its ``response`` (see
    :func:`read_dataset`)."""
    prompt, answer = _prompt_and_answer(raw, problems)
    trace: Trace | FastRow | None = None
    cells, cell_problem = _decoded_cells(raw, rules, fast)
    from_cells = cell_problem is not None or any(v is not ABSENT for v in cells.values())
    has_response = rules.use_response and not is_blank(raw.get("response"))
    response_failed = False
    if has_response and not from_cells:
        trace, response_failed = _response_trace(raw, prompt, problems)
        if trace is not None and not answer:  # missing or empty answer: the response's text
            answer = trace.answer
    if answer is None:
        if not response_failed:  # a broken response was reported already; it was to give the answer
            problems.append(CellError("answer", "is missing; expected text (it may be empty)"))
    elif cell_problem is not None:
        problems.append(cell_problem)
    elif fast is not None:
        try:
            trace = table_row(fast, prompt=prompt or "", answer=answer)
        except (TypeError, ValueError):  # should Trace refuse it after all, the per-row path names the cell
            problems.clear()
            return _check_row(raw, rules, problems, strings)
    elif from_cells:
        trace = _trace_of_cells(cells, problems, strings, prompt=prompt or "", answer=answer)
    if isinstance(trace, Trace) and answer is not None and (trace.answer != answer or trace.prompt != (prompt or "")):
        trace = replace(trace, answer=answer, prompt=prompt or "")
    try:
        label = _label(raw, answer, rules)
    except CellError as exc:
        problems.append(exc)
        label = -1
    return trace, answer, label, from_cells and has_response


def _decoded_cells(raw: Mapping[str, Any], rules: Rules,
                   fast: FastRow | None) -> tuple[dict[str, Any], CellError | None]:
    """The row's trace cells decoded (or the chunk's decoded row standing for them), and the first cell that does
    not decode: any non-empty trace cell, even a bad one, means the trace comes from the cells."""
    if fast is not None:  # decoded and checked with its chunk: non-empty trace cells, valid
        return {"tokens": fast}, None
    if not rules.trace_columns:
        return {}, None
    try:
        return {c: decode_cell(raw.get(c), c) for c in rules.trace_columns}, None
    except CellError as exc:
        return {}, exc


def _trace_of_cells(cells: dict[str, Any], problems: list[CellError], strings: dict[str, str], *, prompt: str,
                    answer: str) -> Trace | None:
    """The trace of decoded cells by the per-row rules (token texts shared through ``strings``); None with the
    problem appended when a cell is refused."""
    try:
        for c in _TEXT_COLUMNS:
            if isinstance(cells.get(c), list):
                cells[c] = _share(cells[c], strings)
        return trace_from_cells(cells, prompt=prompt, answer=answer)
    except CellError as exc:
        problems.append(exc)
        return None


def _prompt_and_answer(raw: Mapping[str, Any], problems: list[CellError]) -> tuple[str | None, str | None]:
    """The row's prompt (None when bad or missing) and answer (None when missing, "" when bad: reported, and the
    other cells are still checked, so that every problem is reported)."""
    prompt = answer = None
    try:
        prompt = _text_cell(raw.get("prompt"), "prompt", allow_empty=False)
        if prompt is None:
            raise CellError("prompt", "is missing; expected non-empty text")
    except CellError as exc:
        problems.append(exc)
    try:
        answer = _text_cell(raw.get("answer"), "answer", allow_empty=True)
    except CellError as exc:
        problems.append(exc)
        answer = ""  # reported; keep going to report other problems too
    return prompt, answer


def _response_trace(raw: Mapping[str, Any], prompt: str | None,
                    problems: list[CellError]) -> tuple[Trace | None, bool]:
    """The trace of the row's ``response`` cell (None when it is empty), and whether the cell was refused (its
    problem appended to ``problems``)."""
    try:
        response = _response_cell(raw.get("response"))
        if response is None:
            return None, False
        return trace_from_openai(response, prompt=prompt or "",
                                 answer_tokens=_answer_tokens_cell(raw.get("answer_tokens"))), False
    except CellError as exc:
        problems.append(exc)
    except (TypeError, ValueError) as exc:
        problems.append(CellError("response", str(exc)))
    return None, True


def _share(value: list[Any], strings: dict[str, str]) -> list[Any]:
    """``value`` (a list of token texts, or of lists of them) with each str replaced by the first equal one seen.

    ``json.loads`` makes a new object for every string, and the top-k token texts of a large file are tens of
    millions of copies of a few thousand tokens: sharing them keeps the traces' memory near that of their arrays.
    Anything that is not a str is left as is (the codec reports it).
    """
    out: list[Any] = []
    for item in value:
        if isinstance(item, list):
            out.append([strings.setdefault(x, x) if type(x) is str else x for x in item])
        else:
            out.append(strings.setdefault(item, item) if type(item) is str else item)
    return out


def _label(raw: Mapping[str, Any], answer: str | None, rules: Rules) -> int:
    """The row's 0/1 label from its ``label`` cell or by matching its answer with its ``reference``; -1 when the
    table is unlabeled (or the answer is missing, which is reported already)."""
    if rules.label_source == "label":
        try:
            return parse_label(raw.get("label"))
        except ValueError as exc:
            raise CellError("label", str(exc)) from None
    if rules.label_source == "none" or answer is None:
        return -1
    reference = raw.get("reference")
    if is_blank(reference):
        raise CellError("reference", "is missing; expected the gold answer")
    try:
        return label_from_reference(answer, reference, matcher=rules.matcher, tolerance=rules.tolerance,
                                    f1_threshold=rules.f1_threshold)
    except (TypeError, ValueError) as exc:
        raise CellError("reference", str(exc)) from None


def _text_cell(value: object, name: str, *, allow_empty: bool) -> str | None:
    """A text cell as str; None when missing (callers decide); raises CellError for non-text or forbidden empty."""
    if is_missing(value):
        return None
    if not isinstance(value, str):
        raise CellError(name, f"is {show(value)}; expected text")
    if not allow_empty and not value.strip():
        raise CellError(name, "is empty; expected non-empty text")
    return value


def _answer_tokens_cell(value: object) -> int | None:
    """How many of a scored prompt's last tokens are the answer (a vLLM ``prompt_logprobs`` response needs it)."""
    if is_blank(value):
        return None
    number = value
    if isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    if not is_int64(number) or int(number) < 0:  # type: ignore[call-overload]
        raise CellError("answer_tokens", f"is {show(value)}; expected a whole number of tokens >= 0")
    return int(number)  # type: ignore[call-overload]


def _response_cell(value: object) -> Mapping[str, Any] | None:
    value = json_cell(value, "response")
    if value is ABSENT:
        return None
    if not isinstance(value, Mapping):
        raise CellError("response", f"is {show(value)}; expected a model server's response object (OpenAI-style, "
                                    "llama.cpp, Ollama, TGI or vLLM)")
    return value
