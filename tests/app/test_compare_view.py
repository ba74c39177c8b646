"""The Compare page's rendering: the aligned token grid and the two answers' numbers."""

from __future__ import annotations

import html
import math
import re

import numpy as np
import pytest
from helpers import random_traces

pytest.importorskip("streamlit")

from app.compare_view import Comparison, aligned_heatmap_html, compare_metrics, describe_decoding  # noqa: E402
from app.heatmap import ramp  # noqa: E402
from trace_core import DecodingConfig, Trace, TraceMetadata, TracePlus, trace_confidence  # noqa: E402
from trace_core.traces.align import align_tokens  # noqa: E402

HOSTILE = "<img src=x onerror=alert(1)>"


def trace_of(tokens, surprisal, *, entropy=True, decoding=None, model_id="m") -> Trace:
    n = len(tokens)
    s = np.asarray(surprisal, dtype=float)
    meta = TraceMetadata(model_id=model_id, decoding=decoding or {}, entropy_source="exact" if entropy else "absent")
    return Trace(prompt="p", answer="".join(tokens), token_ids=np.arange(n), tokens=tuple(tokens), surprisal=s,
                 entropy=s + 0.25 if entropy else None, top_ids=np.zeros((n, 0)), top_logprobs=np.zeros((n, 0)),
                 metadata=meta)


def cells(out: str) -> list[tuple[str, int]]:
    return [(side, int(i)) for side, i in re.findall(r'data-side="(\w)" data-index="(\d+)"', out)]


@pytest.fixture
def pair():
    a = trace_of(["The", " answer", " is", " 7", "6", "."], [0.1, 0.2, 0.3, 1.0, 5.0, 0.2])
    b = trace_of(["The", " answer", " is", " about", " 75", "."], [0.1, 0.2, 0.3, 2.0, 9.0, 0.4])
    return a, b


def test_every_token_of_both_answers_is_in_the_grid_once(pair):
    a, b = pair
    al = align_tokens(a.tokens, b.tokens)
    out = aligned_heatmap_html(a, b, al)
    assert sorted(cells(out)) == sorted([("a", i) for i in range(len(a))] + [("b", j) for j in range(len(b))])
    n_gaps = sum(i is None for i, _ in al.columns) + sum(j is None for _, j in al.columns)
    assert out.count("tc-gap") - 1 == n_gaps  # one more in the style sheet
    assert out.count('class="tc-col') == len(al) + 1  # the columns and the row names
    # A's cells come before B's in each column, and the columns in order
    blocks = re.findall(r'<div class="tc-col[^"]*" data-column="(\d+)">(.*?)</div>', out, flags=re.S)
    assert [int(k) for k, _ in blocks] == list(range(len(al)))
    for (_, body), (i, j) in zip(blocks, al.columns, strict=True):
        assert cells(body) == [(s, x) for s, x in (("a", i), ("b", j)) if x is not None]


def test_divergence_column_is_marked_and_differing_columns_too(pair):
    a, b = pair
    al = align_tokens(a.tokens, b.tokens)
    out = aligned_heatmap_html(a, b, al)
    k = al.first_divergence
    assert k == 3
    assert re.search(rf'<div class="tc-col tc-diverge" data-column="{k}"><span class="tc-mark"><span class="tc-flag">diverge', out)
    assert out.count(">diverge<") == 1
    differs = {int(x) for x in re.findall(r'class="tc-col tc-differs" data-column="(\d+)"', out)}
    assert differs == {c for c in range(len(al)) if c != k and not al.agrees(c)}


def test_cell_colours_follow_the_signal_on_one_scale(pair):
    a, b = pair
    al = align_tokens(a.tokens, b.tokens)
    for signal, top, values in (("surprisal", 6.0, (a.surprisal, b.surprisal)),
                                ("entropy", 4.0, (a.entropy, b.entropy))):
        out = aligned_heatmap_html(a, b, al, signal=signal)
        colours = dict(((side, int(i)), colour) for colour, side, i in
                       re.findall(r'background:(rgb\([^)]*\));[^"]*" data-side="(\w)" data-index="(\d+)"', out))
        for side, v in zip("ab", values, strict=True):
            for i, x in enumerate(v):
                assert colours[(side, i)] == ramp(min(x / top, 1.0))


def test_tokens_and_hover_text_are_escaped():
    a = trace_of(["x", HOSTILE, "a\u202eb", "line\n", "\x07"], [0.1, 3.0, 0.2, 0.3, 0.4])
    b = trace_of(["x", "<script>alert(2)</script>", "y" * 300], [0.1, 0.2, 0.3])
    out = aligned_heatmap_html(a, b, align_tokens(a.tokens, b.tokens), labels=("<b>A</b>", "B"))
    assert "<img" not in out and "<script" not in out and "<b>A" not in out
    assert html.escape(HOSTILE) in out and "&lt;b&gt;A&lt;/b&gt;" in out
    assert "\u202e" not in out and "\\u202e" in out and "\x07" not in out
    assert "line↵" in out and "<br" not in out  # one line per cell
    assert "y" * 24 + "…" in out and "y" * 25 not in out.split("title=")[0]


def test_bad_arguments_are_refused(pair):
    a, b = pair
    al = align_tokens(a.tokens, b.tokens)
    with pytest.raises(ValueError, match="signal"):
        aligned_heatmap_html(a, b, al, signal="risk")
    with pytest.raises(ValueError, match="other tokens"):
        aligned_heatmap_html(b, a, al)
    no_entropy = trace_of(list(a.tokens), a.surprisal, entropy=False)
    with pytest.raises(ValueError, match="no entropy"):
        aligned_heatmap_html(no_entropy, b, al, signal="entropy")


def test_metrics_rows_match_independent_numbers(pair):
    a, b = pair
    sampled = DecodingConfig(do_sample=True, temperature=1.5, seed=3).to_dict()
    b = trace_of(list(b.tokens), b.surprisal, entropy=False, decoding=sampled, model_id="other")
    table = compare_metrics(a, b, labels=("greedy", "sampled"))
    assert list(table.index) == ["greedy", "sampled"]
    assert "TRACE+ probability" not in table
    assert table["tokens"].tolist() == [6, 6]
    assert table.loc["greedy", "TRACE confidence"] == pytest.approx(trace_confidence(a))
    assert table.loc["sampled", "TRACE variant"] != table.loc["greedy", "TRACE variant"]  # surprisal-only
    assert table["mean surprisal"].tolist() == pytest.approx([sum(a.surprisal) / 6, sum(b.surprisal) / 6])
    assert table["max surprisal"].tolist() == [5.0, 9.0]
    assert table["entropy source"].tolist() == ["exact", "absent"]
    assert table["model"].tolist() == ["m", "other"]
    assert table["decoding"].tolist() == ["—", "sample · T 1.5 · seed 3"]


def test_metrics_with_a_trace_plus_calibrator_and_an_empty_answer(pair):
    a, _ = pair
    traces = random_traces(40, seed=2)
    model = TracePlus().fit(traces, np.arange(40) % 2)
    empty = trace_of([], [])
    table = compare_metrics(a, empty, model)
    assert table.loc["A", "TRACE+ probability"] == pytest.approx(float(model.predict_proba([a])[0]))
    assert math.isnan(table.loc["B", "TRACE+ probability"]) and math.isnan(table.loc["B", "mean surprisal"])
    assert table.loc["B", "tokens"] == 0
    with pytest.raises(TypeError, match="Trace"):
        compare_metrics(a, "b")


def test_describe_decoding():
    assert describe_decoding(DecodingConfig()) == "greedy"
    assert describe_decoding(DecodingConfig(do_sample=True, temperature=0.7, top_p=0.9, top_k=40, seed=1)) == (
        "sample · T 0.7 · top-p 0.9 · top-k 40 · seed 1")
    assert describe_decoding({}) == "—"


def test_comparison_aligns_its_traces(pair):
    a, b = pair
    kept = Comparison("p", a, b)
    assert kept.alignment == align_tokens(a.tokens, b.tokens) and kept.model_b is None
