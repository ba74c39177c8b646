"""The manifest of an output folder: what each output shard was made from and with which settings, written once
the shard is complete, so that a rerun knows which shards it can skip.

Layout of an output folder::

    OUT/a__b.parquet             one output shard per input shard (renamed into place only when complete)
    OUT/_manifest/a__b.json      its entry (:class:`ShardEntry`), written after the output shard
    OUT/manifest.json            every entry of the run, with totals (:func:`write_manifest`), written at its end

Each shard's entry is a small file of its own, so that parallel workers never write the same file. Every file is
written whole or not at all (:func:`write_atomic`: a temporary file in the same folder, fsync, ``os.replace``);
temporary files left by an interrupted run start with ``.`` and end ``.tmp`` and are removed by
:func:`remove_leftovers` when the next run starts.

A shard is complete (:func:`is_complete`) when its entry exists, names the same input (name, size, SHA-256), the
same settings and the output file the shard's name gives (never another shard's, nor a path out of the folder), and
that output file exists with the SHA-256 the entry records. Anything else (no entry, a changed input or settings, an
entry naming another output, an output cut short or missing) makes the shard run again.

Every text written into an entry or the manifest (the command, rejected rows' messages, failure reasons) passes
through :func:`~trace_core.settings.redact_secrets` first: a reason may quote a file's columns or a server's reply.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from trace_core.settings import redact_secrets

__all__ = ["ENTRY_FOLDER", "MANIFEST_FILE", "MANIFEST_VERSION", "MAX_OUTPUT_BYTES", "ShardEntry", "entry_path",
           "file_digest", "is_complete", "listed_outputs", "output_name", "output_problem", "plain_settings",
           "read_entry", "remove_leftovers", "write_atomic", "write_entry", "write_manifest"]

ENTRY_FOLDER = "_manifest"
MANIFEST_FILE = "manifest.json"
MANIFEST_VERSION = 1
_TEMP_PREFIX, _TEMP_SUFFIX = ".", ".tmp"
_CHUNK = 1 << 20
# A file name's limit in bytes on common file systems, and what a temporary file adds to its target's name
# (:func:`write_atomic`: the prefix, "." + a process id of up to 10 digits + "-" + 8 hex digits, the suffix).
_NAME_MAX = 255
_TEMP_EXTRA = len(_TEMP_PREFIX) + 1 + 10 + 1 + 8 + len(_TEMP_SUFFIX)
#: The longest output file name (UTF-8 bytes) a run can write: its temporary file's name must fit the file system.
MAX_OUTPUT_BYTES = _NAME_MAX - _TEMP_EXTRA
_MANIFEST_HEAD = re.compile(rb'\s*\{\s*"manifest_version"\s*:')  # how write_manifest's document starts

_OUTPUT_SUFFIX = ".parquet"
_SEPARATOR = "__"


def output_name(name: str) -> str:
    """The output file name of a shard named ``name`` (relative, ``/`` separators): ``"a/b.jsonl"`` ->
    ``"a__b.parquet"``.

    >>> output_name("2026/05/part-0.jsonl")
    '2026__05__part-0.parquet'
    """
    stem = name[: -len(Path(name).suffix)] if Path(name).suffix else name
    return stem.replace("/", _SEPARATOR) + _OUTPUT_SUFFIX


@dataclass(frozen=True)
class ShardEntry:
    """One complete output shard: where it came from, what it holds and what made it.

    Attributes
    ----------
    input : str
        The input shard's name (:attr:`~trace_core.scale.Shard.name`).
    input_size, input_sha256 : int, str
        The input file's size in bytes and SHA-256 (hex) when it was read.
    rows_read, rows_kept, rows_rejected : int
        Data rows read from the input, written to the output, and rejected (``rows_read = rows_kept +
        rows_rejected``).
    output : str
        The output file's name in the output folder.
    output_size, output_sha256 : int, str
        The output file's size in bytes and SHA-256 (hex).
    settings : dict
        The settings that shaped the output (JSON values); a rerun with other settings redoes the shard.
    version : str
        The ``trace_core`` version that wrote it.
    command : str
        The command that ran (secrets removed), or "".
    rejected : list of dict
        Every rejected row's problems, ``{"row": n, "field": ..., "message": ...}`` with the row numbered in the
        input shard as the dataset reader numbers it: no row goes missing without a word.
    """

    input: str
    input_size: int
    input_sha256: str
    rows_read: int
    rows_kept: int
    rows_rejected: int
    output: str
    output_size: int
    output_sha256: str
    settings: dict[str, Any]
    version: str
    command: str = ""
    rejected: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The entry as a JSON object."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ShardEntry:
        """An entry from :meth:`to_json`'s object; ValueError when a field is missing or of the wrong kind."""
        names = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
        missing = sorted(required - set(data))
        if missing:
            raise ValueError(f"manifest entry without {', '.join(missing)}")
        entry = cls(**{k: v for k, v in data.items() if k in names})
        if not isinstance(entry.settings, dict) or not all(
                isinstance(getattr(entry, n), int) for n in ("input_size", "rows_read", "rows_kept", "output_size")):
            raise ValueError("manifest entry with a field of the wrong kind")
        return entry


def plain_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` as the JSON values they are stored as (tuples become lists, keys strings), so that a stored
    entry's settings and a run's compare equal when they say the same; TypeError when one is not JSON-able."""
    if not isinstance(settings, Mapping):
        raise TypeError(f"`settings` must be a mapping of JSON values, got {type(settings).__name__}")
    try:
        return json.loads(json.dumps(dict(settings), sort_keys=True, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"`settings` must hold JSON values only: {exc}") from None


def file_digest(path: str | os.PathLike[str]) -> tuple[int, str]:
    """(size in bytes, SHA-256 hex digest) of a file, read in 1 MiB pieces (never whole)."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened, as on Windows)."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: into a temporary file in the same folder (``.NAME.*.tmp``),
    flushed and fsynced, then renamed over ``path`` (``os.replace`` is atomic within a file system). A process killed
    at any point leaves either the old file or the new one, and perhaps a temporary file that
    :func:`remove_leftovers` removes."""
    path = Path(path)
    temp = path.parent / f"{_TEMP_PREFIX}{path.name}.{os.getpid()}-{secrets.token_hex(4)}{_TEMP_SUFFIX}"
    # os.open with mode 0o666 gives the file the permissions the umask allows, like any file the user writes
    handle = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


def remove_leftovers(out_dir: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files an interrupted run left in ``out_dir`` and its entry folder; returns them. Call
    it once when a run starts, never while workers write into the folder."""
    removed = []
    for folder in (Path(out_dir), Path(out_dir) / ENTRY_FOLDER):
        if folder.is_dir():
            for path in folder.iterdir():
                if path.name.startswith(_TEMP_PREFIX) and path.name.endswith(_TEMP_SUFFIX) and path.is_file():
                    path.unlink(missing_ok=True)
                    removed.append(path)
    return removed


def entry_path(out_dir: str | os.PathLike[str], output: str) -> Path:
    """Where the entry of the output shard ``output`` is kept: ``OUT/_manifest/<output without .parquet>.json``."""
    return Path(out_dir) / ENTRY_FOLDER / (Path(output).stem + ".json")


def write_entry(out_dir: str | os.PathLike[str], entry: ShardEntry) -> Path:
    """Write a shard's entry (atomically); call it only once the output shard is in place."""
    path = entry_path(out_dir, entry.output)
    path.parent.mkdir(exist_ok=True)
    data = entry.to_json()
    data["command"] = redact_secrets(entry.command)
    data["rejected"] = [{k: redact_secrets(v) if isinstance(v, str) else v for k, v in problem.items()}
                        for problem in entry.rejected]
    write_atomic(path, (json.dumps(data, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
    return path


def read_entry(out_dir: str | os.PathLike[str], output: str) -> ShardEntry | None:
    """The entry of the output shard ``output``, or None when there is none or it cannot be read (a damaged entry
    only means the shard runs again)."""
    try:
        return ShardEntry.from_json(json.loads(entry_path(out_dir, output).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def output_problem(entry: ShardEntry, output: str) -> str | None:
    """Why ``entry`` cannot be the entry of the output shard ``output`` (the name the project derives for the shard,
    :func:`~trace_core.scale.output_name`), or None: an entry that names another file (another shard's output, or a
    path out of the folder) is never believed."""
    if entry.output == output and Path(output).name == output and output not in ("", ".", ".."):
        return None
    return (f"its manifest entry names the output {str(entry.output)[:120]!r}, not {output[:120]!r}; the entry is "
            "disregarded and the shard made again")


def is_complete(entry: ShardEntry | None, out_dir: str | os.PathLike[str], *, input_name: str, input_size: int,
                input_sha256: str, settings: Mapping[str, Any], output: str | None = None) -> bool:
    """Whether a shard's output is complete: ``entry`` exists, names this input (name, size and digest), these
    settings and the shard's own output file (``output``; default the name derived from ``input_name``), and that
    file exists with the size and digest it records (the output is read to check)."""
    if entry is None:
        return False
    if output is None:

        output = output_name(input_name)
    if output_problem(entry, output) is not None:
        return False
    if (entry.input, entry.input_size, entry.input_sha256) != (input_name, input_size, input_sha256):
        return False
    if entry.settings != plain_settings(settings):
        return False
    path = Path(out_dir) / output
    try:
        if not path.is_file() or path.stat().st_size != entry.output_size:
            return False
        return file_digest(path) == (entry.output_size, entry.output_sha256)
    except OSError:
        return False


def _brief(entry: ShardEntry) -> dict[str, Any]:
    """An entry as the combined manifest lists it: every field but the rejected rows, and where its file is."""
    fields_ = {k: v for k, v in entry.to_json().items() if k != "rejected"}
    fields_["command"] = redact_secrets(entry.command)
    return {**fields_, "entry": f"{ENTRY_FOLDER}/{entry_path('.', entry.output).name}"}


def write_manifest(out_dir: str | os.PathLike[str], entries: Iterable[ShardEntry], *,
                   settings: Mapping[str, Any], version: str, command: str = "",
                   failed: Mapping[str, str] | None = None) -> Path:
    """Write ``OUT/manifest.json`` (atomically): the run's settings, version and command, the totals, every
    complete shard's entry in the order given (the shards' order) without its list of rejected rows (that stays in
    the shard's entry file, named by ``"entry"``, so the combined file stays small whatever was rejected), and the
    shards that failed (input name -> why; they have no entry and run again next time). Every text is written
    without secrets (:func:`~trace_core.settings.redact_secrets`)."""
    entries = list(entries)
    totals = {key: sum(getattr(e, key) for e in entries) for key in ("rows_read", "rows_kept", "rows_rejected")}
    document = {"manifest_version": MANIFEST_VERSION, "trace_core": version, "command": redact_secrets(command),
                "settings": plain_settings(settings), "shards": len(entries), **totals,
                "entries": [_brief(e) for e in entries],
                "failed": {redact_secrets(str(k)): redact_secrets(str(v)) for k, v in (failed or {}).items()}}
    path = Path(out_dir) / MANIFEST_FILE
    write_atomic(path, (json.dumps(document, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
    return path


def listed_outputs(folder: str | os.PathLike[str]) -> set[str] | None:
    """The output files that ``folder``'s ``manifest.json`` lists, when the folder holds one written by a sharded
    run (None otherwise): a folder read as input is read as its manifest describes it, never with the outputs of
    shards an earlier run had and this one did not. ValueError when the project's manifest is damaged."""
    path = Path(folder) / MANIFEST_FILE
    if not is_manifest_file(path):
        return None
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        listed = {str(e["output"]) for e in document["entries"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{str(path)[:200]}: a damaged manifest ({str(exc)[:120]}); run the command that wrote the "
                         "folder again, or remove the file") from None
    return listed


def is_manifest_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a ``manifest.json`` that a sharded run wrote (its name, and its first field): bookkeeping
    of an output folder, never a shard."""
    path = Path(path)
    if path.name != MANIFEST_FILE:
        return False
    try:
        with open(path, "rb") as handle:
            head = handle.read(256)
    except OSError:
        return False
    return _MANIFEST_HEAD.match(head) is not None
