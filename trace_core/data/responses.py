"""Importing traces from model-server API responses that carry log-probabilities.

A response layout is a :class:`ResponseShape`: how to recognise it and how to read its decoding steps.
:data:`RESPONSE_SHAPES` lists the layouts read today: OpenAI's chat.completions and legacy completions (which vLLM,
TGI, Ollama and the llama.cpp server also speak at ``/v1``), and the servers' own layouts: llama.cpp ``/completion``
with ``n_probs``, Ollama ``/api/generate`` and ``/api/chat`` with ``logprobs``, TGI ``/generate`` with ``details``,
and vLLM's ``prompt_logprobs`` (an existing answer scored as part of the prompt). Each is one entry there: a
``detect`` function and a ``parse`` function returning :class:`ParsedResponse`; the steps become a Trace the same way
for all. A response must match exactly one layout.
"""

from __future__ import annotations

import codecs
import math
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..logprobs import MAX_NATS, check_logprob, entropy_from_top_k, too_much_mass
from ..trace import LOGPROB_TOLERANCE, Trace, TraceMetadata
from ._values import is_number, show

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
    token_ids : list of int or None
        The chosen tokens' ids when the server gives them (then whether the chosen token is among its step's
        alternatives is decided by id, not by text); None otherwise.
    alternative_ids : list of list of int or None
        The alternatives' ids, parallel to each step's alternatives; given exactly when ``token_ids`` is.
    ranks : list of int or None
        The chosen tokens' 1-based ranks when the server gives them all; None otherwise.
    step_offset : int
        The position of step 0 in the response's list, for messages (``alternatives_at.format(offset + i)``).
    """

    steps: list[Step]
    text: object
    extra: dict[str, Any] = field(default_factory=dict)
    tokens_at: str = "the response's tokens"
    alternatives_at: str = "step {}'s alternatives"
    token_ids: list[int] | None = None
    alternative_ids: list[list[int]] | None = None
    ranks: list[int] | None = None
    step_offset: int = 0


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
        ``parse(response) -> ParsedResponse`` (``parse(response, answer_tokens=n)`` when ``scores_prompt``); raises
        ValueError naming the malformed field.
    expects : str
        What the layout looks like, for the message on a response that matches no layout or several.
    scores_prompt : bool
        The layout holds log-probabilities of the prompt, the answer being its last ``answer_tokens`` tokens (which
        the caller must say), rather than of generated tokens.
    hint : callable or None
        ``hint(response) -> str or None``: for a response this layout did not detect, why, when the response looks
        like its server's (e.g. log-probabilities were not asked for); None otherwise.
    """

    api: str
    detect: Callable[[Mapping[str, Any]], bool]
    parse: Callable[..., ParsedResponse]
    expects: str = ""
    scores_prompt: bool = False
    hint: Callable[[Mapping[str, Any]], str | None] | None = None


# --------------------------------------------------------------------------------------------------
# Fields: types, token texts, log-probs
# --------------------------------------------------------------------------------------------------

_BYTES_TOKEN = re.compile(r"bytes:((?:\\x[0-9a-fA-F]{2})+)")
_LLAMA_BYTE_TOKEN = re.compile(r"byte: \\x([0-9a-fA-F]{1,2})")
_MAX_ID = 2**63 - 1


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


_check_logprob = check_logprob  # shared with live recording from a model server


def _check_prob(value: object, where: str, *, chosen: bool = False) -> float:
    """A probability (0 to 1, within the slack Trace allows log-probs) as its log-probability; 0 gives -inf, which
    an alternative may have (it is dropped) and the chosen token may not."""
    if (not is_number(value) or math.isnan(float(value)) or float(value) < 0  # type: ignore[arg-type]
            or float(value) > math.exp(LOGPROB_TOLERANCE)):  # type: ignore[arg-type]
        raise ValueError(f"{where} is {show(value)}; expected a probability (a number from 0 to 1)")
    p = float(value)  # type: ignore[arg-type]
    if chosen and p == 0:
        raise ValueError(f"{where} is 0; the chosen token needs a probability above 0")
    return math.log(p) if p > 0 else -math.inf


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_list(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _get(entry: Mapping[str, Any], key: str, where: str, expected: str) -> Any:
    """``entry[key]``; ValueError naming the field when it is missing."""
    if key not in entry:
        raise ValueError(f"{where} has no `{key}`; expected {expected}")
    return entry[key]


def _object(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be an object, got {show(value)}")
    return value


def _list(value: object, where: str) -> Sequence[Any]:
    if not _is_list(value):
        raise ValueError(f"{where} must be a list, got {show(value)}")
    return value  # type: ignore[return-value]


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {show(value)}")
    return value


def _token_id(value: object, where: str) -> int:
    if not _is_int(value) or not 0 <= value <= _MAX_ID:  # type: ignore[operator]
        raise ValueError(f"{where} must be a token id (an int >= 0), got {show(value)}")
    return int(value)  # type: ignore[call-overload]


def _streamed(what: str, how: str) -> ValueError:
    """The error for one message of a stream, which holds a few of the answer's tokens, not the answer."""
    return ValueError(f"response is {what}, a few tokens of the answer, not the whole response: {how}")


# --------------------------------------------------------------------------------------------------
# A list of {"token", "logprob", "bytes", "top_logprobs": [...]} (OpenAI chat, Ollama, llama.cpp's /v1)
# --------------------------------------------------------------------------------------------------

@dataclass
class _Steps:
    """Steps being read, with the token ids while every token and alternative so far has one."""

    steps: list[Step] = field(default_factory=list)
    token_ids: list[int] | None = field(default_factory=list)
    alternative_ids: list[list[int]] | None = field(default_factory=list)

    def add(self, step: Step, chosen_id: int | None, alternative_ids: Sequence[int | None]) -> None:
        self.steps.append(step)
        known = [i for i in alternative_ids if i is not None]
        if chosen_id is None or len(known) != len(alternative_ids):
            self.token_ids = self.alternative_ids = None
        elif self.token_ids is not None and self.alternative_ids is not None:
            self.token_ids.append(chosen_id)
            self.alternative_ids.append(known)

    def ids(self) -> dict[str, Any]:
        """The id fields of :class:`ParsedResponse`: given only when every token and alternative had an id."""
        return {"token_ids": self.token_ids, "alternative_ids": self.alternative_ids}


def _optional_id(entry: Mapping[str, Any], where: str) -> int | None:
    return _token_id(entry["id"], f"{where}.id") if "id" in entry else None


def _content_steps(content: object, where: str) -> _Steps:
    """Steps from a list of ``{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}``
    (OpenAI chat.completions' ``logprobs.content``, Ollama's ``logprobs``); an ``id`` on every token and
    alternative (llama.cpp's ``/v1`` responses) is kept."""
    read = _Steps()
    for i, entry in enumerate(_list(content, where)):
        at = f"{where}[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("token"), str):
            raise ValueError(f"{at} must be an object with a string `token`, got {show(entry)}")
        lp = _check_logprob(entry.get("logprob"), f"{at}.logprob", chosen=True)
        raw = _byte_list(entry.get("bytes"), f"{at}.bytes")
        raw = _token_bytes(entry["token"]) if raw is None else raw
        alts, alt_ids = [], []
        for j, alt in enumerate(entry.get("top_logprobs") or []):
            alt_at = f"{at}.top_logprobs[{j}]"
            if not isinstance(alt, Mapping) or not isinstance(alt.get("token"), str):
                raise ValueError(f"{alt_at} must be an object with a string `token`, got {show(alt)}")
            key = _byte_list(alt.get("bytes"), f"{alt_at}.bytes")
            alts.append((alt["token"], _token_bytes(alt["token"]) if key is None else key,
                         _check_logprob(alt.get("logprob"), f"{alt_at}.logprob")))
            alt_ids.append(_optional_id(alt, alt_at))
        read.add((raw, lp, alts), _optional_id(entry, at), alt_ids)
    return read


# --------------------------------------------------------------------------------------------------
# OpenAI chat.completions and legacy completions
# --------------------------------------------------------------------------------------------------

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
    "top_logprobs": [{"token", "logprob", "bytes"}, ...]}``; the answer is ``choices[0].message.content`` (or
    ``choices[0].text``: llama.cpp's ``/v1/completions`` writes its log-probs this way too)."""
    choice, logprobs, choice_at = _openai_logprobs(response)
    content = logprobs["content"]
    if content is None:
        raise ValueError(f"{choice_at}.logprobs.content is null: " + _ASK_FOR_LOGPROBS)
    read = _content_steps(content, f"{choice_at}.logprobs.content")
    message = choice.get("message")
    text = message.get("content") if isinstance(message, Mapping) else choice.get("text")
    return ParsedResponse(steps=read.steps, text=text, extra=_openai_extra(response, choice),
                          tokens_at=f"{choice_at}.logprobs.content",
                          alternatives_at=f"{choice_at}.logprobs.content[{{}}].top_logprobs", **read.ids())


def _list_field(logprobs: Mapping[str, Any], name: str, choice_at: str) -> Sequence[Any]:
    return _list(logprobs.get(name), f"{choice_at}.logprobs.{name}")


_TOKEN_ID_TEXT = re.compile(r"token_id:-?\d+")


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
    if tokens and all(isinstance(t, str) and _TOKEN_ID_TEXT.fullmatch(t) for t in tokens):
        # vLLM's return_tokens_as_token_ids: ids instead of texts, so the answer cannot be split into tokens here
        raise ValueError(f"{where}.tokens are token ids ({show(tokens[0])}), not texts: the response was made with "
                         "return_tokens_as_token_ids; record the answers with the server itself (connect_server, "
                         "or --server) or save responses without that option")
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


# --------------------------------------------------------------------------------------------------
# llama.cpp server /completion with n_probs
# --------------------------------------------------------------------------------------------------

_LLAMA_ENTRY = "{id, token, bytes, logprob, top_logprobs} (llama.cpp /completion with n_probs)"
_LLAMA_POST_ENTRY = "{id, token, bytes, prob, top_probs} (llama.cpp /completion with post_sampling_probs)"
_LLAMA_LEGACY_ENTRY = "{content, probs: [{tok_str, prob}]} (llama.cpp /completion with n_probs, older servers)"


def _llama_legacy_bytes(token: str) -> bytes:
    # Old llama.cpp servers wrote a lone byte of a multi-byte character as "byte: \xe6".
    match = _LLAMA_BYTE_TOKEN.fullmatch(token)
    return bytes([int(match.group(1), 16)]) if match else token.encode("utf-8")


def _llama_token(item: Mapping[str, Any], where: str, *, post_sampling: bool,
                 chosen: bool) -> tuple[str, bytes, float, int]:
    """One token of the current layout, ``{id, token, bytes, logprob}`` (``prob`` with ``post_sampling_probs``), as
    (text, bytes, log-prob, id)."""
    value, expected = ("prob", _LLAMA_POST_ENTRY) if post_sampling else ("logprob", _LLAMA_ENTRY)
    check = _check_prob if post_sampling else _check_logprob
    text = _string(_get(item, "token", where, expected), f"{where}.token")
    raw = _byte_list(item.get("bytes"), f"{where}.bytes")  # whole, where `token` is cut to valid UTF-8
    number = check(_get(item, value, where, expected), f"{where}.{value}", chosen=chosen)
    token_id = _token_id(_get(item, "id", where, expected), f"{where}.id")
    return text, text.encode("utf-8") if raw is None else raw, number, token_id


def _llama_step(entry: Mapping[str, Any], at: str, *, post_sampling: bool, read: _Steps) -> None:
    """One step of the current layout: ``{id, token, bytes, logprob, top_logprobs: [{id, token, bytes,
    logprob}]}``, or with ``post_sampling_probs`` ``{..., prob, top_probs: [{..., prob}]}``."""
    _, raw, lp, chosen_id = _llama_token(entry, at, post_sampling=post_sampling, chosen=True)
    name = "top_probs" if post_sampling else "top_logprobs"
    offered = entry.get(name)
    alts, alt_ids = [], []
    for j, alt in enumerate([] if offered is None else _list(offered, f"{at}.{name}")):
        where = f"{at}.{name}[{j}]"
        text, key, a, alt_id = _llama_token(_object(alt, where), where, post_sampling=post_sampling, chosen=False)
        alts.append((text, key, a))
        alt_ids.append(alt_id)
    read.add((raw, lp, alts), chosen_id, alt_ids)


def _llama_legacy_step(entry: Mapping[str, Any], at: str, read: _Steps) -> None:
    """One step of the older servers' layout: ``{content, probs: [{tok_str, prob}]}``, with the chosen token known
    only by its text; its probability is that of the first alternative with the same text."""
    chosen = _string(_get(entry, "content", at, _LLAMA_LEGACY_ENTRY), f"{at}.content")
    alts = []
    for j, alt in enumerate(_list(_get(entry, "probs", at, _LLAMA_LEGACY_ENTRY), f"{at}.probs")):
        where = f"{at}.probs[{j}]"
        alt = _object(alt, where)
        text = _string(_get(alt, "tok_str", where, "{tok_str, prob}"), f"{where}.tok_str")
        alts.append((text, _llama_legacy_bytes(text), _check_prob(_get(alt, "prob", where, "{tok_str, prob}"),
                                                                   f"{where}.prob")))
    at_chosen = next((j for j, (text, _, _) in enumerate(alts) if text == chosen), None)
    if at_chosen is None:
        raise ValueError(f"{at}.content {show(chosen)} is not among {at}.probs, so its probability is unknown: ask "
                         "for a larger n_probs")
    lp = alts[at_chosen][2]
    if lp == -math.inf:
        raise ValueError(f"{at}.probs[{at_chosen}].prob is 0; the chosen token needs a probability above 0")
    read.add((_llama_legacy_bytes(chosen), lp, alts), None, [None] * len(alts))


def _llama_form(entries: Sequence[Any]) -> str:
    """Which of llama.cpp's layouts the first step has: "logprob", "prob" (post-sampling) or "legacy"."""
    first = entries[0] if entries and isinstance(entries[0], Mapping) else {}
    if "probs" in first and "logprob" not in first:
        return "legacy"
    return "prob" if ("prob" in first or "top_probs" in first) and "logprob" not in first else "logprob"


def _parse_llamacpp(response: Mapping[str, Any]) -> ParsedResponse:
    """llama.cpp ``/completion`` with ``n_probs``: ``completion_probabilities`` is a list of ``{id, token, bytes,
    logprob, top_logprobs: [{id, token, bytes, logprob}]}``; older servers wrote ``{content, probs: [{tok_str, prob}]}``
    (probabilities after sampling). The answer is ``content``."""
    if response.get("stop") is False:
        raise _streamed("a streamed message (`stop` is false)",
                        "join the stream's messages into one response first, or ask with stream=false")
    entries = _list(response["completion_probabilities"], "completion_probabilities")
    form = _llama_form(entries)
    read = _Steps()
    for i, entry in enumerate(entries):
        at = f"completion_probabilities[{i}]"
        entry = _object(entry, at)
        if form == "legacy":
            _llama_legacy_step(entry, at, read)
        else:
            _llama_step(entry, at, post_sampling=form == "prob", read=read)
    extra: dict[str, Any] = {}
    if isinstance(response.get("stop_type"), str):
        extra["finish_reason"] = response["stop_type"]
    if form != "logprob":  # the sampler's probabilities (after temperature, top-k, top-p), not the model's
        extra["post_sampling_probs"] = True
    alternatives = {"logprob": "top_logprobs", "prob": "top_probs", "legacy": "probs"}[form]
    return ParsedResponse(steps=read.steps, text=response.get("content"), extra=extra,
                          tokens_at="completion_probabilities",
                          alternatives_at=f"completion_probabilities[{{}}].{alternatives}", **read.ids())


def _detect_llamacpp(response: Mapping[str, Any]) -> bool:
    return "completion_probabilities" in response and "choices" not in response


def _hint_llamacpp(response: Mapping[str, Any]) -> str | None:
    if "content" in response and any(k in response for k in ("id_slot", "tokens_predicted", "generation_settings")):
        return ("it looks like a llama.cpp /completion response without `completion_probabilities`: ask with "
                "n_probs=k and stream=false")
    return None


# --------------------------------------------------------------------------------------------------
# Ollama /api/generate and /api/chat with logprobs
# --------------------------------------------------------------------------------------------------

def _ollama_parser(text_of: Callable[[Mapping[str, Any]], object]) -> Callable[[Mapping[str, Any]], ParsedResponse]:
    def parse(response: Mapping[str, Any]) -> ParsedResponse:
        """Ollama (0.12.11 or later) with ``logprobs: true``: ``logprobs`` is a list of ``{token, logprob, bytes,
        top_logprobs: [{token, logprob, bytes}]}``."""
        if response.get("done") is False:
            raise _streamed("a streamed line (`done` is false)",
                            "join the stream's NDJSON lines into one response first (their texts and `logprobs` "
                            "lists, in order), or ask with stream: false")
        logprobs = response["logprobs"]
        if logprobs is None:
            raise ValueError("response `logprobs` is null: ask Ollama for logprobs: true (and top_logprobs: k)")
        read = _content_steps(logprobs, "logprobs")
        extra = {"finish_reason": response["done_reason"]} if isinstance(response.get("done_reason"), str) else {}
        return ParsedResponse(steps=read.steps, text=text_of(response), extra=extra, tokens_at="logprobs",
                              alternatives_at="logprobs[{}].top_logprobs", **read.ids())
    return parse


def _ollama_chat_text(response: Mapping[str, Any]) -> object:
    message = response["message"]
    if not isinstance(message, Mapping):
        raise ValueError(f"message must be an object, got {show(message)}")
    return message.get("content")


def _detect_ollama(text_key: str) -> Callable[[Mapping[str, Any]], bool]:
    def detect(response: Mapping[str, Any]) -> bool:
        return "logprobs" in response and text_key in response and "choices" not in response
    return detect


def _hint_ollama(response: Mapping[str, Any]) -> str | None:
    if ("response" in response or "message" in response) and ("done" in response or "created_at" in response):
        return ("it looks like an Ollama response without `logprobs`: ask with logprobs: true (and top_logprobs: k), "
                "Ollama 0.12.11 or later")
    return None


# --------------------------------------------------------------------------------------------------
# TGI /generate with details
# --------------------------------------------------------------------------------------------------

_TGI_TOKEN = "{id, text, logprob, special}"


def _tgi_token(item: object, where: str, *, chosen: bool) -> tuple[str, bytes, float, int]:
    item = _object(item, where)
    text = _string(_get(item, "text", where, _TGI_TOKEN), f"{where}.text")
    lp = _check_logprob(_get(item, "logprob", where, _TGI_TOKEN), f"{where}.logprob", chosen=chosen)
    return text, text.encode("utf-8"), lp, _token_id(_get(item, "id", where, _TGI_TOKEN), f"{where}.id")


def _parse_tgi(response: Mapping[str, Any]) -> ParsedResponse:
    """TGI ``/generate`` with ``details: true`` (and ``top_n_tokens: k``): ``details.tokens`` is a list of ``{id,
    text, logprob, special}`` and ``details.top_tokens`` one list of those per step; ``details.prefill`` (with
    ``decoder_input_details``) is the prompt, not the answer, and is not read. The answer is ``generated_text``."""
    if "token" in response:
        raise _streamed("a streamed event of /generate_stream (it has a `token`)",
                        "join the stream's events into one response first, or ask /generate with details: true")
    details = response["details"]
    if details is None:
        raise ValueError("response `details` is null: ask TGI for details: true (and top_n_tokens: k)")
    details = _object(details, "details")
    tokens = _list(_get(details, "tokens", "details", "{finish_reason, tokens, top_tokens}"), "details.tokens")
    tops = details.get("top_tokens")
    if tops is not None and (not _is_list(tops) or len(tops) != len(tokens)):
        raise ValueError(f"details.top_tokens must be a list with one list per token ({len(tokens)}), "
                         f"got {show(tops)}")
    read = _Steps()
    for i, token in enumerate(tokens):
        _, raw, lp, chosen_id = _tgi_token(token, f"details.tokens[{i}]", chosen=True)
        offered = [] if tops is None else _list(tops[i], f"details.top_tokens[{i}]")
        alternatives = [_tgi_token(alt, f"details.top_tokens[{i}][{j}]", chosen=False)
                        for j, alt in enumerate(offered)]
        read.add((raw, lp, [(text, key, a) for text, key, a, _ in alternatives]), chosen_id,
                 [alt_id for *_, alt_id in alternatives])
    extra = {"finish_reason": details["finish_reason"]} if isinstance(details.get("finish_reason"), str) else {}
    return ParsedResponse(steps=read.steps, text=response.get("generated_text"), extra=extra,
                          tokens_at="details.tokens", alternatives_at="details.top_tokens[{}]", **read.ids())


def _detect_tgi(response: Mapping[str, Any]) -> bool:
    return "generated_text" in response and ("details" in response or "token" in response)


def _hint_tgi(response: Mapping[str, Any]) -> str | None:
    if "generated_text" in response:
        return ("it looks like a TGI /generate response without `details`: ask with details: true (and "
                "top_n_tokens: k)")
    return None


# --------------------------------------------------------------------------------------------------
# vLLM prompt_logprobs: an existing answer scored as the end of the prompt
# --------------------------------------------------------------------------------------------------

_VLLM_ENTRY = "{logprob, rank, decoded_token}"


def _prompt_logprobs_at(response: Mapping[str, Any]) -> tuple[Mapping[str, Any], str] | None:
    """The object holding the response's non-null ``prompt_logprobs`` and its path prefix: the response and ``""``
    (chat.completions), or the answer's choice and ``"choices[0]."`` (completions); None when it has none. Never
    raises."""
    if response.get("prompt_logprobs") is not None:
        return response, ""
    if isinstance(response.get("choices"), Sequence):
        try:
            position, choice = _answer_choice(response)
        except ValueError:
            return None
        if choice.get("prompt_logprobs") is not None:
            return choice, f"choices[{position}]."
    return None


def _vllm_position(entry: object, token_id: int, at: str) -> tuple[bytes, float, list[tuple[str, bytes, float]],
                                                                     list[int], int | None]:
    """One answer token: ``entry`` maps token ids (as strings) to ``{logprob, rank, decoded_token}`` and holds the
    prompt's own token ``token_id``. Returns its bytes, log-prob, the alternatives with their ids, and its rank.

    vLLM sends the top-k plus the prompt's token when that is not among them: the prompt's token counts as an
    alternative only when its rank is within the entry's size (it is then one of the most likely)."""
    entry = _object(entry, at)
    values: dict[int, tuple[str, float, int | None]] = {}
    for key, value in entry.items():
        where = f"{at}[{key!r}]"
        if not isinstance(key, str) or not (key.isascii() and key.isdigit()):
            raise ValueError(f"{at} has the key {show(key)}; expected token ids as keys, {{token id: {_VLLM_ENTRY}}} "
                             "(vLLM's prompt_logprobs)")
        value = _object(value, where)
        text = value.get("decoded_token")
        if text is not None and not isinstance(text, str):
            raise ValueError(f"{where}.decoded_token must be a string or null, got {show(text)}")
        rank = value.get("rank")
        if rank is not None and (not _is_int(rank) or rank < 1):
            raise ValueError(f"{where}.rank must be an int >= 1 or null, got {show(rank)}")
        lp = _check_logprob(_get(value, "logprob", where, _VLLM_ENTRY), f"{where}.logprob",
                            chosen=int(key) == token_id)
        values[int(key)] = (text or "", lp, rank)
    if token_id not in values:
        raise ValueError(f"{at} has no entry for the prompt's token {token_id}; expected it among the keys "
                         "(vLLM always includes it)")
    text, lp, rank = values[token_id]
    if not isinstance(entry[str(token_id)].get("decoded_token"), str):
        raise ValueError(f"{at}[{str(token_id)!r}].decoded_token must be a string (the token's text), got "
                         f"{show(entry[str(token_id)].get('decoded_token'))}")
    offered = [(i, v) for i, v in values.items() if i != token_id or rank is None or rank <= len(values)]
    alts = [(t, t.encode("utf-8"), a) for _, (t, a, _) in offered]
    return text.encode("utf-8"), lp, alts, [i for i, _ in offered], rank


def _answer_tokens_needed(where: str) -> ValueError:
    return ValueError(f"response has {where}prompt_logprobs (an existing answer scored as the end of the prompt) "
                      "but where the answer starts is not known: give answer_tokens, the number of the prompt's "
                      "last tokens that are the answer")


def _parse_vllm_prompt(response: Mapping[str, Any], *, answer_tokens: int | None) -> ParsedResponse:
    """vLLM ``prompt_logprobs``: a list aligned with ``prompt_token_ids`` (the first entry null), each entry
    ``{"<token id>": {logprob, rank, decoded_token}}`` holding the prompt's token; the answer is the last
    ``answer_tokens`` of them. In a completions response both lists are in ``choices[0]``, in a chat.completions
    response at the top level (vLLM sends ``prompt_token_ids`` with ``return_token_ids: true``)."""
    holder, base = _prompt_logprobs_at(response) or (response, "")
    if answer_tokens is None:
        raise _answer_tokens_needed(base)
    entries = _list(holder["prompt_logprobs"], f"{base}prompt_logprobs")
    ids = holder.get("prompt_token_ids")
    if ids is None:
        raise ValueError(f"response has {base}prompt_logprobs but no {base}prompt_token_ids, so the prompt's own "
                         "token at each position is unknown: ask vLLM with return_token_ids: true")
    ids = _list(ids, f"{base}prompt_token_ids")
    if len(ids) != len(entries):
        raise ValueError(f"{base}prompt_logprobs has {len(entries)} entries but {base}prompt_token_ids has "
                         f"{len(ids)}")
    if answer_tokens > len(entries) - 1:  # the first prompt token has no log-probability
        raise ValueError(f"answer_tokens is {answer_tokens} but only {max(len(entries) - 1, 0)} of the prompt's "
                         f"tokens have a log-probability ({base}prompt_logprobs has {len(entries)} entries, the "
                         "first null)")
    start = len(entries) - answer_tokens
    read, ranks = _Steps(), []
    for pos in range(start, len(entries)):
        token_id = _token_id(ids[pos], f"{base}prompt_token_ids[{pos}]")
        raw, lp, alts, alt_ids, rank = _vllm_position(entries[pos], token_id, f"{base}prompt_logprobs[{pos}]")
        read.add((raw, lp, alts), token_id, alt_ids)
        ranks.append(rank)
    return ParsedResponse(steps=read.steps, text=None, extra={"answer_start": start},
                          tokens_at=f"{base}prompt_logprobs[{start}:]", alternatives_at=f"{base}prompt_logprobs[{{}}]",
                          step_offset=start, **read.ids(),
                          ranks=None if None in ranks else ranks)  # type: ignore[arg-type]


def _detect_vllm_prompt(response: Mapping[str, Any]) -> bool:
    return _prompt_logprobs_at(response) is not None


# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------

#: The response layouts :func:`trace_from_openai` reads; a response must match exactly one.
RESPONSE_SHAPES: tuple[ResponseShape, ...] = (
    ResponseShape("chat", _has_openai_logprobs("content"), _parse_chat,
                  expects="OpenAI chat.completions (`choices[0].logprobs.content`)"),
    ResponseShape("completions", _has_openai_logprobs("tokens"), _parse_completions,
                  expects="OpenAI completions (`choices[0].logprobs.tokens`)"),
    ResponseShape("llamacpp_completion", _detect_llamacpp, _parse_llamacpp, hint=_hint_llamacpp,
                  expects="llama.cpp /completion (`completion_probabilities`)"),
    ResponseShape("ollama_generate", _detect_ollama("response"), _ollama_parser(lambda r: r["response"]),
                  hint=_hint_ollama, expects="Ollama /api/generate (`logprobs` and `response`)"),
    ResponseShape("ollama_chat", _detect_ollama("message"), _ollama_parser(_ollama_chat_text),
                  expects="Ollama /api/chat (`logprobs` and `message`)"),
    ResponseShape("tgi_generate", _detect_tgi, _parse_tgi, hint=_hint_tgi,
                  expects="TGI /generate (`generated_text` and `details`)"),
    ResponseShape("vllm_prompt_logprobs", _detect_vllm_prompt, _parse_vllm_prompt, scores_prompt=True,
                  expects="vLLM prompt_logprobs (`prompt_logprobs` and `prompt_token_ids`)"),
)


def _unreadable(response: Mapping[str, Any]) -> ValueError:
    """Why no layout matched: in OpenAI's terms when the response has ``choices``, else the layouts expected and,
    when the response looks like one server's, what to ask that server for."""
    if "choices" in response:
        try:
            where = _openai_logprobs(response)[2]
        except ValueError as exc:
            return exc
        return ValueError(f"{where}.logprobs has neither `content` (chat.completions) nor `tokens` (completions); "
                          + _ASK_FOR_LOGPROBS)
    hint = next((h for s in RESPONSE_SHAPES if s.hint is not None and (h := s.hint(response))), None)
    others = "; ".join(s.expects for s in RESPONSE_SHAPES[2:])
    return ValueError("response has no choices: expected an OpenAI-style response with a non-empty `choices` list, "
                      f"or one of: {others}" + (f"; {hint}" if hint else ""))


def _ambiguous(shapes: Sequence[ResponseShape]) -> ValueError:
    names = " and ".join(f"{s.api} ({s.expects})" for s in shapes)
    return ValueError(f"response matches {len(shapes)} layouts, {names}; expected exactly one: keep only the fields "
                      "of the one to import")


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
    by_id = parsed.token_ids is not None and parsed.alternative_ids is not None
    chosen_ids = parsed.token_ids if by_id else [-1] * n
    offered_ids = parsed.alternative_ids if by_id else [[-1] * len(offered) for _, _, offered in steps]
    surprisal = 0.0 - np.array([lp for _, lp, _ in steps], dtype=np.float64)  # +0.0, never -0.0
    # An alternative below -MAX_NATS (-inf, or the -9999 servers write for it) has no probability: dropped.
    # Each kept alternative is (text, what identifies it: its id when the server gives ids, else its bytes, log-prob,
    # id or -1), most likely first.
    alternatives = [sorted(((tok, alt_id if by_id else key, a, alt_id)
                            for (tok, key, a), alt_id in zip(offered, ids) if a >= -MAX_NATS), key=lambda alt: -alt[2])
                    for (_, _, offered), ids in zip(steps, offered_ids)]  # type: ignore[arg-type]
    # Whether the chosen token is one of its step's alternatives; when it is not, its mass is known too.
    offers_chosen = [(chosen_id if by_id else raw) in {key for _, key, _, _ in alts}
                     for (raw, _, _), chosen_id, alts in zip(steps, chosen_ids, alternatives)]  # type: ignore[arg-type]
    for t, ((_, lp, _), alts, among) in enumerate(zip(steps, alternatives, offers_chosen)):
        mass = math.fsum([math.exp(a) for _, _, a, _ in alts] + ([] if among else [math.exp(lp)]))
        problem = too_much_mass(mass, None if among else math.exp(lp))
        if problem:
            raise ValueError(f"{parsed.alternatives_at.format(t + parsed.step_offset)} {problem}")
    k = min((len(a) for a in alternatives), default=0)
    entropy: np.ndarray | None = None
    if k > 0:  # every step offers alternatives: a top-k estimate
        entropy = np.empty(n, dtype=np.float64)
        for t, ((_, lp, _), alts, among) in enumerate(zip(steps, alternatives, offers_chosen)):
            known = [a for _, _, a, _ in alts]
            if not among:
                known.append(lp)
            entropy[t] = entropy_from_top_k(np.array([known], dtype=np.float64))[0]
    # A step without alternatives knows only the chosen token: one probability says nothing about the spread of the
    # rest, so such a response has no entropy ("absent") rather than a one-bucket guess.
    top_logprobs = np.array([[a for _, _, a, _ in alts[:k]] for alts in alternatives],
                            dtype=np.float64).reshape(n, k)
    top_ids = np.array([[i for *_, i in alts[:k]] for alts in alternatives], dtype=np.int64).reshape(n, k)
    top_tokens = tuple(tuple(tok for tok, *_ in alts[:k]) for alts in alternatives)
    metadata = TraceMetadata(model_id=model_id, source="imported",
                             entropy_source="top_k" if entropy is not None else "absent",
                             entropy_k=k if entropy is not None else None, extra={"api": api, **parsed.extra})
    ranks = None if parsed.ranks is None else np.array(parsed.ranks, dtype=np.int64)
    return Trace(prompt=prompt, answer=answer, token_ids=np.array(chosen_ids, dtype=np.int64).reshape(n),
                 tokens=tuple(pieces), surprisal=surprisal, entropy=entropy, top_ids=top_ids,
                 top_logprobs=top_logprobs, ranks=ranks, metadata=metadata, top_tokens=top_tokens)


def _check_answer_tokens(answer_tokens: object) -> int | None:
    if answer_tokens is None:
        return None
    if isinstance(answer_tokens, bool) or not isinstance(answer_tokens, numbers.Integral) or answer_tokens < 0:
        raise ValueError(f"answer_tokens must be an int >= 0 (how many of the prompt's last tokens are the answer), "
                         f"got {show(answer_tokens)}")
    return int(answer_tokens)


def trace_from_openai(response: Mapping[str, Any], *, prompt: str = "", model_id: str = "",
                      answer_tokens: int | None = None) -> Trace:
    """A Trace from a model server's response with log-probabilities: OpenAI-compatible (OpenAI, vLLM, TGI, Ollama,
    llama.cpp at ``/v1``) or a server's own layout.

    The layouts read (:data:`RESPONSE_SHAPES`; ``metadata.extra["api"]`` names the one read):

    - ``chat``: ``choices[0].logprobs.content`` is a list of ``{"token", "logprob", "bytes", "top_logprobs":
      [{"token", "logprob", "bytes"}, ...]}``; the answer is ``choices[0].message.content`` (or ``choices[0].text``,
      as llama.cpp's ``/v1/completions`` writes it).
    - ``completions``: ``choices[0].logprobs`` is ``{"tokens", "token_logprobs", "top_logprobs": [{token: logprob}
      or null, ...]}``; the answer is ``choices[0].text``.
    - ``llamacpp_completion``: llama.cpp ``/completion`` with ``n_probs``: ``completion_probabilities`` is a list of
      ``{"id", "token", "bytes", "logprob", "top_logprobs": [{"id", "token", "bytes", "logprob"}]}``; the answer is
      ``content``. Older servers (2023-2024) wrote ``{"content", "probs": [{"tok_str", "prob"}]}`` (probabilities, read
      as their log; the chosen token's is that of the alternative with its text, so it must be among them), and
      ``post_sampling_probs: true`` gives ``{..., "prob", "top_probs"}``: both are the sampler's probabilities
      (after temperature, top-k, top-p), not the model's, and ``extra["post_sampling_probs"]`` says so.
    - ``ollama_generate`` / ``ollama_chat``: Ollama 0.12.11 or later with ``logprobs: true, top_logprobs: k``:
      ``logprobs`` is a list of ``{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}``;
      the answer is ``response`` (``/api/generate``) or ``message.content`` (``/api/chat``).
    - ``tgi_generate``: TGI ``/generate`` with ``details: true, top_n_tokens: k``: ``details.tokens`` is a list of
      ``{"id", "text", "logprob", "special"}`` and ``details.top_tokens`` one such list per step; the answer is
      ``generated_text``. ``details.prefill`` (``decoder_input_details``) is the prompt and is not read.
    - ``vllm_prompt_logprobs``: an existing answer scored by vLLM as the end of the prompt (``prompt_logprobs: k``,
      ``return_token_ids: true``; in a completions response ``choices[0].prompt_logprobs`` and
      ``choices[0].prompt_token_ids``, in a chat.completions response, e.g. with ``continue_final_message``, both
      at the top level). ``prompt_logprobs`` is aligned with ``prompt_token_ids`` (the first entry null), each entry
      ``{"<token id>": {"logprob", "rank", "decoded_token"}}`` holding the prompt's own token. Where the answer
      starts cannot be told from the response, so ``answer_tokens`` must say it: the answer is the last
      ``answer_tokens`` entries (count the answer's tokens as they are in ``prompt_token_ids``; a tokenizer may
      merge the prompt's last characters with the answer's first). Without it the response is refused. The
      tokens' texts are their ``decoded_token``; the answer is their concatenation (a dataset's ``answer`` cell
      wins); ``ranks`` are the tokens' ranks, and ``extra["answer_start"]`` the answer's first position. The
      generated text of such a response is not the answer and is not read.

    A response must match exactly one layout: one that matches none is refused with the layouts expected (and, when
    it looks like one server's, what to ask it for), one that matches several (e.g. ``prompt_logprobs`` next to
    ``logprobs``) with their names.

    Surprisal is ``-logprob`` of the chosen token (exact). When every step offers alternatives (``top_logprobs=k``
    was asked for), entropy is estimated per step with :func:`entropy_from_top_k` from that step's alternatives,
    plus the chosen token when it is not among them; metadata then says ``entropy_source="top_k"`` with
    ``entropy_k`` = k. A response without alternatives (``logprobs=true`` alone, or a step that offers none) has
    no entropy: ``entropy=None``, ``entropy_source="absent"``, k = 0, and surprisal-only methods still score it.
    Alternatives are sorted most likely first, ``-inf`` ones (and those below ``-MAX_NATS``) dropped, and truncated
    to the smallest number offered at any step, so every step has the same k; ``top_tokens`` are their texts as the
    server gives them. Token ids are kept where the server gives them for every token and alternative (llama.cpp,
    TGI, vLLM ``prompt_logprobs``): ``token_ids`` and ``top_ids``, and whether the chosen token is among the
    alternatives is then decided by id; otherwise they are -1 and it is decided by the tokens' bytes.

    Which answer: a response holds one choice per sample asked for (``n``). A single choice is imported whatever its
    ``index``; of several, the one with ``index`` 0 (the first when the choices carry no index), and
    ``metadata.extra["n_choices"]`` records how many there were; several choices without exactly one of index 0 are
    refused. A message of a stream is refused (join the stream's messages into one response first): an OpenAI chunk
    (``"object": "chat.completion.chunk"``, or a choice with a ``delta`` instead of a ``message``), a llama.cpp
    message with ``"stop": false``, an Ollama NDJSON line with ``"done": false``, a TGI ``/generate_stream`` event.

    Bounds (the constants are in :mod:`trace_core.data.codec`, shared with the dataset's trace columns): a chosen
    token's log-probability below ``-MAX_NATS`` (-1000; servers write -9999 for -inf) is refused; an alternative's
    below ``-MAX_NATS``, ``-inf`` included, means "no probability" and is dropped like ``-inf``; a probability must
    be within 0 and 1; a step whose alternatives, plus the chosen token when it is not among them, add up to a
    probability above ``1 + TOP_K_MASS_TOLERANCE`` (0.01, for rounding) is refused; so is a response with a non-empty
    answer text and no tokens. Every message names the field and the step.

    Token texts come from each token's ``bytes`` when present (decoded incrementally as UTF-8, so a character split
    across tokens is carried by the token that completes it and the others are ""), else from its text (where the
    legacy OpenAI ``"bytes:\\xe6\\x97"`` and old llama.cpp ``"byte: \\xe6"`` forms are understood). The answer is the
    response's text when present, even if it differs from the joined tokens; otherwise the joined tokens.

    Parameters
    ----------
    response : Mapping
        The parsed JSON response.
    prompt : str
        Stored on the trace.
    model_id : str
        Stored in the metadata; defaults to ``response["model"]``.
    answer_tokens : int or None
        For a ``prompt_logprobs`` response: how many of the prompt's last tokens are the answer (required there).
        For the other layouts, when given, it must equal the number of the answer's tokens.

    Returns
    -------
    Trace
        ``source="imported"``, ``entropy_source`` ``"top_k"`` or ``"absent"``; ``metadata.extra`` holds ``api``
        (the layout's name), ``finish_reason`` when given and ``n_choices`` when there are several.

    Raises
    ------
    TypeError
        ``response`` is not a mapping, or ``prompt``/``model_id`` not a str.
    ValueError
        When the response matches no layout or several, lacks log-probabilities, is a message of a stream, or holds
        malformed or impossible values (the bounds above), or ``answer_tokens`` is missing, not an int >= 0 or does
        not fit; the message names the field.

    Examples
    --------
    >>> response = {"choices": [{"message": {"content": "Hi"}, "logprobs": {"content": [
    ...     {"token": "Hi", "logprob": -0.1, "top_logprobs": [{"token": "Hi", "logprob": -0.1}]}]}}]}
    >>> trace_from_openai(response).tokens
    ('Hi',)
    >>> ollama = {"model": "m", "response": "Hi", "done": True, "logprobs": [
    ...     {"token": "Hi", "logprob": -0.1, "top_logprobs": [{"token": "Hi", "logprob": -0.1}]}]}
    >>> trace_from_openai(ollama).metadata.extra["api"]
    'ollama_generate'
    """
    if not isinstance(response, Mapping):
        raise TypeError(f"`response` must be a mapping (the parsed JSON response), got {type(response).__name__}")
    for name, value in (("prompt", prompt), ("model_id", model_id)):
        if not isinstance(value, str):
            raise TypeError(f"`{name}` must be a str, got {type(value).__name__}")
    n_answer = _check_answer_tokens(answer_tokens)
    shapes = [s for s in RESPONSE_SHAPES if s.detect(response)]
    if not shapes:
        raise _unreadable(response)
    if len(shapes) > 1:
        raise _ambiguous(shapes)
    shape = shapes[0]
    parsed = shape.parse(response, answer_tokens=n_answer) if shape.scores_prompt else shape.parse(response)
    if not shape.scores_prompt and n_answer is not None and n_answer != len(parsed.steps):
        raise ValueError(f"answer_tokens is {n_answer} but the response's answer has {len(parsed.steps)} tokens "
                         f"({parsed.tokens_at})")
    model = model_id or (response.get("model") if isinstance(response.get("model"), str) else "")
    return _trace_from_steps(parsed, api=shape.api, prompt=prompt, model_id=model)  # type: ignore[arg-type]
