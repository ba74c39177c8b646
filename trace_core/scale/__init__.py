"""Sharded runs: a dataset too large for one file or one pass, worked through shard by shard into an output folder
with a manifest, resumable after an interruption, with every input row accounted for.

- :mod:`~trace_core.scale.shards`: a folder, a glob pattern or a file -> the input shards, each with its output
  name (:func:`list_shards`).
- :mod:`~trace_core.scale.lock`: one run at a time per output folder (:func:`folder_lock`).
- :mod:`~trace_core.scale.manifest`: the per-shard entries and the combined ``manifest.json``; atomic writes;
  when a shard counts as complete (:func:`is_complete`).
- :mod:`~trace_core.scale.stream`: the resumable runner in one process (:func:`run_shards`), built on the
  per-shard step (:func:`process_shard`) that a pool of workers can call as well.
- :mod:`~trace_core.scale.score`: the per-shard work of ``trace-core score`` (:class:`ShardScorer`).
- :mod:`~trace_core.scale.generate`: the per-shard work of ``trace-core generate`` (:class:`ShardGenerator`).
- :mod:`~trace_core.scale.ray_engine`: the same per-shard step on Ray Data, locally or on a cluster
  (:func:`~trace_core.scale.ray_engine.run_shards_ray`; the ``ray`` extra), imported on its own.

Importing this package imports neither ray (the Ray engine imports it inside its functions) nor torch (the scorer
reaches the model through :mod:`trace_core.record`, lazily).
"""

from trace_core.scale.lock import LOCK_FILE, FolderInUseError, folder_lock
from trace_core.scale.manifest import (
    ENTRY_FOLDER,
    MANIFEST_FILE,
    ShardEntry,
    file_digest,
    is_complete,
    output_name,
    read_entry,
    remove_leftovers,
    write_atomic,
    write_entry,
    write_manifest,
)
from trace_core.scale.shards import (
    PROMPT_FORMATS,
    SHARD_FORMATS,
    Shard,
    SkippedFileWarning,
    check_output_names,
    is_pattern,
    list_shards,
)
from trace_core.scale.stream import (
    RunSummary,
    ShardOutput,
    ShardResult,
    ShardWork,
    finish_run,
    process_shard,
    run_shards,
    slim_result,
    start_run,
    stored_result,
)

__all__ = [
    "ENTRY_FOLDER",
    "LOCK_FILE",
    "MANIFEST_FILE",
    "PROMPT_FORMATS",
    "SHARD_FORMATS",
    "FolderInUseError",
    "RunSummary",
    "Shard",
    "ShardEntry",
    "ShardOutput",
    "ShardResult",
    "ShardWork",
    "SkippedFileWarning",
    "check_output_names",
    "file_digest",
    "finish_run",
    "folder_lock",
    "is_complete",
    "is_pattern",
    "list_shards",
    "output_name",
    "process_shard",
    "read_entry",
    "remove_leftovers",
    "run_shards",
    "slim_result",
    "start_run",
    "stored_result",
    "write_atomic",
    "write_entry",
    "write_manifest",
]
