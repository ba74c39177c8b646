"""One writer per output folder: a sharded run holds ``OUT/.trace-core.lock`` (holding its process id) from its
start to its end, so that a second run writing the same folder at the same time is refused before any work instead
of both succeeding with their shards mixed.

On POSIX the file carries an advisory lock (``flock``) that the system drops when the process ends however it ends,
so a lock file left by a killed run is taken over by the next run; the file is removed when the run ends, also on an
error. Where ``flock`` is missing, the file's existence is the lock, and a file left by a killed run is named in the
refusal so that the user can remove it. The lock is reentrant within a thread: the command line takes it before any
work and the runner it calls takes it again without conflict.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["LOCK_FILE", "FolderInUseError", "folder_lock"]

#: The lock file's name in an output folder (hidden: never taken for a shard).
LOCK_FILE = ".trace-core.lock"

_HELD: dict[str, tuple[int, int]] = {}  # real path of a folder -> (holding thread, depth)
_HELD_LOCK = threading.Lock()


class FolderInUseError(RuntimeError):
    """Another run holds the output folder's lock; the message names the folder and the run's process id."""


def _holder(path: Path) -> str:
    """The process id written in a lock file, or "?" when it cannot be read."""
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return "?"
    return text[:20] if text.isdigit() else "?"


def _busy(folder: Path, path: Path, *, stale_possible: bool) -> FolderInUseError:
    hint = (f"; if no such run is going, remove {LOCK_FILE} from the folder" if stale_possible else
            "; wait for it to end, or write to another folder")
    return FolderInUseError(f"{str(folder)[:200]}: another trace-core run (process {_holder(path)}) is writing this "
                            f"folder{hint}")


def _take_flock(folder: Path, fcntl) -> IO[str]:
    """The open lock file with its ``flock`` held; FolderInUseError when another process holds it. A lock file
    removed by its holder while this process opened it is opened again (the lock must be on the file at the path)."""
    path = folder / LOCK_FILE
    for _ in range(10):
        handle = open(path, "a+", encoding="ascii")  # noqa: SIM115 - kept open for as long as the lock is held
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise _busy(folder, path, stale_possible=False) from None
        try:
            same = os.path.samestat(os.fstat(handle.fileno()), os.stat(path))
        except OSError:
            same = False
        if same:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            return handle
        handle.close()  # the holder removed the file meanwhile: lock the new one
    raise _busy(folder, path, stale_possible=False)


def _take_file(folder: Path) -> IO[str]:
    """Without ``flock``: the lock file created exclusively; FolderInUseError when it exists."""
    path = folder / LOCK_FILE
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        raise _busy(folder, path, stale_possible=True) from None
    stream = os.fdopen(handle, "w", encoding="ascii")
    stream.write(f"{os.getpid()}\n")
    stream.flush()
    return stream


@contextlib.contextmanager
def folder_lock(out_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the output folder's lock for the block (the folder is created first, with its parents); yields the
    folder. Raises FolderInUseError, before the block runs, when another run holds it. The lock file is removed when
    the block ends, however it ends."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    key = os.path.realpath(folder)
    me = threading.get_ident()
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held is not None and held[0] == me:
            _HELD[key] = (me, held[1] + 1)
            nested = True
        elif held is not None:
            raise _busy(folder, folder / LOCK_FILE, stale_possible=False)
        else:
            nested = False
    if nested:
        try:
            yield folder
        finally:
            with _HELD_LOCK:
                _HELD[key] = (me, _HELD[key][1] - 1)
        return
    yield from _held(folder, key, me)


def _held(folder: Path, key: str, me: int) -> Iterator[Path]:
    """The outermost hold of a folder's lock: taken, registered for this thread, released and removed at the end."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        handle = _take_file(folder)
    else:
        handle = _take_flock(folder, fcntl)
    with _HELD_LOCK:
        _HELD[key] = (me, 1)
    try:
        yield folder
    finally:
        with _HELD_LOCK:
            _HELD.pop(key, None)
        with contextlib.suppress(OSError):
            (folder / LOCK_FILE).unlink()  # removed while still held: no other run locks the file being removed
        handle.close()
