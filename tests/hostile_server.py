"""A hostile OpenAI-compatible model server on 127.0.0.1, for the tests of the model-server boundary.

It answers ``GET /v1/models`` like a real server (serving ``served_name``) unless ``get_mode`` says otherwise, and
misbehaves on requests as ``get_mode`` / ``post_mode`` say:

* ``"ok"``: a one-token completion (or the model listing) with sane numbers;
* ``"redirect"`` / ``"redirect307"``: 302 / 307 to ``target`` + the same path (a second server, the sink);
* ``"refresh"``: 200 with an HTML page that refreshes to ``target``;
* ``"echo-key"``: 200, plain text quoting the request's ``Authorization`` header;
* ``"echo-key-json"``: 400 with a JSON error message quoting it;
* ``"drip"``: the status line, headers and body one byte every ``drip_seconds`` (at most ``drip_bytes`` bytes);
* ``"drip-close"``: an HTTP/1.0-style answer (``Connection: close``, no Content-Length: the body ends when the
  connection closes) whose head comes at once and whose body drips one byte every ``drip_seconds`` (at most
  ``drip_bytes``); ``"drip-chunked"`` the same with a chunked body, one byte a chunk;
* ``"huge"``: a JSON body of ``huge_bytes`` bytes without Content-Length (connection close);
* ``"declared"``: Content-Length of 10 GB, then a few bytes;
* ``"endless"``: a chunked body that never ends (until ``endless_bytes`` have been sent, or the client leaves);
* ``"impossible"``: a completion holding ``impossible`` (a dict merged into the step: ``lp`` the chosen log-prob,
  ``alternatives`` the ``top_logprobs`` dict, ``token`` the chosen token's key; raw JSON text allowed via ``raw``);
* ``"deep"``: JSON nested ``deep_levels`` deep;
* ``"bigint"``: a completion whose chosen log-prob is an integer of 5,000 digits;
* ``"gzip"``: a gzip-compressed completion with ``Content-Encoding: gzip``;
* ``"sink"``: answers everything like ``"ok"`` (so a client that followed a redirect would "connect") and logs it;
* streams (``text/event-stream``, chunked), for ``"stream": true``: ``"sse-ok"`` one sane chunk, then a closing
  chunk and ``data: [DONE]``; ``"sse-long-line"`` a ``data:`` line of ``huge_bytes`` bytes that never ends;
  ``"sse-bad-json"`` a sane chunk, then ``data: {"choices": [``; ``"sse-not-sse"`` a line that is no event field;
  ``"sse-endless"`` keep-alive comments without end (until ``endless_bytes``); ``"sse-more"`` a thousand sane
  one-token chunks (more than asked); ``"sse-drip"`` sane chunks every
  ``drip_seconds``; ``"sse-drip-close"`` / ``"sse-drip-chunked"`` a sane stream dripped as ``"drip-close"`` /
  ``"drip-chunked"`` drip their bodies; ``"sse-error"`` vLLM's mid-stream error event; ``"sse-cut"`` a sane chunk, then the end of the
  body with neither finish_reason nor ``[DONE]``; ``"sse-after-finish"`` tokens after the closing chunk.

Every request is logged in ``requests`` as (method, path, headers dict); ``sent`` counts body bytes written and
``active`` the answers being written now. Loops
are bounded in bytes and time, so a client that keeps reading ends too.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from local_server import LocalServer


class HostileServer(LocalServer):
    """Serve on 127.0.0.1 (a free port) until :meth:`stop`."""

    def __init__(self, served_name: str = "tiny", *, get_mode: str = "ok", post_mode: str = "ok") -> None:
        self.served_name = served_name
        self.get_mode = get_mode
        self.post_mode = post_mode
        self.target = ""
        self.drip_seconds = 0.5
        self.drip_bytes = 400
        self.huge_bytes = 64 << 20
        self.endless_bytes = 256 << 20
        self.deep_levels = 200_000
        self.impossible: dict[str, Any] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.sent = 0
        self.active = 0  # answers being written now (a dripping one ends early once the client has closed)
        self.lock = threading.Lock()
        self._start(_handler(self))

    def use_tls(self, certificate: str, key: str) -> None:
        """Serve HTTPS from now on, with this certificate and its key (PEM files)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate, key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)

    @property
    def tls_url(self) -> str:
        return self.url.replace("http://", "https://", 1)

    def keys_seen(self) -> list[str]:
        """The Authorization headers received, in order (missing ones left out)."""
        return [h["authorization"] for _, _, h in self.requests if "authorization" in h]


def completion(*, token: str = "token_id:5", lp: float = -0.5, alternatives: dict | None = None) -> dict:
    """A vLLM-shaped completion of one token."""
    alternatives = {token: lp, "token_id:6": -1.5} if alternatives is None else alternatives
    return {"id": "cmpl-1", "object": "text_completion", "model": "tiny",
            "choices": [{"index": 0, "text": "x", "finish_reason": "length",
                         "logprobs": {"tokens": [token], "token_logprobs": [lp], "top_logprobs": [alternatives],
                                      "text_offset": [0]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}


def chunk(*, finish: str | None = None, tokens: int = 1) -> dict:
    """A vLLM-shaped streamed completions chunk of ``tokens`` tokens (none with ``tokens=0``)."""
    return {"id": "cmpl-1", "object": "text_completion", "model": "tiny",
            "choices": [{"index": 0, "text": "x" * tokens, "finish_reason": finish, "stop_reason": None,
                         "logprobs": {"tokens": ["token_id:5"] * tokens, "token_logprobs": [-0.5] * tokens,
                                      "top_logprobs": [{"token_id:5": -0.5, "token_id:6": -1.5}] * tokens,
                                      "text_offset": list(range(tokens))}}]}


def _handler(server: HostileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def do_GET(self) -> None:  # noqa: N802
            self._serve(server.get_mode)

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            self._serve(server.post_mode)

        # ---------------------------------------------------------------------------------------------------------

        def _serve(self, mode: str) -> None:
            with server.lock:
                server.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
                server.active += 1
            # the client may leave: what it should do with a hostile answer
            try:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError,
                                         OSError):
                    getattr(self, "_" + mode.replace("-", "_"))()
            finally:
                with server.lock:
                    server.active -= 1

        def _send(self, status: int, body: bytes, content_type: str = "application/json",
                  headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self._counted(body)

        def _good(self) -> bytes:
            if self.command == "GET":
                return json.dumps({"object": "list", "data": [{"id": server.served_name, "object": "model",
                                                               "max_model_len": 512}]}).encode()
            return json.dumps(completion()).encode()

        def _ok(self) -> None:
            self._send(200, self._good())

        _sink = _ok

        def _redirect(self, status: int = 302) -> None:
            self.send_response(status)
            self.send_header("Location", server.target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _redirect307(self) -> None:
            self._redirect(307)

        def _refresh(self) -> None:
            page = (f'<html><head><meta http-equiv="refresh" content="0; url={server.target}{self.path}"></head>'
                    "<body>moved</body></html>").encode()
            self._send(200, page, "text/html")

        def _echo_key(self) -> None:
            self._send(200, f"oops, debug echo: {self.headers.get('Authorization')}".encode(), "text/plain")

        def _echo_key_json(self) -> None:
            message = {"error": {"message": f"bad request; you sent {self.headers.get('Authorization')}"}}
            self._send(400, json.dumps(message).encode())

        def _drip(self) -> None:
            body = self._good()
            raw = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                   + str(len(body)).encode() + b"\r\n\r\n" + body)
            for i in range(min(len(raw), server.drip_bytes)):
                self.wfile.write(raw[i:i + 1])
                self.wfile.flush()
                time.sleep(server.drip_seconds)
            self.close_connection = True

        def _drip_close(self) -> None:
            """An HTTP/1.0-style answer: the head at once, with neither Content-Length nor chunks (the body ends when
            the connection closes), then the body one byte every ``drip_seconds``."""
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
            self._dripped(self._good(), chunked=False)

        def _drip_chunked(self) -> None:
            """The head at once (chunked, ``Connection: close``), then the body one byte a chunk every
            ``drip_seconds``."""
            self._head("Transfer-Encoding", "chunked", close=True)
            self._dripped(self._good(), chunked=True)

        def _dripped(self, body: bytes, *, chunked: bool) -> None:
            """Write ``body`` one byte every ``drip_seconds`` (at most ``drip_bytes`` bytes, counted in
            ``server.sent``), as it is or one byte a chunk; then close the connection."""
            self.close_connection = True
            for i in range(min(len(body), server.drip_bytes)):
                byte = body[i:i + 1]
                self.wfile.write(b"1\r\n%s\r\n" % byte if chunked else byte)
                self.wfile.flush()
                with server.lock:
                    server.sent += 1
                time.sleep(server.drip_seconds)

        def _head(self, name: str, value: str, *, kind: str = "application/json", close: bool = False) -> None:
            """The head of a 200 answer (JSON unless ``kind`` says otherwise) with one more header (how its body is
            delimited, or not), and ``Connection: close`` with ``close``."""
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header(name, value)
            if close:
                self.send_header("Connection", "close")
            self.end_headers()

        def _counted(self, data: bytes) -> None:
            """Write ``data`` as it is, counted in ``server.sent``."""
            self.wfile.write(data)
            with server.lock:
                server.sent += len(data)

        def _chunk(self, data: bytes) -> None:
            """Write ``data`` as one chunk of a chunked body, at once, counted in ``server.sent``."""
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            with server.lock:
                server.sent += len(data)

        @staticmethod
        def _pour(block: bytes, total: int, write: Callable[[bytes], None]) -> None:
            """``write(block)`` until at least ``total`` bytes have gone out: a huge or endless body."""
            written = 0
            while written < total:
                write(block)
                written += len(block)

        def _huge(self) -> None:
            self._head("Connection", "close")
            self.wfile.write(b'{"pad": "')
            self._pour(b"a" * (1 << 16), server.huge_bytes, self._counted)
            self.wfile.write(b'"}')
            self.close_connection = True

        def _declared(self) -> None:
            self._head("Content-Length", str(10 * 2**30))
            self.wfile.write(b'{"pad": "')
            self.close_connection = True

        def _endless(self) -> None:
            self._head("Transfer-Encoding", "chunked")
            self._pour(b"[" * (1 << 16), server.endless_bytes, self._chunk)
            self.close_connection = True

        def _impossible(self) -> None:
            spec = dict(server.impossible)
            if "raw" in spec:
                self._send(200, spec["raw"].encode())
                return
            self._send(200, json.dumps(completion(**spec)).encode())

        def _deep(self) -> None:
            n = server.deep_levels
            self._send(200, b"[" * n + b"]" * n)

        def _bigint(self) -> None:
            text = json.dumps(completion()).replace("-0.5", "-" + "9" * 5000, 1)
            self._send(200, text.encode())

        # Streams ------------------------------------------------------------------------------------------------

        def _sse_start(self) -> None:
            self.close_connection = True  # one stream per connection: the client leaves mid-stream
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

        def _sse_event(self, payload: dict) -> None:
            self._chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")

        def _sse_end(self) -> None:
            self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")

        def _sse_ok(self) -> None:
            self._sse_start()
            self._sse_event(chunk())
            self._sse_event(chunk(finish="length", tokens=0))
            self._sse_end()

        def _sse_long_line(self) -> None:
            self._sse_start()
            self._chunk(b'data: {"pad": "')
            self._pour(b"a" * (1 << 16), server.huge_bytes, self._chunk)
            self.close_connection = True

        def _sse_bad_json(self) -> None:
            self._sse_start()
            self._sse_event(chunk())
            self._chunk(b'data: {"choices": [\n\n')
            self._sse_end()

        def _sse_not_sse(self) -> None:
            self._sse_start()
            self._chunk(b"<html>busy</html>\n\n")
            self._sse_end()

        def _sse_endless(self) -> None:
            self._sse_start()
            self._pour(b": keep-alive\n" * 4096, server.endless_bytes, self._chunk)
            self.close_connection = True

        def _sse_more(self) -> None:
            self._sse_start()
            for _ in range(1000):
                self._sse_event(chunk())
            self._sse_end()

        def _sse_drip(self) -> None:
            self._sse_start()
            for _ in range(server.drip_bytes):
                self._sse_event(chunk())
                time.sleep(server.drip_seconds)
            self.close_connection = True

        def _sse_drip_close(self) -> None:
            """A stream that ends when the connection closes (no chunks), dripped one byte every
            ``drip_seconds``."""
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            self._dripped(self._sse_body(), chunked=False)

        def _sse_drip_chunked(self) -> None:
            """A chunked stream (``Connection: close``) dripped one byte a chunk every ``drip_seconds``."""
            self._head("Transfer-Encoding", "chunked", kind="text/event-stream", close=True)
            self._dripped(self._sse_body(), chunked=True)

        @staticmethod
        def _sse_body() -> bytes:
            """A sane stream's events: one token, the closing chunk, ``data: [DONE]``."""
            events = [json.dumps(chunk()).encode(), json.dumps(chunk(finish="length", tokens=0)).encode(), b"[DONE]"]
            return b"".join(b"data: " + event + b"\n\n" for event in events)

        def _sse_error(self) -> None:
            self._sse_start()
            self._sse_event(chunk())
            self._sse_event({"error": {"message": "the engine died", "type": "InternalServerError", "code": 500}})
            self._sse_end()

        def _sse_cut(self) -> None:
            self._sse_start()
            self._sse_event(chunk())
            self.wfile.write(b"0\r\n\r\n")

        def _sse_after_finish(self) -> None:
            self._sse_start()
            self._sse_event(chunk(finish="length"))
            self._sse_event(chunk())
            self._sse_end()

        def _gzip(self) -> None:
            self._send(200, gzip.compress(self._good()), headers={"Content-Encoding": "gzip"})

    return Handler
