"""What identifies the things the caches hold: content digests of bytes and values, of a trace, and of the model
that records traces (:func:`model_key`); whether a trace was recorded with the loaded model (:func:`same_model`)."""

from __future__ import annotations

import hashlib
import threading
import uuid
import weakref
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from trace_core import LoadedModel, Trace

if TYPE_CHECKING:
    from trace_core.record import ServerModel


def digest(*parts: Any) -> str:
    """A short content hash of ``parts`` (bytes as they are, anything else by its repr), for cache keys."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else repr(part).encode())
    return h.hexdigest()[:16]


def trace_digest(trace: Trace) -> str:
    """A short content hash of ``trace``: its texts, tokens, arrays, metadata and alternatives' text. Equal traces
    (``==``) get equal digests, whichever objects hold them."""
    h = hashlib.sha256()
    for text in (trace.prompt, trace.answer, repr(trace.tokens), repr(trace.top_tokens),
                 repr(trace.metadata.to_dict())):
        h.update(text.encode("utf-8", "surrogatepass") + b"\x00")
    for array in (trace.token_ids, trace.surprisal, trace.entropy, trace.top_ids, trace.top_logprobs, trace.ranks):
        h.update(b"none" if array is None else repr(array.shape).encode() + np.ascontiguousarray(array).tobytes())
    return h.hexdigest()[:16]


_MODEL_KEYS: weakref.WeakKeyDictionary[LoadedModel, str] = weakref.WeakKeyDictionary()  # kept while the model is
_MODEL_KEYS_LOCK = threading.Lock()


@overload
def model_key(lm: None) -> None: ...


@overload
def model_key(lm: LoadedModel | ServerModel) -> str: ...


def model_key(lm: Any) -> str | None:
    """What identifies the traces a model records, for every cache of traces, evaluations and calibrators (None
    without a model); the model id alone does not (two servers may serve different models under one name).

    * A model server (:class:`trace_core.record.remote.ServerModel`): its address, served name and model id, and the
      options that change a trace: the full distribution or the top-k asked (the entropy mode), the endpoint, V, the
      context length and the local tokenizer.
    * A local model: a content digest of the files in its folder (weights, config, tokenizer), with its id, dtype and
      device. Computed once per loaded model (about a second per 700 MB, the first time a page needs it) and kept
      while the model is; a model whose folder cannot be found gets a key of its own.

    The same model always gets the same key, so switching back to it finds what was recorded with it. The sidebar's
    decoding settings are not part of it: recording teacher-forces the given answers, which they do not change.
    """
    if lm is None:
        return None
    from trace_core.record import ServerModel

    if isinstance(lm, ServerModel):
        tokenizer = lm.tokenizer
        return "server-" + digest("server", lm.base_url, lm.model, lm.model_id, lm.full_distribution,
                                  lm.top_logprobs, lm.api, lm.vocab_size, lm.context_length,
                                  str(getattr(tokenizer, "name_or_path", "")), type(tokenizer).__name__)
    with _MODEL_KEYS_LOCK:
        known = _MODEL_KEYS.get(lm)
    if known is None:
        known = "local-" + _local_model_digest(lm)  # outside the lock: hashing a large model takes seconds
        with _MODEL_KEYS_LOCK:
            known = _MODEL_KEYS.setdefault(lm, known)
    return known


def _local_model_digest(lm: LoadedModel) -> str:
    """A digest of the model's folder files and its id, dtype and device (see :func:`model_key`)."""
    from trace_core.record.folders import cached_snapshot, model_folder

    h = hashlib.sha256()
    parameter = next(lm.model.parameters(), None)
    h.update(repr(("local", lm.model_id, type(lm.model).__name__, str(getattr(parameter, "dtype", None)),
                   str(getattr(parameter, "device", None)))).encode())
    source = str(getattr(lm.model, "name_or_path", "") or lm.model_id)
    folder = model_folder(source)
    path = folder.path if folder is not None else cached_snapshot(source)
    if path is None:
        h.update(uuid.uuid4().bytes)  # nothing on disk to read: this loaded model is a model of its own
        return h.hexdigest()[:16]
    for file in sorted(p for p in path.iterdir() if p.is_file()):  # hub snapshots' links followed to their blobs
        h.update(repr((file.name, file.stat().st_size)).encode())
        with open(file, "rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def same_model(lm: LoadedModel | None, trace: Trace) -> bool:
    """Whether ``trace`` was recorded with the loaded model, so its ids are this tokenizer's: by content digest when
    both know it (the same model under two paths), else by model id."""
    if lm is None:
        return False
    ours, theirs = getattr(lm, "model_digest", ""), trace.metadata.model_digest
    if ours and theirs:
        return ours == theirs
    return bool(trace.metadata.model_id) and trace.metadata.model_id == lm.model_id
