"""The dashboard's rendering helpers: colour scales, the token axis, one colour per method, the reliability
histogram's bins, legends that quote the metrics table, the metrics table and its headers."""

from __future__ import annotations

import dataclasses
import html
import re

import numpy as np
import pytest
from helpers import make_trace, random_traces

pytest.importorskip("streamlit")
pytest.importorskip("plotly")

from app.components import (  # noqa: E402
    heatmap_html,
    legend_html,
    legend_stats,
    method_colour,
    metric_columns,
    metrics_frame,
    ramp,
    reliability_figure,
    risk_coverage_figure,
    roc_figure,
    sentence,
    signal_values,
    trace_figure,
)
from trace_core import EvaluationConfig, Trace, TraceMetadata, explain_trace, evaluate, reliability_table  # noqa: E402
from trace_core.registry import METHODS, METRICS, method_names  # noqa: E402


def _bars(fig):
    return [t for t in fig.data if t.type == "bar"]


def _counts(bar) -> np.ndarray:
    """The answers a bar stands for: its area in units of 0.1 of probability (the y axis is answers per 0.1)."""
    return np.asarray(bar.y) * np.asarray(bar.width) / 0.1


def test_histogram_uses_the_reliability_tables_bins():
    # The review's example: with 10 equal-width bins the table puts .2 in bin 1 (0.1, 0.2], .5 in bin 4 (0.4, 0.5]
    # and .7 in bin 6 (0.6, 0.7]; np.histogram's [a, b) bins said 2, 5 and 6.
    p, y = np.array([0.5, 0.5, 0.7, 0.2]), np.array([1, 0, 1, 0])
    (bar,) = _bars(reliability_figure(y, {"A": p}, n_bins=10))
    np.testing.assert_allclose(bar.x, [0.15, 0.45, 0.65])
    np.testing.assert_allclose(bar.y, [1, 2, 1])  # ten equal-width bins: answers per 0.1 is the count itself
    np.testing.assert_allclose(bar.width, [0.1, 0.1, 0.1])
    np.testing.assert_array_equal(np.asarray(bar.customdata)[:, 2], [1, 2, 1])  # the hover's count
    points = [t for t in reliability_figure(y, {"A": p}, n_bins=10).data if t.name.startswith("A (ECE")][0]
    np.testing.assert_array_equal(np.asarray(points.customdata)[:, 0], [1, 2, 1])  # the same bins as the points


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
        np.testing.assert_allclose(_counts(bar), table["count"])  # area = count
        np.testing.assert_array_equal(np.asarray(bar.customdata)[:, 2], table["count"])
        np.testing.assert_allclose(bar.x, (table["lower"] + table["upper"]) / 2)
        np.testing.assert_allclose(bar.width, np.maximum(table["upper"] - table["lower"], 0.01))
        assert round(float(np.sum(_counts(bar)))) == len(probs)


def test_histogram_shows_a_zero_width_equal_mass_bin():
    # Tied lowest probabilities make the first equal-mass bins zero-wide; their answers must still be drawn.
    p, y = np.array([0.2, 0.2, 0.2, 0.9]), np.array([0, 1, 0, 1])
    (bar,) = _bars(reliability_figure(y, {"A": p}, n_bins=4, strategy="quantile"))
    assert round(float(np.sum(_counts(bar)))) == 4 and np.all(np.asarray(bar.width) > 0)


def test_equal_mass_bars_show_where_the_answers_are():
    # Equal-mass bins hold equal counts; the heights must still show that most answers sit near 0.9.
    rng = np.random.default_rng(5)
    p = np.concatenate([rng.uniform(0.0, 0.8, 100), rng.uniform(0.85, 0.95, 300)])
    y = rng.integers(0, 2, 400)
    (bar,) = _bars(reliability_figure(y, {"A": p}, n_bins=4, strategy="quantile"))
    counts = np.asarray(bar.customdata)[:, 2]
    assert np.ptp(counts) == 0  # equal mass: counts alone would draw a flat row
    heights = np.asarray(bar.y)
    assert heights[0] < heights[-1] / 5  # the wide low bin is low, the narrow high bins are tall
    assert reliability_figure(y, {"A": p}).layout.yaxis2.title.text == "answers per 0.1"


def test_bars_share_their_methods_legend_entry_and_colour():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 100)
    fig = reliability_figure(y, {"TRACE+": rng.random(100), "SeqLogP": rng.random(100)})
    for name in ("TRACE+", "SeqLogP"):
        group = [t for t in fig.data if t.legendgroup == name]
        assert sorted(t.type for t in group) == ["bar", "scatter"]
        (bar,) = [t for t in group if t.type == "bar"]
        (points,) = [t for t in group if t.type == "scatter"]
        assert bar.showlegend is False and points.showlegend is not False  # one entry toggles both
        assert bar.marker.line.color == points.marker.color == method_colour(name)
        r, g, b = (int(method_colour(name)[i:i + 2], 16) for i in (1, 3, 5))
        assert bar.marker.color.startswith(f"rgba({r}, {g}, {b},")


def _method_colours(fig) -> dict[str, str]:
    out = {}
    for trace in fig.data:
        if not trace.legendgroup:
            continue  # the diagonal, chance, oracle
        colour = trace.marker.line.color if trace.type == "bar" else (trace.line.color or trace.marker.color)
        assert out.setdefault(trace.legendgroup, colour) == colour  # every trace of a method agrees
    return out


def test_each_method_has_one_colour_across_the_figures_whatever_the_order_or_subset():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 100)
    names = ["TRACE+", "TRACE", "SeqLogP", "Mean Entropy", "TRACE (surprisal-only)"]
    scores = {m: rng.random(100) for m in names}
    expected = {m: method_colour(m) for m in names}
    for subset in (names, names[::-1], names[2:], ["SeqLogP", "TRACE+"]):
        part = {m: scores[m] for m in subset}
        for fig in (reliability_figure(y, part), risk_coverage_figure(y, part), roc_figure(y, part)):
            assert _method_colours(fig) == {m: expected[m] for m in subset}


def test_registered_methods_get_distinct_fixed_colours():
    names = method_names(extended=True)
    colours = [method_colour(m) for m in names]
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in colours)
    assert len(set(colours)) == len(names) == len(METHODS)  # the palettes are long enough for today's registry
    assert method_colour("TRACE+") == "#d62728" and method_colour("TRACE") == "#1f77b4"
    baselines = [method_colour(m.name) for m in METHODS.values() if m.kind == "baseline"]
    assert not {method_colour("TRACE+"), method_colour("TRACE")} & set(baselines)


def test_an_unknown_method_gets_a_deterministic_colour():
    assert method_colour("My method") == method_colour("My method")
    assert re.fullmatch(r"#[0-9a-f]{6}", method_colour("My method"))
    assert method_colour("My method") != method_colour("My method 2")
    with pytest.raises(TypeError):
        method_colour(3)


def test_legends_say_the_values_are_from_the_plotted_split_by_default():
    from trace_core import auroc, aurc, expected_calibration_error

    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 120)
    p = {"TRACE+": rng.random(120)}
    (points,) = [t for t in reliability_figure(y, p).data if t.legendgroup == "TRACE+" and t.type == "scatter"]
    assert points.name == f"TRACE+ (ECE {expected_calibration_error(y, p['TRACE+']):.3f} on this split)"
    assert risk_coverage_figure(y, p).data[1].name == f"TRACE+ (AURC {aurc(y, p['TRACE+']):.3f} on this split)"
    assert roc_figure(y, p).data[1].name == f"TRACE+ (AUROC {auroc(y, p['TRACE+']):.3f} on this split)"


def test_figures_take_a_subtitle():
    rng = np.random.default_rng(1)
    y, p = rng.integers(0, 2, 50), {"A": rng.random(50)}
    for fig in (reliability_figure(y, p, subtitle="first held-out split <b>"), risk_coverage_figure(
            y, p, subtitle="first held-out split <b>"), roc_figure(y, p, subtitle="first held-out split <b>")):
        assert fig.layout.title.text == "first held-out split &lt;b&gt;"  # Plotly would read the tag
    assert roc_figure(y, p).layout.title.text is None


# --- colour scale, legend, token axis --------------------------------------------------------------------------------

def _flat(n: int = 4, value: float = 0.0) -> Trace:
    return Trace(prompt="p", answer="x" * n, token_ids=np.arange(n), tokens=("x",) * n,
                 surprisal=np.full(n, value), entropy=None, top_ids=[], top_logprobs=[],
                 metadata=TraceMetadata(entropy_source="absent"))


def test_fixed_scale_keeps_todays_tops_and_answer_scale_uses_the_maximum():
    trace = make_trace([0.1, 0.31, 0.2], [0.5, 1.7, 0.2])
    assert signal_values(trace, "surprisal").vmax == 6.0 and signal_values(trace, "surprisal").scale == "fixed"
    assert signal_values(trace, "entropy", scale="fixed").vmax == 4.0
    surprisal = signal_values(trace, "surprisal", scale="answer")
    assert surprisal.vmax == pytest.approx(0.31) and surprisal.scale == "answer"
    np.testing.assert_allclose(surprisal.normalized(), np.array([0.1, 0.31, 0.2]) / 0.31)
    assert signal_values(trace, "entropy", scale="answer").vmax == pytest.approx(1.7)


def test_answer_scale_has_a_floor_for_flat_answers():
    scale = signal_values(_flat(value=0.0), "surprisal", scale="answer")
    assert scale.vmax > 0 and np.all(scale.normalized() == 0)
    tiny = signal_values(_flat(value=1e-4), "surprisal", scale="answer")
    assert np.all(tiny.normalized() < 0.01)  # rounding noise stays pale


def test_risk_is_always_drawn_against_the_answers_maximum():
    trace = make_trace([0.1, 2.0, 0.3])
    exp = explain_trace(trace)
    for scale in ("fixed", "answer"):
        values = signal_values(trace, "risk", exp, scale=scale)
        assert values.vmax == pytest.approx(exp.contributions.max()) and values.scale == "answer"


@pytest.mark.parametrize("bad", ["relative", "", None, "FIXED"])
def test_scale_is_validated(bad):
    with pytest.raises(ValueError, match="`scale` must be one of 'fixed', 'answer'"):
        signal_values(make_trace([0.1]), "surprisal", scale=bad)
    with pytest.raises(ValueError, match="`scale`"):
        heatmap_html(make_trace([0.1]), scale=bad)


def test_legend_says_which_range_was_used():
    trace = make_trace([0.1, 0.31, 0.2])
    fixed = html.unescape(legend_html(signal_values(trace, "surprisal")))
    assert "0 … 6.00+ nats (fixed scale)" in fixed
    answer = html.unescape(legend_html(signal_values(trace, "surprisal", scale="answer")))
    assert "0 … 0.31 nats (this answer's maximum)" in answer
    assert "spike" in answer and "peak window" in answer  # the mark samples stay


def test_heatmap_passes_the_scale_through():
    trace = make_trace([0.1, 0.31, 0.2])
    styles = lambda markup: re.findall(r'class="tr-tok[^"]*" style="background:([^;]+);', markup)  # noqa: E731
    assert styles(heatmap_html(trace, scale="answer"))[1] == ramp(1.0)  # the answer's maximum in full colour
    assert styles(heatmap_html(trace))[1] == ramp(0.31 / 6.0)


def test_every_renderer_accepts_an_explanation_without_spikes():
    trace = make_trace([0.1, 0.2, 0.1, 0.15])
    exp = dataclasses.replace(explain_trace(trace), spikes=np.array([], dtype=np.int64))
    assert "tr-spike" not in heatmap_html(trace, explanation=exp)
    assert "spike" not in [t.name for t in trace_figure(trace, exp).data]
    assert legend_html(signal_values(trace, "risk", exp))


def _ticks(axis, n: int) -> np.ndarray:
    start = axis.tick0
    return np.arange(start, n + 1, axis.dtick)[np.arange(start, n + 1, axis.dtick) >= 1]


@pytest.mark.parametrize("n", [1, 5, 20, 21, 57, 500, 4000])
def test_token_axis_has_whole_numbers_and_few_ticks(n):
    rng = np.random.default_rng(n)
    fig = trace_figure(make_trace(rng.gamma(1.0, 1.0, n)))
    axis = fig.layout.xaxis
    assert axis.tickmode == "linear" and axis.tickformat == "d"
    assert float(axis.dtick).is_integer() and float(axis.tick0).is_integer()
    ticks = _ticks(axis, n)
    assert 1 <= len(ticks) <= 20
    if n <= 20:
        np.testing.assert_array_equal(ticks, np.arange(1, n + 1))  # short answers: every token numbered


# --- legends that quote the table ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def result():
    traces = random_traces(80, seed=4)
    labels = (np.arange(80) % 3 != 0).astype(int)
    return evaluate(traces, labels, config=EvaluationConfig(n_splits=3, seed=1),
                    methods=["SeqLogP", "TRACE", "Mean Entropy", "TRACE+"])


def test_legend_stats_quote_the_tables_mean_and_std(result):
    table = metrics_frame(result, "platt").set_index("method")
    for metric in ("auroc", "ece", "aurc"):
        stats = legend_stats(result, metric, "platt")
        assert list(stats) == result.methods
        for method, text in stats.items():
            match = re.fullmatch(rf"{re.escape(METRICS[metric].title)} (\d\.\d{{3}}) ± (\d\.\d{{3}}), "
                                 r"mean of 3 splits", text)
            assert match, text
            assert float(match.group(1)) == pytest.approx(table.loc[method, metric], abs=5e-4)
            assert float(match.group(2)) == pytest.approx(table.loc[method, f"{metric}_std"], abs=5e-4)


def test_legend_stats_follow_the_chosen_calibrator(result):
    platt, isotonic = legend_stats(result, "ece", "platt"), legend_stats(result, "ece", "isotonic")
    assert platt["SeqLogP"] != isotonic["SeqLogP"]
    assert platt["TRACE+"] == isotonic["TRACE+"]  # TRACE+'s own logistic regression either way


def test_legend_stats_validate_the_metric(result):
    with pytest.raises(ValueError, match="`metric` must be one of"):
        legend_stats(result, "accuracy")
    with pytest.raises(ValueError, match="calibrator"):
        legend_stats(result, "ece", "sigmoid")


def test_figures_quote_legend_stats_when_given(result):
    held = result.held_out
    y = held["label"].to_numpy()
    methods = ["TRACE+", "SeqLogP"]
    for metric, fig in (
            ("ece", reliability_figure(y, {m: held[m].to_numpy() for m in methods},
                                       legend_stats=legend_stats(result, "ece"))),
            ("aurc", risk_coverage_figure(y, {m: held[f"{m} score"].to_numpy() for m in methods},
                                          legend_stats=legend_stats(result, "aurc"))),
            ("auroc", roc_figure(y, {m: held[f"{m} score"].to_numpy() for m in methods},
                                 legend_stats=legend_stats(result, "auroc")))):
        stats = legend_stats(result, metric)
        names = [t.name for t in fig.data if t.legendgroup and t.type == "scatter"]
        assert names == [f"{m} ({stats[m]})" for m in methods]
        assert not any("on this split" in n for n in names)


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
