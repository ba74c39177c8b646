"""Writing datasets that :func:`read_dataset` reads back unchanged, and the value-to-file helpers that the export
for people shares."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trace_core.data.arrow import table_arrow_columns
from trace_core.data.read import PathOrBuffer, format_from_name
from trace_core.traces.cells import is_missing
from trace_core.traces.columns import TRACE_COLUMNS, trace_column
from trace_core.traces.table import TraceTable, traces_to_columns
from trace_core.traces.trace import Trace

__all__ = ["write_dataset"]

_PLAIN_SCALARS = {int, float, str, bool, type(None)}


def to_plain(value: Any) -> Any:
    """Numpy and pandas values as JSON-able Python values (NaN/NA -> None)."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "iub" or (value.dtype.kind == "f" and not np.isnan(value).any()):
            return value.tolist()  # plain Python numbers already, at any depth; no NaN to turn into None
        return [to_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        types = set(map(type, value))
        if types <= _PLAIN_SCALARS and not (float in types and any(v != v for v in value)):
            return list(value)  # fast path: already plain, no NaN
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if is_missing(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def csv_text(value: Any) -> str:
    """One CSV cell: lists and dicts as compact JSON, floats as their exact repr, missing as ""."""
    value = to_plain(value)
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _plain_json(value: Any) -> str:
    """A CSV cell of a value that is JSON-able already (a trace column's lists): compact JSON, None as ""."""
    return "" if value is None else json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def csv_bytes(header: list[str], rows: Iterable[list[str]], *, delimiter: str = ",") -> bytes:
    """A CSV file (UTF-8) from a header and rows of cell texts."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, delimiter=delimiter)
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue().encode("utf-8")


def jsonl_bytes(records: Iterable[dict[str, Any]], *, plain: frozenset[str] = frozenset()) -> bytes:
    """A JSON Lines file (UTF-8), one object per record; the values of the keys in ``plain`` are JSON-able already
    (no numpy values, no NaN) and are written as they are."""
    lines = [json.dumps({k: v if k in plain else to_plain(v) for k, v in r.items()}, ensure_ascii=False,
                        allow_nan=False) for r in records]
    return ("\n".join(lines) + ("\n" if lines else "")).encode("utf-8")


def write_bytes(dest: object, data: bytes, *, text: bool = True) -> None:
    """Write a file's bytes to a path, a binary buffer, or (``text`` formats only) a text buffer."""
    if isinstance(dest, (str, Path)):
        Path(dest).write_bytes(data)
        return
    if not hasattr(dest, "write"):
        raise TypeError(f"`dest` must be a path or a writable file-like object, got {type(dest).__name__}")
    if isinstance(dest, io.TextIOBase):
        if not text:
            raise TypeError("Parquet is binary: `dest` must be a path or a binary buffer (e.g. io.BytesIO)")
        dest.write(data.decode("utf-8"))
    else:
        dest.write(data)


def _frame_for_writing(frame: pd.DataFrame, traces: Sequence[Trace | None] | None, *, arrow: bool = False
                       ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The frame without the row-number and trace columns, and the trace columns to write: per-answer lists, or
    (``arrow``, for Parquet, when the traces are a table) Arrow arrays made from the table's columns."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"`frame` must be a pandas DataFrame, got {type(frame).__name__}")
    row_column = frame.attrs.get("trace_core_row_column")
    if row_column in frame.columns:  # the row numbers read_dataset added are recomputed on reading again
        frame = frame.drop(columns=[row_column])
    columns: dict[str, Any] = {}
    if traces is not None:
        if not isinstance(traces, TraceTable):  # a table is written column by column
            traces = list(traces)
        if len(traces) != len(frame):
            raise ValueError(f"`traces` has {len(traces)} entries but `frame` has {len(frame)} rows")
        if arrow and isinstance(traces, TraceTable):
            columns = table_arrow_columns(traces)
        else:
            columns = {c: v for c, v in traces_to_columns(traces).items() if any(x is not None for x in v)}
        frame = frame.drop(columns=[c for c in TRACE_COLUMNS if c in frame.columns])
    return frame, columns


def _records(frame: pd.DataFrame, extra: Mapping[str, list[Any]]) -> Iterable[dict[str, Any]]:
    names = [str(c) for c in frame.columns] + list(extra)
    for i, values in enumerate(frame.itertuples(index=False, name=None)):
        yield dict(zip(names, list(values) + [v[i] for v in extra.values()], strict=True))


def _parquet_bytes(frame: pd.DataFrame, extra: Mapping[str, Any]) -> bytes:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("writing Parquet needs pyarrow: pip install pyarrow") from exc
    table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
    for name, values in extra.items():
        array = values if isinstance(values, pa.Array) else trace_column(name).arrow_array(values)  # type: ignore[union-attr]
        table = table.append_column(name, array)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def write_dataset(frame: pd.DataFrame, dest: PathOrBuffer, *, traces: Sequence[Trace | None] | None = None,
                  format: str | None = None) -> None:
    """Write a dataset that :func:`read_dataset` reads back unchanged.

    CSV cells of lists (trace columns included) are JSON text; floats are written as their exact repr, so values
    survive the round trip bit for bit. No spreadsheet sanitising is done here (it would change values): use
    :func:`export_flagged` for files meant to be opened by people.

    Parameters
    ----------
    frame : pandas.DataFrame
        The rows, e.g. ``LabeledDataset.frame``; the row-number column that :func:`read_dataset` added is left out
        (it is recomputed on reading).
    dest : str, Path or file-like
        Where to write (binary buffers get bytes; text buffers get text, except Parquet).
    traces : sequence of Trace or None, optional
        One per row; written as the trace columns (:func:`traces_to_columns`), replacing any trace columns of
        ``frame``. Rows whose trace is None get empty cells; a trace without entropy (``entropy_source="absent"``)
        gets an empty ``entropy`` cell (null in JSON Lines and Parquet), which reads back as no entropy.
    format : {"csv", "jsonl", "parquet"} or None
        None: from the extension of ``dest`` (or its ``.name``); a ``.tsv`` name gets tab-separated CSV.

    Examples
    --------
    >>> buffer = io.BytesIO()
    >>> write_dataset(pd.DataFrame({"prompt": ["Q"], "answer": ["A"], "label": [1]}), buffer, format="csv")
    >>> buffer.getvalue()
    b'prompt,answer,label\\r\\nQ,A,1\\r\\n'
    """
    name = Path(dest).name if isinstance(dest, (str, Path)) else str(getattr(dest, "name", "") or "")
    fmt = format_from_name(name, format, "destination")
    frame, extra = _frame_for_writing(frame, traces, arrow=fmt == "parquet")
    plain = frozenset(extra) - {"trace_metadata"}  # a trace's lists are plain values (its metadata may hold any)
    if fmt == "csv":
        header = [str(c) for c in frame.columns] + list(extra)
        encoders = [_plain_json if c in plain else csv_text for c in header]
        data = csv_bytes(header, ([f(v) for f, v in zip(encoders, r.values(), strict=True)]
                                  for r in _records(frame, extra)),
                         delimiter="\t" if name.lower().endswith(".tsv") else ",")
    elif fmt == "jsonl":
        data = jsonl_bytes(_records(frame, extra), plain=plain)
    else:
        data = _parquet_bytes(frame, extra)
    write_bytes(dest, data, text=fmt != "parquet")
