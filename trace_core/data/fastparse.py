"""The fast path's two front ends: a chunk of rows' trace cells turned into arrays, before any check.

CSV cells (JSON text): the numbers of a column's cells are joined and parsed in one call (pyarrow, else numpy), the
token texts split on their quotes (a token-text cell with an escape, as real vocabularies have, decoded by the codec's
decoder). Decoded cells (a JSON Lines record's lists, Parquet's): each column's values are joined into one array. Only
cells in the plain form are taken: number cells as ``write_dataset`` writes them (compact JSON, numbers in JSON's
grammar), lists of plain Python numbers and strings (ids may be integral floats). For anything else a front end returns
None and the chunk is decoded cell by cell (:mod:`trace_core.data.fastread`). Each column's dtype and the Python types
it takes as they are come from the codec's column spec (:data:`~trace_core.traces.columns.COLUMN_BY_NAME`), as the
per-row decoder's do. :mod:`trace_core.data.fastread` checks what is parsed here.
"""

from __future__ import annotations

import itertools
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, cast

import numpy as np

from trace_core.traces.cells import ABSENT, CellError, is_int64, json_cell
from trace_core.traces.columns import COLUMN_BY_NAME, TraceColumn, decode_cell
from trace_core.traces.trace import TraceMetadata

__all__ = ["VECTOR_COLUMNS", "Parsed", "fast_metadata", "from_lists", "from_text", "metadatas_of"]

VECTOR_COLUMNS = ("token_ids", "surprisal", "logprobs", "entropy", "ranks")  # the per-token number columns
_COMMA, _MINUS, _DOT, _ZERO = b",-.0"
_NOT_PLAIN_STRING = re.compile(r'[\\\x00-\x1f]')
ARROW = True  # numbers parsed with pyarrow when it is installed
_chain = itertools.chain.from_iterable


@dataclass
class Parsed:
    """A chunk's trace cells as arrays, before any check: what both front ends (text cells, decoded lists) give."""

    token_lists: list[list[str]]  # per row
    vectors: dict[str, np.ndarray]  # per-token columns, every row's values joined
    top_logprobs: np.ndarray | None  # (total tokens, k)
    top_ids: np.ndarray | None
    top_strings: list[list[str]] | None  # per row, its T x k texts flattened
    k: int
    metadatas: list[TraceMetadata | None] | None  # None: no trace_metadata column; an item None: the per-row path
    shared: bool = False  # the texts are already the objects kept for them (the reader's ``strings``)


class _NotPlain(Exception):
    """A cell of the chunk is not in the plain form: the chunk is left to the per-row path."""


def _need(condition: bool) -> None:
    if not condition:
        raise _NotPlain


def _not_plain() -> NoReturn:
    raise _NotPlain


# --------------------------------------------------------------------------------------------------
# Numbers in JSON text
# --------------------------------------------------------------------------------------------------

def _digit(codes: np.ndarray) -> np.ndarray:
    return (codes - np.uint8(_ZERO)) < 10  # uint8 arithmetic wraps: below "0" is large


def _plain_numbers(joined: str, integer: bool) -> bool:
    """Whether ``joined`` holds only comma-separated numbers that strtod (numpy) reads as ``json`` does.

    What strtod reads but JSON refuses is refused here: a leading "+", "." or zero ("01", "-01"), a "." not followed
    by a digit, an empty number, spaces, and the integer -0 (json reads 0, strtod -0.0); ints have no fraction or
    exponent. Any other misplaced character stops numpy's reading early, which its caller detects (a second
    fraction or exponent, a "-" inside a number, ...)."""
    try:
        data = ("," + joined + ",").encode("ascii")
    except UnicodeEncodeError:
        return False
    if data.translate(None, b"0123456789,-" if integer else b"0123456789,-+.eE"):
        return False
    codes = np.frombuffer(data + b",,,", dtype=np.uint8)  # padded: three characters after each comma
    commas = np.flatnonzero(codes[:len(data) - 1] == _COMMA)  # a number follows each but the last
    first, second, third = codes[commas + 1], codes[commas + 2], codes[commas + 3]
    signed = first == _MINUS
    lead = np.where(signed, second, first)  # the first digit
    after = np.where(signed, third, second)
    if not _digit(lead).all() or ((lead == _ZERO) & _digit(after)).any():
        return False
    if not integer:
        if ((lead == _ZERO) & signed & (after == _COMMA)).any():  # -0: an integer in JSON, read as 0
            return False
        dots = np.flatnonzero(codes == _DOT)
        if not _digit(codes[dots + 1]).all():
            return False
    return True


def _parse_numbers(texts: list[str], dtype: Any) -> np.ndarray | None:
    """The numbers of ``texts`` (each a comma-separated run, possibly empty) in one array; None unless every one is
    a JSON number (an integer of at most 18 digits for ints) read whole."""
    joined = ",".join(t for t in texts if t)
    if not joined:
        return np.zeros(0, dtype=dtype)
    if not _plain_numbers(joined, dtype is np.int64):
        return None
    expected = joined.count(",") + 1
    arr = _read_numbers(joined, dtype)
    if arr is None or arr.size != expected:
        return None
    if dtype is np.int64 and ((arr == np.iinfo(np.int64).max) | (arr == np.iinfo(np.int64).min)).any():
        return None  # strtoll stops at the bounds: beyond int64, or at them (rare), the per-row path decides
    return arr


def _read_numbers(joined: str, dtype: Any) -> np.ndarray | None:
    """Comma-separated numbers parsed with pyarrow (its parser rounds correctly, as float() does, and is about twice
    as fast) or, without pyarrow, numpy; None when some text is not read whole as a number."""
    if ARROW:
        try:
            import pyarrow as pa
            import pyarrow.compute as pc

            parts = pc.split_pattern(pa.array([joined]), ",").flatten()
            return pc.cast(parts, pa.int64() if dtype is np.int64 else pa.float64()).to_numpy(zero_copy_only=False)
        except ImportError:
            pass
        except (pa.ArrowInvalid, ValueError, OverflowError):
            return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.fromstring(joined, dtype=dtype, sep=",")
    except (ValueError, DeprecationWarning):
        return None


def _parsed_numbers(texts: list[str], dtype: Any, count: int) -> np.ndarray:
    """:func:`_parse_numbers`, which must give ``count`` numbers."""
    arr = _parse_numbers(texts, dtype)
    if arr is None or arr.size != count:
        _not_plain()
    return arr


# --------------------------------------------------------------------------------------------------
# The shape of JSON text cells
# --------------------------------------------------------------------------------------------------

def _vector_texts(texts: list[str], lengths: list[int]) -> list[str] | None:
    """Each 1-D cell's numbers without its brackets; None unless each is ``[...]`` with one number per token."""
    inner = []
    for t, n in zip(texts, lengths, strict=True):
        if t[:1] != "[" or t[-1:] != "]":
            return None
        body = t[1:-1]
        if (body.count(",") + 1 if body else 0) != n:
            return None
        inner.append(body)
    return inner


def _matrix_texts(texts: list[str], lengths: list[int]) -> tuple[list[str], int] | None:
    """Each 2-D cell's numbers as one comma-separated run, and k (the same for every row of the chunk); None unless
    each is ``[[...],...]`` with T rows of k >= 1 numbers."""
    inner, widths = [], set()
    for t, n in zip(texts, lengths, strict=True):
        if t[:2] != "[[" or t[-2:] != "]]" or n == 0:
            return None
        steps = t[2:-2].split("],[")
        if len(steps) != n:
            return None
        if "" in steps:  # no alternatives: every step empty
            if steps.count("") != n:
                return None
            widths.add(-1)
            inner.append("")
            continue
        counts = set(map(str.count, steps, itertools.repeat(",")))
        if len(counts) != 1:
            return None
        widths |= counts
        inner.append(",".join(steps))
    if len(widths) != 1:
        return None
    return inner, widths.pop() + 1


def _split_strings(text: str, n: int, k: int | None) -> list[str] | None:
    """The strings of one ``tokens`` (``k`` None) or ``top_tokens`` cell with no escapes; None unless it is a list
    of n strings (of n lists of k strings). Spaces between the strings (``json.dumps``' ``", "``) are not part of
    any text: they are dropped."""
    parts = text.split('"')
    if " " in text:
        parts[0::2] = [part.replace(" ", "") for part in parts[0::2]]
    seps = parts[2:-1:2]
    if k == 0:
        return [] if text == "[" + ",".join(["[]"] * n) + "]" and n else None
    if k is None:
        if n == 0 or len(parts) != 2 * n + 1 or parts[0] != "[" or parts[-1] != "]" or seps.count(",") != n - 1:
            return None
        return parts[1::2]
    if n == 0 or len(parts) != 2 * n * k + 1 or parts[0] != "[[" or parts[-1] != "]]":
        return None
    if seps.count("],[") != n - 1 or seps.count(",") != n * (k - 1) or seps[k - 1::k].count("],[") != n - 1:
        return None
    return parts[1::2]


def fast_metadata(value: str | Mapping[str, Any]) -> TraceMetadata | None:
    """The TraceMetadata of a ``trace_metadata`` cell (JSON text, or the object decoded); None when the per-row path
    would refuse it (it says why). A blank cell is a row without metadata, as in the per-row path."""
    try:
        meta = json_cell(value, "trace_metadata")
        if meta is ABSENT:
            return _IMPORTED
        if not isinstance(meta, Mapping):
            return None
        return TraceMetadata.from_dict(meta)
    except (CellError, TypeError, ValueError):
        return None


_IMPORTED = TraceMetadata(source="imported")  # a row's metadata when its cell is empty (frozen: shared)


def metadatas_of(cells: Sequence[str | Mapping[str, Any]]) -> list[TraceMetadata | None]:
    """Each ``trace_metadata`` cell's :func:`fast_metadata`; a text met again gets the TraceMetadata made for it
    (rows of one run repeat one metadata: it is parsed once)."""
    made: dict[str, TraceMetadata | None] = {}
    out = []
    for value in cells:
        if not isinstance(value, str):
            out.append(fast_metadata(value))
        elif value in made:
            out.append(made[value])
        else:
            out.append(made.setdefault(value, fast_metadata(value)))
    return out


def _metadatas(present: Mapping[str, list[Any]]) -> list[TraceMetadata | None] | None:
    """Each row's metadata (None where the fast path leaves it to the per-row one), when the chunk has the column."""
    return metadatas_of(present["trace_metadata"]) if "trace_metadata" in present else None


# --------------------------------------------------------------------------------------------------
# Front end 1: CSV text cells
# --------------------------------------------------------------------------------------------------

def from_text(raws: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> Parsed | None:
    """The chunk's cells parsed from their JSON text: numbers joined and parsed in one call, token texts split on
    their quotes; None unless every cell is in the plain form ``write_dataset`` writes."""
    try:
        present = _text_cells(raws, columns)
        token_lists = _split_tokens(present["tokens"])
        lengths = [len(t) for t in token_lists]
        _need(0 not in lengths)  # an answer with no token is read on its own
        total = sum(lengths)
        vectors = {name: _text_vector(present[name], COLUMN_BY_NAME[name], lengths, total)
                   for name in VECTOR_COLUMNS if name in present}
        top_logprobs, k = _text_top_logprobs(present, lengths, total)
        top_ids = _text_top_ids(present, lengths, total, top_logprobs, k)
        top_strings = _text_top_tokens(present, lengths, top_logprobs, k)
    except _NotPlain:
        return None
    return Parsed(token_lists, vectors, top_logprobs, top_ids, top_strings, k, _metadatas(present))


def _text_cells(raws: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> dict[str, list[str]]:
    """Each trace column's cells, for the columns every row has a cell in; a column that only some rows have, or
    that is not text in every row, is not plain."""
    present: dict[str, list[str]] = {}
    for name in columns:
        cells = [raw.get(name) for raw in raws]
        _need(set(map(type, cells)) == {str})
        if all(cells):
            present[name] = cast("list[str]", cells)  # each cell's type is str, checked above
        elif any(cells):  # some rows have the column, some not: the per-row path
            _not_plain()
    _need("tokens" in present)
    return present


def _split_tokens(cells: list[str]) -> list[list[str]]:
    """Each ``tokens`` cell's texts, split on quotes; a cell with an escape (a quote, a backslash, a newline in a
    token: most real answers have one) or in another layout is decoded as the per-row path decodes it."""
    escaped = bool(_NOT_PLAIN_STRING.search("".join(cells)))
    token_lists = []
    for cell in cells:
        split_tokens = None if escaped and _NOT_PLAIN_STRING.search(cell) else \
            _split_strings(cell, cell.count('"') // 2, None)
        token_lists.append(split_tokens if split_tokens is not None else _decoded_strings(cell, "tokens"))
    return token_lists


def _decoded_strings(cell: str, name: str, n: int | None = None, k: int = 0) -> list[str]:
    """A text column's cell decoded by the codec's :func:`~trace_core.traces.columns.decode_cell`: a list of strings
    (``n`` given: a list of n lists of k strings, flattened); anything else is not plain."""
    try:
        value = decode_cell(cell, name)
    except CellError:
        _not_plain()
    _need(type(value) is list)
    if n is not None:
        _need(len(value) == n and all(type(step) is list and len(step) == k for step in value))
        value = list(_chain(value))
    _need(all(type(text) is str for text in value))
    return value


def _compact(cells: list[str]) -> list[str]:
    """Number cells with ``", "`` between values (``json.dumps``' default layout, other writers' too) as compact text:
    the same numbers, as no number holds a comma; any other space is left for the plain-number check to refuse."""
    return [cell.replace(", ", ",") if ", " in cell else cell for cell in cells]


def _text_vector(cells: list[str], column: TraceColumn, lengths: list[int], total: int) -> np.ndarray:
    inner = _vector_texts(_compact(cells), lengths)
    if inner is None:
        _not_plain()
    return _parsed_numbers(inner, column.dtype, total)


def _text_top_logprobs(present: dict[str, list[str]], lengths: list[int],
                       total: int) -> tuple[np.ndarray | None, int]:
    """The ``top_logprobs`` of every token, (total, k), and k; (None, 0) without the column."""
    if "top_logprobs" not in present:
        return None, 0
    parsed = _matrix_texts(_compact(present["top_logprobs"]), lengths)
    if parsed is None:
        _not_plain()
    inner, k = parsed
    flat = _parsed_numbers(inner, COLUMN_BY_NAME["top_logprobs"].dtype, total * k)
    return flat.reshape(total, k), k


def _text_top_ids(present: dict[str, list[str]], lengths: list[int], total: int, top_logprobs: np.ndarray | None,
                  k: int) -> np.ndarray | None:
    if "top_ids" not in present:
        return None
    _need(top_logprobs is not None)
    parsed = _matrix_texts(_compact(present["top_ids"]), lengths)
    if parsed is None or parsed[1] != k:
        _not_plain()
    return _parsed_numbers(parsed[0], COLUMN_BY_NAME["top_ids"].dtype, total * k).reshape(total, k)


def _text_top_tokens(present: dict[str, list[str]], lengths: list[int], top_logprobs: np.ndarray | None,
                     k: int) -> list[list[str]] | None:
    if "top_tokens" not in present:
        return None
    cells = present["top_tokens"]
    _need(top_logprobs is not None)
    escaped = bool(_NOT_PLAIN_STRING.search("".join(cells)))
    top_strings = []
    for cell, n in zip(cells, lengths, strict=True):
        split_top = None if escaped and _NOT_PLAIN_STRING.search(cell) else _split_strings(cell, n, k)
        top_strings.append(split_top if split_top is not None else _decoded_strings(cell, "top_tokens", n, k))
    return top_strings


# --------------------------------------------------------------------------------------------------
# Front end 2: decoded lists (JSON Lines, Parquet)
# --------------------------------------------------------------------------------------------------

def from_lists(raws: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> Parsed | None:
    """The chunk's cells when they are decoded already (a JSON Lines record's lists): each column's values joined
    into one array; None unless every row has the column as a list of the right shape (``trace_metadata``: an
    object or its JSON text), or none has it."""
    try:
        present = _list_cells(raws, columns)
        token_lists = present["tokens"]
        lengths = list(map(len, token_lists))
        _need(0 not in lengths and set(map(type, _chain(token_lists))) <= {str})
        total = sum(lengths)
        vectors = {name: _list_vector(present[name], COLUMN_BY_NAME[name], lengths, total)
                   for name in VECTOR_COLUMNS if name in present}
        top_logprobs, top_ids, k = _list_top_k(present, lengths, total)
        top_strings = _list_top_tokens(present, lengths, top_logprobs, k)
    except _NotPlain:
        return None
    return Parsed(token_lists, vectors, top_logprobs, top_ids, top_strings, k, _metadatas(present))


def _list_cells(raws: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> dict[str, list[Any]]:
    """Each trace column's cells, for the columns every row has as a list (``trace_metadata``: an object or its
    text); a column that some rows lack, or have in another form, is not plain."""
    present: dict[str, list[Any]] = {}
    for name in columns:
        cells = [raw.get(name) for raw in raws]
        kinds = set(map(type, cells))
        taken = kinds <= {dict, str} and all(cells) if name == "trace_metadata" else kinds == {list}
        if taken:
            present[name] = cells
        elif kinds != {type(None)}:  # some rows have it, some not, or in another form: the per-row path
            _not_plain()
    _need("tokens" in present)
    return present


def _numbers(items: Iterable[Any], column: TraceColumn, count: int) -> np.ndarray:
    """``count`` Python numbers as one array, converted as ``np.array(list, dtype)`` converts them (the per-row
    path); not plain unless each is of a type that needs no per-value check and converts (an int beyond int64, or
    beyond float64, does not), or is an id written as a float (:func:`_integral`)."""
    values = list(items)
    _need(len(values) == count)
    kinds = set(map(type, values))
    try:
        if kinds <= column.py_types:
            return np.fromiter(values, dtype=column.dtype, count=count)
        _need(column.element == "int" and kinds <= {int, float})
        return _integral(values)
    except (OverflowError, ValueError, TypeError):
        _not_plain()


def _integral(values: list[float | int]) -> np.ndarray:
    """Ids written as floats (a float64 Arrow column, ``7.0`` in JSON), taken when each is an integer that fits in
    int64 by the per-row path's own test (:func:`~trace_core.traces.cells.is_int64`)."""
    _need(all(map(is_int64, values)))
    return np.array([int(v) for v in values], dtype=np.int64)


def _list_vector(cells: list[Any], column: TraceColumn, lengths: list[int], total: int) -> np.ndarray:
    _need(list(map(len, cells)) == lengths)
    return _numbers(_chain(cells), column, total)


def _steps(cells: list[Any], lengths: list[int]) -> list[list[Any]]:
    """A (T, k) column's steps, every row's T lists of k joined; all steps of the chunk have the same k."""
    _need(list(map(len, cells)) == lengths)
    rows = list(_chain(cells))
    _need(set(map(type, rows)) <= {list} and len(set(map(len, rows))) == 1)
    return rows


def _list_top_k(present: dict[str, list[Any]], lengths: list[int],
                total: int) -> tuple[np.ndarray | None, np.ndarray | None, int]:
    """``top_logprobs`` and ``top_ids`` of every token, (total, k), and k; None for a column the chunk lacks. Ids or
    texts without ``top_logprobs`` are taken only as steps with no alternative (k = 0), as the per-row path takes
    them."""
    if "top_logprobs" not in present:
        if "top_ids" not in present and "top_tokens" not in present:
            return None, None, 0
        if "top_ids" in present:
            _need(len(_steps(present["top_ids"], lengths)[0]) == 0)
        return np.zeros((total, 0)), None, 0
    rows = _steps(present["top_logprobs"], lengths)
    k = len(rows[0])
    top_logprobs = _numbers(_chain(rows), COLUMN_BY_NAME["top_logprobs"], total * k).reshape(total, k)
    top_ids = None
    if "top_ids" in present:
        rows = _steps(present["top_ids"], lengths)
        _need(len(rows[0]) == k)
        top_ids = _numbers(_chain(rows), COLUMN_BY_NAME["top_ids"], total * k).reshape(total, k)
    return top_logprobs, top_ids, k


def _list_top_tokens(present: dict[str, list[Any]], lengths: list[int], top_logprobs: np.ndarray | None,
                     k: int) -> list[list[str]] | None:
    if "top_tokens" not in present:
        return None
    _need(top_logprobs is not None)
    rows = _steps(present["top_tokens"], lengths)
    _need(len(rows[0]) == k and set(map(type, _chain(rows))) <= {str})
    return [list(_chain(cell)) for cell in present["top_tokens"]]
