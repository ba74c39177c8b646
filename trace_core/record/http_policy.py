"""The one HTTP policy for every request to a model server (standard library only, ``http.client``).

* one request per answer; 429, 5xx, timeouts and connection errors are retried with exponential backoff
  (``Retry-After`` honoured up to a cap);
* ``timeout`` is an overall deadline for one attempt: connecting, sending and reading every byte of the answer,
  however its end is marked (Content-Length, chunks, or the connection's close); a server that drips its answer is
  cut off at the deadline, not at each read;
* redirects are never followed: a 3xx answer is an error naming where it pointed, so the API key goes only to the
  address given (the dashboard checks that address against its allow-list);
* the answer's size is capped by what was asked (:func:`response_limit`: tokens x log-probabilities per token x
  :data:`BYTES_PER_ENTRY`, plus slack); more is refused before it is held, and so is a compressed answer (none is
  asked for); a streamed answer (server-sent events) is capped as a whole and line by line;
* the API key is read from the environment variable ``api_key_env`` at each request and sent as a Bearer token; it
  is never stored, printed or put in a trace, and every error message passes through
  :func:`trace_core.settings.redact_secrets`, so a server that echoes the key back does not get it shown.

:func:`request_json` sends one request and :func:`stream_events` one streamed request under that policy;
:class:`ServerError` is what any failure raises (:class:`RefusedError` for a 4xx refusal, whose status and message the
backend reads).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import random
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Generator, Iterator
from email.utils import parsedate_to_datetime
from typing import Any

from trace_core import settings
from trace_core.checks import clip, shorten

__all__ = ["BYTES_PER_ENTRY", "BYTES_PER_TOKEN", "LISTING_BYTES", "MAX_TIMEOUT", "RESPONSE_SLACK", "RefusedError",
           "ServerError", "request_json", "response_limit", "stream_events"]

#: Backoff before retry n (0-based) is ``BACKOFF_BASE * 2**n`` seconds, at most ``_BACKOFF_CAP``, times a jitter
#: factor in [0.5, 1).
BACKOFF_BASE = 0.5
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
LISTING_BYTES = 4 << 20
_ERROR_BYTES = 64 << 10
#: The longest ``timeout`` accepted, in seconds (a day): anything longer is a typo, and overflows the clock.
MAX_TIMEOUT = 86_400.0
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


class RefusedError(ServerError):
    """The server answered a 4xx other than 429; ``status`` and its own (clipped) ``message`` are kept so that the
    backend can say what a refusal means (a top-k cap, no prompt log-probabilities)."""

    def __init__(self, text: str, *, status: int, message: str) -> None:
        super().__init__(text)
        self.status = status
        self.message = message


def request_json(base_url: str, method: str, path: str, body: dict[str, Any] | None = None, *, timeout: float,
                 max_retries: int, api_key_env: str | None, max_bytes: int = LISTING_BYTES) -> Any:
    """The JSON answer of one request to ``base_url + path``, retried as described in the module docstring.

    ``max_bytes`` caps the answer's size (:func:`response_limit` of what the request asks for); each attempt has
    ``timeout`` seconds in all; ``max_retries`` retries follow 429, 5xx, a timeout or a connection error.

    Raises
    ------
    ServerError
        Unreachable after the retries, an HTTP error status (the server's own message, clipped), a redirect, an
        answer over ``max_bytes`` or compressed, or an answer that is not JSON.
    """
    url = f"{base_url}{path}"
    data = None if body is None else json.dumps(body).encode("utf-8")
    attempt = 0
    while True:
        try:
            return _once(method, url, data, timeout, api_key_env, max_bytes)
        except _Retryable as exc:
            if attempt >= max_retries:
                raise ServerError(exc.final_message(base_url, attempt + 1)) from None
            time.sleep(_backoff(attempt, exc.retry_after))
            attempt += 1


def stream_events(base_url: str, path: str, body: dict[str, Any], *, timeout: float, max_retries: int,
                  api_key_env: str | None, max_bytes: int,
                  max_line_bytes: int) -> Generator[tuple[str, Any], None, None]:
    """The answer to one streamed ``POST`` to ``base_url + path`` (server-sent events), as it arrives.

    Yields ``("event", json)`` for each ``data: {...}`` event, in order, until ``data: [DONE]`` or the end of the
    answer; a server that answers with one JSON body instead (it does not stream) yields ``("whole", json)``
    once. The policy of :func:`request_json` holds: retries (only before anything is yielded), one deadline of
    ``timeout`` seconds for the whole exchange, no redirect followed, no compressed answer. ``max_bytes`` caps the
    whole answer and ``max_line_bytes`` each line; more is refused before it is held. Closing the iterator closes
    the connection.

    Raises
    ------
    ServerError
        As :func:`request_json`; also a line that is not an event the stream may hold (``data:`` with JSON), an
        error event (the server's own message), or a connection that breaks mid-stream.
    """
    url = f"{base_url}{path}"
    data = json.dumps(body).encode("utf-8")
    attempt = 0
    while True:
        started = False
        try:
            for item in _stream_once(url, data, timeout, api_key_env, max_bytes, max_line_bytes):
                started = True
                yield item
            return
        except _Retryable as exc:
            if started or attempt >= max_retries:
                raise ServerError(exc.final_message(base_url, attempt + 1)) from None
            time.sleep(_backoff(attempt, exc.retry_after))
            attempt += 1


# ----------------------------------------------------------------------------------------------------------------
# One attempt


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
    """One attempt: the JSON answer, or _Retryable / ServerError. ``timeout`` bounds the whole attempt
    (:class:`_Attempt`)."""
    attempt = _Attempt(url, timeout)
    try:
        response = _sent(attempt, method, url, data, api_key_env, "application/json")
        raw = _read_limited(response, max_bytes, cut=False, attempt=attempt)
    except _TooLarge:
        raise ServerError(f"the model server's answer is larger than {max_bytes:,} bytes, more than the log-"
                          "probabilities asked for can take; is the server sending something else? (ask for fewer "
                          "log-probabilities, shorter answers, or check the server)") from None
    except (ServerError, _Retryable):
        raise
    except TimeoutError:
        raise attempt.late from None
    except (http.client.HTTPException, OSError, ValueError) as exc:  # ValueError: a malformed chunked body
        if attempt.expired.is_set():
            raise attempt.late from None
        raise _Retryable(_reason_text(exc)) from None
    finally:
        attempt.close()
    return _json_answer(raw)


class _Attempt:
    """One attempt's connection to ``url``'s host under its deadline: at ``timeout`` seconds a watchdog sets
    ``expired`` and shuts the socket, whatever stage the exchange is at; ``late`` is the error a missed deadline is.

    The socket is kept here from the moment it is connected: ``http.client`` hands it to the response and forgets it
    (``conn.sock = None``) when the answer ends by closing the connection (HTTP/1.0 style, ``Connection: close``),
    and the socket's own timeout bounds each ``recv`` only, so without it a body dripped a byte at a time would run
    past the deadline for as long as the server cares to drip."""

    def __init__(self, url: str, timeout: float) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme == "https":
            self.conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=timeout, context=ssl.create_default_context())
        else:
            self.conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
        self.timeout = timeout
        self.expired = threading.Event()
        self.late = _Retryable(f"no complete answer within {timeout:g} s", late=timeout)
        self.response: http.client.HTTPResponse | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._watchdog = threading.Timer(timeout, self._expire)
        self._watchdog.daemon = True
        self._watchdog.start()

    def open(self) -> None:
        """Connect and keep the socket (shut at once if the deadline passed while connecting)."""
        self.conn.connect()
        with self._lock:
            self._sock = self.conn.sock
            expired = self.expired.is_set()
        if expired:
            _shut(self._sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired.set()
            held = (self._sock, self.conn.sock)  # conn.sock: the socket being connected, if any
        for sock in held:
            _shut(sock)

    def close(self) -> None:
        """Stop the watchdog (waiting for it if it is shutting the socket now), then close the answer, the
        connection and the socket, whichever of them holds it now."""
        self._watchdog.cancel()
        self._watchdog.join()
        if self.response is not None:
            self.response.close()
        self.conn.close()
        if self._sock is not None:
            self._sock.close()


def _shut(sock: socket.socket | None) -> None:
    """Shut ``sock`` both ways, so that a read blocked on it in another thread returns at once. The plain socket's
    call, also for a TLS socket: its own ``shutdown`` would drop the TLS state under that read."""
    if sock is not None:
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _sent(attempt: _Attempt, method: str, url: str, data: bytes | None, api_key_env: str | None,
          accept: str) -> http.client.HTTPResponse:
    """Send the request and read the answer's status: the response of a 2xx answer that is not compressed; a
    redirect, a compressed answer or a refusal raise ServerError, 429 and 5xx _Retryable."""
    headers = {"Accept": accept, "Accept-Encoding": "identity"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    key = _api_key(api_key_env)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    attempt.open()
    attempt.conn.request(method, urllib.parse.urlsplit(url).path or "/", body=data, headers=headers)
    response = attempt.response = attempt.conn.getresponse()
    status = response.status
    if 300 <= status < 400:
        raise ServerError(_redirect_message(url, response.getheader("Location")))
    encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
    if status >= 400:
        message = _error_message(_read_limited(response, _ERROR_BYTES, cut=True, attempt=attempt), response.reason)
        if status == 429 or status >= 500:
            raise _Retryable(message, status=status, retry_after=_retry_after(response.headers))
        raise RefusedError(f"the model server refused the request (HTTP {status}): {message}", status=status,
                            message=message)
    if encoding not in ("identity", ""):
        raise ServerError(f"the model server's answer is compressed (Content-Encoding: {clip(encoding, 40)}) "
                          "although an uncompressed answer was asked for; turn compression off on the server or "
                          "the proxy in front of it")
    return response


def _stream_once(url: str, data: bytes, timeout: float, api_key_env: str | None, max_bytes: int,
                 max_line_bytes: int) -> Iterator[tuple[str, Any]]:
    """One streamed attempt (see :func:`stream_events`); failures before the first event read as _once's."""
    attempt = _Attempt(url, timeout)
    try:
        response = _stream_opened(attempt, url, data, api_key_env)
        kind = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "text/event-stream":  # not a stream: the whole answer at once, read as _once reads it
            yield "whole", _whole_answer(response, max_bytes, attempt)
            return
        for event in _sse_events(response, attempt, max_bytes, max_line_bytes):
            yield "event", event
    finally:
        attempt.close()


def _stream_opened(attempt: _Attempt, url: str, data: bytes, api_key_env: str | None) -> http.client.HTTPResponse:
    """The streamed request sent and its status read (:func:`_sent`), a failure to connect or send as _Retryable."""
    try:
        return _sent(attempt, "POST", url, data, api_key_env, "text/event-stream")
    except (ServerError, _Retryable):
        raise
    except TimeoutError:
        raise attempt.late from None
    except (http.client.HTTPException, OSError, ValueError) as exc:
        if attempt.expired.is_set():
            raise attempt.late from None
        raise _Retryable(_reason_text(exc)) from None


def _whole_answer(response: http.client.HTTPResponse, max_bytes: int, attempt: _Attempt) -> Any:
    """The JSON of an answer to a streamed request that came as one body."""
    try:
        raw = _read_limited(response, max_bytes, cut=False, attempt=attempt)
    except _TooLarge:
        raise ServerError(f"the model server's answer is larger than {max_bytes:,} bytes, more than the "
                          "log-probabilities asked for can take; is the server sending something else?") from None
    except (http.client.HTTPException, OSError, ValueError) as exc:
        if attempt.expired.is_set():
            raise attempt.late from None
        raise _Retryable(_reason_text(exc)) from None
    return _json_answer(raw)


def _sse_events(response: http.client.HTTPResponse, attempt: _Attempt, max_bytes: int,
                max_line_bytes: int) -> Iterator[Any]:
    """The JSON of each ``data:`` event of a server-sent event stream, until ``data: [DONE]`` or the end of the
    answer (a missing [DONE] is judged by the reader of the events); the stream capped as a whole and line by
    line."""
    events, total = 0, 0
    lines: list[str] = []
    while True:
        line = _stream_line(response, attempt, events, max_line_bytes)
        total += len(line)
        if len(line) > max_line_bytes:
            raise ServerError(f"a line of the model server's stream is longer than {max_line_bytes:,} bytes, "
                              "more than the log-probabilities asked for can take; is the server sending "
                              "something else?")
        if total > max_bytes:
            raise ServerError(f"the model server's stream is larger than {max_bytes:,} bytes, more than the "
                              "log-probabilities asked for can take; is the server sending something else? (ask "
                              "for fewer log-probabilities, shorter answers, or check the server)")
        if not line:  # the end of the answer
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
        yield event


def _stream_line(response: http.client.HTTPResponse, attempt: _Attempt, events: int, max_line_bytes: int) -> bytes:
    """The stream's next line, at most ``max_line_bytes + 1`` bytes (b"" at its end); a missed deadline or a broken
    connection is a ServerError. A stream is not retried once its status has come: someone is watching it, and a
    server too slow for one deadline is not faster for the next."""
    try:
        line = response.readline(max_line_bytes + 1)
    except (TimeoutError, http.client.HTTPException, OSError, ValueError) as exc:
        if attempt.expired.is_set():
            raise _stream_late(attempt, events) from None
        raise ServerError(f"the model server's stream broke after {events:,} events: "
                          f"{_reason_text(exc)}") from None
    if attempt.expired.is_set():
        raise _stream_late(attempt, events)
    return line


def _stream_late(attempt: _Attempt, events: int) -> ServerError:
    return ServerError(f"the model server's stream did not end within {attempt.timeout:g} s (after {events:,} "
                       "events); raise `timeout` if it is busy, or check the server")


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


def _read_limited(response: http.client.HTTPResponse, limit: int, *, cut: bool, attempt: _Attempt) -> bytearray:
    """The body, at most ``limit`` bytes: more raises _TooLarge (or, with ``cut``, is left unread), a missed deadline
    the attempt's ``late``. A declared ``Content-Length`` over the limit is refused before anything is read."""
    declared = response.getheader("Content-Length") or ""
    if not cut and declared.strip().isdigit() and (len(declared.strip()) > 19 or int(declared) > limit):
        raise _TooLarge
    body = bytearray()
    while len(body) <= limit:
        chunk = response.read(min(1 << 16, limit + 1 - len(body)))
        if attempt.expired.is_set():  # what came may be cut short by the watchdog: never an answer
            raise attempt.late
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
    return min(BACKOFF_BASE * 2.0**attempt, _BACKOFF_CAP) * (0.5 + 0.5 * _JITTER.random())


def _api_key(api_key_env: str | None) -> str | None:
    """The API key, read from its environment variable at each request (so a rotated key is picked up); None when
    unset or empty."""
    return settings.secret(api_key_env) if api_key_env else None
