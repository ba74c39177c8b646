"""Inspect's spans table ranks names, numbers and dates apart from sentences (the boxes on the answer carry the first
ranking's numbers): with both in one table its rank column and a caption say so, so that a second 1 is not read as
a tie."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("streamlit")

from streamlit.testing.v1 import AppTest  # noqa: E402


def _panel() -> None:
    import numpy as np

    from app.spans import ranked_spans, spans_panel
    from trace_core import Trace, TraceMetadata, explain_trace

    tokens = ["The", " capital", " of", " Mong", "olia", " is", " Kh", "ant", "ak", ".", " It", " has", " 12",
              " people", "."]
    surprisal = np.array([0.1, 0.2, 0.1, 0.4, 0.1, 0.1, 3.5, 0.9, 0.2, 0.1, 0.2, 0.1, 2.0, 0.3, 0.1])
    n = len(tokens)
    trace = Trace(prompt="Q", answer="".join(tokens), token_ids=np.arange(n), tokens=tokens, surprisal=surprisal,
                  entropy=None, top_ids=[[]] * n, top_logprobs=[[]] * n,
                  metadata=TraceMetadata(entropy_source="absent"))
    fine, sentences = ranked_spans(trace, explain_trace(trace))
    spans_panel(fine, sentences, trace.answer)


def test_the_rank_column_says_that_names_and_sentences_are_ranked_apart():
    at = AppTest.from_function(_panel, default_timeout=60).run()
    assert not at.exception
    table = at.dataframe[0].value
    kinds = table["kind"].tolist()
    fine = sum(k != "sentence" for k in kinds)
    assert 0 < fine < len(kinds)  # both groups: the ranks start again at the first sentence
    assert table["rank"].tolist() == list(range(1, fine + 1)) + list(range(1, len(kinds) - fine + 1))
    shown = json.loads(at.dataframe[0].proto.columns)["rank"]
    assert shown["label"] == "rank in group"
    assert ("Names, numbers and dates are ranked among themselves, riskiest first (the boxes on the answer carry "
            "these numbers); sentences are ranked among sentences.") in [c.value for c in at.caption]
