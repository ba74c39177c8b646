"""Streamlit pages through AppTest (no browser), and the pure rendering components."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import dashboard, labeled_answers, make_trace

pytest.importorskip("streamlit")
pytest.importorskip("torch")

from app.figures import trace_figure  # noqa: E402
from app.heatmap import heatmap_html  # noqa: E402
from app.state import CALIBRATED_DATA, Answers  # noqa: E402
from trace_core import EvaluationConfig, Trace, evaluate, read_dataset, write_dataset  # noqa: E402
from trace_core.methods.registry import METRICS  # noqa: E402
from trace_core.report.figures import reliability_figure, risk_coverage_figure, roc_figure  # noqa: E402

HOSTILE = ["<img src=x onerror=alert(1)>", "<script>alert(2)</script>", "$x$", ":red[x]", "a\u202eb", "\x07",
           "javascript:alert(3)", "x" * 10_000]


def hostile_trace() -> Trace:
    tokens = tuple(HOSTILE)
    n = len(tokens)
    return Trace(prompt="p", answer="".join(tokens), token_ids=np.arange(n), tokens=tokens,
                 surprisal=np.linspace(0.1, 3, n), entropy=np.linspace(0.2, 2, n), top_ids=np.zeros((n, 1)),
                 top_logprobs=np.full((n, 1), -0.5), top_tokens=tuple(("<b>alt</b>",) for _ in range(n)))


def test_heatmap_escapes_every_token_and_tooltip():
    out = heatmap_html(hostile_trace(), alternatives=lambda t, i: list(t.top_tokens[i]))
    assert "<img" not in out and "<script" not in out and "<b>alt" not in out
    assert "&lt;img src=x onerror=alert(1)&gt;" in out and "&lt;script&gt;" in out
    assert "\u202e" not in out and "\\u202e" in out and "\x07" not in out
    assert "+9800 chars" in out  # a 10k-character token is shortened on the page
    assert out.count('class="tr-tok') == len(HOSTILE)


def test_heatmap_keeps_whitespace_and_marks_spikes():
    trace = make_trace([0.1, 0.1, 5.0, 0.1], [0.1, 0.1, 3.0, 0.1])
    trace = Trace(**{**{f: getattr(trace, f) for f in ("prompt", "token_ids", "surprisal", "entropy", "top_ids",
                                                         "top_logprobs")}, "tokens": ("a", " b\n", "\tc", " d"),
                     "answer": "a b\n\tc d"})
    out = heatmap_html(trace, signal="entropy")
    assert "<br/>" in out and "&emsp;" in out
    assert 'tr-spike' in out and 'data-index="2"' in out


@pytest.mark.parametrize("fn", [trace_figure])
def test_trace_figure_builds(fn):
    fig = fn(make_trace([0.1, 2.0, 0.3, 0.2, 0.1], [0.5, 2.5, 0.4, 0.3, 0.2]))
    assert len(fig.data) >= 2


def test_trace_figure_hover_labels_are_escaped():
    labels = [str(x) for x in trace_figure(hostile_trace()).data[0].customdata]
    assert not any("<" in label for label in labels)  # Plotly would render <b>, <span style>, <a> from them
    assert "&lt;img src=x onerror=alert(1)&gt;" in labels and "a\\u202eb" in labels


def test_calibration_figures_build():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    p = {"A": rng.random(200), "B": np.clip(y * 0.6 + rng.random(200) * 0.4, 0, 1)}
    assert "ECE" in reliability_figure(y, p, n_bins=8).data[1].name
    assert "AURC" in risk_coverage_figure(y, p).data[1].name
    assert "AUROC" in roc_figure(y, p).data[1].name


@pytest.fixture
def labeled_files(tmp_path):
    frame, traces = labeled_answers(90, seed=9, prompt="Q{i}: <b>hi</b>")
    with_traces = tmp_path / "with_traces.jsonl"
    write_dataset(frame, with_traces, traces=traces)
    plain = tmp_path / "plain.csv"
    frame.head(6).assign(label=[1, 0, 1, 0, 1, "maybe"]).to_csv(plain, index=False)
    return with_traces, plain


def start(tiny_model_dirs, monkeypatch, page=None, data_dir=None):
    """The app with the tiny GPT-2 chosen in the sidebar; with ``data_dir``, "File path" reads files inside it."""
    if data_dir is not None:
        monkeypatch.setenv("TRACE_LOCAL_FILES", "1")
        monkeypatch.setenv("TRACE_DATA_DIR", str(data_dir))
    return dashboard(page, model=tiny_model_dirs["gpt2"])


@pytest.mark.slow
def test_inspect_page_generates_and_renders_heatmap(tiny_model_dirs, monkeypatch):
    at = start(tiny_model_dirs, monkeypatch)
    at.text_area(key="prompt").set_value("Q: 2 + 2 = <img src=x onerror=alert(1)>\nA:")
    at.get("form_submit_button")[0].click().run()
    assert not at.exception and not at.error
    assert [m.label for m in at.metric][:2] == ["TRACE confidence", "TRACE+ probability correct"]
    bodies = [h.proto.body for h in at.get("html")]
    assert any('data-testid="trace-heatmap"' in b for b in bodies)
    assert not any("<img src=x" in b for b in bodies)
    for signal in ("entropy", "risk"):
        at.radio(key="signal").set_value(signal).run()
        assert not at.exception
    assert len(at.get("plotly_chart")) == 1


def test_inspect_page_keeps_prompt_and_answer_within_the_model_context(tiny_model_dirs, monkeypatch):
    at = start(tiny_model_dirs, monkeypatch)  # the tiny GPT-2 reads 512 positions
    at.text_area(key="prompt").set_value("Q: " + "zq " * 600 + "\nA:")
    at.get("form_submit_button")[0].click().run()
    assert not at.exception
    assert any("Shorten the prompt" in e.value for e in at.error)
    at.sidebar.slider(key="max_new_tokens").set_value(64).run()
    at.text_area(key="prompt").set_value("Q: " + "1" * 480 + "\nA:")  # fits, but not with 64 new tokens
    at.get("form_submit_button")[0].click().run()
    assert not at.exception and not at.error
    assert any("The answer is limited to" in c.value for c in at.caption)
    assert len(at.session_state["inspect_trace"]) <= 64


@pytest.mark.slow
def test_calibrate_leaves_out_answers_longer_than_the_model_context(tiny_model_dirs, monkeypatch, tmp_path):
    frame = pd.DataFrame({"prompt": [f"Q: {i} + {i}?" for i in range(12)],
                          "answer": [str(2 * i) for i in range(11)] + ["9" * 2000], "label": [1, 0] * 6})
    frame.to_csv(tmp_path / "long.csv", index=False)
    at = start(tiny_model_dirs, monkeypatch, "../pages/calibrate.py", data_dir=tmp_path)
    at.radio(key="data_source").set_value("File path").run()
    at.text_input(key="data_path").set_value(str(tmp_path / "long.csv")).run()
    # The policy's message, as the command line words it; rows named by the file's row numbers.
    assert [w.value for w in at.warning if "context" in w.value] == [
        "1 answer does not fit the model's context (512 tokens, prompt and answer together) and is left out: row 12."]
    assert "11 rows have no trace (rows 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 …)." in [w.value for w in at.warning]
    at.button(key="record").click().run()
    assert not at.exception and not at.error
    handed = at.session_state[CALIBRATED_DATA]
    assert isinstance(handed, Answers) and len(handed.traces) == 11
    assert handed.frame[handed.row_column].tolist() == list(range(1, 12)) and handed.labels.tolist() == [1, 0] * 5 + [1]


def test_inspect_page_with_missing_model_says_so(monkeypatch):
    at = dashboard(model="nobody/missing-model", timeout=60)
    (error,) = [e.value for e in at.sidebar.error]  # once, as a sentence
    assert "not found locally" in error and error[0].isupper() and html.unescape(error).endswith(".")
    assert not any("not found locally" in m.value for m in [*at.main.info, *at.main.error])  # the page points to it
    assert any("could not be loaded (the sidebar says why)" in m.value for m in at.main.info)


def calibrated(tiny_model_dirs, monkeypatch, labeled_files):
    """The Calibrate page run on the labeled file with traces, 3 splits; returns (AppTest, file path)."""
    with_traces, _ = labeled_files
    at = start(tiny_model_dirs, monkeypatch, "../pages/calibrate.py", data_dir=with_traces.parent)
    at.radio(key="data_source").set_value("File path").run()
    at.text_input(key="data_path").set_value(str(with_traces)).run()
    at.slider(key="n_splits").set_value(3)
    at.get("form_submit_button")[0].click().run()
    assert not at.exception and not at.error
    return at, with_traces


@pytest.mark.slow
def test_calibrate_switches_calibrator_and_shows_the_paired_comparison(tiny_model_dirs, monkeypatch, labeled_files):
    at, with_traces = calibrated(tiny_model_dirs, monkeypatch, labeled_files)
    dataset = read_dataset(with_traces)
    result = evaluate(dataset.traces, dataset.labels, config=EvaluationConfig(n_splits=3))
    for calibrator in ("platt", "isotonic"):
        at.radio(key="scalar_calibrator").set_value(calibrator).run()
        table = at.dataframe[0].value.set_index("method")
        expected = result.table(calibrator=calibrator)
        np.testing.assert_allclose(table.loc[expected.index, "brier"], expected["brier"])
        name = {"platt": "Platt scaling", "isotonic": "isotonic regression"}[calibrator]
        assert any(name in c.value for c in at.caption)
    paired = at.dataframe[1].value
    assert list(paired.columns) == ["metric", "TRACE+ − best baseline", "TRACE+ − reference", "TRACE − best baseline",
                                    "TRACE − reference"]
    assert paired["metric"].tolist() == [spec.title for spec in METRICS.values()]
    table = result.paired.table(calibrator="isotonic", versus=("best baseline", "Likelihood LR (reference)"))
    cell = table.set_index(["method", "versus"]).loc[("TRACE+", "Likelihood LR (reference)"), "auroc"]
    assert paired.set_index("metric").loc["AUROC ↑", "TRACE+ − reference"] == cell
    # The verdict: TRACE+ against the best baseline and the reference, with AUROC intervals; the skill line
    assert any("the best baseline" in i.value and "supervised likelihood reference" in i.value
               and "mean over splits" in i.value for i in at.info)
    assert any("Brier skill score" in c.value for c in at.caption)


@pytest.mark.slow
def test_calibrate_plots_the_baselines_the_verdict_compares_with(tiny_model_dirs, monkeypatch, labeled_files):
    """The plots show, by default, the best baselines that the verdict names first (chosen most often on the
    calibration parts, for Brier and for AUROC), as the report does, then SeqLogP and Mean Entropy; the reliability
    figure draws each of them."""
    at, with_traces = calibrated(tiny_model_dirs, monkeypatch, labeled_files)
    dataset = read_dataset(with_traces)
    result = evaluate(dataset.traces, dataset.labels, config=EvaluationConfig(n_splits=3))
    most = [next(iter(result.paired.get("TRACE+", "best baseline", m, "platt")["chosen_counts"]))
            for m in ("brier", "auroc")]
    assert set(most) - {"SeqLogP", "Mean Entropy"}  # the fixture's data: another baseline is chosen
    assert all(m in result.verdict().sentence for m in most)
    shown = at.multiselect(key="plot_baselines").value
    assert shown == list(dict.fromkeys([*most, "SeqLogP", "Mean Entropy"]))
    figure = json.loads(at.get("plotly_chart")[0].proto.spec)
    names = " ".join(str(trace.get("name", "")) for trace in figure["data"])
    assert all(m in names for m in shown), names
    # The user's own choice stays while the best baselines do not change (another plot setting)
    at.multiselect(key="plot_baselines").set_value(["MinProb"]).run()
    at.slider(key="n_bins").set_value(7).run()
    assert at.multiselect(key="plot_baselines").value == ["MinProb"]


@pytest.mark.slow
def test_calibrate_then_flag_pages(tiny_model_dirs, monkeypatch, labeled_files):
    at, with_traces = calibrated(tiny_model_dirs, monkeypatch, labeled_files)
    assert len(at.get("plotly_chart")) == 3
    table = at.dataframe[0].value
    assert {"TRACE+", "TRACE", "SeqLogP"} <= set(table["method"])
    assert at.session_state["calibrator"] is not None
    # The table is EvaluationResult.table() of the same protocol (rows in method order), headers from the registry.
    dataset = read_dataset(with_traces)
    expected = evaluate(dataset.traces, dataset.labels, config=EvaluationConfig(n_splits=3)).table()
    assert table["method"].tolist() == expected.index.tolist()
    pd.testing.assert_frame_equal(table.set_index("method").drop(columns="note"), expected, check_names=False)
    assert table.set_index("method").loc["Likelihood LR (reference)", "note"] == "supervised reference"
    headers = {name: column["label"] for name, column in json.loads(at.dataframe[0].proto.columns).items()
               if "label" in column}
    assert headers == {"method": "method", "family": "family", **{m: spec.title for m, spec in METRICS.items()},
                       **{f"{m}_std": "±" for m in METRICS}}
    at.radio(key="bin_strategy").set_value("quantile").run()
    assert not at.exception

    at.switch_page("../pages/flag.py").run()
    assert not at.exception and not at.error
    assert at.metric[0].label == "Flagged"
    for mode in ("risk", "coverage"):
        at.radio(key="flag_mode").set_value(mode).run()
        assert not at.exception and not at.error


@pytest.mark.slow
def test_a_calibrator_from_another_model_is_named_on_flag_and_inspect(tiny_model_dirs, monkeypatch, labeled_files):
    at, _ = calibrated(tiny_model_dirs, monkeypatch, labeled_files)
    model = at.session_state["calibrator"].model
    # as if fitted on another model's top-k traces (the file's synthetic traces name no model)
    model.provenance_ = {**model.provenance_, "model_id": ["org/another-model"], "entropy_source": ["top_k"]}
    at.switch_page("../pages/flag.py").run()
    assert not at.exception
    assert any("fitted on traces of entropy source 'top_k'" in html.unescape(w.value) for w in at.warning)
    at.switch_page("../pages/inspect.py").run()
    at.text_area(key="prompt").set_value("Q: 2 + 2 =\nA:")
    at.get("form_submit_button")[0].click().run()
    assert not at.exception
    assert any("'org/another-model'" in html.unescape(w.value) and "miscalibrated" in w.value for w in at.warning)


@pytest.mark.slow
def test_calibrate_records_missing_traces_and_reports_bad_rows(tiny_model_dirs, monkeypatch, labeled_files):
    _, plain = labeled_files
    at = start(tiny_model_dirs, monkeypatch, "../pages/calibrate.py", data_dir=plain.parent)
    at.radio(key="data_source").set_value("File path").run()
    at.text_input(key="data_path").set_value(str(plain)).run()
    assert any("5 kept, 1 rejected" in w.value for w in at.warning)
    assert "5 rows have no trace (rows 1, 2, 3, 4, 5)." in [w.value for w in at.warning]
    at.button(key="record").click().run()
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 3  # recorded, then evaluated


def test_flag_measures_the_calibrate_answers_with_out_of_fold_probabilities(tiny_model_dirs, monkeypatch,
                                                                            labeled_files):
    from trace_core.flagging.flag import out_of_fold_probabilities

    at, _ = calibrated(tiny_model_dirs, monkeypatch, labeled_files)
    active = at.session_state["calibrator"]
    data = at.session_state["flag_data"]
    assert active.fitted_on == data.key
    at.switch_page("../pages/flag.py").run()
    assert not at.exception
    assert any("out of fold" in c.value for c in at.caption)
    (scored,) = at.session_state["scored"].values()  # one entry
    expected = out_of_fold_probabilities(data.traces, data.labels, active.model)
    np.testing.assert_allclose(np.sort(scored["probability_correct"].to_numpy()), np.sort(expected))
    assert not np.allclose(np.sort(expected), np.sort(active.model.predict_proba(list(data.traces))))


def test_calibrate_bad_path_and_flag_without_data(tiny_model_dirs, monkeypatch, tmp_path):
    at = start(tiny_model_dirs, monkeypatch, "../pages/calibrate.py", data_dir=tmp_path)
    at.radio(key="data_source").set_value("File path").run()
    at.text_input(key="data_path").set_value(str(tmp_path / "nope.csv")).run()
    assert any("No file at" in e.value for e in at.error)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    at.text_input(key="data_path").set_value(str(empty)).run()
    # read by path: named, but the reader's reasons (which could quote the file) are for uploads only
    assert any("not a dataset the app can read" in html.unescape(e.value) for e in at.error) and not at.exception


def test_flag_page_before_any_dataset_says_where_to_start(tiny_model_dirs, monkeypatch):
    at = start(tiny_model_dirs, monkeypatch, "../pages/flag.py")
    assert any("Fit a calibrator on the Calibrate page, or load a saved one" in i.value for i in at.info)
    assert any("No calibrator yet" in c.value for c in at.caption)


def test_allow_list_is_enforced_in_the_sidebar(tiny_model_dirs, monkeypatch):
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", str(tiny_model_dirs["llama"]))
    at = dashboard(model=tiny_model_dirs["gpt2"], timeout=60)
    assert any("allow-list" in html.unescape(e.value) for e in at.sidebar.error)  # shown escaped (md_literal)


def test_inspect_takes_a_long_paste_and_names_the_limit(tiny_model_dirs, monkeypatch):
    # The box has no character cap (a capped box dropped a longer paste silently, and Generate then said the prompt
    # was empty): the page says the limit instead, and generates nothing.
    monkeypatch.setenv("TRACE_MAX_PROMPT_CHARS", "40")
    at = start(tiny_model_dirs, monkeypatch)
    at.text_area(key="prompt").set_value("y" * 41)
    at.get("form_submit_button")[0].click().run()
    assert not at.exception
    assert [w.value for w in at.warning] == [
        "The prompt is 41 characters; the limit is 40 (TRACE_MAX_PROMPT_CHARS): shorten it."]
    assert at.session_state["inspect_trace"] is None if "inspect_trace" in at.session_state else True
    at.text_area(key="prompt").set_value("y" * 40)
    at.get("form_submit_button")[0].click().run()
    assert not any("TRACE_MAX_PROMPT_CHARS" in w.value for w in at.warning)
    assert at.session_state["inspect_trace"] is not None  # at the limit: answered


def test_inspect_says_when_the_answer_was_cut_at_the_token_limit(tiny_model_dirs, monkeypatch):
    at = start(tiny_model_dirs, monkeypatch)
    at.sidebar.slider(key="max_new_tokens").set_value(1).run()
    at.text_area(key="prompt").set_value("Q: What is 2 plus 2?\nA:")
    at.get("form_submit_button")[0].click().run()
    assert not at.exception
    trace = at.session_state["inspect_trace"]
    assert len(trace) == 1 and trace.metadata.extra.get("finish_reason") == "length"
    warnings = " ".join(w.value for w in at.warning)
    assert "cut at the token limit" in warnings or "only whitespace" in warnings, warnings


def test_unfinished_note_by_hand():
    import dataclasses

    from helpers import make_trace

    from app.explain import unfinished_note
    from trace_core import TraceMetadata

    def ended(trace, reason, answer=None):
        tokens = trace.tokens if answer is None else (answer,) + ("",) * (len(trace) - 1)
        return dataclasses.replace(trace, answer="".join(tokens), tokens=tokens,
                                   metadata=TraceMetadata(extra={"finish_reason": reason}))

    assert unfinished_note(ended(make_trace([0.1, 0.2]), "eos")) is None
    assert "cut at the token limit (2 new tokens)" in unfinished_note(ended(make_trace([0.1, 0.2]), "length"))
    assert "only whitespace, cut at the token limit" in unfinished_note(ended(make_trace([0.1]), "length", " "))


@pytest.mark.slow
def test_calibrate_shows_results_per_group_with_an_average(tiny_model_dirs, monkeypatch):
    datasets = Path(__file__).resolve().parents[2] / "assets" / "datasets"
    at = start(tiny_model_dirs, monkeypatch, "../pages/calibrate.py", data_dir=datasets)
    at.radio(key="data_source").set_value("File path").run()
    at.text_input(key="data_path").set_value(str(datasets / "real_test.csv")).run()
    at.slider(key="n_splits").set_value(3)
    at.checkbox(key="stratified").check()
    at.get("form_submit_button")[0].click().run()
    assert not at.exception, at.exception
    options = at.selectbox(key="group_by").options
    assert "family" in options and "prompt" not in options and "tokens" not in options
    at.selectbox(key="group_by").set_value("family").run()
    assert not at.exception, at.exception
    labels = [t.label for t in at.tabs]
    groups = [label for label in labels if "family" in html.unescape(label)]
    assert len(groups) == 4 and "average" in labels
    tables = [d.value for d in at.dataframe][2:]  # after the metrics and paired tables
    assert len(tables) == 5 and all("TRACE+" in set(t["method"]) for t in tables)
    verdicts = [i.value for i in at.info if "TRACE+" in html.unescape(i.value)]
    assert len(verdicts) >= 5  # the overall one and one per group and the average
    word = (pd.read_csv(datasets / "real_test.csv", usecols=["family"])["family"] == "word_problems").sum()
    assert any(html.unescape(c.value).startswith(f"{word:,} answers, 7.3% correct") for c in at.caption)


def test_a_flagged_export_opens_on_flag_and_is_scored_again(tiny_model_dirs, monkeypatch, labeled_files, tmp_path):
    from trace_core.cli import main
    from trace_core.data import read_dataset

    with_traces, _ = labeled_files
    calibrator = tmp_path / "cal.json"
    export = tmp_path / "flagged.jsonl"
    assert main(["fit", str(with_traces), "--out", str(calibrator), "--quiet"]) == 0
    assert main(["flag", str(with_traces), "--calibrator", str(calibrator), "--coverage", "0.5", "--out", str(export),
                 "--quiet"]) == 0
    at = start(tiny_model_dirs, monkeypatch, "../pages/flag.py", data_dir=tmp_path)
    from app.calibrators import fitted_calibrator
    from trace_core import load_calibrator

    at.session_state["calibrator"] = fitted_calibrator(load_calibrator(calibrator.read_bytes()), origin="loaded")
    at.radio(key="flag_data_source").set_value("File path").run()
    at.text_input(key="flag_data_path").set_value(str(export)).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    (scored,) = at.session_state["scored"].values()
    before = read_dataset(export).frame.set_index("prompt")["probability_correct"].astype(float)
    np.testing.assert_allclose(scored.set_index("prompt").loc[before.index, "probability_correct"], before)


@pytest.mark.slow
def test_calibrate_offers_any_score_for_flagging_defaulting_to_the_lowest_brier(tiny_model_dirs, monkeypatch,
                                                                                 labeled_files):
    from trace_core import ScoreCalibrator, TracePlus
    from trace_core.flagging.flag import best_flag_score, flag_scores

    at, with_traces = calibrated(tiny_model_dirs, monkeypatch, labeled_files)
    dataset = read_dataset(with_traces)
    result = evaluate(dataset.traces, dataset.labels, config=EvaluationConfig(n_splits=3))
    best = best_flag_score(flag_scores(result))
    choice = at.selectbox(key="flag_score")
    assert choice.value == best.name and len(choice.options) == len(flag_scores(result))
    assert f"held-out Brier {best.brier:.3f} (lowest)" in choice.format_func(best.name)
    active = at.session_state["calibrator"]
    expected = best.calibrator_model().fit(list(dataset.traces), dataset.labels)
    assert type(active.model) is type(expected) and active.model.get_params() == expected.get_params()
    np.testing.assert_allclose(active.model.predict_proba(list(dataset.traces)),
                               expected.predict_proba(list(dataset.traces)))
    (default,) = [c.value for c in at.caption if "lowest mean Brier" in c.value]
    # with too few answers to tell the best (the table bolds nothing), the default says it may be chance
    assert ("With this few answers that may be chance" in default) is result.small_sample

    # another score: the active calibrator follows, and the saved file names it
    other = "SeqLogP with isotonic regression" if best.name != "SeqLogP with isotonic regression" else "TRACE+"
    at.selectbox(key="flag_score").set_value(other).run()
    assert not at.exception
    model = at.session_state["calibrator"].model
    assert isinstance(model, ScoreCalibrator if other.startswith("SeqLogP") else TracePlus)
    assert any("you chose another" in c.value for c in at.caption)
    if isinstance(model, ScoreCalibrator):
        assert json.loads(model.to_json())["params"]["method"] == "SeqLogP"
        at.switch_page("../pages/flag.py").run()
        assert not at.exception and not at.error
        assert any("SeqLogP with isotonic regression fitted on the other" in html.unescape(c.value) for c in at.caption)
        # the same choice on Flag & export, kept from Calibrate; changing it here changes the active calibrator
        assert at.selectbox(key="flag_score").value == other
        at.selectbox(key="flag_score").set_value(best.name).run()
        assert not at.exception and not at.error
        model = at.session_state["calibrator"].model
        assert model.get_params() == expected.get_params() and model.score_name == best.name
        assert f"Active calibrator:** {best.name}" in html.unescape(at.caption[1].value)
        (scored,) = at.session_state["scored"].values()
        from trace_core.flagging.flag import out_of_fold_probabilities

        np.testing.assert_allclose(np.sort(scored["probability_correct"].to_numpy()), np.sort(
            out_of_fold_probabilities(list(dataset.traces), dataset.labels, model)))
        at.switch_page("../pages/inspect.py").run()
        at.text_area(key="prompt").set_value("Q: 2 + 2 =\nA:")
        at.get("form_submit_button")[0].click().run()
        assert not at.exception
        assert f"{best.method} probability correct" in [m.label for m in at.metric]


def test_flag_judges_answers_by_their_riskiest_span_on_request(tiny_model_dirs, monkeypatch, labeled_files):
    at, _ = calibrated(tiny_model_dirs, monkeypatch, labeled_files)
    at.switch_page("../pages/flag.py").run()
    at.radio(key="flag_mode").set_value("coverage").run()
    by_answer = at.dataframe[0].value
    assert {"riskiest_span_text", "riskiest_span_probability"} <= set(by_answer.columns)
    assert by_answer["probability_correct"].is_monotonic_increasing
    at.radio(key="flag_by").set_value("span").run()
    assert not at.exception and not at.error
    by_span = at.dataframe[0].value
    assert by_span["riskiest_span_probability"].is_monotonic_increasing
    (scored,) = at.session_state["scored"].values()
    from trace_core.flagging.flag import select_flagged

    expected = select_flagged(scored, coverage=0.8, by="span")
    assert by_span["riskiest_span_text"].tolist() == expected["riskiest_span_text"].tolist()
    at.radio(key="flag_mode").set_value("guarantee").run()
    assert at.radio(key="flag_by").disabled  # the guarantee is on the answer's probability


def test_inspect_boxes_and_lists_the_answers_spans(tiny_model_dirs, monkeypatch):
    at = start(tiny_model_dirs, monkeypatch, "../pages/inspect.py")
    at.text_area(key="prompt").set_value("Q: What is 12 plus 7?\nA:")
    at.get("form_submit_button")[0].click().run()
    assert not at.exception
    trace = at.session_state["inspect_trace"]
    from app.text import visible_token
    from trace_core import rank_spans, span_risks
    from trace_core.methods.spans import default_span_calibrator

    risks = span_risks(trace, calibrator=default_span_calibrator())
    expected = [r.span.text for r in rank_spans(risks, level="fine") + rank_spans(risks, level="sentence")]
    assert any(h.value == "Spans by risk" for h in at.subheader)
    table = at.dataframe[0].value
    assert table["span"].tolist() == [visible_token(t)[:200] for t in expected]
    assert table["probability right"].between(0, 1).all()
    heatmap = next(h.proto.body for h in at.get("html") if "trace-heatmap" in h.proto.body)
    fine = sum(r.kind != "sentence" for r in risks)
    assert heatmap.count('class="tr-span-rank"') == (min(3, fine) if fine else 1)
