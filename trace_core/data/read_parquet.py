"""Reading Parquet: the metadata checked before any page is decompressed (rows, decompressed bytes, the header),
then rows decoded batch by batch, each batch's decoded size checked before it is decoded; a row with a string cell
over ``max_cell_chars`` (binary: bytes) is rejected. The typed columns are read again for the dataset's frame.

A row's trace cells stay in its batch's Arrow arrays until one is looked at (:class:`ArrowRecord`): converting them
to Python values (a float object per token) costs more than all the rest of reading, and the fast path does not
need them: :func:`from_arrow` decodes the trace cells of a chunk of rows straight from the arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import pandas as pd

from trace_core.data.errors import DatasetError, RowError
from trace_core.data.fastparse import VECTOR_COLUMNS, Parsed, metadatas_of
from trace_core.data.source import Reporter, Source, cell_too_long, too_big
from trace_core.data.table import Row, Table, no_rows, normalize_columns, too_many
from trace_core.traces.columns import COLUMN_BY_NAME, TRACE_COLUMNS, TraceColumn

__all__ = ["ArrowBatch", "ArrowRecord", "from_arrow", "parquet_table", "system_pool"]

PARQUET_BATCH = 4096
_TRACE_SET = frozenset(TRACE_COLUMNS)
_EXACT_INTS = 2**53  # ints up to this size are floats exactly: converted alike by numpy and by float()


def parquet_table(src: Source, *, max_rows: int | None, report: Reporter) -> Table:
    """The Parquet file ``src`` as a :class:`Table`: its metadata and schema checked here, its rows decoded batch by
    batch as ``rows`` is consumed, and its typed columns as pandas converts them (``Table.frame``)."""
    file = _ParquetFile.open(src, max_rows)
    table = Table(columns=file.columns, rows=iter(()), frame=file.frame,
                  again=lambda: parquet_table(src, max_rows=max_rows, report=report))
    table.rows = file.rows(table.errors, report)
    return table


def _unreadable(exc: Exception) -> DatasetError:
    return DatasetError(f"the file is not a readable Parquet file ({exc}); expected a Parquet table")


@dataclass(frozen=True)
class _ParquetFile:
    """A Parquet file whose metadata passed the checks made before any page is decompressed."""

    src: Source
    num_rows: int
    schema: Any           # the Arrow schema
    raw_names: list[str]  # the column names as stored
    columns: list[str]    # normalized
    # Text columns stored with a dictionary are read as dictionaries, so that a batch's size once decoded is known
    # before it is decoded (one stored value may be repeated in every row); see _decoded_size.
    as_dictionary: list[str]

    @classmethod
    def open(cls, src: Source, max_rows: int | None) -> _ParquetFile:
        """Read the metadata: refuse more rows than ``max_rows``, more decompressed bytes than ``src.max_bytes``
        and a header that a table cannot have."""
        pa, pq = _pyarrow()
        try:
            with src.open() as stream:
                metadata = pq.ParquetFile(stream).metadata
        except (pa.ArrowException, OSError) as exc:
            raise _unreadable(exc) from None
        too_many(max_rows, metadata.num_rows)
        groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
        if src.max_bytes is not None:  # refused before a page is decompressed: a few KB may unpack to gigabytes
            total = sum(group.total_byte_size for group in groups)
            if total > src.max_bytes:
                raise too_big(src, total)
        schema = metadata.schema.to_arrow_schema()
        raw_names = list(schema.names)
        columns = normalize_columns(raw_names)
        texts = {name for name in raw_names if _is_text(schema.field(name).type)}
        as_dictionary = sorted({chunk.path_in_schema for group in groups
                                for chunk in map(group.column, range(group.num_columns))
                                if chunk.has_dictionary_page and chunk.physical_type == "BYTE_ARRAY"
                                and chunk.path_in_schema.split(".")[0] in texts})
        return cls(src, metadata.num_rows, schema, raw_names, columns, as_dictionary)

    def frame(self, wanted: Sequence[str]) -> pd.DataFrame:
        """The typed columns named in ``wanted``, as pandas converts them."""
        _, pq = _pyarrow()
        names = [name for name in self.columns if name in set(wanted)]
        with self.src.open() as stream:
            table = pq.ParquetFile(stream).read(columns=[self.raw_names[self.columns.index(name)] for name in names])
        return table.rename_columns(names).to_pandas()

    def _bytes_of(self, rows: int) -> int:
        """Progress in bytes, like text files: the file's size times the share of the rows read."""
        return (self.src.size or 0) * rows // max(self.num_rows, 1)

    def rows(self, row_errors: list[RowError], report: Reporter) -> Iterator[Row]:
        """One row per record, numbered from 1; a row with a text cell over ``max_cell`` is rejected. Its trace
        cells stay in the batch's arrays until one is looked at (:class:`ArrowRecord`)."""
        src, count = self.src, 0
        for batch in self._batches():
            long = _long_cells(batch, src.max_cell) if src.max_cell is not None else {}
            for i, record in enumerate(_records(batch)):
                count += 1
                if i in long:
                    row_errors.extend(RowError(count, name, cell_too_long(chars, src.max_cell or 0))
                                      for name, chars in long[i])
                    yield count, None
                else:
                    yield count, record
            report(self._bytes_of(count), src.size)
        report(self._bytes_of(count), src.size, final=True)
        if not count:
            raise no_rows(self.columns)

    def _batches(self) -> Iterator[Any]:
        """The record batches with their dictionaries decoded, each refused before it is decoded when the bytes
        decoded so far would pass ``max_bytes``."""
        pa, pq = _pyarrow()
        used, schema = 0, self.schema
        with self.src.open() as stream:
            try:
                batches = pq.ParquetFile(stream, read_dictionary=self.as_dictionary or None).iter_batches(
                    batch_size=PARQUET_BATCH)
            except (pa.ArrowException, OSError) as exc:
                raise _unreadable(exc) from None
            while True:
                try:
                    batch = next(batches, None)
                except (pa.ArrowException, OSError) as exc:  # a damaged page, found when it is reached
                    raise _unreadable(exc) from None
                if batch is None:
                    return
                used += sum(map(_decoded_size, batch.columns))
                if self.src.max_bytes is not None and used > self.src.max_bytes:  # before the batch is decoded
                    raise too_big(self.src)
                yield pa.RecordBatch.from_arrays(
                    [c if c.type == schema.field(i).type else c.cast(schema.field(i).type)  # dictionaries decoded
                     for i, c in enumerate(batch.columns)], names=self.columns)


def _records(batch: Any) -> list[ArrowRecord]:
    """The batch's rows: the cells of its trace columns left in their arrays, the others converted."""
    lazy = [name for name in batch.schema.names if name in _TRACE_SET]
    shared = ArrowBatch(batch.schema.names, {name: batch.column(name) for name in lazy})
    others = batch.drop_columns(lazy)
    plain = others.to_pylist() if others.num_columns else [{} for _ in range(batch.num_rows)]
    return [ArrowRecord(cells, shared, i) for i, cells in enumerate(plain)]


def _pyarrow() -> tuple[Any, Any]:
    """``pyarrow`` and ``pyarrow.parquet``, imported when a Parquet file is read."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("reading Parquet needs pyarrow: pip install pyarrow") from exc
    return pa, pq


def system_pool() -> Any:
    """The C library's allocator, for the arrays the fast path makes and drops a chunk at a time: pyarrow's default
    (mimalloc) keeps what they freed, so a read's resident memory would grow by the largest of them for good."""
    import pyarrow as pa

    return pa.system_memory_pool()


def _is_text(kind: Any) -> bool:
    """A string or binary Arrow type, or a list of them (a Parquet column whose values may be read as dictionaries)."""
    import pyarrow as pa

    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind) or (
        pa.types.is_large_binary(kind))


def _decoded_size(array: Any) -> int:
    """The bytes ``array`` takes once its dictionaries are decoded, found without decoding them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_dictionary(kind):  # each row's value's bytes, and its offset
        lengths = pc.take(pc.binary_length(array.dictionary), array.indices)
        return int(pc.sum(lengths).as_py() or 0) + 8 * len(array)
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and pa.types.is_dictionary(kind.value_type):
        return 8 * (len(array) + 1) + _decoded_size(array.flatten())
    return int(array.nbytes)


def _long_cells(batch: Any, max_cell: int) -> dict[int, list[tuple[str, int]]]:
    """The rows of ``batch`` (by index) holding a string or binary cell longer than ``max_cell``, with each such
    cell's column and length (characters; bytes for binary)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    long: dict[int, list[tuple[str, int]]] = {}
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        kind = column.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            lengths = pc.utf8_length(column)
        elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            lengths = pc.binary_length(column)
        else:
            continue
        if (pc.max(lengths).as_py() or 0) > max_cell:
            values = lengths.to_pylist()
            for i, chars in enumerate(values):
                if chars is not None and chars > max_cell:
                    long.setdefault(i, []).append((name, chars))
    return long


# --------------------------------------------------------------------------------------------------
# Rows whose trace cells stay in their batch's arrays
# --------------------------------------------------------------------------------------------------

class ArrowBatch:
    """The columns of one record batch that its rows leave as Arrow arrays (``arrays``, by normalized name), and
    the names of all its columns, in order."""

    def __init__(self, names: Sequence[str], arrays: Mapping[str, Any]) -> None:
        self.names = tuple(names)
        self.arrays = dict(arrays)
        self._values: dict[str, list[Any]] = {}

    def value(self, name: str, index: int) -> Any:
        """Row ``index``'s cell of column ``name`` as a Python value (the column converted once, when first
        asked)."""
        values = self._values.get(name)
        if values is None:
            values = self._values[name] = self.arrays[name].to_pylist()
        return values[index]


class ArrowRecord(Mapping[str, Any]):
    """One row of a record batch: column name -> cell, as a record of ``RecordBatch.to_pylist`` holds it.

    ``plain`` holds the cells converted when the row was read; the others are converted from ``batch`` when first
    looked at. ``batch`` and ``index`` (the row's place in it) let the fast path find the arrays of many rows."""

    __slots__ = ("_plain", "batch", "index")

    def __init__(self, plain: dict[str, Any], batch: ArrowBatch, index: int) -> None:
        self._plain = plain
        self.batch = batch
        self.index = index

    def __getitem__(self, name: str) -> Any:
        if name in self._plain:
            return self._plain[name]
        if name not in self.batch.arrays:
            raise KeyError(name)
        return self.batch.value(name, self.index)

    def __contains__(self, name: object) -> bool:
        return name in self._plain or name in self.batch.arrays

    def __iter__(self) -> Iterator[str]:
        return iter(self.batch.names)

    def __len__(self) -> int:
        return len(self.batch.names)

    def __repr__(self) -> str:
        return f"ArrowRecord(row {self.index} of a batch of columns {list(self.batch.names)})"


# --------------------------------------------------------------------------------------------------
# The fast path's front end for Parquet: a chunk's trace cells from its batch's arrays
# --------------------------------------------------------------------------------------------------

_Pick = Callable[[Any], Any]  # a batch's column -> the chunk's rows of it


class _Declined(Exception):
    """The chunk is not sure to be read as from_lists reads it: left to from_lists."""


def _need(condition: bool) -> None:
    if not condition:
        raise _Declined


def _decline() -> NoReturn:
    raise _Declined


def from_arrow(raws: Sequence[Mapping[str, Any]], columns: Sequence[str], strings: dict[str, str]) -> Parsed | None:
    """The trace cells of ``raws``, rows of one record batch (:class:`ArrowRecord`), decoded from the batch's arrays
    (each column's flat values and list lengths), with no Python object per number: the fast path's front end for
    Parquet.

    It gives exactly what :func:`~trace_core.data.fastparse.from_lists` gives for the same rows' cells as
    ``to_pylist`` converts them, or None wherever it is not sure to; its caller then goes on as without it (the cells
    converted, ``from_lists``, the per-row path), so results and messages never depend on it. Taken: each trace
    column null in every row of the chunk (as if absent) or a list in every row, with nothing null inside; per-token
    lists as long as the tokens'; one k over the chunk; token texts as strings; numbers of a type that the column
    spec (:data:`~trace_core.traces.columns.COLUMN_BY_NAME`) takes without a per-value check and that convert as
    ``np.array`` converts their Python values: ints (but uint64) into int columns; 64- and 32-bit floats, and ints
    within 2**53 (exact as floats), into float columns. ``trace_metadata`` cells are converted (one per row) and
    taken as ``from_lists`` takes them. Anything else (nulls, other lengths, ragged alternatives, JSON text, other
    types, rows of several batches) gives None.

    Parameters
    ----------
    raws : sequence of mappings
        The chunk's rows, in order.
    columns : sequence of str
        The trace columns the table has.
    strings : dict
        Token text -> the one str object kept for it (the reader's): each distinct text of the chunk is looked up
        once, and the texts given are those objects (``Parsed.shared``).
    """
    rows = _batch_rows(raws)
    if rows is None:
        return None
    import pyarrow as pa

    batch, pick = rows
    try:
        present = _present(batch, pick, columns)
        tokens = present["tokens"]
        lengths = _lengths(tokens)
        _need(bool(lengths.min() > 0))
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        total = bounds[-1]
        vectors = {name: _vector(present[name], COLUMN_BY_NAME[name], lengths)
                   for name in VECTOR_COLUMNS if name in present}
        top_logprobs, top_ids, k = _top_k(present, lengths, total)
        top_strings = _top_tokens(present, lengths, bounds, k, strings) if "top_tokens" in present else None
        _need(top_strings is None or top_logprobs is not None)
        metadatas = _metadatas(present["trace_metadata"]) if "trace_metadata" in present else None
        token_lists = _split(_texts(tokens.flatten(), strings), bounds)
    except (_Declined, pa.ArrowException):
        return None
    return Parsed(token_lists, vectors, top_logprobs, top_ids, top_strings, k, metadatas, shared=True)


def _batch_rows(raws: Sequence[Mapping[str, Any]]) -> tuple[ArrowBatch, _Pick] | None:
    """The record batch every row of ``raws`` comes from, and how to take the rows' part of its columns (a slice
    when they follow each other, as they usually do); None unless they all come from one."""
    first = raws[0] if raws else None
    if not isinstance(first, ArrowRecord):
        return None
    batch = first.batch
    records = [raw for raw in raws if isinstance(raw, ArrowRecord) and raw.batch is batch]
    if len(records) != len(raws):
        return None
    indices = [record.index for record in records]
    start, count = indices[0], len(indices)
    if indices == list(range(start, start + count)):
        return batch, lambda array: array.slice(start, count)
    import pyarrow as pa
    import pyarrow.compute as pc

    taken = pa.array(indices, type=pa.int64())
    return batch, lambda array: pc.take(array, taken, memory_pool=system_pool())


def _present(batch: ArrowBatch, pick: _Pick, columns: Sequence[str]) -> dict[str, Any]:
    """The chunk's part of each trace column that it has: a column null in every row is left out (as from_lists
    leaves out a column whose cells are all None); one null in some rows only, or not of lists, is declined."""
    import pyarrow as pa

    present = {}
    for name in columns:
        if name not in batch.arrays:
            continue
        array = pick(batch.arrays[name])
        if array.null_count == len(array):
            continue
        if name != "trace_metadata":
            _need(array.null_count == 0 and (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)))
        present[name] = array
    _need("tokens" in present)
    return present


def _lengths(array: Any) -> np.ndarray:
    import pyarrow.compute as pc

    return np.asarray(pc.list_value_length(array, memory_pool=system_pool()).to_numpy(zero_copy_only=False),
                      dtype=np.int64)


def _numbers(values: Any, column: TraceColumn) -> np.ndarray:
    """A column's flat values as the column's dtype, converted as from_lists converts their Python values."""
    import pyarrow as pa

    if len(values) == 0:  # no values: from_lists takes them whatever their type
        return np.zeros(0, dtype=column.dtype)
    kind = values.type
    _need(values.null_count == 0)
    integer = pa.types.is_integer(kind) and not pa.types.is_uint64(kind)  # uint64 may pass int64: not sure
    if column.element == "int" and integer:
        return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)
    if column.element == "float" and (pa.types.is_float64(kind) or pa.types.is_float32(kind)):
        return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)
    if column.element == "float" and integer:
        ints = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)
        _need(bool(((ints >= -_EXACT_INTS) & (ints <= _EXACT_INTS)).all()))
        return ints.astype(np.float64)
    _decline()


def _vector(array: Any, column: TraceColumn, lengths: np.ndarray) -> np.ndarray:
    """A per-token column: one value per token of each row."""
    _need(np.array_equal(_lengths(array), lengths))
    return _numbers(array.flatten(), column)


def _steps(array: Any, lengths: np.ndarray) -> tuple[Any, int]:
    """A (T, k) column's steps (one list per token of each row, none null) and k, the same for every step."""
    import pyarrow as pa

    _need(np.array_equal(_lengths(array), lengths))
    steps = array.flatten()
    _need(steps.null_count == 0 and (pa.types.is_list(steps.type) or pa.types.is_large_list(steps.type)))
    widths = _lengths(steps)
    _need(bool((widths == widths[0]).all()))
    return steps, int(widths[0])


def _top_k(present: dict[str, Any], lengths: np.ndarray,
           total: int) -> tuple[np.ndarray | None, np.ndarray | None, int]:
    """``top_logprobs`` and ``top_ids`` of every token, (total, k), and k; None for a column the chunk lacks."""
    if "top_logprobs" not in present:
        _need("top_ids" not in present)
        return None, None, 0
    steps, k = _steps(present["top_logprobs"], lengths)
    top_logprobs = _numbers(steps.flatten(), COLUMN_BY_NAME["top_logprobs"]).reshape(total, k)
    top_ids = None
    if "top_ids" in present:
        steps, k_ids = _steps(present["top_ids"], lengths)
        _need(k_ids == k)
        top_ids = _numbers(steps.flatten(), COLUMN_BY_NAME["top_ids"]).reshape(total, k)
    return top_logprobs, top_ids, k


def _top_tokens(present: dict[str, Any], lengths: np.ndarray, bounds: list[int], k: int,
                strings: dict[str, str]) -> list[list[str]]:
    """Each row's T x k alternative texts, flattened."""
    steps, k_texts = _steps(present["top_tokens"], lengths)
    _need(k_texts == k)
    values = steps.flatten()
    texts = _texts(values, strings) if len(values) else []
    return _split(texts, [b * k for b in bounds])


def _texts(values: Any, strings: dict[str, str]) -> list[str]:
    """Strings as Python str, one object per distinct text: the one ``strings`` keeps for it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    _need((pa.types.is_string(values.type) or pa.types.is_large_string(values.type)) and values.null_count == 0)
    encoded = pc.dictionary_encode(values, memory_pool=system_pool())
    distinct_texts = encoded.dictionary.to_pylist()
    distinct = np.array(list(map(strings.setdefault, distinct_texts, distinct_texts)), dtype=object)
    texts: list[str] = distinct[encoded.indices.to_numpy(zero_copy_only=False)].tolist()
    return texts


def _split(items: list[Any], bounds: list[int]) -> list[list[Any]]:
    return [items[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _metadatas(array: Any) -> list[Any]:
    """Each row's metadata, as from_lists takes the cells: every one an object or its (non-empty) text."""
    cells = array.to_pylist()
    _need(set(map(type, cells)) <= {dict, str} and all(cells))
    return metadatas_of(cells)
