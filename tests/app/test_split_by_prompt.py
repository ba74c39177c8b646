"""The Calibrate page keeps each prompt's answers together when prompts repeat (several sampled answers per
prompt), as `trace-core evaluate --split-by prompt` does; a file of distinct prompts gets no such choice."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import dashboard, random_traces

pytest.importorskip("streamlit")

from trace_core import write_dataset  # noqa: E402


def _upload(tmp_path, prompts):
    n = len(prompts)
    path = tmp_path / "answers.csv"
    write_dataset(pd.DataFrame({"prompt": prompts, "answer": [f"a{i}" for i in range(n)],
                                "label": [i % 2 for i in range(n)]}), path, traces=random_traces(n, seed=5))
    at = dashboard("../pages/calibrate.py", no_model=True)
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="upload").set_value((path.name, path.read_bytes(), "text/csv")).run()
    assert not at.exception, at.exception
    return at


def _shown(at) -> str:
    return " ".join(str(e.value) for e in [*at.warning, *at.caption, *at.info])


def test_repeated_prompts_are_kept_together_by_default(tmp_path):
    at = _upload(tmp_path, [f"Q{i // 4}" for i in range(120)])  # 30 prompts, 4 answers each
    box = at.checkbox(key="split_by_prompt")
    assert box.value is True
    assert "keeps every one of the 30 answer groups whole" in _shown(at)
    box.uncheck()
    next(b for b in at.button if b.label == "Run").click().run()  # the form applies on Run
    assert not at.exception, at.exception
    assert "answer groups whole" not in _shown(at)


def test_distinct_prompts_get_no_choice(tmp_path):
    at = _upload(tmp_path, [f"Q{i}" for i in range(120)])
    assert not [c for c in at.checkbox if c.key == "split_by_prompt"]
