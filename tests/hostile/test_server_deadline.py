"""``timeout`` is one deadline for a whole exchange with a model server, however the server delimits its answer: a
body that ends when the connection closes (HTTP/1.0 style, ``Connection: close``, no Content-Length) or a chunked
one, dripped one byte at a time so that no single read ever waits long, is cut off at the deadline. Every request
kind (the model listing, a completion, a chat completion, a stream, teacher-forced scoring), in the library, the
command line and the dashboard, over HTTP and TLS; retries follow the policy, and no socket or watchdog outlives
the call."""

from __future__ import annotations

import functools
import html
import re
import shutil
import subprocess
import threading
import time

import pytest

pytest.importorskip("torch")

from hostile_server import HostileServer  # noqa: E402

from trace_core import DecodingConfig, generate_traces, score_answers  # noqa: E402
from trace_core.cli import main  # noqa: E402
from trace_core.record import ServerError, connect_server, http_policy, stream_trace  # noqa: E402

FRAMINGS = ["close", "chunked"]
TIMEOUT = 2.0
#: Well above the deadline and closing, well below the server's whole drip (DRIP_BYTES x DRIP_SECONDS = 20 s).
BOUND = 15.0
DRIP_SECONDS = 0.5
DRIP_BYTES = 40
LATE = r"did not answer in full within 2 s \(1 attempt\)"
STREAM_LATE = r"stream did not end within 2 s \(after 0 events\)"  # a stream is not retried


# Set on every server the `hostile` fixture (tests/hostile/conftest.py) makes: a failing client ends too, in 20 s.
HOSTILE_ATTRIBUTES = {"drip_seconds": DRIP_SECONDS, "drip_bytes": DRIP_BYTES}


def _watchdogs() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if isinstance(t, threading.Timer) and t.is_alive()
            and getattr(getattr(t, "function", None), "__module__", None) == http_policy.__name__]


def _assert_cut_off(call, server: HostileServer, *, match: str = LATE) -> ServerError:
    """``call()`` raises the deadline's ServerError well within BOUND seconds; the server then sees the connection
    closed (its drip ends long before it would), and no watchdog is left running."""
    started = time.monotonic()
    with pytest.raises(ServerError, match=match) as info:
        call()
    took = time.monotonic() - started
    assert took < BOUND, f"{took:.1f} s"  # the deadline, not the whole drip
    assert "\n" not in str(info.value)
    assert not _watchdogs()
    waited = time.monotonic()
    while server.active and time.monotonic() - waited < 8:
        time.sleep(0.1)
    assert server.active == 0  # the client closed its socket: the server's next byte found nobody
    return info.value


def _connect(server: HostileServer, folder, **options):
    options.setdefault("top_logprobs", 1)
    options.setdefault("max_retries", 0)
    return connect_server(server.url, "tiny", tokenizer=str(folder), timeout=TIMEOUT, **options)


SMALL = DecodingConfig(max_new_tokens=4, n_alternatives=1)


# ----------------------------------------------------------------------------------------------------------------
# The library: every request kind against both framings


@pytest.mark.slow
@pytest.mark.parametrize("framing", FRAMINGS)
def test_the_model_listing_is_cut_off_at_the_deadline(framing, hostile, tiny_model_dirs):
    server = hostile(get_mode=f"drip-{framing}")
    _assert_cut_off(lambda: _connect(server, tiny_model_dirs["gpt2"]), server)
    assert [r[:2] for r in server.requests] == [("GET", "/v1/models")]


@pytest.mark.slow
@pytest.mark.parametrize("api", ["completions", "chat"])
@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_generation_is_cut_off_at_the_deadline(framing, api, hostile, tiny_model_dirs):
    server = hostile()
    sm = _connect(server, tiny_model_dirs["gpt2"], api=api)
    server.post_mode = f"drip-{framing}"
    _assert_cut_off(lambda: generate_traces(sm, ["hi"], config=SMALL), server)
    assert server.requests[-1][:2] == ("POST", "/v1/chat/completions" if api == "chat" else "/v1/completions")


@pytest.mark.slow
@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_stream_is_cut_off_at_the_deadline(framing, hostile, tiny_model_dirs):
    server = hostile()
    sm = _connect(server, tiny_model_dirs["gpt2"])
    server.post_mode = f"sse-drip-{framing}"
    _assert_cut_off(lambda: list(stream_trace(sm, "hi", config=SMALL)), server, match=STREAM_LATE)
    assert server.requests[-1][2].get("accept") == "text/event-stream"


@pytest.mark.slow
@pytest.mark.parametrize("framing", FRAMINGS)
def test_teacher_forced_scoring_is_cut_off_at_the_deadline(framing, hostile, tiny_model_dirs):
    server = hostile()
    sm = _connect(server, tiny_model_dirs["gpt2"])
    server.post_mode = f"drip-{framing}"
    _assert_cut_off(lambda: score_answers(sm, ["hi"], [" x"], n_alternatives=1), server)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["drip-close", "sse-drip-close"])
def test_a_missed_deadline_is_retried_as_the_policy_says(mode, hostile, tiny_model_dirs, monkeypatch):
    """A late answer is retried like a timeout, each attempt with its own deadline; a stream is not (someone is
    watching it: one deadline, then the error)."""
    monkeypatch.setattr(http_policy, "BACKOFF_BASE", 0.01)
    server = hostile()
    sm = _connect(server, tiny_model_dirs["gpt2"], max_retries=1)
    server.post_mode = mode
    if mode.startswith("sse"):
        def call():
            return list(stream_trace(sm, "hi", config=SMALL))
        _assert_cut_off(call, server, match=STREAM_LATE)
        assert [r[0] for r in server.requests].count("POST") == 1
        return
    _assert_cut_off(lambda: generate_traces(sm, ["hi"], config=SMALL), server,
                    match=r"did not answer in full within 2 s \(2 attempts\)")
    assert [r[0] for r in server.requests].count("POST") == 2


@pytest.mark.slow
def test_a_tls_answer_is_cut_off_at_the_deadline(hostile, tmp_path, monkeypatch):
    """The watchdog shuts a TLS connection's socket too, under the read that waits on it."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=120)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client's default context trusts this certificate
    server = hostile(get_mode="drip-close", post_mode="sse-drip-close")
    server.use_tls(str(cert), str(key))

    def listing():
        return http_policy.request_json(server.tls_url, "GET", "/v1/models", timeout=TIMEOUT, max_retries=0,
                                        api_key_env=None)

    _assert_cut_off(listing, server)

    def stream():
        return list(http_policy.stream_events(server.tls_url, "/v1/completions", {"stream": True}, timeout=TIMEOUT,
                                              max_retries=0, api_key_env=None, max_bytes=1 << 20,
                                              max_line_bytes=1 << 20))

    _assert_cut_off(stream, server, match=STREAM_LATE)
    server.get_mode = "ok"
    assert listing()["data"][0]["id"] == "tiny"  # a TLS answer in time still reads


def test_an_answer_in_time_still_reads(hostile, tiny_model_dirs):
    """The socket kept for the watchdog changes nothing for a server that answers in time, closing or not."""
    server = hostile()
    sm = _connect(server, tiny_model_dirs["gpt2"])
    (trace,) = generate_traces(sm, ["hi"], config=SMALL)
    assert trace.token_ids.tolist() == [5]
    server.post_mode = "sse-ok"
    assert [len(t) for t in stream_trace(sm, "hi", config=SMALL)] == [1, 1]
    assert not _watchdogs()


# ----------------------------------------------------------------------------------------------------------------
# The command line, one run per framing and command


@pytest.mark.slow
@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize("command", ["generate", "score"])
def test_the_command_line_is_cut_off_at_the_deadline(command, framing, hostile, tiny_model_dirs, tmp_path, capsys):
    server = hostile(post_mode=f"drip-{framing}")
    data = tmp_path / ("p.txt" if command == "generate" else "a.jsonl")
    data.write_text("hi\n" if command == "generate" else '{"prompt": "hi", "answer": " x"}\n', encoding="utf-8")
    out = tmp_path / "o.jsonl"
    started = time.monotonic()
    code = main([command, str(data), "--out", str(out), "--server", server.url, "--server-model", "tiny",
                 "--server-tokenizer", str(tiny_model_dirs["gpt2"]), "--alternatives", "1", "--timeout", "2",
                 "--retries", "0", "--quiet"])
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 1 and took < BOUND, (code, f"{took:.1f} s", err)
    assert "did not answer in full within 2 s (1 attempt); raise --timeout" in err and err.count("\n") == 1, err
    assert not out.exists()


# ----------------------------------------------------------------------------------------------------------------
# The dashboard: Inspect streams its answer


@pytest.mark.slow
@pytest.mark.parametrize("framing", FRAMINGS)
def test_inspect_ends_with_the_deadlines_error(framing, hostile, tiny_model_dirs, monkeypatch):
    pytest.importorskip("streamlit")
    from helpers import server_dashboard

    import trace_core.record
    from app import services

    # The dashboard connects with the library's defaults (60 s, 4 retries); here with a 2 s deadline, no retry.
    monkeypatch.setattr(trace_core.record, "connect_server",
                        functools.partial(connect_server, timeout=TIMEOUT, max_retries=0))
    services._cached_server.clear()
    server = hostile()
    server.drip_bytes = 3 * DRIP_BYTES  # a minute of dripping: far beyond a page run that keeps the deadline
    try:
        at = server_dashboard(server.url, tiny_model_dirs["gpt2"])
        server.post_mode = f"sse-drip-{framing}"
        at.text_area(key="prompt").set_value("hi")
        started = time.monotonic()
        at.get("form_submit_button")[0].click().run()
        took = time.monotonic() - started
    finally:
        services._cached_server.clear()
    assert not at.exception, [e.value for e in at.exception]
    errors = [html.unescape(e.value) for e in at.error]
    assert len(errors) == 1 and re.search(STREAM_LATE, errors[0]) and "\n" not in errors[0], errors
    assert took < 30, f"{took:.1f} s"  # the deadline and a page run, not the minute of dripping
    assert server.requests[-1][2].get("accept") == "text/event-stream"
