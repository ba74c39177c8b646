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
(:func:`~trace_core.traces.logprobs.entropy_from_top_k`, ``entropy_source="top_k"``) and each token's lower and upper
bounds (:func:`~trace_core.traces.logprobs.top_k_entropy_bounds`) go to ``metadata.extra["entropy_lower"]`` and
``["entropy_upper"]``. Ranks are exact with the full distribution and when teacher forcing (vLLM gives the answer
token's rank); in top-k generation a token outside the top k gets rank k + 1, and ``extra["ranks_capped_at"]``
says so. The log-probabilities are the server's: vLLM's default ``--logprobs-mode`` is the raw distribution (before
penalties and sampling warpers), recorded as ``extra["logprobs_mode"] = "raw (server default)"``.

This module says what is sent and when; :mod:`.server_steps` reads the answers (through the shape parsers the file
importer uses, :mod:`trace_core.server_shapes`) and builds the arrays.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from trace_core.record.backends.base import RecordedAnswer
from trace_core.record.backends.server_steps import (
    ServerStep,
    answer_arrays,
    chat_rows,
    choice_of,
    completion_rows,
    has_chat_logprobs,
    has_completion_logprobs,
    prompt_rows,
    readable,
    shown,
)
from trace_core.record.http_policy import RefusedError, ServerError, response_limit
from trace_core.record.remote import ServerModel
from trace_core.traces.trace import DecodingConfig

__all__ = ["STREAM_BYTES_PER_EVENT", "ServerBackend"]

_CAPPED = re.compile(r"requested (sample|prompt) logprobs of (-?\d+), which is greater than max allowed: (-?\d+)",
                     re.IGNORECASE)
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
                return readable(self._chatted, response, keep=keep, ask=ask)
            return readable(self._generated, response, keep=keep, ask=ask)

        return sm.map(one, list(enumerate(prompt_ids)))

    def stream(self, prompt_ids: list[int], config: DecodingConfig, options: Mapping[str, Any], *,
               stop: threading.Event, min_interval: float = 0.0,
               prompt: str | None = None) -> Iterator[RecordedAnswer]:
        """One answer as the server streams it (``"stream": true``): the answer so far after each chunk that adds
        tokens (``finish_reason="stopped"``; at most one per ``min_interval`` seconds, the tokens of the chunks
        between coming with the next), then the answer :meth:`generate` records for the same request.

        Each chunk's log-probabilities are read by the rules of the whole answer's
        (:func:`~.server_steps.completion_rows`, :func:`~.server_steps.chat_rows`); the stream's size is capped by
        what was asked plus each chunk's envelope, and so is each line. A server that answers with one JSON body
        gives that answer once. Once ``stop`` is set, the answer so far is the last one (``finish_reason="stopped"``)
        and the connection is closed; closing the iterator closes it too.
        """
        chat = self.sm.api == "chat"
        if chat and prompt is None:
            raise ValueError("generating through the chat endpoint needs the prompt's text (`prompt`)")
        keep, ask, spare = self._widths(config)
        request = self._generation_request(config, prompt_ids, prompt, spare=spare, seed=config.seed)
        request["stream"] = True
        if chat:  # the final chunk then carries usage.prompt_tokens, the server's count of the templated prompt
            request["stream_options"] = {"include_usage": True}
        whole = self._response_limit(request)
        answer = _Streamed(self, keep=keep, ask=ask, tokens=request["max_completion_tokens" if chat else "max_tokens"])
        events = self.sm.stream("/v1/chat/completions" if chat else "/v1/completions", request,
                                max_bytes=whole + STREAM_BYTES_PER_EVENT * (answer.tokens + 8), max_line_bytes=whole)
        last, pending = -math.inf, False
        try:
            for kind, payload in events:
                if kind == "whole":  # the server did not stream: its one answer
                    yield readable(self._chatted if chat else self._generated, payload, keep=keep, ask=ask)
                    return
                added = answer.take(payload)
                if added is None:  # the usage chunk, or the one that ends the answer
                    continue
                pending = pending or added > 0
                if pending and (stop.is_set() or time.monotonic() - last >= min_interval):
                    yield answer.so_far()
                    last, pending = time.monotonic(), False
                    if stop.is_set():  # the answer so far is the last one
                        return
            yield answer.finished()
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
        choice = choice_of(response)
        has_completion_logprobs(choice)
        ids, rows = completion_rows(choice, 0, self.sm.vocab_size)
        ids, rows, finish_reason = self._finished(choice, ids, rows)
        return self._answer(ids, rows, keep=keep, ask=ask, finish_reason=finish_reason, generated=True)

    def _chatted(self, response: Any, *, keep: int, ask: int) -> RecordedAnswer:
        """The arrays of a chat completion: ``choices[0].logprobs.content``, one entry per answer token."""
        choice = choice_of(response)
        has_chat_logprobs(choice)
        ids, rows = chat_rows(choice, 0, self.sm.vocab_size)
        ids, rows, finish_reason = self._finished(choice, ids, rows)
        return self._answer(ids, rows, keep=keep, ask=ask, finish_reason=finish_reason, generated=True,
                            more=_chat_extra(response.get("usage")))

    def _finished(self, choice: dict[str, Any], ids: list[int],
                  rows: list[ServerStep]) -> tuple[list[int], list[ServerStep], str]:
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
        raise ServerError(f"the server ended an answer with finish_reason {shown(finish)}; expected 'stop' or "
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
            return readable(self._scored, response, sent, len(prompt), answer, keep=keep, ask=ask)

        return sm.map(one, list(zip(prompt_ids, answer_ids, strict=True)))

    def _scored(self, response: Any, sent: list[int], n_prompt: int, answer: list[int], *, keep: int,
                ask: int) -> RecordedAnswer:
        choice = choice_of(response)
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
        rows = prompt_rows(entries, n_prompt, answer, self.sm.vocab_size)
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

    def _answer(self, ids: list[int], rows: list[ServerStep], *, keep: int, ask: int, finish_reason: str | None,
                generated: bool, more: Mapping[str, Any] | None = None) -> RecordedAnswer:
        return answer_arrays(self.sm, ids, rows, keep=keep, ask=ask, finish_reason=finish_reason,
                             generated=generated, more=more)


class _Streamed:
    """One answer being streamed: its tokens and steps so far, the chunk that ended it and the usage sent."""

    def __init__(self, backend: ServerBackend, *, keep: int, ask: int, tokens: int) -> None:
        self.backend, self.keep, self.ask, self.tokens = backend, keep, ask, tokens
        self.chat = backend.sm.api == "chat"
        self.ids: list[int] = []
        self.rows: list[ServerStep] = []
        self.finish: dict[str, Any] | None = None
        self.usage: Any = None

    def take(self, payload: dict[str, Any]) -> int | None:
        """Read one event: the number of answer tokens it adds; None for the usage chunk
        (``stream_options.include_usage``) and for the chunk that ends the answer."""
        if self.finish is not None and payload.get("choices"):
            raise ServerError("the server's stream went on after the answer's finish_reason")
        if payload.get("usage") is not None:
            self.usage = payload["usage"]
        choices = payload.get("choices")
        if choices is None or choices == []:
            return None
        choice = choice_of(payload)
        more_ids, more_rows = readable(chat_rows if self.chat else completion_rows, choice, len(self.ids),
                                       self.backend.sm.vocab_size)
        self.ids.extend(more_ids)
        self.rows.extend(more_rows)
        if len(self.ids) > self.tokens:
            raise ServerError(f"the server's stream holds more than the {self.tokens:,} tokens asked for; is it "
                              "sending something else?")
        if choice.get("finish_reason") is not None:
            self.finish = choice
            return None
        return len(more_ids)

    def so_far(self) -> RecordedAnswer:
        """The answer so far (``finish_reason="stopped"``); an end token is not part of it."""
        ids = self.ids
        end = len(ids) - int(bool(ids) and ids[-1] in self.backend.sm.eos_token_ids)
        return self._answer("stopped", ids[:end], self.rows[:end])

    def finished(self) -> RecordedAnswer:
        """The whole answer, once the stream has ended."""
        if self.finish is None:
            raise ServerError(f"the server's stream ended after {len(self.ids):,} tokens without a finish_reason; "
                              "the answer is incomplete (did the server or a proxy cut it?)")
        held, steps, finish_reason = self.backend._finished(self.finish, self.ids, self.rows)
        return self._answer(finish_reason, held, steps)

    def _answer(self, finish_reason: str | None, held: list[int], steps: list[ServerStep]) -> RecordedAnswer:
        more = _chat_extra(self.usage) if self.chat else {}
        return self.backend._answer(held, steps, keep=self.keep, ask=self.ask, finish_reason=finish_reason,
                                    generated=True, more=more)


def _chat_extra(usage: Any) -> dict[str, Any]:
    """What a chat answer records besides a completion's: the API, and the server's count of the templated prompt
    (``usage.prompt_tokens``, not the local estimate) when it gives one."""
    more: dict[str, Any] = {"api": "chat"}
    counted = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if isinstance(counted, int) and not isinstance(counted, bool) and counted > 0:
        more["prompt_tokens"] = counted
    return more


def _widths(sm: ServerModel, n_alternatives: int) -> tuple[int, int]:
    """(alternatives stored, log-probabilities asked per token): at most V each, as a local model stores."""
    keep = min(n_alternatives, sm.vocab_size)
    return keep, min(max(sm.top_logprobs, keep), sm.vocab_size)
