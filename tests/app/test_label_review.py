"""The label review: answers labeled from a reference show what matched, a flip corrects a label, and the corrected
labels reach the evaluation and the download."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from helpers import dashboard, random_traces

pytest.importorskip("streamlit")

from app.review import _csv, marked_answer  # noqa: E402
from trace_core import write_dataset  # noqa: E402
from trace_core.data import flip_labels, read_dataset  # noqa: E402


def _upload(at, tmp_path, n=30):
    answers = [f"It is city{i}." if i % 2 else f"It is town{i}, which is near city{i}." for i in range(n)]
    path = tmp_path / "refs.csv"
    write_dataset(pd.DataFrame({"prompt": [f"Q{i}" for i in range(n)], "answer": answers,
                                "reference": [f"city{i}" for i in range(n)]}), path, traces=random_traces(n, seed=4))
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="upload").set_value((path.name, path.read_bytes(), "text/csv")).run()
    return at


def _correct_share(at) -> str:
    return next(c.value for c in at.caption if "answers, " in c.value and "correct" in c.value)


def test_review_shows_the_match_and_a_flip_reaches_the_evaluation(tmp_path):
    at = _upload(dashboard("../pages/calibrate.py", no_model=True), tmp_path)
    at.selectbox(key="matcher").set_value("claim").run()
    assert not at.exception, at.exception
    assert [e.label for e in at.expander if e.label.startswith("Review labels (30 answers labeled by the claim")]
    assert "30 answers, 50.0% correct" in _correct_share(at)
    shown = [h.body for h in at.get("html") if "city" in h.body]
    assert any("<mark" in body and ">city1</mark>" in body for body in shown)  # what the label rests on
    flips = [b for b in at.button if b.key and b.key.startswith("flip.")]
    assert len(flips) == 10  # one page
    flips[0].click().run()  # row 1 ("town0 ..., near city0") was wrong: now right
    assert not at.exception, at.exception
    assert "30 answers, 53.3% correct" in _correct_share(at)
    assert [e.label for e in at.expander if "1 corrected by hand" in e.label]
    [b for b in at.button if b.key and b.key.startswith("flip.")][0].click().run()  # and back
    assert "30 answers, 50.0% correct" in _correct_share(at)


def test_marked_answer_escapes_and_cuts_long_answers():
    long = "x" * 1000 + "<Paris>" + "y" * 1000
    out = marked_answer(long, (1001, 1006), limit=100)
    assert out.startswith("… ") and out.endswith(" …") and ">Paris</mark>" in out and "&lt;" in out
    assert "&lt;" in out and "<Paris>" not in out
    assert marked_answer("<b>", None) == "&lt;b&gt;"


def test_the_reviewed_labels_download_holds_the_corrections_spreadsheet_safe():
    frame = pd.DataFrame({"prompt": ["=1+1", "b"], "answer": ["x", "y"], "label": [1, 0]})
    reviewed = flip_labels(read_dataset(frame.to_csv(index=False).encode(), format="csv"), [1])
    out = pd.read_csv(io.BytesIO(_csv(reviewed.frame)))
    assert out["label"].tolist() == [1, 1] and out["label_flipped"].tolist() == [False, True]
    assert out["prompt"].tolist() == ["'=1+1", "b"]
