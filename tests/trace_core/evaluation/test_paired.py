"""The paired comparison: best baseline chosen on calibration parts, differences, wins and ties; the reference
sentence; uninformative (constant) scores never crowned."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trace_core.evaluation.paired import BEST_BASELINE, average_paired, paired_comparison
from trace_core.evaluation.results import EvaluationResult, summarise
from trace_core.evaluation.run import EvaluationConfig, evaluate_arrays
from trace_core.evaluation.verdict import reference_sentence
from trace_core.methods.registry import REFERENCE

METHODS = ["TRACE+", "TRACE", "SeqLogP", "MinProb", "Mean Entropy", REFERENCE]


def _frame(values: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    rows = []
    for (method, metric), vs in values.items():
        fitted = method in ("TRACE+", REFERENCE)
        calibrator = "none" if metric in ("auroc", "aurc") else ("logistic" if fitted else "platt")
        rows += [(split, method, metric, calibrator, v) for split, v in enumerate(vs)]
    return pd.DataFrame(rows, columns=["split", "method", "metric", "calibrator", "value"])


def test_best_baseline_is_chosen_on_the_calibration_part_not_the_evaluation_part():
    # On the evaluation parts MinProb is always best (0.80); on the calibration parts SeqLogP looks best on splits
    # 0 and 1 and MinProb on split 2. An optimistic comparison would subtract 0.80 every time.
    ev = _frame({("TRACE+", "auroc"): [0.78, 0.79, 0.81], ("SeqLogP", "auroc"): [0.70, 0.72, 0.71],
                 ("MinProb", "auroc"): [0.80, 0.80, 0.80]})
    cal = _frame({("SeqLogP", "auroc"): [0.90, 0.85, 0.60], ("MinProb", "auroc"): [0.75, 0.80, 0.82]})
    paired = paired_comparison(ev, cal, methods=METHODS, metrics=["auroc"])
    best = paired.per_split.query("versus == @BEST_BASELINE").sort_values("split")
    assert best["chosen"].tolist() == ["SeqLogP", "SeqLogP", "MinProb"]
    np.testing.assert_allclose(best["difference"], [0.78 - 0.70, 0.79 - 0.72, 0.81 - 0.80])
    row = paired.get("TRACE+", BEST_BASELINE, "auroc")
    diffs = np.array([0.08, 0.07, 0.01])
    assert row["mean"] == pytest.approx(diffs.mean()) and row["std"] == pytest.approx(diffs.std(ddof=1))
    assert (row["wins"], row["ties"], row["losses"], row["n_splits"]) == (3, 0, 0, 3)
    assert row["chosen"] == "SeqLogP in 2 of 3 splits, MinProb in 1"
    assert row["chosen_counts"] == {"SeqLogP": 2, "MinProb": 1}
    # ... and minus each baseline by name
    minprob = paired.get("TRACE+", "MinProb", "auroc")
    assert minprob["mean"] == pytest.approx(np.mean([-0.02, -0.01, 0.01]))
    assert (minprob["wins"], minprob["losses"]) == (1, 2)


def test_wins_follow_the_metric_direction_and_ties_are_counted():
    # Brier: lower is better. TRACE+ 0.10 vs SeqLogP 0.12 (win), 0.12 (tie), 0.15 (loss)
    ev = _frame({("TRACE+", "brier"): [0.10, 0.12, 0.15], ("SeqLogP", "brier"): [0.12, 0.12, 0.12],
                 ("TRACE+", "aurc"): [0.20, 0.30, 0.30], ("SeqLogP", "aurc"): [0.25, 0.30, 0.25]})
    cal = _frame({("SeqLogP", "brier"): [0.1, 0.1, 0.1], ("SeqLogP", "aurc"): [0.2, 0.2, 0.2]})
    paired = paired_comparison(ev, cal, methods=METHODS, metrics=["brier", "aurc"])
    brier = paired.get("TRACE+", BEST_BASELINE, "brier", "platt")
    assert (brier["wins"], brier["ties"], brier["losses"]) == (1, 1, 1)
    assert brier["mean"] == pytest.approx(np.mean([-0.02, 0.0, 0.03]))
    aurc = paired.get("TRACE+", "SeqLogP", "aurc")
    assert (aurc["wins"], aurc["ties"], aurc["losses"]) == (1, 1, 1)
    assert aurc["calibrator"] == "none"


def test_calibration_ties_go_to_the_earlier_method_and_uninformative_scores_are_never_chosen():
    ev = _frame({("TRACE+", "ece"): [0.05, 0.05], ("SeqLogP", "ece"): [0.04, 0.06], ("MinProb", "ece"): [0.07, 0.03],
                 ("Mean Entropy", "ece"): [0.001, 0.001]})
    # Mean Entropy: a constant score, ECE 0 on calibration; SeqLogP and MinProb tie on calibration
    cal = _frame({("SeqLogP", "ece"): [0.02, 0.02], ("MinProb", "ece"): [0.02, 0.02],
                  ("Mean Entropy", "ece"): [0.0, 0.0]})
    paired = paired_comparison(ev, cal, methods=METHODS, metrics=["ece"], uninformative=["Mean Entropy"])
    assert paired.per_split.query("versus == @BEST_BASELINE")["chosen"].tolist() == ["SeqLogP", "SeqLogP"]
    chosen_without_flag = paired_comparison(ev, cal, methods=METHODS, metrics=["ece"]).per_split
    assert set(chosen_without_flag.query("versus == @BEST_BASELINE")["chosen"]) == {"Mean Entropy"}


def test_calibration_values_apart_by_rounding_only_are_ties():
    # An isotonic calibrator's ECE on its own calibration part is 0 up to rounding for every baseline: rounding must
    # not pick the best baseline (MinProb "wins" by 1e-15 on split 0, SeqLogP on split 1); a real gap still does.
    ev = _frame({("TRACE+", "ece"): [0.05, 0.05, 0.05], ("SeqLogP", "ece"): [0.04, 0.06, 0.04],
                 ("MinProb", "ece"): [0.07, 0.03, 0.07]})
    cal = _frame({("SeqLogP", "ece"): [1.2e-15, 0.0, 2e-12], ("MinProb", "ece"): [8e-17, 3e-16, 0.0]})
    paired = paired_comparison(ev, cal, methods=METHODS, metrics=["ece"])
    best = paired.per_split.query("versus == @BEST_BASELINE").sort_values("split")
    assert best["chosen"].tolist() == ["SeqLogP", "SeqLogP", "MinProb"]


def test_the_reference_is_never_the_best_baseline_but_is_compared_by_name():
    ev = _frame({("TRACE+", "auroc"): [0.8, 0.8], ("SeqLogP", "auroc"): [0.7, 0.7], (REFERENCE, "auroc"): [0.9, 0.9]})
    cal = _frame({("SeqLogP", "auroc"): [0.7, 0.7], (REFERENCE, "auroc"): [0.99, 0.99]})
    paired = paired_comparison(ev, cal, methods=METHODS, metrics=["auroc"])
    assert paired.get("TRACE+", BEST_BASELINE, "auroc")["chosen"] == "SeqLogP in 2 of 2 splits"
    assert paired.get("TRACE+", REFERENCE, "auroc")["mean"] == pytest.approx(-0.1)


def _reference_case(trace_plus_auroc, reference_auroc, trace_plus_brier, reference_brier):
    ev = _frame({("TRACE+", "auroc"): trace_plus_auroc, (REFERENCE, "auroc"): reference_auroc,
                 ("TRACE+", "brier"): trace_plus_brier, (REFERENCE, "brier"): reference_brier})
    return paired_comparison(ev, ev.iloc[:0], methods=METHODS, metrics=["brier", "auroc"])


def test_reference_sentence_follows_the_verdict_rule_and_never_explains_why():
    # 4 splits, no calibration fraction: plain t-intervals, t_{0.975, 3} = 3.182. AUROC differences 0, +.01, -.01,
    # -.01: mean -0.0025, sd 0.00957, half-width 3.182 * 0.00957 / 2 = 0.0152 -> the interval holds 0: a tie.
    tie = _reference_case([0.80, 0.81, 0.79, 0.80], [0.80, 0.80, 0.80, 0.81],
                          [0.20, 0.20, 0.21, 0.20], [0.20, 0.21, 0.20, 0.20])
    assert reference_sentence(tie) == ("TRACE+ cannot be told apart from the supervised likelihood reference on "
                                       "Brier (0, 95% CI -0.0130 to +0.0130, wins 1 of 4 splits) and on AUROC "
                                       "(-0.00250, 95% CI -0.0177 to +0.0127, wins 1 of 4 splits).")
    both = _reference_case([0.85, 0.86, 0.84, 0.85], [0.80] * 4, [0.15] * 4, [0.20] * 4)
    assert reference_sentence(both) == ("TRACE+ beats the supervised likelihood reference on Brier (-0.0500, 95% CI "
                                        "-0.0500 to -0.0500, wins 4 of 4 splits) and on AUROC (+0.0500, 95% CI "
                                        "+0.0370 to +0.0630, wins 4 of 4 splits).")
    mixed = reference_sentence(_reference_case([0.85] * 4, [0.80] * 4, [0.25] * 4, [0.20] * 4))
    assert mixed.startswith("TRACE+ loses to the supervised likelihood reference on Brier (+0.0500")
    assert " and beats it on AUROC (+0.0500" in mixed
    worse = reference_sentence(_reference_case([0.70] * 4, [0.80] * 4, [0.25] * 4, [0.20] * 4))
    assert worse.startswith("TRACE+ loses to the supervised likelihood reference on Brier")
    assert "on AUROC (-0.100" in worse
    for text in (reference_sentence(tie), reference_sentence(both), mixed, worse):  # what, never why
        assert "length-aware" not in text and "gain here" not in text and "do better here" not in text
    no_reference = paired_comparison(_frame({("TRACE+", "auroc"): [0.8], ("SeqLogP", "auroc"): [0.7]}),
                                     _frame({("SeqLogP", "auroc"): [0.7]}), methods=METHODS, metrics=["auroc"])
    assert reference_sentence(no_reference) is None


def test_average_paired_averages_each_groups_differences_over_common_splits():
    a = _reference_case([0.8, 0.9, 0.7], [0.7, 0.7, 0.7], [0.2] * 3, [0.2] * 3)
    b = _reference_case([0.8, 0.8], [0.9, 0.9], [0.2] * 2, [0.2] * 2)
    averaged = average_paired([a, b], splits=[0, 1])
    row = averaged.get("TRACE+", REFERENCE, "auroc")
    differences = sorted(averaged.per_split.query("metric == 'auroc'")["difference"])
    np.testing.assert_allclose(differences, [0.0, 0.05], atol=1e-12)
    assert row["n_splits"] == 2


def _constant_result() -> EvaluationResult:
    """A hand-built result where a constant baseline has the smallest ECE."""
    per_split = _frame({("TRACE+", "ece"): [0.05, 0.06], ("SeqLogP", "ece"): [0.04, 0.05],
                        ("Mean Entropy", "ece"): [0.001, 0.002]})
    per_split.insert(2, "family", per_split["method"].map({"TRACE+": "trace", "SeqLogP": "likelihood",
                                                           "Mean Entropy": "entropy"}))
    uninformative = {"Mean Entropy": "uninformative (constant)"}
    return EvaluationResult(summary=summarise(per_split, list(uninformative)), per_split=per_split,
                            held_out=pd.DataFrame(), skipped={}, config=EvaluationConfig(n_splits=2, metrics=("ece",)),
                            n_answers=200, methods=["TRACE+", "SeqLogP", "Mean Entropy"], uninformative=uninformative)


def test_a_constant_baseline_with_tiny_ece_is_marked_and_never_bolded():
    result = _constant_result()
    lines = result.to_markdown(digits=3).splitlines()
    assert lines[2] == "| TRACE+ | trace | 0.055 ± 0.007 |"
    assert lines[3] == "| SeqLogP | likelihood | **0.045 ± 0.007** |"
    assert lines[4] == "| Mean Entropy (uninformative (constant)) | entropy | 0.002 ± 0.001 |"
    assert result.note("Mean Entropy") == "uninformative (constant)"
    assert result.summary.set_index("method")["uninformative"].to_dict() == {
        "TRACE+": False, "SeqLogP": False, "Mean Entropy": True}


def test_protocol_marks_a_constant_score_and_never_chooses_it():
    from trace_core.traces.synthetic import synthetic_traces

    s, h, y = synthetic_traces(600, kind="surprisal_spike", mean_length=60, seed=2)
    config = EvaluationConfig(n_splits=4, metrics=("ece", "auroc"))
    result = evaluate_arrays(s, h, y, config=config, methods=["TRACE (surprisal-only)", "First-Token Prob",
                                                              "Len-Norm LogP"])
    assert result.uninformative == {"First-Token Prob": "uninformative (constant)"}  # p_1 = 1.0 for every answer
    chosen = set(result.paired.per_split.query("versus == @BEST_BASELINE")["chosen"])
    assert chosen == {"Len-Norm LogP"}
    assert "**" not in next(line for line in result.to_markdown().splitlines() if "First-Token Prob" in line)


def test_the_indexed_tables_equal_a_pandas_pivot_with_holes_nans_and_repeated_splits():
    """`_Values.wide` (plain dictionaries and numpy) against the pivot it replaced: the first value of a repeated
    split, NaN where a method lacks a split, splits ascending, the first non-NaN value where a method has values
    under two calibrators."""
    from trace_core.evaluation.paired import _Values

    rng = np.random.default_rng(3)
    rows = [(int(split), method, metric, calibrator, float(rng.normal()))
            for split in rng.permutation(12) for method in ["TRACE+", "SeqLogP", "MinProb"]
            for metric, calibrator in [("auroc", "none"), ("brier", "platt"), ("brier", "logistic")]
            if rng.random() > 0.2]
    frame = pd.DataFrame(rows, columns=["split", "method", "metric", "calibrator", "value"])
    frame.loc[rng.choice(frame.index, 10, replace=False), "value"] = np.nan
    frame = pd.concat([frame, frame.iloc[:6].assign(value=99.0)], ignore_index=True)  # repeats: the first counts
    values = _Values(frame)
    for metric, calibrator in [("auroc", "none"), ("brier", "platt")]:
        wanted = ["TRACE+", "SeqLogP", "MinProb", "absent"]
        got = values.wide(metric, calibrator, wanted)
        part = frame[(frame.metric == metric) & frame.calibrator.isin([calibrator, "logistic", "none"])]
        firsts = part.drop_duplicates(["method", "calibrator", "split"])
        order = {calibrator: 0, "logistic": 1, "none": 2}
        firsts = firsts.assign(rank=firsts.calibrator.map(order)).sort_values(["rank"], kind="stable")
        expected = firsts.pivot_table(index="split", columns="method", values="value", aggfunc="first", dropna=False)
        expected = expected.reindex(columns=[m for m in wanted if m in expected.columns]).sort_index()
        assert got.splits.tolist() == expected.index.tolist()
        assert list(got.columns) == list(expected.columns)
        for method in expected.columns:
            np.testing.assert_array_equal(got.columns[method], expected[method].to_numpy(dtype=np.float64))
    assert 99.0 not in np.concatenate([c for c in values.wide("brier", "platt", ["TRACE+", "SeqLogP"]).columns.values()])
