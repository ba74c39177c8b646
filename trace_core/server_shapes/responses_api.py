"""OpenAI's Responses API (``POST /v1/responses``; vLLM, LM Studio and OpenRouter serve it too): asked with
``include: ["message.output_text.logprobs"]`` and ``top_logprobs: k``, each ``output_text`` part of the assistant's
``message`` items in ``output`` carries ``logprobs``, a list of ``{"token", "logprob", "bytes", "top_logprobs":
[{"token", "logprob", "bytes"}]}``: chat.completions' own form (:func:`~.openai.content_steps` reads it).

The answer is every ``output_text`` part of every ``message`` item, in order; the other items (``reasoning``, tool
calls) are not the answer and are skipped. A response that is not finished (``status`` ``in_progress`` or
``queued``), failed or was cancelled is refused, as is one event of a stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trace_core.checks import show
from trace_core.server_shapes.fields import list_at, object_at
from trace_core.server_shapes.openai import content_steps
from trace_core.server_shapes.steps import ParsedResponse, TokenStep

__all__ = ["ASK_RESPONSES_FOR_LOGPROBS", "detect_responses", "hint_responses", "parse_responses"]

#: What to ask the Responses API for when its answer has no log-probabilities.
ASK_RESPONSES_FOR_LOGPROBS = 'ask with include: ["message.output_text.logprobs"] (and top_logprobs: k)'
_UNFINISHED = ("in_progress", "queued")
_ENDED = ("failed", "cancelled")
#: ``incomplete_details.reason`` -> the ``finish_reason`` chat.completions would give (``length`` marks a cut answer).
_FINISH = {"max_output_tokens": "length", "content_filter": "content_filter"}


def detect_responses(response: Mapping[str, Any]) -> bool:
    """A Responses API object: ``object`` is ``"response"`` and ``output`` a list; never raises."""
    return response.get("object") == "response" and isinstance(response.get("output"), list)


def hint_responses(response: Mapping[str, Any]) -> str | None:
    """For an event of a Responses API stream (``type`` ``response.…``), what to import instead."""
    kind = response.get("type")
    if isinstance(kind, str) and kind.startswith("response."):
        return (f"it looks like one event of a Responses API stream ({show(kind)}): import the finished response "
                "(the `response` of the stream's `response.completed` event), or ask with stream: false")
    return None


def _status(response: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` from the response's ``status``; refuses a response that is not a finished answer."""
    status = response.get("status")
    if status in _UNFINISHED:
        raise ValueError(f"response status is {status}: the answer is not finished; import the response once its "
                         "status is completed")
    if status in _ENDED:
        error = response.get("error")
        why = f": {show(error.get('message'))}" if isinstance(error, Mapping) and "message" in error else ""
        raise ValueError(f"response status is {status}{why}; it holds no answer to import")
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        return {"finish_reason": _FINISH.get(reason, reason) if isinstance(reason, str) else "incomplete"}
    return {"finish_reason": "stop"} if status == "completed" else {}


def _text_parts(output: Sequence[Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, part) of every ``output_text`` part of the ``message`` items, in order; a refusal is refused."""
    parts = []
    for i, item in enumerate(output):
        item = object_at(item, f"output[{i}]")
        if item.get("type") != "message":
            continue
        for j, part in enumerate(list_at(item.get("content"), f"output[{i}].content")):
            at = f"output[{i}].content[{j}]"
            part = object_at(part, at)
            if part.get("type") == "refusal":
                raise ValueError(f"{at} is a refusal ({show(part.get('refusal'))}): it holds no log-probabilities "
                                 "and is not an answer to import")
            if part.get("type") == "output_text":
                parts.append((at, part))
    return parts


def parse_responses(response: Mapping[str, Any]) -> ParsedResponse:
    """A Responses API object: the steps of every ``output_text`` part's ``logprobs``, the parts' texts joined as the
    answer, ``finish_reason`` from ``status`` (``length`` when it stopped at ``max_output_tokens``)."""
    extra = _status(response)
    parts = _text_parts(response["output"])
    if not parts:
        raise ValueError("response has no output_text part in a `message` item of `output`: no answer to import")
    steps: list[TokenStep] = []
    texts = []
    for at, part in parts:
        logprobs, text = part.get("logprobs"), part.get("text")
        if not isinstance(text, str):
            raise ValueError(f"{at}.text must be a string, got {show(text)}")
        if logprobs is None or (isinstance(logprobs, list) and not logprobs and text):
            raise ValueError(f"response has no log-probabilities in {at}.logprobs: {ASK_RESPONSES_FOR_LOGPROBS}")
        steps += content_steps(logprobs, f"{at}.logprobs")
        texts.append(text)
    first = parts[0][0]
    one = len(parts) == 1
    return ParsedResponse(steps=tuple(steps), text="".join(texts), extra=extra,
                          tokens_at=f"{first}.logprobs" if one else "the output_text parts' logprobs",
                          alternatives_at=f"{first}.logprobs[{{}}].top_logprobs" if one
                          else "answer token {}'s top_logprobs",
                          text_at=f"{first}.text" if one else "the output_text parts' texts",
                          # reasoning or a tool call beside the message: a server may list their tokens too
                          text_within=any(isinstance(item, Mapping) and item.get("type") != "message"
                                          for item in response["output"]))
