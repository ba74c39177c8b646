"""TGI ``/generate`` with ``details: true`` (and ``top_n_tokens: k``): ``details.tokens`` and ``details.top_tokens``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trace_core.checks import show
from trace_core.server_shapes.fields import field_of, is_list, list_at, object_at, streamed, string_at, token_id_at
from trace_core.server_shapes.steps import Offered, ParsedResponse, TokenStep
from trace_core.traces.logprobs import check_logprob

__all__ = ["detect_tgi", "hint_tgi", "parse_tgi"]

_TGI_TOKEN = "{id, text, logprob, special}"


def _tgi_token(item: object, where: str, *, chosen: bool) -> Offered:
    item = object_at(item, where)
    text = string_at(field_of(item, "text", where, _TGI_TOKEN), f"{where}.text")
    lp = check_logprob(field_of(item, "logprob", where, _TGI_TOKEN), f"{where}.logprob", chosen=chosen)
    return Offered(text, text.encode("utf-8"), lp, token_id_at(field_of(item, "id", where, _TGI_TOKEN), f"{where}.id"))


def parse_tgi(response: Mapping[str, Any]) -> ParsedResponse:
    """TGI ``/generate`` with ``details: true`` (and ``top_n_tokens: k``): ``details.tokens`` is a list of ``{id,
    text, logprob, special}`` and ``details.top_tokens`` one list of those per step; ``details.prefill`` (with
    ``decoder_input_details``) is the prompt, not the answer, and is not read. The answer is ``generated_text``."""
    if "token" in response:
        raise streamed("a streamed event of /generate_stream (it has a `token`)",
                       "join the stream's events into one response first, or ask /generate with details: true")
    details = response["details"]
    if details is None:
        raise ValueError("response `details` is null: ask TGI for details: true (and top_n_tokens: k)")
    details = object_at(details, "details")
    tokens = list_at(field_of(details, "tokens", "details", "{finish_reason, tokens, top_tokens}"), "details.tokens")
    tops = details.get("top_tokens")
    if tops is not None and (not is_list(tops) or len(tops) != len(tokens)):
        raise ValueError(f"details.top_tokens must be a list with one list per token ({len(tokens)}), "
                         f"got {show(tops)}")
    steps = []
    for i, token in enumerate(tokens):
        chosen = _tgi_token(token, f"details.tokens[{i}]", chosen=True)
        offered = None if tops is None else tuple(_tgi_token(alt, f"details.top_tokens[{i}][{j}]", chosen=False)
                                                  for j, alt in enumerate(list_at(tops[i], f"details.top_tokens[{i}]")))
        steps.append(TokenStep(chosen.text, chosen.raw, chosen.logprob, offered, chosen.token_id,
                               special=token.get("special") is True))
    extra = {"finish_reason": details["finish_reason"]} if isinstance(details.get("finish_reason"), str) else {}
    return ParsedResponse(steps=tuple(steps), text=response.get("generated_text"), extra=extra,
                          tokens_at="details.tokens", alternatives_at="details.top_tokens[{}]",
                          text_at="generated_text")


def detect_tgi(response: Mapping[str, Any]) -> bool:
    return "generated_text" in response and ("details" in response or "token" in response)


def hint_tgi(response: Mapping[str, Any]) -> str | None:
    if "generated_text" in response:
        return ("it looks like a TGI /generate response without `details`: ask with details: true (and "
                "top_n_tokens: k)")
    return None
