"""What a Hugging Face model folder holds, and whether a name is a path or a model id.

Shared by :func:`trace_core.record.load_model` and :func:`trace_core.semantic.load_embedder`, which refuse pickle
weights the same way. Pure :mod:`pathlib`: nothing here imports torch or transformers or reads a file's contents.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ModelFolder", "looks_like_path", "model_folder"]


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


def looks_like_path(name: str) -> bool:
    """Whether ``name`` is meant as a path rather than a Hugging Face model id (``org/model``).

    A model id has at most one ``/`` and no leading ``.``, ``/`` or ``~``; anything else, or anything that exists
    on disk, is a path, so a mistyped folder gets a "no folder there" message instead of a cache look-up.

    >>> looks_like_path("./models/tiny"), looks_like_path("org/model")
    (True, False)
    """
    return (name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1
            or Path(name).expanduser().exists())
