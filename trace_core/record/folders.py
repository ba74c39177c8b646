"""What a Hugging Face model folder holds, and whether a name is a path or a model id.

Shared by :func:`trace_core.record.load_model` and :func:`trace_core.methods.semantic.load_embedder`, which refuse
pickle weights the same way. Nothing here imports torch or transformers; :func:`check_folder_files` reads JSON files and
safetensors headers (never weights) to refuse, before loading, weight files outside the folder and malformed files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from trace_core.checks import shorten

__all__ = ["CHECKED_JSON", "INDEX_FILES", "FolderError", "FolderEscapeError", "ModelFolder", "cached_snapshot",
           "check_folder_files", "looks_like_path", "model_folder", "read_json"]


@dataclass(frozen=True)
class ModelFolder:
    """The files that decide whether (and how safely) a folder made by ``save_pretrained`` can be loaded.

    Attributes
    ----------
    path : Path
        The folder (``~`` expanded).
    has_config : bool
        ``config.json`` is there.
    has_safetensors : bool
        Safetensors weights: ``*.safetensors`` or a sharded ``model.safetensors.index.json``.
    has_pickle : bool
        Pickle weights (``pytorch_model*.bin``, ``*.pt``, ``*.pth``), which can run code when loaded.
    """

    path: Path
    has_config: bool
    has_safetensors: bool
    has_pickle: bool

    @property
    def only_pickle(self) -> bool:
        """Loading would need the pickle weights: there are no safetensors to prefer."""
        return self.has_pickle and not self.has_safetensors


def model_folder(name: str | Path) -> ModelFolder | None:
    """What the folder ``name`` holds; None when ``name`` is not an existing folder.

    >>> model_folder("/no/such/folder") is None
    True
    """
    path = Path(name).expanduser()
    if not path.is_dir():
        return None
    return ModelFolder(
        path=path,
        has_config=(path / "config.json").is_file(),
        has_safetensors=any(path.glob("*.safetensors")) or (path / "model.safetensors.index.json").is_file(),
        has_pickle=any(path.glob("pytorch_model*.bin")) or any(path.glob("*.pt")) or any(path.glob("*.pth")),
    )


def cached_snapshot(model_id: str) -> Path | None:
    """The folder of ``model_id``'s snapshot in the local Hugging Face cache (where its ``config.json`` is); None when
    it is not cached, ``model_id`` is not a valid id, or the hub package is missing. Reads the cache only."""
    try:
        from huggingface_hub import try_to_load_from_cache

        config = try_to_load_from_cache(model_id, "config.json")
    except Exception:  # noqa: BLE001 - not a valid id, no hub package: nothing cached under that name
        return None
    return Path(config).parent if isinstance(config, str) else None


def looks_like_path(name: str) -> bool:
    """Whether ``name`` is meant as a path rather than a Hugging Face model id (``org/model``).

    A model id has at most one ``/`` and no leading ``.``, ``/`` or ``~``; anything else, or anything that exists
    on disk, is a path, so a mistyped folder gets a "no folder there" message instead of a cache look-up.

    >>> looks_like_path("./models/tiny"), looks_like_path("org/model")
    (True, False)
    """
    return (name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1
            or Path(name).expanduser().exists())


# ----------------------------------------------------------------------------------------------------------------
# What is read before a folder is loaded: every weight file inside the folder, well-formed headers and JSON files

#: JSON files of a model folder that are checked (well-formed, not too deep, not too large) before loading.
CHECKED_JSON = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json")
#: Sharded weights: an index whose ``weight_map`` names the shard files.
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.pt", "*.pth")
_MAX_JSON_BYTES = 64 * 2**20
_MAX_HEADER_BYTES = 100_000_000  # the safetensors format's own limit


class FolderError(ValueError):
    """A file of a model folder is malformed; ``file`` is its path relative to the folder."""

    def __init__(self, file: str, problem: str) -> None:
        super().__init__(f"{file} {problem}")
        self.file = file
        self.problem = problem


class FolderEscapeError(FolderError):
    """A weight file (or a target of a sharded-weights index) resolves outside the model folder."""


def _containing_root(path: Path) -> Path:
    """Where a folder's files may resolve: the folder itself; for a Hugging Face cache snapshot
    (``models--org--name/snapshots/<revision>``), its cache repository, whose ``blobs/`` its symlinks point to."""
    root = path.resolve()
    if root.parent.name == "snapshots" and root.parent.parent.name.startswith("models--"):
        return root.parent.parent
    return root


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a symlink loop
        return False
    return True


def read_json(folder: Path, file: str) -> Any:
    """The parsed JSON file ``folder / file``; :class:`FolderError` naming ``file`` if unreadable or malformed."""
    path = folder / file
    try:
        size = path.stat().st_size
        if size > _MAX_JSON_BYTES:
            raise FolderError(file, f"is {size:,} bytes, more than the {_MAX_JSON_BYTES:,} read for a JSON file")
        text = path.read_bytes().decode("utf-8-sig")
    except FolderError:
        raise
    except UnicodeDecodeError as exc:
        raise FolderError(file, f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise FolderError(file, f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise FolderError(file, "is nested too deeply to be a model file (JSON arrays/objects inside each other)") \
            from None
    except ValueError as exc:
        raise FolderError(file, f"is not valid JSON ({shorten(str(exc))})") from None


def _check_safetensors_header(folder: Path, file: str) -> None:
    """The header of one safetensors file: its length, its JSON, and tensor offsets within the file."""
    path = folder / file
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise FolderError(file, f"is not a safetensors file (only {size} bytes; the header length is missing)")
            length = int.from_bytes(head, "little")
            if length < 2 or length > _MAX_HEADER_BYTES or 8 + length > size:
                raise FolderError(file, f"is not a safetensors file (header length {length:,} does not fit a file of "
                                        f"{size:,} bytes)")
            raw = handle.read(length)
    except FolderError:
        raise
    except OSError as exc:
        raise FolderError(file, f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise FolderError(file, "has a safetensors header nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError
        raise FolderError(file, f"has a malformed safetensors header ({shorten(str(exc))})") from None
    if not isinstance(header, dict):
        raise FolderError(file, "has a malformed safetensors header (not a JSON object)")
    data_size = size - 8 - length
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if (not isinstance(entry.get("dtype") if isinstance(entry, dict) else None, str)
                or not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape)
                or not isinstance(offsets, list) or len(offsets) != 2
                or not all(type(n) is int for n in offsets) or not 0 <= offsets[0] <= offsets[1] <= data_size):
            raise FolderError(file, f"has a malformed safetensors header (tensor {shorten(key)}: "
                                    f"{shorten(entry)}; the data part is {data_size:,} bytes)")


def check_folder_files(folder: ModelFolder) -> None:
    """Check what loading ``folder`` would read, before anything is loaded.

    * Every weight file (``*.safetensors``, pickle weights, the sharded-weights indexes) and every file an index's
      ``weight_map`` names resolves inside the folder (symlinks followed; for a Hugging Face cache snapshot, inside
      its cache repository): otherwise :class:`FolderEscapeError`. An index target must be a relative path to an
      existing file.
    * ``config.json`` and the other small JSON files (:data:`CHECKED_JSON`) and the indexes are valid JSON (not too
      large or deep); every safetensors file has a well-formed header: otherwise :class:`FolderError`.

    Reads JSON files and safetensors headers only, never weights. Messages name the file relative to the folder.
    """
    path = folder.path
    root = _containing_root(path)
    weights = {p.name for pattern in _WEIGHT_PATTERNS for p in path.glob(pattern)}
    weights.update(name for name in INDEX_FILES if (path / name).exists() or (path / name).is_symlink())
    for name in sorted(weights):
        if not _inside(path / name, root):
            raise FolderEscapeError(name, "resolves outside the model folder (a symlink?); weight files must lie "
                                          "inside it")
    shards: set[str] = set()
    for index in INDEX_FILES:
        if not (path / index).is_file():
            continue
        content = read_json(path, index)
        weight_map = content.get("weight_map") if isinstance(content, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise FolderError(index, "has no `weight_map` of tensor names to file names")
        for target in sorted(set(weight_map.values())):
            if not target or PurePosixPath(target).is_absolute() or PureWindowsPath(target).is_absolute() \
                    or PureWindowsPath(target).drive or target.startswith("\\"):
                raise FolderEscapeError(index, f"names the absolute path {shorten(target)}; shards must be files "
                                               "inside the model folder")
            if not _inside(path / target, root):
                raise FolderEscapeError(index, f"names {shorten(target)}, which resolves outside the model folder; "
                                               "shards must be files inside it")
            if not (path / target).is_file():
                raise FolderError(index, f"names {shorten(target)}, which is not a file in the model folder")
            if index.startswith("model.safetensors"):
                shards.add(target)
    for name in CHECKED_JSON:
        if (path / name).is_file():
            read_json(path, name)
    for name in sorted(shards | {p.name for p in path.glob("*.safetensors")}):
        _check_safetensors_header(path, name)
