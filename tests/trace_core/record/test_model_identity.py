"""A model is identified by its content, not the path that named it: the same folder under two paths gives the same
digest and no "fitted on another model" warning; another model's weights give another digest and the warning."""

from __future__ import annotations

import dataclasses
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers import random_traces

from trace_core import TracePlus, calibrator_from_json
from trace_core.record.load import model_digest
from trace_core.traces.trace import TraceMetadata

DEMO = Path(__file__).resolve().parents[3] / "assets" / "demo-model"


def test_the_same_model_by_any_path_or_copy_has_one_digest(tmp_path, monkeypatch):
    digest = model_digest(DEMO)
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 16
    monkeypatch.chdir(DEMO.parents[1])
    assert model_digest("assets/demo-model") == digest  # relative and absolute
    link = tmp_path / "link"
    os.symlink(DEMO, link)
    assert model_digest(link) == digest
    copy = tmp_path / "copy"
    shutil.copytree(DEMO, copy)
    assert model_digest(copy) == digest
    (copy / "training.json").write_text("{}")  # not a file that identifies the model
    assert model_digest(copy) == digest


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_changed_weights_or_tokenizer_change_the_digest(tmp_path, where):
    copy = tmp_path / "copy"
    shutil.copytree(DEMO, copy)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    at = {"start": 9, "middle": len(data) // 2, "end": len(data) - 3}[where]
    data[at] ^= 0xFF  # one byte of a fine-tune's weights
    weights.write_bytes(bytes(data))
    assert model_digest(copy) != model_digest(DEMO)
    other = tmp_path / "other"
    shutil.copytree(DEMO, other)
    (other / "tokenizer_config.json").write_text((other / "tokenizer_config.json").read_text() + " ")
    assert model_digest(other) != model_digest(DEMO)


def _with(traces, **meta):
    return [dataclasses.replace(t, metadata=TraceMetadata(entropy_source="exact", **meta)) for t in traces]


def test_calibrator_from_one_path_applies_to_the_same_model_by_another_without_warning():
    traces = random_traces(120, seed=3)
    y = (np.arange(120) % 3 == 0).astype(int)
    digest = model_digest(DEMO)
    fitted_on = _with(traces, model_id="assets/demo-model", model_digest=digest)
    model = TracePlus().fit(fitted_on, y)
    assert model.provenance_["model_digest"] == [digest]
    same = _with(traces[:20], model_id=str(DEMO), model_digest=digest)
    for calibrator in (model, calibrator_from_json(model.to_json())):
        assert calibrator.provenance_mismatch(same) == []
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            calibrator.predict_proba(same)
    other = _with(traces[:20], model_id="assets/demo-model", model_digest="sha256:0123456789abcdef")
    (message,) = model.provenance_mismatch(other)  # the same name, other weights: another model
    assert "fitted on traces of model 'assets/demo-model'" in message
    unknown = _with(traces[:20], model_id=str(DEMO))  # no digest on one side: the ids decide, as before
    assert model.provenance_mismatch(unknown)


def test_digest_is_checked_in_metadata_and_old_calibrator_files_load():
    with pytest.raises(ValueError, match="model_digest"):
        TraceMetadata(model_digest=123)
    assert TraceMetadata.from_dict({"model_id": "m"}).model_digest == ""
    traces = random_traces(60, seed=1)
    model = TracePlus().fit(traces, (np.arange(60) % 2).astype(int))
    text = model.to_json().replace('"model_digest": [],', "")  # a file written before digests existed
    assert "model_digest" not in text
    assert calibrator_from_json(text).provenance_mismatch(traces) == []


def test_loading_records_the_digest_in_every_trace(monkeypatch):
    pytest.importorskip("torch")
    from trace_core.record import generate_traces, load_model
    from trace_core.traces.trace import DecodingConfig

    monkeypatch.chdir(DEMO.parents[1])
    by_relative = load_model("assets/demo-model", device="cpu")
    by_absolute = load_model(str(DEMO), device="cpu")
    assert by_relative.model_digest == by_absolute.model_digest == model_digest(DEMO)
    (trace,) = generate_traces(by_relative, ["Q: 2 + 2? A:"], config=DecodingConfig(max_new_tokens=3))
    assert trace.metadata.model_digest == model_digest(DEMO)
    from app.keys import same_model

    assert same_model(by_absolute, trace)  # another path, the same model


def test_a_calibrator_fitted_on_generated_answers_warns_on_teacher_forced_ones():
    traces = random_traces(80, seed=5)
    y = (np.arange(80) % 2).astype(int)
    model = TracePlus().fit(_with(traces, model_id="m", source="generate"), y)
    assert model.provenance_["source"] == ["generate"]
    forced = _with(traces[:10], model_id="m", source="teacher_forced")
    for calibrator in (model, calibrator_from_json(model.to_json())):
        (message,) = calibrator.provenance_mismatch(forced)
        assert "fitted on the model's own generated answers" in message
        assert "given answers scored by teacher forcing" in message
    assert model.provenance_mismatch(_with(traces[:10], model_id="m", source="generate")) == []
    both = TracePlus().fit(_with(traces, model_id="m", source="teacher_forced")[:40]
                           + _with(traces, model_id="m", source="generate")[40:], y)
    assert both.provenance_mismatch(forced) == []  # fitted on both kinds
    with pytest.raises(Exception, match="provenance.source"):
        calibrator_from_json(model.to_json().replace('"generate"', '"guessed"'))


def test_imported_traces_never_warn_about_their_origin():
    traces = random_traces(60, seed=6)
    y = (np.arange(60) % 2).astype(int)
    model = TracePlus().fit(_with(traces, model_id="m", source="imported"), y)
    assert model.provenance_mismatch(_with(traces[:10], model_id="m", source="teacher_forced")) == []
    generated = TracePlus().fit(_with(traces, model_id="m", source="generate"), y)
    assert generated.provenance_mismatch(_with(traces[:10], model_id="m", source="imported")) == []
