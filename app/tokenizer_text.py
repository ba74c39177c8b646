"""A trace's text as the loaded model's tokenizer reads it: the text of its top-k alternatives (or why they show as
ids), and the prompt as the model read it (chat template included)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trace_core import LoadedModel, Trace
from trace_core.record import alternative_pieces

from .keys import same_model

#: Shown with a trace's alternatives when only their ids are known (see :func:`alternatives_for`).
IDS_ONLY_NOTE = ("alternatives shown as token ids: the trace stores no text for them and was recorded with another "
                 "model than the one loaded")


def alternatives_for(lm: LoadedModel | None) -> Callable[[Trace, int], list[str]]:
    """A function giving the text of a trace's top-k alternatives at one position: the trace's own ``top_tokens``
    (stored when it was recorded), else the loaded model's tokenizer only when the trace was recorded with that
    model, else the ids (another tokenizer's text for them would be wrong; :func:`alternatives_note` says so)."""

    def alternatives(trace: Trace, i: int) -> list[str]:
        if trace.top_tokens is not None:
            return list(trace.top_tokens[i])
        if lm is None or not same_model(lm, trace) or (trace.top_ids[i] < 0).any():
            return [f"id {int(t)}" for t in trace.top_ids[i]]
        rows = trace.top_ids[[i]] if i == 0 else trace.top_ids[[0, i]]  # the first row is read alone, later ones not
        return list(alternative_pieces(lm.tokenizer, rows)[-1])  # as the recorder reads them

    return alternatives


def prompt_as_read(lm: Any, trace: Trace) -> tuple[str, str] | None:
    """The text the model read before ``trace``'s answer (the prompt wrapped in the chat template when the trace
    used it, special tokens included) and a sentence on it; None when ``lm`` did not record ``trace``."""
    if lm is None or not same_model(lm, trace):
        return None
    from trace_core.record import encode_prompt

    chat = bool(trace.metadata.chat_template)
    try:
        ids = encode_prompt(lm.tokenizer, trace.prompt, chat_template=chat and lm.has_chat_template)
    except (TypeError, ValueError):
        return None
    text = lm.tokenizer.decode(ids, skip_special_tokens=False)
    if chat and trace.metadata.extra.get("api") == "chat":
        note = ("The server applied its own chat template; this is the local tokenizer's rendering of it, "
                f"{len(ids):,} tokens (the server counted {trace.metadata.extra.get('prompt_tokens', '?')}).")
    elif chat:
        note = f"The prompt through the model's chat template: {len(ids):,} tokens, exactly as the model read them."
    else:
        note = f"The prompt as typed, without a chat template: {len(ids):,} tokens."
    return text, note


def alternatives_note(lm: LoadedModel | None, trace: Trace) -> str | None:
    """Why a trace's alternatives show as ids (None when they show as text)."""
    if not trace.n_alternatives or trace.top_tokens is not None or same_model(lm, trace):
        return None
    return IDS_ONLY_NOTE


def reads_alternatives(lm: LoadedModel | None, trace: Trace) -> bool:
    """Whether :func:`alternatives_for` reads ``trace``'s alternatives with ``lm``'s tokenizer (the trace stores no
    text for them and was recorded with ``lm``): only then does what a heatmap shows of them depend on ``lm``."""
    return bool(trace.n_alternatives) and trace.top_tokens is None and same_model(lm, trace)
