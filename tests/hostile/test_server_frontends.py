"""The model server from the command line and the dashboard: --server options, one-line errors, the sidebar's
"Model server" choice and which servers the dashboard may reach."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")

from fake_server import FakeServer  # noqa: E402

from trace_core import read_dataset  # noqa: E402
from trace_core.cli import main  # noqa: E402


@pytest.fixture
def fake(tiny_model_dirs):
    server = FakeServer(tiny_model_dirs["gpt2"])
    try:
        yield server
    finally:
        server.stop()


def _server_args(fake, folder, *extra):
    return ["--server", fake.url, "--server-model", fake.served_name, "--server-tokenizer", str(folder),
            "--quiet", *extra]


def _generate_both(fake, folder, tmp_path, text, tokens, served_args, local_args):
    """``trace-core generate`` of the prompts in ``text`` through the server and with the local model; the two
    datasets read back."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(text, encoding="utf-8")
    served, local = tmp_path / "served.jsonl", tmp_path / "local.jsonl"
    common = ["generate", str(prompts), "--max-new-tokens", str(tokens)]
    assert main([*common, "--out", str(served), *_server_args(fake, folder, *served_args)]) == 0
    assert main([*common, "--out", str(local), "--model", str(folder), *local_args, "--quiet"]) == 0
    return read_dataset(served, require_label=False), read_dataset(local, require_label=False)


def test_cli_generates_and_scores_through_a_server_like_a_local_model(tiny_model_dirs, fake, tmp_path):
    folder = tiny_model_dirs["gpt2"]
    a, b = _generate_both(fake, folder, tmp_path, "Q: What is 12 plus 7? A:\nThe quick brown\n", 6,
                          ["--full-distribution"], [])
    for x, y in zip(a.traces, b.traces, strict=True):
        np.testing.assert_array_equal(x.token_ids, y.token_ids)
        np.testing.assert_allclose(x.surprisal, y.surprisal, atol=1e-4)
        np.testing.assert_allclose(x.entropy, y.entropy, atol=1e-4)
        assert x.metadata.entropy_source == "exact" and x.metadata.model_id == fake.served_name

    answers = tmp_path / "answers.csv"
    pd.DataFrame({"prompt": ["Q: What is 12 plus 7? A:"], "answer": [" 19"], "label": [1]}).to_csv(answers,
                                                                                                   index=False)
    scored = tmp_path / "scored.jsonl"
    assert main(["score", str(answers), "--out", str(scored), "--alternatives", "3",
                 *_server_args(fake, folder)]) == 0
    trace = read_dataset(scored).traces[0]
    assert trace.metadata.entropy_source == "top_k" and trace.n_alternatives == 3
    lower, upper = trace.metadata.extra["entropy_lower"], trace.metadata.extra["entropy_upper"]
    assert len(lower) == len(trace) and all(lo <= hi for lo, hi in zip(lower, upper, strict=True))


def test_cli_server_errors_are_one_line(tiny_model_dirs, fake, tmp_path, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n", encoding="utf-8")
    out = str(tmp_path / "o.jsonl")
    cases = [
        (["--server", "http://127.0.0.1:9", "--server-model", "x"], "cannot reach the model server"),
        (["--server", fake.url, "--server-model", "nope", "--server-tokenizer", str(tiny_model_dirs["gpt2"])],
         "'tiny'"),  # the served models are named
        (["--server", fake.url], "--server needs --server-model"),
        (["--model", str(tiny_model_dirs["gpt2"]), "--server", fake.url, "--server-model", "tiny"],
         "not both or neither"),
        ([], "give --model (a local model; --model smollm2: the dashboard's default model) or --server URL"),
        (["--model", str(tiny_model_dirs["gpt2"]), "--full-distribution"], "--full-distribution: only with --server"),
        (["--server", fake.url, "--server-model", "tiny", "--beams", "3"], "--beams needs a local model"),
        (["--server", fake.url, "--server-model", "tiny", "--concurrency", "0"], "--concurrency"),
    ]
    for options, fragment in cases:
        assert main(["generate", str(prompts), "--out", out, "--quiet", *options]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err and fragment in err, (options, err)
        assert "Traceback" not in err


# --------------------------------------------------------------------------------------------------------------
# The dashboard


def test_dashboard_reaches_only_servers_it_may(monkeypatch):
    pytest.importorskip("streamlit")
    from app.services import check_server_allowed

    check_server_allowed("http://127.0.0.1:8000")
    check_server_allowed("http://localhost:8000/v1")
    check_server_allowed("http://127.0.0.2:8000")  # the whole loopback range
    check_server_allowed("http://[::1]:8000")
    for bad, fragment in [("http://10.0.0.5:8000", "only to model servers on its own machine"),
                          ("ftp://127.0.0.1", "not a server address"), ("127.0.0.1:8000", "not a server address"),
                          ("http://user:secret@127.0.0.1:8000", "no credentials")]:
        with pytest.raises(ValueError, match=fragment) as info:
            check_server_allowed(bad)
        assert "secret" not in str(info.value)
    monkeypatch.setenv("TRACE_MODEL_SERVERS", "http://10.0.0.5:8000")
    check_server_allowed("http://10.0.0.5:8000/v1")
    check_server_allowed("http://10.0.0.5:8000/v1/")  # compared as the back end will call it
    for bad in ("http://10.0.0.6:8000", "http://127.0.0.1:8000", "http://10.0.0.5:8001", "http://10.0.0.50:8000"):
        with pytest.raises(ValueError, match="TRACE_MODEL_SERVERS"):
            check_server_allowed(bad)
    with pytest.raises(ValueError, match="no credentials") as info:
        check_server_allowed("http://10.0.0.5:8000@evil.example:8000")  # the allowed address as a user name
    assert "evil" not in str(info.value)
    with pytest.raises(ValueError, match="not a server address"):
        check_server_allowed("http://10.0.0.5:80001")
    monkeypatch.setenv("TRACE_MODEL_SERVERS", "*")
    check_server_allowed("https://models.example:443")


def test_sidebar_model_server_records_inspect_answers(tiny_model_dirs, fake):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    app = str(__import__("pathlib").Path(__file__).resolve().parents[2] / "app" / "main.py")
    at = AppTest.from_file(app, default_timeout=120)
    at.run()
    at.sidebar.radio(key="model_source").set_value("Model server (OpenAI-compatible)").run()
    assert any("TRACE_SERVER_KEYS" in c.value for c in at.sidebar.caption)
    at.sidebar.text_input(key="server_url").set_value(fake.url)
    at.sidebar.text_input(key="server_model").set_value("tiny")
    at.sidebar.text_input(key="server_tokenizer").set_value(str(tiny_model_dirs["gpt2"])).run()
    assert not at.exception and not at.sidebar.error, [e.value for e in at.sidebar.error]
    described = " ".join(html.unescape(c.value) for c in at.sidebar.caption)
    assert "model 'tiny'" in described and "entropy estimated from the top" in described
    at.text_area(key="prompt").set_value("Q: What is 12 plus 7? A:")
    at.get("form_submit_button")[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    trace = at.session_state["inspect_trace"]
    assert trace.metadata.entropy_source == "top_k" and trace.metadata.model_id == "tiny"
    assert any("entropy is estimated from the top" in c.value for c in at.caption)
    assert any("entropy bounds" in h.proto.body for h in at.get("html"))  # in every hover card

    at.sidebar.text_input(key="server_model").set_value("nope").run()  # a name the server does not serve
    assert not at.exception and any("tiny" in html.unescape(e.value) for e in at.sidebar.error)


def test_cli_generates_through_the_chat_endpoint_like_a_local_chat_template(tiny_model_dirs, fake, tmp_path):
    folder = tiny_model_dirs["gpt2"]
    served, local = _generate_both(fake, folder, tmp_path, "Q: What is 12 plus 7? A:\n", 5,
                                   ["--server-api", "chat"], ["--chat-template"])
    (a,), (b,) = served.traces, local.traces
    np.testing.assert_array_equal(a.token_ids, b.token_ids)
    np.testing.assert_allclose(a.surprisal, b.surprisal, atol=1e-4)
    assert a.metadata.extra["api"] == "chat" and fake.bodies[-1]["messages"][0]["content"] == "Q: What is 12 plus 7? A:"


def test_the_context_check_counts_the_servers_chat_template(tiny_model_dirs, fake):
    from trace_core import connect_server
    from trace_core.policy import fit_new_tokens
    from trace_core.record import encode_prompt

    folder = str(tiny_model_dirs["gpt2"])
    plain = connect_server(fake.url, "tiny", tokenizer=folder)
    chat = connect_server(fake.url, "tiny", tokenizer=folder, api="chat")
    prompt = "Q: What is 12 plus 7? A:"
    with_template = len(encode_prompt(chat.tokenizer, prompt, chat_template=True))
    assert with_template > len(encode_prompt(chat.tokenizer, prompt, chat_template=False))
    assert fit_new_tokens(chat, prompt, max_new_tokens=4).prompt_tokens == with_template
    assert fit_new_tokens(plain, prompt, max_new_tokens=4).prompt_tokens < with_template
