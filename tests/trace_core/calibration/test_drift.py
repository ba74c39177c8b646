"""The drift check (trace_core.calibration.drift): its p-values against scipy, its false-alarm rate and power measured by
simulation, the summary a calibrator keeps (bounded, checked on load, absent from older files), the command line's
line and the Flag page's warning."""

from __future__ import annotations

import html
import json
import math

import numpy as np
import pytest
from helpers import flag_page_after_calibrate, synthetic_trace_objects

from trace_core import TracePlus, calibrator_from_json
from trace_core.calibration.calibrators import ScoreCalibrator, check_drift
from trace_core.calibration.drift import (
    ALPHA,
    BINS,
    MIN_ANSWERS,
    chi2_sf,
    drift_check,
    drift_two_sample,
    homogeneity_test,
    summarize,
)

REDRAWS = 600
NAMES = ["normal", "geometric", "atom_and_exponential", "poisson", "log_length"]


def draw(n: int, rng: np.random.Generator, *, length_factor: float = 1.0, shift: float = 0.0) -> np.ndarray:
    """Features of ``n`` answers: continuous, discrete, mixed (40% at exactly 0), a count, and log T of lengths
    4 + geometric (mean 10). ``length_factor`` multiplies the lengths; ``shift`` moves the normal feature (in SDs)."""
    lengths = length_factor * (4 + rng.geometric(1 / 7, size=n) - 1)
    return np.column_stack([rng.normal(size=n) + shift, rng.geometric(0.15, size=n),
                            np.where(rng.random(n) < 0.4, 0.0, rng.exponential(size=n)), rng.poisson(1.0, size=n),
                            np.log(lengths)])


# --- the statistic, against scipy --------------------------------------------------------------------------------

def test_the_chi_square_survival_function_equals_scipys():
    from scipy.stats import chi2

    for df in range(1, 16):
        for x in (0.01, 0.5, 1.0, df - 0.5, df + 3.0, 2.0 * df + 10, 60.0, 300.0):
            assert chi2_sf(x, df) == pytest.approx(chi2.sf(x, df), rel=1e-9, abs=1e-300)
    assert chi2_sf(0.0, 3) == 1.0 and 0 < chi2_sf(1400.0, 9) < 1e-290  # tiny, not 0/0


def test_the_homogeneity_test_equals_scipys_chi2_contingency():
    from scipy.stats import chi2_contingency

    rng = np.random.default_rng(3)
    for _ in range(50):
        k = int(rng.integers(2, 11))
        a, b = rng.integers(1, 80, size=k), rng.integers(0, 80, size=k)
        statistic, df, p = homogeneity_test(a, b)
        expected = chi2_contingency(np.vstack([a, b]), correction=False)
        assert statistic == pytest.approx(expected.statistic, rel=1e-10)
        assert df == expected.dof and p == pytest.approx(expected.pvalue, rel=1e-8, abs=1e-300)


def test_a_feature_checked_by_hand():
    from scipy.stats import chi2_contingency

    # 100 calibration values 0..99: ten bins of ten
    summary = summarize(np.arange(100.0)[:, None], ["x"])
    assert summary.features[0].edges == tuple(float(e) for e in range(10, 100, 10))
    assert summary.features[0].counts == (10,) * 10
    # 40 new values, all 95: each bin must expect 5 of the 40 new answers, i.e. hold 12.5 calibration answers, so
    # the ten bins are merged pairwise into five of 20; the new answers all fall in the last
    result = drift_check(summary, np.full((40, 1), 95.0))
    (feature,) = result.features
    expected = chi2_contingency(np.array([[20, 20, 20, 20, 20], [0, 0, 0, 0, 40]]), correction=False)
    assert feature.df == 4 and feature.statistic == pytest.approx(expected.statistic)
    assert feature.p_value == pytest.approx(expected.pvalue, rel=1e-8)
    assert result.detected and feature.percentile == pytest.approx(0.95)
    assert feature.crowded == pytest.approx((0.9, 1.0, 1.0, 0.1))  # every new answer in the top tenth
    assert feature.crowded_words() == ("100% of the new answers lie above the 90th percentile of those, where 10% "
                                       "would if drawn alike")


def test_new_answers_at_both_ends_are_described_by_where_they_crowd_not_by_their_middling_mean():
    # calibration 0..99 in ten bins of ten; 60 new answers: 27 at each end (the lowest and highest tenths), 6 at 45.
    # On average they sit near the 50th percentile, as if drawn alike; they crowd below the 10th and above the 90th
    new = np.concatenate([np.full(27, 5.0), np.full(6, 45.0), np.full(27, 95.0)])[:, None]
    result = drift_check(summarize(np.arange(100.0)[:, None], ["x"]), new)
    (feature,) = result.features
    assert result.detected and feature.percentile == pytest.approx(0.495)
    low, high, share, expected = feature.crowded
    assert (low, high) == pytest.approx((0.0, 0.1)) and share == pytest.approx(0.45) and expected == pytest.approx(0.1)
    assert "'x' (45% of the new answers lie below the 10th percentile of those, where 10% would if drawn alike)" in \
        result.sentence()
    middle = drift_check(summarize(np.arange(100.0)[:, None], ["x"]), np.full((40, 1), 33.0))
    assert middle.features[0].crowded_words() == ("100% of the new answers lie between the 30th and 40th "
                                                  "percentiles of those, where 10% would if drawn alike")


# --- false alarms and power, measured ----------------------------------------------------------------------------

@pytest.mark.parametrize("n, m", [(100, 30), (500, 100), (1_000, 1_000)])
def test_a_same_distribution_sample_rarely_trips_the_check(n, m):
    rng = np.random.default_rng(n + m)
    tripped = loose = rejected = tested = 0
    for _ in range(REDRAWS):
        summary = summarize(draw(n, rng), NAMES)
        result = drift_check(summary, draw(m, rng))
        tripped += result.detected
        loose += result.p_value < 0.05
        p = np.array([f.p_value for f in result.tested])
        rejected += int((p < 0.05).sum())
        tested += p.size

    def allowed(rate: float, trials: int) -> float:
        return rate + 3 * math.sqrt(rate * (1 - rate) / trials)  # nominal rate plus simulation error

    assert tripped / REDRAWS <= allowed(ALPHA, REDRAWS), tripped
    assert loose / REDRAWS <= allowed(0.05, REDRAWS), loose  # the overall p-value holds at a level we can measure
    assert rejected / tested <= allowed(0.05, tested), (rejected, tested)  # and each feature's p-value
    assert rejected / tested >= 0.02  # not so conservative that it never speaks


@pytest.mark.parametrize("shift", ["twice as long", "half a standard deviation"])
def test_a_clear_shift_is_found_in_most_draws(shift):
    rng = np.random.default_rng(11)
    found = named = 0
    for _ in range(200):
        summary = summarize(draw(500, rng), NAMES)
        new = draw(500, rng, length_factor=2.0) if shift == "twice as long" else draw(500, rng, shift=0.5)
        result = drift_check(summary, new)
        found += result.detected
        expected = "log_length" if shift == "twice as long" else "normal"
        named += bool(result.shifted) and result.shifted[0].name == expected
    assert found >= 0.9 * 200 and named >= 0.9 * 200, (found, named)


# --- the result and its sentence ---------------------------------------------------------------------------------

def test_the_sentences_name_the_features_and_the_assumption():
    rng = np.random.default_rng(2)
    summary = summarize(draw(500, rng), NAMES)
    shifted = drift_check(summary, draw(400, rng, length_factor=2.0), words={"log_length": "answer length"})
    text = shifted.sentence()
    assert shifted.detected and text.startswith("Drift: the 400 new answers differ from")
    assert "answer length (" in text and "of the new answers lie above the" in text and "would if drawn alike" in text
    assert "exchangeable" in text and "looks broken" in text
    assert shifted.shifted[0].percentile > 0.6  # longer: higher in the calibration distribution
    same = drift_check(summary, draw(400, rng))
    assert not same.detected and same.sentence().startswith("Drift check: no shift detected")
    assert "broken" not in same.sentence() and f"in {len(NAMES)} features" in same.sentence()
    few = drift_check(summary, draw(MIN_ANSWERS - 1, rng, length_factor=3.0))
    assert few.status == "too_few" and not few.detected and "not enough new answers" in few.sentence()


def test_a_constant_calibration_feature_is_not_tested():
    rng = np.random.default_rng(4)
    values = np.column_stack([np.ones(200), rng.normal(size=200)])
    summary = summarize(values, ["constant", "normal"])
    assert summary.features[0].edges == () and summary.features[0].counts == (200,)
    result = drift_check(summary, np.column_stack([np.ones(100), rng.normal(size=100)]))
    assert [f.name for f in result.tested] == ["normal"]


def test_the_two_sample_form_is_the_summary_of_the_first_sample():
    rng = np.random.default_rng(5)
    a, b = draw(300, rng), draw(200, rng, shift=1.0)
    direct = drift_two_sample(a, b, NAMES)
    via = drift_check(summarize(a, NAMES), b, reference=direct.reference, consequence=direct.consequence)
    assert direct == via and direct.detected and "guaranteed error rate may not hold" in direct.sentence()


@pytest.mark.parametrize("call, message", [
    (lambda: summarize(np.zeros((10, 2)), ["a"]), "must have 1 columns"),
    (lambda: summarize(np.zeros((10, 2)), ["a", "a"]), "must be unique"),
    (lambda: summarize([[float("nan")]], ["a"]), "must be finite; row 0, column 0 is nan"),
    (lambda: summarize(np.zeros((10, 1)), ["a"], bins=1), "`bins` must be an int in [2, 100]"),
    (lambda: drift_check(summarize(np.zeros((40, 1)), ["a"]), np.zeros((40, 1)), names=["b"]), "`names` must be"),
    (lambda: drift_check(summarize(np.zeros((40, 1)), ["a"]), np.zeros((40, 1)), alpha=0), "`alpha` must be"),
    (lambda: drift_check({"n": 1}, np.zeros((40, 1))), "must be a DriftSummary"),
])
def test_inputs_are_checked(call, message):
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    assert message in str(info.value)


# --- the calibrator keeps the summary ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fitted():
    traces, y = synthetic_trace_objects(400, seed=1)
    return {"traces": traces, "y": y, "TracePlus": TracePlus().fit(traces, y),
            "extended": TracePlus(feature_set="extended+likelihood").fit(traces, y),
            "ScoreCalibrator": ScoreCalibrator(method="SeqLogP", calibrator="isotonic").fit(traces, y)}


@pytest.mark.parametrize("kind", ["TracePlus", "extended", "ScoreCalibrator"])
def test_the_summary_round_trips_and_is_bounded(fitted, kind):
    model = fitted[kind]
    text = model.to_json()
    loaded = calibrator_from_json(text)
    assert loaded.to_json() == text and loaded.drift_summary_ == model.drift_summary_
    summary = json.loads(text)["drift_summary"]
    assert summary["n"] == 400 and summary["bins"] == BINS
    names = [f["name"] for f in summary["features"]]
    if kind == "ScoreCalibrator":
        assert names == ["score", "answer_length", "mean_surprisal"]
    elif kind == "TracePlus":  # its own features; answer length is log_length already, mean surprisal is added
        assert names == [*model.feature_names_, "mean_surprisal"]
    else:  # and log_geomean_token_prob is minus the mean surprisal: the same test
        assert names == list(model.feature_names_)
    for feature in summary["features"]:
        assert len(feature["edges"]) <= BINS - 1 and len(feature["counts"]) == len(feature["edges"]) + 1
        assert sum(feature["counts"]) == 400
    # bounded whatever the number of answers: 2 * BINS - 1 numbers a feature, no raw values
    big_traces, big_y = synthetic_trace_objects(3_000, seed=9)
    big = type(model)(**model.get_params()).fit(big_traces, big_y)
    size = len(json.dumps(json.loads(big.to_json())["drift_summary"]))
    assert size <= len(names) * ((2 * BINS - 1) * 26 + 80) + 50  # a number takes at most 26 characters
    assert len(json.dumps(summary)) < 10_000


def test_a_calibrator_checks_new_answers_against_its_summary(fitted):
    model = calibrator_from_json(fitted["TracePlus"].to_json())
    same, _ = synthetic_trace_objects(300, seed=3)
    longer, _ = synthetic_trace_objects(300, seed=3, mean_length=20)
    assert model.check_drift(same).status == "no_shift"
    result = model.check_drift(longer)
    assert result.detected and result.shifted[0].name == "log_length"
    assert "answers the calibrator was fitted on" in result.sentence()
    score = calibrator_from_json(fitted["ScoreCalibrator"].to_json())
    assert not score.check_drift(same).detected
    assert {f.name for f in score.check_drift(longer).shifted} >= {"answer_length"}
    assert "answer length in tokens (" in score.check_drift(longer).sentence()
    # against labeled answers directly (a guarantee's): the same features, the guarantee's words
    guarantee = check_drift(model, longer, reference=fitted["traces"])
    assert guarantee.detected and "the labeled answers that chose the threshold" in guarantee.sentence()
    assert "guaranteed error rate may not hold" in guarantee.sentence()


@pytest.mark.parametrize("kind", ["TracePlus", "ScoreCalibrator"])
def test_files_written_before_the_summary_load_and_say_the_check_is_unavailable(fitted, kind):
    obj = json.loads(fitted[kind].to_json())
    del obj["drift_summary"]
    old = calibrator_from_json(json.dumps(obj))
    assert old.drift_summary_ is None
    new, _ = synthetic_trace_objects(100, seed=3)
    np.testing.assert_array_equal(old.predict_proba(new), fitted[kind].predict_proba(new))
    result = old.check_drift(new)
    assert result.status == "unavailable" and not result.detected
    assert result.sentence().startswith("Drift check: not available") and "fit it again" in result.sentence()
    # the direct comparison needs no summary
    assert check_drift(old, new, reference=fitted["traces"]).status == "no_shift"


@pytest.mark.parametrize("change, fragment", [
    (lambda s: s.update(n="400"), "'drift_summary.n' must be a whole number, got '400'"),
    (lambda s: s.update(bins=1), "'drift_summary.bins' must be in [2, 100], got 1"),
    (lambda s: s.update(extra=1), "'drift_summary' has an unknown key 'extra'"),
    (lambda s: s.pop("features"), "'drift_summary' lacks ['features']"),
    (lambda s: s.update(features={}), "'drift_summary.features' must be a list of 1 to"),
    (lambda s: s["features"][0].update(name="nope"), "'drift_summary.features[0].name' must be one of"),
    (lambda s: s["features"][1].update(name=s["features"][0]["name"]),
     "'drift_summary.features[1].name' names 'first3_entropy_conf' a second time"),
    (lambda s: s["features"][0]["edges"].reverse(), "'drift_summary.features[0].edges' must be strictly increasing"),
    (lambda s: s["features"][0]["edges"].__setitem__(0, "x"), "'drift_summary.features[0].edges[0]' must be a number"),
    (lambda s: s["features"][0]["edges"].extend([1e9] * 10), "'drift_summary.features[0].edges' must be a list of at "
                                                             "most 9 numbers"),
    (lambda s: s["features"][0]["counts"].append(1), "'drift_summary.features[0].counts' must be a list of"),
    (lambda s: s["features"][0]["counts"].__setitem__(0, 0), "'drift_summary.features[0].counts[0]' must be in [1,"),
    (lambda s: s["features"][0]["counts"].__setitem__(0, 41), "'drift_summary.features[0].counts' must sum to n"),
    (lambda s: s["features"][0].pop("counts"), "'drift_summary.features[0]' must be an object with keys"),
])
def test_a_broken_summary_is_refused_naming_the_field(fitted, change, fragment):
    obj = json.loads(fitted["TracePlus"].to_json())
    change(obj["drift_summary"])
    with pytest.raises(ValueError) as info:
        calibrator_from_json(json.dumps(obj))
    assert fragment in str(info.value) and len(str(info.value)) < 2_000


def test_a_score_calibrators_summary_names_its_score(fitted):
    obj = json.loads(fitted["ScoreCalibrator"].to_json())
    obj["drift_summary"]["features"][0]["name"] = "log_length"  # a TRACE+ feature: not this calibrator's
    with pytest.raises(ValueError, match=r"'drift_summary.features\[0\].name' must be one of \['score'"):
        calibrator_from_json(json.dumps(obj))


# --- the command line --------------------------------------------------------------------------------------------

@pytest.fixture
def files(tmp_path, fitted):
    import pandas as pd

    from trace_core import write_dataset

    def save(name, n, seed, **kwargs):
        traces, y = synthetic_trace_objects(n, seed=seed, **kwargs)
        path = tmp_path / name
        write_dataset(pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces],
                                    "label": y}), path, traces=traces)
        return path

    calibrator = tmp_path / "calibrator.json"
    calibrator.write_text(fitted["TracePlus"].to_json(), encoding="utf-8")
    old = json.loads(fitted["TracePlus"].to_json())
    del old["drift_summary"]
    old_calibrator = tmp_path / "old.json"
    old_calibrator.write_text(json.dumps(old), encoding="utf-8")
    return {"calibrator": calibrator, "old": old_calibrator, "risk": save("risk.jsonl", 1_500, 2),
            "same": save("same.jsonl", 500, 3), "longer": save("longer.jsonl", 500, 5, mean_length=20),
            "out": tmp_path / "flagged.csv"}


def _flag(files, data, *extra, calibrator="calibrator"):
    from trace_core.cli import main

    return main(["flag", str(files[data]), "--calibrator", str(files[calibrator]), "--out", str(files["out"]),
                 *extra])


def test_cli_warns_on_shifted_answers_and_not_on_same_distribution_ones(files, capsys):
    assert _flag(files, "same", "--threshold", "0.5") == 0
    err = capsys.readouterr().err
    assert "warning: drift" not in err
    assert "drift check: no shift detected between the 500 new answers and the answers the calibrator was fitted " \
           "on in 9 features" in err
    assert _flag(files, "longer", "--threshold", "0.5") == 0
    err = capsys.readouterr().err
    (line,) = [w for w in err.splitlines() if w.startswith("warning: drift: ")]
    assert "'log_length'" in line and "looks broken" in line and "may be miscalibrated" in line
    assert files["out"].exists()  # a warning, not an error: the answers are still flagged
    assert _flag(files, "same", "--threshold", "0.5", "--quiet") == 0
    assert "drift" not in capsys.readouterr().err  # a pass is left out with --quiet; a warning never is
    assert _flag(files, "longer", "--threshold", "0.5", "--quiet") == 0
    assert "warning: drift: " in capsys.readouterr().err


def test_cli_compares_the_new_answers_with_the_risk_data(files, capsys):
    assert _flag(files, "same", "--max-risk", "0.1", "--risk-data", str(files["risk"])) == 0
    err = capsys.readouterr().err
    assert "drift check: no shift detected between the 500 new answers and the labeled answers that chose the " \
           "threshold" in err and "warning: drift" not in err
    assert _flag(files, "longer", "--max-risk", "0.1", "--risk-data", str(files["risk"])) == 0
    lines = [w for w in capsys.readouterr().err.splitlines() if w.startswith("warning: drift: ")]
    assert len(lines) == 2 and "the labeled answers that chose the threshold (1,500)" in lines[1]
    assert "the guaranteed error rate may not hold" in lines[1]


def test_cli_says_the_check_is_unavailable_for_an_older_file(files, capsys):
    assert _flag(files, "longer", "--threshold", "0.5", calibrator="old") == 0
    err = capsys.readouterr().err
    assert "drift check: not available; this calibrator file was saved before" in err and "warning: drift" not in err


# --- the Flag page -----------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:this calibrator was fitted on traces of model")  # real_test: another model
def test_the_flag_page_warns_when_the_answers_drift_and_says_so_briefly_when_not():
    pytest.importorskip("streamlit")
    pytest.importorskip("torch")
    at = flag_page_after_calibrate()
    at.radio(key="flag_source").set_value("Answers from a file").run()
    at.selectbox(key="flag_demo_dataset").set_value("demo_test").run()  # the other split: drawn alike
    assert not at.exception
    captions = [html.unescape(c.value) for c in at.caption]
    assert any(c.startswith("Drift check: no shift detected") for c in captions), captions
    assert not any("Drift:" in html.unescape(w.value) for w in at.warning)
    at.selectbox(key="flag_demo_dataset").set_value("real_test").run()  # another model's answers
    assert not at.exception
    warnings = [html.unescape(w.value) for w in at.warning]
    assert any(w.startswith("Drift: the 458 new answers differ from the answers the calibrator was fitted on")
               and "looks broken" in w for w in warnings), warnings
    # the guaranteed mode compares them with the labeled answers that chose the threshold as well
    at.radio(key="flag_mode").set_value("guarantee").run()
    at.selectbox(key="risk_demo_dataset").set_value("demo_test").run()
    assert not at.exception
    warnings = [html.unescape(w.value) for w in at.warning]
    assert any("differ from the labeled answers that chose the threshold" in w for w in warnings), warnings


def test_where_new_answers_crowd_is_the_largest_excess_over_every_run_of_bins():
    """:func:`_crowded` against every run of adjacent bins, on random counts."""
    from trace_core.calibration.drift import _crowded

    rng = np.random.default_rng(8)
    for _ in range(300):
        k = int(rng.integers(1, 12))
        counts, new = rng.integers(1, 60, size=k), rng.integers(0, 60, size=k)
        if not new.sum():
            continue
        expected, observed = counts / counts.sum(), new / new.sum()
        runs = [(observed[a:b + 1].sum() - expected[a:b + 1].sum(), a, b) for a in range(k) for b in range(a, k)]
        best = max(r[0] for r in runs)
        low, high, share, share_expected = _crowded(counts, new)
        cum = np.concatenate(([0.0], np.cumsum(expected)))
        a, b = int(np.argmin(np.abs(cum - low))), int(np.argmin(np.abs(cum - high))) - 1
        assert cum[a] == pytest.approx(low) and cum[b + 1] == pytest.approx(high)
        assert share - share_expected == pytest.approx(best, abs=1e-9)
        assert share == pytest.approx(observed[a:b + 1].sum()) and share_expected == pytest.approx(high - low)
