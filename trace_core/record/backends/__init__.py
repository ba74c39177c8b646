"""Model backends behind the public recording functions, and the dispatch from a loaded model to its backend.

Today there is one, :class:`~.hf.HuggingFaceBackend` for a :class:`~trace_core.record.LoadedModel`. A second one
(an OpenAI-compatible model server) implements :class:`~.base.Backend` in its own module here and gets one branch in
:func:`backend_of`; callers of ``generate_traces``, ``score_answers``, ``beam_logprobs`` and ``context_length`` do
not change.
"""

from __future__ import annotations

from typing import Any

from ..load import LoadedModel
from .base import Backend, RecordedAnswer
from .hf import HuggingFaceBackend

__all__ = ["Backend", "HuggingFaceBackend", "RecordedAnswer", "backend_of"]


def backend_of(lm: Any) -> Backend:
    """The backend that runs ``lm``.

    Parameters
    ----------
    lm : LoadedModel
        From :func:`~trace_core.record.load_model`.

    Returns
    -------
    Backend

    Raises
    ------
    TypeError
        ``lm`` is not a loaded model.
    """
    if isinstance(lm, LoadedModel):
        return HuggingFaceBackend(lm)
    raise TypeError(f"`lm` must be a LoadedModel (from load_model), got {type(lm).__name__}")
