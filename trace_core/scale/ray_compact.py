"""The compact tables of shards computed on Ray Data: a per-shard step (:func:`~trace_core.scale.evaluate.shard_scores`
bound to the run's options, given by :func:`~trace_core.scale.evaluate.read_compact`) on every shard on a pool of Ray
actors (on this machine or a cluster), each shard's small per-answer table sent back to the driver, which puts them
together in shard order and runs the protocol (:func:`read_compact` with ``engine="ray"``). Only the per-answer tables
travel (about 300 bytes per answer); each shard's per-token arrays stay in the worker that read it.

This module imports ray only inside its functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from trace_core.scale.ray_engine import import_ray, map_shards, quiet_data_context, ray_session
from trace_core.scale.shards import Shard

__all__ = ["compact_on_ray"]


def compact_on_ray(shards: Sequence[Shard], step: Callable[[Shard], Any], *, address: str | None = None,
                   workers: int | None = None,
                   on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
    """Every shard's ``step(shard)``: its ``(part, account, source)`` (as
    :func:`~trace_core.scale.evaluate.shard_scores` gives it), in shard order, computed by Ray actors (``workers`` at a
    time; ``address``: a cluster, default ``RAY_ADDRESS``, else a local Ray). ``on_result(index, result)`` on the driver
    as each one arrives. ``step`` is pickled to the workers: a module-level function, or a :func:`functools.partial` of
    one."""
    results: dict[int, Any] = {}
    with ray_session(address=address, workers=workers) as capacity, quiet_data_context(import_ray(), 0):
        for index, result in map_shards(import_ray(), list(enumerate(shards)), step, capacity):
            results[index] = result
            if on_result is not None:
                on_result(index, result)
    return [results[i] for i in range(len(shards))]
