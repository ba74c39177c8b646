"""The pages start on the sidebar model's own answers: the bundled datasets, "Try these" and the calibrator the
Calibrate page makes active follow the loaded model, and a calibrator of another model's answers is made active only
on the user's word."""

from __future__ import annotations

import html
import json

import pytest
from helpers import dashboard

pytest.importorskip("streamlit")
pytest.importorskip("torch")

from app.services import DATASETS, DEMO_MODEL, DEMO_MODEL_ID, demo_datasets, real_model_id  # noqa: E402
from app.state import CALIBRATOR  # noqa: E402


def test_the_bundled_datasets_start_with_the_models_own_answers():
    assert list(demo_datasets(DEMO_MODEL_ID))[:2] == ["demo_test", "demo_validation"]
    assert list(demo_datasets(str(DEMO_MODEL)))[:2] == ["demo_test", "demo_validation"]
    assert real_model_id() == "SmolLM2-135M-Instruct.Q4_1.gguf"
    for other in (real_model_id(), None, "/models/mine"):  # SmolLM2's, the default model's, for any other
        assert list(demo_datasets(other)) == ["real_validation", "real_test", "demo_test", "demo_validation"]


def test_try_these_of_the_demo_model_under_the_id_the_app_gives_it():
    from app.prompts import try_prompts

    demo = json.loads((DATASETS / "try_prompts.json").read_text(encoding="utf-8"))
    assert try_prompts(DEMO_MODEL_ID) == demo


@pytest.mark.slow
def test_calibrate_starts_on_the_demo_models_answers_and_makes_their_calibrator_active():
    at = dashboard("../pages/calibrate.py", timeout=300)
    assert at.selectbox(key="demo_dataset").value == "demo_test"
    assert at.session_state[CALIBRATOR].origin == "fitted on the Calibrate page"
    assert any("It is now the active calibrator" in c.value for c in at.caption)


@pytest.mark.slow
def test_another_models_calibrator_is_made_active_only_with_the_button(tiny_model_dirs):
    at = dashboard("../pages/calibrate.py", model=tiny_model_dirs["gpt2"], timeout=300)
    assert at.selectbox(key="demo_dataset").value == "real_validation"  # the default model's answers
    assert CALIBRATOR not in at.session_state
    assert any("not of the sidebar's model" in html.unescape(i.value) and "not made active" in i.value
               for i in at.info), [i.value for i in at.info]
    at.button(key="use_fitted_calibrator").click().run()
    active = at.session_state[CALIBRATOR]
    assert active.pinned and active.model.provenance_["model_id"] == [real_model_id()]

    # the sidebar's model changes to the demo model: the page returns to its answers, and their calibrator does not
    # replace the one the user chose
    at.sidebar.radio(key="model_source").set_value("Bundled demo model").run()
    assert not at.exception
    assert at.selectbox(key="demo_dataset").value == "demo_test"
    assert at.session_state[CALIBRATOR].model.provenance_["model_id"] == [real_model_id()]
