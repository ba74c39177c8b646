"""llama.cpp server ``/completion`` with ``n_probs``: ``completion_probabilities``, in the current layout (log-probs,
or the sampler's probabilities with ``post_sampling_probs``) and the older servers' (``{content, probs}``)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from trace_core.checks import show
from trace_core.server_shapes.fields import (
    check_prob,
    field_of,
    list_at,
    object_at,
    streamed,
    string_at,
    token_id_at,
    token_raw,
)
from trace_core.server_shapes.steps import Offered, ParsedResponse, TokenStep
from trace_core.traces.logprobs import check_logprob

__all__ = ["detect_llamacpp", "hint_llamacpp", "parse_llamacpp"]

_LLAMA_BYTE_TOKEN = re.compile(r"byte: \\x([0-9a-fA-F]{1,2})")
_LLAMA_ENTRY = "{id, token, bytes, logprob, top_logprobs} (llama.cpp /completion with n_probs)"
_LLAMA_POST_ENTRY = "{id, token, bytes, prob, top_probs} (llama.cpp /completion with post_sampling_probs)"
_LLAMA_LEGACY_ENTRY = "{content, probs: [{tok_str, prob}]} (llama.cpp /completion with n_probs, older servers)"


def _llama_legacy_bytes(token: str) -> bytes:
    # Old llama.cpp servers wrote a lone byte of a multi-byte character as "byte: \xe6".
    match = _LLAMA_BYTE_TOKEN.fullmatch(token)
    return bytes([int(match.group(1), 16)]) if match else token.encode("utf-8")


def _llama_token(item: Mapping[str, Any], where: str, *, post_sampling: bool, chosen: bool) -> Offered:
    """One token of the current layout, ``{id, token, bytes, logprob}`` (``prob`` with ``post_sampling_probs``)."""
    value, expected = ("prob", _LLAMA_POST_ENTRY) if post_sampling else ("logprob", _LLAMA_ENTRY)
    check = check_prob if post_sampling else check_logprob
    text = string_at(field_of(item, "token", where, expected), f"{where}.token")
    # whole, where `token` is cut to valid UTF-8
    raw = text.encode("utf-8") if item.get("bytes") is None else token_raw(text, item["bytes"], f"{where}.bytes")
    number = check(field_of(item, value, where, expected), f"{where}.{value}", chosen=chosen)
    token_id = token_id_at(field_of(item, "id", where, expected), f"{where}.id")
    return Offered(text, raw, number, token_id)


def _llama_step(entry: Mapping[str, Any], at: str, *, post_sampling: bool) -> TokenStep:
    """One step of the current layout: ``{id, token, bytes, logprob, top_logprobs: [{id, token, bytes,
    logprob}]}``, or with ``post_sampling_probs`` ``{..., prob, top_probs: [{..., prob}]}``."""
    chosen = _llama_token(entry, at, post_sampling=post_sampling, chosen=True)
    name = "top_probs" if post_sampling else "top_logprobs"
    listed = entry.get(name)
    offered = None if listed is None else tuple(
        _llama_token(object_at(alt, f"{at}.{name}[{j}]"), f"{at}.{name}[{j}]", post_sampling=post_sampling,
                     chosen=False)
        for j, alt in enumerate(list_at(listed, f"{at}.{name}")))
    return TokenStep(chosen.text, chosen.raw, chosen.logprob, offered, chosen.token_id)


def _llama_legacy_step(entry: Mapping[str, Any], at: str) -> TokenStep:
    """One step of the older servers' layout: ``{content, probs: [{tok_str, prob}]}``, with the chosen token known
    only by its text; its probability is that of the first alternative with the same text."""
    chosen = string_at(field_of(entry, "content", at, _LLAMA_LEGACY_ENTRY), f"{at}.content")
    alts = []
    for j, alt in enumerate(list_at(field_of(entry, "probs", at, _LLAMA_LEGACY_ENTRY), f"{at}.probs")):
        where = f"{at}.probs[{j}]"
        alt = object_at(alt, where)
        text = string_at(field_of(alt, "tok_str", where, "{tok_str, prob}"), f"{where}.tok_str")
        alts.append(Offered(text, _llama_legacy_bytes(text),
                            check_prob(field_of(alt, "prob", where, "{tok_str, prob}"), f"{where}.prob")))
    at_chosen = next((j for j, alt in enumerate(alts) if alt.text == chosen), None)
    if at_chosen is None:
        raise ValueError(f"{at}.content {show(chosen)} is not among {at}.probs, so its probability is unknown: ask "
                         "for a larger n_probs")
    lp = alts[at_chosen].logprob
    if lp == -math.inf:
        raise ValueError(f"{at}.probs[{at_chosen}].prob is 0; the chosen token needs a probability above 0")
    return TokenStep(chosen, _llama_legacy_bytes(chosen), lp, tuple(alts))


def _llama_form(entries: Sequence[Any]) -> str:
    """Which of llama.cpp's layouts the first step has: "logprob", "prob" (post-sampling) or "legacy"."""
    first = entries[0] if entries and isinstance(entries[0], Mapping) else {}
    if "probs" in first and "logprob" not in first:
        return "legacy"
    return "prob" if ("prob" in first or "top_probs" in first) and "logprob" not in first else "logprob"


def parse_llamacpp(response: Mapping[str, Any]) -> ParsedResponse:
    """llama.cpp ``/completion`` with ``n_probs``: ``completion_probabilities`` is a list of ``{id, token, bytes,
    logprob, top_logprobs: [{id, token, bytes, logprob}]}``; older servers wrote ``{content, probs: [{tok_str, prob}]}``
    (probabilities after sampling). The answer is ``content``."""
    if response.get("stop") is False:
        raise streamed("a streamed message (`stop` is false)",
                       "join the stream's messages into one response first, or ask with stream=false")
    entries = list_at(response["completion_probabilities"], "completion_probabilities")
    form = _llama_form(entries)
    steps = []
    for i, entry in enumerate(entries):
        at = f"completion_probabilities[{i}]"
        entry = object_at(entry, at)
        steps.append(_llama_legacy_step(entry, at) if form == "legacy"
                     else _llama_step(entry, at, post_sampling=form == "prob"))
    extra: dict[str, Any] = {}
    if isinstance(response.get("stop_type"), str):
        extra["finish_reason"] = response["stop_type"]
    if form != "logprob":  # the sampler's probabilities (after temperature, top-k, top-p), not the model's
        extra["post_sampling_probs"] = True
    alternatives = {"logprob": "top_logprobs", "prob": "top_probs", "legacy": "probs"}[form]
    return ParsedResponse(steps=tuple(steps), text=response.get("content"), extra=extra, text_at="content",
                          tokens_at="completion_probabilities",
                          alternatives_at=f"completion_probabilities[{{}}].{alternatives}")


def detect_llamacpp(response: Mapping[str, Any]) -> bool:
    return "completion_probabilities" in response and "choices" not in response


def hint_llamacpp(response: Mapping[str, Any]) -> str | None:
    if "content" in response and any(k in response for k in ("id_slot", "tokens_predicted", "generation_settings")):
        return ("it looks like a llama.cpp /completion response without `completion_probabilities`: ask with "
                "n_probs=k and stream=false")
    return None
