"""Flagging with any score: ScoreCalibrator (TRACE or a baseline, Platt or isotonic), its JSON, the choice of the
score that won the comparison, and the CLI's `fit --method`."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from helpers import make_trace, random_traces
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from trace_core import EvaluationConfig, ScoreCalibrator, Trace, TracePlus, evaluate, write_dataset
from trace_core.calibration.calibrators import (
    CalibratorFormatError,
    calibrator_from_json,
    flaggable_methods,
    method_scores,
    probability_correct,
    transform_scores,
    unfitted_copy,
)
from trace_core.cli import main
from trace_core.flagging.flag import FlagScore, best_flag_score, flag_scores, out_of_fold_probabilities, score_rows
from trace_core.methods.baselines import compute_baselines
from trace_core.methods.registry import METHODS
from trace_core.methods.risk import trace_confidence
from trace_core.traces.trace import TraceMetadata


def digit_changed(seed: int, n: int = 30) -> tuple[list[Trace], np.ndarray]:
    """Answers scored elsewhere, a third with one digit changed: the model did not expect that token (high
    surprisal) though its distribution there was sure (entropy as elsewhere)."""
    rng = np.random.default_rng(seed)
    traces, y = [], []
    for i in range(n):
        length = int(rng.integers(10, 20))
        s, h = rng.uniform(0.01, 0.3, length), rng.uniform(0.1, 0.8, length)
        wrong = i % 3 == 0
        if wrong:
            s[int(rng.integers(1, length - 1))] = rng.uniform(3, 6)
        traces.append(make_trace(s, h, k=5))
        y.append(0 if wrong else 1)
    return traces, np.array(y)


def labelled(n: int = 200, seed: int = 0) -> tuple[list[Trace], np.ndarray]:
    traces = random_traces(n, seed=seed, min_len=2)
    rng = np.random.default_rng(seed)
    mean_s = np.array([t.surprisal.mean() for t in traces])
    y = (mean_s + rng.normal(0, 0.4, n) < np.median(mean_s)).astype(int)
    return traces, y


def no_entropy(trace: Trace) -> Trace:
    return Trace(prompt=trace.prompt, answer=trace.answer, token_ids=trace.token_ids, tokens=trace.tokens,
                 surprisal=trace.surprisal, entropy=None, top_ids=np.zeros((len(trace), 0)),
                 top_logprobs=np.zeros((len(trace), 0)), metadata=TraceMetadata(entropy_source="absent"))


def test_the_flaggable_methods_are_trace_and_the_scalar_baselines_of_a_trace():
    names = flaggable_methods()
    assert names[:2] == ["TRACE", "TRACE (surprisal-only)"]
    assert {"SeqLogP", "MinProb", "Mean Entropy", "EPR"} <= set(names)
    for name in names:
        assert METHODS[name].kind in ("trace", "baseline") and METHODS[name].needs in ("trace", "top_k")
    assert not {"TRACE+", "CES", "WEPR", "Trace Profile", "Beam-Ratio", "MARS-style", "TokenSAR"} & set(names)


@pytest.mark.parametrize("method", ["TRACE", "SeqLogP", "MinProb", "Mean Entropy", "EPR"])
def test_method_scores_are_the_evaluation_scores(method):
    traces, _ = labelled(60)
    got = method_scores(traces, method)
    expected = (trace_confidence(traces) if method == "TRACE" else
                compute_baselines(traces, names=[method]).scores[method].to_numpy())
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("method", ["TRACE", "SeqLogP", "MinProb", "Mean Entropy"])
def test_platt_is_scikit_learns_logistic_regression_on_the_transformed_score(method):
    traces, y = labelled()
    model = ScoreCalibrator(method=method).fit(traces, y)
    z = transform_scores(method_scores(traces, method), METHODS[method].transform)
    zs = ((z - z.mean()) / z.std())[:, None]
    ref = LogisticRegression(C=1e4, tol=1e-10, max_iter=10_000).fit(zs, y)
    np.testing.assert_allclose(model.predict_proba(traces), ref.predict_proba(zs)[:, 1], atol=1e-6)


@pytest.mark.parametrize("method", ["TRACE", "SeqLogP", "Max Entropy"])
def test_isotonic_is_scikit_learns_isotonic_regression_on_the_transformed_score(method):
    traces, y = labelled()
    new, _ = labelled(50, seed=3)
    model = ScoreCalibrator(method=method, calibrator="isotonic").fit(traces, y)
    transform = METHODS[method].transform
    ref = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(
        transform_scores(method_scores(traces, method), transform), y)
    np.testing.assert_allclose(model.predict_proba(new),
                               ref.predict(transform_scores(method_scores(new, method), transform)), atol=1e-12)


@pytest.mark.parametrize("calibrator", ["platt", "isotonic"])
def test_fitted_on_a_calibration_part_it_gives_the_protocols_held_out_probabilities(calibrator):
    traces, y = labelled(150, seed=5)
    result = evaluate(traces, y, config=EvaluationConfig(n_splits=1, seed=2))
    held = result.held_out
    evaluated = held.rows
    calibration = np.setdiff1d(np.arange(len(traces)), evaluated)
    for method in ("TRACE", "SeqLogP", "Mean Entropy", "Entropy Variance"):
        model = ScoreCalibrator(method=method, calibrator=calibrator).fit([traces[i] for i in calibration],
                                                                         y[calibration])
        np.testing.assert_allclose(model.predict_proba([traces[i] for i in evaluated]),
                                   held.methods[method].probability(calibrator), atol=1e-9, err_msg=method)


@pytest.mark.parametrize("method", flaggable_methods())
@pytest.mark.parametrize("calibrator", ["platt", "isotonic"])
def test_json_round_trips_and_records_the_score(method, calibrator):
    traces, y = labelled(80)
    if method == "TRACE (surprisal-only)":
        traces = [no_entropy(t) for t in traces]
    model = ScoreCalibrator(method=method, calibrator=calibrator).fit(traces, y)
    text = model.to_json()
    fields = json.loads(text)
    assert fields["type"] == "ScoreCalibrator"
    assert fields["params"]["method"] == method and fields["params"]["calibrator"] == calibrator
    assert fields["transform"] == METHODS[method].transform and fields["n_samples"] == 80
    assert "feature_set" not in fields["provenance"] and fields["provenance"]["n_rows"] == 80
    back = calibrator_from_json(text)
    assert isinstance(back, ScoreCalibrator) and back.to_json() == text
    np.testing.assert_array_equal(back.predict_proba(traces), model.predict_proba(traces))


def _saved(calibrator: str = "platt") -> dict:
    traces, y = labelled(40)
    return json.loads(ScoreCalibrator(method="SeqLogP", calibrator=calibrator).fit(traces, y).to_json())


@pytest.mark.parametrize("change, expected", [
    (lambda f: f["params"].update(method="CES"), "'params.method' must be one of"),
    (lambda f: f["params"].update(method="MARS-style"), "'params.method' must be one of"),
    (lambda f: f["params"].update(method="<script>" * 100), "'params.method' must be one of"),
    (lambda f: f["params"].update(calibrator="logistic"), "'params.calibrator' must be one of"),
    (lambda f: f.update(transform="identity"), "'transform' must be 'log'"),
    (lambda f: f.pop("coef"), "'coef' is missing"),
    (lambda f: f.update(x_thresholds=[0.0, 1.0]), "'x_thresholds' is not a field of a platt ScoreCalibrator"),
    (lambda f: f["provenance"].update(feature_set="paper"), "unknown key 'feature_set'"),
    (lambda f: f.update(scale=0.0), "'scale' must be > 1e-12"),
    (lambda f: f.update(coef="1"), "'coef' must be a number"),
])
def test_a_broken_file_names_the_field(change, expected):
    fields = _saved()
    change(fields)
    with pytest.raises(CalibratorFormatError) as info:
        calibrator_from_json(json.dumps(fields))
    assert expected in str(info.value)
    assert len(str(info.value)) < 2_000


def test_an_isotonic_file_lacking_its_thresholds_names_them():
    fields = _saved("isotonic")
    del fields["y_thresholds"]
    with pytest.raises(CalibratorFormatError, match="'y_thresholds' is missing"):
        calibrator_from_json(json.dumps(fields))


def test_a_score_the_traces_cannot_give_says_why():
    traces, y = labelled(30)
    bare = [no_entropy(t) for t in traces]
    with pytest.raises(ValueError, match="entropy"):
        ScoreCalibrator(method="Mean Entropy").fit(bare, y)
    with pytest.raises(ValueError, match="top-k"):
        ScoreCalibrator(method="EPR").fit(bare, y)
    with pytest.raises(ValueError, match="one of"):
        ScoreCalibrator(method="CES").fit(traces, y)
    with pytest.raises(ValueError, match="calibrator"):
        ScoreCalibrator(method="SeqLogP", calibrator="beta").fit(traces, y)
    fitted = ScoreCalibrator(method="Mean Entropy").fit(traces, y)
    with pytest.raises(ValueError, match="entropy"):
        fitted.predict_proba(bare)


def test_it_warns_when_applied_to_another_models_traces():
    traces, y = labelled(40)
    model = ScoreCalibrator(method="SeqLogP").fit(traces, y)
    model.provenance_ = {**model.provenance_, "model_id": ["org/a"]}
    other = [Trace(**{**t.__dict__, "metadata": TraceMetadata(model_id="org/b")}) for t in traces[:3]]
    with pytest.warns(UserWarning, match="'org/b'"):
        model.predict_proba(other)


def test_flagging_uses_the_score_and_out_of_fold_refits_it():
    traces, y = labelled(100, seed=4)
    model = ScoreCalibrator(method="MinProb", calibrator="isotonic").fit(traces, y)
    frame = pd.DataFrame({"answer": [t.answer for t in traces]})
    scored = score_rows(frame, traces, model)
    np.testing.assert_array_equal(scored["probability_correct"].to_numpy(), model.predict_proba(traces))
    np.testing.assert_array_equal(probability_correct(model, traces), model.predict_proba(traces))
    held = out_of_fold_probabilities(traces, y, model, folds=4)
    from trace_core.evaluation.run import stratified_folds

    fold = stratified_folds(y, 4)
    for k in range(4):
        rest = np.flatnonzero(fold != k)
        part = unfitted_copy(model).fit([traces[i] for i in rest], y[rest])
        assert isinstance(part, ScoreCalibrator) and part.get_params() == model.get_params()
        np.testing.assert_array_equal(held[fold == k], part.predict_proba([traces[i] for i in np.flatnonzero(
            fold == k)]))


def test_the_default_score_is_the_lowest_held_out_brier_and_it_generalises():
    traces, y = digit_changed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = evaluate(traces, y, config=EvaluationConfig(n_splits=10))
    options = flag_scores(result)
    best = best_flag_score(options)
    summary = result.summary
    brier = summary[(summary["metric"] == "brier") & summary["method"].isin(
        ["TRACE+", *flaggable_methods()]) & ~summary["uninformative"]]
    assert best.brier == pytest.approx(brier["mean"].min())
    assert best.method != "TRACE+"  # on these answers a likelihood score beats TRACE+ ...
    new, y_new = digit_changed(2, 90)  # ... and on new answers flagged with it, too
    chosen = best.calibrator_model().fit(traces, y)
    trace_plus = TracePlus().fit(traces, y)
    brier_chosen = np.mean((chosen.predict_proba(new) - y_new) ** 2)
    brier_trace_plus = np.mean((trace_plus.predict_proba(new) - y_new) ** 2)
    assert brier_chosen < brier_trace_plus
    flagged = chosen.predict_proba(new) < 0.5
    assert flagged[y_new == 0].all() and not flagged[y_new == 1].any()


def test_flag_scores_lists_trace_plus_first_and_the_sets_not_compared():
    traces, y = labelled(120)
    result = evaluate(traces, y, config=EvaluationConfig(n_splits=3))
    options = flag_scores(result)
    assert options[0] == FlagScore("TRACE+", "logistic", options[0].brier) and np.isfinite(options[0].brier)
    assert {(o.method, o.calibrator) for o in options if o.method == "SeqLogP"} == {("SeqLogP", "platt"),
                                                                                   ("SeqLogP", "isotonic")}
    not_compared = [o.method for o in options if not np.isfinite(o.brier)]
    assert not_compared == ["TRACE+ (extended)", "TRACE+ (paper+likelihood)", "TRACE+ (extended+likelihood)",
                            "TRACE+ (surprisal-only)"]
    assert not {"CES", "WEPR", "Trace Profile", "Likelihood LR (reference)"} & {o.method for o in options}
    assert isinstance(FlagScore("TRACE+ (extended)", "logistic").calibrator_model(), TracePlus)
    assert FlagScore("TRACE+ (extended)", "logistic").calibrator_model().feature_set == "extended"
    assert FlagScore("SeqLogP", "isotonic").name == "SeqLogP with isotonic regression"


def test_without_entropy_only_the_surprisal_scores_are_offered():
    traces, y = labelled(120)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = evaluate([no_entropy(t) for t in traces], y, config=EvaluationConfig(n_splits=3))
    methods = {o.method for o in flag_scores(result)}
    assert "TRACE+ (surprisal-only)" in methods and "TRACE (surprisal-only)" in methods
    assert not {"TRACE+", "TRACE", "Mean Entropy", "TRACE+ (extended)"} & methods


# --- command line ---------------------------------------------------------------------------------------------

@pytest.fixture
def files(tmp_path):
    traces, y = digit_changed(1)
    path = tmp_path / "answers.jsonl"
    write_dataset(pd.DataFrame({"prompt": [f"q{i}" for i in range(len(y))], "answer": [t.answer for t in traces],
                                "label": y}), path, traces=traces)
    return tmp_path, path, traces, y


def test_cli_fit_method_writes_a_score_calibrator_that_flag_uses(files, capsys):
    folder, path, traces, y = files
    out = folder / "minprob.json"
    assert main(["fit", str(path), "--method", "MinProb", "--calibrator", "isotonic", "--out", str(out)]) == 0
    assert "fitted MinProb with isotonic regression on 30 answers" in capsys.readouterr().err
    fields = json.loads(out.read_text())
    assert fields["params"] == {"method": "MinProb", "calibrator": "isotonic", "C": 1e4}
    flagged = folder / "flagged.csv"
    assert main(["flag", str(path), "--calibrator", str(out), "--threshold", "0.5", "--out", str(flagged)]) == 0
    table = pd.read_csv(flagged)
    expected = ScoreCalibrator(method="MinProb", calibrator="isotonic").fit(traces, y).predict_proba(traces)
    assert sorted(table["label"].tolist()) == [0] * 10  # the ten changed answers, and only they
    np.testing.assert_allclose(np.sort(table["probability_correct"].to_numpy()), np.sort(expected[expected < 0.5]))


def test_cli_fit_method_names_trace_plus_variants(files, capsys):
    folder, path, _, _ = files
    out = folder / "ext.json"
    assert main(["fit", str(path), "--method", "TRACE+ (extended)", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["params"]["feature_set"] == "extended"


@pytest.mark.parametrize("args, expected", [
    (["--method", "CES"], "--method 'CES' is fitted on each calibration part and cannot be saved"),
    (["--method", "MARS-style"], "needs more than a trace"),
    (["--method", "Nope<b>"], "is not a method"),
    (["--method", "SeqLogP", "--feature-set", "paper"], "--feature-set is for TRACE+"),
    (["--method", "TRACE+ (extended)", "--feature-set", "paper"], "give one of them"),
])
def test_cli_fit_refuses_what_cannot_be_saved(files, capsys, args, expected):
    folder, path, _, _ = files
    assert main(["fit", str(path), "--out", str(folder / "c.json"), *args]) != 0
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
    assert not (folder / "c.json").exists()


def test_cli_fit_a_score_the_traces_lack_says_why(tmp_path, capsys):
    traces, y = labelled(30)
    bare = [no_entropy(t) for t in traces]
    path = tmp_path / "bare.jsonl"
    write_dataset(pd.DataFrame({"prompt": ["q"] * 30, "answer": [t.answer for t in bare], "label": y}), path,
                  traces=bare)
    assert main(["fit", str(path), "--method", "Mean Entropy", "--out", str(tmp_path / "c.json")]) != 0
    err = capsys.readouterr().err
    assert "Mean Entropy" in err and "entropy" in err and "Traceback" not in err
