"""Importing traces from model-server API responses that carry log-probabilities.

A response layout is a :class:`ResponseShape`: how to recognise it and how to read its decoding steps.
:data:`RESPONSE_SHAPES` lists the layouts read today, OpenAI's chat.completions and legacy completions (which vLLM,
TGI and the llama.cpp server also speak). Another server's native layout is one more entry there: a ``detect``
function and a ``parse`` function returning :class:`ParsedResponse`; the steps become a Trace the same way for all.
"""

from __future__ import annotations

import codecs
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..trace import LOGPROB_TOLERANCE, Trace, TraceMetadata
from ._values import is_number, show
from .codec import entropy_from_top_k

__all__ = ["RESPONSE_SHAPES", "ParsedResponse", "ResponseShape", "trace_from_openai"]

_NO_LOGPROBS = "response has no choices[0].logprobs: ask the server for logprobs=true (and top_logprobs=k)"
_ASK_FOR_LOGPROBS = _NO_LOGPROBS.split(": ", 1)[1]

#: One decoding step: the chosen token's bytes, its log-prob, and the alternatives as (text, bytes, log-prob).
Step = tuple[bytes, float, list[tuple[str, bytes, float]]]


@dataclass(frozen=True)
class ParsedResponse:
    """What a response layout's parser reads out of one response.

    Attributes
    ----------
    steps : list of Step
        One per answer token: ``(chosen token's bytes, its log-prob, [(alternative text, bytes, log-prob), ...])``.
    text : object
        The answer text as the response gives it (checked to be a str later); None when the response has none.
    extra : dict
        Details stored in ``TraceMetadata.extra`` besides ``api`` (e.g. ``finish_reason``).
    """

    steps: list[Step]
    text: object
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ResponseShape:
    """One response layout a server may send.

    Attributes
    ----------
    api : str
        Its name, stored as ``TraceMetadata.extra["api"]``.
    detect : callable
        ``detect(response) -> bool``: whether the response has this layout; cheap, and never raises.
    parse : callable
        ``parse(response) -> ParsedResponse``; raises ValueError naming the malformed field.
    """

    api: str
    detect: Callable[[Mapping[str, Any]], bool]
    parse: Callable[[Mapping[str, Any]], ParsedResponse]


# --------------------------------------------------------------------------------------------------
# Token texts and log-probs
# --------------------------------------------------------------------------------------------------

_BYTES_TOKEN = re.compile(r"bytes:((?:\\x[0-9a-fA-F]{2})+)")


def _token_bytes(token: str) -> bytes:
    # The legacy OpenAI API writes a token that is part of a UTF-8 character as "bytes:\xe6\x97".
    match = _BYTES_TOKEN.fullmatch(token)
    if match:
        return bytes(int(h, 16) for h in match.group(1).split("\\x")[1:])
    return token.encode("utf-8")


def _byte_list(value: object, where: str) -> bytes | None:
    if value is None:
        return None
    if (isinstance(value, Sequence) and not isinstance(value, (str, bytes))
            and all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in value)):
        return bytes(value)
    raise ValueError(f"{where} must be a list of ints 0..255 or null, got {show(value)}")


def _check_logprob(value: object, where: str, *, chosen: bool = False) -> float:
    """A log-probability (<= 0 within the slack Trace allows); the chosen token's must also be finite."""
    if not is_number(value) or math.isnan(float(value)) or float(value) > LOGPROB_TOLERANCE:  # type: ignore[arg-type]
        raise ValueError(f"{where} is {show(value)}; expected a log-probability (a number <= 0)")
    lp = float(value)  # type: ignore[arg-type]
    if chosen and not math.isfinite(lp):
        raise ValueError(f"{where} is {lp}; the chosen token needs a finite log-probability")
    return lp


# --------------------------------------------------------------------------------------------------
# OpenAI chat.completions and legacy completions
# --------------------------------------------------------------------------------------------------

def _openai_logprobs(response: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """``choices[0]`` and its ``logprobs`` object; ValueError saying which of them is missing or malformed."""
    choices = response.get("choices")
    if not isinstance(choices, Sequence) or isinstance(choices, (str, bytes)) or not choices:
        raise ValueError("response has no choices: expected an OpenAI-style response with a non-empty `choices` list")
    choice = choices[0]
    if not isinstance(choice, Mapping):
        raise ValueError(f"response choices[0] must be an object, got {show(choice)}")
    logprobs = choice.get("logprobs")
    if logprobs is None:
        raise ValueError(_NO_LOGPROBS)
    if not isinstance(logprobs, Mapping):
        raise ValueError(f"choices[0].logprobs must be an object, got {show(logprobs)}")
    return choice, logprobs


def _has_openai_logprobs(key: str) -> Callable[[Mapping[str, Any]], bool]:
    def detect(response: Mapping[str, Any]) -> bool:
        try:
            return key in _openai_logprobs(response)[1]
        except ValueError:
            return False
    return detect


def _openai_extra(choice: Mapping[str, Any]) -> dict[str, Any]:
    return {"finish_reason": choice["finish_reason"]} if isinstance(choice.get("finish_reason"), str) else {}


def _parse_chat(response: Mapping[str, Any]) -> ParsedResponse:
    """chat.completions: ``choices[0].logprobs.content`` is a list of ``{"token", "logprob", "bytes",
    "top_logprobs": [{"token", "logprob", "bytes"}, ...]}``; the answer is ``choices[0].message.content``."""
    choice, logprobs = _openai_logprobs(response)
    content = logprobs["content"]
    if content is None:
        raise ValueError("choices[0].logprobs.content is null: " + _ASK_FOR_LOGPROBS)
    if not isinstance(content, Sequence) or isinstance(content, (str, bytes)):
        raise ValueError(f"choices[0].logprobs.content must be a list, got {show(content)}")
    steps = []
    for i, entry in enumerate(content):
        where = f"choices[0].logprobs.content[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("token"), str):
            raise ValueError(f"{where} must be an object with a string `token`, got {show(entry)}")
        lp = _check_logprob(entry.get("logprob"), f"{where}.logprob", chosen=True)
        raw = _byte_list(entry.get("bytes"), f"{where}.bytes")
        raw = _token_bytes(entry["token"]) if raw is None else raw
        alts = []
        for j, alt in enumerate(entry.get("top_logprobs") or []):
            at = f"{where}.top_logprobs[{j}]"
            if not isinstance(alt, Mapping) or not isinstance(alt.get("token"), str):
                raise ValueError(f"{at} must be an object with a string `token`, got {show(alt)}")
            key = _byte_list(alt.get("bytes"), f"{at}.bytes")
            alts.append((alt["token"], _token_bytes(alt["token"]) if key is None else key,
                         _check_logprob(alt.get("logprob"), f"{at}.logprob")))
        steps.append((raw, lp, alts))
    message = choice.get("message")
    text = message.get("content") if isinstance(message, Mapping) else None
    return ParsedResponse(steps=steps, text=text, extra=_openai_extra(choice))


def _list_field(logprobs: Mapping[str, Any], name: str) -> Sequence[Any]:
    value = logprobs.get(name)
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise ValueError(f"choices[0].logprobs.{name} must be a list, got {show(value)}")
    return value


def _parse_completions(response: Mapping[str, Any]) -> ParsedResponse:
    """Legacy completions: ``choices[0].logprobs`` is ``{"tokens", "token_logprobs", "top_logprobs": [{token:
    logprob} or null, ...]}``; the answer is ``choices[0].text``."""
    choice, logprobs = _openai_logprobs(response)
    tokens, token_logprobs = _list_field(logprobs, "tokens"), _list_field(logprobs, "token_logprobs")
    if len(token_logprobs) != len(tokens):
        raise ValueError(f"choices[0].logprobs.token_logprobs has {len(token_logprobs)} values but tokens has "
                         f"{len(tokens)}")
    tops = logprobs.get("top_logprobs")
    if tops is None:
        tops = [None] * len(tokens)
    elif not isinstance(tops, Sequence) or len(tops) != len(tokens):
        raise ValueError(f"choices[0].logprobs.top_logprobs must be a list with one entry per token, got {show(tops)}")
    steps = []
    where = "choices[0].logprobs"
    for i, (token, lp, top) in enumerate(zip(tokens, token_logprobs, tops)):
        if not isinstance(token, str):
            raise ValueError(f"{where}.tokens[{i}] must be a string, got {show(token)}")
        if lp is None:
            raise ValueError(f"{where}.token_logprobs[{i}] is null (with echo=true the prompt's tokens come first "
                             "and have no log-probability; import the answer's tokens only)")
        lp = _check_logprob(lp, f"{where}.token_logprobs[{i}]", chosen=True)
        if top is not None and not isinstance(top, Mapping):
            raise ValueError(f"{where}.top_logprobs[{i}] must be an object {{token: logprob}} or null, "
                             f"got {show(top)}")
        alts = [(str(tok), _token_bytes(str(tok)), _check_logprob(a, f"{where}.top_logprobs[{i}][{tok!r}]"))
                for tok, a in (top or {}).items()]
        steps.append((_token_bytes(token), lp, alts))
    return ParsedResponse(steps=steps, text=choice.get("text"), extra=_openai_extra(choice))


#: The response layouts :func:`trace_from_openai` reads, tried in order (the first whose ``detect`` says yes).
RESPONSE_SHAPES: tuple[ResponseShape, ...] = (
    ResponseShape("chat", _has_openai_logprobs("content"), _parse_chat),
    ResponseShape("completions", _has_openai_logprobs("tokens"), _parse_completions),
)


def _unreadable(response: Mapping[str, Any]) -> ValueError:
    """Why no layout matched, in OpenAI's terms (the layout asked for most)."""
    try:
        _openai_logprobs(response)
    except ValueError as exc:
        return exc
    return ValueError("choices[0].logprobs has neither `content` (chat.completions) nor `tokens` (completions); "
                      + _ASK_FOR_LOGPROBS)


# --------------------------------------------------------------------------------------------------
# Steps -> Trace (the same for every layout)
# --------------------------------------------------------------------------------------------------

def _trace_from_steps(parsed: ParsedResponse, *, api: str, prompt: str, model_id: str) -> Trace:
    steps = parsed.steps
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pieces = [decoder.decode(raw) for raw, _, _ in steps]
    tail = decoder.decode(b"", final=True)
    if tail and pieces:  # bytes left incomplete at the end: the last token carries them (as U+FFFD)
        pieces[-1] += tail
    if parsed.text is not None and not isinstance(parsed.text, str):
        raise ValueError(f"the response's answer text must be a string, got {show(parsed.text)}")
    answer = "".join(pieces) if parsed.text is None else parsed.text
    n = len(steps)
    surprisal = np.array([-lp for _, lp, _ in steps], dtype=np.float64)
    alternatives = [sorted(((tok, a) for tok, _, a in offered if a > -math.inf), key=lambda pair: -pair[1])
                    for _, _, offered in steps]
    k = min((len(a) for a in alternatives), default=0)
    entropy: np.ndarray | None = None
    if k > 0:  # every step offers alternatives: a top-k estimate
        entropy = np.empty(n, dtype=np.float64)
        for t, ((raw, lp, offered), alts) in enumerate(zip(steps, alternatives)):
            known = [a for _, a in alts]
            if raw not in {key for _, key, a in offered if a > -math.inf}:  # the chosen token's mass is known too
                known.append(lp)
            entropy[t] = entropy_from_top_k(np.array([known], dtype=np.float64))[0]
    # A step without alternatives knows only the chosen token: one probability says nothing about the spread of the
    # rest, so such a response has no entropy ("absent") rather than a one-bucket guess.
    top_logprobs = np.array([[a for _, a in alts[:k]] for alts in alternatives], dtype=np.float64).reshape(n, k)
    top_tokens = tuple(tuple(tok for tok, _ in alts[:k]) for alts in alternatives)
    metadata = TraceMetadata(model_id=model_id, source="imported",
                             entropy_source="top_k" if entropy is not None else "absent",
                             entropy_k=k if entropy is not None else None, extra={"api": api, **parsed.extra})
    return Trace(prompt=prompt, answer=answer, token_ids=np.full(n, -1, dtype=np.int64), tokens=tuple(pieces),
                 surprisal=surprisal, entropy=entropy, top_ids=np.full((n, k), -1, dtype=np.int64),
                 top_logprobs=top_logprobs, ranks=None, metadata=metadata, top_tokens=top_tokens)


def trace_from_openai(response: Mapping[str, Any], *, prompt: str = "", model_id: str = "") -> Trace:
    """A Trace from an OpenAI-compatible response with logprobs (OpenAI, vLLM, TGI, llama.cpp server).

    Two shapes are read (:data:`RESPONSE_SHAPES`):

    - chat.completions: ``choices[0].logprobs.content`` is a list of ``{"token", "logprob", "bytes",
      "top_logprobs": [{"token", "logprob", "bytes"}, ...]}``; the answer is ``choices[0].message.content``.
    - legacy completions: ``choices[0].logprobs`` is ``{"tokens", "token_logprobs", "top_logprobs": [{token:
      logprob} or null, ...]}``; the answer is ``choices[0].text``.

    Surprisal is ``-logprob`` of the chosen token (exact). When every step offers alternatives (``top_logprobs=k``
    was asked for), entropy is estimated per step with :func:`entropy_from_top_k` from that step's alternatives,
    plus the chosen token when it is not among them; metadata then says ``entropy_source="top_k"`` with
    ``entropy_k`` = k. A response without alternatives (``logprobs=true`` alone, or a step that offers none) has
    no entropy: ``entropy=None``, ``entropy_source="absent"``, k = 0, and surprisal-only methods still score it.
    Alternatives are sorted most likely first, ``-inf`` ones dropped, and truncated to the smallest number offered
    at any step, so every step has the same k (``top_ids`` are -1, ``top_tokens`` their text as the server gives
    it).

    Token texts come from each token's ``bytes`` when present (decoded incrementally as UTF-8, so a character split
    across tokens is carried by the token that completes it and the others are ""), else from ``token`` (where the
    legacy ``"bytes:\\xe6\\x97"`` form is understood). The answer is the response's text when present, even if it
    differs from the joined tokens; otherwise the joined tokens.

    Parameters
    ----------
    response : Mapping
        The parsed JSON response.
    prompt : str
        Stored on the trace.
    model_id : str
        Stored in the metadata; defaults to ``response["model"]``.

    Returns
    -------
    Trace
        ``source="imported"``, ``entropy_source`` ``"top_k"`` or ``"absent"``; ``metadata.extra`` holds ``api``
        (``"chat"`` or ``"completions"``) and ``finish_reason`` when given.

    Raises
    ------
    TypeError
        ``response`` is not a mapping, or ``prompt``/``model_id`` not a str.
    ValueError
        When the response lacks choices or logprobs, or holds malformed values; the message names the field.

    Examples
    --------
    >>> response = {"choices": [{"message": {"content": "Hi"}, "logprobs": {"content": [
    ...     {"token": "Hi", "logprob": -0.1, "top_logprobs": [{"token": "Hi", "logprob": -0.1}]}]}}]}
    >>> trace_from_openai(response).tokens
    ('Hi',)
    """
    if not isinstance(response, Mapping):
        raise TypeError(f"`response` must be a mapping (the parsed JSON response), got {type(response).__name__}")
    for name, value in (("prompt", prompt), ("model_id", model_id)):
        if not isinstance(value, str):
            raise TypeError(f"`{name}` must be a str, got {type(value).__name__}")
    shape = next((s for s in RESPONSE_SHAPES if s.detect(response)), None)
    if shape is None:
        raise _unreadable(response)
    parsed = shape.parse(response)
    model = model_id or (response.get("model") if isinstance(response.get("model"), str) else "")
    return _trace_from_steps(parsed, api=shape.api, prompt=prompt, model_id=model)  # type: ignore[arg-type]
