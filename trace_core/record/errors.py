"""What loading a model raises (:class:`ModelLoadError` and its kinds), and torch imported with an error that names the
extra to install: the modules that load, convert or run a model share them."""

from __future__ import annotations

from typing import Any

__all__ = ["ModelLoadError", "ModelNotAllowedError", "ModelNotFoundError", "UnsafeModelError", "torch_module"]


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message says why and what to do."""


class ModelNotFoundError(ModelLoadError, FileNotFoundError):
    """The model is neither a local folder nor in the local Hugging Face cache."""


class UnsafeModelError(ModelLoadError):
    """Loading would need pickle weights or remote code, and the caller did not opt in."""


class ModelNotAllowedError(ModelLoadError):
    """The deployment's allow-list (``TRACE_MODEL_ALLOWLIST``) does not include this model."""


def torch_module() -> Any:
    """The torch module, or an ImportError that says which extra to install."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised only without torch
        raise ImportError("recording traces needs torch and transformers: pip install 'trace-core[record]'") from exc
    return torch
