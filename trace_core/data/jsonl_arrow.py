"""JSON Lines read by Arrow's JSON parser, a block of lines at a time, where that is sure to read them as ``json``
does: the fast path's front end for JSON Lines.

``json.loads`` makes a Python object of every number and token text of every line, which is most of the time of
reading a saved API run (a float and a string per alternative of every token). Arrow's parser reads a block of lines
into columns in C++; the block's rows are then :class:`~trace_core.data.read_parquet.ArrowRecord` rows, as a Parquet
batch's are, and :func:`~trace_core.data.read_parquet.from_arrow` decodes their trace cells from the arrays.

Taken only when the block's values are sure to be those ``json`` gives (see :meth:`ArrowLines.records`); otherwise, and
wherever a row's trace cells are looked at one by one (a row the vectorised check refuses, a chunk ``from_arrow``
declines), the line is decoded with ``json`` as the line reader decodes it, so rows, values and messages never
depend on this path.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trace_core.data.read_parquet import ArrowBatch, ArrowRecord, system_pool
from trace_core.data.table import MAX_COLUMNS
from trace_core.traces.cells import loads_checked
from trace_core.traces.columns import TRACE_COLUMNS

__all__ = ["ArrowLines"]

_TRACE_SET = frozenset(TRACE_COLUMNS)
_MAX_DEPTH = 3  # lists in lists: top_logprobs is 2 deep; deeper is left to json (its recursion limit, its message)
# In ``trace_metadata`` a missing key and a null read alike (the field's default): Arrow cannot tell them apart.
_NULL_AS_ABSENT = frozenset({"entropy_k"})
_MAX_NESTING = 64  # lists and objects in one line, at most: deeper lines are left to json
_SAMPLE_LINES = 64  # lines whose types make the block's schema
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}\n")
_STEP = np.zeros(256, dtype=np.int64)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1


class _Declined(Exception):
    """The block is not sure to be read as ``json`` reads it."""


def _need(condition: bool) -> None:
    if not condition:
        raise _Declined


class JsonlBatch(ArrowBatch):
    """An :class:`ArrowBatch` of JSON Lines rows whose cells, when looked at one by one, are those of the row's line
    decoded with ``json`` (not converted from the arrays: a number written ``1`` in a column of floats is the int 1,
    as the line reader gives it)."""

    def __init__(self, names: Sequence[str], arrays: dict[str, Any], lines: Sequence[str],
                 raw_names: dict[str, str]) -> None:
        super().__init__(names, arrays)
        self.lines, self.raw_names = lines, raw_names
        self._decoded: tuple[int, dict[str, Any]] | None = None

    def value(self, name: str, index: int) -> Any:
        if self._decoded is None or self._decoded[0] != index:  # a row's cells are looked at together
            line = self.lines[index]
            line = line[:-1] if line.endswith("\n") else line  # as the line reader cuts it
            line = line[:-1] if line.endswith("\r") else line
            obj, _ = loads_checked(line, strict=False)  # the block parsed: the line is a valid record
            self._decoded = (index, obj)
        return self._decoded[1][self.raw_names[name]]


class ArrowLines:
    """Reads blocks of JSON Lines with Arrow (:meth:`records`), each with the columns and types of the block before
    when they fit, so that they are found once per file rather than once per block.

    ``names`` normalises a key (``read_jsonl._column_name``)."""

    def __init__(self, names: Callable[[str], str]) -> None:
        self.names = names
        self.schema: Any = None
        try:  # without pyarrow every block is read by json
            import pyarrow.json  # noqa: F401
            self.available = True
        except ImportError:
            self.available = False

    def records(self, lines: Sequence[str], max_cell: int | None) -> list[ArrowRecord] | None:
        """The records of ``lines`` (non-blank lines of a JSON Lines file, each with its ending), read by Arrow;
        None unless every value is sure to be what ``json`` gives and every row valid JSON Lines (``max_cell``
        bounds a text cell).

        Taken: every line an object with the same keys, none null, no two naming one column, no key given twice
        (Arrow refuses that), no lone surrogate (refused too), nothing nested over :data:`_MAX_NESTING` deep;
        values of types whose Python value is the ``json`` one: text, int, bool, finite floats (in columns other
        than trace columns none integral, which ``json`` may have read as an int) and lists of them up to 3 deep;
        objects only in ``trace_metadata``, a null in them only where every line gives its key (a missing key reads
        as a null too; ``entropy_k`` reads alike either way); the keys of an object nested in it come in the order of
        the block's first line. No line longer than ``max_cell``, when it is given.
        """
        if not self.available or (max_cell is not None and max(map(len, lines)) > max_cell):
            return None  # a line that long may hold a cell over the bound: the line reader names it, unparsed by Arrow
        import pyarrow as pa

        text = "".join(lines)
        data = text.encode("utf-8")
        try:
            _need(_shallow(data))
            if self.schema is not None:  # the block before's columns, when they fit this block
                with contextlib.suppress(_Declined, pa.ArrowException):
                    return _read(text, data, lines, self.schema, self.names)
            schema = _schema(lines)
            out = _read(text, data, lines, schema, self.names)
        except (_Declined, pa.ArrowException, ValueError, TypeError):
            return None
        self.schema = schema
        return out


def _read(text: str, data: bytes, lines: Sequence[str], schema: Any, names: Callable[[str], str]) -> list[ArrowRecord]:
    """The block's records (``text``: its lines joined, ``data`` encoded), every line read with ``schema`` (a line
    with another key, or a value of another type, fails); declined unless :meth:`ArrowLines.records`' conditions
    hold."""
    import pyarrow as pa
    import pyarrow.json as pj

    pool = system_pool()
    table = pj.read_json(io.BytesIO(data), memory_pool=pool,
                         read_options=pj.ReadOptions(use_threads=False, block_size=max(len(data), 1 << 20) + 1),
                         parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"))
    batches = table.combine_chunks(memory_pool=pool).to_batches()
    raw = list(table.schema.names)
    normalized = [names(name) for name in raw]
    _need(len(batches) == 1 and batches[0].num_rows == len(lines) and len(set(normalized)) == len(normalized))
    columns = dict(zip(normalized, batches[0].columns, strict=True))
    nulls: set[str] = set()  # keys of the metadata's objects that are null somewhere: given, or missing?
    for name, column in columns.items():
        _need(column.null_count == 0)
        _check(column, name, 1, nulls)
    _need(not nulls or _keys_everywhere(text, lines, nulls, _key_nodes(table.schema)))
    lazy = {name: column for name, column in columns.items() if name in _TRACE_SET}
    shared = JsonlBatch(normalized, lazy, lines, dict(zip(normalized, raw, strict=True)))
    plain_names = [name for name in normalized if name not in lazy]
    plain = (pa.RecordBatch.from_arrays([columns[n] for n in plain_names], names=plain_names).to_pylist()
             if plain_names else [{} for _ in lines])
    return [ArrowRecord(cells, shared, i) for i, cells in enumerate(plain)]


def _shallow(data: bytes) -> bool:
    """Whether no line of ``data`` nests lists or objects more than :data:`_MAX_NESTING` deep (brackets inside
    strings count too: a line they make look deeper is left to ``json``). Arrow's parser recurses into each level:
    a line nested a million deep would overflow its stack."""
    brackets = np.frombuffer(data.translate(None, _NOT_BRACKETS), dtype=np.uint8)  # brackets and line ends only
    if not len(brackets):
        return True
    depth = np.cumsum(_STEP[brackets], dtype=np.int64)
    ends = np.flatnonzero(brackets == ord("\n"))
    starts = np.concatenate([[0], ends[ends + 1 < len(brackets)] + 1])
    base = np.concatenate([[0], depth[starts[1:] - 1]])
    return bool((np.maximum.reduceat(depth, starts) - base).max() <= _MAX_NESTING)


def _schema(lines: Sequence[str]) -> Any:
    """The columns and types Arrow finds in the first lines (their keys at most :data:`MAX_COLUMNS` in all), which
    every line of the block must then have: a line with another key is refused by the parser before it can make a
    column (a block whose every line brings new keys would otherwise make a column per key and row)."""
    import pyarrow.json as pj

    sample, keys = [], 0
    for line in lines[:_SAMPLE_LINES]:
        keys += line.count(":")  # at least the number of keys
        if keys > MAX_COLUMNS:
            break
        sample.append(line)
    _need(bool(sample))
    return pj.read_json(io.BytesIO("".join(sample).encode("utf-8")), read_options=pj.ReadOptions(use_threads=False),
                        memory_pool=system_pool()).schema


def _check(array: Any, column: str, depth: int, nulls: set[str]) -> None:
    """Decline unless ``array`` (column ``column``'s values at list depth ``depth``) converts to the values ``json``
    gives; the keys of ``trace_metadata``'s objects that hold a null are added to ``nulls``. (No text cell is over
    ``max_cell_chars``: none is longer than its line, which :meth:`ArrowLines.records` bounds.)"""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind, pool = array.type, system_pool()
    if pa.types.is_floating(kind):
        _need(pa.types.is_float64(kind))
        finite = pc.is_finite(array, memory_pool=pool)
        _need(pc.all(finite).as_py() is not False)  # NaN, Infinity: json's reading of them is its own
        if column not in _TRACE_SET and len(array) > array.null_count:
            integral = pc.equal(pc.floor(array, memory_pool=pool), array, memory_pool=pool)
            _need(not pc.any(integral).as_py())  # 1 and 1.0: json keeps them apart
    elif pa.types.is_list(kind):
        _need(depth < _MAX_DEPTH)
        _check(array.flatten(), column, depth + 1, nulls)
    elif pa.types.is_struct(kind):
        _need(column == "trace_metadata")
        _check_metadata(array, depth == 1, nulls)
    else:
        _need(pa.types.is_string(kind) or pa.types.is_int64(kind) or pa.types.is_boolean(kind)
              or (pa.types.is_null(kind) and depth > 1))


def _check_metadata(array: Any, top: bool, nulls: set[str]) -> None:
    """A ``trace_metadata`` object: each field checked, and each holding a null named in ``nulls`` (Arrow reads a
    missing key as a null: :func:`_keys_everywhere` tells them apart), but ``entropy_k`` at the top, where a null and
    a missing key read alike."""
    import pyarrow as pa

    for i in range(array.type.num_fields):
        field = array.type.field(i)
        child = array.field(i)
        if top and field.name in _NULL_AS_ABSENT:
            _need(pa.types.is_null(field.type) or pa.types.is_int64(field.type))
            continue
        if child.null_count:
            nulls.add(field.name)
        _check(child, "trace_metadata", 2 if top else 3, nulls)


def _key_nodes(schema: Any) -> dict[str, int]:
    """For each key, how many objects of a line hold it: the record (its columns) and the objects of its
    ``trace_metadata`` (the only objects a block read by Arrow may hold), by the schema."""
    import pyarrow as pa

    counts: dict[str, int] = {}

    def add(fields: Any) -> None:
        for field in fields:
            counts[field.name] = counts.get(field.name, 0) + 1
            kind = field.type
            while pa.types.is_list(kind):
                kind = kind.value_type
            if pa.types.is_struct(kind):
                add(kind)

    add(schema)
    return counts


def _keys_everywhere(text: str, lines: Sequence[str], keys: set[str], nodes: dict[str, int]) -> bool:
    """Whether every line of ``text`` (``lines`` joined) gives each of ``keys`` in every object whose fields name it
    (``nodes``), so that a null Arrow read there was written null, not left out. A key is found as ``"key":``, its
    opening quote not escaped: in valid JSON that is an object's key and nothing else (a key written with an escape
    is not found, and the block is left to json)."""
    starts = np.concatenate([[0], np.cumsum([len(line) for line in lines])[:-1]])
    for key in keys:
        pattern = re.compile(r'(?<!\\)"' + re.escape(key) + r'"[ \t\r\n]*:')
        found = np.fromiter((m.start() for m in pattern.finditer(text)), dtype=np.int64)
        per_line = np.bincount(np.searchsorted(starts, found, side="right") - 1, minlength=len(lines))
        if not bool((per_line == nodes.get(key, 0)).all()):
            return False
    return True
