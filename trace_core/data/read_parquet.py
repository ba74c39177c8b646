"""Reading Parquet: the metadata checked before any page is decompressed (rows, decompressed bytes, the header),
then rows decoded batch by batch, each batch's decoded size checked before it is decoded; a row with a string cell
over ``max_cell_chars`` (binary: bytes) is rejected. The typed columns are read again for the dataset's frame.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from .errors import DatasetError, RowError
from .source import Reporter, Source, cell_too_long, too_big
from .table import Row, Table, no_rows, normalize_columns, too_many

__all__ = ["parquet_table"]

_PARQUET_BATCH = 4096


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
        """One row per record, numbered from 1; a row with a text cell over ``max_cell`` is rejected."""
        src, count = self.src, 0
        for batch in self._batches():
            long = _long_cells(batch, src.max_cell) if src.max_cell is not None else {}
            for i, record in enumerate(batch.to_pylist()):
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
                    batch_size=_PARQUET_BATCH)
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


def _pyarrow() -> tuple[Any, Any]:
    """``pyarrow`` and ``pyarrow.parquet``, imported when a Parquet file is read."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("reading Parquet needs pyarrow: pip install pyarrow") from exc
    return pa, pq


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
