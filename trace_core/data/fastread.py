"""Decoding the trace cells of many rows at once: the reader's fast path.

A chunk of rows is decoded column by column. CSV cells (JSON text): the numbers of a column's cells are joined and
parsed in one call (pyarrow, else numpy), the token texts split on their quotes. Decoded cells (a JSON Lines
record's lists, Parquet's): each column's values are joined into one array. Then every check of
:func:`~trace_core.data.codec.trace_from_cells` is made on the whole chunk's arrays at once. Only text cells in the
plain form that ``write_dataset`` produces are taken (compact JSON: no spaces, no escapes, numbers in JSON's grammar),
and only lists of plain Python numbers and strings; anything else, and every row that any check would refuse or that
needs a rarer rule (alternatives dropped below -MAX_NATS, a step whose mass needs its ids looked at, ...), is left to
the per-row path (None), which decodes it as before and names its bad cells exactly.
``tests/trace_core/data/test_fastread.py`` checks that both paths give the same traces and the same errors; a change
to the codec's rules must be made here too.
"""

from __future__ import annotations

import itertools
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from ..logprobs import ENTROPY_TOLERANCE, MAX_ENTROPY_NATS, MAX_NATS, TOP_K_MASS_TOLERANCE, entropy_from_top_k
from ..trace import LOGPROB_TOLERANCE, Trace, TraceMetadata
from ._values import CellError, json_cell
from .codec import (
    _BY_NAME,
    _DTYPES,
    _PY_TYPES,
    _vocab_size,
)

_FAST_COLUMNS = frozenset({"tokens", "token_ids", "surprisal", "logprobs", "entropy", "top_ids", "top_logprobs",
                           "top_tokens", "ranks", "trace_metadata"})
_COMMA, _MINUS, _DOT, _ZERO = b",-.0"


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


_NOT_PLAIN_STRING = re.compile(r'[\\\x00-\x1f]')


@dataclass
class FastRow:
    """One row's trace parts, decoded and checked by :func:`decode_chunk`; :func:`build_trace` makes the Trace."""

    tokens: tuple[str, ...]
    token_ids: np.ndarray
    surprisal: np.ndarray
    entropy: np.ndarray | None
    top_ids: np.ndarray
    top_logprobs: np.ndarray
    ranks: np.ndarray | None
    metadata: TraceMetadata
    top_tokens: tuple[tuple[str, ...], ...] | None


def build_trace(row: FastRow, *, prompt: str, answer: str) -> Trace:
    """The Trace of a row that :func:`decode_chunk` decoded: what :func:`trace_from_cells` returns for its cells."""
    return Trace._from_checked(prompt=prompt, answer=answer, token_ids=row.token_ids, tokens=row.tokens,
                               surprisal=row.surprisal, entropy=row.entropy, top_ids=row.top_ids,
                               top_logprobs=row.top_logprobs, ranks=row.ranks, metadata=row.metadata,
                               top_tokens=row.top_tokens)


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
    if _ARROW:
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


_ARROW = True  # numbers parsed with pyarrow when it is installed


def _vector_texts(texts: list[str], lengths: list[int]) -> list[str] | None:
    """Each 1-D cell's numbers without its brackets; None unless each is ``[...]`` with one number per token."""
    inner = []
    for t, n in zip(texts, lengths):
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
    for t, n in zip(texts, lengths):
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
    of n strings (of n lists of k strings)."""
    parts = text.split('"')
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


def _row_flags(bad: np.ndarray, owner: np.ndarray, n_rows: int) -> np.ndarray:
    """Rows (of ``n_rows``) that own at least one element where ``bad`` holds."""
    flags = np.zeros(n_rows, dtype=bool)
    flags[owner[bad]] = True
    return flags


@dataclass
class _Parsed:
    """A chunk's trace cells as arrays, before any check: what both front ends (text cells, decoded lists) give."""

    token_lists: list[list[str]]  # per row
    vectors: dict[str, np.ndarray]  # per-token columns, every row's values joined
    top_logprobs: np.ndarray | None  # (total tokens, k)
    top_ids: np.ndarray | None
    top_strings: list[list[str]] | None  # per row, its T x k texts flattened
    k: int
    metadatas: list[TraceMetadata | None] | None  # None: no trace_metadata column; an item None: the per-row path


def decode_chunk(raws: Sequence[Mapping[str, Any]], columns: Sequence[str],
                 strings: dict[str, str]) -> list[FastRow | None] | None:
    """Decode and check the trace cells of many rows at once.

    Two forms are taken: every trace cell a CSV text cell (JSON text), or every one already decoded (a JSON Lines
    record's lists, a ``trace_metadata`` object; Parquet's lists), column by column.

    Parameters
    ----------
    raws : sequence of mappings
        The rows' cells (column name -> str, or -> list / dict).
    columns : sequence of str
        The trace columns the table has.
    strings : dict
        Token text -> the one str object kept for it (shared with the per-row path).

    Returns
    -------
    list of FastRow or None, or None
        Per row, its checked trace parts, or None where the row needs the per-row path (:func:`trace_from_cells`),
        which names any bad cell; None for the whole chunk when its cells are not all in one plain form.
    """
    if not raws or "tokens" not in columns or not set(columns) <= _FAST_COLUMNS:
        return None
    with np.errstate(all="ignore"):  # values that overflow here are refused rows: the per-row path reports them
        kinds = {type(raw.get("tokens")) for raw in raws}
        if kinds == {str}:
            parsed = _from_text(raws, columns)
        elif kinds == {list}:
            parsed = _from_lists(raws, columns)
        else:
            return None
        return None if parsed is None else _checked(parsed, strings)


def _from_text(raws: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> _Parsed | None:  # noqa: C901 (fast path: one early exit per case it leaves to the full reader)
    """The chunk's cells parsed from their JSON text: numbers joined and parsed in one call, token texts split on
    their quotes; None unless every cell is in the plain form ``write_dataset`` writes."""
    present: dict[str, list[str]] = {}
    for name in columns:
        cells = [raw.get(name) for raw in raws]
        if set(map(type, cells)) != {str}:
            return None
        if all(cells):
            present[name] = cast("list[str]", cells)  # each cell's type is str, checked above
        elif any(cells):  # some rows have the column, some not: the per-row path
            return None
    if "tokens" not in present or ("logprobs" in present and "surprisal" in present):
        return None

    # Token texts: split on quotes when no cell has an escape or a control character.
    token_cells = present["tokens"]
    if _NOT_PLAIN_STRING.search("".join(token_cells)):
        return None
    token_lists: list[list[str]] = []
    for cell in token_cells:
        split_tokens = _split_strings(cell, cell.count('"') // 2, None)
        if split_tokens is None:
            return None
        token_lists.append(split_tokens)
    lengths = [len(t) for t in token_lists]
    total = sum(lengths)

    vectors: dict[str, np.ndarray] = {}
    for name in ("token_ids", "surprisal", "logprobs", "entropy", "ranks"):
        if name in present:
            inner = _vector_texts(present[name], lengths)
            arr = None if inner is None else _parse_numbers(inner, _DTYPES[_BY_NAME[name].element])
            if arr is None or arr.size != total:
                return None
            vectors[name] = arr
    k = 0
    top_logprobs = top_ids = None
    if "top_logprobs" in present:
        parsed = _matrix_texts(present["top_logprobs"], lengths)
        if parsed is None:
            return None
        inner, k = parsed
        flat = _parse_numbers(inner, np.float64)
        if flat is None or flat.size != total * k:
            return None
        top_logprobs = flat.reshape(total, k)
    if "top_ids" in present:
        if top_logprobs is None:
            return None
        parsed = _matrix_texts(present["top_ids"], lengths)
        if parsed is None or parsed[1] != k:
            return None
        flat = _parse_numbers(parsed[0], np.int64)
        if flat is None or flat.size != total * k:
            return None
        top_ids = flat.reshape(total, k)
    top_strings: list[list[str]] | None = None
    if "top_tokens" in present:
        top_cells = present["top_tokens"]
        if top_logprobs is None or _NOT_PLAIN_STRING.search("".join(top_cells)):
            return None
        top_strings = []
        for cell, n in zip(top_cells, lengths):
            split_top = _split_strings(cell, n, k)
            if split_top is None:
                return None
            top_strings.append(split_top)
    metadatas = [_fast_metadata(text) for text in present["trace_metadata"]] if "trace_metadata" in present else None
    return _Parsed(token_lists, vectors, top_logprobs, top_ids, top_strings, k, metadatas)


def _numbers(items: Any, element: str, count: int) -> np.ndarray | None:
    """``count`` Python numbers as one array, converted as ``np.array(list, dtype)`` converts them (the per-row
    path); None unless each is of a type that needs no per-value check and converts (an int beyond int64, or beyond
    float64, does not)."""
    values = list(items)
    if len(values) != count or not set(map(type, values)) <= _PY_TYPES[element]:
        return None
    try:
        return np.fromiter(values, dtype=_DTYPES[element], count=count)
    except (OverflowError, ValueError, TypeError):
        return None


def _from_lists(raws: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> _Parsed | None:  # noqa: C901 (fast path: one early exit per case it leaves to the full reader)
    """The chunk's cells when they are decoded already (a JSON Lines record's lists): each column's values joined
    into one array; None unless every row has the column as a list of the right shape (``trace_metadata``: an
    object or its JSON text), or none has it."""
    present: dict[str, list[Any]] = {}
    for name in columns:
        cells = [raw.get(name) for raw in raws]
        kinds = set(map(type, cells))
        taken = kinds <= {dict, str} and all(cells) if name == "trace_metadata" else kinds == {list}
        if taken:
            present[name] = cells
        elif kinds != {type(None)}:  # some rows have it, some not, or in another form: the per-row path
            return None
    if "tokens" not in present or ("logprobs" in present and "surprisal" in present):
        return None
    token_lists = present["tokens"]
    lengths = list(map(len, token_lists))
    if 0 in lengths or not set(map(type, itertools.chain.from_iterable(token_lists))) <= {str}:
        return None
    total = sum(lengths)
    chain = itertools.chain.from_iterable

    vectors: dict[str, np.ndarray] = {}
    for name in ("token_ids", "surprisal", "logprobs", "entropy", "ranks"):
        if name in present:
            cells = present[name]
            if list(map(len, cells)) != lengths:
                return None
            arr = _numbers(chain(cells), _BY_NAME[name].element, total)
            if arr is None:
                return None
            vectors[name] = arr

    def steps(name: str) -> list[list[Any]] | None:  # a (T, k) column's rows, each row's T lists of k
        cells = present[name]
        if list(map(len, cells)) != lengths:
            return None
        rows = list(chain(cells))
        if not set(map(type, rows)) <= {list} or len(set(map(len, rows))) != 1:
            return None
        return rows

    k = 0
    top_logprobs = top_ids = None
    if "top_logprobs" in present:
        rows = steps("top_logprobs")
        if rows is None:
            return None
        k = len(rows[0])
        flat = _numbers(chain(rows), "float", total * k)
        if flat is None:
            return None
        top_logprobs = flat.reshape(total, k)
    if "top_ids" in present:
        rows = steps("top_ids")
        if top_logprobs is None or rows is None or len(rows[0]) != k:
            return None
        flat = _numbers(chain(rows), "int", total * k)
        if flat is None:
            return None
        top_ids = flat.reshape(total, k)
    top_strings = None
    if "top_tokens" in present:
        rows = steps("top_tokens")
        if top_logprobs is None or rows is None or len(rows[0]) != k:
            return None
        if not set(map(type, chain(rows))) <= {str}:
            return None
        top_strings = [list(chain(cell)) for cell in present["top_tokens"]]
    metadatas = [_fast_metadata(v) for v in present["trace_metadata"]] if "trace_metadata" in present else None
    return _Parsed(token_lists, vectors, top_logprobs, top_ids, top_strings, k, metadatas)


def _checked(parsed: _Parsed, strings: dict[str, str]) -> list[FastRow | None] | None:  # noqa: C901 (fast path: one early exit per case it leaves to the full reader)
    """The checks of :func:`trace_from_cells`, on every row's values at once: a row that any would refuse is left to
    the per-row path (None); the others become FastRows."""
    token_lists, vectors, k = parsed.token_lists, parsed.vectors, parsed.k
    top_logprobs, top_ids, top_strings = parsed.top_logprobs, parsed.top_ids, parsed.top_strings
    given = parsed.metadatas is not None  # else each row gets TraceMetadata(source="imported"), made once below
    metadatas: list[TraceMetadata | None] = list(parsed.metadatas) if parsed.metadatas is not None else []
    n_rows = len(token_lists)
    lengths = [len(t) for t in token_lists]
    total = sum(lengths)
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    owner = np.repeat(np.arange(n_rows), lengths)
    bad = np.zeros(n_rows, dtype=bool)

    for name, arr in vectors.items():
        if name != "token_ids":
            bad |= _row_flags(~np.isfinite(arr), owner, n_rows)
    surprisal = vectors.get("surprisal")
    if surprisal is not None:
        bad |= _row_flags((surprisal < -LOGPROB_TOLERANCE) | (surprisal > MAX_NATS), owner, n_rows)
    if "logprobs" in vectors:
        logprobs = vectors["logprobs"]
        bad |= _row_flags((logprobs > LOGPROB_TOLERANCE) | (logprobs < -MAX_NATS), owner, n_rows)
        surprisal = 0.0 - logprobs  # +0.0 for a log-prob of 0 (as codec)
    if surprisal is None:
        return None
    if "entropy" in vectors:
        entropy = vectors["entropy"]
        bad |= _row_flags((entropy < -LOGPROB_TOLERANCE) | (entropy > MAX_ENTROPY_NATS), owner, n_rows)
    if "ranks" in vectors:
        bad |= _row_flags(vectors["ranks"] < 1, owner, n_rows)
    estimated = None
    if top_logprobs is not None:
        step_bad = ~np.isfinite(top_logprobs).all(axis=1) | (top_logprobs > LOGPROB_TOLERANCE).any(axis=1)
        step_bad |= (top_logprobs < -MAX_NATS).any(axis=1)
        step_bad |= (np.diff(top_logprobs, axis=1) > 1e-12).any(axis=1)
        # mass: a step whose alternatives plus the chosen token may hold more than 1 + tolerance is left to the
        # per-row path unless the chosen token is surely among the alternatives and they hold clearly less
        alternatives = np.exp(top_logprobs).sum(axis=1)
        chosen = np.exp(-surprisal)
        doubtful = alternatives + chosen > 1.0 + TOP_K_MASS_TOLERANCE - 1e-9
        if doubtful.any():
            token_ids = vectors.get("token_ids")
            if token_ids is None or top_ids is None:
                among = np.ones(total, dtype=bool)
            else:
                ids_known = (token_ids >= 0) & (top_ids >= 0).all(axis=1)
                among = ~ids_known | (top_ids == token_ids[:, None]).any(axis=1)
            step_bad |= doubtful & ~(among & (alternatives < 1.0 + TOP_K_MASS_TOLERANCE - 1e-9))
        bad |= _row_flags(step_bad, owner, n_rows)
        if "entropy" not in vectors and k > 0:
            estimated = entropy_from_top_k(np.where(step_bad[:, None], -1.0, top_logprobs))

    limits: np.ndarray = np.full(n_rows, np.inf)  # a given entropy's bound where the vocabulary size is known
    vocab = np.full(n_rows, np.iinfo(np.int64).max)  # ids must be below it, ranks at most it
    for i, meta in enumerate(metadatas):
        try:
            vocab_size = None if meta is None else _vocab_size(meta)
        except CellError:
            metadatas[i] = None
            continue
        if vocab_size is not None:
            limits[i] = math.log(vocab_size) + ENTROPY_TOLERANCE
            vocab[i] = vocab_size
    if "entropy" in vectors:
        bad |= _row_flags(vectors["entropy"] > np.repeat(limits, lengths), owner, n_rows)
    per_token = np.repeat(vocab, lengths)
    if "token_ids" in vectors:
        bad |= _row_flags(vectors["token_ids"] >= per_token, owner, n_rows)
    if top_ids is not None and k > 0:
        bad |= _row_flags(np.asarray((top_ids >= per_token[:, None]).any(axis=1)), owner, n_rows)
    if "ranks" in vectors:
        bad |= _row_flags(vectors["ranks"] > per_token, owner, n_rows)

    # Every trace of the chunk has the same entropy source: given, estimated from its top k, or absent.
    entropies = vectors.get("entropy", estimated)
    source: dict[str, Any] = {}
    if entropies is None:
        source = {"entropy_source": "absent", "entropy_k": None}
    elif "entropy" not in vectors:
        source = {"entropy_source": "top_k", "entropy_k": k}
    out: list[FastRow | None] = []
    for i in range(n_rows):
        row_meta = metadatas[i] if given else None
        if bad[i] or (given and row_meta is None):
            out.append(None)
            continue
        a, b = bounds[i], bounds[i + 1]
        n = b - a
        if row_meta is not None:  # given
            meta = replace(row_meta, **source) if source else row_meta
        else:  # the default with its entropy source, made once (not made, then replaced)
            meta = TraceMetadata(source="imported", **source)
        tokens = token_lists[i]
        top = None
        if top_strings is not None:
            shared = list(map(strings.setdefault, top_strings[i], top_strings[i]))
            top = tuple(zip(*[iter(shared)] * k)) if k else ((),) * n
        ids = vectors["token_ids"][a:b] if "token_ids" in vectors else np.full(n, -1, dtype=np.int64)
        out.append(FastRow(
            tokens=tuple(map(strings.setdefault, tokens, tokens)),
            token_ids=ids,
            surprisal=surprisal[a:b],
            entropy=None if entropies is None else entropies[a:b],
            top_ids=top_ids[a:b] if top_ids is not None else np.full((n, k), -1, dtype=np.int64),
            top_logprobs=top_logprobs[a:b] if top_logprobs is not None else np.zeros((n, 0)),
            ranks=vectors["ranks"][a:b] if "ranks" in vectors else None,
            metadata=meta,
            top_tokens=top))
    return out


def _fast_metadata(value: str | Mapping[str, Any]) -> TraceMetadata | None:
    """The TraceMetadata of a ``trace_metadata`` cell (JSON text, or the object decoded); None when the per-row path
    would refuse it (it says why)."""
    try:
        meta = json_cell(value, "trace_metadata")
        if not isinstance(meta, Mapping):
            return None
        return TraceMetadata.from_dict(meta)
    except (CellError, TypeError, ValueError):
        return None
