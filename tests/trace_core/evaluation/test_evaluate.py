"""The protocol on synthetic traces whose ground truth is known, and its mechanics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import random_traces

from trace_core.calibration.calibrators import TracePlus
from trace_core.evaluation.protocol import draw_splits
from trace_core.evaluation.run import (
    EvaluationConfig,
    EvaluationResult,
    HeldOut,
    average_results,
    evaluate,
    evaluate_arrays,
    method_names,
)
from trace_core.methods.features import feature_matrix_from_arrays
from trace_core.metrics import auroc
from trace_core.traces.ragged import Ragged
from trace_core.traces.synthetic import synthetic_traces

FAST = EvaluationConfig(n_splits=5)


def auroc_of(result, method):
    s = result.summary
    return float(s[(s.method == method) & (s.metric == "auroc")]["mean"].iloc[0])


@pytest.mark.parametrize("kind, seed, winners, loser, margin", [
    ("spike", 1, ["TRACE+", "TRACE"], "Mean Entropy", 0.02),  # local spikes decide: TRACE finds them
    ("diffuse", 1, ["Mean Entropy"], "TRACE", 0.05),  # uncertainty spread over the answer: the mean wins
    ("length", 2, ["TRACE+", "SeqLogP"], "Mean Entropy", 0.15),  # length decides: length-aware methods win
])
def test_each_kind_of_label_is_won_by_the_methods_built_for_it(kind, seed, winners, loser, margin):
    s, h, y = synthetic_traces(3000, kind=kind, seed=seed)
    result = evaluate_arrays(s, h, y, config=FAST, methods=[*winners, loser])
    for winner in winners:
        assert auroc_of(result, winner) > auroc_of(result, loser) + margin, winner


def test_result_tables_and_split_mechanics():
    traces = random_traces(200, seed=4)
    y = np.random.default_rng(0).integers(0, 2, 200)
    result = evaluate(traces, y, config=EvaluationConfig(n_splits=4, seed=3, stratified=True))
    assert set(result.summary.columns) == {"method", "family", "metric", "calibrator", "mean", "std", "n_splits",
                                           "uninformative"}
    assert (result.summary["n_splits"] == 4).all()
    assert set(result.per_split["split"]) == {0, 1, 2, 3}
    assert result.methods[:2] == ["TRACE+", "TRACE"] and len(result.methods) == 21  # with EPR and the 3 fitted
    assert result.methods[-1] == "Likelihood LR (reference)"
    # Brier and ECE: both scalar calibrators for scalar methods, TRACE+'s and the reference's own logistic regression
    cals = result.summary.groupby("method")["calibrator"].agg(set)
    assert cals["TRACE"] == cals["SeqLogP"] == {"platt", "isotonic", "none"}
    assert cals["TRACE+"] == cals["Likelihood LR (reference)"] == {"logistic", "none"}
    assert set(result.summary.query("calibrator == 'none'")["metric"]) == {"auroc", "auprc", "aurc", "prr"}
    assert result.data_note == "200 traces: entropy exact"
    assert set(result.skipped) == {"Beam-Ratio", "Beam-TailThinness", "Beam Entropy", "TokenSAR", "MARS-style"}
    # held-out split: 65% of the answers, each method's probability in [0, 1] and AUROC consistent with per_split
    held = result.held_out
    assert len(held) == 200 - 70 and list(held.methods) == result.methods
    trace = held.methods["TRACE"]
    assert set(trace.probabilities) == {"platt", "isotonic"}
    assert ((trace.probability("platt") >= 0) & (trace.probability("platt") <= 1)).all()
    assert set(held.methods["TRACE+"].probabilities) == {"logistic"}  # its own model, whichever calibrator is asked
    np.testing.assert_array_equal(held.methods["TRACE+"].probability("isotonic"),
                                  held.methods["TRACE+"].probabilities["logistic"])
    first = result.per_split[(result.per_split.split == 0) & (result.per_split.method == "TRACE")
                             & (result.per_split.metric == "auroc")]["value"].iloc[0]
    assert auroc(held.labels, trace.score) == pytest.approx(first)
    frame = held.to_frame()
    assert list(frame.columns) == ["row", "label", "method", "calibrator", "score", "probability"]
    assert len(frame) == len(held) * sum(len(m.probabilities) for m in held.methods.values())
    table = result.table()
    assert list(table.index[:2]) == ["TRACE+", "TRACE"] and "auroc_std" in table.columns
    typed = result.metric_table()
    assert typed.methods == list(table.index) and typed.metrics == list(result.config.metrics)
    assert typed.mean.at["TRACE", "auroc"] == table.at["TRACE", "auroc"]
    assert typed.std.at["TRACE+", "brier"] == table.at["TRACE+", "brier_std"]
    assert typed.family["TRACE"] == table.at["TRACE", "family"]
    assert result.note("Likelihood LR (reference)") == "supervised reference" and result.note("TRACE") == ""
    markdown = result.to_markdown()
    assert markdown.count("\n") == len(table) + 1 and "± " in markdown


@pytest.mark.parametrize("fraction", [0.35, 0.5])
def test_stratified_splits_keep_each_class_share_in_the_calibration_part(fraction):
    y = np.array([1] * 37 + [0] * 13)
    rng = np.random.default_rng(0)
    y = y[rng.permutation(y.shape[0])]
    config = EvaluationConfig(n_splits=6, seed=2, stratified=True, calibration_fraction=fraction)
    splits = draw_splits(y, config)
    assert len(splits) == 6
    for cal, ev in splits:
        assert np.array_equal(np.sort(np.concatenate([cal, ev])), np.arange(y.shape[0]))  # a partition
        for cls in (0, 1):
            assert (y[cal] == cls).sum() == round(fraction * (y == cls).sum())
    # different splits, not one repeated
    assert len({tuple(cal) for cal, _ in splits}) == 6


def test_unstratified_splits_draw_the_calibration_size_from_all_answers():
    y = np.array([1] * 37 + [0] * 13)
    for cal, ev in draw_splits(y, EvaluationConfig(n_splits=4, seed=1)):
        assert cal.shape[0] == round(0.35 * 50) and ev.shape[0] == 50 - cal.shape[0]


def test_traceplus_held_out_probabilities_equal_predict_proba_at_extreme_decision_values():
    """The protocol's TRACE+ probabilities are TracePlus.predict_proba's, to the last bit, even far in the tails
    (the tanh form 0.5 * (1 + tanh(z / 2)) rounds to exactly 0 there)."""
    rng = np.random.default_rng(0)
    n = 200
    y = (np.arange(n) % 2).astype(int)
    entropy = [rng.gamma(2.0, 0.3 if label else 0.6, size=int(rng.integers(3, 30))) for label in y]
    config = EvaluationConfig(n_splits=1, seed=0)

    def run():
        s, h = Ragged.from_arrays([e * 0.5 for e in entropy]), Ragged.from_arrays(entropy)
        return s, h, evaluate_arrays(s, h, y, config=config, methods=["TRACE+"])

    held_rows = run()[2].held_out.rows
    for i in held_rows[:4]:  # the split depends on n and the seed only: make four held-out answers extreme
        entropy[i] = np.array([0.0, 40.0, 80.0, 120.0]) if y[i] == 0 else np.array([120.0, 80.0, 40.0, 0.0])
    s, h, result = run()
    held = result.held_out
    assert np.array_equal(held.rows, held_rows)
    calibration = np.setdiff1d(np.arange(n), held_rows)
    features = feature_matrix_from_arrays(s, h)
    model = TracePlus().fit(features[calibration], y[calibration])
    decision = model.decision_function(features[held_rows])
    assert decision.min() < -30  # far in the tail: the tanh form gives exactly 0 there
    np.testing.assert_array_equal(held.methods["TRACE+"].score, decision)
    np.testing.assert_array_equal(held.methods["TRACE+"].probability("platt"),
                                  model.predict_proba(features[held_rows]))
    assert held.methods["TRACE+"].probability("platt").min() > 0.0


def test_same_seed_same_result_and_different_seed_differs():
    s, h, y = synthetic_traces(500, seed=5)
    a = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=3, seed=1), methods=["TRACE"])
    b = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=3, seed=1), methods=["TRACE"])
    c = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=3, seed=2), methods=["TRACE"])
    assert a.summary.equals(b.summary)
    assert not a.per_split["value"].equals(c.per_split["value"])


def test_both_scalar_calibrators_are_computed_and_the_option_picks_the_shown_one():
    s, h, y = synthetic_traces(800, seed=6)
    platt = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=2), methods=["TRACE", "SeqLogP"])
    iso = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=2, scalar_calibrator="isotonic"),
                          methods=["TRACE", "SeqLogP"])
    pd.testing.assert_frame_equal(platt.summary, iso.summary)  # the option only chooses what tables show
    assert auroc_of(platt, "TRACE") == pytest.approx(auroc_of(iso, "TRACE"))
    brier = platt.summary.query("metric == 'brier' and method == 'TRACE'").set_index("calibrator")["mean"]
    assert set(brier.index) == {"platt", "isotonic"} and brier["platt"] != brier["isotonic"]
    assert platt.table().loc["TRACE", "brier"] == pytest.approx(brier["platt"])
    assert iso.table().loc["TRACE", "brier"] == pytest.approx(brier["isotonic"])
    assert platt.table(calibrator="isotonic").loc["TRACE", "brier"] == pytest.approx(brier["isotonic"])
    assert "Platt scaling" in platt.caption() and "isotonic regression" in iso.caption()
    np.testing.assert_array_equal(iso.held_out.methods["TRACE"].probability("isotonic"),
                                  platt.held_out.methods["TRACE"].probability("isotonic"))


@pytest.mark.parametrize("methods, expected", [
    (["TRACE", "SeqLogP", "MinProb"], "Baselines: 2 of {known} ran (2 scalar)."),
    (["TRACE", "SeqLogP", "CES"], "Baselines: 2 of {known} ran (1 scalar, 1 fitted on each calibration part: CES)."),
])
def test_the_baselines_note_counts_only_those_that_ran(methods, expected):
    from trace_core import METHODS

    expected = expected.format(known=sum(m.is_baseline for m in METHODS.values()))
    s, h, y = synthetic_traces(300, seed=3)
    result = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=2), methods=methods)
    assert result.baselines_note() == expected
    assert result.caption().endswith(expected)


def test_scalar_calibrators_are_fitted_on_the_documented_transform():
    """SeqLogP = exp(sum log p) crowds against 0; calibrated on its log (the registry's transform), Platt matches
    a logistic regression on the summed log-probability."""
    from sklearn.linear_model import LogisticRegression

    from trace_core.evaluation.protocol import draw_splits as splits_of
    from trace_core.methods.operators import segment_mean
    from trace_core.methods.registry import METHODS
    from trace_core.metrics import brier_score

    s, h, y = synthetic_traces(1500, kind="length", mean_length=60, seed=4)
    config = EvaluationConfig(n_splits=1, metrics=("brier",))
    result = evaluate_arrays(s, h, y, config=config, methods=["SeqLogP"])
    assert METHODS["SeqLogP"].transform == "log"
    cal, ev = splits_of(y, config)[0]
    log_seq = -(np.asarray(segment_mean(s)) * s.lengths).reshape(-1, 1)
    model = LogisticRegression(C=1e4, max_iter=10_000).fit(log_seq[cal], y[cal])
    expected = brier_score(y[ev], model.predict_proba(log_seq[ev])[:, 1])
    got = result.summary.query("calibrator == 'platt'")["mean"].iloc[0]
    assert got == pytest.approx(expected, abs=1e-4)


def test_methods_on_threads_give_the_very_numbers_of_one_thread(monkeypatch):
    import importlib

    module = importlib.import_module("trace_core.evaluation.protocol")
    s, h, y = synthetic_traces(3000, kind="spike", mean_length=12, seed=2)
    config = EvaluationConfig(n_splits=3)
    monkeypatch.setattr(module, "THREADS_FROM", 0)
    threaded = evaluate_arrays(s, h, y, config=config)
    monkeypatch.setattr(module, "THREADS_FROM", 10**9)
    serial = evaluate_arrays(s, h, y, config=config)
    for attribute in ("per_split", "summary", "calibration_values"):
        pd.testing.assert_frame_equal(getattr(threaded, attribute), getattr(serial, attribute), check_exact=True)
    pd.testing.assert_frame_equal(threaded.held_out.to_frame(), serial.held_out.to_frame(), check_exact=True)


def test_overlapping_threaded_evaluations_restore_the_blas_threads():
    """The BLAS limit is process-wide: two evaluations that overlap (two dashboard sessions) leave it as it was."""
    import importlib

    threadpoolctl = pytest.importorskip("threadpoolctl")
    module = importlib.import_module("trace_core.evaluation.protocol")

    def blas_threads():
        return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]

    before = blas_threads()
    first, second = module.one_blas_thread(True), module.one_blas_thread(True)
    first.__enter__()
    second.__enter__()
    assert all(n == 1 for n in blas_threads())
    first.__exit__(None, None, None)  # the first one out: the other still runs on one thread
    assert all(n == 1 for n in blas_threads())
    second.__exit__(None, None, None)
    assert blas_threads() == before


def test_isotonic_values_of_every_split_equal_scikit_learn_fitted_on_that_split():
    """The protocol takes each calibration part in the score's presorted order; the Brier and ECE of every split
    equal those of scikit-learn's IsotonicRegression fitted on that part (a rate with many ties), up to the order in
    which the protocol sums them (each part in ascending score order)."""
    from sklearn.isotonic import IsotonicRegression

    from trace_core.evaluation.protocol import draw_splits as splits_of
    from trace_core.methods.baselines import baseline_scores
    from trace_core.metrics import brier_score, expected_calibration_error

    name = "High-Prob Token Rate"  # calibrated on the identity: the score itself
    s, h, y = synthetic_traces(900, kind="spike", mean_length=20, seed=7)
    config = EvaluationConfig(n_splits=4)
    result = evaluate_arrays(s, h, y, config=config, methods=[name])
    score = baseline_scores(s, h, names=[name]).scores[name].to_numpy()
    assert np.unique(score).size < score.size / 5
    values = result.per_split.query("calibrator == 'isotonic'").set_index(["split", "metric"])["value"]
    for split, (cal, ev) in enumerate(splits_of(y, config)):
        p = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(score[cal], y[cal]).predict(score[ev])
        assert values[(split, "brier")] == pytest.approx(brier_score(y[ev], p), rel=0, abs=1e-14)
        assert values[(split, "ece")] == pytest.approx(expected_calibration_error(y[ev], p), rel=0, abs=1e-14)


@pytest.mark.parametrize("ties", [False, True])
def test_rankings_from_a_part_in_score_order_equal_rank_groups_number_for_number(ties, monkeypatch):
    """Each split's rankings come from its part in the presorted order (tie groups as runs): the very numbers of
    RankGroups counting every distinct score of the subset (on the numpy path; the compiled loop sums in another
    order, to 1e-12: tests/trace_core/evaluation/test_compiled_kernels.py)."""
    import trace_core.metrics.kernels as kernels
    from trace_core.metrics import RankGroups

    monkeypatch.setattr(kernels, "USE_COMPILED", False)
    from trace_core.evaluation.protocol import Ascending as _Ascending
    from trace_core.evaluation.protocol import ranking_part as _ranking_part

    rng = np.random.default_rng(3)
    raw = rng.normal(size=2000)
    if ties:
        raw = np.round(raw, 1)  # ~60 distinct values
    y = (rng.random(2000) < 1 / (1 + np.exp(-raw))).astype(np.int64)
    prep = _Ascending.of(raw, np.exp(raw), y)  # a monotone transform: the same order
    assert prep.contiguous and (prep.groups is None) == (not ties)
    groups = RankGroups(raw)
    for size in (1500, 40, 3):
        rows = np.sort(rng.permutation(2000)[:size])
        keep = np.flatnonzero(np.isin(prep.order, rows))  # positions in the ascending order
        expected = groups.ranking_metrics(y[rows], rows)
        got = _ranking_part(prep, keep, prep.y[keep])
        assert got.keys() == expected.keys()
        assert all(got[m] == expected[m] or (np.isnan(got[m]) and np.isnan(expected[m])) for m in got)


def test_a_transform_that_ties_distinct_scores_ranks_by_the_raw_score(monkeypatch):
    """Where the transform ties distinct raw scores (the log floor), the presorted order does not sort the raw
    score: the rankings then count the raw score's own groups, with the same numbers as otherwise."""
    import dataclasses

    from trace_core.evaluation.protocol import Ascending as _Ascending

    raw = np.array([3e-320, 1e-320, 2e-320, 0.5, 0.25])  # below the log floor: one transformed value
    assert not _Ascending.of(raw, np.log(np.maximum(raw, np.finfo(float).tiny)), np.zeros(5, np.int64)).contiguous
    s, h, y = synthetic_traces(600, kind="spike", seed=4)
    methods = ["TRACE", "SeqLogP", "Mean Entropy", "Max Entropy"]
    config = EvaluationConfig(n_splits=3)
    expected = evaluate_arrays(s, h, y, config=config, methods=methods)
    of = _Ascending.of
    monkeypatch.setattr(_Ascending, "of", lambda raw, z, y: dataclasses.replace(of(raw, z, y), contiguous=False))
    got = evaluate_arrays(s, h, y, config=config, methods=methods)
    pd.testing.assert_frame_equal(got.per_split, expected.per_split)
    pd.testing.assert_frame_equal(got.calibration_values, expected.calibration_values)


@pytest.mark.parametrize("kwargs, match", [
    ({"n_splits": 0}, "`n_splits` must be an int in \\[1, 1000\\]"),
    ({"calibration_fraction": 1.0}, r"`calibration_fraction` must be a finite real number in \(0, 1\), got 1.0"),
    ({"scalar_calibrator": "beta"}, "`scalar_calibrator` must be one of 'platt', 'isotonic'"),
    ({"metrics": ("accuracy",)}, "unknown metrics"),
    ({"seed": -1}, "`seed` must be an int >= 0"),
])
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EvaluationConfig(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    ({"n_splits": 2.5}, "`n_splits` must be an int in \\[1, 1000\\], got 2.5"),
    ({"n_bins": 2.5}, "`n_bins` must be an int in \\[1, 1000\\], got 2.5"),  # as bin_probabilities says
    ({"n_splits": True}, "`n_splits` must be an int in \\[1, 1000\\], got True"),
    ({"calibration_fraction": "0.3"}, "`calibration_fraction` must be a finite real number"),
    ({"stratified": 1}, "`stratified` must be True or False"),
    ({"metrics": "auroc"}, "`metrics` must be a sequence of metric names"),
])
def test_config_values_of_the_wrong_type_raise_type_error(kwargs, match):
    with pytest.raises(TypeError, match=match):
        EvaluationConfig(**kwargs)


def test_config_accepts_numpy_numbers_and_stores_python_ones():
    config = EvaluationConfig(n_splits=np.int64(5), calibration_fraction=np.float32(0.5), seed=np.int32(3),
                              n_bins=np.int64(8), stratified=np.bool_(True), metrics=["auroc"])
    assert config == EvaluationConfig(n_splits=5, calibration_fraction=0.5, seed=3, n_bins=8, stratified=True,
                                      metrics=("auroc",))
    assert type(config.n_splits) is int and type(config.stratified) is bool
    import json
    from dataclasses import asdict

    json.dumps(asdict(config))  # numpy numbers would not serialise


def test_input_errors():
    traces = random_traces(20)
    with pytest.raises(ValueError, match=r"evaluation needs both correct \(1\) and incorrect \(0\) answers"):
        evaluate(traces, np.ones(20))
    with pytest.raises(ValueError, match="`labels` has 3 labels but there are 20 answers"):
        evaluate(traces, [0, 1, 0])
    with pytest.raises(ValueError, match="unknown methods"):
        evaluate(traces, np.arange(20) % 2, methods=["GPT-judge"])
    from helpers import make_trace

    with pytest.raises(ValueError, match="trace 2 is empty; every method needs at least one token"):
        evaluate(traces[:2] + [make_trace([])] + traces[3:], np.arange(20) % 2, methods=["TRACE"])


def test_tiny_unstratified_data_skips_one_class_splits_with_a_warning():
    traces = random_traces(12, seed=1)
    y = np.array([1] * 10 + [0, 0])
    from trace_core.evaluation.run import SkippedSplitsWarning

    with pytest.warns(SkippedSplitsWarning, match="splits skipped") as caught:
        result = evaluate(traces, y, config=EvaluationConfig(n_splits=20), methods=["TRACE"])
    message = str(caught[0].message)
    assert "use stratified splits" in message and "=True" not in message  # neutral: the CLI names its option
    assert 0 < result.skipped_splits < 20 and result.n_splits_used == 20 - result.skipped_splits
    assert (result.summary["n_splits"] == 20 - result.skipped_splits).all()
    with pytest.raises(ValueError, match="every split left one class only"):
        evaluate(traces[:8], [1] * 7 + [0], config=EvaluationConfig(n_splits=3), methods=["TRACE"])


def test_method_names():
    assert method_names()[:2] == ["TRACE+", "TRACE"] and len(method_names()) == 26
    assert method_names()[-1] == "Likelihood LR (reference)"
    assert {"TRACE+ (extended)", "TRACE+ (surprisal-only)", "TRACE (surprisal-only)"} <= set(
        method_names(extended=True))


def _result(per_split: pd.DataFrame, *, methods: list[str], n_answers: int = 10, accuracy: float = 0.5,
            metrics: tuple[str, ...] = ("brier", "auroc")) -> EvaluationResult:
    """An EvaluationResult built by hand from per-split values (the summary computed independently here)."""
    per_split = per_split.assign(family=per_split["method"].map(lambda m: "trace" if m.startswith("TRACE")
                                                                 else "entropy"),
                                 calibrator=per_split["metric"].map(lambda m: "none" if m == "auroc" else "platt"))
    rows = []
    for (method, metric), values in per_split.groupby(["method", "metric"], sort=False)["value"]:
        rows.append((method, "trace" if method.startswith("TRACE") else "entropy", metric,
                     "none" if metric == "auroc" else "platt", values.mean(),
                     values.std(ddof=1) if len(values) > 1 else 0.0, len(values), False))
    summary = pd.DataFrame(rows, columns=["method", "family", "metric", "calibrator", "mean", "std", "n_splits",
                                          "uninformative"])
    return EvaluationResult(summary=summary, per_split=per_split, held_out=HeldOut(), skipped={},
                            config=EvaluationConfig(n_splits=3, metrics=metrics), n_answers=n_answers,
                            methods=methods, accuracy=accuracy)


def _per_split(values: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    return pd.DataFrame([(split, method, metric, v) for (method, metric), vs in values.items()
                         for split, v in enumerate(vs)], columns=["split", "method", "metric", "value"])


def test_table_is_one_row_per_method_in_method_order_with_means_and_stds():
    result = _result(_per_split({("Mean Entropy", "auroc"): [0.6, 0.7, 0.8], ("Mean Entropy", "brier"): [0.3] * 3,
                                 ("TRACE", "auroc"): [0.9, 0.7, 0.8], ("TRACE", "brier"): [0.1, 0.3, 0.2]}),
                     methods=["TRACE", "Mean Entropy"], n_answers=200)  # not a small sample: the best is bolded
    table = result.table()
    assert list(table.index) == ["TRACE", "Mean Entropy"]
    assert list(table.columns) == ["family", "brier", "auroc", "brier_std", "auroc_std"]
    assert table.loc["TRACE", "family"] == "trace" and table.loc["Mean Entropy", "family"] == "entropy"
    assert table.loc["TRACE", "auroc"] == pytest.approx(0.8) and table.loc["TRACE", "auroc_std"] == pytest.approx(0.1)
    assert table.loc["Mean Entropy", "brier"] == pytest.approx(0.3)
    assert table.loc["Mean Entropy", "brier_std"] == pytest.approx(0.0)
    lines = result.to_markdown(digits=2).splitlines()
    assert lines[0] == "| method | family | brier ↓ | auroc ↑ |"
    # the best mean per column is bold: TRACE's Brier (lower) and its AUROC (higher)
    assert lines[2] == "| TRACE | trace | **0.20 ± 0.10** | **0.80 ± 0.10** |"
    assert lines[3] == "| Mean Entropy | entropy | 0.30 ± 0.00 | 0.70 ± 0.10 |"


def test_average_results_means_over_datasets_per_split_then_over_splits():
    a = _result(_per_split({("TRACE", "auroc"): [0.6, 0.8, 0.7], ("Mean Entropy", "auroc"): [0.5, 0.6, 0.7]}),
                methods=["TRACE", "Mean Entropy"], n_answers=10, accuracy=0.4, metrics=("auroc",))
    b = _result(_per_split({("TRACE", "auroc"): [0.8, 0.6, 0.9]}), methods=["TRACE"], n_answers=30, accuracy=0.8,
                metrics=("auroc",))
    averaged = average_results([a, b])
    assert averaged.methods == ["TRACE"]  # only the methods every dataset has
    per_split = averaged.per_split.sort_values("split")["value"].to_numpy()
    np.testing.assert_allclose(per_split, [0.7, 0.7, 0.8])  # mean over the two datasets, split by split
    row = averaged.summary.set_index("method").loc["TRACE"]
    assert row["mean"] == pytest.approx((0.7 + 0.7 + 0.8) / 3)
    assert row["std"] == pytest.approx(np.std([0.7, 0.7, 0.8], ddof=1))
    assert row["n_splits"] == 3 and row["family"] == "trace"
    assert averaged.n_answers == 40 and averaged.accuracy == pytest.approx((10 * 0.4 + 30 * 0.8) / 40)  # pooled, not 0.6
    assert list(averaged.table().index) == ["TRACE"]
    with pytest.raises(ValueError, match="`results` is empty"):
        average_results([])


def test_average_uses_exactly_the_splits_present_in_every_group_and_says_how_many():
    a = _result(_per_split({("TRACE", "auroc"): [0.6, 0.8, 0.7]}), methods=["TRACE"], metrics=("auroc",))
    b = _result(_per_split({("TRACE", "auroc"): [0.8, 0.6, 0.9]}), methods=["TRACE"], metrics=("auroc",))
    b.per_split = b.per_split[b.per_split["split"] != 1]  # group b skipped split 1
    b.skipped_splits = 1
    averaged = average_results([a, b])
    assert sorted(averaged.per_split["split"]) == [0, 2]
    np.testing.assert_allclose(averaged.per_split.sort_values("split")["value"], [0.7, 0.8])
    assert averaged.skipped_splits == 1 and averaged.n_splits_used == 2
    assert averaged.group_note == "average over 2 groups, 2 of 3 splits present in every group"
    assert averaged.summary.set_index("method").loc["TRACE", "n_splits"] == 2
