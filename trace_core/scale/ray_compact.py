"""The compact tables of shards computed on Ray Data: :func:`~trace_core.scale.evaluate.shard_scores` of every
shard on a pool of Ray actors (on this machine or a cluster), each shard's small per-answer table sent back to the
driver, which puts them together in shard order and runs the protocol (:func:`read_compact` with
``engine="ray"``). Only the per-answer tables travel (about 300 bytes per answer); each shard's per-token arrays
stay in the worker that read it.

This module imports ray only inside its functions.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .shards import Shard

__all__ = ["CompactTask", "compact_on_ray"]


class CompactTask:
    """Ray Data's callable class: one-row batches of shards -> each shard's pickled
    ``(CompactScores or None, ShardAccount, label source)``, or its pickled error (raised on the driver)."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        from .evaluate import named_shard_scores
        from .ray_engine import pickled_error

        indices, results, errors = [], [], []
        for i in range(len(batch["index"])):
            shard = Shard(path=Path(str(batch["path"][i])), name=str(batch["name"][i]),
                          format=str(batch["format"][i]), output=str(batch["output"][i]))
            result, error = b"", b""
            try:
                result = pickle.dumps(named_shard_scores(shard, self.options))
            except Exception as exc:  # sent back whole: the driver raises it, as in one process
                error = pickled_error(exc)
            indices.append(int(batch["index"][i]))
            results.append(result)
            errors.append(error)
        return {"index": np.asarray(indices, dtype=np.int64), "result": np.asarray(results, dtype=object),
                "error": np.asarray(errors, dtype=object)}


def compact_on_ray(shards: Sequence[Shard], options: Mapping[str, Any], *, address: str | None = None,
                   workers: int | None = None,
                   on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
    """Every shard's ``(part, account, source)`` (as :func:`~trace_core.scale.evaluate.shard_scores` gives it), in
    shard order, computed by Ray actors (``workers`` at a time; ``address``: a cluster, default ``RAY_ADDRESS``,
    else a local Ray). ``on_result(index, result)`` on the driver as each one arrives."""
    from .ray_engine import import_ray, quiet_data_context, ray_session, shard_items

    results: dict[int, Any] = {}
    with ray_session(address=address, workers=workers) as capacity, quiet_data_context(import_ray(), 0):
        ray = import_ray()
        items = shard_items(list(enumerate(shards)))
        dataset = ray.data.from_items(items, override_num_blocks=len(items))
        dataset = dataset.map_batches(CompactTask, fn_constructor_args=(dict(options),), batch_size=1,
                                      batch_format="numpy", num_cpus=1,
                                      compute=ray.data.ActorPoolStrategy(size=min(capacity, len(items))))
        for row in dataset.iter_rows():
            if row["error"]:
                raise pickle.loads(row["error"])
            index, result = int(row["index"]), pickle.loads(row["result"])
            results[index] = result
            if on_result is not None:
                on_result(index, result)
    return [results[i] for i in range(len(shards))]
