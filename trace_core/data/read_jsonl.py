"""Reading JSON Lines, or a JSON array of objects (a common ".json" export): one raw row per record, its keys the
file's columns (their union, in order of appearance).

A record that is not JSON, not an object, holds a value Python cannot keep (an escaped lone surrogate, an integer
too long), gives a key twice or two keys naming one column (see :func:`_row_from_json`), or has a text cell over
``max_cell_chars`` is a rejected row with its reason, not a file error; a file in which no line holds an object is
not JSON Lines.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trace_core.data.errors import DatasetError, RowError
from trace_core.data.jsonl_arrow import ArrowLines
from trace_core.data.source import Lines, Reporter, Source, cell_too_long
from trace_core.data.table import MAX_COLUMN_NAME, MAX_COLUMNS, Row, Table, check_header, no_rows, too_many
from trace_core.traces.cells import (
    JsonValueError,
    Repeated,
    check_surrogates,
    has_surrogate_escape,
    loads_checked,
    show,
)

__all__ = ["jsonl_table"]


def jsonl_table(src: Source, *, max_rows: int | None, report: Reporter) -> Table:
    """The JSON Lines file (or JSON array) ``src`` as a :class:`Table` whose rows are parsed as they are consumed."""
    table = Table(columns=[], rows=iter(()), again=lambda: jsonl_table(src, max_rows=max_rows, report=report))
    table.rows = _jsonl_rows(Lines(src, report), table, max_rows)
    return table


@dataclass
class _Counts:
    """What a JSON Lines file's lines held, for the checks made once all are read."""

    rows: int = 0          # non-blank lines
    objects: int = 0       # lines holding a JSON object (even one rejected for its keys or values)
    first_error: str = ""  # the first line that is not JSON, and why


def _jsonl_rows(lines: Lines, table: Table, max_rows: int | None) -> Iterator[Row]:
    """One row per non-blank line, numbered by its line in the file (blank lines hold no row but are counted), or
    one per item of a JSON array; ``table.columns`` grows as new keys appear."""
    stream = iter(lines)  # one pass: the array case reads the rest of this same pass
    first = next((line for line in stream if line.strip()), None)
    counts = _Counts()
    if first is not None and first.lstrip().startswith("["):  # a JSON array of objects (a common ".json" export):
        # parsed whole, numbered by item
        counts.rows = yield from _array_rows("\n" * (lines.number - 1) + first + "".join(stream), table, max_rows,
                                             lines.src.max_cell)
        counts.objects = counts.rows
    else:
        yield from _line_rows(() if first is None else itertools.chain((first,), stream), lines, table, max_rows,
                              counts)
    lines.check_not_blank()
    if not counts.rows:
        raise no_rows(table.columns)
    if not counts.objects:
        raise DatasetError(f"the file is not JSON Lines: no line holds a JSON object "
                           f"({counts.first_error or table.errors[0]}); expected one object per line, like "
                           f"{{\"prompt\": \"...\", \"answer\": \"...\", \"label\": 1}}")


BLOCK_ROWS = 8192           # lines read by Arrow together (a multiple of the validator's chunk of 256 rows)...
_BLOCK_CHARS = 512 * 2**10  # ...or fewer, once they hold this many characters and a whole number of chunks...
_BLOCK_MAX_CHARS = 8 * 2**20  # ...or this many, whatever the chunks (long lines: a block stays small)


def _line_rows(text_lines: Iterable[str], lines: Lines, table: Table, max_rows: int | None,
               counts: _Counts) -> Iterator[Row]:
    """One row per non-blank line of ``text_lines`` (the lines of ``lines``, numbered by it), read a block of lines
    at a time (:func:`_block_rows`); a block never reads past the row that passes ``max_rows``."""
    seen: set[str] = set()
    arrow = ArrowLines(_column_name)
    block: list[str] = []
    numbers: list[int] = []
    size = 0
    for line in text_lines:
        if not line.strip():
            continue
        block.append(line)
        numbers.append(lines.number)
        size += len(line)
        full = (len(block) >= BLOCK_ROWS or size >= _BLOCK_MAX_CHARS
                or (size >= _BLOCK_CHARS and len(block) % 256 == 0))
        if full or (max_rows is not None and counts.rows + len(block) > max_rows):
            yield from _block_rows(arrow, block, numbers, table, max_rows, counts, seen, lines.src.max_cell)
            block, numbers, size = [], [], 0
    yield from _block_rows(arrow, block, numbers, table, max_rows, counts, seen, lines.src.max_cell)


def _block_rows(arrow: ArrowLines, block: list[str], numbers: list[int], table: Table, max_rows: int | None,
                counts: _Counts, seen: set[str], max_cell: int | None) -> Iterator[Row]:
    """The rows of a block of non-blank lines: read by Arrow when :meth:`ArrowLines.records
    <trace_core.data.jsonl_arrow.ArrowLines.records>` is sure to read them as ``json`` does (then every line is an
    object with the same keys), else line by line."""
    records = arrow.records(block, max_cell) if block else None
    for i, (number, line) in enumerate(zip(numbers, block, strict=True)):
        counts.rows += 1
        too_many(max_rows, counts.rows)
        if records is None:
            yield number, _line_row(line, number, table, counts, seen, max_cell)
            continue
        counts.objects += 1
        _add_columns(table.columns, seen, records[i])
        yield number, records[i]


def _line_row(line: str, number: int, table: Table, counts: _Counts, seen: set[str],
              max_cell: int | None) -> dict[str, Any] | None:
    """The cells of one line's record, or None when it is rejected (its problems go to ``table.errors``)."""
    line = line[:-1] if line.endswith("\n") else line  # without its ending, so error columns are on its line
    line = line[:-1] if line.endswith("\r") else line  # "\r\n" endings too
    try:  # strict=False: control characters raw inside strings are kept
        obj, repeated = loads_checked(line, strict=False)
    except (json.JSONDecodeError, RecursionError) as exc:  # deep nesting is a bad row, not a crash
        message = (f"not valid JSON ({exc.msg} at column {exc.colno})" if isinstance(exc, json.JSONDecodeError)
                   else "JSON nested too deeply")
        counts.first_error = counts.first_error or f"line {number}: {message}"
        table.errors.append(RowError(number, "", message))
        return None
    except JsonValueError as exc:  # valid JSON, but a value Python cannot keep: a bad row, the rest is read
        counts.objects += line.lstrip().startswith("{")
        table.errors.append(_value_error(exc, number))
        return None
    row, valid = _row_from_json(obj, number, table.errors, repeated)
    if row is not None:  # an object, even one rejected for its keys: the file is JSON Lines, and has its keys
        counts.objects += 1
        _add_columns(table.columns, seen, row)
        if max_cell is not None and len(line) > max_cell:  # only then can a cell be too long
            valid = _short_cells(row, number, table.errors, max_cell) and valid
    return row if valid else None


def _array_rows(text: str, table: Table, max_rows: int | None, max_cell: int | None) -> Generator[Row, None, int]:
    """One row per item of the JSON array ``text`` (numbered from 1); returns how many items it has."""
    items, in_items = _json_array(text)
    escapes, long_text = has_surrogate_escape(text), max_cell is not None and len(text) > max_cell
    del text
    too_many(max_rows, len(items))
    seen: set[str] = set()
    for i, obj in enumerate(items, start=1):
        items[i - 1] = None  # each item is dropped once handed over
        if escapes:
            try:
                check_surrogates(obj)
            except JsonValueError as exc:
                table.errors.append(_value_error(exc, i))
                yield i, None
                continue
        row, valid = _row_from_json(obj, i, table.errors, in_items.get(i - 1, ()))
        if row is not None:
            _add_columns(table.columns, seen, row)
            if long_text:
                valid = _short_cells(row, i, table.errors, max_cell) and valid  # type: ignore[arg-type]
        yield i, row if valid else None
    return len(items)


def _column_name(key: object) -> str:
    return str(key).strip().lower() or "unnamed"


def _row_from_json(obj: object, row: int, errors: list[RowError],
                   repeated: Sequence[Repeated] = ()) -> tuple[dict[str, Any] | None, bool]:
    """One record's cells by column name (None when it is not an object), and whether it is valid: not when it gives
    a key twice (``repeated``: the objects that do, by their path from ``obj``) or two keys that name one column.
    The problems go to ``errors``.

    Such a record is rejected, never read as ``json`` would (keeping the last value): which value was meant is
    unknown, and the other one would be lost silently. This holds for objects nested in a cell (a ``response``)
    too. Its keys still count as the file's columns."""
    if not isinstance(obj, dict):
        errors.append(RowError(row, "", f"is {show(obj)}; expected a JSON object {{\"prompt\": ..., ...}}"))
        return None, False
    problems = []
    for found in repeated:
        if not found.path:  # the record itself
            for key, times in found.keys:
                count = "twice" if times == 2 else f"{times:,} times"
                problems.append(RowError(row, _column_name(key), f"the key {show(key)} is given {count} in this "
                                         f"record; JSON keeps only the last value, so the others would be lost "
                                         f"silently -- keep one"))
        else:
            problems.append(RowError(row, _column_name(found.path[0]), found.message(found.path)))
    out: dict[str, Any] = {}
    raw_names: dict[str, str] = {}
    for key, value in obj.items():
        norm = _column_name(key)
        if norm in out:
            problems.append(RowError(row, norm, f"the keys {show(raw_names[norm])} and {show(str(key))} name the same "
                                                f"column (names are matched ignoring case and surrounding spaces); "
                                                f"each key needs a distinct name"))
            continue
        out[norm], raw_names[norm] = value, str(key)
    errors.extend(problems)
    return out, not problems


def _value_error(exc: JsonValueError, row: int) -> RowError:
    """The row error for a record (or array item) holding a value Python cannot keep, naming its column."""
    if exc.path and isinstance(exc.path[0], str):
        return RowError(row, _column_name(exc.path[0]), exc.message_in(exc.path[1:]))
    return RowError(row, "", exc.message)


def _short_cells(row: dict[str, Any], number: int, errors: list[RowError], max_cell: int) -> bool:
    """Whether every text cell of ``row`` holds at most ``max_cell`` characters; each that does not is an error."""
    long = [(name, len(v)) for name, v in row.items() if type(v) is str and len(v) > max_cell]
    errors.extend(RowError(number, name, cell_too_long(chars, max_cell)) for name, chars in long)
    return not long


def _json_array(text: str) -> tuple[list[Any], dict[int, list[Repeated]]]:
    """The items of a JSON array, and the objects in each that give a key twice (by item index; paths from it).
    Lone surrogates are not looked for: the caller checks each item (one bad item is one bad row)."""
    try:
        items, repeated = loads_checked(text, surrogates=False)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"the file starts like a JSON array but is not valid JSON ({exc.msg} at line "
                           f"{exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise DatasetError("the file starts like a JSON array but its JSON is nested too deeply") from None
    except JsonValueError as exc:
        raise DatasetError(f"the file starts like a JSON array but it {exc.message}") from None
    by_item: dict[int, list[Repeated]] = {}
    for found in repeated:  # every path starts with an item's index: the document is a list
        by_item.setdefault(int(found.path[0]), []).append(Repeated(found.path[1:], found.keys))
    return items, by_item


def _add_columns(columns: list[str], seen: set[str], row: Mapping[str, Any]) -> None:
    if len(row) > len(seen) or not seen.issuperset(row):
        for key in row:
            if key not in seen:
                if len(seen) >= MAX_COLUMNS or len(key) > MAX_COLUMN_NAME:
                    check_header([*columns, *(k for k in row if k not in seen)])
                seen.add(key)
                columns.append(key)
