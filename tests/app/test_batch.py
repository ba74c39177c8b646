"""Answering a file of prompts on the Calibrate page (app.batch): generated with the sidebar's model in batches,
kept through Stop and reruns, labeled against `reference`, then evaluated like any dataset."""

from __future__ import annotations

import html
import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("streamlit")
pytest.importorskip("torch")

from helpers import calibrate_by_path, downloaded  # noqa: E402

from app.batch import is_prompts_file  # noqa: E402
from app.inputs import DatasetFile  # noqa: E402
from trace_core import DecodingConfig, generate_traces, read_dataset  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def prompts_file(tmp_path):
    demo = pd.read_csv(ROOT / "assets" / "datasets" / "demo_validation.csv")
    frame = demo[["prompt", "reference", "family", "label"]].head(40).copy()  # its label is of other answers
    frame.loc[5, "prompt"] = ""  # a row without a prompt: named and left out
    path = tmp_path / "prompts.csv"
    frame.to_csv(path, index=False)
    return path, frame


def test_a_table_without_answers_is_a_prompts_file(tmp_path):
    assert is_prompts_file(DatasetFile(b"prompt,reference\nQ,1\n", "p.csv"))
    assert is_prompts_file(DatasetFile(b'{"prompt": "Q", "reference": "1"}\n', "p.jsonl"))
    assert not is_prompts_file(DatasetFile(b"prompt,answer,label\nQ,1,1\n", "d.csv"))
    assert not is_prompts_file(DatasetFile(b'{"prompt": "Q", "response": {}}\n', "d.jsonl"))
    assert not is_prompts_file(DatasetFile(b"\x00\x01binary", "d.csv"))  # the dataset reader says what is wrong


@pytest.mark.slow
def test_calibrate_answers_a_prompts_file_then_evaluates_the_answers(prompts_file, monkeypatch):
    path, frame = prompts_file
    at = calibrate_by_path(path, monkeypatch)
    assert any("holds 39 prompts and no answers" in html.unescape(i.value) for i in at.info)
    assert any("1 row is left out: row 6: prompt: is empty" in html.unescape(w.value) for w in at.warning)
    assert any("label" in html.unescape(c.value) for c in at.caption)  # the input's labels are of other answers
    assert not at.get("plotly_chart")  # nothing to evaluate before the answers exist
    at.button(key="generate_answers").click().run()
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 3  # generated, labeled, evaluated

    # the answers are the sidebar model's greedy answers to the prompts, labeled against the references
    data = at.session_state["flag_data"]
    kept = frame.drop(index=5).reset_index(drop=True)
    lm = at.session_state["lm"]
    config = at.session_state["decoding"]
    expected = generate_traces(lm, kept["prompt"].tolist(), config=config)
    assert [t.answer for t in data.traces] == [t.answer for t in expected]
    for got, want in zip(data.traces, expected, strict=True):
        np.testing.assert_allclose(got.surprisal, want.surprisal, atol=1e-6)
    from trace_core import label_from_reference

    labels = [label_from_reference(t.answer, r) for t, r in zip(expected, kept["reference"], strict=True)]
    assert data.labels.tolist() == labels and 0 < sum(labels) < len(labels)
    assert data.frame["prompts_row"].tolist() == [n for n in range(1, 41) if n != 6]
    # the answered dataset downloads with its traces and reads back as a dataset
    assert "Download the dataset with its 39 traces:" in [m.value for m in at.markdown]
    back = read_dataset(io.BytesIO(downloaded(at, "download_traces_jsonl")), format="jsonl")
    assert len(back.frame) == 39 and back.labels.tolist() == labels


@pytest.mark.slow
def test_stop_keeps_the_answers_and_the_rest_can_be_generated_later(prompts_file, monkeypatch):
    from app import batch, state

    path, _ = prompts_file
    at = calibrate_by_path(path, monkeypatch)
    lm = at.session_state["lm"]
    assert list(at.session_state[state.GENERATED].values()) == [({}, {})]  # nothing generated yet
    # as if Stop came after the first batch: the store holds 8 answers
    from app.keys import digest, model_key

    data = path.read_bytes()
    config: DecodingConfig = at.session_state["decoding"]
    read = batch.prompts_cached(data, path.name)
    first = {i: t for i, t in enumerate(generate_traces(lm, read.frame["prompt"].tolist()[:8], config=config))}
    at.session_state[state.GENERATED] = {(digest(data, path.name), model_key(lm), repr(config)): (first, {})}
    at.run()
    assert not at.exception
    assert any("8 of 39 prompts are answered" in w.value for w in at.warning)
    assert at.button(key="generate_answers").label == "Generate the other 31 answers"
    at.button(key="generate_answers").click().run()
    assert not at.exception
    assert not any("prompts are answered" in w.value for w in at.warning)
    assert len(at.session_state["flag_data"].traces) == 39
