"""The Compare page's sampled answer (B) starts at a temperature that keeps a small model's answer on topic."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("torch")

from streamlit.testing.v1 import AppTest  # noqa: E402

from app import state  # noqa: E402
from app.services import DEMO_MODEL, get_model  # noqa: E402
from trace_core import DecodingConfig  # noqa: E402

PAGE = str(Path(__file__).resolve().parents[2] / "pages" / "compare.py")


def test_the_sampled_answer_defaults_to_temperature_0_7():
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.session_state[state.MODEL] = get_model(str(DEMO_MODEL))
    at.session_state[state.DECODING] = DecodingConfig(max_new_tokens=6)
    at.run()
    assert not at.exception
    assert at.number_input(key="compare_temperature").value == pytest.approx(0.7)
    at.text_area(key="compare_prompt").set_value("Q: What is 2 plus 3?\nA:")
    at.button(key="compare_run").click().run()
    assert not at.exception and not at.error
    b = at.session_state[state.COMPARISON].b
    assert b.metadata.decoding["do_sample"] is True and b.metadata.decoding["temperature"] == pytest.approx(0.7)
