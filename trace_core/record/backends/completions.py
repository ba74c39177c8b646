"""The model-server backend: a :class:`~trace_core.record.remote.ServerModel` behind the OpenAI-compatible API.

* Generation: one ``POST /v1/completions`` per prompt with the prompt's token ids, ``logprobs`` and
  ``return_tokens_as_token_ids`` (alternatives are keyed ``"token_id:N"``, so two tokens with the same text never
  merge). vLLM returns the end-of-answer token at the end of an answer that stopped on it: it is dropped, as the local
  recorder stops before it.
* Generation with ``api="chat"``: one ``POST /v1/chat/completions`` per prompt with the prompt's text as one user
  message (the server applies its chat template), ``logprobs: true``, ``top_logprobs`` and
  ``return_tokens_as_token_ids``; ``choices[0].logprobs.content`` gives the same arrays. vLLM's chat endpoint keeps the
  first ``top_logprobs`` entries of a step, the sampled token first, so a sampled token outside the top k would push
  the k-th out: when the chosen token can fall outside the top k (sampling, a repetition penalty) k + 1 are asked
  and k kept. ``top_logprobs: -1`` is the full distribution there. The trace's ``prompt_tokens`` is the server's
  count (``usage.prompt_tokens``).
* Teacher forcing (whatever ``api`` says): one ``POST /v1/completions`` per answer with prompt + answer ids,
  ``max_tokens=1`` and ``prompt_logprobs``; the answer's entries are taken by token position. The echoed prompt ids
  must equal those sent.

What is exact: token ids (the local tokenizer), the chosen tokens' log-probabilities, the alternatives. The entropy is
exact with ``full_distribution=True``; otherwise it is estimated from the top k
(:func:`~trace_core.logprobs.entropy_from_top_k`, ``entropy_source="top_k"``) and each token's lower and upper
bounds (:func:`~trace_core.logprobs.top_k_entropy_bounds`) go to ``metadata.extra["entropy_lower"]`` and
``["entropy_upper"]``. Ranks are exact with the full distribution and when teacher forcing (vLLM gives the answer
token's rank); in top-k generation a token outside the top k gets rank k + 1, and ``extra["ranks_capped_at"]``
says so. The log-probabilities are the server's: vLLM's default ``--logprobs-mode`` is the raw distribution (before
penalties and sampling warpers), recorded as ``extra["logprobs_mode"] = "raw (server default)"``.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._checks import clip, shorten
from ...logprobs import check_logprob, entropy_from_top_k, too_much_mass, top_k_entropy_bounds
from ...trace import DecodingConfig
from ..http_policy import RefusedError, ServerError, response_limit
from ..remote import ServerModel
from .base import RecordedAnswer

__all__ = ["ServerBackend"]

_CAPPED = re.compile(r"requested (sample|prompt) logprobs of (-?\d+), which is greater than max allowed: (-?\d+)",
                     re.IGNORECASE)
_TOKEN_ID = re.compile(r"(?:token_id:)?(\d+)")
# A full distribution's probabilities must add up to 1 within this (float32 rounding over the vocabulary).
_FULL_MASS_TOLERANCE = 1e-3
#: Bytes allowed per streamed event besides its tokens' (each chunk repeats the answer's id, model and fields).
STREAM_BYTES_PER_EVENT = 2048
_CANNOT_SCORE = ("this server cannot score existing answers (no prompt log-probabilities); generate with it, or score "
                 "with a local copy of the model (`load_model`) or a vLLM server")


class ServerBackend:
    """:class:`~trace_core.record.backends.base.Backend` for a :class:`ServerModel`; holds no state of its own."""

    def __init__(self, sm: ServerModel) -> None:
        self.sm = sm
        self.model_id = sm.model_id
        self.tokenizer = sm.tokenizer

    @property
    def vocab_size(self) -> int:
        return self.sm.vocab_size

    def context_length(self) -> int | None:
        return self.sm.context_length

    def check_generate_options(self, options: Mapping[str, Any]) -> None:
        if options:
            names = ", ".join(f"`{k}`" for k in sorted(map(str, options)))
            raise ValueError(f"a model server takes no extra generate options (got {names[:200]}); set decoding "
                             "through DecodingConfig")

    # ------------------------------------------------------------------------------------------------------------
    # Generation

    @property
    def applies_chat_template(self) -> bool:
        """True with ``api="chat"``: the server wraps each prompt in its own chat template."""
        return self.sm.api == "chat"

    def generate(self, prompt_ids: Sequence[list[int]], config: DecodingConfig, options: Mapping[str, Any], *,
                 seed_offset: int, prompts: Sequence[str] | None = None) -> list[RecordedAnswer]:
        sm = self.sm
        chat = sm.api == "chat"
        if chat and (prompts is None or len(prompts) != len(prompt_ids)):
            raise ValueError("generating through the chat endpoint needs the prompts' text (`prompts`), one per "
                             "prompt")
        keep, ask, spare = self._widths(config)
        texts: Sequence[str] = prompts if chat and prompts is not None else ()

        def one(item: tuple[int, list[int]]) -> RecordedAnswer:
            index, ids = item
            request = self._generation_request(config, ids, texts[index] if chat else None, spare=spare,
                                               seed=None if config.seed is None else config.seed + seed_offset + index)
            response = self._post(request, scoring=False, spare=spare)
            if chat:
                return _readable(self._chatted, response, keep=keep, ask=ask)
            return _readable(self._generated, response, keep=keep, ask=ask)

        return sm.map(one, list(enumerate(prompt_ids)))

    def stream(self, prompt_ids: list[int], config: DecodingConfig, options: Mapping[str, Any], *,  # noqa: C901 (the streaming loop: stop, timeout and finish in one place)
               stop: threading.Event, min_interval: float = 0.0,
               prompt: str | None = None) -> Iterator[RecordedAnswer]:
        """One answer as the server streams it (``"stream": true``): the answer so far after each chunk that adds
        tokens (``finish_reason="stopped"``; at most one per ``min_interval`` seconds, the tokens of the chunks
        between coming with the next), then the answer :meth:`generate` records for the same request.

        Each chunk's log-probabilities are read by the rules of the whole answer's (:meth:`_completion_rows`,
        :meth:`_chat_rows`); the stream's size is capped by what was asked plus each chunk's envelope, and so is
        each line. A server that answers with one JSON body gives that answer once. Once ``stop`` is set, the
        answer so far is the last one (``finish_reason="stopped"``) and the connection is closed; closing the
        iterator closes it too.
        """
        sm = self.sm
        chat = sm.api == "chat"
        if chat and prompt is None:
            raise ValueError("generating through the chat endpoint needs the prompt's text (`prompt`)")
        keep, ask, spare = self._widths(config)
        request = self._generation_request(config, prompt_ids, prompt, spare=spare, seed=config.seed)
        request["stream"] = True
        if chat:  # the final chunk then carries usage.prompt_tokens, the server's count of the templated prompt
            request["stream_options"] = {"include_usage": True}
        whole = self._response_limit(request)
        tokens = request["max_completion_tokens" if chat else "max_tokens"]
        events = sm.stream("/v1/chat/completions" if chat else "/v1/completions", request,
                           max_bytes=whole + STREAM_BYTES_PER_EVENT * (tokens + 8), max_line_bytes=whole)
        ids: list[int] = []
        rows: list[_Step] = []
        finish: dict[str, Any] | None = None
        usage: Any = None
        parse = self._chat_rows if chat else self._completion_rows

        def answer(finish_reason: str | None, held: list[int], steps: list[_Step]) -> RecordedAnswer:
            more: dict[str, Any] = {"api": "chat"} if chat else {}
            counted = usage.get("prompt_tokens") if isinstance(usage, dict) else None
            if chat and isinstance(counted, int) and not isinstance(counted, bool) and counted > 0:
                more["prompt_tokens"] = counted
            return self._answer(held, steps, keep=keep, ask=ask, finish_reason=finish_reason, generated=True,
                                more=more)

        def so_far() -> RecordedAnswer:
            end = len(ids) - int(bool(ids) and ids[-1] in sm.eos_token_ids)  # an end token is not part of it
            return answer("stopped", ids[:end], rows[:end])

        last, pending = -math.inf, False
        try:
            for kind, payload in events:
                if kind == "whole":  # the server did not stream: its one answer
                    yield _readable(self._chatted if chat else self._generated, payload, keep=keep, ask=ask)
                    return
                if finish is not None and payload.get("choices"):
                    raise ServerError("the server's stream went on after the answer's finish_reason")
                if payload.get("usage") is not None:
                    usage = payload["usage"]
                choices = payload.get("choices")
                if choices is None or choices == []:  # the usage chunk (stream_options.include_usage)
                    continue
                choice = _choice(payload)
                more_ids, more_rows = _readable(parse, choice, len(ids))
                ids.extend(more_ids)
                rows.extend(more_rows)
                if len(ids) > tokens:
                    raise ServerError(f"the server's stream holds more than the {tokens:,} tokens asked for; is it "
                                      "sending something else?")
                if choice.get("finish_reason") is not None:
                    finish = choice
                    continue
                pending = pending or bool(more_ids)
                if pending and (stop.is_set() or time.monotonic() - last >= min_interval):
                    yield so_far()
                    last, pending = time.monotonic(), False
                    if stop.is_set():  # the answer so far is the last one
                        return
            if finish is None:
                raise ServerError(f"the server's stream ended after {len(ids):,} tokens without a finish_reason; "
                                  "the answer is incomplete (did the server or a proxy cut it?)")
            held, steps, finish_reason = self._finished(finish, ids, rows)
            yield answer(finish_reason, held, steps)
        except RefusedError as exc:
            raise self._explained(exc, scoring=False, spare=spare) from None
        finally:
            events.close()

    def _widths(self, config: DecodingConfig) -> tuple[int, int, int]:
        """(alternatives kept, log-probabilities asked, one spare asked through chat when sampling)."""
        sm = self.sm
        keep, ask = _widths(sm, config.n_alternatives)
        # vLLM's chat endpoint keeps the first top_logprobs entries of a step and the sampled token comes first:
        # when it can be outside the top k, one more is asked so that the top k are all there.
        spare = int(sm.api == "chat" and not sm.full_distribution and ask < sm.vocab_size
                    and (config.do_sample or config.repetition_penalty != 1.0))
        return keep, ask, spare

    def _generation_request(self, config: DecodingConfig, ids: Sequence[int], prompt: str | None, *, spare: int,
                            seed: int | None) -> dict[str, Any]:
        """The body asking for one answer: ``prompt`` as one user message through chat, else the ids."""
        sm = self.sm
        keep, ask = _widths(sm, config.n_alternatives)
        body: dict[str, Any] = {
            "model": sm.model, "max_tokens": config.max_new_tokens, "n": 1, "stream": False,
            "return_tokens_as_token_ids": True, "skip_special_tokens": False,
            # Sent even at 1.0: otherwise vLLM applies the model's generation_config defaults.
            "repetition_penalty": config.repetition_penalty,
        }
        if sm.api == "chat":
            # -1 is every log-probability there (the server needs --max-logprobs -1).
            body.update(max_completion_tokens=config.max_new_tokens, logprobs=True,
                        top_logprobs=-1 if sm.full_distribution else ask + spare)
        else:
            # vLLM's completions endpoint keeps the first logprobs + 1 entries of each step, so -1 would keep none:
            # the full distribution is asked for as V entries (the server needs --max-logprobs -1).
            body["logprobs"] = sm.vocab_size if sm.full_distribution else ask
        if config.do_sample:
            body.update(temperature=config.temperature, top_p=config.top_p,
                        top_k=config.top_k if config.top_k > 0 else -1)
        else:
            body["temperature"] = 0.0
        if sm.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = list(ids)
        if seed is not None:  # each prompt draws reproducibly, whatever the batching
            body["seed"] = seed % 2**63
        return body

    def _generated(self, response: Any, *, keep: int, ask: int) -> RecordedAnswer:
        choice = _choice(response)
        if not isinstance(choice.get("logprobs"), dict):
            raise ServerError("the server's completion has no log-probabilities (`logprobs`); is it an "
                              "OpenAI-compatible completions endpoint?")
        ids, rows = self._completion_rows(choice, 0)
        ids, rows, finish_reason = self._finished(choice, ids, rows)
        return self._answer(ids, rows, keep=keep, ask=ask, finish_reason=finish_reason, generated=True)

    def _completion_rows(self, choice: dict[str, Any], offset: int) -> tuple[list[int], list[_Step]]:
        """The tokens of a completion's ``logprobs`` (a whole answer's, or a streamed chunk's whose first token is
        answer token ``offset``); a chunk without ``logprobs`` adds none."""
        logprobs = choice.get("logprobs")
        if logprobs is None and not choice.get("text") and not choice.get("token_ids"):
            return [], []  # a streamed chunk without tokens (one that only says why the answer ended)
        if not isinstance(logprobs, dict):
            raise ServerError("the server's completion has no log-probabilities (`logprobs`); is it an "
                              "OpenAI-compatible completions endpoint?")
        tokens, chosen_lp, steps = (logprobs.get(name) for name in ("tokens", "token_logprobs", "top_logprobs"))
        if not (isinstance(tokens, list) and isinstance(chosen_lp, list) and isinstance(steps, list)
                and len(tokens) == len(chosen_lp) == len(steps)):
            raise ServerError("the server's `logprobs` lack aligned `tokens`, `token_logprobs` and `top_logprobs`")
        vocab = self.sm.vocab_size
        ids = [_token_id(t, f"logprobs.tokens[{offset + i}]", vocab) for i, t in enumerate(tokens)]
        rows = []
        for t, (token, lp, alternatives) in enumerate(zip(ids, chosen_lp, steps), start=offset):
            if not isinstance(alternatives, dict):
                raise ServerError(f"the server gave no alternatives for answer token {t} (`top_logprobs`)")
            table = {_token_id(key, f"top_logprobs[{t}]", vocab): _logprob(value, f"top_logprobs[{t}]")
                     for key, value in alternatives.items()}
            rows.append(_Step.of(table, token, _logprob(lp, f"token_logprobs[{t}]", chosen=True), None))
        return ids, rows

    def _chatted(self, response: Any, *, keep: int, ask: int) -> RecordedAnswer:
        """The arrays of a chat completion: ``choices[0].logprobs.content``, one entry per answer token."""
        choice = _choice(response)
        logprobs = choice.get("logprobs")
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        if not isinstance(content, list):
            raise ServerError("the server's chat completion has no log-probabilities (`logprobs.content`); is it an "
                              "OpenAI-compatible chat endpoint that gives log-probabilities?")
        ids, rows = self._chat_rows(choice, 0)
        ids, rows, finish_reason = self._finished(choice, ids, rows)
        more: dict[str, Any] = {"api": "chat"}
        usage = response.get("usage")
        counted = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if isinstance(counted, int) and not isinstance(counted, bool) and counted > 0:
            more["prompt_tokens"] = counted  # the server's count (its chat template), not the local estimate
        return self._answer(ids, rows, keep=keep, ask=ask, finish_reason=finish_reason, generated=True, more=more)

    def _chat_rows(self, choice: dict[str, Any], offset: int) -> tuple[list[int], list[_Step]]:
        """The tokens of a chat completion's ``logprobs.content`` (a whole answer's, or a streamed chunk's whose
        first token is answer token ``offset``; a chunk without log-probabilities, the first one with the role,
        adds none)."""
        logprobs = choice.get("logprobs")
        delta = choice.get("delta")
        if logprobs is None and isinstance(delta, dict) and not delta.get("content") and not choice.get("token_ids"):
            return [], []  # a streamed chunk without tokens (the first, with the role; one that only ends it)
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        if not isinstance(content, list):
            raise ServerError("the server's chat completion has no log-probabilities (`logprobs.content`); is it an "
                              "OpenAI-compatible chat endpoint that gives log-probabilities?")
        ids, rows = [], []
        for t, entry in enumerate(content, start=offset):
            alternatives = entry.get("top_logprobs") if isinstance(entry, dict) else None
            if not isinstance(alternatives, list):
                raise ServerError(f"the server gave no alternatives for answer token {t} (`top_logprobs`)")
            at = f"logprobs.content[{t}]"
            token = _token_id(entry.get("token"), f"{at}.token", self.sm.vocab_size)
            lp = _logprob(entry.get("logprob"), f"{at}.logprob", chosen=True)
            table: dict[int, float] = {}
            for alternative in alternatives:
                if not isinstance(alternative, dict):
                    raise ServerError(f"the server's `top_logprobs` for answer token {t} hold "
                                      f"{_shown(alternative)} where {{token, logprob}} was expected")
                table.setdefault(_token_id(alternative.get("token"), f"{at}.top_logprobs.token", self.sm.vocab_size),
                                 _logprob(alternative.get("logprob"), f"{at}.top_logprobs.logprob"))
            table.setdefault(token, lp)
            ids.append(token)
            rows.append(_Step.of(table, token, lp, None))
        return ids, rows

    def _finished(self, choice: dict[str, Any], ids: list[int],
                  rows: list[_Step]) -> tuple[list[int], list[_Step], str]:
        """The answer without vLLM's trailing end-of-answer token, and why it ended ("eos" or "length")."""
        finish = choice.get("finish_reason")
        stop_reason = choice.get("stop_reason")
        if finish == "stop":
            # vLLM ends an answer that stopped on an end-of-answer token with that token: drop it.
            if ids and (ids[-1] in self.sm.eos_token_ids or (isinstance(stop_reason, int) and ids[-1] == stop_reason)):
                ids, rows = ids[:-1], rows[:-1]
            return ids, rows, "eos"
        if finish == "length":
            return ids, rows, "length"
        raise ServerError(f"the server ended an answer with finish_reason {_shown(finish)}; expected 'stop' or "
                          "'length'")

    # ------------------------------------------------------------------------------------------------------------
    # Teacher forcing

    def score(self, prompt_ids: Sequence[list[int]], answer_ids: Sequence[list[int]], *, n_alternatives: int,
              max_logits_bytes: int) -> list[RecordedAnswer]:
        sm = self.sm
        keep, ask = _widths(sm, n_alternatives)

        def one(pair: tuple[list[int], list[int]]) -> RecordedAnswer:
            prompt, answer = list(pair[0]), list(pair[1])
            if not answer:
                return self._answer([], [], keep=keep, ask=ask, finish_reason=None, generated=False)
            sent = prompt + answer
            response = self._post({"model": sm.model, "prompt": sent, "max_tokens": 1, "temperature": 0.0,
                                   "n": 1, "stream": False, "prompt_logprobs": -1 if sm.full_distribution else ask,
                                   "return_tokens_as_token_ids": True, "return_token_ids": True,
                                   "skip_special_tokens": False}, scoring=True)
            return _readable(self._scored, response, sent, len(prompt), answer, keep=keep, ask=ask)

        return sm.map(one, list(zip(prompt_ids, answer_ids)))

    def _scored(self, response: Any, sent: list[int], n_prompt: int, answer: list[int], *, keep: int,
                ask: int) -> RecordedAnswer:
        choice = _choice(response)
        echoed = choice.get("prompt_token_ids")
        if echoed is not None and list(echoed) != sent:
            raise ServerError(f"the server read {len(echoed) if isinstance(echoed, list) else '?'} prompt tokens "
                              f"that differ from the {len(sent)} sent (it changed the token ids); its tokens cannot "
                              "be aligned with the answer")
        entries = choice.get("prompt_logprobs")
        if entries is None:
            raise ServerError(_CANNOT_SCORE)
        if not isinstance(entries, list) or len(entries) != len(sent):
            raise ServerError(f"the server's `prompt_logprobs` has {len(entries) if isinstance(entries, list) else 0}"
                              f" entries for {len(sent)} tokens sent")
        rows = []
        for t, token in enumerate(answer):
            entry = entries[n_prompt + t]  # by position: the entry of answer token t
            if not isinstance(entry, dict):
                raise ServerError(f"the server's `prompt_logprobs` has no entry for answer token {t}")
            table, ranks = {}, {}
            at = f"prompt_logprobs[{n_prompt + t}]"
            for key, value in entry.items():
                token_id = _token_id(key, at, self.sm.vocab_size)
                table[token_id] = _logprob(value, f"{at}[{key!r}]", chosen=token_id == token)
                rank = value.get("rank") if isinstance(value, dict) else None
                if isinstance(rank, int) and not isinstance(rank, bool):
                    if not 1 <= rank <= self.sm.vocab_size:
                        raise ServerError(f"the server's {at}[{key!r}].rank is {_shown(rank)}; a rank is from 1 "
                                          f"to V = {self.sm.vocab_size:,}")
                    ranks[token_id] = rank
            if token not in table:
                raise ServerError(f"the server's `prompt_logprobs` for answer token {t} lack that token ({token})")
            rows.append(_Step.of(table, token, table[token], ranks.get(token)))
        return self._answer(answer, rows, keep=keep, ask=ask, finish_reason=None, generated=False)

    # ------------------------------------------------------------------------------------------------------------
    # Shared

    def beam_logprobs(self, prompt_ids: list[int], *, num_beams: int, max_new_tokens: int) -> list[float]:
        raise ServerError("beam search log-probabilities need a local model (`load_model`): model servers do not "
                          "expose the beams' scores the same way")

    def _post(self, body: dict[str, Any], *, scoring: bool, spare: int = 0) -> Any:
        chat = "messages" in body
        try:
            return self.sm.request("POST", "/v1/chat/completions" if chat else "/v1/completions", body,
                                   max_bytes=self._response_limit(body))
        except RefusedError as exc:
            raise self._explained(exc, scoring=scoring, spare=spare) from None

    def _explained(self, exc: RefusedError, *, scoring: bool, spare: int) -> ServerError:
        """What a refusal means for the user: a cap on log-probabilities, no prompt log-probabilities, or the
        server's own words."""
        capped = _CAPPED.search(exc.message)
        if capped:
            asked, cap = capped.group(2), capped.group(3)
            if self.sm.full_distribution:
                return ServerError(f"the server gives at most {cap} log-probabilities per token, not the full "
                                   "distribution; start vLLM with --max-logprobs -1, or connect with "
                                   "full_distribution=False")
            most = max(int(cap) - spare, 1)
            why = (" (top_logprobs + 1: when sampling, the chat endpoint lists the sampled token among them)"
                   if spare else "")
            return ServerError(f"the server gives at most {cap} log-probabilities per token and {asked} were "
                               f"asked{why}; connect with top_logprobs <= {most} (and store at most {most} "
                               "alternatives), or start vLLM with a higher --max-logprobs")
        if scoring and exc.status == 400 and re.search(r"prompt.?logprob", exc.message, re.IGNORECASE):
            return ServerError(_CANNOT_SCORE)
        return exc

    def _response_limit(self, body: Mapping[str, Any]) -> int:
        """The most bytes the answer to ``body`` may take (:func:`~trace_core.record.http_policy.response_limit`): its
        tokens times the log-probabilities asked for each (the chosen token's among them)."""
        vocab = self.sm.vocab_size
        if "messages" in body:
            tokens, k = body["max_completion_tokens"], body["top_logprobs"]
        elif "prompt_logprobs" in body:
            tokens, k = len(body["prompt"]) + body["max_tokens"], body["prompt_logprobs"]
        else:
            tokens, k = body["max_tokens"], body["logprobs"]
        return response_limit(tokens, (vocab if k < 0 else k) + 1)

    def _answer(self, ids: list[int], rows: list[_Step], *, keep: int, ask: int, finish_reason: str | None,
                generated: bool, more: Mapping[str, Any] | None = None) -> RecordedAnswer:
        sm = self.sm
        n = len(rows)
        top_ids = np.zeros((n, keep), dtype=np.int64)
        top_lp = np.zeros((n, keep), dtype=np.float64)
        ranks = np.zeros(n, dtype=np.int64)
        chosen = np.zeros(n, dtype=np.float64)
        extra: dict[str, Any] = {"api": "completions", "base_url": sm.base_url,
                                 "logprobs_mode": "raw (server default)", **(more or {})}
        if sm.full_distribution:
            entropy = np.zeros(n)
            for t, row in enumerate(rows):
                row.check_full(sm.vocab_size, t)
                top_ids[t], top_lp[t] = row.ids[:keep], row.lps[:keep]
                ranks[t], chosen[t] = row.rank_exact(), row.chosen_lp
                entropy[t] = row.entropy()
            return RecordedAnswer(token_ids=np.asarray(ids, dtype=np.int64), chosen_logprobs=chosen, entropy=entropy,
                                top_logprobs=top_lp, top_ids=top_ids, ranks=ranks, finish_reason=finish_reason,
                                entropy_source="exact", extra=extra)
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


@dataclass
class _Step:
    """One answer token's numbers from the server: every (id, log-prob) it gave, most likely first."""

    ids: np.ndarray
    lps: np.ndarray
    chosen: int
    chosen_lp: float
    server_rank: int | None

    @classmethod
    def of(cls, table: dict[int, float], chosen: int, chosen_lp: float, server_rank: int | None) -> _Step:
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


def _readable(parse: Any, *args: Any, **kwargs: Any) -> Any:
    """``parse(*args, **kwargs)``, with what a hostile answer can still provoke in Python (a value too large for a
    float or an int64, nesting too deep to print) turned into one ServerError line."""
    try:
        return parse(*args, **kwargs)
    except OverflowError:
        raise ServerError("the server's answer holds a number too large to be a log-probability, token id or "
                          "rank") from None
    except RecursionError:
        raise ServerError("the server's answer nests JSON objects or lists too deeply to read") from None


def _widths(sm: ServerModel, n_alternatives: int) -> tuple[int, int]:
    """(alternatives stored, log-probabilities asked per token): at most V each, as a local model stores."""
    keep = min(n_alternatives, sm.vocab_size)
    return keep, min(max(sm.top_logprobs, keep), sm.vocab_size)


def _choice(response: Any) -> dict[str, Any]:
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ServerError("the server's answer has no `choices`; is it an OpenAI-compatible server?")
    return choices[0]


def _token_id(value: Any, where: str, vocab_size: int) -> int:
    """The id in ``"token_id:123"`` (vLLM's ``return_tokens_as_token_ids``) or ``"123"`` (a prompt-logprobs key),
    which must index the vocabulary (below V)."""
    match = _TOKEN_ID.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ServerError(f"the server's {where} holds {_shown(value)} where a token id (\"token_id:N\") was "
                          "expected; the server must support return_tokens_as_token_ids (vLLM does)")
    digits = match.group(1)
    if len(digits) > 12 or int(digits) >= vocab_size:  # never int() of thousands of digits
        raise ServerError(f"the server's {where} holds the token id {clip(digits, 40)}, at least V = {vocab_size:,} "
                          "(the vocabulary of the local tokenizer's model): is the server running another model?")
    return int(digits)


def _logprob(value: Any, where: str, *, chosen: bool = False) -> float:
    """A log-probability given as a number or as vLLM's ``{"logprob": ...}``; null is probability 0 (an
    alternative's only). The importer's rule (:func:`~trace_core.logprobs.check_logprob`)."""
    if isinstance(value, dict):
        value = value.get("logprob")
    if value is None and not chosen:
        return float("-inf")
    try:
        return check_logprob(value, f"the server's {where}", chosen=chosen)
    except ValueError as exc:
        raise ServerError(str(exc)) from None


def _shown(value: Any) -> str:
    return shorten(value, 80)
