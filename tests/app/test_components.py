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

from app.figures import trace_figure  # noqa: E402
from app.heatmap import heatmap_html, legend_html, ramp, signal_values  # noqa: E402
from app.tables import metric_columns, metrics_frame  # noqa: E402
from app.text import sentence  # noqa: E402
from trace_core import EvaluationConfig, Trace, TraceMetadata, evaluate, explain_trace, reliability_table  # noqa: E402
from trace_core.methods.registry import METHODS, METRICS, method_names  # noqa: E402
from trace_core.report.figures import legend_stats, method_colour, reliability_figure, risk_coverage_figure, roc_figure  # noqa: E402


def _bars(fig):
    return [t for t in fig.data if t.type == "bar"]


def _counts(bar) -> np.ndarray:
    """The answers a bar stands for: its height (the y axis counts answers)."""
    return np.asarray(bar.y)


def test_histogram_uses_the_reliability_tables_bins():
    # The review's example: with 10 equal-width bins the table puts .2 in bin 1 (0.1, 0.2], .5 in bin 4 (0.4, 0.5]
    # and .7 in bin 6 (0.6, 0.7]; np.histogram's [a, b) bins said 2, 5 and 6.
    p, y = np.array([0.5, 0.5, 0.7, 0.2]), np.array([1, 0, 1, 0])
    (bar,) = _bars(reliability_figure(y, {"A": p}, n_bins=10))
    np.testing.assert_allclose(bar.x, [0.15, 0.45, 0.65])
    np.testing.assert_allclose(bar.y, [1, 2, 1])  # the counts
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
    for bar, probs in zip(bars, (p, p ** 2), strict=True):
        table = reliability_table(y, probs, n_bins=n_bins, strategy=strategy)
        table = table[table["count"] > 0]
        np.testing.assert_allclose(_counts(bar), table["count"])  # height = count
        np.testing.assert_array_equal(np.asarray(bar.customdata)[:, 2], table["count"])
        np.testing.assert_allclose(bar.x, (table["lower"] + table["upper"]) / 2)
        np.testing.assert_allclose(bar.width, np.maximum(table["upper"] - table["lower"], 0.01))
        assert round(float(np.sum(_counts(bar)))) == len(probs)


def test_histogram_shows_a_zero_width_equal_mass_bin():
    # Tied lowest probabilities make the first equal-mass bins zero-wide; their answers must still be drawn.
    p, y = np.array([0.2, 0.2, 0.2, 0.9]), np.array([0, 1, 0, 1])
    (bar,) = _bars(reliability_figure(y, {"A": p}, n_bins=4, strategy="quantile"))
    assert round(float(np.sum(_counts(bar)))) == 4 and np.all(np.asarray(bar.width) > 0)


def test_equal_mass_bars_show_where_the_answers_are_and_never_more_answers_than_there_are():
    # Equal-mass bins hold equal counts; their widths must show that most answers sit near 0.9, and the axis must
    # never read more answers than the split has (a density per 0.1 read 1,880 for a split of 940).
    rng = np.random.default_rng(5)
    p = np.concatenate([rng.uniform(0.0, 0.8, 100), rng.uniform(0.85, 0.95, 300)])
    y = rng.integers(0, 2, 400)
    (bar,) = _bars(reliability_figure(y, {"A": p}, n_bins=4, strategy="quantile"))
    heights, widths = np.asarray(bar.y), np.asarray(bar.width)
    assert np.ptp(heights) == 0 and heights.max() <= len(p)
    assert widths[0] > 5 * widths[-1]  # the wide low bin holds as many as each narrow high one
    assert reliability_figure(y, {"A": p}).layout.yaxis2.title.text == "answers"


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
    from trace_core import aurc, auroc, expected_calibration_error

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
    y = held.labels
    methods = ["TRACE+", "SeqLogP"]
    for metric, fig in (
            ("ece", reliability_figure(y, held.probabilities("platt", methods),
                                       legend_stats=legend_stats(result, "ece"))),
            ("aurc", risk_coverage_figure(y, held.scores(methods),
                                          legend_stats=legend_stats(result, "aurc"))),
            ("auroc", roc_figure(y, held.scores(methods),
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


# --- The heatmap's HTML equals its tokens rendered one at a time -------------------------------------------------
# heatmap_html computes the colours, probabilities and chosen-alternative marks for all tokens at once; the same page
# built token by token from the per-token renderers (card_html, ramp) must give the very same bytes. What those
# renderers write is pinned by known outputs below and in tests/app/test_hover_card.py.

def _one_token_at_a_time(trace, *, signal, scale, alternatives, alternatives_note, max_token_chars):
    """The heatmap (without boxed spans) from card_html, _token_html and ramp, called once per token."""
    from app.heatmap import _text_colour, _token_html, card_html, card_id_prefix

    exp = explain_trace(trace)
    norm = signal_values(trace, signal, exp, scale=scale).normalized()
    spikes = set(np.asarray(exp.spikes).ravel().tolist())
    start, stop = exp.peak_window
    prefix = card_id_prefix(trace, alternatives_note)
    spans = []
    for i, token in enumerate(trace.tokens):
        marks = (["spike"] if i in spikes else []) + (["peak window"] if start <= i < stop else [])
        classes = " ".join(["tr-tok"] + (["tr-spike"] if i in spikes else []) + (["tr-bytes"] if token == "" else [])
                           + (["tr-peak"] if start <= i < stop else []))
        card = card_html(trace, i, f"{prefix}-{i}", marks=marks, note=alternatives_note, limit=max_token_chars,
                         alternatives=alternatives(trace, i) if alternatives is not None else None,
                         risk_share=float(exp.contributions[i]) if signal == "risk" else None)
        spans.append(f'<span class="{classes}" style="background:{ramp(norm[i])};color:{_text_colour(norm[i])}" '
                     f'data-index="{i}" tabindex="0" aria-describedby="{prefix}-{i}">'
                     f'{_token_html(token, max_token_chars)}{card}</span>')
    return '<div class="tr-heatmap" data-testid="trace-heatmap" dir="auto">' + "".join(spans) + "</div>"


_AWKWARD_TOKENS = ["", " ", "   ", "a\nb", "\r\n", "x\r", "\t", "<img src=x onerror=alert(1)>", "&amp;", "\u202egnp",
                   "zero\u200bwidth", "\x00\x7f\x85", "\u2028\u2029", "\ufeff", "日本語", "e\u0301", "x" * 260,
                   "\n" * 5 + "y" * 250, "'\"", " \t ", "\u2066a\u2069"]


def _equivalence_traces():
    rng = np.random.default_rng(11)
    traces = list(random_traces(4, seed=5, max_len=60))
    n = len(_AWKWARD_TOKENS) * 3
    tokens = tuple(_AWKWARD_TOKENS[i % len(_AWKWARD_TOKENS)] for i in range(n))
    surprisal = np.concatenate([rng.gamma(1.0, 2.0, n - 4), [0.0, 1e-9, 40.0, 6.0]])
    top_ids = rng.integers(0, 50, size=(n, 4))
    token_ids = rng.integers(0, 50, size=n)
    top_ids[::3, 1] = token_ids[::3]  # some alternatives are the chosen token
    token_ids[::7] = -1  # an importer's unknown id
    top_ids[::5, 2] = -1
    top_lp = np.sort(-rng.gamma(1.0, 3.0, size=(n, 4)), axis=1)[:, ::-1]
    top_lp[0, 0], top_lp[1, 3] = 0.0, -30.0  # probability 1, and a tiny one in scientific notation
    top_tokens = tuple(tuple(_AWKWARD_TOKENS[(i + j) % len(_AWKWARD_TOKENS)] for j in range(4)) for i in range(n))
    common = dict(prompt="q", answer="".join(tokens), token_ids=token_ids, tokens=tokens, surprisal=surprisal,
                  top_ids=top_ids, top_logprobs=top_lp)
    entropy = rng.gamma(2.0, 1.0, n)
    traces.append(Trace(**common, entropy=entropy, ranks=rng.integers(1, 5000, n), top_tokens=top_tokens))
    traces.append(Trace(**common, entropy=None, metadata=TraceMetadata(entropy_source="absent")))
    traces.append(Trace(**common, entropy=entropy, top_tokens=top_tokens, metadata=TraceMetadata(
        entropy_source="top_k", entropy_k=4,
        extra={"entropy_lower": (entropy * 0.5).tolist(), "entropy_upper": (entropy * 2).tolist()})))
    flat = n // 2
    traces.append(Trace(prompt="q", answer="", token_ids=np.arange(flat), tokens=tuple(f" w{i}" for i in range(flat)),
                        surprisal=np.full(flat, 1e-4), entropy=np.zeros(flat), top_ids=np.zeros((flat, 0)),
                        top_logprobs=np.zeros((flat, 0))))
    return traces


def _texts(trace, i):
    return list(trace.top_tokens[i]) if trace.top_tokens is not None else [f"alt {t} <b>" for t in trace.top_ids[i]]


@pytest.mark.parametrize("signal", ["surprisal", "entropy", "risk"])
@pytest.mark.parametrize("scale", ["fixed", "answer"])
def test_heatmap_html_equals_its_tokens_rendered_one_at_a_time(signal, scale):
    checked = 0
    for trace in _equivalence_traces():
        if signal == "entropy" and not trace.has_entropy:
            continue
        for alternatives, note, limit in [(None, None, 200), (_texts, "ids <only>", 200), (_texts, None, 7)]:
            got = heatmap_html(trace, signal=signal, scale=scale, alternatives=alternatives, alternatives_note=note,
                               max_token_chars=limit, explanation=explain_trace(trace))
            want = _one_token_at_a_time(trace, signal=signal, scale=scale, alternatives=alternatives,
                                        alternatives_note=note, max_token_chars=limit)
            assert got == want
            checked += 1
    assert checked >= 15


def test_card_html_writes_the_known_card():
    from app.heatmap import card_html

    # Token 2 is two spaces (named, an empty-looking box says little); its first alternative is the chosen token, its
    # last one so unlikely that it shows in scientific notation; the entropy is a top-k estimate with bounds.
    trace = Trace(prompt="q", answer="a  ", token_ids=np.array([7, 3]), tokens=("a", "  "),
                  surprisal=np.array([0.1, np.log(2.0)]), entropy=np.array([0.2, 1.25]),
                  top_ids=np.array([[7, 1, 2], [3, 4, 5]]), top_logprobs=np.log([[0.9, 0.05, 0.05], [0.5, 0.25, 1e-13]]),
                  ranks=np.array([1, 12345]), metadata=TraceMetadata(
                      entropy_source="top_k", entropy_k=3, extra={"entropy_lower": [0.1, 1.0], "entropy_upper": [0.3, 2.5]}))
    card = card_html(trace, 1, "c<1>", alternatives=["  ", "<b>", "x" * 70], marks=("spike", "peak window"),
                     note="ids <only>", risk_share=0.25)
    assert card == (
        '<span class="tr-card" role="tooltip" id="c<1>" dir="ltr">'
        '<span class="tr-card-head">Token 2 <code>  </code> <span class="tr-k">(2 spaces)</span></span>'
        '<span class="tr-card-marks">spike · peak window</span>'
        '<span class="tr-card-grid">'
        '<span class="tr-k">probability</span><span>50.0%</span>'
        '<span class="tr-k">surprisal</span><span>0.69 nats</span>'
        '<span class="tr-k">entropy</span><span>1.25 nats</span>'
        '<span class="tr-k">entropy bounds</span><span>1.00 – 2.50 nats (top-3)</span>'
        '<span class="tr-k">rank</span><span>12,345</span>'
        '<span class="tr-k">risk share</span><span>0.250</span></span>'
        '<span class="tr-card-sub">alternatives (3)</span><span class="tr-card-grid">'
        '<span class="tr-num">50.0%</span><span><code>  </code> <span class="tr-k">(2 spaces)</span>'
        ' <span class="tr-k">(chosen)</span></span>'
        '<span class="tr-num">25.0%</span><span><code>&lt;b&gt;</code></span>'
        '<span class="tr-num">1.0e-13</span><span><code>' + "x" * 60 + '… (+10 chars)</code></span></span>'
        '<span class="tr-card-note">ids &lt;only&gt;</span></span>')
    # the token with no entropy recorded, no rank and no alternatives says so and lists none
    bare = dataclasses.replace(trace, entropy=None, ranks=None, top_ids=np.zeros((2, 0)), top_logprobs=np.zeros((2, 0)),
                               metadata=TraceMetadata(entropy_source="absent"))
    assert card_html(bare, 0, "c0", alternatives=None) == (
        '<span class="tr-card" role="tooltip" id="c0" dir="ltr"><span class="tr-card-head">Token 1 <code>a</code></span>'
        '<span class="tr-card-grid"><span class="tr-k">probability</span><span>90.5%</span>'
        '<span class="tr-k">surprisal</span><span>0.10 nats</span>'
        '<span class="tr-k">entropy</span><span>not recorded</span></span></span>')


def test_token_colours_equal_ramp_value_by_value():
    from app.heatmap import _text_colour, _token_styles

    values = np.concatenate([np.linspace(-0.5, 1.5, 2001), [0.62, np.nextafter(0.62, 1), 0.25, 0.5, 0.75, 1.0],
                             np.random.default_rng(2).random(5000)])
    assert _token_styles(values) == [f"background:{ramp(v)};color:{_text_colour(v)}" for v in values]
    # the ramp's stops, a point between two of them, and values outside [0, 1] clipped to its ends
    assert [ramp(v) for v in (0.0, 0.25, 0.5, 0.75, 1.0)] == [
        "rgb(255, 255, 229)", "rgb(254, 227, 145)", "rgb(254, 153, 41)", "rgb(217, 95, 14)", "rgb(153, 52, 4)"]
    assert ramp(0.375) == "rgb(254, 190, 93)"
    assert ramp(-3.0) == ramp(0.0) and ramp(7.0) == ramp(1.0)
    assert [_text_colour(v) for v in (0.62, np.nextafter(0.62, 1))] == ["#1f1f1f", "#ffffff"]


def test_heatmap_cache_reuses_the_html_of_the_same_answer_content():
    from app.heatmap_cache import _rendered, heatmap_cached

    _rendered.clear()
    trace = _equivalence_traces()[4]
    again = dataclasses.replace(trace)  # equal content, another answer object (another session's, say)
    other = dataclasses.replace(trace, prompt=trace.prompt + "?")  # another answer
    calls = []

    def render(t, signal):
        calls.append(signal)
        return heatmap_html(t, signal=signal)

    first = heatmap_cached(trace, None, ("surprisal", "fixed", None), lambda: render(trace, "surprisal"))
    assert heatmap_cached(trace, None, ("surprisal", "fixed", None), lambda: render(trace, "surprisal")) == first
    assert heatmap_cached(trace, None, ("risk", "fixed", None), lambda: render(trace, "risk")) != first
    assert heatmap_cached(again, None, ("surprisal", "fixed", None), lambda: render(again, "surprisal")) == first
    heatmap_cached(other, None, ("surprisal", "fixed", None), lambda: render(other, "surprisal"))
    assert calls == ["surprisal", "risk", "surprisal"]
    assert first == heatmap_html(trace, signal="surprisal")


def test_heatmap_cache_tells_apart_the_models_that_write_the_alternatives(monkeypatch):
    from app import heatmap_cache

    heatmap_cache._rendered.clear()
    trace = _equivalence_traces()[0]
    monkeypatch.setattr(heatmap_cache, "reads_alternatives", lambda lm, t: lm is not None)
    monkeypatch.setattr(heatmap_cache, "model_key", lambda lm: f"model {lm}")
    calls = []

    def render(lm):
        calls.append(lm)
        return f"<p>{lm}</p>"

    for lm in ("a", "b", "a", None, None):
        assert heatmap_cache.heatmap_cached(trace, lm, ("surprisal",), lambda lm=lm: render(lm)) == f"<p>{lm}</p>"
    assert calls == ["a", "b", None]


def test_trace_digest_follows_the_content():
    from app.keys import trace_digest

    traces = _equivalence_traces()
    assert len({trace_digest(t) for t in traces}) == len(traces)
    for trace in traces:
        assert trace_digest(dataclasses.replace(trace)) == trace_digest(trace)
        changed = dataclasses.replace(trace, surprisal=trace.surprisal + 1e-9)
        assert trace_digest(changed) != trace_digest(trace)


def test_try_these_labels_name_the_family_the_verdict_and_the_question():
    from app.prompts import example_label

    worked = {"family": "worked_arithmetic", "label": 0,
              "prompt": "Q: A shop had 64 coins. It sold 17, got 38 more and then sold 29. How many coins are left? "
                        "Show your steps.\nA:"}
    label = example_label(worked)
    assert label.startswith("worked arithmetic (answered wrong): A shop had 64 coins.")
    assert label.endswith("…") and len(label) < 130
    assert example_label({"family": "facts", "label": 1, "prompt": "Q: Who leads Kilo?\nA:"}) == \
        "facts (answered right): Who leads Kilo?"
    assert example_label({"family": "facts", "prompt": "Q: Who leads Kilo?\nA:"}) == "facts: Who leads Kilo?"
    assert example_label({"family": "arithmetic", "label": 0, "kind": "one token away",
                          "prompt": "What is 59 × 3?"}) == "arithmetic (answered wrong, one token away): What is 59 × 3?"
    assert example_label({"family": "arithmetic", "label": 1, "kind": "right", "prompt": "What is 2 + 2?"}) == \
        "arithmetic (answered right): What is 2 + 2?"


def test_try_these_follow_the_loaded_model():
    import json

    from app.prompts import try_prompts
    from app.services import DATASETS, DEMO_MODEL

    demo = json.loads((DATASETS / "try_prompts.json").read_text(encoding="utf-8"))
    real = json.loads((DATASETS / "real_try_prompts.json").read_text(encoding="utf-8"))
    assert try_prompts(str(DEMO_MODEL)) == demo
    # the real model's own examples carry its labels and kinds ...
    assert try_prompts(real["model"]) == real["examples"] and {e["label"] for e in real["examples"]} == {0, 1}
    # ... and any other model gets the same prompts without them: its answers may differ
    for other in (None, "some/other-model", "/models/mine.gguf"):
        shown = try_prompts(other)
        assert [e["prompt"] for e in shown] == [e["prompt"] for e in real["examples"]]
        assert all("label" not in e and "kind" not in e for e in shown)


def test_a_kept_single_choice_outside_the_options_falls_back_to_the_default():
    from streamlit.testing.v1 import AppTest

    def page():
        import streamlit as st

        from app import state

        st.session_state.setdefault("pick", 7)
        state.keep_valid("pick", range(3))
        st.write(f"kept={st.session_state.get('pick')}")
        st.session_state.setdefault("ok", 2)
        state.keep_valid("ok", range(3))
        st.write(f"ok={st.session_state.get('ok')}")

    at = AppTest.from_function(page).run()
    assert not at.exception
    assert [m.value for m in at.markdown] == ["kept=None", "ok=2"]


def test_trace_figure_writes_tiny_nats_as_numbers_not_si_prefixes():
    from helpers import make_trace

    from app.figures import trace_figure

    fig = trace_figure(make_trace([5e-5, 2e-5, 1e-5], [4e-5, 3e-5, 1e-5]))
    assert fig.layout.yaxis.title.text == "nats" and fig.layout.yaxis.exponentformat == "e"  # not "50μ"
