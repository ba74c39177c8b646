"""A prompts file whose prompts cannot all be answered (a prompt longer than the model's context, or over the
reader's per-cell limit) on the Calibrate page: the page names the row and the real reason, keeps the rows it can
answer, and never reads an empty file of answers instead."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("torch")

from helpers import calibrate_by_path  # noqa: E402

from app import state  # noqa: E402
from app.text import counted  # noqa: E402

# Far past the demo model's context of 256 tokens (its tokenizer reads this one character a token or so).
LONG = "Q: " + "x" * 5_000 + "\nA:"


def _write(path: Path, prompts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"prompt": p, "reference": "4"}) + "\n" for p in prompts), encoding="utf-8")
    return path


def _texts(elements) -> list[str]:
    return [html.unescape(e.value) for e in elements]


@pytest.mark.slow
def test_a_file_whose_only_prompt_fills_the_context_says_so_not_that_a_file_is_empty(tmp_path, monkeypatch):
    at = calibrate_by_path(_write(tmp_path / "big.jsonl", [LONG]), monkeypatch)
    assert at.button(key="generate_answers").label == "Generate 1 answer with the sidebar's model"
    assert any("holds 1 prompt and no answers: answer it" in t for t in _texts(at.info))
    at.button(key="generate_answers").click().run()
    assert not at.exception
    errors = _texts(at.error)
    assert len(errors) == 1, errors
    assert errors[0].startswith("No prompt of big.jsonl can be answered: row 1: the prompt is ")
    assert "this model reads at most 256 tokens" in errors[0] and errors[0].endswith("Shorten the prompt.")
    assert not any("empty" in t for t in errors + _texts(at.warning))
    assert not at.get("plotly_chart")


@pytest.mark.slow
def test_a_prompt_that_fills_the_context_is_named_and_the_others_are_answered(tmp_path, monkeypatch):
    at = calibrate_by_path(_write(tmp_path / "mixed.jsonl", ["Q: What is 2 plus 2?\nA:", LONG, "Q: What is 1 plus 3?\nA:"]),
                    monkeypatch)
    at.button(key="generate_answers").click().run()
    assert not at.exception and not any("empty" in t for t in _texts(at.error))
    warnings = _texts(at.warning)
    assert any(t.startswith("1 prompt fills the model's context and gets no answer: row 2: the prompt is ")
               for t in warnings), warnings
    ((store, failed),) = at.session_state[state.GENERATED].values()
    assert sorted(store) == [0, 2] and list(failed) == [1]  # positions in the file: rows 1 and 3 answered
    assert "2 rows read, all kept." in _texts(at.success)  # the answered rows are the dataset read


@pytest.mark.slow
def test_a_prompt_over_the_cell_limit_is_named_with_the_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACE_MAX_CELL_MB", "1")
    huge = "Q: " + "x" * (2 * 2**20) + "\nA:"  # 2 MiB: over the 1 MiB a cell may hold
    at = calibrate_by_path(_write(tmp_path / "big2mb.jsonl", ["Q: What is 2 plus 2?\nA:", huge]), monkeypatch)
    warnings = _texts(at.warning)
    assert any(t.startswith("1 row is left out: row 2: prompt: is 2,097,158 characters long; a cell may hold at most "
                            "1,048,576 (TRACE_MAX_CELL_MB") for t in warnings), warnings
    assert at.button(key="generate_answers").label == "Generate 1 answer with the sidebar's model"

    only = calibrate_by_path(_write(tmp_path / "only.jsonl", [huge]), monkeypatch)
    errors = _texts(only.error)
    assert errors == ["only.jsonl: no row has a prompt that can be read (row 1: prompt: is 2,097,158 characters "
                      "long; a cell may hold at most 1,048,576 (TRACE_MAX_CELL_MB, or "
                      "read_dataset(max_cell_chars=...)))"], errors


def test_counted_words():
    assert [counted(1, "answer"), counted(3, "answer"), counted(1, "row is", "rows are"), counted(1_000, "prompt")] \
        == ["1 answer", "3 answers", "1 row is", "1,000 prompts"]
