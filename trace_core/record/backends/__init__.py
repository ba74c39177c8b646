"""Model backends behind the public recording functions, and the dispatch from a loaded model to its backend.

:class:`~.hf.HuggingFaceBackend` runs a :class:`~trace_core.record.LoadedModel`; :class:`~.completions.ServerBackend`
talks to a :class:`~trace_core.record.ServerModel` (an OpenAI-compatible model server), and
:class:`~.multi.MultiServerBackend` to several (:class:`~trace_core.record.MultiServer`). All implement
:class:`~.base.Backend`, so callers of ``generate_traces``, ``score_answers``, ``beam_logprobs`` and
``context_length`` pass either.
"""

from __future__ import annotations

from typing import Any

from trace_core.record.backends.base import Backend, RecordedAnswer
from trace_core.record.backends.completions import ServerBackend
from trace_core.record.backends.hf import HuggingFaceBackend
from trace_core.record.backends.multi import MultiServerBackend
from trace_core.record.load import LoadedModel
from trace_core.record.multi import MultiServer
from trace_core.record.remote import ServerModel

__all__ = ["Backend", "HuggingFaceBackend", "MultiServerBackend", "RecordedAnswer", "ServerBackend", "backend_of"]


def backend_of(lm: Any) -> Backend:
    """The backend that runs ``lm``.

    Parameters
    ----------
    lm : LoadedModel, ServerModel or MultiServer
        From :func:`~trace_core.record.load_model`, :func:`~trace_core.record.connect_server` or
        :func:`~trace_core.record.connect_servers`.

    Returns
    -------
    Backend

    Raises
    ------
    TypeError
        ``lm`` is neither a loaded model nor a server model.
    """
    if isinstance(lm, LoadedModel):
        return HuggingFaceBackend(lm)
    if isinstance(lm, ServerModel):
        return ServerBackend(lm)
    if isinstance(lm, MultiServer):
        return MultiServerBackend(lm)
    raise TypeError(f"`lm` must be a LoadedModel (from load_model) or a ServerModel (from connect_server), got "
                    f"{type(lm).__name__}")
