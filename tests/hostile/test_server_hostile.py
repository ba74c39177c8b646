"""The model-server boundary against a hostile server (tests/hostile_server.py): redirects, keys echoed back,
dripping, huge and endless answers, impossible numbers, deep JSON, huge integers, compression; the allow-list's
prefixes; which server gets the operator's key. Library, command line and dashboard."""

from __future__ import annotations

import html
import json
import time
import tracemalloc

import pytest

pytest.importorskip("torch")

from helpers import server_dashboard  # noqa: E402

from trace_core import DecodingConfig, generate_traces, read_dataset, score_answers  # noqa: E402
from trace_core.cli import main  # noqa: E402
from trace_core.record import ServerError, connect_server, http_policy, remote  # noqa: E402
from trace_core.record.addresses import base_url_of  # noqa: E402

KEY = "sk-test-Zq81hidden0Secret4Key"


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return KEY


def _connect(server, folder, **options):
    options.setdefault("top_logprobs", 1)
    return connect_server(server.url, "tiny", tokenizer=str(folder), **options)


def _generate(sm):
    return generate_traces(sm, ["hi"], config=DecodingConfig(max_new_tokens=4, n_alternatives=1))


def _one_line_without_key(message: str) -> None:
    assert "\n" not in message and KEY not in message and "Zq81hidden" not in message, message


# ----------------------------------------------------------------------------------------------------------------
# 1. Redirects never carry the key elsewhere


@pytest.mark.parametrize("mode", ["redirect", "redirect307"])
def test_a_redirect_is_not_followed_and_the_key_stays(mode, hostile, keyed, tiny_model_dirs):
    sink = hostile(get_mode="sink", post_mode="sink")
    server = hostile(get_mode=mode)
    server.target = sink.url
    with pytest.raises(ServerError) as info:
        _connect(server, tiny_model_dirs["gpt2"])
    message = str(info.value)
    assert f"redirected to {sink.url}" in message and "directly" in message
    _one_line_without_key(message)
    assert sink.requests == []  # nothing reached the other origin, with or without the key

    server.get_mode, server.post_mode = "ok", mode  # a redirect in the middle of a run
    sm = _connect(server, tiny_model_dirs["gpt2"])
    with pytest.raises(ServerError, match="redirected to"):
        _generate(sm)
    assert sink.requests == []


def test_a_refresh_page_is_not_followed(hostile, keyed, tiny_model_dirs):
    sink = hostile(get_mode="sink", post_mode="sink")
    server = hostile(get_mode="refresh")
    server.target = sink.url
    with pytest.raises(ServerError, match="not JSON"):
        _connect(server, tiny_model_dirs["gpt2"])
    assert sink.requests == []


# ----------------------------------------------------------------------------------------------------------------
# 2. The key never appears in a message


@pytest.mark.parametrize("mode", ["echo-key", "echo-key-json"])
def test_a_server_echoing_the_key_never_gets_it_shown(mode, hostile, keyed, tiny_model_dirs, tmp_path, capsys):
    server = hostile(get_mode=mode)
    with pytest.raises(ServerError) as info:
        _connect(server, tiny_model_dirs["gpt2"])
    _one_line_without_key(str(info.value))
    assert server.keys_seen() == [f"Bearer {KEY}"]  # sent to the server it was configured for, once

    server.get_mode, server.post_mode = "ok", mode
    sm = _connect(server, tiny_model_dirs["gpt2"])
    with pytest.raises(ServerError) as info:
        _generate(sm)
    _one_line_without_key(str(info.value))

    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n", encoding="utf-8")
    code = main(["generate", str(prompts), "--out", str(tmp_path / "o.jsonl"), "--server", server.url,
                 "--server-model", "tiny", "--server-tokenizer", str(tiny_model_dirs["gpt2"]), "--alternatives", "1",
                 "--retries", "0", "--quiet"])
    captured = capsys.readouterr()
    assert code == 1
    assert KEY not in captured.err + captured.out and captured.err.count("\n") == 1, captured.err


def test_redaction_covers_key_shapes_and_the_configured_variables(monkeypatch):
    from trace_core.settings import redact_secrets

    monkeypatch.setenv("TEAM_KEY", "team-secret-value")
    monkeypatch.setenv("TRACE_SERVER_KEYS", "http://127.0.0.1:9000=TEAM_KEY")
    text = redact_secrets("a Bearer abc.def and sk-live-abcdef123 and team-secret-value; token 5 is fine")
    assert "abc.def" not in text and "sk-live" not in text and "team-secret-value" not in text
    assert "token 5 is fine" in text


# ----------------------------------------------------------------------------------------------------------------
# 3. The operator's key goes only to the servers the operator configured (the dashboard)


def test_the_dashboard_sends_a_key_only_where_the_deployment_ties_one(hostile, keyed, tiny_model_dirs, monkeypatch):
    pytest.importorskip("streamlit")
    from app import services

    typed = hostile()
    services._cached_server.clear()
    services.get_server(typed.url, "tiny", str(tiny_model_dirs["gpt2"]))
    assert typed.requests and typed.keys_seen() == []  # a server typed in the page gets no key

    tied = hostile()
    monkeypatch.setenv("TEAM_KEY", "team-key-123")
    monkeypatch.setenv("TRACE_SERVER_KEYS", f"{tied.url}/=TEAM_KEY")
    services._cached_server.clear()
    services.get_server(tied.url + "/v1", "tiny", str(tiny_model_dirs["gpt2"]))
    services.get_server(typed.url, "tiny", str(tiny_model_dirs["gpt2"]))
    assert tied.keys_seen() == ["Bearer team-key-123"]  # its own key, not OPENAI_API_KEY
    assert typed.keys_seen() == []
    services._cached_server.clear()


def test_server_keys_setting_is_checked(monkeypatch):
    from trace_core.settings import SettingError, server_keys

    monkeypatch.setenv("TRACE_SERVER_KEYS", "http://h:1=A_KEY, http://h:2/x=B")
    assert server_keys() == [("http://h:1", "A_KEY"), ("http://h:2/x", "B")]
    monkeypatch.setenv("TRACE_SERVER_KEYS", "http://h:1")
    with pytest.raises(SettingError, match="URL=VARIABLE"):
        server_keys()


# ----------------------------------------------------------------------------------------------------------------
# 4. Bounded in time and memory


@pytest.mark.slow
def test_a_dripping_server_is_cut_off_at_the_deadline(hostile, tiny_model_dirs, tmp_path, capsys):
    server = hostile(get_mode="drip")  # one byte every 0.5 s: the listing alone would take minutes
    started = time.monotonic()
    with pytest.raises(ServerError, match="did not answer in full within 1 s"):
        _connect(server, tiny_model_dirs["gpt2"], timeout=1.0, max_retries=0)
    assert time.monotonic() - started < 10  # the deadline (1 s) and closing, not 400 bytes x 0.5 s

    server.get_mode, server.post_mode = "ok", "drip"
    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n", encoding="utf-8")
    started = time.monotonic()
    code = main(["generate", str(prompts), "--out", str(tmp_path / "o.jsonl"), "--server", server.url,
                 "--server-model", "tiny", "--server-tokenizer", str(tiny_model_dirs["gpt2"]), "--alternatives", "1",
                 "--timeout", "2", "--retries", "0", "--quiet"])
    assert code == 1 and time.monotonic() - started < 15
    assert "did not answer in full within 2 s (1 attempt); raise --timeout" in capsys.readouterr().err


@pytest.mark.slow
def test_the_dashboards_connection_check_has_its_own_short_deadline(hostile, tiny_model_dirs, monkeypatch):
    pytest.importorskip("streamlit")
    from app import services

    monkeypatch.setattr(remote, "CHECK_TIMEOUT", 1.0)
    monkeypatch.setattr(http_policy, "BACKOFF_BASE", 0.01)
    server = hostile(get_mode="drip")
    services._cached_server.clear()
    started = time.monotonic()
    with pytest.raises(ServerError, match="did not answer in full within 1 s"):
        services.get_server(server.url, "tiny", str(tiny_model_dirs["gpt2"]))  # the page's default timeout is 60 s
    assert time.monotonic() - started < 12  # two attempts of 1 s, not 5 of 60 s
    assert len(server.requests) == 2


@pytest.mark.parametrize("mode", ["huge", "endless", "declared"])
def test_an_answer_larger_than_what_was_asked_is_refused_unheld(mode, hostile, tiny_model_dirs):
    server = hostile(post_mode=mode)
    sm = _connect(server, tiny_model_dirs["gpt2"])
    tracemalloc.start()
    try:
        with pytest.raises(ServerError, match="larger than 1,[0-9,]+ bytes"):
            _generate(sm)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak  # the cap is about 1 MB here; the server offered 64 MB or more
    assert http_policy.response_limit(4, 2) < 2 << 20


def test_the_cap_follows_what_was_asked(hostile, tiny_model_dirs):
    server = hostile()
    sm = _connect(server, tiny_model_dirs["gpt2"], top_logprobs=5)
    backend = __import__("trace_core.record.backends", fromlist=["backend_of"]).backend_of(sm)
    small = backend._response_limit({"max_tokens": 10, "logprobs": 5})
    large = backend._response_limit({"max_tokens": 1000, "logprobs": 5})
    full = backend._response_limit({"max_tokens": 10, "logprobs": sm.vocab_size})
    scoring = backend._response_limit({"prompt": list(range(100)), "max_tokens": 1, "prompt_logprobs": 5})
    assert small < large and small < full and small < scoring
    assert small == http_policy.response_limit(10, 6)


def test_a_compressed_answer_is_one_line(hostile, tiny_model_dirs):
    server = hostile(post_mode="gzip")
    sm = _connect(server, tiny_model_dirs["gpt2"])
    with pytest.raises(ServerError, match="compressed .Content-Encoding: gzip.") as info:
        _generate(sm)
    assert "\\x1f" not in str(info.value) and "\n" not in str(info.value)
    assert server.requests[-1][2]["accept-encoding"] == "identity"


# ----------------------------------------------------------------------------------------------------------------
# 5. Impossible numbers are refused as the file importer refuses them


IMPOSSIBLE = {
    "positive log-prob": (dict(lp=5.0, alternatives={"token_id:5": 5.0}), "expected a log-probability"),
    "+infinity": (dict(raw=json.dumps(dict(choices=[dict(finish_reason="length", logprobs=dict(
        tokens=["token_id:5"], token_logprobs=["__INF__"], top_logprobs=[{"token_id:5": -0.1}]))])).replace(
        '"__INF__"', "Infinity")), "expected a log-probability"),
    "-9999": (dict(lp=-9999.0, alternatives={"token_id:5": -0.1}), "servers write -9999 for -inf"),
    "mass 8.3": (dict(alternatives={"token_id:5": -0.5, **{f"token_id:{i}": 0.0 for i in range(10, 17)},
                                     "token_id:20": -0.5}), "sum to probability 8.2"),
    "mass above 1": (dict(alternatives={"token_id:5": -0.5, "token_id:6": -0.2, "token_id:7": -0.3}),
                     "cannot add up to more than 1"),
    "token id beyond V": (dict(token="token_id:5000", alternatives={"token_id:5000": -0.5}), "at least V"),
    "alternative id beyond V": (dict(alternatives={"token_id:5": -0.5, "token_id:10000000": -1.0}), "at least V"),
    "huge id": (dict(alternatives={"token_id:5": -0.5, "token_id:" + "9" * 5000: -1.0}), "at least V"),
}


@pytest.mark.parametrize("case", list(IMPOSSIBLE))
def test_impossible_numbers_are_refused(case, hostile, tiny_model_dirs, tmp_path, capsys):
    spec, fragment = IMPOSSIBLE[case]
    server = hostile(post_mode="impossible")
    server.impossible = spec
    sm = _connect(server, tiny_model_dirs["gpt2"])
    assert sm.vocab_size < 5000
    with pytest.raises(ServerError, match=fragment) as info:
        _generate(sm)
    assert "\n" not in str(info.value)

    prompts, out = tmp_path / "p.txt", tmp_path / "o.jsonl"
    prompts.write_text("hi\n", encoding="utf-8")
    code = main(["generate", str(prompts), "--out", str(out), "--server", server.url, "--server-model", "tiny",
                 "--server-tokenizer", str(tiny_model_dirs["gpt2"]), "--alternatives", "1", "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and not out.exists() and err.startswith("error: ") and err.count("\n") == 1, err


def test_sane_numbers_still_record_and_read_back(hostile, tiny_model_dirs, tmp_path):
    server = hostile()
    sm = _connect(server, tiny_model_dirs["gpt2"])
    (trace,) = _generate(sm)
    assert trace.surprisal.tolist() == [0.5]
    prompts, out = tmp_path / "p.txt", tmp_path / "o.jsonl"
    prompts.write_text("hi\n", encoding="utf-8")
    assert main(["generate", str(prompts), "--out", str(out), "--server", server.url, "--server-model", "tiny",
                 "--server-tokenizer", str(tiny_model_dirs["gpt2"]), "--alternatives", "1", "--quiet"]) == 0
    assert read_dataset(out, require_label=False).n_valid == 1


def test_the_reader_refuses_ids_beyond_the_vocabulary_as_the_recorder_does(tmp_path):
    """The other half of "one validation": a file row with extra.vocab_size and an id at or above it."""
    import pandas as pd

    meta = json.dumps({"source": "generate", "extra": {"vocab_size": 100}})
    rows = [dict(prompt="p", answer="ab", label=1, tokens='["a", "b"]', token_ids=ids, surprisal="[0.1, 0.2]",
                 trace_metadata=meta) for ids in ("[1, 2]", "[1, 100]")]
    path = tmp_path / "d.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    with pytest.warns(Warning):
        dataset = read_dataset(path)
    assert dataset.n_valid == 1 and "token_ids[1] is 100" in str(dataset.errors[0])


# ----------------------------------------------------------------------------------------------------------------
# 6. Every server failure is one line: deep JSON, huge integers


@pytest.mark.parametrize("mode,fragment", [("deep", "too deeply"), ("bigint", "more than 4,300 digits")])
def test_unreadable_answers_are_one_line(mode, fragment, hostile, tiny_model_dirs):
    server = hostile(post_mode=mode)
    sm = _connect(server, tiny_model_dirs["gpt2"])
    with pytest.raises(ServerError, match=fragment):
        _generate(sm)
    with pytest.raises(ServerError, match=fragment):
        score_answers(sm, ["hi"], ["x"], n_alternatives=1)


@pytest.mark.parametrize("mode", ["echo-key", "bigint", "deep", "impossible", "redirect"])
def test_the_inspect_page_shows_a_server_failure_as_one_line(mode, hostile, keyed, tiny_model_dirs, monkeypatch):
    pytest.importorskip("streamlit")
    server = hostile(post_mode=mode)
    server.impossible = IMPOSSIBLE["positive log-prob"][0]
    server.target = server.url
    monkeypatch.setenv("TRACE_SERVER_KEYS", f"{server.url}=OPENAI_API_KEY")  # the key goes to this server
    at = _server_session(server, tiny_model_dirs)
    at.text_area(key="prompt").set_value("hi")
    at.get("form_submit_button")[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [html.unescape(e.value) for e in at.error]
    assert len(errors) == 1 and "\n" not in errors[0] and KEY not in errors[0], errors
    assert f"Bearer {KEY}" in server.keys_seen()


# ----------------------------------------------------------------------------------------------------------------
# 7. Prefix entries, the tokenizer's folder


def test_allow_list_prefixes_are_compared_normalised(monkeypatch):
    pytest.importorskip("streamlit")
    from app.services import check_server_allowed

    monkeypatch.setenv("TRACE_MODEL_SERVERS", "http://10.0.0.5:8000/team-a")
    check_server_allowed("http://10.0.0.5:8000/team-a")
    check_server_allowed("http://10.0.0.5:8000/team-a/v1")
    check_server_allowed("http://10.0.0.5:8000//team-a/./sub/")
    for bad in ("http://10.0.0.5:8000/team-a/../team-b", "http://10.0.0.5:8000/team-a/%2e%2e/team-b",
                "http://10.0.0.5:8000/team-a/%2E%2E/team-b", "http://10.0.0.5:8000/team-ab",
                "http://10.0.0.5:8000/team-a/..", "http://10.0.0.5:8000/team-a/%2e%2e%2fteam-b"):
        with pytest.raises(ValueError, match="TRACE_MODEL_SERVERS"):
            check_server_allowed(bad)
    assert base_url_of("http://H:8000/team-a/x/%2e%2e/y/v1/") == "http://h:8000/team-a/y"  # and sent that way
    with pytest.raises(ValueError):
        base_url_of("http://h:8000/a%00b")


def test_a_served_name_that_is_a_folder_obeys_the_model_allow_list(hostile, tiny_model_dirs, monkeypatch):
    pytest.importorskip("streamlit")
    from app import services
    from trace_core.record import ModelNotAllowedError

    folder = str(tiny_model_dirs["gpt2"])
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", "/nowhere/allowed-model")
    server = hostile()
    server.served_name = folder
    with pytest.raises(ModelNotAllowedError):
        services.get_model(folder)  # typed directly: refused
    with pytest.raises(ModelNotAllowedError):
        services.get_server(server.url, folder)  # as the served name (its tokenizer would load from there)
    assert server.requests == []


# ----------------------------------------------------------------------------------------------------------------
# 17. The command line's words for server options


def test_cli_server_option_messages_are_the_users_words(hostile, tiny_model_dirs, tmp_path, capsys):
    server = hostile(get_mode="redirect")
    server.target = "http://127.0.0.1:9"
    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n", encoding="utf-8")
    base = ["generate", str(prompts), "--out", str(tmp_path / "o.jsonl"), "--server-model", "tiny",
            "--server-tokenizer", str(tiny_model_dirs["gpt2"]), "--quiet"]
    cases = [(["--server", server.url, "--timeout", "1e300"], "--timeout must be"),
             (["--server", server.url, "--api-key-env", "A B"], "--api-key-env must be"),
             (["--server", server.url], "redirected to http://127.0.0.1:9;")]  # a loop or not: one line
    for options, fragment in cases:
        assert main([*base, *options]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err and "time_t" not in err, err


def _server_session(server, tiny_model_dirs, page=None):
    """A dashboard session whose sidebar model is ``server`` (serving "tiny"), on ``page`` (default Inspect)."""
    return server_dashboard(server.url, tiny_model_dirs["gpt2"], page)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["echo-key", "bigint"])
def test_record_buttons_and_compare_show_a_server_failure_as_one_line(mode, hostile, keyed, tiny_model_dirs,
                                                                      monkeypatch, tmp_path):
    pytest.importorskip("streamlit")
    import pandas as pd

    server = hostile(post_mode=mode)
    monkeypatch.setenv("TRACE_SERVER_KEYS", f"{server.url}=OPENAI_API_KEY")
    plain = tmp_path / "plain.csv"
    pd.DataFrame({"prompt": ["Q: 2 + 2 =", "Q: 3 + 4 ="], "answer": [" 4", " 7"], "label": [1, 0]}).to_csv(
        plain, index=False)
    for page, source, upload, button in [("../pages/calibrate.py", "data_source", "upload", "record"),
                                         ("../pages/flag.py", "flag_data_source", "flag_upload", "flag_record")]:
        at = _server_session(server, tiny_model_dirs, page)
        at.radio(key=source).set_value("Upload a file").run()
        at.file_uploader(key=upload).set_value((plain.name, plain.read_bytes(), "text/csv")).run()
        at.button(key=button).click().run()
        assert not at.exception, (page, [e.value for e in at.exception])
        errors = [html.unescape(e.value) for e in at.error]
        assert len(errors) == 1 and "Recording stopped" in errors[0] and KEY not in errors[0], (page, errors)

    at = _server_session(server, tiny_model_dirs, "../pages/compare.py")
    at.text_area(key="compare_prompt").set_value("hi").run()
    at.button(key="compare_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [html.unescape(e.value) for e in at.error]
    assert len(errors) == 1 and KEY not in errors[0] and "\n" not in errors[0], errors
