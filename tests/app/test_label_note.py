"""The Calibrate page warns when the exact matcher labeled answers wrong that hold their reference as whole words
(answers written as sentences), and the warning goes once a matcher that fits is chosen."""

from __future__ import annotations

import html

import pandas as pd
import pytest
from helpers import dashboard, random_traces

pytest.importorskip("streamlit")

from trace_core import write_dataset  # noqa: E402


def test_calibrate_warns_of_exact_labels_on_sentences(tmp_path):
    n = 30
    references = [f"city{i}" for i in range(n)]
    answers = [f"The answer is {r}." if i % 3 == 0 else r if i % 3 == 1 else "I do not know." for i, r in
               enumerate(references)]
    path = tmp_path / "sentences.csv"
    write_dataset(pd.DataFrame({"prompt": [f"Q{i}" for i in range(n)], "answer": answers, "reference": references}),
                  path, traces=random_traces(n, seed=3))
    at = dashboard("../pages/calibrate.py", no_model=True)
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="upload").set_value((path.name, path.read_bytes(), "text/csv")).run()
    assert not at.exception, at.exception
    said = [html.unescape(w.value) for w in at.warning if "exact matcher" in w.value]  # punctuation is escaped
    assert len(said) == 1 and said[0].startswith("10 of the 20 answers that the exact matcher labeled wrong"), said
    assert "row 1:" in said[0] and "The answer is city0." in said[0]
    at.selectbox(key="matcher").set_value("contains").run()
    assert not at.exception, at.exception
    assert not [w.value for w in at.warning if "exact matcher" in w.value]
