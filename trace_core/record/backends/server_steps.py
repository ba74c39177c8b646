"""A model server's answers read into per-token steps, and a whole answer's steps into recorded arrays.

Each answer's log-probabilities are parsed by the shape parsers the file importer uses (:mod:`trace_core.server_shapes`:
chat ``logprobs.content``, completions ``logprobs``, vLLM ``prompt_logprobs``), so a server's numbers are checked by
the same rules (:func:`~trace_core.traces.logprobs.check_logprob`). Here the tokens, written ``"token_id:N"``, become
ids below V, each step's alternatives a table ``{id: log-prob}`` held to the importer's mass rule
(:func:`~trace_core.traces.logprobs.too_much_mass`), and an answer's steps a :class:`~.base.RecordedAnswer`: exact
entropy and ranks with the full distribution, else the top-k estimate with each token's lower and upper bounds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from trace_core.checks import clip, shorten
from trace_core.record.backends.base import RecordedAnswer
from trace_core.record.http_policy import ServerError
from trace_core.record.remote import ServerModel
from trace_core.server_shapes import TokenStep
from trace_core.server_shapes.agreement import unique_offers
from trace_core.server_shapes.openai import content_steps, parse_completion_logprobs
from trace_core.server_shapes.vllm import prompt_logprob_step
from trace_core.traces.logprobs import entropy_from_top_k, too_much_mass, top_k_entropy_bounds

__all__ = ["ServerStep", "answer_arrays", "chat_rows", "choice_of", "completion_rows", "prompt_rows", "readable",
           "shown"]

_T = TypeVar("_T")
_TOKEN_ID = re.compile(r"(?:token_id:)?(\d+)")
# A full distribution's probabilities must add up to 1 within this (float32 rounding over the vocabulary).
_FULL_MASS_TOLERANCE = 1e-3
_NO_COMPLETION_LOGPROBS = ("the server's completion has no log-probabilities (`logprobs`); is it an "
                           "OpenAI-compatible completions endpoint?")
_NO_CHAT_LOGPROBS = ("the server's chat completion has no log-probabilities (`logprobs.content`); is it an "
                     "OpenAI-compatible chat endpoint that gives log-probabilities?")


@dataclass
class ServerStep:
    """One answer token's numbers from the server: every (id, log-prob) it gave, most likely first."""

    ids: np.ndarray
    lps: np.ndarray
    chosen: int
    chosen_lp: float
    server_rank: int | None

    @classmethod
    def of(cls, table: dict[int, float], chosen: int, chosen_lp: float, server_rank: int | None) -> ServerStep:
        """The step, after the importer's rule on its mass: the alternatives (with the chosen token when it is not
        among them) hold at most ``1 + TOP_K_MASS_TOLERANCE`` of probability."""
        ids = np.fromiter(table.keys(), dtype=np.int64, count=len(table))
        lps = np.fromiter(table.values(), dtype=np.float64, count=len(table))
        outside = None if chosen in table else math.exp(chosen_lp)
        problem = too_much_mass(float(np.exp(lps).sum()) + (outside or 0.0), outside)
        if problem:
            raise ServerError(f"the server's log-probabilities for one answer token {problem}")
        order = np.lexsort((ids, -lps))  # most likely first; equal log-probs by id, so the order is reproducible
        return cls(ids=ids[order], lps=lps[order], chosen=int(chosen), chosen_lp=float(chosen_lp),
                   server_rank=server_rank)

    def rank_exact(self) -> int:
        """1 + the number of listed tokens more likely than the chosen one (the recorder's rule)."""
        return int(np.count_nonzero(self.lps > self.chosen_lp)) + 1

    def check_full(self, vocab_size: int, t: int) -> None:
        mass = float(np.exp(self.lps).sum())
        if len(self.ids) < vocab_size or abs(mass - 1.0) > _FULL_MASS_TOLERANCE:
            raise ServerError(f"the server gave {len(self.ids):,} log-probabilities for token {t} (probability "
                              f"{mass:.4f}), not the full distribution over {vocab_size:,} tokens; start vLLM with "
                              "--max-logprobs -1, or connect with full_distribution=False")

    def entropy(self) -> float:
        p = np.exp(self.lps)
        return float(-np.sum(np.where(p > 0, p * self.lps, 0.0)))


# ----------------------------------------------------------------------------------------------------------------
# Reading answers


def readable(parse: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``parse(*args, **kwargs)``, with what a hostile answer can still provoke in Python (a value too large for a
    float or an int64, nesting too deep to print) turned into one ServerError line."""
    try:
        return parse(*args, **kwargs)
    except OverflowError:
        raise ServerError("the server's answer holds a number too large to be a log-probability, token id or "
                          "rank") from None
    except RecursionError:
        raise ServerError("the server's answer nests JSON objects or lists too deeply to read") from None


def _shaped(parse: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """A shape parser's result; the field it refuses is named in a ServerError."""
    try:
        return parse(*args, **kwargs)
    except ValueError as exc:
        raise ServerError(str(exc)) from None


def choice_of(response: Any) -> dict[str, Any]:
    """``choices[0]`` of an answer."""
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ServerError("the server's answer has no `choices`; is it an OpenAI-compatible server?")
    return choices[0]


def _token_id(value: Any, where: str, vocab_size: int) -> int:
    """The id in ``"token_id:123"`` (vLLM's ``return_tokens_as_token_ids``) or ``"123"``, which must index the
    vocabulary (below V)."""
    match = _TOKEN_ID.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ServerError(f"the server's {where} holds {shown(value)} where a token id (\"token_id:N\") was "
                          "expected; the server must support return_tokens_as_token_ids (vLLM does)")
    digits = match.group(1)
    if len(digits) > 12 or int(digits) >= vocab_size:  # never int() of thousands of digits
        raise _beyond_vocabulary(digits, where, vocab_size)
    return int(digits)


def _beyond_vocabulary(digits: str, where: str, vocab_size: int) -> ServerError:
    return ServerError(f"the server's {where} holds the token id {clip(digits, 40)}, at least V = {vocab_size:,} "
                       "(the vocabulary of the local tokenizer's model): is the server running another model?")


def completion_rows(choice: dict[str, Any], offset: int, vocab_size: int) -> tuple[list[int], list[ServerStep]]:
    """The tokens of a completion's ``logprobs`` (a whole answer's, or a streamed chunk's whose first token is
    answer token ``offset``); a chunk without ``logprobs`` adds none."""
    logprobs = choice.get("logprobs")
    if logprobs is None and not choice.get("text") and not choice.get("token_ids"):
        return [], []  # a streamed chunk without tokens (one that only says why the answer ended)
    if not isinstance(logprobs, dict):
        raise ServerError(_NO_COMPLETION_LOGPROBS)
    tokens, chosen_lp, steps = (logprobs.get(name) for name in ("tokens", "token_logprobs", "top_logprobs"))
    if not (isinstance(tokens, list) and isinstance(chosen_lp, list) and isinstance(steps, list)
            and len(tokens) == len(chosen_lp) == len(steps)):
        raise ServerError("the server's `logprobs` lack aligned `tokens`, `token_logprobs` and `top_logprobs`")
    read = _shaped(parse_completion_logprobs, logprobs, "the server's logprobs", start=offset)
    ids = [_token_id(step.text, f"logprobs.tokens[{t}]", vocab_size) for t, step in enumerate(read, start=offset)]
    rows = []
    for t, (token, step) in enumerate(zip(ids, read, strict=True), start=offset):
        if step.alternatives is None:
            raise ServerError(f"the server gave no alternatives for answer token {t} (`top_logprobs`)")
        table = _table(step, token, vocab_size, at=f"top_logprobs[{t}]", ids_at=f"top_logprobs[{t}]")
        rows.append(ServerStep.of(table, token, step.logprob, None))
    return ids, rows


def _table(step: TokenStep, token: int, vocab_size: int, *, at: str, ids_at: str,
           with_chosen: bool = False) -> dict[int, float]:
    """A step's alternatives (``at`` in messages, their ids ``ids_at``) as ``{id: log-prob}``; ``with_chosen``: with
    the chosen token's (``token``) own when it is not among them. An id listed twice with one log-probability is kept
    once; twice with two (``"token_id:5"`` and ``"token_id:05"``), or the chosen token listed with another
    log-probability than its own, is refused (:func:`~trace_core.server_shapes.agreement.unique_offers`), as the
    file importer refuses it."""
    offered = step.offered
    keys = [_token_id(alt.text, ids_at, vocab_size) for alt in offered]
    lps = [alt.logprob for alt in offered]
    try:
        unique_offers(keys, lps, token, step.logprob, where=f"the server's {at}",
                      name=lambda j: f"the token id {keys[j]}")
    except ValueError as exc:
        raise ServerError(str(exc)) from None
    table: dict[int, float] = {}
    for key, lp in zip(keys, lps, strict=True):
        table.setdefault(key, lp)
    if with_chosen:
        table.setdefault(token, step.logprob)
    return table


def chat_rows(choice: dict[str, Any], offset: int, vocab_size: int) -> tuple[list[int], list[ServerStep]]:
    """The tokens of a chat completion's ``logprobs.content`` (a whole answer's, or a streamed chunk's whose first
    token is answer token ``offset``; a chunk without log-probabilities, the first one with the role, adds none)."""
    logprobs = choice.get("logprobs")
    delta = choice.get("delta")
    if logprobs is None and isinstance(delta, dict) and not delta.get("content") and not choice.get("token_ids"):
        return [], []  # a streamed chunk without tokens (the first, with the role; one that only ends it)
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        raise ServerError(_NO_CHAT_LOGPROBS)
    ids, rows = [], []
    for t, step in enumerate(_shaped(content_steps, content, "the server's logprobs.content", start=offset),
                             start=offset):
        if step.alternatives is None:
            raise ServerError(f"the server gave no alternatives for answer token {t} (`top_logprobs`)")
        at = f"logprobs.content[{t}]"
        token = _token_id(step.text, f"{at}.token", vocab_size)
        ids.append(token)
        table = _table(step, token, vocab_size, at=f"{at}.top_logprobs", ids_at=f"{at}.top_logprobs.token",
                       with_chosen=True)
        rows.append(ServerStep.of(table, token, step.logprob, None))
    return ids, rows


def has_chat_logprobs(choice: dict[str, Any]) -> None:
    """ServerError unless a whole chat completion's choice has ``logprobs.content``."""
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs.get("content") if isinstance(logprobs, dict) else None, list):
        raise ServerError(_NO_CHAT_LOGPROBS)


def has_completion_logprobs(choice: dict[str, Any]) -> None:
    """ServerError unless a whole completion's choice has ``logprobs``."""
    if not isinstance(choice.get("logprobs"), dict):
        raise ServerError(_NO_COMPLETION_LOGPROBS)


def prompt_rows(entries: Sequence[Any], n_prompt: int, answer: Sequence[int], vocab_size: int) -> list[ServerStep]:
    """The answer's tokens in ``prompt_logprobs`` (one entry per token sent, the answer's after the prompt's
    ``n_prompt``), taken by position; the server's rank of each answer token is kept."""
    rows = []
    for t, token in enumerate(answer):
        at = f"prompt_logprobs[{n_prompt + t}]"
        entry = entries[n_prompt + t]  # by position: the entry of answer token t
        if not isinstance(entry, dict):
            raise ServerError(f"the server's `prompt_logprobs` has no entry for answer token {t}")
        if str(token) not in entry:
            raise ServerError(f"the server's `prompt_logprobs` for answer token {t} lack that token ({token})")
        step = _shaped(prompt_logprob_step, entry, token, f"the server's {at}")
        table: dict[int, float] = {}
        for alt in step.offered:
            if alt.token_id is None or alt.token_id >= vocab_size:
                raise _beyond_vocabulary(str(alt.token_id), at, vocab_size)
            table[alt.token_id] = alt.logprob
        table.setdefault(token, step.logprob)
        if step.rank is not None and step.rank > vocab_size:
            raise ServerError(f"the server's {at}[{str(token)!r}].rank is {shown(step.rank)}; a rank is from 1 to "
                              f"V = {vocab_size:,}")
        rows.append(ServerStep.of(table, token, step.logprob, step.rank))
    return rows


def shown(value: Any) -> str:
    return shorten(value, 80)


# ----------------------------------------------------------------------------------------------------------------
# Steps -> arrays


def answer_arrays(sm: ServerModel, ids: list[int], rows: list[ServerStep], *, keep: int, ask: int,
                  finish_reason: str | None, generated: bool,
                  more: Mapping[str, Any] | None = None) -> RecordedAnswer:
    """The recorded arrays of an answer's steps: ``keep`` alternatives stored per token, ``ask`` log-probabilities
    asked for each; ``extra`` says where the answer came from and, with top-k entropy, each token's bounds."""
    extra: dict[str, Any] = {"api": "completions", "base_url": sm.base_url,
                             "logprobs_mode": "raw (server default)", **(more or {})}
    if sm.full_distribution:
        return _exact_arrays(sm, ids, rows, keep=keep, finish_reason=finish_reason, extra=extra)
    return _top_k_arrays(sm, ids, rows, keep=keep, ask=ask, finish_reason=finish_reason, generated=generated,
                         extra=extra)


def _exact_arrays(sm: ServerModel, ids: list[int], rows: list[ServerStep], *, keep: int, finish_reason: str | None,
                  extra: dict[str, Any]) -> RecordedAnswer:
    """Every log-probability was given: exact entropy and ranks."""
    n = len(rows)
    top_ids, top_lp = np.zeros((n, keep), dtype=np.int64), np.zeros((n, keep), dtype=np.float64)
    ranks, chosen, entropy = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.float64), np.zeros(n)
    for t, row in enumerate(rows):
        row.check_full(sm.vocab_size, t)
        top_ids[t], top_lp[t] = row.ids[:keep], row.lps[:keep]
        ranks[t], chosen[t] = row.rank_exact(), row.chosen_lp
        entropy[t] = row.entropy()
    return RecordedAnswer(token_ids=np.asarray(ids, dtype=np.int64), chosen_logprobs=chosen, entropy=entropy,
                          top_logprobs=top_lp, top_ids=top_ids, ranks=ranks, finish_reason=finish_reason,
                          entropy_source="exact", extra=extra)


def _top_k_arrays(sm: ServerModel, ids: list[int], rows: list[ServerStep], *, keep: int, ask: int,
                  finish_reason: str | None, generated: bool, extra: dict[str, Any]) -> RecordedAnswer:
    """The top ``ask`` were given: entropy estimated from them, with each token's lower and upper bounds; a token
    outside them gets rank ``ask + 1`` (in generation ``extra["ranks_capped_at"]`` says so)."""
    n = len(rows)
    top_ids, top_lp = np.zeros((n, keep), dtype=np.int64), np.zeros((n, keep), dtype=np.float64)
    ranks, chosen = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.float64)
    top_all = np.zeros((n, ask), dtype=np.float64)
    capped = False
    for t, row in enumerate(rows):
        if len(row.ids) < min(ask, sm.vocab_size):
            raise ServerError(f"the server gave {len(row.ids)} log-probabilities for token {t} where {ask} were "
                              f"asked; connect with top_logprobs <= {len(row.ids)}, or raise the server's cap")
        top_ids[t], top_lp[t], top_all[t] = row.ids[:keep], row.lps[:keep], row.lps[:ask]
        chosen[t] = row.chosen_lp
        if row.server_rank is not None:  # teacher forcing on vLLM: the rank in the whole distribution
            ranks[t] = row.server_rank
        elif row.chosen in row.ids[:ask]:
            ranks[t] = row.rank_exact()
        else:  # outside the top k: at least k + 1
            ranks[t], capped = ask + 1, True
    if capped and generated:
        extra["ranks_capped_at"] = ask + 1
    lower, upper = top_k_entropy_bounds(np.minimum(top_all, 0.0), sm.vocab_size)
    extra["entropy_lower"] = [float(v) for v in lower]
    extra["entropy_upper"] = [float(v) for v in upper]
    return RecordedAnswer(token_ids=np.asarray(ids, dtype=np.int64), chosen_logprobs=chosen,
                          entropy=entropy_from_top_k(np.minimum(top_all, 0.0)), top_logprobs=top_lp,
                          top_ids=top_ids, ranks=ranks, finish_reason=finish_reason, entropy_source="top_k",
                          entropy_k=ask, extra=extra)
