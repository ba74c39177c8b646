"""Flag & export's guaranteed mode: the threshold certified on labeled answers the calibrator was not fitted on."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("torch")

from helpers import flag_page_after_calibrate  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from trace_core import read_dataset  # noqa: E402
from trace_core.calibration.calibrators import probability_correct  # noqa: E402
from trace_core.flagging.guarantee import guaranteed_threshold  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATASETS = ROOT / "assets" / "datasets"


def guarantee_page() -> AppTest:
    at = flag_page_after_calibrate()
    at.radio(key="flag_mode").set_value("guarantee").run()
    assert not at.exception
    return at


@pytest.mark.slow
def test_the_guarantee_is_chosen_on_other_labeled_answers_and_stated():
    at = guarantee_page()
    at.selectbox(key="risk_demo_dataset").set_value("demo_test").run()
    assert not at.exception and not at.error
    model = at.session_state["calibrator"].model
    risk = read_dataset(DATASETS / "demo_test.csv")
    g = guaranteed_threshold(probability_correct(model, list(risk.traces)), risk.labels, max_risk=0.1, delta=0.1)
    assert g.threshold is not None
    assert any(g.sentence() == html.unescape(s.value) for s in at.success)
    (scored,) = at.session_state["scored"].values()
    flagged = at.metric[0].value
    assert flagged == f"{int((scored['probability_correct'] < g.threshold).sum()):,} of {len(scored):,}"
    # a stricter alpha: fewer answers kept, or no guarantee with what it would need
    at.slider(key="flag_max_risk").set_value(0.01).run()
    assert not at.exception
    strict = guaranteed_threshold(probability_correct(model, list(risk.traces)), risk.labels, max_risk=0.01,
                                  delta=0.1)
    assert strict.threshold is None  # 1% is out of reach on these answers
    # a warning naming the confident wrong answers by their rows in the file, and every answer flagged: keeping none
    # is the only guaranteed choice
    rows = risk.frame[risk.row_column].tolist()
    assert any(html.unescape(w.value) == strict.sentence(rows) for w in at.warning), [w.value for w in at.warning]
    assert "most confident (row" in strict.sentence(rows)
    assert at.metric[0].value == f"{len(scored):,} of {len(scored):,}"
    assert at.get("download_button")  # the flagged answers (all of them) can be exported


@pytest.mark.slow
def test_the_answers_the_calibrator_was_fitted_on_cannot_choose_it():
    at = guarantee_page()
    at.selectbox(key="risk_demo_dataset").set_value("demo_validation").run()
    assert not at.exception
    assert any("fitted on these answers" in e.value for e in at.error)
    assert not any("guarantees" in s.value for s in at.success)
    assert not at.get("download_button")  # nothing flagged, nothing to download
