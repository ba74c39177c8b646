"""Sharded runs on Ray Data: the one-process run's per-shard step (:func:`~trace_core.scale.process_shard`) on a
pool of Ray actors, on this machine or on a cluster, with the same output folder, entries and manifest.

How a run goes (:func:`run_shards_ray`):

- The driver (this process) does what :func:`~trace_core.scale.run_shards` does before the first shard
  (:func:`~trace_core.scale.start_run`), and finds the shards an earlier run completed itself
  (:func:`~trace_core.scale.stored_result`): those never leave it, and with nothing left to do Ray is not started.
- The other shards become one-row batches of ``ray.data.from_items([...]).map_batches(ShardTask, batch_size=1,
  compute=ActorPoolStrategy(size=N))``. Each actor holds one :class:`ShardTask`, built once with the work (a
  :class:`~trace_core.scale.score.ShardScorer` loads its model on its first shard and keeps it), and called once
  per shard: :func:`~trace_core.scale.process_shard` writes the output shard and its entry into the output folder
  (atomically) and the small :class:`~trace_core.scale.ShardResult` goes back to the driver, pickled.
- The driver reports each result as it comes (``on_shard``), then writes ``manifest.json`` from every shard's
  result in the shards' order (:func:`~trace_core.scale.finish_run`), byte for byte what the one-process run
  writes.

Failures: an error of the work that is not one of ``skip_errors`` is sent back and raised by the driver, as in one
process (the shards already written stay complete). A worker process that dies (killed, out of memory) is restarted
by Ray and its shard retried, :data:`RETRIES` times; a shard whose worker died every time is reported failed, like
an unreadable one (no entry: the next run redoes it). A driver killed mid-run loses the shards in flight only.

On a cluster (``address``, or the ``RAY_ADDRESS`` environment variable): the shards and the output folder must be
at the same path on every node (a shared file system), trace-core installed on every node with what the work needs,
and a model server's API key set on every node under the variable the work names: only its name travels, never the
key.

This module imports ray only inside its functions: importing it (or :mod:`trace_core.scale`) needs no Ray.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from trace_core import settings as env
from trace_core.scale.lock import folder_lock
from trace_core.scale.shards import Shard
from trace_core.scale.stream import (
    RunSummary,
    ShardResult,
    ShardWork,
    finish_run,
    process_shard,
    slim_result,
    start_run,
    stored_result,
)

__all__ = ["INSTALL_HINT", "RETRIES", "RayNotInstalledError", "ShardTask", "import_ray", "pickled_error",
           "map_shards", "quiet_data_context", "ray_session", "shard_step",
           "run_shards_ray"]

#: How to install the engine: the project's ``ray`` extra.
INSTALL_HINT = "pip install 'trace-core[ray]'"
#: Times Ray restarts a dead worker and retries its shard before the shard is reported failed.
RETRIES = 3
_LOG_LEVEL = logging.ERROR  # Ray's own log lines on the driver: errors only (the run reports every shard itself)


class RayNotInstalledError(ImportError):
    """Ray (with Ray Data) is not installed; the message says how to install it."""


def import_ray() -> Any:
    """The ``ray`` module with Ray Data loaded; :class:`RayNotInstalledError` (one line, naming the extra) when
    either cannot be imported."""
    try:
        import ray
        import ray.data  # noqa: F401 - Ray Data needs pyarrow and pandas as well as ray
    except ImportError as exc:
        raise RayNotInstalledError(f"the Ray engine needs Ray Data, which is not installed here ({exc}); install "
                                   f"it with: {INSTALL_HINT}") from None
    return ray


@contextmanager
def ray_session(*, address: str | None = None, workers: int | None = None) -> Iterator[int]:
    """Ray for the length of a run: yields how many shards to work at once.

    A Ray already started in this process is used as it is (and left running). Otherwise ``address`` (else the
    ``RAY_ADDRESS`` environment variable) names a cluster to connect to; without one a local Ray starts with
    ``workers`` CPUs (default: this machine's count), no dashboard and no usage statistics sent
    (``RAY_USAGE_STATS_ENABLED=0`` unless set). Either is shut down (disconnected) at the
    end. The yielded count is ``workers``, else the CPUs Ray has."""
    ray = import_ray()
    if ray.is_initialized():
        yield workers or _cpus(ray)
        return
    address = address or env.ray_address()
    if address:
        ray.init(address=address, logging_level=_LOG_LEVEL, log_to_driver=False)
    else:  # "local": a new instance on this machine even where another one runs
        env.ray_without_usage_stats()  # offline by design, unless the user asked for them
        ray.init(address="local", num_cpus=workers or os.cpu_count() or 1, include_dashboard=False,
                 logging_level=_LOG_LEVEL, log_to_driver=False)
    try:
        yield workers or _cpus(ray)
    finally:
        ray.shutdown()


def _cpus(ray: Any) -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


class ShardTask:
    """Ray Data's callable class of a run: built once per actor with a per-shard ``step``, called with one-row
    batches of shards.

    Parameters
    ----------
    step : callable(Shard) -> picklable
        What to do with one shard: for a run, :func:`~trace_core.scale.process_shard` bound to the output folder,
        the work and the settings (:func:`shard_step`); pickled to each actor once, so a model the work loads on its
        first shard serves that actor's next shards.

    A batch holds the columns ``index``, ``path``, ``name``, ``format`` and ``output`` (:func:`shard_items`); the
    answer holds ``index``, ``result`` (the step's result, pickled) and ``error`` (an error of the step, pickled,
    that the driver raises; empty when none).
    """

    def __init__(self, step: Callable[[Shard], Any]) -> None:
        self.step = step

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        indices, results, errors = [], [], []
        for i in range(len(batch["index"])):
            shard = Shard(path=Path(str(batch["path"][i])), name=str(batch["name"][i]),
                          format=str(batch["format"][i]), output=str(batch["output"][i]))
            result, error = b"", b""
            try:
                result = pickle.dumps(self.step(shard))
            except Exception as exc:  # sent back whole: the driver raises it, as the one-process run would
                error = pickled_error(exc)
            indices.append(int(batch["index"][i]))
            results.append(result)
            errors.append(error)
        return {"index": np.asarray(indices, dtype=np.int64), "result": np.asarray(results, dtype=object),
                "error": np.asarray(errors, dtype=object)}


def shard_step(out_dir: str, work: ShardWork, settings: Mapping[str, Any], command: str = "",
               skip_errors: tuple[type[Exception], ...] = ()) -> Callable[[Shard], ShardResult]:
    """:func:`~trace_core.scale.process_shard` with everything but the shard bound (picklable when ``work`` is)."""
    return functools.partial(process_shard, out_dir=out_dir, work=work, settings=dict(settings), command=command,
                             skip_errors=tuple(skip_errors))


def pickled_error(exc: Exception) -> bytes:
    """``exc`` pickled; one that cannot be (an odd constructor, an unpicklable attribute) as a RuntimeError with its
    type and words."""
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
        return data
    except Exception:
        return pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))


def shard_items(shards: Sequence[tuple[int, Shard]]) -> list[dict[str, Any]]:
    """The rows of the run's Ray dataset: each shard's position in the run and its fields, its path absolute (a
    worker's working folder need not be the driver's)."""
    return [{"index": index, "path": str(Path(shard.path).resolve()), "name": shard.name, "format": shard.format,
             "output": shard.output} for index, shard in shards]


@contextmanager
def quiet_data_context(ray: Any, errored_blocks: int) -> Iterator[None]:
    """Ray Data quiet (no progress bars, no start lines, none of its deprecation warnings: the run reports every
    shard itself) and going on past ``errored_blocks`` shards whose worker died every time; the settings as they
    were afterwards."""
    changes = {"enable_progress_bars": False, "print_on_execution_start": False, "max_errored_blocks": errored_blocks}
    logger = logging.getLogger("ray.data")
    level = logger.level
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Ray's notes on its own API changes, not for our users
        context = ray.data.DataContext.get_current()  # made on first use, with such notes
        before = {name: getattr(context, name) for name in changes}
        for name, value in changes.items():
            setattr(context, name, value)
        logger.setLevel(logging.CRITICAL)  # a dead worker's shard is reported as failed; Ray's traceback adds nothing
        try:
            yield
        finally:
            for name, value in before.items():
                setattr(context, name, value)
            logger.setLevel(level)


def map_shards(ray: Any, shards: Sequence[tuple[int, Shard]], step: Callable[[Shard], Any],
               workers: int) -> Iterator[tuple[int, Any]]:
    """(position, ``step(shard)``) of each shard, in the order Ray's actors finish them, ``workers`` at a time, one
    shard in flight per actor; raises a step's error. Call inside :func:`ray_session` and
    :func:`quiet_data_context`."""
    items = shard_items(shards)
    dataset = ray.data.from_items(items, override_num_blocks=len(items))  # a block per shard: each one schedulable
    # Ray 2.60 takes the retry counts only as "remote args", which it marks deprecated (removed in 2.64; the extra
    # pins 2.60; :func:`quiet_data_context` silences the warning). Its default is to restart and retry without end,
    # which a shard that kills its worker every time would never leave.
    # One shard in flight per actor: a worker that dies takes only its own shard's tries with it.
    pool = ray.data.ActorPoolStrategy(size=min(workers, len(items)), max_tasks_in_flight_per_actor=1)
    dataset = dataset.map_batches(ShardTask, fn_constructor_args=(step,), batch_size=1, batch_format="numpy",
                                  compute=pool, num_cpus=1, max_restarts=RETRIES, max_task_retries=RETRIES)
    for row in dataset.iter_rows():
        if row["error"]:
            raise pickle.loads(row["error"])
        yield int(row["index"]), pickle.loads(row["result"])


def run_shards_ray(shards: Sequence[Shard], out_dir: str | os.PathLike[str], work: ShardWork, *,
                   settings: Mapping[str, Any], command: str = "", skip_errors: tuple[type[Exception], ...] = (),
                   on_shard: Callable[[ShardResult, int, int], None] | None = None, address: str | None = None,
                   workers: int | None = None) -> RunSummary:
    """:func:`~trace_core.scale.run_shards` on Ray Data: the same output folder, entries, manifest and summary, the
    shards worked ``workers`` at a time by Ray actors (see the module's docstring).

    Parameters
    ----------
    shards, out_dir, settings, command, skip_errors
        As :func:`~trace_core.scale.run_shards` takes them.
    work : callable(Shard) -> ShardOutput
        Pickled to every actor once (a module-level function or a picklable object, such as
        :class:`~trace_core.scale.score.ShardScorer` with a picklable model loader; no secret inside).
    on_shard : callable(result, count, total) or None
        Called on the driver as each shard's result arrives (complete shards first, then in the order Ray finishes
        them), ``count`` from 1 to ``total``.
    address : str or None
        A Ray cluster to connect to (``ray.init(address=...)``); default ``RAY_ADDRESS``, else a local Ray.
    workers : int or None
        Shards worked at once, each by an actor of one CPU; a local Ray gets this many CPUs. Default: every CPU
        (this machine's, or the cluster's).

    Returns
    -------
    RunSummary

    Raises
    ------
    RayNotInstalledError
        When shards are left to work and Ray is not installed.
    """
    with folder_lock(out_dir):
        return _run_locked(shards, out_dir, work, settings=settings, command=command, skip_errors=skip_errors,
                           on_shard=on_shard, address=address, workers=workers)


def _run_locked(shards: Sequence[Shard], out_dir: str | os.PathLike[str], work: ShardWork, *,
                settings: Mapping[str, Any], command: str, skip_errors: tuple[type[Exception], ...],
                on_shard: Callable[[ShardResult, int, int], None] | None, address: str | None,
                workers: int | None) -> RunSummary:
    """:func:`run_shards_ray`'s run, the output folder's lock held."""
    out, settings = start_run(shards, out_dir, settings)
    results: dict[int, ShardResult] = {}
    todo: list[tuple[int, Shard]] = []

    def report(index: int, result: ShardResult) -> None:
        if on_shard is not None:
            on_shard(result, len(results) + 1, len(shards))
        results[index] = slim_result(result)

    for index, shard in enumerate(shards):
        stored = stored_result(shard, out, settings=settings)
        if stored is None:
            todo.append((index, shard))
        else:
            report(index, stored)
    if todo:
        with ray_session(address=address, workers=workers) as capacity:
            ray = import_ray()
            step = shard_step(str(out.resolve()), work, settings, command, tuple(skip_errors))
            with quiet_data_context(ray, errored_blocks=len(todo)):
                for index, result in map_shards(ray, todo, step, capacity):
                    report(index, result)
        for index, shard in todo:
            if index not in results:
                report(index, ShardResult(shard=shard, status="failed", error=(
                    f"its Ray worker died {RETRIES + 1} times on it (out of memory? a crash?); it runs again next "
                    "time")))
    return finish_run([results[i] for i in range(len(shards))], out, settings=settings, command=command)
