"""A :class:`~trace_core.traces.table.TraceTable`'s trace columns as Arrow arrays, for Parquet: each built from the
table's columns and offsets (no Python list per answer or per token), typed as the column spec says
(:meth:`~trace_core.traces.columns.TraceColumn.arrow_array` gives the same arrays from the per-answer lists).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trace_core.traces.columns import COLUMN_BY_NAME

if TYPE_CHECKING:
    import pyarrow

    from trace_core.traces.table import TraceTable

__all__ = ["table_arrow_columns"]


def _lists(offsets: np.ndarray, values: pyarrow.Array, name: str, null: np.ndarray | None = None) -> pyarrow.Array:
    """One list per answer: ``values[offsets[i]:offsets[i + 1]]``, null where ``null`` holds."""
    import pyarrow as pa

    mask = None if null is None or not null.any() else pa.array(null)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32, copy=False)), values,
                                    type=COLUMN_BY_NAME[name].arrow_type(), mask=mask)


def _steps(table: TraceTable, flat: pyarrow.Array) -> pyarrow.Array:
    """Each token's k alternatives (its answer's k) as one list, from the alternatives end to end."""
    import pyarrow as pa

    lengths = np.diff(table.offsets)
    per_token_k = np.repeat(table.top_k, lengths)
    inner = np.zeros(table.n_tokens + 1, dtype=np.int64)
    np.cumsum(per_token_k, out=inner[1:])
    return pa.ListArray.from_arrays(pa.array(inner.astype(np.int32, copy=False)), flat)


def _top_tokens(table: TraceTable) -> pyarrow.Array:
    """The alternatives' texts: null for the answers without them."""
    import pyarrow as pa

    null = np.array([t is None for t in table.top_tokens], dtype=bool)
    texts = [text for top in table.top_tokens if top is not None for step in top for text in step]
    lengths = np.diff(table.offsets)
    kept = np.where(null, 0, lengths)
    per_token_k = np.repeat(np.where(null, 0, table.top_k), kept)
    inner = np.zeros(int(kept.sum()) + 1, dtype=np.int64)
    np.cumsum(per_token_k, out=inner[1:])
    steps = pa.ListArray.from_arrays(pa.array(inner.astype(np.int32)), pa.array(texts, type=pa.string()))
    outer = np.zeros(len(table) + 1, dtype=np.int64)
    np.cumsum(kept, out=outer[1:])
    return _lists(outer, steps, "top_tokens", null)


def table_arrow_columns(table: TraceTable) -> dict[str, pyarrow.Array]:
    """Every written trace column of ``table`` as an Arrow array, one value per answer; a column no answer has
    (ranks, entropy, alternatives' texts) is left out, as :func:`~trace_core.data.write_dataset` leaves out a column
    of None."""
    import pyarrow as pa

    if len(table) == 0:  # as the lists of no answers: no trace column is written
        return {}
    if table.n_tokens >= 2**31 or int(table.top_offsets[-1]) >= 2**31:  # pragma: no cover - beyond 32-bit offsets
        raise ValueError("the table is too large for one Parquet file's list offsets; write it in parts")
    offsets = table.offsets
    no_entropy, no_ranks = ~table.has_entropy, ~table.has_ranks
    columns: dict[str, pyarrow.Array] = {
        "tokens": _lists(offsets, pa.array(table.tokens, type=pa.string()), "tokens"),
        "token_ids": _lists(offsets, pa.array(table.token_ids), "token_ids"),
        "surprisal": _lists(offsets, pa.array(table.surprisal), "surprisal"),
        "entropy": _lists(offsets, pa.array(table.entropy), "entropy", no_entropy),
        "top_ids": _lists(offsets, _steps(table, pa.array(table.top_ids)), "top_ids"),
        "top_logprobs": _lists(offsets, _steps(table, pa.array(table.top_logprobs)), "top_logprobs"),
        "top_tokens": _top_tokens(table),
        "ranks": _lists(offsets, pa.array(table.ranks), "ranks", no_ranks),
        "trace_metadata": COLUMN_BY_NAME["trace_metadata"].arrow_array([m.to_dict() for m in table.metadata]),
    }
    if no_entropy.all():
        del columns["entropy"]
    if no_ranks.all():
        del columns["ranks"]
    if all(t is None for t in table.top_tokens):
        del columns["top_tokens"]
    return columns
