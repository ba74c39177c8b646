"""Direction in Chromium: the Inspect heatmap and the Compare grid read right to left for an Arabic answer, whatever
its first tokens are (digits, bytes of a character), left to right for an English one, and their cards always read
left to right."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import skip_unless_ready

from app.compare_view import aligned_heatmap_html
from app.heatmap import HEATMAP_CSS, heatmap_html
from trace_core import Trace, TraceMetadata
from trace_core.traces.align import align_tokens

pytest.importorskip("playwright.sync_api")
skip_unless_ready()

pytestmark = pytest.mark.e2e

ANSWERS = {
    "arabic": (["\u0645\u0631\u062d\u0628\u0627", " \u0628\u0643"], "rtl"),
    "arabic after digits": (["1", ".", " \u0645\u0631\u062d\u0628\u0627", " \u0628\u0643"], "rtl"),
    "arabic after bytes of its first letter": (["", "\u0645", "\u0631\u062d\u0628\u0627"], "rtl"),
    "english": (["Hello", " there", "."], "ltr"),
    "english after digits": (["1", ".", " Hello"], "ltr"),
}


def trace_of(tokens):
    n = len(tokens)
    return Trace(prompt="Q", answer="".join(tokens), token_ids=np.arange(n), tokens=list(tokens),
                 surprisal=np.linspace(0.1, 2.0, n), entropy=None, top_ids=[[]] * n, top_logprobs=[[]] * n,
                 metadata=TraceMetadata(entropy_source="absent"))


def directions(page, body: str, selector: str) -> tuple[str, set[str]]:
    page.set_content(f"<html><body>{HEATMAP_CSS}{body}</body></html>")
    return (page.eval_on_selector(selector, "e => getComputedStyle(e).direction"),
            set(page.eval_on_selector_all(".tr-card", "cards => cards.map(c => getComputedStyle(c).direction)")))


@pytest.mark.parametrize("name", list(ANSWERS))
def test_the_inspect_heatmap_takes_the_answers_direction(page, name):
    tokens, expected = ANSWERS[name]
    assert directions(page, heatmap_html(trace_of(tokens)), ".tr-heatmap") == (expected, {"ltr"})


@pytest.mark.parametrize("name", list(ANSWERS))
def test_the_compare_grid_takes_the_answers_direction(page, name):
    tokens, expected = ANSWERS[name]
    a, b = trace_of(tokens), trace_of(tokens[:-1] + ["!"])
    grid = aligned_heatmap_html(a, b, align_tokens(a.tokens, b.tokens))
    assert directions(page, grid, ".tc-grid") == (expected, {"ltr"})
    if expected == "rtl":  # the label column, then the first token's, from the right
        x = page.eval_on_selector_all(".tc-col", "cols => cols.slice(0, 2).map(c => c.getBoundingClientRect().x)")
        assert x[0] > x[1]


def test_an_arabic_answer_beside_an_english_one_keeps_the_grid_left_to_right(page):
    """One grid has one direction: right to left, the English row read backwards (SmolLM2 sampled an English answer
    beside its greedy Arabic one)."""
    a = trace_of(ANSWERS["arabic"][0])
    b = trace_of(ANSWERS["english"][0])
    for first, second in ((a, b), (b, a)):
        grid = aligned_heatmap_html(first, second, align_tokens(first.tokens, second.tokens))
        assert directions(page, grid, ".tc-grid")[0] == "ltr"
    digits = trace_of(["1", ".", "2"])  # no letters: the other answer decides
    grid = aligned_heatmap_html(a, digits, align_tokens(a.tokens, digits.tokens))
    assert directions(page, grid, ".tc-grid")[0] == "rtl"
