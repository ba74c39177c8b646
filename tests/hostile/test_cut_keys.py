"""A key that a server echoes after enough text that a message's cut falls inside it is still hidden: in the
library's errors (plain answer, JSON error, stream event), the command line's error line, and the dashboard's.

The key here is not shaped like a credential (no ``sk-``, no ``Bearer``): only its value, read from the variable the
user named, tells it apart, so a cut that leaves its start must not leave that start on screen."""

from __future__ import annotations

import html
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trace_core.checks import clip, shorten, show
from trace_core.settings import redact_secrets

KEY = "plainsecretvalue123"
SHOWN = KEY[:4]  # no four characters of the key in a row may be shown
# Paddings that put every cut of the project's messages (60, 160 and 200 characters, with and without a repr's
# quote) inside the key, and some that keep it whole.
PADS = sorted({p for cut in (50, 60, 160, 200) for p in range(cut - len(KEY), cut + 2, 3)} | {0, 181})


@pytest.mark.parametrize("cut", [lambda t: t, clip, shorten, show, lambda t: t[:200], lambda t: t[:200] + "...",
                                 lambda t: clip(t, 160)])
def test_no_start_of_a_key_survives_any_cut(cut, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    for n in range(len(KEY) + 1):
        for pad in range(0, 205):
            text = redact_secrets(cut("x" * pad + KEY[:n] + ("" if n < len(KEY) else " and more")))
            assert SHOWN not in text, (n, pad, text[-60:])


def test_a_word_that_only_starts_like_a_key_is_kept(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert redact_secrets("plain words, plainly said") == "plain words, plainly said"
    assert redact_secrets(f"a {KEY} b") == "a *** b"


class _Echo(BaseHTTPRequestHandler):
    """Serves model "tiny"; every POST gets ``mode``'s answer, quoting the padded key."""

    mode = "text"
    pad = 181

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 (http.server's name)
        self._send(200, json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]}).encode(),
                   "application/json")

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        echoed = "x" * self.pad + KEY
        if self.mode == "text":
            self._send(200, echoed.encode(), "text/plain")
        elif self.mode == "json":
            self._send(400, json.dumps({"error": {"message": echoed}}).encode(), "application/json")
        else:  # a stream whose event is no JSON
            self._send(200, f"data: {echoed}\n\n".encode(), "text/event-stream")


@pytest.fixture
def echo(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _url(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize("mode", ["text", "json", "stream"])
def test_the_library_never_shows_a_cut_key(mode, echo, tiny_model_dirs):
    pytest.importorskip("torch")
    from trace_core import DecodingConfig, generate_traces
    from trace_core.record import ServerError, connect_server, stream_trace

    sm = connect_server(_url(echo), "tiny", tokenizer=str(tiny_model_dirs["gpt2"]), top_logprobs=1, max_retries=0)
    config = DecodingConfig(max_new_tokens=2, n_alternatives=1)
    for pad in PADS:
        _Echo.mode, _Echo.pad = mode, pad
        with pytest.raises(ServerError) as info:
            if mode == "stream":
                list(stream_trace(sm, "hi", config=config))
            else:
                generate_traces(sm, ["hi"], config=config)
        assert SHOWN not in str(info.value), (pad, str(info.value))


@pytest.mark.parametrize("mode", ["text", "json"])
def test_the_command_line_never_shows_a_cut_key(mode, echo, tiny_model_dirs, tmp_path, capsys):
    pytest.importorskip("torch")
    from trace_core.cli import main

    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n", encoding="utf-8")
    for pad in (160 - len(KEY) + 1, 181, 200 - len(KEY) + 2):
        _Echo.mode, _Echo.pad = mode, pad
        code = main(["generate", str(prompts), "--out", str(tmp_path / f"o{pad}.jsonl"), "--server", _url(echo),
                     "--server-model", "tiny", "--server-tokenizer", str(tiny_model_dirs["gpt2"]),
                     "--alternatives", "1", "--retries", "0", "--quiet"])
        captured = capsys.readouterr()
        assert code == 1 and captured.err.startswith("error:"), captured.err
        assert SHOWN not in captured.err + captured.out, (pad, captured.err)


def test_the_dashboard_never_shows_a_cut_key(echo, tiny_model_dirs, monkeypatch):
    pytest.importorskip("streamlit")
    from helpers import server_dashboard

    monkeypatch.setenv("TRACE_SERVER_KEYS", f"{_url(echo)}=OPENAI_API_KEY")
    _Echo.mode, _Echo.pad = "stream", 181
    at = server_dashboard(_url(echo), tiny_model_dirs["gpt2"])
    at.text_area(key="prompt").set_value("hi")
    at.get("form_submit_button")[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [html.unescape(e.value) for e in at.error]
    assert errors and all(SHOWN not in e for e in errors), errors


def test_a_key_in_another_case_is_hidden_too(monkeypatch):
    """A key quoted as a file's column name comes back lower-cased from the reader."""
    monkeypatch.setenv("OPENAI_API_KEY", "PlainSecretValue123")
    assert redact_secrets("found columns ['plainsecretvalue123']") == "found columns ['***']"
    assert redact_secrets("ß" * 3 + " PLAINSECRETVAL… (40 characters in all)") == "ß" * 3 + " ***… (40 characters in all)"
