"""A model served over the OpenAI-compatible HTTP API (vLLM first): connecting, and the requests themselves.

:func:`connect_server` checks the server (``GET /v1/models``) and loads the model's tokenizer locally, so that token
ids are exact: prompts are encoded here exactly as for a local model and sent as token ids to ``/v1/completions``.
With ``api="chat"`` answers are generated through ``/v1/chat/completions`` instead: the prompt goes as the text of
one user message and the server wraps it in its own chat template (token ids still come back exact, as
``"token_id:N"``); existing answers are scored through ``/v1/completions`` whatever ``api`` says. The returned
:class:`ServerModel` goes wherever a :class:`~trace_core.record.LoadedModel` goes (``generate_traces``,
``score_answers``, ``context_length``); :class:`~trace_core.record.backends.server.ServerBackend` turns its requests
and answers into recorded arrays.

HTTP uses the standard library only (``http.client``), under one policy for every request:

* one request per answer, at most ``concurrency`` at once; 429, 5xx, timeouts and connection errors are retried
  with exponential backoff (``Retry-After`` honoured up to a cap);
* ``timeout`` is an overall deadline for one attempt: connecting, sending and reading every byte of the answer (a
  server that drips its answer is cut off at the deadline, not at each read);
* redirects are never followed: a 3xx answer is an error naming where it pointed, so the API key goes only to the
  address given (the dashboard checks that address against its allow-list);
* the answer's size is capped by what was asked (:func:`response_limit`: tokens x log-probabilities per token x
  :data:`BYTES_PER_ENTRY`, plus slack); more is refused before it is held, and so is a compressed answer (none is
  asked for);
* the API key is read from the environment variable ``api_key_env`` at each request and sent as a Bearer token; it
  is never stored, printed or put in a trace, and every error message passes through
  :func:`trace_core.settings.redact_secrets`, so a server that echoes the key back does not get it shown.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import posixpath
import random
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, TypeVar

from .. import settings
from .._checks import check_bool, check_int, check_real, clip, shorten
from .folders import FolderError, looks_like_path, model_folder, read_json

__all__ = ["ServerError", "ServerModel", "connect_server", "key_variable_for", "response_limit", "served_under"]

_T = TypeVar("_T")
_R = TypeVar("_R")

#: Backoff before retry n (0-based) is ``_BACKOFF_BASE * 2**n`` seconds, at most ``_BACKOFF_CAP``, times a jitter
#: factor in [0.5, 1).
_BACKOFF_BASE = 0.5
_BACKOFF_CAP = 8.0
#: The longest ``Retry-After`` wait honoured, in seconds.
_RETRY_AFTER_CAP = 30.0
#: The bound on one log-probability entry's JSON, on average over a response, in bytes: completions'
#: ``"token_id:N": -1.23…`` (about 40), chat's ``{"token", "logprob", "bytes"}`` and ``prompt_logprobs``'
#: ``{"logprob", "rank", "decoded_token"}`` (70 to 100 with a short token) fit several times over.
BYTES_PER_ENTRY = 256
#: Bytes allowed per token besides its entries (the chosen token's own fields, its text, separators).
BYTES_PER_TOKEN = 1024
#: Bytes allowed per response besides its tokens (ids echoed, usage, the server's own fields).
RESPONSE_SLACK = 1 << 20
#: The cap on answers that carry no log-probabilities (``GET /v1/models``) and on error bodies read for their message.
_LISTING_BYTES = 4 << 20
_ERROR_BYTES = 64 << 10
#: The longest ``timeout`` accepted, in seconds (a day): anything longer is a typo, and overflows the clock.
MAX_TIMEOUT = 86_400.0
#: The connection check (``GET /v1/models``) waits at most this long per attempt, with at most one retry: an
#: unreachable or stalling server is reported within seconds, not after the long deadline answers may need.
_CHECK_TIMEOUT = 10.0
_CHECK_RETRIES = 1
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The endpoints answers can be generated through (``connect_server(api=...)``).
_APIS = ("completions", "chat")
# Jitter only spreads retries of concurrent requests apart; seeded from the clock.
_JITTER = random.Random()


class ServerError(RuntimeError):
    """The model server cannot be used as asked; the one-line message says why and what to do.

    The message is made one line and freed of API keys (:func:`trace_core.settings.redact_secrets`) here, whoever
    raises it: a server's words may echo the key back."""

    def __init__(self, message: str = "") -> None:
        super().__init__(_one_line(settings.redact_secrets(str(message))))


def _one_line(text: str) -> str:
    """``text`` with line breaks and other control characters shown as spaces (one line in a terminal and a page)."""
    return re.sub(r"[\x00-\x1f\x7f\u2028\u2029]+", " ", text).strip()


class _RefusedError(ServerError):
    """The server answered a 4xx other than 429; ``status`` and its own (clipped) ``message`` are kept so that the
    backend can say what a refusal means (a top-k cap, no prompt log-probabilities)."""

    def __init__(self, text: str, *, status: int, message: str) -> None:
        super().__init__(text)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ServerModel:
    """A model behind an OpenAI-compatible server, with its tokenizer loaded locally (from :func:`connect_server`).

    Attributes
    ----------
    base_url : str
        The server's address without ``/v1``, credentials, query or trailing ``/`` (recorded in traces).
    model : str
        The served model name, sent with every request.
    tokenizer : Hugging Face tokenizer
        The model's tokenizer, loaded locally: prompts are encoded with it and sent as token ids.
    vocab_size : int
        V, the size of the server's distribution over next tokens: the ``vocab_size`` of the model's local
        ``config.json`` when there is one (the logit vector's size, which entropy bounds need), else
        ``len(tokenizer)``.
    context_length : int or None
        Tokens the model reads, prompt and answer together: the server's ``max_model_len`` (vLLM); None if unknown.
    timeout : float
        Seconds per request.
    max_retries : int
        Retries of a request after 429, 5xx, a timeout or a connection error.
    concurrency : int
        Requests in flight at once.
    top_logprobs : int
        k asked of the server per token (its cap is vLLM's ``--max-logprobs``, 20 by default); the entropy is then
        estimated from the top-k, with bounds.
    full_distribution : bool
        Ask for every log-probability (vLLM started with ``--max-logprobs -1``): exact entropy and ranks, at about
        30 to 65 bytes of JSON per vocabulary entry and token.
    api_key_env : str or None
        The environment variable holding the API key (its name only; the key is read at each request).
    api : {"completions", "chat"}
        The endpoint answers are generated through: ``/v1/completions`` with the prompt's token ids (the chat
        template, when asked, applied locally), or ``/v1/chat/completions`` with the prompt's text (the server
        applies its chat template). Scoring always goes through ``/v1/completions``.
    """

    base_url: str
    model: str
    tokenizer: Any = field(repr=False, compare=False)
    vocab_size: int
    context_length: int | None
    timeout: float = 60.0
    max_retries: int = 4
    concurrency: int = 4
    top_logprobs: int = 20
    full_distribution: bool = False
    api_key_env: str | None = "OPENAI_API_KEY"
    api: str = "completions"
    eos_token_ids: frozenset[int] = field(default=frozenset(), repr=False)

    @property
    def model_id(self) -> str:
        """Recorded in every trace's metadata: the served model name."""
        return self.model

    def describe(self) -> str:
        """One line: where the model is served and what is exact or estimated.

        >>> sm.describe()  # doctest: +SKIP
        "model 'tiny' at http://127.0.0.1:8000 (V = 400, context 2,048): token ids exact (local tokenizer), entropy
        estimated from the top 20 log-probabilities with lower and upper bounds"
        """
        context = f"context {self.context_length:,}" if self.context_length else "context unknown"
        if self.full_distribution:
            entropy = "entropy and ranks exact (full distribution)"
        else:
            entropy = (f"entropy estimated from the top {self.top_logprobs} log-probabilities with lower and upper "
                       "bounds")
        if self.api == "chat":
            via = ("; answers generated through the chat endpoint (the server applies its chat template), scored "
                   "through completions")
        else:
            via = ""
        return (f"model {self.model!r} at {self.base_url} (V = {self.vocab_size:,}, {context}): token ids exact "
                f"(local tokenizer), {entropy}{via}")

    # ------------------------------------------------------------------------------------------------------------
    # HTTP

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                max_bytes: int = _LISTING_BYTES) -> Any:
        """The JSON answer of one request, retried as described in the module docstring.

        ``max_bytes`` caps the answer's size (:func:`response_limit` of what the request asks for); each attempt has
        ``timeout`` seconds in all.

        Raises
        ------
        ServerError
            Unreachable after the retries, an HTTP error status (the server's own message, clipped), a redirect, an
            answer over ``max_bytes`` or compressed, or an answer that is not JSON.
        """
        url = f"{self.base_url}{path}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        attempt = 0
        while True:
            try:
                return _once(method, url, data, self.timeout, self.api_key_env, max_bytes)
            except _Retryable as exc:
                if attempt >= self.max_retries:
                    raise ServerError(exc.final_message(self.base_url, attempt + 1)) from None
                time.sleep(_backoff(attempt, exc.retry_after))
                attempt += 1

    def stream(self, path: str, body: dict[str, Any], *, max_bytes: int,
               max_line_bytes: int) -> Generator[tuple[str, Any], None, None]:
        """The answer to one streamed ``POST`` (server-sent events), as it arrives.

        Yields ``("event", json)`` for each ``data: {...}`` event, in order, until ``data: [DONE]`` or the end of the
        answer; a server that answers with one JSON body instead (it does not stream) yields ``("whole", json)``
        once. The request policy of :meth:`request` holds: retries (only before anything is yielded), one deadline
        of ``timeout`` seconds for the whole exchange, no redirect followed, no compressed answer. ``max_bytes``
        caps the whole answer and ``max_line_bytes`` each line; more is refused before it is held. Closing the
        iterator closes the connection.

        Raises
        ------
        ServerError
            As :meth:`request`; also a line that is not an event the stream may hold (``data:`` with JSON), an
            error event (the server's own message), or a connection that breaks mid-stream.
        """
        url = f"{self.base_url}{path}"
        data = json.dumps(body).encode("utf-8")
        attempt = 0
        while True:
            started = False
            try:
                for item in _stream_once(url, data, self.timeout, self.api_key_env, max_bytes, max_line_bytes):
                    started = True
                    yield item
                return
            except _Retryable as exc:
                if started or attempt >= self.max_retries:
                    raise ServerError(exc.final_message(self.base_url, attempt + 1)) from None
                time.sleep(_backoff(attempt, exc.retry_after))
                attempt += 1

    def map(self, fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
        """``[fn(item) for item in items]`` with at most ``concurrency`` calls at once, in input order.

        The first failure (in input order) is raised once the calls already running have ended; calls not yet
        started are cancelled.
        """
        items = list(items)
        if len(items) <= 1 or self.concurrency == 1:
            return [fn(item) for item in items]
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(items)), thread_name_prefix="trace-server")
        try:
            futures = [pool.submit(fn, item) for item in items]
            return [f.result() for f in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def connect_server(base_url: str, model: str, *, tokenizer: str | None = None,
                   api_key_env: str | None = "OPENAI_API_KEY", timeout: float = 60.0, max_retries: int = 4,
                   concurrency: int = 4, top_logprobs: int = 20, full_distribution: bool = False,
                   api: str = "completions") -> ServerModel:
    """Connect to a model served over the OpenAI-compatible API with vLLM's extensions, and check it.

    Parameters
    ----------
    base_url : str
        ``http(s)://host:port``, with or without a trailing ``/v1``. No credentials in it: put the key in the
        environment variable ``api_key_env``.
    model : str
        The served model name (vLLM's ``--served-model-name``, else the path or id it was started with).
    tokenizer : str, optional
        A local folder, a GGUF file (converted once, as :func:`~trace_core.record.load_model` does) or a locally
        cached Hugging Face id of the model's tokenizer (loaded offline, no remote code). None: ``model`` itself, as
        a local folder or a cached id.
    api_key_env : str or None, default "OPENAI_API_KEY"
        The environment variable read for the API key at each request; unset (or None) sends no key.
    timeout : float, default 60
        Seconds per request attempt, in all (connecting and reading the whole answer), at most a day. The
        connection check (``GET /v1/models``) waits at most 10 s per attempt, with at most one retry.
    max_retries : int, default 4
        Retries after 429, 5xx, a timeout or a connection error, with exponential backoff.
    concurrency : int, default 4
        Requests in flight at once.
    top_logprobs : int, default 20
        k asked of the server per token, at least 1 (at most the server's ``--max-logprobs``); at least
        ``n_alternatives`` is asked when more alternatives are to be stored.
    full_distribution : bool, default False
        Ask for every log-probability (start vLLM with ``--max-logprobs -1``): exact entropy and ranks.
    api : {"completions", "chat"}, default "completions"
        Generate through ``/v1/completions`` (the prompt's token ids, encoded here; ``DecodingConfig.chat_template``
        applies the local chat template) or through ``/v1/chat/completions`` (the prompt's text as one user message;
        the server always applies its own chat template, so ``chat_template`` is not applied locally whatever it
        says, and traces record ``chat_template=True``; the context check counts the prompt with the local
        tokenizer's chat template when it has one, else as plain text: an estimate, and the trace's
        ``prompt_tokens`` is the server's count). When sampling through chat, ``top_logprobs + 1`` are asked per
        token (vLLM's chat endpoint lists the sampled token among them). Scoring (``score_answers``) always goes
        through ``/v1/completions`` with ``prompt_logprobs``.

    Returns
    -------
    ServerModel

    Raises
    ------
    ServerError
        The server cannot be reached, does not serve ``model`` (the message lists what it serves), or no tokenizer
        is found locally.
    ValueError, TypeError
        An argument out of range.

    Examples
    --------
    >>> sm = connect_server("http://127.0.0.1:8000", "Qwen/Qwen2.5-0.5B-Instruct")  # doctest: +SKIP
    >>> traces = generate_traces(sm, ["2 + 2 ="], config=DecodingConfig(max_new_tokens=8))  # doctest: +SKIP
    """
    base = base_url_of(base_url)
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"`model` must be the served model's name, got {shorten(model)}")
    if tokenizer is not None and (not isinstance(tokenizer, str) or not tokenizer.strip()):
        raise ValueError(f"`tokenizer` must be a local folder or a cached model id, got {shorten(tokenizer)}")
    if api_key_env is not None and (not isinstance(api_key_env, str) or not _ENV_NAME.fullmatch(api_key_env)):
        raise ValueError(f"`api_key_env` must be the name of an environment variable, got {shorten(api_key_env)}")
    timeout = check_real(timeout, "timeout", minimum=0.0, maximum=MAX_TIMEOUT, low_open=True)
    max_retries = check_int(max_retries, "max_retries", minimum=0, maximum=20)
    concurrency = check_int(concurrency, "concurrency", minimum=1, maximum=1024)
    top_logprobs = check_int(top_logprobs, "top_logprobs", minimum=1)
    full_distribution = check_bool(full_distribution, "full_distribution")
    if api not in _APIS:
        raise ValueError(f"`api` must be one of {', '.join(map(repr, _APIS))}, got {shorten(api)}")
    probe = ServerModel(base_url=base, model=model, tokenizer=None, vocab_size=1, context_length=None,
                        timeout=min(timeout, _CHECK_TIMEOUT), max_retries=min(max_retries, _CHECK_RETRIES),
                        concurrency=concurrency, top_logprobs=top_logprobs, full_distribution=full_distribution,
                        api_key_env=api_key_env)
    card = _model_card(probe, model)
    tok, folder = _load_tokenizer(tokenizer if tokenizer is not None else model, given=tokenizer is not None,
                                  model=model)
    config = _read_config(folder, "config.json")
    vocab = _positive_int(config.get("vocab_size")) or _positive_int((config.get("text_config") or {})
                                                                     .get("vocab_size")) or len(tok)
    eos = _eos_ids(tok, config, _read_config(folder, "generation_config.json"))
    return ServerModel(base_url=base, model=model, tokenizer=tok, vocab_size=int(vocab),
                       context_length=_positive_int(card.get("max_model_len")), timeout=timeout,
                       max_retries=max_retries, concurrency=concurrency, top_logprobs=top_logprobs,
                       full_distribution=full_distribution, api_key_env=api_key_env, api=api, eos_token_ids=eos)


# ----------------------------------------------------------------------------------------------------------------
# Connecting


def base_url_of(base_url: Any) -> str:
    """``scheme://host[:port][/prefix]`` without ``/v1`` and trailing ``/``; credentials, queries refused."""
    if not isinstance(base_url, str) or not base_url.strip():
        raise ValueError(f"`base_url` must be the server's address (http://host:port), got {shorten(base_url)}")
    try:
        parts = urllib.parse.urlsplit(base_url.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise ValueError("`base_url` is not a valid URL; expected http://host:port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"`base_url` must start with http:// or https:// and name a host, got "
                         f"{shorten(parts.scheme + '://' + (parts.hostname or ''))}")
    if parts.username is not None or parts.password is not None:  # never echo them
        raise ValueError("`base_url` must not hold credentials; put the API key in the environment variable named "
                         "by `api_key_env`")
    if parts.query or parts.fragment:
        raise ValueError("`base_url` must not have a query or a fragment; expected http://host:port")
    path = _normal_path(parts.path)
    if path.endswith("/v1"):
        path = path[:-3]
    host = parts.hostname
    host = f"[{host}]" if ":" in host else host
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme.lower()}://{host}{port}{path}"


def served_under(url: str, entry: str) -> bool:
    """Whether the server address ``url`` is ``entry`` or a path under it, both compared in :func:`base_url_of`'s
    normal form (so ``http://h/team-a/../team-b`` is not under ``http://h/team-a``); False for a malformed entry."""
    try:
        url, entry = base_url_of(url), base_url_of(entry)
    except ValueError:
        return False
    return url == entry or url.startswith(entry + "/")


def key_variable_for(base_url: str) -> str | None:
    """The environment variable whose API key the deployment lets the dashboard send to ``base_url``: the first
    ``TRACE_SERVER_KEYS`` entry that ``base_url`` is :func:`served_under`; None (send no key) when none is."""
    for entry, variable in settings.server_keys():
        if served_under(base_url, entry):
            return variable
    return None


def _normal_path(path: str) -> str:
    """A URL path as a server resolves it, in one spelling: percent-escapes decoded (``%2e%2e`` is ``..``), dot
    segments resolved (``/team-a/../team-b`` is ``/team-b``), repeated and trailing slashes dropped, then quoted
    again. Allow-list entries are compared, and requests sent, in this form."""
    decoded = urllib.parse.unquote(path)
    if re.search(r"[\x00-\x1f\x7f\\]", decoded):
        raise ValueError("`base_url` has control characters or a backslash in its path; expected http://host:port")
    normal = posixpath.normpath("/" + decoded) if decoded.strip("/") else ""
    normal = re.sub(r"/{2,}", "/", normal).rstrip("/")
    return urllib.parse.quote(normal, safe="/:@!$&'()*+,;=-._~")


def _model_card(probe: ServerModel, model: str) -> dict[str, Any]:
    """The ``/v1/models`` entry of ``model``; ServerError naming the served models when it is not there."""
    try:
        listing = probe.request("GET", "/v1/models")
    except ServerError as exc:
        if "cannot reach" in str(exc) or "did not answer" in str(exc):
            raise
        raise ServerError(f"the server at {probe.base_url} did not list its models (GET /v1/models): {exc}") from None
    cards = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(cards, list):
        raise ServerError(f"the server at {probe.base_url} answered GET /v1/models without a list of models; is it "
                          "an OpenAI-compatible server?")
    cards = [c for c in cards if isinstance(c, dict) and isinstance(c.get("id"), str)]
    for card in cards:
        if card["id"] == model:
            return card
    served = ", ".join(repr(c["id"]) for c in cards) or "none"
    raise ServerError(f"the server at {probe.base_url} does not serve the model {shorten(model)}; it serves: "
                      f"{clip(served)}")


def _load_tokenizer(name: str, *, given: bool, model: str) -> tuple[Any, Path | None]:
    """The tokenizer ``name`` (a local folder or a cached id, offline, no remote code) and its folder."""
    from .gguf import converted_folder, gguf_file_of
    from .load import ModelLoadError, cached_model_folder, check_model_files

    try:
        import transformers
    except ImportError as exc:  # pragma: no cover - exercised only without transformers
        raise ImportError("recording traces needs torch and transformers: pip install 'trace-core[record]'") from exc
    hint = ("pass the model's tokenizer as a local folder, a GGUF file or a cached Hugging Face id: tokenizer=... "
            "(the command line's --server-tokenizer)")
    try:
        gguf = gguf_file_of(name)
        folder = model_folder(converted_folder(gguf) if gguf is not None else name)
    except ModelLoadError as exc:
        raise ServerError(f"the tokenizer {shorten(name)} is refused: {exc}") from None
    where: Path | None
    try:
        if folder is not None:
            check_model_files(folder, name)
            source, where = str(folder.path), folder.path
        elif looks_like_path(name):
            raise ServerError(f"no tokenizer folder at {shorten(name)}; {hint}" if given else
                              f"the served model {shorten(model)} is not a local folder; {hint}")
        else:
            snapshot = cached_model_folder(name)
            if snapshot is not None:
                check_model_files(snapshot, name)
            source, where = name, (snapshot.path if snapshot is not None else None)
    except ModelLoadError as exc:
        raise ServerError(f"the tokenizer {shorten(name)} is refused: {exc}") from None
    hf_logging = transformers.utils.logging
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "not found in cache" warnings are noise; the error below says it
    try:
        tok = transformers.AutoTokenizer.from_pretrained(source, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - whatever fails, the fix is the same: name a tokenizer that is here
        if given or folder is not None:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ServerError(f"the tokenizer {shorten(name)} could not be loaded locally ({clip(first, 120)}); "
                              f"{hint}") from None
        raise ServerError(f"no local tokenizer for the served model {shorten(model)} (not a folder, not in the "
                          f"Hugging Face cache); {hint}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    if where is None:
        where = _cached_folder(name)
    return tok, where


def _cached_folder(name: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "tokenizer_config.json")
    except Exception:  # noqa: BLE001 - not a valid id, no hub package: no config to read
        return None
    return Path(found).parent if isinstance(found, str) else None


def _read_config(folder: Path | None, file: str) -> dict[str, Any]:
    if folder is None or not (folder / file).is_file():
        return {}
    try:
        data = read_json(folder, file)
    except (FolderError, OSError):
        return {}
    return data if isinstance(data, dict) else {}


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _eos_ids(tokenizer: Any, config: dict[str, Any], generation: dict[str, Any]) -> frozenset[int]:
    """The ids a server stops on: the generation config's ``eos_token_id`` (as vLLM reads it), else the model
    config's, plus the tokenizer's EOS."""
    ids: set[int] = set()
    for value in (generation.get("eos_token_id"), config.get("eos_token_id"), tokenizer.eos_token_id):
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                ids.add(v)
    return frozenset(ids)


# ----------------------------------------------------------------------------------------------------------------
# One request


class _Retryable(Exception):
    """A failure worth retrying: 429, 5xx, a timeout or a connection error."""

    def __init__(self, what: str, *, status: int | None = None, retry_after: float | None = None,
                 late: float | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.status = status
        self.retry_after = retry_after
        self.late = late  # the deadline missed, in seconds: the server was reached but did not finish in time

    def final_message(self, base_url: str, attempts: int) -> str:
        tries = f" ({attempts} attempt{'s' if attempts != 1 else ''})"
        if self.late is not None:
            return (f"the model server at {base_url} did not answer in full within {self.late:g} s{tries}; raise "
                    "`timeout` if it is busy, or check the server")
        if self.status is None:
            return f"cannot reach the model server at {base_url}: {self.what}{tries}; is it running?"
        return f"the model server at {base_url} answered HTTP {self.status}{tries}: {self.what}"


def response_limit(tokens: int, entries_per_token: int) -> int:
    """The most bytes an answer may take that carries ``tokens`` steps of ``entries_per_token`` log-probabilities
    each: ``RESPONSE_SLACK + tokens * (BYTES_PER_TOKEN + entries_per_token * BYTES_PER_ENTRY)``.

    >>> response_limit(64, 21)
    1458176
    """
    return RESPONSE_SLACK + max(int(tokens), 0) * (BYTES_PER_TOKEN + max(int(entries_per_token), 0) * BYTES_PER_ENTRY)


class _TooLarge(Exception):
    pass


def _once(method: str, url: str, data: bytes | None, timeout: float, api_key_env: str | None,
          max_bytes: int) -> Any:
    """One attempt: the JSON answer, or _Retryable / ServerError. ``timeout`` bounds the whole attempt: a watchdog
    shuts the socket at the deadline, whatever stage the exchange is at."""
    conn, expired, watchdog, late = _connection(url, timeout)
    try:
        response = _sent(conn, method, url, data, api_key_env, "application/json", expired, late)
        raw = _read_limited(response, max_bytes, cut=False)
        if expired.is_set():
            raise late
    except _TooLarge:
        raise ServerError(f"the model server's answer is larger than {max_bytes:,} bytes, more than the log-"
                          "probabilities asked for can take; is the server sending something else? (ask for fewer "
                          "log-probabilities, shorter answers, or check the server)") from None
    except (ServerError, _Retryable):
        raise
    except TimeoutError:
        raise late from None
    except (http.client.HTTPException, OSError, ValueError) as exc:  # ValueError: a malformed chunked body
        if expired.is_set():
            raise late from None
        raise _Retryable(_reason_text(exc)) from None
    finally:
        watchdog.cancel()
        conn.close()
    return _json_answer(raw)


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, threading.Event, threading.Timer,
                                                     _Retryable]:
    """A connection to ``url``'s host, not yet opened, with its watchdog started: at ``timeout`` seconds it sets the
    returned event and shuts the socket, whatever stage the exchange is at; and the error a missed deadline is."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname or "", parts.port, timeout=timeout, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    late = _Retryable(f"no complete answer within {timeout:g} s", late=timeout)
    watchdog = threading.Timer(timeout, expire)
    watchdog.daemon = True
    watchdog.start()
    return conn, expired, watchdog, late


def _sent(conn: http.client.HTTPConnection, method: str, url: str, data: bytes | None, api_key_env: str | None,
          accept: str, expired: threading.Event, late: _Retryable) -> http.client.HTTPResponse:
    """Send the request and read the answer's status: the response of a 2xx answer that is not compressed; a
    redirect, a compressed answer or a refusal raise ServerError, 429 and 5xx _Retryable."""
    headers = {"Accept": accept, "Accept-Encoding": "identity"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    key = _api_key(api_key_env)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn.request(method, urllib.parse.urlsplit(url).path or "/", body=data, headers=headers)
    response = conn.getresponse()
    status = response.status
    if 300 <= status < 400:
        raise ServerError(_redirect_message(url, response.getheader("Location")))
    encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
    if status >= 400:
        message = _error_message(_read_limited(response, _ERROR_BYTES, cut=True), response.reason)
        if expired.is_set():
            raise late
        if status == 429 or status >= 500:
            raise _Retryable(message, status=status, retry_after=_retry_after(response.headers))
        raise _RefusedError(f"the model server refused the request (HTTP {status}): {message}", status=status,
                            message=message)
    if encoding not in ("identity", ""):
        raise ServerError(f"the model server's answer is compressed (Content-Encoding: {clip(encoding, 40)}) "
                          "although an uncompressed answer was asked for; turn compression off on the server or "
                          "the proxy in front of it")
    return response


def _stream_once(url: str, data: bytes, timeout: float, api_key_env: str | None, max_bytes: int,  # noqa: C901 (one branch per HTTP response case)
                 max_line_bytes: int) -> Iterator[tuple[str, Any]]:
    """One streamed attempt (see :meth:`ServerModel.stream`); failures before the first event read as _once's."""
    conn, expired, watchdog, late = _connection(url, timeout)
    events = 0
    try:
        try:
            response = _sent(conn, "POST", url, data, api_key_env, "text/event-stream", expired, late)
        except (ServerError, _Retryable):
            raise
        except TimeoutError:
            raise late from None
        except (http.client.HTTPException, OSError, ValueError) as exc:
            if expired.is_set():
                raise late from None
            raise _Retryable(_reason_text(exc)) from None
        kind = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "text/event-stream":  # not a stream: the whole answer at once, read as _once reads it
            try:
                raw = _read_limited(response, max_bytes, cut=False)
            except _TooLarge:
                raise ServerError(f"the model server's answer is larger than {max_bytes:,} bytes, more than the "
                                  "log-probabilities asked for can take; is the server sending something else?") \
                    from None
            except (http.client.HTTPException, OSError, ValueError) as exc:
                if expired.is_set():
                    raise late from None
                raise _Retryable(_reason_text(exc)) from None
            if expired.is_set():
                raise late
            yield "whole", _json_answer(raw)
            return
        total = 0
        lines: list[str] = []
        while True:
            try:
                line = response.readline(max_line_bytes + 1)
            except (TimeoutError, http.client.HTTPException, OSError, ValueError) as exc:
                if expired.is_set():
                    raise ServerError(f"the model server's stream did not end within {timeout:g} s (after "
                                      f"{events:,} events); raise `timeout` if it is busy, or check the server") \
                        from None
                raise ServerError(f"the model server's stream broke after {events:,} events: "
                                  f"{_reason_text(exc)}") from None
            if expired.is_set():
                raise ServerError(f"the model server's stream did not end within {timeout:g} s (after {events:,} "
                                  "events); raise `timeout` if it is busy, or check the server")
            total += len(line)
            if len(line) > max_line_bytes:
                raise ServerError(f"a line of the model server's stream is longer than {max_line_bytes:,} bytes, "
                                  "more than the log-probabilities asked for can take; is the server sending "
                                  "something else?")
            if total > max_bytes:
                raise ServerError(f"the model server's stream is larger than {max_bytes:,} bytes, more than the "
                                  "log-probabilities asked for can take; is the server sending something else? (ask "
                                  "for fewer log-probabilities, shorter answers, or check the server)")
            if not line:  # the end of the answer (a missing [DONE] is judged by the reader of the events)
                return
            text = _sse_text(line, events)
            if text:  # a field of the event being read
                if text.startswith(":"):  # a comment (a keep-alive)
                    continue
                field, _, value = text.partition(":")
                if field == "data":
                    lines.append(value[1:] if value.startswith(" ") else value)
                elif field not in ("event", "id", "retry"):
                    raise ServerError(f"the model server's stream has a line that is not a server-sent event "
                                      f"field (data: ...): {shorten(text)}")
                continue
            if not lines:  # a blank line: the event, if any, is complete
                continue
            payload, lines = "\n".join(lines), []
            if payload.strip() == "[DONE]":
                return
            event = _stream_event(payload)
            events += 1
            yield "event", event
    finally:
        watchdog.cancel()
        conn.close()


def _sse_text(line: bytes, events: int) -> str:
    """One line of a server-sent event stream as text, without its line break."""
    try:
        return line.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise ServerError(f"the model server's stream has a line that is not UTF-8 text (after {events:,} "
                          "events)") from None


def _stream_event(payload: str) -> Any:
    """The JSON of one ``data:`` event; an error event (``{"error": ...}``, vLLM's mid-stream failure) raises the
    server's own message."""
    try:
        event = json.loads(payload)
    except RecursionError:
        raise ServerError("an event of the model server's stream nests JSON objects or lists too deeply to "
                          "read") from None
    except ValueError:
        raise ServerError(f"an event of the model server's stream is not JSON: {shorten(payload)}") from None
    if isinstance(event, dict) and "error" in event and not event.get("choices"):
        message = _error_message(json.dumps(event).encode("utf-8"), "")
        raise ServerError(f"the model server failed mid-stream: {message}")
    if not isinstance(event, dict):
        raise ServerError(f"an event of the model server's stream is {shorten(payload)} where a JSON object was "
                          "expected")
    return event


def _read_limited(response: http.client.HTTPResponse, limit: int, *, cut: bool) -> bytearray:
    """The body, at most ``limit`` bytes: more raises _TooLarge (or, with ``cut``, is left unread). A declared
    ``Content-Length`` over the limit is refused before anything is read."""
    declared = response.getheader("Content-Length") or ""
    if not cut and declared.strip().isdigit() and (len(declared.strip()) > 19 or int(declared) > limit):
        raise _TooLarge
    body = bytearray()
    while len(body) <= limit:
        chunk = response.read(min(1 << 16, limit + 1 - len(body)))
        if not chunk:
            return body
        body += chunk
    if cut:
        return body[:limit]
    raise _TooLarge


def _json_answer(raw: bytes | bytearray) -> Any:
    """The decoded JSON, or a ServerError saying in plain words why it cannot be read."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ServerError("the model server's answer nests JSON objects or lists too deeply to read; is it an "
                          "OpenAI-compatible server?") from None
    except ValueError as exc:  # includes UnicodeDecodeError
        if "digits" in str(exc) and "limit" in str(exc):  # Python's cap on int digits
            raise ServerError("the model server's answer holds a number with more than 4,300 digits; no "
                              "log-probability or token id is that long") from None
        text = bytes(raw[:200]).decode("utf-8", "replace")
        raise ServerError(f"the model server's answer is not JSON: {shorten(text)}") from None


def _redirect_message(url: str, location: str | None) -> str:
    """Where a redirect pointed, as an origin only (scheme, host, port), and what to do instead."""
    origin = "another address"
    if location:
        try:
            target = urllib.parse.urlsplit(urllib.parse.urljoin(url, location.strip()))
            if target.scheme in ("http", "https") and target.hostname:
                port = f":{target.port}" if target.port is not None else ""
                origin = clip(f"{target.scheme}://{target.hostname}{port}", 120)
        except ValueError:
            pass
    return (f"the server redirected to {origin}; redirects are not followed (the API key stays with the address "
            "given): point the server address at that address directly")


def _reason_text(reason: Any) -> str:
    text = str(reason).strip() or type(reason).__name__
    return clip(text.splitlines()[0], 160)


def _error_message(raw: bytes | bytearray, reason: Any) -> str:
    """The server's own message: OpenAI/vLLM ``{"error": {"message": ...}}`` or ``{"message": ...}``, else text."""
    text = bytes(raw).decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict):
        inner = data.get("error")
        for candidate in ((inner.get("message") if isinstance(inner, dict) else inner), data.get("message"),
                          data.get("detail")):
            if isinstance(candidate, str) and candidate.strip():
                text = candidate.strip()
                break
    text = " ".join(text.split()) or (reason if isinstance(reason, str) else "") or "no message"
    return clip(settings.redact_secrets(text))  # redacted before clipping: no part of a key survives a cut


def _retry_after(headers: Any) -> float | None:
    """Seconds asked by a ``Retry-After`` header (a number or an HTTP date); None without one."""
    value = headers.get("Retry-After") if headers is not None else None
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError):
            return None
    return seconds if math.isfinite(seconds) else None


def _backoff(attempt: int, retry_after: float | None) -> float:
    """Seconds before retry ``attempt`` (0-based): the server's ``Retry-After`` up to a cap, else exponential with
    jitter."""
    if retry_after is not None:
        return min(max(retry_after, 0.0), _RETRY_AFTER_CAP)
    return min(_BACKOFF_BASE * 2.0**attempt, _BACKOFF_CAP) * (0.5 + 0.5 * _JITTER.random())


def _api_key(api_key_env: str | None) -> str | None:
    """The API key, read from its environment variable at each request (so a rotated key is picked up); None when
    unset or empty."""
    return settings.secret(api_key_env) if api_key_env else None
