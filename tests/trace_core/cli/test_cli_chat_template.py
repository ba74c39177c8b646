"""``generate`` and ``score`` wrap prompts in the model's chat template by default when its tokenizer has one (as the
dashboard does), bare otherwise; ``--no-chat-template`` turns it off with a note, ``--chat-template`` on a model
without one is an error; traces and a sharded run's manifest record the resolved value, and a folder made with the
template off is made again (said), never mixed. The tiny GPT-2 has a chat template, the tiny Llama has none."""

from __future__ import annotations

import json

import pandas as pd
import pytest

pytest.importorskip("torch")

from fake_server import FakeServer  # noqa: E402

from trace_core.cli import common, main  # noqa: E402
from trace_core.data import read_dataset  # noqa: E402
from trace_core.record import encode_prompt  # noqa: E402

pytestmark = pytest.mark.slow  # loads a model

PROMPTS = ["Q: What is 2 plus 2? A:", "The capital of France is"]


@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    return path


def _generate(prompts, out, model, *extra):
    return main(["generate", str(prompts), "--model", str(model), "--out", str(out), "--max-new-tokens", "3",
                 *map(str, extra)])


def _templated(traces, tokenizer, prompts=PROMPTS):
    """Whether every trace records the template on, in its metadata and decoding settings, and counts the prompt as
    the template encodes it."""
    return all(t.metadata.chat_template is True and t.metadata.extra["prompt_tokens"] == len(
        encode_prompt(tokenizer, p, chat_template=True)) for t, p in zip(traces, prompts, strict=True))


def test_generate_and_score_use_the_models_chat_template_by_default(prompts_file, tmp_path, tiny_model_dirs,
                                                                     tiny_models, capsys):
    folder, tokenizer = tiny_model_dirs["gpt2"], tiny_models["gpt2"].tokenizer
    out = tmp_path / "gen.jsonl"
    assert _generate(prompts_file, out, folder) == 0
    assert "chat template" not in capsys.readouterr().err  # the default needs no note
    traces = read_dataset(out, require_label=False).traces
    assert _templated(traces, tokenizer)
    assert all(t.metadata.decoding["chat_template"] is True for t in traces)
    scored = tmp_path / "scored.jsonl"
    assert main(["score", str(out), "--model", str(folder), "--out", str(scored), "--rescore", "--quiet"]) == 0
    assert _templated(read_dataset(scored, require_label=False).traces, tokenizer)

    # a model without a chat template gets its prompts bare, without a word
    bare = tmp_path / "bare.jsonl"
    assert _generate(prompts_file, bare, tiny_model_dirs["llama"]) == 0
    assert "chat template" not in capsys.readouterr().err
    tokenizer = tiny_models["llama"].tokenizer
    for trace, prompt in zip(read_dataset(bare, require_label=False).traces, PROMPTS, strict=True):
        assert trace.metadata.chat_template is False
        assert trace.metadata.extra["prompt_tokens"] == len(encode_prompt(tokenizer, prompt))


def test_no_chat_template_sends_bare_prompts_with_a_note(prompts_file, tmp_path, tiny_model_dirs, tiny_models,
                                                         capsys):
    out = tmp_path / "gen.jsonl"
    assert _generate(prompts_file, out, tiny_model_dirs["gpt2"], "--no-chat-template") == 0
    assert "note: --no-chat-template: the model has a chat template and the prompts go to it bare" in \
        capsys.readouterr().err
    tokenizer = tiny_models["gpt2"].tokenizer
    for trace, prompt in zip(read_dataset(out, require_label=False).traces, PROMPTS, strict=True):
        assert trace.metadata.chat_template is False
        assert trace.metadata.extra["prompt_tokens"] == len(encode_prompt(tokenizer, prompt))
    assert _generate(prompts_file, out, tiny_model_dirs["gpt2"], "--no-chat-template", "--quiet") == 0
    assert capsys.readouterr().err == ""  # a note: left out with --quiet


@pytest.mark.parametrize("command", ["generate", "score"])
def test_chat_template_on_a_model_without_one_is_an_error(command, tmp_path, tiny_model_dirs, capsys):
    data = tmp_path / "data.csv"
    pd.DataFrame({"prompt": PROMPTS, "answer": [" 4", " Paris"]}).to_csv(data, index=False)
    out = tmp_path / "out.jsonl"
    assert main([command, str(data), "--model", str(tiny_model_dirs["llama"]), "--out", str(out),
                 "--chat-template", "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: --chat-template: the model's tokenizer has no chat template; leave the option out (or give "
        "--no-chat-template) to send the prompts as they are")
    assert not out.exists()


def test_a_server_gets_the_prompts_through_the_local_chat_template_by_default(prompts_file, tmp_path,
                                                                              tiny_model_dirs, tiny_models, capsys):
    folder, tokenizer = tiny_model_dirs["gpt2"], tiny_models["gpt2"].tokenizer
    fake = FakeServer(folder)
    try:
        out = tmp_path / "gen.jsonl"
        assert main(["generate", str(prompts_file), "--server", fake.url, "--server-model", "tiny",
                     "--server-tokenizer", str(folder), "--out", str(out), "--max-new-tokens", "2",
                     "--retries", "0", "--quiet"]) == 0
        assert sorted(body["prompt"] for body in fake.bodies) == sorted(
            encode_prompt(tokenizer, p, chat_template=True) for p in PROMPTS)
        assert _templated(read_dataset(out, require_label=False).traces, tokenizer)
    finally:
        fake.stop()


def test_no_chat_template_with_the_servers_chat_endpoint_is_refused_before_any_work(prompts_file, tmp_path,
                                                                                    capsys):
    assert main(["generate", str(prompts_file), "--server", "http://127.0.0.1:9", "--server-model", "m",
                 "--server-api", "chat", "--no-chat-template", "--out", str(tmp_path / "o.jsonl")]) == 1
    assert capsys.readouterr().err.startswith("error: --no-chat-template: --server-api chat sends each prompt to the "
                                              "server's chat endpoint, which always applies the server's chat "
                                              "template")


def _settings(out):
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))["settings"]


@pytest.fixture
def shards(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text(PROMPTS[0] + "\n", encoding="utf-8")
    (folder / "b.txt").write_text(PROMPTS[1] + "\n", encoding="utf-8")
    return folder


def test_shards_record_the_resolved_template_and_a_rerun_needs_no_model(shards, tmp_path, tiny_model_dirs,
                                                                        tiny_models, capsys, monkeypatch):
    out = tmp_path / "out"
    assert _generate(shards, out, tiny_model_dirs["gpt2"], "--quiet") == 0
    settings = _settings(out)
    assert settings["chat_template"] is True and settings["chat_template_default"] is True
    trace = read_dataset(out / "a.parquet", require_label=False).traces[0]
    assert _templated([trace], tiny_models["gpt2"].tokenizer, PROMPTS[:1])

    def no_model(args):
        raise AssertionError("every shard is complete: no model is needed")

    monkeypatch.setattr(common, "load_model", no_model)
    assert _generate(shards, out, tiny_model_dirs["gpt2"]) == 0
    assert "2 shards: 0 written, 2 already complete" in capsys.readouterr().err


def test_shards_made_with_the_template_off_are_made_again_and_said(shards, tmp_path, tiny_model_dirs, capsys):
    """A folder made with the template off ({"chat_template": false}, as every run stored it before the template
    became the default) is not taken for a default run's: its shards are named and made again."""
    out = tmp_path / "out"
    assert _generate(shards, out, tiny_model_dirs["gpt2"], "--no-chat-template", "--quiet") == 0
    assert _settings(out)["chat_template"] is False and "chat_template_default" not in _settings(out)
    assert _generate(shards, out, tiny_model_dirs["gpt2"]) == 0
    err = capsys.readouterr().err
    assert ("warning: " + str(out) + ": 2 shards (a.txt, b.txt) were made with another chat-template setting") in err
    assert "this run has the template on and makes them again; give --no-chat-template to keep them" in err
    assert "2 shards: 2 written, 0 already complete" in err
    assert _settings(out)["chat_template"] is True
    assert all(t.metadata.chat_template for name in ("a", "b")
               for t in read_dataset(out / f"{name}.parquet", require_label=False).traces)
    assert _generate(shards, out, tiny_model_dirs["gpt2"], "--no-chat-template", "--quiet") == 0  # and back


def test_score_shards_record_the_resolved_template(tmp_path, tiny_model_dirs):
    data = tmp_path / "in"
    data.mkdir()
    for name, model in (("gpt2", "gpt2"), ("llama", "llama")):
        pd.DataFrame({"prompt": PROMPTS, "answer": [" 4", " Paris"]}).to_json(data / "a.jsonl", orient="records",
                                                                               lines=True)
        out = tmp_path / f"out-{name}"
        assert main(["score", str(data), "--model", str(tiny_model_dirs[model]), "--out", str(out), "--quiet"]) == 0
        assert _settings(out)["chat_template"] is (model == "gpt2")
        assert all(t.metadata.chat_template is (model == "gpt2")
                   for t in read_dataset(out / "a.parquet", require_label=False).traces)
