"""vLLM's ``prompt_logprobs``: an existing answer scored as the end of the prompt (``prompt_logprobs: k``,
``return_token_ids: true``); each position maps token ids to ``{logprob, rank, decoded_token}``.

:func:`prompt_logprob_step` reads one position, for the file importer and for scoring answers through a server;
:func:`parse_vllm_prompt` reads a whole saved response.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trace_core.checks import show
from trace_core.server_shapes.fields import MAX_TOKEN_ID, field_of, is_int, list_at, object_at, token_id_at
from trace_core.server_shapes.openai import answer_choice
from trace_core.server_shapes.steps import Offered, ParsedResponse, TokenStep
from trace_core.traces.logprobs import check_logprob

__all__ = ["detect_vllm_prompt", "parse_vllm_prompt", "prompt_logprob_step", "prompt_logprobs_at"]

_VLLM_ENTRY = "{logprob, rank, decoded_token}"


def prompt_logprobs_at(response: Mapping[str, Any]) -> tuple[Mapping[str, Any], str] | None:
    """The object holding the response's non-null ``prompt_logprobs`` and its path prefix: the response and ``""``
    (chat.completions), or the answer's choice and ``"choices[0]."`` (completions); None when it has none. Never
    raises."""
    if response.get("prompt_logprobs") is not None:
        return response, ""
    if isinstance(response.get("choices"), Sequence):
        try:
            position, choice = answer_choice(response)
        except ValueError:
            return None
        if choice.get("prompt_logprobs") is not None:
            return choice, f"choices[{position}]."
    return None


def _entry_id(key: object, at: str) -> int:
    """A position's key, a token id written as a string of digits."""
    if (not isinstance(key, str) or not (key.isascii() and key.isdigit()) or len(key) > 19
            or int(key) > MAX_TOKEN_ID):
        raise ValueError(f"{at} has the key {show(key)}; expected token ids as keys, {{token id: {_VLLM_ENTRY}}} "
                         "(vLLM's prompt_logprobs)")
    return int(key)


def _entry_value(value: object, where: str, *, chosen: bool) -> tuple[str | None, float, int | None]:
    """One ``{logprob, rank, decoded_token}`` as (text or None, log-prob, rank or None)."""
    value = object_at(value, where)
    text = value.get("decoded_token")
    if text is not None and not isinstance(text, str):
        raise ValueError(f"{where}.decoded_token must be a string or null, got {show(text)}")
    rank = value.get("rank")
    if rank is not None and (not is_int(rank) or rank < 1):
        raise ValueError(f"{where}.rank must be an int >= 1 or null, got {show(rank)}")
    return text, check_logprob(field_of(value, "logprob", where, _VLLM_ENTRY), f"{where}.logprob", chosen=chosen), rank


def prompt_logprob_step(entry: object, token_id: int, at: str) -> TokenStep:
    """One answer token: ``entry`` (named ``at`` in messages) maps token ids (as strings) to ``{logprob, rank,
    decoded_token}`` and holds the prompt's own token ``token_id``, the step's chosen token (with its rank). A null
    ``decoded_token`` reads as "" (a server without a tokenizer sends none).

    vLLM sends the top-k plus the prompt's token when that is not among them: the prompt's token counts as an
    alternative only when its rank is within the entry's size (it is then one of the most likely)."""
    entry = object_at(entry, at)
    values: dict[int, tuple[str, float, int | None]] = {}
    for key, value in entry.items():
        where = f"{at}[{key!r}]"
        listed = _entry_id(key, at)
        text, lp, rank = _entry_value(value, where, chosen=listed == token_id)
        values[listed] = (text or "", lp, rank)
    if token_id not in values:
        raise ValueError(f"{at} has no entry for the prompt's token {token_id}; expected it among the keys "
                         "(vLLM always includes it)")
    text, lp, rank = values[token_id]
    offered = tuple(Offered(t, t.encode("utf-8"), a, i) for i, (t, a, _) in values.items()
                    if i != token_id or rank is None or rank <= len(values))
    return TokenStep(text, text.encode("utf-8"), lp, offered, token_id, rank)


def _answer_tokens_needed(where: str) -> ValueError:
    return ValueError(f"response has {where}prompt_logprobs (an existing answer scored as the end of the prompt) "
                      "but where the answer starts is not known: give answer_tokens, the number of the prompt's "
                      "last tokens that are the answer")


def _aligned_lists(holder: Mapping[str, Any], base: str, answer_tokens: int) -> tuple[Sequence[Any], Sequence[Any]]:
    """``prompt_logprobs`` and ``prompt_token_ids``, of the same length, with room for ``answer_tokens``."""
    entries = list_at(holder["prompt_logprobs"], f"{base}prompt_logprobs")
    ids = holder.get("prompt_token_ids")
    if ids is None:
        raise ValueError(f"response has {base}prompt_logprobs but no {base}prompt_token_ids, so the prompt's own "
                         "token at each position is unknown: ask vLLM with return_token_ids: true")
    ids = list_at(ids, f"{base}prompt_token_ids")
    if len(ids) != len(entries):
        raise ValueError(f"{base}prompt_logprobs has {len(entries)} entries but {base}prompt_token_ids has "
                         f"{len(ids)}")
    if answer_tokens > len(entries) - 1:  # the first prompt token has no log-probability
        raise ValueError(f"answer_tokens is {answer_tokens} but only {max(len(entries) - 1, 0)} of the prompt's "
                         f"tokens have a log-probability ({base}prompt_logprobs has {len(entries)} entries, the "
                         "first null)")
    return entries, ids


def _answer_step(entry: object, token_id: int, at: str) -> TokenStep:
    """:func:`prompt_logprob_step`, with the token's text required: the answer is read from the tokens' texts."""
    step = prompt_logprob_step(entry, token_id, at)
    text = entry[str(token_id)].get("decoded_token")  # type: ignore[index]
    if not isinstance(text, str):
        raise ValueError(f"{at}[{str(token_id)!r}].decoded_token must be a string (the token's text), got "
                         f"{show(text)}")
    return step


def parse_vllm_prompt(response: Mapping[str, Any], *, answer_tokens: int | None) -> ParsedResponse:
    """vLLM ``prompt_logprobs``: a list aligned with ``prompt_token_ids`` (the first entry null), each entry
    ``{"<token id>": {logprob, rank, decoded_token}}`` holding the prompt's token; the answer is the last
    ``answer_tokens`` of them. In a completions response both lists are in ``choices[0]``, in a chat.completions
    response at the top level (vLLM sends ``prompt_token_ids`` with ``return_token_ids: true``)."""
    holder, base = prompt_logprobs_at(response) or (response, "")
    if answer_tokens is None:
        raise _answer_tokens_needed(base)
    entries, ids = _aligned_lists(holder, base, answer_tokens)
    start = len(entries) - answer_tokens
    steps = tuple(_answer_step(entries[pos], token_id_at(ids[pos], f"{base}prompt_token_ids[{pos}]"),
                               f"{base}prompt_logprobs[{pos}]")
                  for pos in range(start, len(entries)))
    return ParsedResponse(steps=steps, text=None, extra={"answer_start": start},
                          tokens_at=f"{base}prompt_logprobs[{start}:]", alternatives_at=f"{base}prompt_logprobs[{{}}]",
                          step_offset=start, ranked=True)


def detect_vllm_prompt(response: Mapping[str, Any]) -> bool:
    return prompt_logprobs_at(response) is not None
