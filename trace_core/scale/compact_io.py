"""A shard's compact per-answer table as a Parquet file, and back, bit for bit: ``row`` and ``label`` columns, the
grouping columns when asked for, one column per method (a float64 score, or a fixed-size list of float64 features),
and what the table knows of its answers (the methods in order, those skipped with the reason, the entropy summary,
the top-k plan, ...) as JSON in the file's metadata. Columns are found through that metadata, never by parsing their
names. ``trace-core evaluate SHARDS --scores-out FOLDER`` keeps one such file per shard, so a rerun reads them back
instead of the shards' traces.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

from trace_core.evaluation.inputs import ProtocolInputs
from trace_core.methods.fitted_baselines import TopKPlan
from trace_core.scale.compact import CompactScores

__all__ = ["COMPACT_KEY", "compact_bytes", "compact_from_bytes"]

#: The Parquet metadata key of a compact table's description.
COMPACT_KEY = b"trace_core.compact"
_FORMAT = 1


def _description(table: CompactScores, label_source: str) -> dict[str, Any]:
    plan = table.top_k
    return {"format": _FORMAT, "shard": table.shard_names[0] if table.shard_names else "",
            "wanted": list(table.inputs.wanted), "skipped": dict(table.inputs.skipped),
            "scalar": list(table.inputs.scalar), "features": list(table.inputs.features),
            "feature_orders": {m: "F" if F.flags.f_contiguous and not F.flags.c_contiguous else "C"
                               for m, F in table.inputs.features.items()},
            "certain_tokens": list(table.certain_tokens), "entropy_summary": table.entropy_summary,
            "has_entropy": table.has_entropy, "top_k": None if plan is None else [plan.k, plan.short, plan.n],
            "groups": table.groups is not None, "split_groups": table.split_groups is not None,
            "label_source": label_source}


def compact_bytes(table: CompactScores | None, *, label_source: str) -> bytes:
    """One shard's compact table (from :func:`~trace_core.scale.compact.compact_scores`) as Parquet bytes; None (a
    shard without a usable answer) as a table of no rows that says so."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if table is None:
        empty = pa.table({"row": pa.array([], pa.int64())})
        empty = empty.replace_schema_metadata({COMPACT_KEY: json.dumps({"format": _FORMAT, "empty": True,
                                                                        "label_source": label_source})})
        buffer = io.BytesIO()
        pq.write_table(empty, buffer)
        return buffer.getvalue()

    arrays: dict[str, Any] = {"row": pa.array(table.rows, pa.int64()), "label": pa.array(table.labels, pa.int8())}
    for name, values in (("group", table.groups), ("split_group", table.split_groups)):
        if values is not None:
            arrays[name] = pa.array([str(v) for v in values], pa.string())
    columns = [*arrays.values()]
    names = [*arrays]
    for method, score in table.inputs.scalar.items():
        columns.append(pa.array(np.asarray(score, dtype=np.float64), pa.float64()))
        names.append(method)
    for method, F in table.inputs.features.items():
        flat = pa.array(np.ascontiguousarray(F, dtype=np.float64).reshape(-1), pa.float64())
        columns.append(pa.FixedSizeListArray.from_arrays(flat, int(F.shape[1])))
        names.append(method)
    arrow = pa.Table.from_arrays(columns, names=names)
    arrow = arrow.replace_schema_metadata({COMPACT_KEY: json.dumps(_description(table, label_source))})
    buffer = io.BytesIO()
    pq.write_table(arrow, buffer)
    return buffer.getvalue()


def compact_from_bytes(data: bytes) -> tuple[CompactScores | None, str]:
    """The compact table (None for a shard without a usable answer) and its labels' source, as
    :func:`compact_bytes` wrote them; ValueError when the bytes are not one."""
    import pyarrow.parquet as pq

    arrow = pq.read_table(io.BytesIO(data))
    raw = (arrow.schema.metadata or {}).get(COMPACT_KEY)
    if raw is None:
        raise ValueError("not a compact score table (no trace_core.compact metadata)")
    meta = json.loads(raw)
    if meta.get("format") != _FORMAT:
        raise ValueError(f"a compact score table of format {meta.get('format')!r}, expected {_FORMAT}")
    if meta.get("empty"):
        return None, str(meta["label_source"])
    n = arrow.num_rows
    scalar = {m: arrow.column(m).to_numpy() for m in meta["scalar"]}
    features = {}
    for method in meta["features"]:
        column = arrow.column(method).combine_chunks()
        width = column.type.list_size
        block = column.flatten().to_numpy().reshape(n, width)
        features[method] = np.asfortranarray(block) if meta["feature_orders"][method] == "F" else block
    plan = None if meta["top_k"] is None else TopKPlan(*meta["top_k"])
    text = {name: np.asarray(arrow.column(name).to_pylist(), dtype=object)
            for name, kept in (("group", meta["groups"]), ("split_group", meta["split_groups"])) if kept}
    table = CompactScores(
        inputs=ProtocolInputs(scalar=scalar, features=features, wanted=meta["wanted"], skipped=meta["skipped"]),
        labels=arrow.column("label").to_numpy().astype(np.int8), shard=np.zeros(n, np.int32),
        rows=arrow.column("row").to_numpy().astype(np.int64), shard_names=[meta["shard"]],
        certain_tokens=(int(meta["certain_tokens"][0]), int(meta["certain_tokens"][1])),
        entropy_summary=meta["entropy_summary"], has_entropy=bool(meta["has_entropy"]), top_k=plan,
        groups=text.get("group"), split_groups=text.get("split_group"))
    return table, str(meta["label_source"])
