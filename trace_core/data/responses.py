"""Importing traces from model-server API responses that carry log-probabilities.

A response layout is a :class:`ResponseShape`: how to recognise it and how to read its decoding steps.
:data:`RESPONSE_SHAPES` lists the layouts read today: OpenAI's chat.completions and legacy completions (which vLLM,
TGI, Ollama and the llama.cpp server also speak at ``/v1``), OpenAI's Responses API, and the servers' own layouts:
llama.cpp ``/completion`` with ``n_probs``, Ollama ``/api/generate`` and ``/api/chat`` with ``logprobs``, TGI
``/generate`` with ``details``, and vLLM's ``prompt_logprobs`` (an existing answer scored as part of the prompt).
Each is one entry there: a ``detect`` function and a ``parse`` function returning
:class:`~trace_core.server_shapes.ParsedResponse` (the typed parsers of :mod:`trace_core.server_shapes`, which live
recording from a server shares); the steps become a Trace the same way for all, here. A response must match exactly
one layout.
"""

from __future__ import annotations

import codecs
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trace_core.server_shapes import ParsedResponse, TokenStep
from trace_core.server_shapes.agreement import checked_offers, spelling_problem
from trace_core.server_shapes.llamacpp import detect_llamacpp, hint_llamacpp, parse_llamacpp
from trace_core.server_shapes.ollama import detect_ollama, hint_ollama, parse_ollama_chat, parse_ollama_generate
from trace_core.server_shapes.openai import (
    ASK_FOR_LOGPROBS,
    has_openai_logprobs,
    openai_logprobs,
    parse_chat,
    parse_completions,
)
from trace_core.server_shapes.responses_api import detect_responses, hint_responses, parse_responses
from trace_core.server_shapes.tgi import detect_tgi, hint_tgi, parse_tgi
from trace_core.server_shapes.vllm import detect_vllm_prompt, parse_vllm_prompt
from trace_core.traces.cells import show
from trace_core.traces.logprobs import MAX_NATS, entropy_from_top_k, too_much_mass
from trace_core.traces.trace import Trace, TraceMetadata

__all__ = ["RESPONSE_SHAPES", "ParsedResponse", "ResponseShape", "trace_from_openai"]


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


#: The response layouts :func:`trace_from_openai` reads; a response must match exactly one.
RESPONSE_SHAPES: tuple[ResponseShape, ...] = (
    ResponseShape("chat", has_openai_logprobs("content"), parse_chat,
                  expects="OpenAI chat.completions (`choices[0].logprobs.content`)"),
    ResponseShape("completions", has_openai_logprobs("tokens"), parse_completions,
                  expects="OpenAI completions (`choices[0].logprobs.tokens`)"),
    ResponseShape("responses", detect_responses, parse_responses, hint=hint_responses,
                  expects="OpenAI Responses API (`output[].content[].logprobs` of its `output_text` parts)"),
    ResponseShape("llamacpp_completion", detect_llamacpp, parse_llamacpp, hint=hint_llamacpp,
                  expects="llama.cpp /completion (`completion_probabilities`)"),
    ResponseShape("ollama_generate", detect_ollama("response"), parse_ollama_generate,
                  hint=hint_ollama, expects="Ollama /api/generate (`logprobs` and `response`)"),
    ResponseShape("ollama_chat", detect_ollama("message"), parse_ollama_chat,
                  expects="Ollama /api/chat (`logprobs` and `message`)"),
    ResponseShape("tgi_generate", detect_tgi, parse_tgi, hint=hint_tgi,
                  expects="TGI /generate (`generated_text` and `details`)"),
    ResponseShape("vllm_prompt_logprobs", detect_vllm_prompt, parse_vllm_prompt, scores_prompt=True,
                  expects="vLLM prompt_logprobs (`prompt_logprobs` and `prompt_token_ids`)"),
)


def _unreadable(response: Mapping[str, Any]) -> ValueError:
    """Why no layout matched: in OpenAI's terms when the response has ``choices``, else the layouts expected and,
    when the response looks like one server's, what to ask that server for."""
    if "choices" in response:
        try:
            where = openai_logprobs(response)[2]
        except ValueError as exc:
            return exc
        return ValueError(f"{where}.logprobs has neither `content` (chat.completions) nor `tokens` (completions); "
                          + ASK_FOR_LOGPROBS)
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

#: One kept alternative: (its text, what identifies it: its id when the response gives ids, else its bytes, its
#: log-prob, its id or -1).
_Kept = tuple[str, Any, float, int | None]


def _pieces(steps: Sequence[TokenStep]) -> list[str]:
    """The tokens' texts from their bytes, decoded incrementally as UTF-8: a character split across tokens is carried
    by the token that completes it, bytes left incomplete at the end by the last token (as U+FFFD)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pieces = [decoder.decode(step.raw) for step in steps]
    tail = decoder.decode(b"", final=True)
    if tail and pieces:
        pieces[-1] += tail
    return pieces


def _answer_text(parsed: ParsedResponse, pieces: list[str]) -> str:
    """The response's answer text when it has one, else the joined tokens."""
    if parsed.text is not None and not isinstance(parsed.text, str):
        raise ValueError(f"the response's answer text must be a string, got {show(parsed.text)}")
    if not parsed.steps and parsed.text:
        raise ValueError(f"the answer is non-empty ({show(parsed.text)}) but the response has no token "
                         f"log-probabilities ({parsed.tokens_at} is empty): {ASK_FOR_LOGPROBS}")
    problem = spelling_problem(parsed, pieces)
    if problem:
        raise ValueError(problem)
    return "".join(pieces) if parsed.text is None else parsed.text


def _kept_alternatives(parsed: ParsedResponse) -> tuple[list[list[_Kept]], list[bool]]:
    """Each step's alternatives with a probability (an alternative below -MAX_NATS, -inf or the -9999 servers write
    for it, has none: dropped), most likely first, a token listed twice with one log-probability kept once; and
    whether the chosen token is among them (by id when the response gives ids, else by bytes). A step that lists a
    token twice with two log-probabilities, or the chosen token with another than its own
    (:func:`~trace_core.server_shapes.agreement.checked_offers`), or whose probabilities add up to more than 1, is
    refused."""
    by_id = parsed.by_id
    alternatives = [sorted(((alt.text, alt.token_id if by_id else alt.raw, alt.logprob,
                             alt.token_id if by_id else -1) for alt in offered if alt.logprob >= -MAX_NATS),
                           key=lambda alt: -alt[2])
                    for offered in checked_offers(parsed)]
    offers_chosen = [(step.token_id if by_id else step.raw) in {key for _, key, _, _ in alts}
                     for step, alts in zip(parsed.steps, alternatives, strict=True)]
    for t, (step, alts, among) in enumerate(zip(parsed.steps, alternatives, offers_chosen, strict=True)):
        mass = math.fsum([math.exp(a) for _, _, a, _ in alts] + ([] if among else [math.exp(step.logprob)]))
        problem = too_much_mass(mass, None if among else math.exp(step.logprob))
        if problem:
            raise ValueError(f"{parsed.alternatives_at.format(t + parsed.step_offset)} {problem}")
    return alternatives, offers_chosen


def _top_k_entropy(steps: Sequence[TokenStep], alternatives: list[list[_Kept]], offers_chosen: list[bool],
                   k: int) -> np.ndarray | None:
    """Each step's entropy estimated from its alternatives (plus the chosen token when it is not among them) when
    every step offers some (``k`` > 0). A step without alternatives knows only the chosen token: one probability says
    nothing about the spread of the rest, so such a response has no entropy rather than a one-bucket guess."""
    if k == 0:
        return None
    entropy = np.empty(len(steps), dtype=np.float64)
    for t, (step, alts, among) in enumerate(zip(steps, alternatives, offers_chosen, strict=True)):
        known = [a for _, _, a, _ in alts]
        if not among:
            known.append(step.logprob)
        entropy[t] = entropy_from_top_k(np.array([known], dtype=np.float64))[0]
    return entropy


def _trace_from_steps(parsed: ParsedResponse, *, api: str, prompt: str, model_id: str) -> Trace:
    steps = parsed.steps
    pieces = _pieces(steps)
    answer = _answer_text(parsed, pieces)
    n = len(steps)
    chosen_ids = [step.token_id if parsed.by_id else -1 for step in steps]
    surprisal = 0.0 - np.array([step.logprob for step in steps], dtype=np.float64)  # +0.0, never -0.0
    alternatives, offers_chosen = _kept_alternatives(parsed)
    k = min((len(a) for a in alternatives), default=0)  # every step keeps the same number, the fewest offered
    entropy = _top_k_entropy(steps, alternatives, offers_chosen, k)
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
    - ``responses``: OpenAI's Responses API asked with ``include: ["message.output_text.logprobs"]``
      (``"object": "response"``): each ``output_text`` part of the ``message`` items in ``output`` has ``logprobs``
      in chat's form; the answer is those parts' texts joined, other items (reasoning, tool calls) are not read;
      ``finish_reason`` is ``stop`` for a completed response and ``length`` for one cut at ``max_output_tokens``.
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

    Bounds (the constants are in :mod:`trace_core.traces.logprobs`, shared with the dataset's trace columns): a chosen
    token's log-probability below ``-MAX_NATS`` (-1000; servers write -9999 for -inf) is refused; an alternative's
    below ``-MAX_NATS``, ``-inf`` included, means "no probability" and is dropped like ``-inf``; a probability must
    be within 0 and 1; a step whose alternatives, plus the chosen token when it is not among them, add up to a
    probability above ``1 + TOP_K_MASS_TOLERANCE`` (0.01, for rounding) is refused; so is a response with a non-empty
    answer text and no tokens. Every message names the field and the step.

    Agreement (:mod:`trace_core.server_shapes.agreement`): what a response says twice must agree. A token's ``bytes``
    must be those of its text (or the text a lossy or byte form of them, e.g. ``""`` or U+FFFD for part of a
    character); a step that lists a token twice with two log-probabilities (by id when the response gives ids, else
    by bytes), or the chosen token with another log-probability than its own (beyond 1e-6), is refused, a token
    listed twice with one log-probability kept once; and the tokens must spell the answer text, allowing what real
    servers write differently: tokens whose text is unknown (bytes left out or U+FFFD, special tokens), the whole
    text's surrounding whitespace, and, unless the answer was cut at its length, up to 64 characters more on either
    side at the end (an end-of-answer token, a stop sequence); beside reasoning or tool calls the text need only be
    within what the tokens spell.

    Token texts come from each token's ``bytes`` when present (decoded incrementally as UTF-8, so a character split
    across tokens is carried by the token that completes it and the others are ""), else from its text (where the
    legacy OpenAI ``"bytes:\\xe6\\x97"`` and old llama.cpp ``"byte: \\xe6"`` forms are understood). The answer is the
    response's text when present (which the tokens spell, as above); otherwise the joined tokens.

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
