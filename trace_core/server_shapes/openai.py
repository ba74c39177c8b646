"""OpenAI's layouts, which vLLM, TGI, Ollama and the llama.cpp server also speak at ``/v1``: chat.completions
(``choices[0].logprobs.content``) and legacy completions (``choices[0].logprobs`` with ``tokens``).

The readers of one ``logprobs`` object (:func:`content_steps`, :func:`completion_steps`) are shared by the file
importer and live recording from a server; the response-level parsers (:func:`parse_chat`, :func:`parse_completions`)
also choose the answer's choice and read its text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trace_core.checks import show
from trace_core.server_shapes.fields import is_int, is_list, list_at, token_bytes, token_id_at, token_raw
from trace_core.server_shapes.steps import Offered, ParsedResponse, TokenStep
from trace_core.traces.logprobs import check_logprob

__all__ = ["ASK_FOR_LOGPROBS", "answer_choice", "besides_text", "completion_lists", "completion_steps", "content_steps",
           "has_openai_logprobs", "openai_logprobs", "parse_chat", "parse_completion_logprobs", "parse_completions"]

#: What to ask a server for when its response has no log-probabilities.
ASK_FOR_LOGPROBS = "ask the server for logprobs=true (and top_logprobs=k)"
_CHUNK_OBJECTS = ("chat.completion.chunk",)
_JOIN_CHUNKS = "join the stream's chunks into one response first"
_TOKEN_ID_TEXT = re.compile(r"token_id:-?\d+")
#: Fields of a chat message besides ``content`` whose text the answer's tokens spell too.
_BESIDES_TEXT = ("reasoning_content", "reasoning", "thinking", "tool_calls")


# --------------------------------------------------------------------------------------------------
# The answer's choice
# --------------------------------------------------------------------------------------------------

def answer_choice(response: Mapping[str, Any]) -> tuple[int, Mapping[str, Any]]:
    """The position in ``choices`` of the answer to import, and that choice.

    A single choice is the answer whatever its ``index``. Of several (a request with ``n`` > 1), the one whose
    ``index`` is 0 when the choices carry indices (their order in the list is not trusted), else the first; several
    choices and none (or more than one) with index 0 is an error. A streamed chunk is refused: it holds a few of the
    answer's tokens, not the answer.
    """
    if response.get("object") in _CHUNK_OBJECTS:
        raise ValueError(f"response is a streamed chunk (object {show(response.get('object'))}), a few tokens of the "
                         f"answer, not the whole response: {_JOIN_CHUNKS}")
    choices = response.get("choices")
    if not isinstance(choices, Sequence) or isinstance(choices, (str, bytes)) or not choices:
        raise ValueError("response has no choices: expected an OpenAI-style response with a non-empty `choices` list")
    for i, choice in enumerate(choices):
        if not isinstance(choice, Mapping):
            raise ValueError(f"response choices[{i}] must be an object, got {show(choice)}")
    position = _index_zero(choices) if len(choices) > 1 and any("index" in c for c in choices) else 0
    choice = choices[position]
    if "delta" in choice and "message" not in choice:
        raise ValueError(f"response choices[{position}] has a `delta`, not a `message`: it is a streamed chunk, a few "
                         f"tokens of the answer, not the whole response: {_JOIN_CHUNKS}")
    return position, choice


def _index_zero(choices: Sequence[Mapping[str, Any]]) -> int:
    """The position of the one choice with ``index`` 0."""
    zero = [i for i, c in enumerate(choices) if is_int(c.get("index")) and c["index"] == 0]
    if len(zero) != 1:
        indices = show([c.get("index") for c in choices])
        raise ValueError(f"response has {len(choices)} choices and {len(zero) or 'none'} with index 0 (indices "
                         f"{indices}); expected exactly one choice with index 0, the answer imported")
    return zero[0]


def openai_logprobs(response: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any], str]:
    """The answer's choice (:func:`answer_choice`), its ``logprobs`` object, and its path (``"choices[0]"``);
    ValueError saying which of them is missing or malformed."""
    position, choice = answer_choice(response)
    where = f"choices[{position}]"
    logprobs = choice.get("logprobs")
    if logprobs is None:
        raise ValueError(f"response has no {where}.logprobs: {ASK_FOR_LOGPROBS}")
    if not isinstance(logprobs, Mapping):
        raise ValueError(f"{where}.logprobs must be an object, got {show(logprobs)}")
    return choice, logprobs, where


def has_openai_logprobs(key: str) -> Callable[[Mapping[str, Any]], bool]:
    """``detect(response)``: whether the answer's ``logprobs`` object has ``key``; never raises."""
    def detect(response: Mapping[str, Any]) -> bool:
        try:
            return key in openai_logprobs(response)[1]
        except ValueError:
            return False
    return detect


def _openai_extra(response: Mapping[str, Any], choice: Mapping[str, Any]) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if isinstance(choice.get("finish_reason"), str):
        extra["finish_reason"] = choice["finish_reason"]
    choices = response["choices"]
    if len(choices) > 1:  # the answer is the choice with index 0: say that there were others
        extra["n_choices"] = len(choices)
    return extra


# --------------------------------------------------------------------------------------------------
# A list of {"token", "logprob", "bytes", "top_logprobs": [...]} (OpenAI chat, Ollama, llama.cpp's /v1)
# --------------------------------------------------------------------------------------------------

def _optional_id(entry: Mapping[str, Any], where: str) -> int | None:
    return token_id_at(entry["id"], f"{where}.id") if "id" in entry else None


def _offered(alt: object, where: str) -> Offered:
    """One alternative, ``{"token", "logprob", "bytes"}`` (with an ``id`` where the server adds one)."""
    if not isinstance(alt, Mapping) or not isinstance(alt.get("token"), str):
        raise ValueError(f"{where} must be an object with a string `token`, got {show(alt)}")
    raw = token_raw(alt["token"], alt.get("bytes"), f"{where}.bytes")
    lp = check_logprob(alt.get("logprob"), f"{where}.logprob")
    return Offered(alt["token"], raw, lp, _optional_id(alt, where))


def content_steps(content: object, where: str, *, start: int = 0) -> tuple[TokenStep, ...]:
    """The steps of a list of ``{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}``
    (OpenAI chat.completions' ``logprobs.content``, Ollama's ``logprobs``); an ``id`` on a token or an alternative
    (llama.cpp's ``/v1`` responses) is kept. Entry i is named ``where[start + i]`` in messages (a streamed chunk's
    first token is answer token ``start``)."""
    steps = []
    for i, entry in enumerate(list_at(content, where), start=start):
        at = f"{where}[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("token"), str):
            raise ValueError(f"{at} must be an object with a string `token`, got {show(entry)}")
        lp = check_logprob(entry.get("logprob"), f"{at}.logprob", chosen=True)
        raw = token_raw(entry["token"], entry.get("bytes"), f"{at}.bytes")
        listed = entry.get("top_logprobs")
        offered = tuple(_offered(alt, f"{at}.top_logprobs[{j}]") for j, alt in enumerate(listed or []))
        steps.append(TokenStep(entry["token"], raw, lp, offered if is_list(listed) else None, _optional_id(entry, at)))
    return tuple(steps)


def parse_chat(response: Mapping[str, Any]) -> ParsedResponse:
    """chat.completions: ``choices[0].logprobs.content`` is a list of ``{"token", "logprob", "bytes",
    "top_logprobs": [{"token", "logprob", "bytes"}, ...]}``; the answer is ``choices[0].message.content`` (or
    ``choices[0].text``: llama.cpp's ``/v1/completions`` writes its log-probs this way too)."""
    choice, logprobs, choice_at = openai_logprobs(response)
    content = logprobs["content"]
    if content is None:
        raise ValueError(f"{choice_at}.logprobs.content is null: " + ASK_FOR_LOGPROBS)
    steps = content_steps(content, f"{choice_at}.logprobs.content")
    message = choice.get("message")
    if isinstance(message, Mapping):
        text, text_at = message.get("content"), f"{choice_at}.message.content"
    else:
        text, text_at = choice.get("text"), f"{choice_at}.text"
    return ParsedResponse(steps=steps, text=text, extra=_openai_extra(response, choice),
                          tokens_at=f"{choice_at}.logprobs.content",
                          alternatives_at=f"{choice_at}.logprobs.content[{{}}].top_logprobs", text_at=text_at,
                          text_within=besides_text(message, choice.get("finish_reason")))


def besides_text(message: object, finish_reason: object) -> bool:
    """Whether a chat message holds more than its ``content`` that its tokens spell too: reasoning (vLLM's
    ``reasoning_content`` or ``reasoning``, Ollama's ``thinking``) or tool calls."""
    if finish_reason == "tool_calls":
        return True
    return isinstance(message, Mapping) and any(message.get(key) for key in _BESIDES_TEXT)


# --------------------------------------------------------------------------------------------------
# Legacy completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob} or null, ...]}
# --------------------------------------------------------------------------------------------------

def completion_lists(logprobs: Mapping[str, Any], where: str) -> tuple[Sequence[Any], Sequence[Any],
                                                                       Sequence[Any]]:
    """``tokens``, ``token_logprobs`` and ``top_logprobs`` of a completions ``logprobs`` object (``where``), one
    entry per token each (a missing ``top_logprobs`` is one null per token)."""
    tokens = list_at(logprobs.get("tokens"), f"{where}.tokens")
    token_logprobs = list_at(logprobs.get("token_logprobs"), f"{where}.token_logprobs")
    if len(token_logprobs) != len(tokens):
        raise ValueError(f"{where}.token_logprobs has {len(token_logprobs)} values but tokens has {len(tokens)}")
    tops = logprobs.get("top_logprobs")
    if tops is None:
        tops = [None] * len(tokens)
    elif not isinstance(tops, Sequence) or len(tops) != len(tokens):
        raise ValueError(f"{where}.top_logprobs must be a list with one entry per token, got {show(tops)}")
    return tokens, token_logprobs, tops


def completion_steps(tokens: Sequence[Any], token_logprobs: Sequence[Any], tops: Sequence[Any], where: str, *,
                     start: int = 0) -> tuple[TokenStep, ...]:
    """The steps of :func:`completion_lists`' lists; token i is named ``where.tokens[start + i]`` in messages."""
    steps = []
    for i, (token, lp, top) in enumerate(zip(tokens, token_logprobs, tops, strict=True), start=start):
        if not isinstance(token, str):
            raise ValueError(f"{where}.tokens[{i}] must be a string, got {show(token)}")
        if lp is None:
            raise ValueError(f"{where}.token_logprobs[{i}] is null (with echo=true the prompt's tokens come first "
                             "and have no log-probability; import the answer's tokens only)")
        lp = check_logprob(lp, f"{where}.token_logprobs[{i}]", chosen=True)
        if top is not None and not isinstance(top, Mapping):
            raise ValueError(f"{where}.top_logprobs[{i}] must be an object {{token: logprob}} or null, "
                             f"got {show(top)}")
        offered = None if top is None else tuple(
            Offered(str(tok), token_bytes(str(tok)), check_logprob(a, f"{where}.top_logprobs[{i}][{tok!r}]"))
            for tok, a in top.items())
        steps.append(TokenStep(token, token_bytes(token), lp, offered))
    return tuple(steps)


def parse_completion_logprobs(logprobs: Mapping[str, Any], where: str, *, start: int = 0) -> tuple[TokenStep, ...]:
    """The steps of a completions ``logprobs`` object: :func:`completion_lists`, then :func:`completion_steps`."""
    return completion_steps(*completion_lists(logprobs, where), where, start=start)


def parse_completions(response: Mapping[str, Any]) -> ParsedResponse:
    """Legacy completions: ``choices[0].logprobs`` is ``{"tokens", "token_logprobs", "top_logprobs": [{token:
    logprob} or null, ...]}``; the answer is ``choices[0].text``. Tokens written as ids (vLLM's
    ``return_tokens_as_token_ids``) are refused: their texts, and so the answer's split into tokens, are unknown."""
    choice, logprobs, choice_at = openai_logprobs(response)
    where = f"{choice_at}.logprobs"
    tokens, token_logprobs, tops = completion_lists(logprobs, where)
    if tokens and all(isinstance(t, str) and _TOKEN_ID_TEXT.fullmatch(t) for t in tokens):
        raise ValueError(f"{where}.tokens are token ids ({show(tokens[0])}), not texts: the response was made with "
                         "return_tokens_as_token_ids; record the answers with the server itself (connect_server, "
                         "or --server) or save responses without that option")
    return ParsedResponse(steps=completion_steps(tokens, token_logprobs, tops, where), text=choice.get("text"),
                          extra=_openai_extra(response, choice), tokens_at=f"{where}.tokens",
                          alternatives_at=f"{where}.top_logprobs[{{}}]", text_at=f"{choice_at}.text")
