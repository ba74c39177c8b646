"""A calibrator JSON is untrusted input: every field is checked, the size and nesting are capped, and each problem is
one clear line naming the field (issue 13, items 2, 13 and 14)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import random_traces

from trace_core import IsotonicCalibrator, PlattCalibrator, TracePlus, calibrator_from_json, trace_confidence
from trace_core.calibration.calibrators import load_calibrator
from trace_core.calibration.reading import MAX_CALIBRATOR_BYTES

PAGE = Path(__file__).resolve().parents[3] / "pages" / "flag.py"


@pytest.fixture(scope="module")
def fitted():
    traces = random_traces(120, seed=5)
    conf = trace_confidence(traces)
    y = (conf > np.median(conf)).astype(int)
    y[:7] = 1 - y[:7]
    return {"traces": traces, "score": conf,
            "TracePlus": TracePlus().fit(traces, y),
            "extended": TracePlus(feature_set="extended", C=0.3, max_iter=50).fit(traces, y),
            "surprisal": TracePlus(feature_set="surprisal").fit(traces, y),
            "PlattCalibrator": PlattCalibrator(C=0.5).fit(conf, y),
            "IsotonicCalibrator": IsotonicCalibrator().fit(conf, y)}


def _obj(fitted, kind="TracePlus"):
    return json.loads(fitted[kind].to_json())


def _refused(data, *fragments):
    """Every loader refuses ``data`` with a ValueError whose message holds each fragment, never a traceback of
    another kind; returns the message."""
    loaders = [calibrator_from_json]
    kind = data.get("type") if isinstance(data, dict) else None
    if kind in ("TracePlus", "PlattCalibrator", "IsotonicCalibrator"):
        loaders.append({"TracePlus": TracePlus, "PlattCalibrator": PlattCalibrator,
                        "IsotonicCalibrator": IsotonicCalibrator}[kind].from_json)
    text = data if isinstance(data, str) else json.dumps(data)
    message = ""
    for load in loaders:
        with pytest.raises(ValueError) as info:
            load(text)
        message = str(info.value)
        for fragment in fragments:
            assert fragment in message, message
        assert len(message) < 2_000
    with pytest.raises(ValueError):
        load_calibrator(text.encode("utf-8"))
    return message


@pytest.mark.parametrize("kind", ["TracePlus", "extended", "surprisal", "PlattCalibrator", "IsotonicCalibrator"])
def test_every_calibrator_written_by_to_json_round_trips_exactly(fitted, kind):
    model = fitted[kind]
    text = model.to_json()
    for loaded in (type(model).from_json(text), calibrator_from_json(text), calibrator_from_json(json.loads(text)),
                   load_calibrator(text.encode()), load_calibrator(b"\xef\xbb\xbf" + text.encode()),
                   calibrator_from_json("\ufeff" + text)):
        assert type(loaded) is type(model)
        assert loaded.to_json() == text
        x = fitted["traces"] if isinstance(model, TracePlus) else fitted["score"]
        np.testing.assert_array_equal(loaded.predict_proba(x), model.predict_proba(x))


@pytest.mark.parametrize("field, value, fragment", [
    ("intercept", float("nan"), "'intercept' must be a finite number, got nan"),
    ("intercept", float("inf"), "'intercept' must be a finite number, got inf"),
    ("intercept", float("-inf"), "'intercept' must be a finite number, got -inf"),
    ("intercept", "0.5", "'intercept' must be a number, got '0.5' (a string)"),
    ("intercept", True, "'intercept' must be a number, got True (a boolean)"),
    ("intercept", [1.0], "'intercept' must be a number, got [1.0] (a list)"),
    ("intercept", None, "'intercept' must be a number, got None (null)"),
    ("intercept", 1e200, "'intercept' must be at most 1e+150 in size"),
    ("n_samples", float("inf"), "'n_samples' must be a whole number, got inf"),
    ("n_samples", 12.5, "'n_samples' must be a whole number, got 12.5"),
    ("n_samples", -1, "'n_samples' must be in [2,"),
    ("n_samples", 0, "'n_samples' must be in [2,"),  # a fit has answers of both classes
    ("mean", [1e300] + [0.0] * 7, "'mean[0]' must be at most 1e+09 in size, got 1e+300"),
    ("scale", [1.0] * 7 + [1e300], "'scale[7]' must be at most 1e+09 in size, got 1e+300"),
    ("coef", [1e-310] + [1.0] * 7, "'coef[0]' must be 0 or a normal number"),
    ("intercept", -5e-324, "'intercept' must be 0 or a normal number"),
    ("n_samples", "100", "'n_samples' must be a whole number, got '100' (a string)"),
    ("coef", [1.0] * 3, "'coef' must hold 8 numbers (one per feature), got 3"),
    ("coef", {"a": 1}, "'coef' must be a list of numbers, got {'a': 1} (an object)"),
    ("coef", [1.0] * 7 + ["2"], "'coef[7]' must be a number, got '2' (a string)"),
    ("mean", [float("nan")] + [0.0] * 7, "'mean[0]' must be a finite number, got nan"),
    ("scale", [5e-324] + [1.0] * 7, "'scale[0]' must be 0 or a normal number"),
    ("scale", [1e-200] + [1.0] * 7, "'scale[0]' must be > 1e-12, got 1e-200"),
    ("scale", [-1.0] + [1.0] * 7, "'scale[0]' must be > 1e-12, got -1.0"),
    ("feature_names", "first3_entropy_conf", "'feature_names' must be a list of feature names"),
    ("feature_names", [["x"]] + ["first3_entropy_conf"] * 7, "'feature_names' must be a list of feature names"),
    ("feature_names", ["nope"] * 8, "'feature_names' holds unknown feature 'nope'"),
    ("params", [], "'params' must be an object, got [] (a list)"),
    ("params", {"feature_set": "paper", "C": 1.0, "max_iter": 10, "evil": 1}, "'params' has an unknown key 'evil'"),
    ("params", {"feature_set": ["paper"]}, "'params.feature_set' must be one of"),
    ("params", {"feature_set": "paper", "C": "1"}, "'params.C' must be a number, got '1'"),
    ("params", {"feature_set": "paper", "C": 0}, "'params.C' must be > 0, got 0.0"),
    ("params", {"feature_set": "paper", "max_iter": 1e400}, "'params.max_iter' must be a whole number, got inf"),
    ("extra", 1, "'extra' is not a field of a TracePlus calibrator"),
])
def test_traceplus_fields_are_checked_one_line_per_problem(fitted, field, value, fragment):
    obj = _obj(fitted)
    obj[field] = value
    text = json.dumps(obj)  # NaN/Infinity written as JSON's non-standard tokens, as a hostile file would
    message = _refused(text, fragment)
    assert "\n" not in message  # one problem, one line


def test_missing_fields_and_several_problems_each_get_a_line(fitted):
    obj = _obj(fitted)
    del obj["coef"]
    obj["intercept"] = "x"
    obj["scale"] = [0.0] * 8
    message = _refused(json.dumps(obj), "'coef' is missing", "'intercept' must be a number",
                       "'scale[0]' must be > 1e-12, got 0.0 (7 more bad values in 'scale')")
    assert len(message.splitlines()) == 3


def test_a_long_bad_list_gets_one_line_not_one_per_value(fitted):
    obj = _obj(fitted, "IsotonicCalibrator")
    obj["x_thresholds"] = ["a"] * 10_000
    obj["y_thresholds"] = [0.5] * 10_000
    message = _refused(json.dumps(obj), "'x_thresholds[0]' must be a number, got 'a' (a string) (9,999 more bad "
                                        "values in 'x_thresholds')")
    assert "\n" not in message


@pytest.mark.parametrize("kind, field, value, fragment", [
    ("PlattCalibrator", "intercept", float("nan"), "'intercept' must be a finite number, got nan"),
    ("PlattCalibrator", "scale", 5e-324, "'scale' must be 0 or a normal number"),
    ("PlattCalibrator", "scale", 1e-200, "'scale' must be > 1e-12, got 1e-200"),
    ("PlattCalibrator", "mean", 1e300, "'mean' must be at most 1e+09 in size"),
    ("PlattCalibrator", "coef", "1.5", "'coef' must be a number, got '1.5' (a string)"),
    ("PlattCalibrator", "mean", [0.1], "'mean' must be a number, got [0.1] (a list)"),
    ("PlattCalibrator", "params", {"C": float("-inf")}, "'params.C' must be a finite number, got -inf"),
    ("IsotonicCalibrator", "x_thresholds", [0.1, float("nan")], "'x_thresholds[1]' must be a finite number"),
    ("IsotonicCalibrator", "x_thresholds", [], "'x_thresholds' must hold"),
    ("IsotonicCalibrator", "y_thresholds", [0.1], "'y_thresholds' must hold as many numbers as 'x_thresholds'"),
    ("IsotonicCalibrator", "y_thresholds", "[0.1]", "'y_thresholds' must be a list of numbers, got '[0.1]'"),
])
def test_scalar_calibrator_fields_are_checked(fitted, kind, field, value, fragment):
    obj = _obj(fitted, kind)
    if field == "y_thresholds" and value == [0.1]:
        obj["x_thresholds"] = [0.0, 1.0]
    if field == "x_thresholds" and value == []:
        fragment = "'x_thresholds' must not be empty"
    obj[field] = value
    _refused(json.dumps(obj), fragment)


def test_isotonic_thresholds_must_be_non_decreasing(fitted):
    obj = _obj(fitted, "IsotonicCalibrator")
    obj["x_thresholds"], obj["y_thresholds"] = [0.0, 2.0, 1.0], [0.1, 0.2, 1.5]
    _refused(json.dumps(obj), "'x_thresholds' must be non-decreasing", "'y_thresholds' must be non-decreasing and in")


@pytest.mark.parametrize("text, fragment", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"type": "TracePlus", "format_version": 1, "params": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "nested too deeply"),
    ('{"type": "TracePlus", "format_version": 1, "params": {"C": [[[[[[[[[[1]]]]]]]]]]}}', "nested too deeply"),
    ('{"type": "PlattCalibrator", "format_version": 1, "mean": 0, "scale": 1, "coef": 1, "intercept": 0, '
     '"params": {"C": 1}, "intercept": NaN}', "the key 'intercept' appears twice"),
    ("not json", "calibrator: not valid JSON (Expecting value at line 1, column 1)"),
    ('{"type": "TracePlus", "format_version": 1, "n_samples": 1' + "0" * 5000 + "}",
     "calibrator: a number in the file is too long (more than 4,300 digits)"),
    ("[1, 2]", "not a calibrator JSON: expected an object, got a list"),
    ("{}", "expected an object with a 'type' field"),
    ('{"type": ["TracePlus"], "format_version": 1}', "unknown calibrator type ['TracePlus']"),
    ('{"type": "Pickle", "format_version": 1}', "unknown calibrator type 'Pickle'"),
    ('{"type": "TracePlus", "format_version": "1"}', "unsupported calibrator format_version '1'"),
    ('{"type": "TracePlus", "format_version": true}', "unsupported calibrator format_version True"),
])
def test_malformed_documents_are_one_clear_value_error(text, fragment):
    message = _refused(text, fragment)
    assert "\n" not in message


def test_huge_strings_are_echoed_short_and_huge_texts_refused_before_parsing():
    huge_type = json.dumps({"type": "x" * 5_000_000, "format_version": 1})
    message = _refused(huge_type, "unknown calibrator type 'xxxx", "characters in all")
    assert len(message) < 400
    obj = {"type": "PlattCalibrator", "format_version": 1, "params": {"C": 1.0}, "mean": 0.0, "scale": 1.0,
           "coef": "y" * 1_000_000, "intercept": 0.0}
    assert len(_refused(json.dumps(obj), "'coef' must be a number, got 'yyy")) < 400
    too_big = " " * MAX_CALIBRATOR_BYTES + "{}"
    _refused(too_big, "a calibrator is at most 10,000,000")
    with pytest.raises(ValueError, match="the file is 10,000,002 bytes; a calibrator is at most 10,000,000 bytes"):
        load_calibrator(too_big.encode())


def test_uploaded_bytes_must_be_utf8():
    with pytest.raises(ValueError, match=r"calibrator: not UTF-8 text \(byte 1 is b'\\xff'\)"):
        load_calibrator(b"{\xff}")
    with pytest.raises(TypeError, match="calibrator data must be bytes"):
        load_calibrator("{}")


def test_a_named_type_loader_refuses_another_type(fitted):
    with pytest.raises(ValueError, match="expected a TracePlus calibrator, got 'PlattCalibrator'"):
        TracePlus.from_json(fitted["PlattCalibrator"].to_json())


def test_feature_names_must_match_the_feature_set(fitted):
    obj = _obj(fitted)
    obj["params"]["feature_set"] = "surprisal"
    _refused(json.dumps(obj), "do not match feature set 'surprisal'")


# --------------------------------------------------------------------------------------------------
# The Flag & export page's calibrator upload (item 14)
# --------------------------------------------------------------------------------------------------

def _flag_page(fitted, tmp_path):
    pytest.importorskip("streamlit")
    import pandas as pd
    from streamlit.testing.v1 import AppTest

    from app.state import CALIBRATED_DATA, CALIBRATOR, ActiveCalibrator, Answers
    from trace_core import read_dataset, write_dataset

    traces = fitted["traces"][:30]
    path = tmp_path / "runs.jsonl"
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces],
                          "label": np.arange(30) % 2})
    write_dataset(frame, path, traces=traces)
    dataset = read_dataset(path)
    at = AppTest.from_file(str(PAGE), default_timeout=60)
    at.session_state[CALIBRATOR] = ActiveCalibrator(fitted["TracePlus"], origin="fitted in a test", data=None, key="t")
    at.session_state[CALIBRATED_DATA] = Answers(frame=dataset.frame, traces=tuple(dataset.traces),
                                                labels=dataset.labels, name="runs.jsonl",
                                                row_column=dataset.row_column, key="k")
    at.run()
    assert not at.exception
    return at, CALIBRATOR


def _hostile_uploads(fitted):
    obj = _obj(fitted)
    big_n = json.dumps(obj).replace(f'"n_samples": {obj["n_samples"]}', '"n_samples": 1e400')
    nan = dict(obj, intercept=float("nan"))
    return [("n_samples.json", big_n.encode(), "'n_samples' must be a whole number, got inf"),
            ("deep.json", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
            ("nan.json", json.dumps(nan).encode(), "'intercept' must be a finite number, got nan")]


def test_flag_page_refuses_hostile_calibrators_and_keeps_the_previous_one(fitted, tmp_path):
    at, key = _flag_page(fitted, tmp_path)
    before = at.session_state[key]
    flagged = at.metric[0].value
    for name, content, fragment in _hostile_uploads(fitted):
        at.file_uploader(key="calibrator_upload").set_value((name, content, "application/json"))
        at.run()
        assert not at.exception, at.exception
        assert len(at.error) == 1
        shown = html.unescape(at.error[0].value)  # the page shows the message literally (md_literal)
        assert shown.startswith(f"{name}: not a calibrator this version can read: ") and fragment in shown
        assert at.session_state[key] is before  # the previous calibrator stays
        assert at.metric[0].value == flagged  # and the page still flags with it
        at.run()  # a rerun with the bad file still uploaded: the same one error, no traceback
        assert not at.exception and len(at.error) == 1 and at.session_state[key] is before

    good = fitted["extended"]
    at.file_uploader(key="calibrator_upload").set_value(("good.json", good.to_json().encode(), "application/json"))
    at.run()
    assert not at.exception and not at.error
    assert at.session_state[key].model.to_json() == good.to_json()
    assert at.session_state[key].origin == "loaded from 'good.json'"
    assert [html.unescape(s.value) for s in at.success] == ["Loaded good.json: it is now the active calibrator."]
    # named on the page: kind, origin, what it was fitted on
    assert any("Active calibrator:" in c.value and "loaded from 'good.json'" in html.unescape(c.value)
               for c in at.caption)


# --------------------------------------------------------------------------------------------------
# Provenance: where a calibrator came from, and a warning when it is applied elsewhere (item 12)
# --------------------------------------------------------------------------------------------------

def _from(traces, **meta):
    import dataclasses

    from trace_core.traces.trace import TraceMetadata

    return [dataclasses.replace(t, metadata=TraceMetadata(**meta)) for t in traces]


@pytest.fixture(scope="module")
def provenanced(fitted):
    traces = _from(fitted["traces"], model_id="org/model-a", tokenizer="tok-a", entropy_source="exact")
    y = (trace_confidence(traces) > np.median(trace_confidence(traces))).astype(int)
    return traces, TracePlus(feature_set="extended").fit(traces, y)


def test_fit_records_where_the_calibrator_came_from(provenanced):
    import warnings
    from datetime import datetime

    import trace_core

    traces, model = provenanced
    expected = {"model_id": ["org/model-a"], "model_digest": [], "tokenizer": ["tok-a"], "entropy_source": ["exact"],
                "source": ["generate"],
                "feature_set": "extended", "n_rows": len(traces), "version": trace_core.__version__}
    assert {k: v for k, v in model.provenance_.items() if k != "date"} == expected
    assert datetime.fromisoformat(model.provenance_["date"]).tzinfo is not None
    text = model.to_json()
    assert json.loads(text)["provenance"] == model.provenance_
    loaded = calibrator_from_json(text)
    assert loaded.provenance_ == model.provenance_ and loaded.to_json() == text
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same model and entropy source: no warning
        np.testing.assert_array_equal(loaded.predict_proba(traces), model.predict_proba(traces))


@pytest.mark.parametrize("meta, named", [
    ({"model_id": "org/model-b", "entropy_source": "exact"}, ["model 'org/model-a'", "model 'org/model-b'"]),
    ({"model_id": "org/model-a", "entropy_source": "top_k"}, ["entropy source 'exact'", "entropy source 'top_k'"]),
])
def test_applying_a_calibrator_to_other_traces_warns_naming_both(provenanced, meta, named):
    traces, model = provenanced
    other = _from(traces[:20], tokenizer="tok-a", **meta)
    for calibrator in (model, calibrator_from_json(model.to_json())):
        with pytest.warns(UserWarning) as record:
            p = calibrator.predict_proba(other)
        assert p.shape == (20,)
        message = " ".join(str(w.message) for w in record)
        assert "this calibrator was fitted on traces of" in message
        for fragment in named:
            assert fragment in message, message


def test_calibrators_without_provenance_still_load_and_do_not_warn(provenanced, fitted):
    import warnings

    traces, model = provenanced
    obj = json.loads(model.to_json())
    del obj["provenance"]
    old = calibrator_from_json(json.dumps(obj))
    assert old.provenance_ is None
    matrix = TracePlus().fit(np.random.default_rng(0).random((20, 8)), np.arange(20) % 2)
    assert matrix.provenance_["model_id"] == [] and matrix.provenance_["n_rows"] == 20
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        old.predict_proba(_from(traces[:5], model_id="org/model-b"))
        matrix.predict_proba(_from(traces[:5], model_id="org/model-b"))


@pytest.mark.parametrize("mutate, fragment", [
    (lambda p: p.update(n_rows="120"), "'provenance.n_rows' must be a whole number, got '120'"),
    (lambda p: p.update(model_id="org/model-a"), "'provenance.model_id' must be a list of at most 1,000 names"),
    (lambda p: p.update(entropy_source=["bogus"]), "'provenance.entropy_source' must hold names from"),
    (lambda p: p.update(date="yesterday"), "'provenance.date' must be an ISO 8601 date, got 'yesterday'"),
    (lambda p: p.update(version="v" * 10_000), "'provenance.version' must be text of at most 64 characters"),
    (lambda p: p.update(secret=1), "'provenance' has an unknown key 'secret'"),
    (lambda p: p.pop("feature_set"), "'provenance' lacks ['feature_set']"),
])
def test_provenance_fields_are_checked(provenanced, mutate, fragment):
    obj = json.loads(provenanced[1].to_json())
    mutate(obj["provenance"])
    _refused(json.dumps(obj), fragment)


def test_cli_flag_names_every_problem_of_a_bad_calibrator_and_warns_in_plain_lines(tmp_path, capsys):
    from trace_core.cli import main

    bad = tmp_path / "cal.json"
    bad.write_text('{"format_version": 1, "type": "PlattCalibrator", "params": {"C": 1.0}, "mean": 0, "scale": 1e-320,'
                   ' "coef": "1", "intercept": NaN}', encoding="utf-8")
    data = tmp_path / "d.csv"
    data.write_text('prompt,answer,label,tokens,surprisal,entropy\nq,a,1,"[""a""]","[0.1]","[0.2]"\n',
                    encoding="utf-8")
    assert main(["flag", str(data), "--calibrator", str(bad), "--threshold", "0.5",
                 "--out", str(tmp_path / "f.csv"), "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "scale" in err and "coef" in err and "intercept" in err
    assert "Traceback" not in err and len(err) < 1000
