"""How many threads torch's CPU operations use: the CPUs the process really has, and the count chosen for a model.

torch sizes its intra-op pool from the cores it sees, not from the process's CPU quota (a container given 2 CPUs on a
64-core host may start 64 threads), and on a busy 2-core machine its 2 OpenMP threads spin-wait while another process
holds a core. Decoding then slows by an order of magnitude (SmolLM2-135M-Instruct: 19.4 s per answer with
torch's default threads, 1.28 s with one thread, the same answers; ``python -m bench.threads`` measures it).

* :func:`available_cpus` -- the CPUs this process may run on: its affinity mask, capped by its cgroup's CPU quota
  (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), else ``os.cpu_count()``.
* :func:`automatic_threads` -- the policy: one thread for a small model (a decoding step's matrices are too small
  for a second thread to pay for its synchronisation, and one thread never waits on a core another process holds),
  else every available CPU.
* :func:`choose_threads` -- the count a load uses: the caller's, else ``TRACE_THREADS``, else none when the user set
  ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` (torch already follows them), else the automatic one.
* :func:`model_threads` -- the count a loaded model records with (``LoadedModel.threads``), and
  :func:`torch_threads` -- applies it around each recording call, in the thread that runs the model.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trace_core import settings
from trace_core.checks import check_int

__all__ = ["SMALL_MODEL_PARAMETERS", "automatic_threads", "available_cpus", "cgroup_cpu_limit", "choose_threads",
           "model_threads", "torch_threads"]

#: Models with at most this many parameters decode on one intra-op thread. On a shared 2-core machine,
#: SmolLM2-135M-Instruct (134.5 M) generated as fast on one thread as on two when idle (0.96-0.98x) and 3.1-3.9x
#: faster beside a competing process, and streamed 1.03-1.35x faster (docs/performance.md, "threads"). The boundary
#: itself is not measured: a model whose matrices are large enough gains from more threads on an idle machine.
SMALL_MODEL_PARAMETERS = 500_000_000

_PROC_CGROUP = Path("/proc/self/cgroup")
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _ancestors(root: Path, inside: str) -> list[Path]:
    """``root/inside`` and each folder above it up to ``root`` (a quota set on a parent group limits its children)."""
    parts = [p for p in inside.split("/") if p and p not in (".", "..")]
    return [root.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _v2_limit(folder: Path) -> float | None:
    """CPUs allowed by ``folder/cpu.max`` ("QUOTA PERIOD" in microseconds; "max PERIOD": no limit)."""
    fields = (_read(folder / "cpu.max") or "").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v1_limit(folder: Path) -> float | None:
    """CPUs allowed by ``folder/cpu.cfs_quota_us`` over ``cpu.cfs_period_us`` (a quota of -1: no limit)."""
    try:
        quota = int(_read(folder / "cpu.cfs_quota_us") or "-1")
        period = int(_read(folder / "cpu.cfs_period_us") or "0")
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v1_mounts(root: Path) -> list[Path]:
    """The cgroup v1 hierarchies that hold the ``cpu`` controller (``cpu``, ``cpu,cpuacct``, ...)."""
    try:
        return sorted(p for p in root.iterdir() if "cpu" in p.name.split(",") and p.is_dir())
    except OSError:
        return []


def cgroup_cpu_limit(*, proc_cgroup: str | Path = _PROC_CGROUP, cgroup_root: str | Path = _CGROUP_ROOT) -> float | None:
    """The CPU quota of this process's control group, in CPUs (1.5: one and a half CPUs' time per period).

    The process's group comes from ``proc_cgroup`` (lines ``ID:CONTROLLERS:PATH``); its quota, and each parent
    group's (the smallest wins), from cgroup v2's ``cpu.max`` under ``cgroup_root``, or from cgroup v1's
    ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` in the hierarchy that holds the ``cpu`` controller. Inside a
    container whose group is not visible at its path, the root's own files are read.

    Parameters
    ----------
    proc_cgroup, cgroup_root : str or Path
        Where the process's group and the cgroup file system are (``/proc/self/cgroup``, ``/sys/fs/cgroup``);
        tests point them at fixture files.

    Returns
    -------
    float or None
        The quota in CPUs; None when there is none ("max", -1) or nothing can be read.

    Examples
    --------
    >>> cgroup_cpu_limit()  # doctest: +SKIP
    2.0
    """
    root = Path(cgroup_root)
    limits: list[float] = []
    for line in (_read(Path(proc_cgroup)) or "").splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, inside = fields
        if controllers == "":  # cgroup v2: one unified hierarchy
            folders, read = _ancestors(root, inside), _v2_limit
        elif "cpu" in controllers.split(","):
            folders = [folder for mount in _v1_mounts(root) for folder in _ancestors(mount, inside)]
            read = _v1_limit
        else:
            continue
        limits += [limit for limit in map(read, folders) if limit is not None]
    return min(limits) if limits else None


def _affinity() -> Collection[int]:
    return os.sched_getaffinity(0)


def available_cpus(*, affinity: Callable[[], Collection[int]] | None = None, proc_cgroup: str | Path = _PROC_CGROUP,
                   cgroup_root: str | Path = _CGROUP_ROOT) -> int:
    """The number of CPUs this process can really use: its affinity, capped by its cgroup's CPU quota.

    ``floor(quota)`` CPUs, at least 1, when a quota is set (1.5 CPUs -> 1: a second thread would be throttled half
    of each period); the affinity mask's size where the platform has one (``os.sched_getaffinity``), else
    ``os.cpu_count()``. What cannot be read is left out, never guessed.

    Parameters
    ----------
    affinity : callable() -> collection of int, optional
        The CPUs the process may run on; default ``os.sched_getaffinity(0)`` where it exists.
    proc_cgroup, cgroup_root : str or Path
        As for :func:`cgroup_cpu_limit`.

    Returns
    -------
    int
        At least 1.

    Examples
    --------
    >>> available_cpus(affinity=lambda: {0, 1, 2, 3}, proc_cgroup="/nonexistent")
    4
    """
    read = affinity if affinity is not None else _affinity if hasattr(os, "sched_getaffinity") else None
    cpus = None
    if read is not None:
        try:
            cpus = len(read()) or None
        except OSError:
            cpus = None
    if cpus is None:
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit(proc_cgroup=proc_cgroup, cgroup_root=cgroup_root)
    if limit is not None:
        cpus = min(cpus, max(1, math.floor(limit)))
    return max(1, cpus)


def automatic_threads(parameters: int, *, cpus: int | None = None) -> int:
    """The automatic intra-op thread count for a model of ``parameters`` parameters.

    One thread up to :data:`SMALL_MODEL_PARAMETERS`; above it, every available CPU (``cpus``, default
    :func:`available_cpus`), never the host's core count.

    >>> automatic_threads(134_515_008, cpus=8)
    1
    >>> automatic_threads(7_000_000_000, cpus=8)
    8
    """
    parameters = check_int(parameters, "parameters", minimum=0)
    if parameters <= SMALL_MODEL_PARAMETERS:
        return 1
    return check_int(cpus, "cpus", minimum=1) if cpus is not None else available_cpus()


def choose_threads(parameters: int, threads: int | None = None) -> int | None:
    """The intra-op thread count a model load applies, or None to leave torch's own.

    In order: ``threads`` when given (``--threads``, ``load_model(threads=...)``); else the setting
    ``TRACE_THREADS``; else None when the user set ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` (torch already runs
    that many); else :func:`automatic_threads`. An explicit count is used as given, even above the CPUs available.

    Raises
    ------
    ValueError, TypeError
        ``threads`` is not an int >= 1.
    trace_core.settings.SettingError
        ``TRACE_THREADS`` is not a whole number >= 1.
    """
    if threads is not None:
        return check_int(threads, "threads", minimum=1)
    chosen = settings.get("TRACE_THREADS")
    if chosen is not None:
        return int(chosen)
    if settings.user_thread_variable() is not None:  # torch already follows it
        return None
    return automatic_threads(parameters)


def model_threads(model: Any, threads: int | None = None) -> int:
    """The intra-op thread count recording with ``model`` runs on: :func:`choose_threads` of its parameter count, or
    torch's own count when that leaves it to torch (the user's ``OMP_NUM_THREADS``)."""
    import torch

    chosen = choose_threads(sum(p.numel() for p in model.parameters()), threads)
    return int(chosen if chosen is not None else torch.get_num_threads())


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op threads set to ``count`` while the block runs, then set back (``count`` 0: left alone).

    torch keeps the count per thread (OpenMP's setting is the calling thread's), so a recording call sets it in the
    thread that runs the model, for that call only: the sentence-embedding model of the semantic baselines, or
    another session's work, keeps torch's own count. The inter-op pool is left alone: ``generate`` and teacher
    forcing run no inter-op work.
    """
    import torch

    before = torch.get_num_threads()
    if count < 1 or count == before:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
