"""Recording traces: the only part of trace_core that touches torch and transformers.

Both are imported lazily, inside functions, so ``import trace_core`` and ``import trace_core.record`` stay light.

* :mod:`.load` -- :func:`load_model` under the model policy (offline, safetensors only, no remote code, the
  deployment's allow-list); :mod:`.folders` -- what a model folder holds (shared with :mod:`.embedder`);
  :mod:`.threads` -- torch's CPU threads: the CPUs the process really has (affinity, cgroup quota) and the count
  :func:`load_model` applies.
* :mod:`.tokens` -- :func:`encode_prompt`, :func:`token_pieces`, :func:`alternative_pieces`,
  :func:`context_length`.
* :mod:`.generate` -- :func:`generate_traces`: generate and record in the same pass.
* :mod:`.stream` -- :func:`stream_trace`: one answer's trace as it is written (a local model or a server's stream).
* :mod:`.teacher` -- :func:`score_answers`: the trace of existing answers by teacher forcing.
* :mod:`.beam` -- :func:`beam_logprobs`: the inputs of the beam baselines.
* :mod:`.stats` -- the recorder statistics both generation and teacher forcing use; :mod:`.build` -- the one
  builder of a Trace from recorded arrays.
* :mod:`.backends` -- what runs the model: the public functions validate, tokenize and build traces; a backend
  (the local Hugging Face one, or a model server's through its completions endpoints) turns token ids into
  per-token arrays.
* :mod:`.remote` -- :func:`connect_server`: a model served over the OpenAI-compatible API (vLLM), usable wherever a
  loaded model is; :mod:`.http_policy` -- the one HTTP policy of its requests (retries, deadline, no redirects, size
  caps, :class:`ServerError`); :mod:`.addresses` -- server addresses in one normal form; :mod:`.multi` --
  :func:`connect_servers`: several servers of one model used as one, at most ``concurrency`` requests at each.
* :mod:`.embedder` -- the sentence-embedding model of the semantic baselines (:mod:`trace_core.methods.semantic`).
"""

from __future__ import annotations

from trace_core.record.beam import beam_logprobs
from trace_core.record.generate import generate_trace, generate_traces
from trace_core.record.http_policy import ServerError
from trace_core.record.load import (
    LoadedModel,
    ModelLoadError,
    ModelNotAllowedError,
    ModelNotFoundError,
    UnsafeModelError,
    check_model_allowed,
    load_model,
    model_allowlist,
)
from trace_core.record.multi import MultiServer, connect_servers
from trace_core.record.remote import ServerModel, connect_server
from trace_core.record.stream import stream_trace
from trace_core.record.teacher import score_answer, score_answers
from trace_core.record.tokens import alternative_pieces, context_length, encode_prompt, token_pieces

__all__ = [
    "LoadedModel",
    "ModelLoadError",
    "ModelNotAllowedError",
    "ModelNotFoundError",
    "MultiServer",
    "ServerError",
    "ServerModel",
    "UnsafeModelError",
    "alternative_pieces",
    "beam_logprobs",
    "check_model_allowed",
    "connect_server",
    "connect_servers",
    "context_length",
    "encode_prompt",
    "generate_trace",
    "generate_traces",
    "load_model",
    "model_allowlist",
    "score_answer",
    "score_answers",
    "stream_trace",
    "token_pieces",
]
