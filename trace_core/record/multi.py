"""Several OpenAI-compatible servers of one model, used as one: :func:`connect_servers` and :class:`MultiServer`.

Replicas of a model (vLLM instances on several machines or GPUs) serve more answers at once than one. A
:class:`MultiServer` holds one :class:`~trace_core.record.ServerModel` per address and goes wherever a server model
goes (``generate_traces``, ``score_answers``, ``context_length``; its backend is
:class:`~trace_core.record.backends.multi.MultiServerBackend`). Each request goes to the server with the fewest
requests in flight (ties taken in turn), and never more than ``concurrency`` are in flight at any one server, so at
most ``len(servers) * concurrency`` in all. A request's retries (:mod:`~trace_core.record.http_policy`) stay with the
server it went to; when they are spent the request fails, as with one server. Each trace records the address of the
server that answered it (``metadata.extra["base_url"]``).

A load balancer in front of replicas is one address: use :func:`~trace_core.record.connect_server` for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from trace_core.checks import shorten
from trace_core.record.addresses import base_url_of
from trace_core.record.http_policy import ServerError
from trace_core.record.remote import ServerModel, connect_server, map_in_order

__all__ = ["MultiServer", "connect_servers"]

_T = TypeVar("_T")
_R = TypeVar("_R")


class MultiServer:
    """One model served by several OpenAI-compatible servers (from :func:`connect_servers`).

    Parameters
    ----------
    servers : sequence of ServerModel
        At least one, all serving the same model name with the same tokenizer, at distinct addresses.

    Attributes
    ----------
    servers : tuple of ServerModel
        One per address, in the order given; the first one's settings (tokenizer, vocabulary, context, API, k asked,
        ``concurrency``) are every one's.
    slots : int
        Requests in flight at most, over all servers: ``len(servers) * concurrency``.
    """

    def __init__(self, servers: Sequence[ServerModel]) -> None:
        servers = tuple(servers)
        if not servers or not all(isinstance(s, ServerModel) for s in servers):
            raise TypeError("`servers` must be one or more ServerModel objects (from connect_server)")
        _check_same_model(servers)
        self.servers = servers
        self._lock = threading.Condition()
        self._in_flight = [0] * len(servers)
        self._turn = 0

    # What generation and scoring read of a model: the first server's (all are checked to agree).
    @property
    def first(self) -> ServerModel:
        return self.servers[0]

    @property
    def model(self) -> str:
        return self.first.model

    @property
    def model_id(self) -> str:
        return self.first.model_id

    @property
    def tokenizer(self) -> Any:
        return self.first.tokenizer

    @property
    def vocab_size(self) -> int:
        return self.first.vocab_size

    @property
    def context_length(self) -> int | None:
        return self.first.context_length

    @property
    def concurrency(self) -> int:
        return self.first.concurrency

    @property
    def api(self) -> str:
        return self.first.api

    @property
    def base_urls(self) -> list[str]:
        return [s.base_url for s in self.servers]

    @property
    def slots(self) -> int:
        return len(self.servers) * self.concurrency

    def in_flight(self) -> list[int]:
        """Requests in flight now at each server, in the servers' order."""
        with self._lock:
            return list(self._in_flight)

    def describe(self) -> str:
        """One line: the first server's description, and how many servers share the work."""
        if len(self.servers) == 1:
            return self.first.describe()
        others = ", ".join(s.base_url for s in self.servers[1:])
        return (f"{self.first.describe()}; also served at {others} ({len(self.servers)} servers, at most "
                f"{self.concurrency} requests in flight at each)")

    @contextmanager
    def slot(self) -> Iterator[int]:
        """Hold a place at the server with the fewest requests in flight (waiting while every one has
        ``concurrency``); yields that server's index."""
        n = len(self.servers)
        with self._lock:
            while min(self._in_flight) >= self.concurrency:
                self._lock.wait()
            index = min(range(n), key=lambda j: (self._in_flight[j], (j - self._turn) % n))
            self._in_flight[index] += 1
            self._turn = (index + 1) % n
        try:
            yield index
        finally:
            with self._lock:
                self._in_flight[index] -= 1
                self._lock.notify()

    def least_busy(self) -> int:
        """The index of the server with the fewest requests in flight now (no place held)."""
        with self._lock:
            return min(range(len(self.servers)), key=lambda j: self._in_flight[j])

    def map(self, fn: Callable[[int, _T], _R], items: Sequence[_T]) -> list[_R]:
        """``[fn(server_index, item) for item in items]``, each call holding a place at a server (:meth:`slot`),
        so at most ``concurrency`` calls per server at once; results in input order.

        The first failure (in input order) is raised once the calls already running have ended; calls not yet
        started are cancelled (as :meth:`ServerModel.map <trace_core.record.ServerModel.map>` does).
        """
        def run(item: _T) -> _R:
            with self.slot() as index:
                return fn(index, item)

        return map_in_order(run, items, workers=self.slots, thread_name="trace-servers")


def _check_same_model(servers: tuple[ServerModel, ...]) -> None:
    """ServerError naming the address of a server that is not like the first one: another served name, tokenizer,
    vocabulary, context length or settings; ValueError for an address given twice."""
    first = servers[0]
    seen: set[str] = set()
    for server in servers:
        if server.base_url in seen:
            raise ValueError(f"the server {shorten(server.base_url)} is given twice; give each server once (its "
                             "`concurrency` bounds the requests in flight there)")
        seen.add(server.base_url)
        differences = [what for what, a, b in (
            ("served model name", server.model, first.model),
            ("tokenizer", _tokenizer_id(server.tokenizer), _tokenizer_id(first.tokenizer)),
            ("vocabulary size", server.vocab_size, first.vocab_size),
            ("context length (max_model_len)", server.context_length, first.context_length),
            ("settings", _settings(server), _settings(first))) if a != b]
        if differences:
            raise ServerError(f"the server at {server.base_url} does not serve the same model as the one at "
                              f"{first.base_url}: another {', '.join(differences)}; every server must serve one "
                              "model")


def _tokenizer_id(tokenizer: Any) -> tuple[str, int] | None:
    if tokenizer is None:
        return None
    return str(getattr(tokenizer, "name_or_path", "")), len(tokenizer)


def _settings(server: ServerModel) -> tuple[Any, ...]:
    return (server.timeout, server.max_retries, server.concurrency, server.top_logprobs, server.full_distribution,
            server.api_key_env, server.api, server.eos_token_ids)


def connect_servers(base_urls: Sequence[str], model: str, **options: Any) -> MultiServer:
    """Connect to every server of ``base_urls`` (:func:`~trace_core.record.connect_server` with ``model`` and
    ``options`` each) and check that they serve one model.

    Parameters
    ----------
    base_urls : sequence of str
        The servers' addresses, at least one, each once (a load balancer is one address).
    model : str
        The served model name, the same at every server.
    **options
        As :func:`~trace_core.record.connect_server` takes them (``tokenizer``, ``api_key_env``, ``timeout``,
        ``max_retries``, ``concurrency`` per server, ``top_logprobs``, ``full_distribution``, ``api``).

    Returns
    -------
    MultiServer

    Raises
    ------
    ServerError
        A server cannot be reached or does not serve ``model``, or serves it otherwise than the first (another
        context length, say); the message names its address.
    ValueError
        No address, or one given twice.

    Examples
    --------
    >>> servers = connect_servers(["http://10.0.0.1:8000", "http://10.0.0.2:8000"], "tiny")  # doctest: +SKIP
    >>> traces = generate_traces(servers, prompts, batch_size=servers.slots)  # doctest: +SKIP
    """
    if isinstance(base_urls, str) or not isinstance(base_urls, Sequence) or not base_urls:
        raise ValueError(f"`base_urls` must be a list of one or more server addresses, got {shorten(base_urls)}")
    normal = [base_url_of(url) for url in base_urls]
    for i, url in enumerate(normal):
        if url in normal[:i]:
            raise ValueError(f"the server {shorten(url)} is given twice; give each server once (its `concurrency` "
                             "bounds the requests in flight there)")
    servers = []
    for url in base_urls:
        try:
            servers.append(connect_server(url, model, **options))
        except ServerError as exc:
            message = str(exc)
            base = base_url_of(url)
            raise ServerError(message if base in message else f"{base}: {message}") from None
    return MultiServer(servers)
