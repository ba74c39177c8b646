"""Ollama ``/api/generate`` and ``/api/chat`` with ``logprobs`` (Ollama 0.12.11 or later): ``logprobs`` is a list of
``{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}``, OpenAI chat's layout."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trace_core.checks import show
from trace_core.server_shapes.fields import streamed
from trace_core.server_shapes.openai import besides_text, content_steps
from trace_core.server_shapes.steps import ParsedResponse

__all__ = ["detect_ollama", "hint_ollama", "parse_ollama_chat", "parse_ollama_generate"]


def _ollama_parser(text_of: Callable[[Mapping[str, Any]], object], text_at: str,
                   holder: Callable[[Mapping[str, Any]], object]) -> Callable[[Mapping[str, Any]], ParsedResponse]:
    """The parser of the endpoint whose answer is ``text_of(response)``, at ``text_at``, beside the ``thinking`` and
    ``tool_calls`` of ``holder(response)``."""
    def parse(response: Mapping[str, Any]) -> ParsedResponse:
        """Ollama (0.12.11 or later) with ``logprobs: true``: ``logprobs`` is a list of ``{token, logprob, bytes,
        top_logprobs: [{token, logprob, bytes}]}``."""
        if response.get("done") is False:
            raise streamed("a streamed line (`done` is false)",
                           "join the stream's NDJSON lines into one response first (their texts and `logprobs` "
                           "lists, in order), or ask with stream: false")
        logprobs = response["logprobs"]
        if logprobs is None:
            raise ValueError("response `logprobs` is null: ask Ollama for logprobs: true (and top_logprobs: k)")
        steps = content_steps(logprobs, "logprobs")
        extra = {"finish_reason": response["done_reason"]} if isinstance(response.get("done_reason"), str) else {}
        return ParsedResponse(steps=steps, text=text_of(response), extra=extra, tokens_at="logprobs",
                              alternatives_at="logprobs[{}].top_logprobs", text_at=text_at,
                              text_within=besides_text(holder(response), None))
    return parse


def _ollama_chat_text(response: Mapping[str, Any]) -> object:
    message = response["message"]
    if not isinstance(message, Mapping):
        raise ValueError(f"message must be an object, got {show(message)}")
    return message.get("content")


#: ``/api/generate``: the answer is ``response``.
parse_ollama_generate = _ollama_parser(lambda r: r["response"], "response", lambda r: r)
#: ``/api/chat``: the answer is ``message.content``.
parse_ollama_chat = _ollama_parser(_ollama_chat_text, "message.content", lambda r: r.get("message"))


def detect_ollama(text_key: str) -> Callable[[Mapping[str, Any]], bool]:
    """``detect(response)`` for the endpoint whose answer is under ``text_key`` (``"response"`` or ``"message"``)."""
    def detect(response: Mapping[str, Any]) -> bool:
        return "logprobs" in response and text_key in response and "choices" not in response
    return detect


def hint_ollama(response: Mapping[str, Any]) -> str | None:
    if ("response" in response or "message" in response) and ("done" in response or "created_at" in response):
        return ("it looks like an Ollama response without `logprobs`: ask with logprobs: true (and top_logprobs: k), "
                "Ollama 0.12.11 or later")
    return None
