"""A resumable run over shards in one process: each input shard's work, its output shard and its manifest entry,
one shard at a time, skipping the shards an earlier run completed.

:func:`process_shard` is the whole of one shard's work and needs nothing from the run around it (the shard, the
output folder, the work function and the settings, all picklable when the work is), so a pool of workers or a Ray
Data ``map_batches`` over the shard list (:mod:`trace_core.scale.ray_engine`) calls it as :func:`run_shards` does;
only the start (:func:`start_run`: checks, leftovers removed), the completeness check before sending a shard out
(:func:`stored_result`) and the end (:func:`finish_run`: the combined manifest) belong to the driver.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from hashlib import sha256
from pathlib import Path
from typing import Any

import pandas as pd

from trace_core import __version__
from trace_core.data import write_dataset
from trace_core.scale.lock import folder_lock
from trace_core.scale.manifest import (
    MANIFEST_FILE,
    ShardEntry,
    file_digest,
    is_complete,
    output_problem,
    plain_settings,
    read_entry,
    remove_leftovers,
    write_atomic,
    write_entry,
    write_manifest,
)
from trace_core.scale.shards import SHARD_FORMATS, Shard, check_output_names
from trace_core.settings import redact_secrets

__all__ = ["RunSummary", "ShardOutput", "ShardResult", "ShardWork", "finish_run", "process_shard", "run_shards",
           "slim_result", "start_run", "stored_result"]


@dataclass
class ShardOutput:
    """What a shard's work made: the rows to write and an account of those it read.

    Attributes
    ----------
    frame : pandas.DataFrame, shape (n_kept, ...)
        The rows to write (e.g. ``LabeledDataset.frame``; its row-number column is left out on writing).
    traces : sequence of Trace or None, length n_kept; or None
        Their traces (written as the trace columns), or None for none.
    n_read : int
        Rows read from the input shard (>= ``len(frame)``; the difference is the rejected rows).
    errors : sequence of RowError
        Every problem with a rejected row, numbered in the input shard (:class:`~trace_core.data.RowError`).
    notes : sequence of str
        Remarks for the caller to pass on (e.g. rows that could not be scored); not errors.
    data : bytes or None
        The output file's bytes, when the work writes a format of its own (a compact score table); else the frame
        and its traces are written as a dataset.
    """

    frame: pd.DataFrame
    traces: Sequence[Any] | None
    n_read: int
    errors: Sequence[Any] = ()
    notes: Sequence[str] = ()
    data: bytes | None = None


#: A shard's work: the input shard -> its output rows. Raising stops the run, unless the error is one of
#: ``skip_errors`` (then the shard is reported as failed and the run goes on).
ShardWork = Callable[[Shard], ShardOutput]


@dataclass(frozen=True)
class ShardResult:
    """What became of one shard.

    Attributes
    ----------
    shard : Shard
    status : {"done", "skipped", "failed"}
        Written now; complete from an earlier run (left as it was); or its work raised one of ``skip_errors``.
    entry : ShardEntry or None
        Its manifest entry (None when failed).
    problems : tuple of str
        The rejected rows' problems, each prefixed with the shard's name (``"a/b.jsonl: row 4: label: ..."``).
    notes : tuple of str
        The work's notes, prefixed the same way.
    error : str
        Why the shard failed ("" unless failed).
    """

    shard: Shard
    status: str
    entry: ShardEntry | None = None
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    error: str = ""


@dataclass
class RunSummary:
    """A run's outcome: every shard's result, in the shards' order, and the combined manifest's path. The results
    hold no per-row lists (``problems``, ``notes`` and the entries' ``rejected`` are empty): ``on_shard`` sees them
    whole, and each shard's entry file keeps its rejected rows."""

    results: list[ShardResult] = field(default_factory=list)
    manifest: Path | None = None
    #: Dataset files in the output folder that the manifest does not list (the outputs of input shards no longer in
    #: the run, or of shards that failed this time): left in place, and left out when the folder is read as input.
    unlisted: list[str] = field(default_factory=list)

    def _count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def done(self) -> int:
        return self._count("done")

    @property
    def skipped(self) -> int:
        return self._count("skipped")

    @property
    def failed(self) -> list[ShardResult]:
        return [r for r in self.results if r.status == "failed"]

    def rows(self, which: str) -> int:
        """Rows ``"read"``, ``"kept"`` or ``"rejected"`` over the complete shards (written now or before)."""
        return sum(getattr(r.entry, f"rows_{which}") for r in self.results if r.entry is not None)

    def sentence(self) -> str:
        """E.g. ``"4 shards: 3 written, 1 already complete; 1,000 rows read: 998 kept, 2 rejected"``."""
        n = len(self.results)
        text = (f"{n:,} shard{'' if n == 1 else 's'}: {self.done:,} written, {self.skipped:,} already complete"
                + (f", {len(self.failed):,} failed" if self.failed else ""))
        read = self.rows("read")
        return (f"{text}; {read:,} row{'' if read == 1 else 's'} read: {self.rows('kept'):,} kept, "
                f"{self.rows('rejected'):,} rejected")

    def unlisted_sentence(self) -> str | None:
        """One line about :attr:`unlisted` (None when there is none)."""
        if not self.unlisted:
            return None
        n = len(self.unlisted)
        names = ", ".join(name[:80] for name in self.unlisted[:3]) + (", ..." if n > 3 else "")
        return (f"{n:,} file{'' if n == 1 else 's'} not in the manifest ({names}): the output of a shard this run does "
                f"not have (its input removed) or that failed now; kept, but reading the folder leaves "
                f"{'it' if n == 1 else 'them'} out")


def _version() -> str:
    return __version__


def _checked_output(output: Any, shard: Shard) -> ShardOutput:
    """The work's output, checked once: a ShardOutput whose counts add up."""
    if not isinstance(output, ShardOutput):
        raise TypeError(f"the work on {shard.name} returned {type(output).__name__}, expected a ShardOutput")
    if not isinstance(output.frame, pd.DataFrame):
        raise TypeError(f"the work on {shard.name} returned a frame of type {type(output.frame).__name__}")
    if output.n_read < len(output.frame):
        raise ValueError(f"the work on {shard.name} kept {len(output.frame):,} rows of {output.n_read:,} read")
    return output


def _output_bytes(output: ShardOutput) -> bytes:
    """The output shard's Parquet bytes (:func:`trace_core.data.write_dataset`), or the work's own."""
    if output.data is not None:
        return output.data
    buffer = io.BytesIO()
    write_dataset(output.frame, buffer, traces=output.traces, format="parquet")
    return buffer.getvalue()


def _rejected(errors: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"row": int(e.row), "field": str(e.field), "message": str(e.message)} for e in errors]


def _stored(shard: Shard, out_dir: str | os.PathLike[str],
            settings: Mapping[str, Any]) -> tuple[int, str, ShardResult | None, str | None]:
    """The input's size and digest, its "skipped" result when an earlier run completed it (else None), and why its
    entry was disregarded when the entry names another output file than the shard's own (else None)."""
    size, digest = file_digest(shard.path)
    stored = read_entry(out_dir, shard.output)
    if is_complete(stored, out_dir, input_name=shard.name, input_size=size, input_sha256=digest, settings=settings,
                   output=shard.output):
        return size, digest, ShardResult(shard=shard, status="skipped", entry=stored), None
    return size, digest, None, None if stored is None else output_problem(stored, shard.output)


def stored_result(shard: Shard, out_dir: str | os.PathLike[str], *,
                  settings: Mapping[str, Any]) -> ShardResult | None:
    """The shard's ``"skipped"`` result when an earlier run completed it
    (:func:`~trace_core.scale.manifest.is_complete`), else None: what a driver asks before it sends a shard to a
    worker (:func:`process_shard` asks again, so a shard completed meanwhile is not redone)."""
    return _stored(shard, out_dir, settings)[2]


def _failure(exc: BaseException) -> str:
    """Why a shard failed, in the words of its error, without secrets (a reason may quote a file's columns or a
    server's reply), redacted whole before anything cuts it."""
    return redact_secrets(str(exc).strip()) or type(exc).__name__


def process_shard(shard: Shard, out_dir: str | os.PathLike[str], work: ShardWork, *, settings: Mapping[str, Any],
                  command: str = "", skip_errors: tuple[type[Exception], ...] = ()) -> ShardResult:
    """One shard, start to finish: skipped when complete (:func:`~trace_core.scale.manifest.is_complete`), else
    its work run, its output shard written (Parquet, atomically) and then its entry.

    Parameters
    ----------
    shard : Shard
        From :func:`~trace_core.scale.list_shards`.
    out_dir : str or path
        The output folder (it exists).
    work : callable(Shard) -> ShardOutput
        Makes the shard's rows; called only when the shard is not complete.
    settings : mapping of JSON values
        What shapes the output (a model, options): recorded in the entry; an entry with other settings is redone.
    command : str
        The command line, recorded in the entry.
    skip_errors : tuple of exception types
        Errors of the work that fail this shard only (the result says why; no entry is written, so a rerun tries
        it again); any other error propagates.

    Returns
    -------
    ShardResult
    """
    size, digest, stored, disregarded = _stored(shard, out_dir, settings)
    if stored is not None:
        return stored
    try:
        output = _checked_output(work(shard), shard)
    except skip_errors as exc:
        return ShardResult(shard=shard, status="failed", error=_failure(exc))
    data = _output_bytes(output)
    write_atomic(Path(out_dir) / shard.output, data)
    entry = ShardEntry(input=shard.name, input_size=size, input_sha256=digest, rows_read=int(output.n_read),
                       rows_kept=len(output.frame), rows_rejected=int(output.n_read) - len(output.frame),
                       output=shard.output, output_size=len(data), output_sha256=sha256(data).hexdigest(),
                       settings=plain_settings(settings), version=_version(), command=command,
                       rejected=_rejected(output.errors))
    write_entry(out_dir, entry)
    return ShardResult(shard=shard, status="done", entry=entry,
                       problems=tuple(f"{shard.name}: {e}" for e in output.errors),
                       notes=tuple(f"{shard.name}: {n}" for n in [*([disregarded] if disregarded else []),
                                                                    *output.notes]))


def _check_shards(shards: Sequence[Shard], out_dir: Path) -> None:
    """No shard inside the output folder (a rerun would read outputs as inputs), no output name twice, and none too
    long to write (:func:`~trace_core.scale.shards.check_output_names`)."""
    root = out_dir.resolve()
    outputs: dict[str, str] = {}
    for shard in shards:
        if not isinstance(shard, Shard):
            raise TypeError(f"`shards` must hold Shard objects (list_shards), got {type(shard).__name__}")
        if root == shard.path.resolve().parent or root in shard.path.resolve().parents:
            raise ValueError(f"the shard {shard.name[:200]} is inside the output folder; write the output elsewhere")
        if shard.output.lower() in outputs:
            raise ValueError(f"the shards {outputs[shard.output.lower()][:80]} and {shard.name[:80]} would both be "
                             f"written to {shard.output[:80]}")
        outputs[shard.output.lower()] = shard.name
    check_output_names(shards)


def slim_result(result: ShardResult) -> ShardResult:
    """A result without its per-row lists (rejected rows, notes), as a run keeps it: a run holds one shard's rows
    at a time, however many it rejected (they stay in the shard's entry file)."""
    entry = replace(result.entry, rejected=[]) if result.entry is not None else None
    return replace(result, entry=entry, problems=(), notes=())


def run_shards(shards: Sequence[Shard], out_dir: str | os.PathLike[str], work: ShardWork, *,
               settings: Mapping[str, Any], command: str = "", skip_errors: tuple[type[Exception], ...] = (),
               on_shard: Callable[[ShardResult, int, int], None] | None = None) -> RunSummary:
    """Work through ``shards`` one at a time into ``out_dir``, resuming where an earlier run stopped.

    The temporary files an interrupted run left are removed first; each shard then goes through
    :func:`process_shard` (complete shards are skipped, others redone from the start), holding one shard's rows at a
    time; at the end ``OUT/manifest.json`` lists every complete shard's entry. A process killed at any point loses
    at most the shard it was working on, which the next run redoes. The run holds the folder's lock
    (:func:`~trace_core.scale.lock.folder_lock`) from start to end: a second run writing the same folder meanwhile
    is refused (:class:`~trace_core.scale.lock.FolderInUseError`) before any work.

    Parameters
    ----------
    shards : sequence of Shard
        From :func:`~trace_core.scale.list_shards`; none inside ``out_dir``.
    out_dir : str or path
        The output folder; created when missing (with its parents).
    work, settings, command, skip_errors
        See :func:`process_shard`.
    on_shard : callable(result, index, total) or None
        Called after each shard (index from 1), e.g. to report progress and the rejected rows.

    Returns
    -------
    RunSummary

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from trace_core.scale import list_shards
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (root / "in").mkdir(), (root / "in" / "a.csv").write_text("prompt,answer\\nQ,A\\n")
    >>> def work(shard):
    ...     frame = pd.read_csv(shard.path)
    ...     return ShardOutput(frame=frame, traces=None, n_read=len(frame))
    >>> run_shards(list_shards(root / "in"), root / "out", work, settings={}).sentence()
    '1 shard: 1 written, 0 already complete; 1 row read: 1 kept, 0 rejected'
    >>> run_shards(list_shards(root / "in"), root / "out", work, settings={}).sentence()
    '1 shard: 0 written, 1 already complete; 1 row read: 1 kept, 0 rejected'
    """
    with folder_lock(out_dir):
        out, settings = start_run(shards, out_dir, settings)
        results = []
        for index, shard in enumerate(shards, start=1):
            result = process_shard(shard, out, work, settings=settings, command=command, skip_errors=skip_errors)
            if on_shard is not None:
                on_shard(result, index, len(shards))
            results.append(slim_result(result))
        return finish_run(results, out, settings=settings, command=command)


def start_run(shards: Sequence[Shard], out_dir: str | os.PathLike[str],
              settings: Mapping[str, Any]) -> tuple[Path, dict[str, Any]]:
    """What a run does before its first shard, whatever runs the shards: the output folder created (with its
    parents), the shards checked against it (none inside it, no output name twice), the temporary files of an
    interrupted run removed. Returns the folder and the settings as stored (JSON values)."""
    settings = plain_settings(settings)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _check_shards(shards, out)
    remove_leftovers(out)
    return out, settings


def finish_run(results: Sequence[ShardResult], out_dir: str | os.PathLike[str], *, settings: Mapping[str, Any],
               command: str = "") -> RunSummary:
    """What a run does after its last shard: ``OUT/manifest.json`` written from ``results`` (one per shard, in the
    shards' order; :func:`slim_result`'s are enough), and the run's summary."""
    summary = RunSummary(results=list(results))
    summary.manifest = write_manifest(out_dir, [r.entry for r in summary.results if r.entry is not None],
                                      settings=settings, version=_version(), command=command,
                                      failed={r.shard.name: r.error for r in summary.failed})
    summary.unlisted = _unlisted(Path(out_dir), {r.shard.output for r in summary.results if r.entry is not None})
    return summary


def _unlisted(out: Path, listed: set[str]) -> list[str]:
    """The dataset files at the top of ``out`` that are not among ``listed`` (the complete shards' outputs)."""
    return sorted(p.name for p in out.iterdir() if p.suffix.lower() in SHARD_FORMATS and p.name not in listed
                  and p.name != MANIFEST_FILE and not p.name.startswith((".", "_")) and p.is_file())
