"""One dashboard session never sees another's results: traces, evaluations, calibrators and scores are keyed by the
model's identity (:func:`app.keys.model_key`), not by the name it is served under; a page does not tokenize the
dataset again on every rerun; and the sidebar's refusal of a model off the allow-list says nothing about the disk."""

from __future__ import annotations

import dataclasses
import html
import shutil

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("streamlit")
torch = pytest.importorskip("torch")

from fake_server import FakeServer  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from app.state import CALIBRATOR, RECORDED  # noqa: E402
from trace_core import EvaluationConfig, evaluate, read_dataset  # noqa: E402

APP = str(__import__("pathlib").Path(__file__).resolve().parents[2] / "app" / "main.py")
SPLITS = 3


@pytest.fixture
def servers(tiny_model_dirs):
    """Two servers that both serve "tiny" with the same tokenizer but different weights."""
    a, b = FakeServer(tiny_model_dirs["gpt2"]), FakeServer(tiny_model_dirs["gpt2"])
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in b.model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.5)
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.fixture
def plain(tmp_path):
    """A labeled file without traces: the Calibrate page offers to record them."""
    rng = np.random.default_rng(0)
    x, y = rng.integers(1, 40, size=30), rng.integers(1, 40, size=30)
    wrong = np.arange(30) % 3 == 0
    answers = [f" {a + b + (7 if w else 0)}" for a, b, w in zip(x, y, wrong, strict=True)]
    path = tmp_path / "plain.csv"
    pd.DataFrame({"prompt": [f"Q: {a} + {b} =" for a, b in zip(x, y, strict=True)], "answer": answers,
                  "label": (~wrong).astype(int)}).to_csv(path, index=False)
    return path


def _serve_through(at, server, folder):
    at.sidebar.text_input(key="server_url").set_value(server.url)
    at.sidebar.text_input(key="server_model").set_value("tiny")
    at.sidebar.text_input(key="server_tokenizer").set_value(str(folder)).run()
    assert not at.exception and not at.sidebar.error, [e.value for e in at.sidebar.error]


def _session(server, folder, path):
    """A session that chose ``server`` in the sidebar and uploaded ``path`` on the Calibrate page."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    at.sidebar.radio(key="model_source").set_value("Model server (OpenAI-compatible)").run()
    _serve_through(at, server, folder)
    at.switch_page("../pages/calibrate.py").run()
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="upload").set_value((path.name, path.read_bytes(), "text/csv")).run()
    assert not at.exception, at.exception
    return at


def _record_and_evaluate(at):
    assert at.button(key="record") is not None
    at.button(key="record").click().run()
    assert not at.exception, at.exception
    at.slider(key="n_splits").set_value(SPLITS)
    at.get("form_submit_button")[0].click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    return at.dataframe[0].value


def _recorded(at):
    """The session's recorded traces (one dataset, one model), in row order."""
    (store,) = [s for s in at.session_state[RECORDED].values() if s]
    return [store[i] for i in sorted(store)]


def _own_table(traces, labels):
    from app.tables import metrics_frame
    from trace_core.methods.registry import method_names

    config = EvaluationConfig(n_splits=SPLITS, calibration_fraction=0.35, seed=0, stratified=False)
    return metrics_frame(evaluate(traces, labels, config=config, methods=list(method_names())), "platt")


@pytest.mark.slow
def test_two_sessions_with_two_servers_of_one_name_each_see_their_own_results(tiny_model_dirs, servers, plain):
    folder = tiny_model_dirs["gpt2"]
    labels = read_dataset(plain).labels
    session_a = _session(servers[0], folder, plain)
    table_a = _record_and_evaluate(session_a)
    session_b = _session(servers[1], folder, plain)
    assert any("have no trace" in w.value for w in session_b.warning)  # B records its own traces ...
    table_b = _record_and_evaluate(session_b)
    traces_a, traces_b = _recorded(session_a), _recorded(session_b)
    assert not np.allclose(traces_a[0].surprisal, traces_b[0].surprisal)  # the two servers' models differ

    # ... and is shown the results of its own traces, not A's (same file, same served name "tiny").
    pd.testing.assert_frame_equal(table_b, _own_table(traces_b, labels), check_dtype=False)
    pd.testing.assert_frame_equal(table_a, _own_table(traces_a, labels), check_dtype=False)
    assert not table_a.equals(table_b)
    for session, traces in ((session_a, traces_a), (session_b, traces_b)):  # each its own calibrator
        from trace_core.calibration.calibrators import unfitted_copy

        model = session.session_state[CALIBRATOR].model  # the score each session's comparison chose
        own = unfitted_copy(model).fit(traces, labels)
        np.testing.assert_allclose(model.predict_proba(traces), own.predict_proba(traces))


@pytest.mark.slow
def test_switching_servers_offers_to_record_again_and_switching_back_reuses_the_traces(tiny_model_dirs, servers,
                                                                                       plain):
    folder = tiny_model_dirs["gpt2"]
    at = _session(servers[0], folder, plain)
    table_a = _record_and_evaluate(at)
    _serve_through(at, servers[1], folder)  # another server, the same served name
    assert not at.exception
    assert any("30 rows have no trace" in w.value for w in at.warning), [w.value for w in at.warning]
    assert at.button(key="record") is not None and not at.dataframe
    requests = len(servers[0].bodies)
    _serve_through(at, servers[0], folder)  # back to A: its traces are still this session's
    assert not [w.value for w in at.warning if "have no trace" in w.value]
    pd.testing.assert_frame_equal(at.dataframe[0].value, table_a)
    assert len(servers[0].bodies) == requests  # nothing recorded again


def test_model_key_names_the_model_not_its_served_name(tiny_model_dirs, tiny_models, servers, tmp_path):
    from app.keys import model_key
    from trace_core import connect_server

    folder = str(tiny_model_dirs["gpt2"])
    a, b = (connect_server(s.url, "tiny", tokenizer=folder) for s in servers)
    assert a.model_id == b.model_id == "tiny" and model_key(a) != model_key(b)
    assert model_key(a) == model_key(connect_server(servers[0].url, "tiny", tokenizer=folder))  # back to A
    full = connect_server(servers[0].url, "tiny", tokenizer=folder, full_distribution=True)
    assert model_key(full) != model_key(a)  # the entropy mode changes the traces
    assert model_key(None) is None

    # Local models: by the content of their files, whatever their name.
    gpt2, llama = tiny_models["gpt2"], tiny_models["llama"]
    assert model_key(dataclasses.replace(llama, model_id=gpt2.model_id)) != model_key(gpt2)
    assert model_key(gpt2) == model_key(gpt2)
    copy = tmp_path / "copy"
    shutil.copytree(tiny_model_dirs["gpt2"], copy)
    from trace_core import load_model

    def loaded(folder):  # the id is the traces' model_id, part of the key: the same for both here
        return dataclasses.replace(load_model(folder, device="cpu"), model_id=gpt2.model_id)

    assert model_key(loaded(copy)) == model_key(gpt2)  # the same files: the same model
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    assert model_key(loaded(copy)) != model_key(gpt2)


# ------------------------------------------------------------------------------------------------------------------
# A large prompt is not tokenized again on every rerun
# ------------------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_calibrate_page_tokenizes_a_file_once_per_model(tiny_model_dirs, plain, monkeypatch):
    import app.recording

    calls = []
    original = app.recording.rows_over_context

    def counting(lm, prompts, answers, **options):
        calls.append(len(prompts))
        return original(lm, prompts, answers, **options)

    monkeypatch.setattr(app.recording, "rows_over_context", counting)
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.sidebar.radio(key="model_source").set_value("Local folder or cached model id").run()
    at.sidebar.text_input(key="model_name").set_value(str(tiny_model_dirs["gpt2"])).run()
    at.switch_page("../pages/calibrate.py").run()
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="upload").set_value((plain.name, plain.read_bytes(), "text/csv")).run()
    assert not at.exception and any("30 rows have no trace" in w.value for w in at.warning)
    assert calls == [30]
    at.run()  # a rerun (any widget), then another
    at.run()
    assert not at.exception and any("30 rows have no trace" in w.value for w in at.warning)
    assert calls == [30]
    at.sidebar.text_input(key="model_name").set_value(str(tiny_model_dirs["llama"])).run()  # another model
    assert calls == [30, 30]


# ------------------------------------------------------------------------------------------------------------------
# The allow-list's refusal says nothing about what exists on disk
# ------------------------------------------------------------------------------------------------------------------

def _names(tmp_path):
    empty = tmp_path / "no-weights"  # an existing folder without weights
    empty.mkdir()
    return [str(empty), str(tmp_path / "nonexistent-dir"), "/" + "a" * 300, "~no-such-user-3141/model"]


def _without_name(message):
    """The message with the echoed name cut out: "Model <name> is not on ..." -> "Model … is not on ..."."""
    head, sep, tail = html.unescape(message).partition(" is not on ")
    assert head.startswith("Model ") and sep, message
    return "Model … " + sep + tail


def test_the_allow_list_refuses_every_other_name_with_one_message(tiny_model_dirs, monkeypatch, tmp_path):
    from trace_core.record import ModelNotAllowedError, check_model_allowed

    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", str(tiny_model_dirs["llama"]))
    messages = set()
    for name in _names(tmp_path):
        with pytest.raises(ModelNotAllowedError) as info:
            check_model_allowed(name)
        messages.add(_without_name(str(info.value)))
    assert len(messages) == 1, messages


def test_the_sidebar_refuses_every_other_name_with_one_message(tiny_model_dirs, monkeypatch, tmp_path):
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", str(tiny_model_dirs["llama"]))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.sidebar.radio(key="model_source").set_value("Local folder or cached model id").run()
    messages = set()
    for name in _names(tmp_path):
        at.sidebar.text_input(key="model_name").set_value(name).run()
        assert not at.exception, (name, at.exception)
        (error,) = [e.value for e in at.sidebar.error]
        assert "allow-list" in html.unescape(error)
        messages.add(_without_name(error))
    assert len(messages) == 1, messages
