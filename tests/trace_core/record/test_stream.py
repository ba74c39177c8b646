"""Streamed generation (``stream_trace``): the last trace is ``generate_trace``'s, partial traces grow token by token,
and stopping, closing or a hostile stream end cleanly (no thread left generating, one-line ServerErrors)."""

from __future__ import annotations

import dataclasses
import gc
import threading
import time

import numpy as np
import pytest

pytest.importorskip("torch")

from fake_server import FakeServer, fast_backoff, serve  # noqa: E402, F401 (fixtures)
from hostile_server import HostileServer  # noqa: E402

from trace_core import DecodingConfig, generate_trace  # noqa: E402
from trace_core.record import ServerError, connect_server, stream_trace  # noqa: E402

PROMPTS = ["Q: What is 12 plus 7? A:", "Unicode: caf"]
GREEDY = DecodingConfig(max_new_tokens=12, n_alternatives=4)
SAMPLED = DecodingConfig(max_new_tokens=12, n_alternatives=4, do_sample=True, temperature=0.9, top_k=40, top_p=0.95,
                         seed=7)


pytestmark = pytest.mark.usefixtures("fast_backoff")


def assert_same_trace(b, a):
    """Everything a trace holds, exactly (no tolerance)."""
    assert b.prompt == a.prompt and b.answer == a.answer and b.tokens == a.tokens
    np.testing.assert_array_equal(b.token_ids, a.token_ids)
    np.testing.assert_array_equal(b.surprisal, a.surprisal)
    if a.entropy is None:
        assert b.entropy is None
    else:
        np.testing.assert_array_equal(b.entropy, a.entropy)
    np.testing.assert_array_equal(b.top_ids, a.top_ids)
    np.testing.assert_array_equal(b.top_logprobs, a.top_logprobs)
    np.testing.assert_array_equal(b.ranks, a.ranks)
    assert b.top_tokens == a.top_tokens
    assert b.metadata == a.metadata


def _check_growth(traces, final):
    """Partial traces are prefixes of the final one, each longer than the one before, marked "stopped"."""
    for before, after in zip(traces, traces[1:], strict=False):
        assert len(after) > len(before)
    for partial in traces:
        n = len(partial)
        assert partial.metadata.extra["finish_reason"] == "stopped"
        np.testing.assert_array_equal(partial.token_ids, final.token_ids[:n])
        assert partial.tokens[:-1] == final.tokens[:n - 1]  # the last piece may be half a character, for now
        np.testing.assert_allclose(partial.surprisal, final.surprisal[:n], atol=1e-5)
        np.testing.assert_allclose(partial.entropy, final.entropy[:n], atol=1e-5)
        np.testing.assert_array_equal(partial.ranks, final.ranks[:n])


def _stream_threads():
    return [t for t in threading.enumerate() if t.name == "trace-stream"]


# ----------------------------------------------------------------------------------------------------------------
# A local model


@pytest.mark.parametrize("config", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_local_stream_ends_with_generate_trace(lm, prompt, config):
    expected = generate_trace(lm, prompt, config=config)
    traces = list(stream_trace(lm, prompt, config=config))
    assert_same_trace(traces[-1], expected)
    assert traces[-1].metadata.extra["finish_reason"] in ("eos", "length")
    _check_growth(traces[:-1], traces[-1])
    assert len(traces) >= 2  # it streamed: at least one partial trace before the last


def test_local_stream_with_a_chat_template_and_eos(tiny_models):
    lm = tiny_models["gpt2"]
    config = dataclasses.replace(GREEDY, chat_template=True, max_new_tokens=40)
    expected = generate_trace(lm, PROMPTS[0], config=config)
    assert_same_trace(list(stream_trace(lm, PROMPTS[0], config=config))[-1], expected)


def test_one_token_at_a_time_when_the_reader_keeps_up(tiny_models):
    lm = tiny_models["llama"]
    lengths = [len(t) for t in stream_trace(lm, PROMPTS[0], config=GREEDY)]
    final = lengths[-1]
    # The reader here does nothing between tokens, so most arrive one by one (a slow step may bundle two).
    assert lengths[:-1] == sorted(set(lengths[:-1])) and len(lengths) - 1 >= final // 2


def test_closing_the_stream_stops_the_worker(tiny_models):
    lm = tiny_models["gpt2"]
    before = len(_stream_threads())
    config = DecodingConfig(max_new_tokens=400, n_alternatives=2)
    stream = stream_trace(lm, PROMPTS[0], config=config)
    first = next(stream)
    assert len(first) >= 1 and len(_stream_threads()) == before + 1
    stream.close()
    assert len(_stream_threads()) == before
    assert lm.lock.acquire(blocking=False)  # the model is free again
    lm.lock.release()


def test_leaving_a_loop_or_dropping_the_stream_stops_the_worker(tiny_models):
    lm = tiny_models["llama"]
    before = len(_stream_threads())
    config = DecodingConfig(max_new_tokens=400, n_alternatives=2)
    for trace in stream_trace(lm, PROMPTS[1], config=config):
        if len(trace) >= 3:
            break
    gc.collect()
    deadline = time.monotonic() + 10
    while len(_stream_threads()) > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(_stream_threads()) == before

    def fails():
        for trace in stream_trace(lm, PROMPTS[1], config=config):
            if len(trace) >= 2:
                raise KeyError("the caller failed")

    with pytest.raises(KeyError):
        fails()
    gc.collect()
    assert len(_stream_threads()) == before


def _stopped_at(model, config, tokens):
    """Every trace a stream of PROMPTS[0] gives when Stop is pressed once the answer holds ``tokens`` tokens."""
    stop = threading.Event()
    traces = []
    for trace in stream_trace(model, PROMPTS[0], config=config, stop=stop):
        traces.append(trace)
        if len(trace) >= tokens:
            stop.set()
    return traces


@pytest.mark.slow
def test_stop_ends_with_a_stopped_trace_equal_to_the_prefix(tiny_models):
    lm = tiny_models["gpt2"]
    config = DecodingConfig(max_new_tokens=200, n_alternatives=3)
    full = generate_trace(lm, PROMPTS[0], config=config)
    last = _stopped_at(lm, config, 5)[-1]
    assert last.metadata.extra["finish_reason"] == "stopped"
    assert 5 <= len(last) < 200
    n = len(last)
    np.testing.assert_array_equal(last.token_ids, full.token_ids[:n])
    np.testing.assert_array_equal(last.surprisal, full.surprisal[:n])
    np.testing.assert_array_equal(last.entropy, full.entropy[:n])


def test_stream_checks_its_arguments_before_anything_runs(tiny_models):
    lm = tiny_models["gpt2"]
    with pytest.raises(TypeError, match="prompt"):
        stream_trace(lm, 3)
    with pytest.raises(ValueError, match="reads at most"):
        stream_trace(lm, PROMPTS[0], config=DecodingConfig(max_new_tokens=100_000))
    with pytest.raises(ValueError, match="beam search"):
        stream_trace(lm, PROMPTS[0], generate_kwargs={"num_beams": 2})
    with pytest.raises(TypeError, match="stop"):
        stream_trace(lm, PROMPTS[0], stop=True)


# ----------------------------------------------------------------------------------------------------------------
# A model server (tests/fake_server.py streams vLLM's chunks)


def _connect(fake, folder, **options):
    return connect_server(fake.url, fake.served_name, tokenizer=str(folder), **options)


@pytest.mark.parametrize("api", ["completions", "chat"])
@pytest.mark.parametrize("config", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
@pytest.mark.parametrize("full", [True, False], ids=["full", "top-k"])
def test_server_stream_ends_with_generate_trace(api, config, full, tiny_model_dirs, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder)
    sm = _connect(fake, folder, api=api, full_distribution=full, top_logprobs=6)
    expected = generate_trace(sm, PROMPTS[0], config=config)
    assert not fake.bodies[-1]["stream"]
    traces = list(stream_trace(sm, PROMPTS[0], config=config))
    body = fake.bodies[-1]
    assert body["stream"] is True and body.get("seed") == fake.bodies[-2].get("seed")
    assert ("stream_options" in body) == (api == "chat")
    assert_same_trace(traces[-1], expected)
    _check_growth(traces[:-1], traces[-1])
    assert len(traces) >= 2 and fake.chunks_sent >= len(traces[-1])


def test_server_stream_of_several_tokens_per_chunk_and_an_eos(tiny_model_dirs, tiny_models, serve, tmp_path):
    """Chunks of three tokens, and an answer that ends on the end-of-answer token (dropped, as the recorder does)."""
    import transformers

    first = generate_trace(tiny_models["gpt2"], PROMPTS[0], config=DecodingConfig(max_new_tokens=8))
    eos = int(first.token_ids[5])
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_model_dirs["gpt2"]))
    model.generation_config.eos_token_id = eos
    model.save_pretrained(tmp_path)
    tiny_models["gpt2"].tokenizer.save_pretrained(tmp_path)
    fake = serve(tmp_path)
    fake.stream_tokens = 3
    sm = _connect(fake, tmp_path, full_distribution=True)
    config = DecodingConfig(max_new_tokens=12, n_alternatives=3)
    expected = generate_trace(sm, PROMPTS[0], config=config)
    traces = list(stream_trace(sm, PROMPTS[0], config=config))
    assert expected.metadata.extra["finish_reason"] == "eos" and eos not in expected.token_ids
    assert_same_trace(traces[-1], expected)
    assert [len(t) for t in traces[:-1]] == [3]  # tokens 0-2; the chunk of 3-5 holds the end and closes it
    _check_growth(traces[:-1], traces[-1])


def test_a_server_that_does_not_stream_gives_one_trace(tiny_model_dirs, serve):
    folder = tiny_model_dirs["llama"]
    fake = serve(folder)
    fake.streams = False
    sm = _connect(fake, folder, api="completions", full_distribution=True)
    expected = generate_trace(sm, PROMPTS[1], config=GREEDY)
    traces = list(stream_trace(sm, PROMPTS[1], config=GREEDY))
    assert len(traces) == 1 and fake.bodies[-1]["stream"] is True
    assert_same_trace(traces[0], expected)


@pytest.mark.slow
def test_closing_a_server_stream_closes_the_connection(tiny_model_dirs, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder)
    fake.stream_pause = 0.05
    sm = _connect(fake, folder, full_distribution=True)
    stream = stream_trace(sm, PROMPTS[0], config=DecodingConfig(max_new_tokens=60))
    assert len(next(stream)) == 1
    stream.close()
    time.sleep(0.5)  # the server notices at its next write that the client has gone
    sent = fake.chunks_sent
    time.sleep(0.3)
    assert fake.chunks_sent == sent < 60


def test_stop_keeps_the_server_answer_so_far(tiny_model_dirs, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder)
    sm = _connect(fake, folder, full_distribution=True)
    config = DecodingConfig(max_new_tokens=30, n_alternatives=2)
    full = generate_trace(sm, PROMPTS[0], config=config)
    traces = _stopped_at(sm, config, 4)
    assert len(traces[-1]) == 4 and traces[-1].metadata.extra["finish_reason"] == "stopped"
    np.testing.assert_array_equal(traces[-1].surprisal, full.surprisal[:4])


def test_a_refusal_of_a_stream_is_explained(tiny_model_dirs, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder, max_logprobs=5)
    sm = _connect(fake, folder, top_logprobs=8)
    with pytest.raises(ServerError, match="at most 5 log-probabilities per token and 8 were asked"):
        list(stream_trace(sm, PROMPTS[0], config=GREEDY))


# ----------------------------------------------------------------------------------------------------------------
# A hostile server's stream (tests/hostile_server.py): every failure is one ServerError line, nothing unbounded held

KEY = "sk-test-Zq81hidden0Secret4Key"
SMALL = DecodingConfig(max_new_tokens=4, n_alternatives=1)


@pytest.fixture
def hostile():
    servers: list[HostileServer] = []

    def make(**modes) -> HostileServer:
        servers.append(HostileServer(**modes))
        return servers[-1]

    try:
        yield make
    finally:
        for s in servers:
            s.stop()


def _hostile_stream(server, folder, **options):
    options.setdefault("top_logprobs", 1)
    sm = connect_server(server.url, "tiny", tokenizer=str(folder), **options)
    return list(stream_trace(sm, "hi", config=SMALL))


def test_a_sane_hostile_stream_reads(hostile, tiny_model_dirs):
    traces = _hostile_stream(hostile(post_mode="sse-ok"), tiny_model_dirs["gpt2"])
    assert [len(t) for t in traces] == [1, 1]
    assert traces[-1].metadata.extra["finish_reason"] == "length" and traces[-1].token_ids.tolist() == [5]


@pytest.mark.parametrize("mode, message", [
    ("sse-long-line", r"a line of the model server's stream is longer than 1,[0-9,]+ bytes"),
    ("sse-endless", r"the model server's stream is larger than [0-9,]+ bytes"),
    ("sse-bad-json", r"an event of the model server's stream is not JSON: .\{\"choices\": \[."),
    ("sse-not-sse", r"a line that is not a server-sent event field \(data: ...\): .<html>busy</html>."),
    ("sse-more", r"the server's stream holds more than the 4 tokens asked for"),
    ("sse-error", r"the model server failed mid-stream: the engine died"),
    ("sse-cut", r"stream ended after 1 tokens without a finish_reason"),
    ("sse-after-finish", r"went on after the answer's finish_reason"),
])
@pytest.mark.slow
def test_a_hostile_stream_is_one_server_error(mode, message, hostile, tiny_model_dirs):
    import tracemalloc

    server = hostile(post_mode=mode)
    tracemalloc.start()
    try:
        with pytest.raises(ServerError, match=message) as info:
            _hostile_stream(server, tiny_model_dirs["gpt2"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "\n" not in str(info.value)
    assert peak < 24 << 20, peak  # the caps are a few MB here; the server offered 64 MB or more
    assert server.sent < 64 << 20 or mode not in ("sse-long-line", "sse-endless")


@pytest.mark.slow
def test_a_dripping_stream_is_cut_off_at_the_deadline(hostile, tiny_model_dirs):
    server = hostile(post_mode="sse-drip")
    server.drip_seconds = 0.3
    started = time.monotonic()
    with pytest.raises(ServerError, match=r"stream did not end within 1 s \(after [0-9]+ events\)"):
        _hostile_stream(server, tiny_model_dirs["gpt2"], timeout=1.0, max_retries=0)
    assert time.monotonic() - started < 6


@pytest.mark.parametrize("mode", ["redirect", "redirect307"])
def test_a_stream_redirect_is_not_followed_and_the_key_stays(mode, hostile, tiny_model_dirs, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    sink = hostile(get_mode="sink", post_mode="sink")
    server = hostile(post_mode=mode)
    server.target = sink.url
    with pytest.raises(ServerError, match=f"redirected to {sink.url}") as info:
        _hostile_stream(server, tiny_model_dirs["gpt2"])
    assert KEY not in str(info.value) and sink.requests == []
    assert server.keys_seen() == [f"Bearer {KEY}"] * 2  # the check and the stream, both to the address given


def test_a_stream_refusal_echoing_the_key_never_shows_it(hostile, tiny_model_dirs, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with pytest.raises(ServerError, match="refused the request") as info:
        _hostile_stream(hostile(post_mode="echo-key-json"), tiny_model_dirs["gpt2"])
    assert KEY not in str(info.value) and "Zq81hidden" not in str(info.value)


# ----------------------------------------------------------------------------------------------------------------
# The Inspect page streams its answer (AppTest: the loop runs to its end; Stop is a rerun, so a stopped answer is
# the partial trace the session holds)


def _inspect_session(tiny_model_dirs, server=None):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parents[3] / "app" / "main.py"), default_timeout=120)
    at.run()
    if server is None:
        at.sidebar.radio(key="model_source").set_value("Local folder or cached model id").run()
        at.sidebar.text_input(key="model_name").set_value(str(tiny_model_dirs["gpt2"])).run()
    else:
        at.sidebar.radio(key="model_source").set_value("Model server (OpenAI-compatible)").run()
        at.sidebar.text_input(key="server_url").set_value(server.url)
        at.sidebar.text_input(key="server_model").set_value("tiny")
        at.sidebar.text_input(key="server_tokenizer").set_value(str(tiny_model_dirs["gpt2"])).run()
    assert not at.exception and not at.sidebar.error
    return at


def _heatmaps(at):
    return [h.proto.body for h in at.get("html") if 'data-testid="trace-heatmap"' in h.proto.body]


@pytest.mark.parametrize("source", ["local", "server"])
def test_inspect_streams_to_the_trace_generate_trace_gives(source, tiny_model_dirs, tiny_models, serve):
    pytest.importorskip("streamlit")
    fake = serve(tiny_model_dirs["gpt2"]) if source == "server" else None
    at = _inspect_session(tiny_model_dirs, fake)
    prompt = "Q: What is 12 plus 7?\nA:"
    at.text_area(key="prompt").set_value(prompt)
    at.get("form_submit_button")[0].click().run()
    assert not at.exception and not at.error
    trace = at.session_state["inspect_trace"]
    config = at.session_state["decoding"]
    lm = tiny_models["gpt2"] if fake is None else _connect(fake, tiny_model_dirs["gpt2"])
    expected = generate_trace(lm, prompt, config=config)
    np.testing.assert_array_equal(trace.token_ids, expected.token_ids)
    np.testing.assert_array_equal(trace.surprisal, expected.surprisal)
    assert trace.metadata.extra["finish_reason"] in ("eos", "length")
    if fake is not None:
        assert fake.bodies[0]["stream"] is True
    assert len(_heatmaps(at)) == 1  # the final heatmap only: the growing one and Stop are gone
    assert not [b for b in at.button if b.key == "stop_inspect"]
    assert not any("Stopped after" in i.value for i in at.info)


def test_inspect_shows_a_stopped_answer_as_an_answer(tiny_model_dirs, tiny_models):
    pytest.importorskip("streamlit")
    at = _inspect_session(tiny_model_dirs)
    prompt = "Q: What is 12 plus 7?\nA:"
    stop = threading.Event()
    for trace in stream_trace(tiny_models["gpt2"], prompt, config=DecodingConfig(max_new_tokens=40), stop=stop):
        if len(trace) >= 6:
            stop.set()
    at.text_area(key="prompt").set_value(prompt)
    at.session_state["inspect_trace"] = trace  # what a Stop during the stream leaves in the session
    at.run()
    assert not at.exception and not at.error
    assert any(f"Stopped after {len(trace)} tokens" in i.value for i in at.info)
    stopped_by = [m for m in at.metric if m.label == "Stopped by"]
    assert stopped_by and stopped_by[0].value == "Stop"
    assert len(_heatmaps(at)) == 1 and len(at.get("plotly_chart")) == 1
