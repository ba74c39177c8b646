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
from .codec import MAX_NATS, entropy_from_top_k, too_much_mass, unlikely_chosen

__all__ = ["RESPONSE_SHAPES", "ParsedResponse", "ResponseShape", "trace_from_openai"]

_ASK_FOR_LOGPROBS = "ask the server for logprobs=true (and top_logprobs=k)"
_CHUNK_OBJECTS = ("chat.completion.chunk",)
_JOIN_CHUNKS = "join the stream's chunks into one response first"

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
    tokens_at : str
        Where the steps are in the response, for messages (``"choices[0].logprobs.content"``).
    alternatives_at : str
        Where step i's alternatives are, with ``{}`` for i, for messages
        (``"choices[0].logprobs.content[{}].top_logprobs"``).
    """

    steps: list[Step]
    text: object
    extra: dict[str, Any] = field(default_factory=dict)
    tokens_at: str = "the response's tokens"
    alternatives_at: str = "step {}'s alternatives"


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
    """A log-probability (<= 0 within the slack Trace allows); the chosen token's must also be finite and at least
    ``-MAX_NATS`` (an alternative's may be lower, or -inf: it is dropped later as "no probability")."""
    if not is_number(value) or math.isnan(float(value)) or float(value) > LOGPROB_TOLERANCE:  # type: ignore[arg-type]
        raise ValueError(f"{where} is {show(value)}; expected a log-probability (a number <= 0)")
    lp = float(value)  # type: ignore[arg-type]
    if chosen and not math.isfinite(lp):
        raise ValueError(f"{where} is {lp}; the chosen token needs a finite log-probability")
    if chosen and lp < -MAX_NATS:
        raise ValueError(f"{where} is {show(lp)}; {unlikely_chosen('below')}")
    return lp


# --------------------------------------------------------------------------------------------------
# OpenAI chat.completions and legacy completions
# --------------------------------------------------------------------------------------------------

def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _answer_choice(response: Mapping[str, Any]) -> tuple[int, Mapping[str, Any]]:
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
    position = 0
    if len(choices) > 1 and any("index" in c for c in choices):
        zero = [i for i, c in enumerate(choices) if _is_int(c.get("index")) and c["index"] == 0]
        if len(zero) != 1:
            indices = show([c.get("index") for c in choices])
            raise ValueError(f"response has {len(choices)} choices and {len(zero) or 'none'} with index 0 (indices "
                             f"{indices}); expected exactly one choice with index 0, the answer imported")
        position = zero[0]
    choice = choices[position]
    if "delta" in choice and "message" not in choice:
        raise ValueError(f"response choices[{position}] has a `delta`, not a `message`: it is a streamed chunk, a few "
                         f"tokens of the answer, not the whole response: {_JOIN_CHUNKS}")
    return position, choice


def _openai_logprobs(response: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any], str]:
    """The answer's choice (:func:`_answer_choice`), its ``logprobs`` object, and its path (``"choices[0]"``);
    ValueError saying which of them is missing or malformed."""
    position, choice = _answer_choice(response)
    where = f"choices[{position}]"
    logprobs = choice.get("logprobs")
    if logprobs is None:
        raise ValueError(f"response has no {where}.logprobs: {_ASK_FOR_LOGPROBS}")
    if not isinstance(logprobs, Mapping):
        raise ValueError(f"{where}.logprobs must be an object, got {show(logprobs)}")
    return choice, logprobs, where


def _has_openai_logprobs(key: str) -> Callable[[Mapping[str, Any]], bool]:
    def detect(response: Mapping[str, Any]) -> bool:
        try:
            return key in _openai_logprobs(response)[1]
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


def _parse_chat(response: Mapping[str, Any]) -> ParsedResponse:
    """chat.completions: ``choices[0].logprobs.content`` is a list of ``{"token", "logprob", "bytes",
    "top_logprobs": [{"token", "logprob", "bytes"}, ...]}``; the answer is ``choices[0].message.content``."""
    choice, logprobs, choice_at = _openai_logprobs(response)
    content = logprobs["content"]
    if content is None:
        raise ValueError(f"{choice_at}.logprobs.content is null: " + _ASK_FOR_LOGPROBS)
    if not isinstance(content, Sequence) or isinstance(content, (str, bytes)):
        raise ValueError(f"{choice_at}.logprobs.content must be a list, got {show(content)}")
    steps = []
    for i, entry in enumerate(content):
        where = f"{choice_at}.logprobs.content[{i}]"
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
    return ParsedResponse(steps=steps, text=text, extra=_openai_extra(response, choice),
                          tokens_at=f"{choice_at}.logprobs.content",
                          alternatives_at=f"{choice_at}.logprobs.content[{{}}].top_logprobs")


def _list_field(logprobs: Mapping[str, Any], name: str, choice_at: str) -> Sequence[Any]:
    value = logprobs.get(name)
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise ValueError(f"{choice_at}.logprobs.{name} must be a list, got {show(value)}")
    return value


def _parse_completions(response: Mapping[str, Any]) -> ParsedResponse:
    """Legacy completions: ``choices[0].logprobs`` is ``{"tokens", "token_logprobs", "top_logprobs": [{token:
    logprob} or null, ...]}``; the answer is ``choices[0].text``."""
    choice, logprobs, choice_at = _openai_logprobs(response)
    tokens = _list_field(logprobs, "tokens", choice_at)
    token_logprobs = _list_field(logprobs, "token_logprobs", choice_at)
    if len(token_logprobs) != len(tokens):
        raise ValueError(f"{choice_at}.logprobs.token_logprobs has {len(token_logprobs)} values but tokens has "
                         f"{len(tokens)}")
    tops = logprobs.get("top_logprobs")
    if tops is None:
        tops = [None] * len(tokens)
    elif not isinstance(tops, Sequence) or len(tops) != len(tokens):
        raise ValueError(f"{choice_at}.logprobs.top_logprobs must be a list with one entry per token, "
                         f"got {show(tops)}")
    steps = []
    where = f"{choice_at}.logprobs"
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
    return ParsedResponse(steps=steps, text=choice.get("text"), extra=_openai_extra(response, choice),
                          tokens_at=f"{where}.tokens", alternatives_at=f"{where}.top_logprobs[{{}}]")


#: The response layouts :func:`trace_from_openai` reads, tried in order (the first whose ``detect`` says yes).
RESPONSE_SHAPES: tuple[ResponseShape, ...] = (
    ResponseShape("chat", _has_openai_logprobs("content"), _parse_chat),
    ResponseShape("completions", _has_openai_logprobs("tokens"), _parse_completions),
)


def _unreadable(response: Mapping[str, Any]) -> ValueError:
    """Why no layout matched, in OpenAI's terms (the layout asked for most)."""
    try:
        where = _openai_logprobs(response)[2]
    except ValueError as exc:
        return exc
    return ValueError(f"{where}.logprobs has neither `content` (chat.completions) nor `tokens` (completions); "
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
    if not steps and parsed.text:
        raise ValueError(f"the answer is non-empty ({show(parsed.text)}) but the response has no token "
                         f"log-probabilities ({parsed.tokens_at} is empty): {_ASK_FOR_LOGPROBS}")
    answer = "".join(pieces) if parsed.text is None else parsed.text
    n = len(steps)
    surprisal = np.array([-lp for _, lp, _ in steps], dtype=np.float64)
    # An alternative below -MAX_NATS (-inf, or the -9999 servers write for it) has no probability: dropped.
    alternatives = [sorted(((tok, a) for tok, _, a in offered if a >= -MAX_NATS), key=lambda pair: -pair[1])
                    for _, _, offered in steps]
    # Whether the chosen token is one of its step's alternatives; when it is not, its mass is known too.
    offers_chosen = [raw in {key for _, key, a in offered if a >= -MAX_NATS} for raw, _, offered in steps]
    for t, ((_, lp, _), alts, among) in enumerate(zip(steps, alternatives, offers_chosen)):
        mass = math.fsum([math.exp(a) for _, a in alts] + ([] if among else [math.exp(lp)]))
        problem = too_much_mass(mass, None if among else math.exp(lp))
        if problem:
            raise ValueError(f"{parsed.alternatives_at.format(t)} {problem}")
    k = min((len(a) for a in alternatives), default=0)
    entropy: np.ndarray | None = None
    if k > 0:  # every step offers alternatives: a top-k estimate
        entropy = np.empty(n, dtype=np.float64)
        for t, ((_, lp, _), alts, among) in enumerate(zip(steps, alternatives, offers_chosen)):
            known = [a for _, a in alts]
            if not among:
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
    Alternatives are sorted most likely first, ``-inf`` ones (and those below ``-MAX_NATS``) dropped, and truncated
    to the smallest number offered at any step, so every step has the same k (``top_ids`` are -1, ``top_tokens``
    their text as the server gives it).

    Which answer: a response holds one choice per sample asked for (``n``). A single choice is imported whatever its
    ``index``; of several, the one with ``index`` 0 (the first when the choices carry no index), and
    ``metadata.extra["n_choices"]`` records how many there were; several choices without exactly one of index 0 are
    refused. A streamed chunk (``"object": "chat.completion.chunk"``, or a choice with a ``delta`` instead of a
    ``message``) is refused: join the stream's chunks into one response first.

    Bounds (the constants are in :mod:`trace_core.data.codec`, shared with the dataset's trace columns): a chosen
    token's log-probability below ``-MAX_NATS`` (-1000; servers write -9999 for -inf) is refused; an alternative's
    below ``-MAX_NATS``, ``-inf`` included, means "no probability" and is dropped like ``-inf``; a step whose
    alternatives, plus the chosen token when it is not among them, add up to a probability above
    ``1 + TOP_K_MASS_TOLERANCE`` (0.01, for rounding) is refused; so is a response with a non-empty answer text and
    no tokens. Every message names the field and the step.

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
        (``"chat"`` or ``"completions"``), ``finish_reason`` when given and ``n_choices`` when there are several.

    Raises
    ------
    TypeError
        ``response`` is not a mapping, or ``prompt``/``model_id`` not a str.
    ValueError
        When the response lacks choices or logprobs, is a streamed chunk, or holds malformed or impossible values
        (the bounds above); the message names the field.

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
