"""The Compare page through AppTest (no browser), with the bundled demo model as the sidebar would store it."""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import random_traces

pytest.importorskip("streamlit")
pytest.importorskip("torch")

from streamlit.testing.v1 import AppTest  # noqa: E402

from app import state  # noqa: E402
from app.calibrators import fitted_calibrator  # noqa: E402
from app.compare_view import Comparison  # noqa: E402
from app.services import DEMO_MODEL, get_model  # noqa: E402
from trace_core import DecodingConfig, Trace, TracePlus  # noqa: E402
from trace_core.traces.align import align_tokens, divergence_summary  # noqa: E402

PAGE = str(Path(__file__).resolve().parents[2] / "pages" / "compare.py")
RESULT = "compare_result"
PROMPT = "Q: A box holds 51 coins. Tom adds 9 and then 8 more. How many coins are in the box?\nA:"


@pytest.fixture(scope="module")
def demo_lm():
    return get_model(str(DEMO_MODEL))


def start(lm, *, decoding: DecodingConfig | None = None, calibrator=None) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.session_state[state.MODEL] = lm
    at.session_state[state.DECODING] = decoding or DecodingConfig(max_new_tokens=12)
    if calibrator is not None:
        at.session_state[state.CALIBRATOR] = fitted_calibrator(calibrator, origin="fitted in a test")
    at.run()
    assert not at.exception
    return at


def bodies(at: AppTest) -> list[str]:
    return [h.proto.body for h in at.get("html")]


def grid(at: AppTest) -> str:
    found = [b for b in bodies(at) if 'data-testid="compare-heatmap"' in b]
    assert len(found) == 1
    return found[0]


def compare(at: AppTest, prompt: str = PROMPT) -> AppTest:
    at.text_area(key="compare_prompt").set_value(prompt)
    at.button(key="compare_run").click().run()
    assert not at.exception
    return at


def test_greedy_against_sampled_gives_two_rows_and_every_token_once(demo_lm):
    at = compare(start(demo_lm))
    assert not at.error
    result = at.session_state[RESULT]
    a, b = result.a, result.b
    assert a.metadata.decoding["do_sample"] is False and b.metadata.decoding["do_sample"] is True
    assert b.metadata.decoding["temperature"] == 0.7 and len(a) <= 12 and len(b) <= 12
    table = at.dataframe[0].value
    assert list(table.index) == ["A", "B"] and table["tokens"].tolist() == [len(a), len(b)]
    cells = re.findall(r'data-side="(\w)" data-index="(\d+)"', grid(at))
    assert sorted((s, int(i)) for s, i in cells) == sorted([("a", i) for i in range(len(a))]
                                                           + [("b", j) for j in range(len(b))])
    sentence = divergence_summary(align_tokens(a.tokens, b.tokens))
    assert any(sentence.replace("'", "&#x27;") in body for body in bodies(at))
    assert "Fit or load a calibrator on Calibrate or Flag & export to see TRACE+." in [c.value for c in at.caption]
    assert "tc-differs" in grid(at)  # the answers differ (seeded sampling at 0.7): the marks are explained under it
    assert any("dotted line" in c.value and "tokens that differ" in c.value for c in at.caption)
    # another widget reruns the page: the comparison stays, recoloured
    at.radio(key="compare_signal").set_value("entropy").run()
    assert not at.exception and at.session_state[RESULT] is result and len(at.dataframe) == 1


def test_missing_other_model_is_an_error_and_the_old_comparison_is_gone(demo_lm):
    at = compare(start(demo_lm))
    assert RESULT in at.session_state and len(at.dataframe) == 1
    at.radio(key="compare_mode").set_value("Another model").run()
    at.text_input(key="compare_model").set_value("/no/such/model-folder").run()
    at.button(key="compare_run").click().run()
    assert not at.exception
    assert len(at.error) == 1
    assert RESULT not in at.session_state or at.session_state[RESULT] is None
    assert len(at.dataframe) == 0 and not any("compare-heatmap" in b for b in bodies(at))


def test_other_model_without_a_name_says_so(demo_lm):
    at = start(demo_lm)
    at.radio(key="compare_mode").set_value("Another model").run()
    compare(at)
    assert [html.unescape(e.value) for e in at.error] == ["Type the folder or model id of model B."]


def test_other_model_decodes_like_a(demo_lm):
    at = start(demo_lm)
    at.radio(key="compare_mode").set_value("Another model").run()
    at.text_input(key="compare_model").set_value(str(DEMO_MODEL)).run()
    compare(at)
    assert not at.error
    result = at.session_state[RESULT]
    # one model, one greedy decoding: the same answer, so no divergence
    assert result.a.tokens == result.b.tokens and result.alignment.first_divergence is None
    assert any("The answers are identical" in b for b in bodies(at))


def test_empty_prompt_is_refused(demo_lm):
    at = compare(start(demo_lm), "   ")
    assert [w.value for w in at.warning] == ["The prompt is empty: type a question first."]
    assert RESULT not in at.session_state or at.session_state[RESULT] is None


def hostile(tokens: list[str]) -> Trace:
    n = len(tokens)
    return Trace(prompt="p", answer="".join(tokens), token_ids=np.arange(n), tokens=tuple(tokens),
                 surprisal=np.linspace(0.1, 4, n), entropy=np.linspace(0.2, 2, n), top_ids=np.zeros((n, 0)),
                 top_logprobs=np.zeros((n, 0)))


def test_hostile_tokens_are_escaped_everywhere(demo_lm):
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.session_state[state.MODEL] = demo_lm
    at.session_state[state.DECODING] = DecodingConfig(max_new_tokens=4)
    at.session_state[RESULT] = Comparison("p", hostile(["x", "<img src=x onerror=alert(1)>", "a\u202eb"]),
                                          hostile(["x", "<script>alert(2)</script>", "\x07"]))
    at.run()
    assert not at.exception
    page = "".join(bodies(at))
    assert "<img" not in page and "<script" not in page and "\u202e" not in page and "\x07" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in grid(at)
    # the comparison belongs to another prompt than the empty box: it says so
    assert any("earlier prompt" in i.value for i in at.info)
    assert any("another model than the sidebar's" in i.value for i in at.info)  # these traces name no model


def test_a_current_comparison_is_not_called_stale(demo_lm):
    at = compare(start(demo_lm))
    at.run()  # a plain rerun
    assert not at.exception and len(at.info) == 0


def test_trace_plus_probability_per_side(demo_lm):
    model = TracePlus().fit(random_traces(40, seed=3), np.arange(40) % 2)
    at = compare(start(demo_lm, calibrator=model))
    result = at.session_state[RESULT]
    expected = model.predict_proba([result.a, result.b])
    assert [m.label for m in at.metric] == ["A: TRACE+ probability correct", "B: TRACE+ probability correct"]
    assert [m.value for m in at.metric] == [f"{p:.0%}" for p in expected]
    captions = [html.unescape(c.value) for c in at.caption]  # the page writes punctuation as character references
    assert any(c.startswith("From the active calibrator: TRACE+") and "fitted in a test" in c for c in captions)
    assert at.dataframe[0].value["TRACE+ probability"].tolist() == pytest.approx(expected.tolist())


def test_a_prompt_over_the_limit_is_refused_with_the_limit(demo_lm, monkeypatch):
    monkeypatch.setenv("TRACE_MAX_PROMPT_CHARS", "50")
    at = compare(start(demo_lm), "Q: " + "x" * 60 + "\nA:")
    assert [w.value for w in at.warning] == [
        "The prompt is 66 characters; the limit is 50 (TRACE_MAX_PROMPT_CHARS): shorten it."]
    assert RESULT not in at.session_state or at.session_state[RESULT] is None
