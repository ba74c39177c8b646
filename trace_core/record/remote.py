"""A model served over the OpenAI-compatible HTTP API (vLLM first): :func:`connect_server` and :class:`ServerModel`.

:func:`connect_server` checks the server (``GET /v1/models``) and loads the model's tokenizer locally, so that token
ids are exact: prompts are encoded here exactly as for a local model and sent as token ids to ``/v1/completions``.
With ``api="chat"`` answers are generated through ``/v1/chat/completions`` instead: the prompt goes as the text of
one user message and the server wraps it in its own chat template (token ids still come back exact, as
``"token_id:N"``); existing answers are scored through ``/v1/completions`` whatever ``api`` says. The returned
:class:`ServerModel` goes wherever a :class:`~trace_core.record.LoadedModel` goes (``generate_traces``,
``score_answers``, ``context_length``); :class:`~trace_core.record.backends.completions.ServerBackend` turns its
requests and answers into recorded arrays. Every request follows the one HTTP policy of
:mod:`~trace_core.record.http_policy`, at most ``concurrency`` at once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from trace_core.checks import check_bool, check_int, check_real, clip, shorten
from trace_core.record.addresses import base_url_of
from trace_core.record.errors import ModelLoadError
from trace_core.record.folders import FolderError, looks_like_path, model_folder, read_json
from trace_core.record.gguf import converted_folder, gguf_file_of
from trace_core.record.http_policy import LISTING_BYTES, MAX_TIMEOUT, ServerError, request_json, stream_events
from trace_core.record.load import cached_model_folder, check_model_files

__all__ = ["ServerModel", "connect_server", "map_in_order"]

_T = TypeVar("_T")
_R = TypeVar("_R")

#: The connection check (``GET /v1/models``) waits at most this long per attempt, with at most one retry: an
#: unreachable or stalling server is reported within seconds, not after the long deadline answers may need.
CHECK_TIMEOUT = 10.0
_CHECK_RETRIES = 1
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The endpoints answers can be generated through (``connect_server(api=...)``).
_APIS = ("completions", "chat")


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
                max_bytes: int = LISTING_BYTES) -> Any:
        """The JSON answer of one request under the HTTP policy (:func:`~trace_core.record.http_policy.request_json`
        with this model's address, ``timeout``, ``max_retries`` and ``api_key_env``)."""
        return request_json(self.base_url, method, path, body, timeout=self.timeout, max_retries=self.max_retries,
                            api_key_env=self.api_key_env, max_bytes=max_bytes)

    def stream(self, path: str, body: dict[str, Any], *, max_bytes: int,
               max_line_bytes: int) -> Generator[tuple[str, Any], None, None]:
        """The answer to one streamed ``POST``, as it arrives, under the HTTP policy
        (:func:`~trace_core.record.http_policy.stream_events`)."""
        return stream_events(self.base_url, path, body, timeout=self.timeout, max_retries=self.max_retries,
                             api_key_env=self.api_key_env, max_bytes=max_bytes, max_line_bytes=max_line_bytes)

    def map(self, fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
        """``[fn(item) for item in items]`` with at most ``concurrency`` calls at once, in input order.

        The first failure (in input order) is raised once the calls already running have ended; calls not yet
        started are cancelled.
        """
        return map_in_order(fn, items, workers=self.concurrency, thread_name="trace-server")


def map_in_order(fn: Callable[[_T], _R], items: Sequence[_T], *, workers: int, thread_name: str) -> list[_R]:
    """``[fn(item) for item in items]`` on at most ``workers`` threads, in input order: the first failure (in input
    order) is raised once the calls already running have ended, and calls not yet started are cancelled. One item,
    or one worker, runs in the calling thread."""
    items = list(items)
    if len(items) <= 1 or workers == 1:
        return [fn(item) for item in items]
    pool = ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix=thread_name)
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
                        timeout=min(timeout, CHECK_TIMEOUT), max_retries=min(max_retries, _CHECK_RETRIES),
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
