"""The dashboard's rendering helpers: the reliability histogram's bins, the metrics table and its headers."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import random_traces

pytest.importorskip("streamlit")
pytest.importorskip("plotly")

from app.components import (  # noqa: E402
    metric_columns,
    metrics_frame,
    reliability_figure,
    risk_coverage_figure,
    roc_figure,
    sentence,
)
from trace_core import EvaluationConfig, evaluate, reliability_table  # noqa: E402
from trace_core.registry import METRICS  # noqa: E402


def _bars(fig):
    return [t for t in fig.data if t.type == "bar"]


def test_histogram_uses_the_reliability_tables_bins():
    # The review's example: with 10 equal-width bins the table puts .2 in bin 1 (0.1, 0.2], .5 in bin 4 (0.4, 0.5]
    # and .7 in bin 6 (0.6, 0.7]; np.histogram's [a, b) bins said 2, 5 and 6.
    p, y = np.array([0.5, 0.5, 0.7, 0.2]), np.array([1, 0, 1, 0])
    (bar,) = _bars(reliability_figure(y, {"A": p}, n_bins=10))
    np.testing.assert_allclose(bar.x, [0.15, 0.45, 0.65])
    np.testing.assert_array_equal(bar.y, [1, 2, 1])
    np.testing.assert_allclose(bar.width, [0.1, 0.1, 0.1])
    points = [t for t in reliability_figure(y, {"A": p}, n_bins=10).data if t.name.startswith("A (ECE")][0]
    np.testing.assert_array_equal(np.asarray(points.customdata)[:, 0], bar.y)  # the same bins as the points


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
@pytest.mark.parametrize("n_bins", [4, 10])
def test_histogram_counts_equal_the_table_counts(strategy, n_bins):
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 300)
    # ties and values exactly on equal-width edges, where the two binnings disagree
    p = np.concatenate([rng.random(200), np.repeat([0.2, 0.5, 0.7, 0.25], 25)])
    fig = reliability_figure(y, {"A": p, "B": p ** 2}, n_bins=n_bins, strategy=strategy)
    bars = _bars(fig)
    assert [b.name for b in bars] == ["A", "B"]
    for bar, probs in zip(bars, (p, p ** 2)):
        table = reliability_table(y, probs, n_bins=n_bins, strategy=strategy)
        table = table[table["count"] > 0]
        np.testing.assert_array_equal(bar.y, table["count"])
        np.testing.assert_allclose(bar.x, (table["lower"] + table["upper"]) / 2)
        assert int(np.sum(bar.y)) == len(probs)


def test_histogram_shows_a_zero_width_equal_mass_bin():
    # Tied lowest probabilities make the first equal-mass bins zero-wide; their answers must still be drawn.
    p, y = np.array([0.2, 0.2, 0.2, 0.9]), np.array([0, 1, 0, 1])
    (bar,) = _bars(reliability_figure(y, {"A": p}, n_bins=4, strategy="quantile"))
    assert int(np.sum(bar.y)) == 4 and np.all(np.asarray(bar.width) > 0)


def test_each_method_has_one_colour_across_the_figures():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 100)
    probs = {"TRACE+": rng.random(100), "TRACE": rng.random(100), "SeqLogP": rng.random(100)}
    reliability = reliability_figure(y, probs)
    colours = {}
    for trace in reliability.data[1:]:
        colour = trace.marker.line.color if trace.type == "bar" else trace.marker.color
        method = trace.legendgroup
        assert colours.setdefault(method, colour) == colour  # points and bars of a method agree
    assert len(set(colours.values())) == 3
    for fig in (risk_coverage_figure(y, probs), roc_figure(y, probs)):
        assert {t.name.split(" (")[0]: t.line.color for t in fig.data[1:]} == colours


@pytest.fixture(scope="module")
def result():
    traces = random_traces(80, seed=4)
    labels = (np.arange(80) % 3 != 0).astype(int)
    return evaluate(traces, labels, config=EvaluationConfig(n_splits=3, seed=1),
                    methods=["SeqLogP", "TRACE", "Mean Entropy", "TRACE+"])


def test_metrics_frame_is_the_results_table_in_method_order(result):
    frame = metrics_frame(result, "isotonic")
    assert frame["method"].tolist() == result.methods == ["SeqLogP", "TRACE", "Mean Entropy", "TRACE+"]
    metrics = list(result.config.metrics)
    assert frame.columns.tolist() == ["method", "family", *metrics, *[f"{m}_std" for m in metrics], "note"]
    assert frame.set_index("method").loc["TRACE", "family"] == "trace"
    # mean and std over splits, from the raw per-split values of the chosen calibrator (TRACE+: its own fit)
    shown = ("isotonic", "logistic", "none")  # noqa: F841 (used by the query below)
    for _, row in frame.iterrows():
        for metric in metrics:
            values = result.per_split.query("method == @row.method and metric == @metric "
                                            "and calibrator in @shown")["value"].to_numpy()
            assert len(values) == 3
            assert row[metric] == pytest.approx(values.mean())
            assert row[f"{metric}_std"] == pytest.approx(values.std(ddof=1))


def test_metric_columns_take_headers_from_the_registry():
    columns = metric_columns(["auroc", "ece"])
    assert list(columns) == ["auroc", "auroc_std", "ece", "ece_std"]
    assert columns["auroc"]["label"] == METRICS["auroc"].title == "AUROC ↑"
    assert columns["ece"]["label"] == "ECE ↓" and columns["ece_std"]["label"] == "±"
    assert "raw score" in columns["auroc"]["help"] and "higher is better" in columns["auroc"]["help"]
    assert "calibrated probabilities" in columns["ece"]["help"] and "lower is better" in columns["ece"]["help"]


def test_sentence():
    assert sentence("2 rows have no trace (rows 1, 2)") == "2 rows have no trace (rows 1, 2)."
    assert sentence("every answer is empty") == "Every answer is empty."
    assert sentence("rows 1, 2 …") == "Rows 1, 2 …"


def test_there_is_no_second_table_builder():
    import app.components as components

    assert not hasattr(components, "metrics_table")
