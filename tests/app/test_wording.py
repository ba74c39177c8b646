"""Sentences on the pages that a count or a calm number could make misleading: one of a thing is singular, and an
answer without a spike is not called right."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from helpers import make_trace

pytest.importorskip("streamlit")

from app.explain import explain_risk, unfinished_note  # noqa: E402
from trace_core import TraceMetadata, explain_trace  # noqa: E402
from trace_core.methods.risk import SPIKE_MIN_SURPRISAL  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_an_answer_without_a_spike_is_not_called_right():
    confident = make_trace([0.0, 0.02, 0.09])  # every token above 90% probability, as a confident "1392" would be
    out = explain_risk(confident, explain_trace(confident))
    floor = math.floor(100 * math.exp(-SPIKE_MIN_SURPRISAL))
    assert (f"No token stands out: the model gave every token a probability above {floor}%. That does not make the "
            "answer right: a confident mistake has no spike.") in out


def test_one_token_cut_at_the_limit_is_one_new_token():
    one = make_trace([0.4])
    cut = dataclasses.replace(one, metadata=TraceMetadata(extra={"finish_reason": "length"}))
    assert "cut at the token limit (1 new token):" in unfinished_note(cut)


def test_compare_says_at_most_one_new_token_in_the_singular():
    pytest.importorskip("torch")
    from streamlit.testing.v1 import AppTest

    from app import state
    from app.services import DEMO_MODEL, get_model
    from trace_core import DecodingConfig

    at = AppTest.from_file(str(ROOT / "pages" / "compare.py"), default_timeout=120)
    at.session_state[state.MODEL] = get_model(str(DEMO_MODEL))
    at.session_state[state.DECODING] = DecodingConfig(max_new_tokens=1)
    at.run()
    assert not at.exception
    assert "greedy · at most 1 new token" in [c.value for c in at.caption]
