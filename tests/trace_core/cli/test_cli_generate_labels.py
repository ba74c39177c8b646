"""`trace-core generate` on CSV / JSON Lines / Parquet prompts files: the labels written are those of the generated
answers (never the input's, which labeled other answers), the columns that describe the old answers are dropped, a
file with only a `prompt` column works, rows without a prompt are skipped and named, and --quiet is quiet.

Most tests replace the model by one that answers from a table (so that labels are known in advance); one runs the
tiny GPT-2 end to end."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helpers import make_trace

from trace_core.cli import common, main
from trace_core.data import TRACE_COLUMNS, label_from_reference, read_dataset, write_dataset
from trace_core.traces.trace import Trace

# What the stand-in model answers to each prompt.
ANSWERS = {"Q: 2 + 2 =": " 5", "Q: 3 + 4 =": " 7", "Q: capital of France?": " It is Paris.", "Q: 10 / 4 =": " 2.5"}


def _trace(prompt: str, answer: str) -> Trace:
    return Trace(prompt=prompt, answer=answer, token_ids=np.arange(1), tokens=(answer,), surprisal=np.array([0.25]),
                 entropy=np.array([0.75]), top_ids=np.zeros((1, 0)), top_logprobs=np.zeros((1, 0)))


@pytest.fixture
def model(monkeypatch):
    """No model is loaded: generation answers from ANSWERS; the prompts it was given are recorded."""
    import trace_core.cli.generate as file_generation
    import trace_core.scale.generate as shard_generation

    seen: list[str] = []

    def generate_traces(lm, prompts, **kwargs):
        seen.extend(prompts)
        return [_trace(p, ANSWERS.get(p, " no idea")) for p in prompts]

    monkeypatch.setattr(common, "load_model", lambda args: object())
    for where in (file_generation, shard_generation):  # where one file's and each shard's answers are generated
        monkeypatch.setattr(where, "generate_traces", generate_traces)
    return seen


def _generate(path, out, *options: str) -> int:
    return main(["generate", str(path), "--model", "stand-in", "--out", str(out), *options])


def _write(frame: pd.DataFrame, path, traces=None) -> None:
    write_dataset(frame, path, traces=traces)


def _old_answers_file(tmp_path, ext: str):
    """A labeled dataset of OLD answers: labels, references, traces, a response and beams that describe them."""
    prompts = list(ANSWERS)
    old = [" 4", " 7", " Paris", " 3"]  # right, right, right, wrong (the generated: wrong, right, right, right)
    frame = pd.DataFrame({"id": ["a1", "a2", "a3", "a4"], "prompt": prompts, "answer": old,
                          "reference": ["4", "7", "Paris", "2.5"], "label": [1, 1, 1, 0],
                          "family": ["math", "math", "geo", "math"],
                          "response": ['{"choices": []}'] * 4, "answer_tokens": [1, 1, 1, 1],
                          "beam_logprobs": [json.dumps([-0.5, -1.0])] * 4})
    path = tmp_path / f"old{ext}"
    _write(frame, path, traces=[make_trace([3.0, 2.0, 1.0], prompt=p) for p in prompts])
    return path


@pytest.mark.parametrize("ext", [".csv", ".jsonl", ".parquet"])
def test_labels_are_those_of_the_generated_answers(ext, model, tmp_path, capsys):
    path = _old_answers_file(tmp_path, ext)
    out = tmp_path / f"gen{ext}"
    assert _generate(path, out, "--matcher", "contains") == 0
    generated = read_dataset(out)
    frame = generated.frame
    assert generated.label_source == "label"
    assert frame["answer"].tolist() == [" 5", " 7", " It is Paris.", " 2.5"]
    expected = [label_from_reference(a, r, matcher="contains") for a, r in zip(frame["answer"], frame["reference"], strict=True)]
    assert expected == [0, 1, 1, 1]
    assert frame["label"].tolist() == expected  # not the input's [1, 1, 1, 0]
    # the other columns are kept as they were; those that described the old answers are gone
    assert frame["id"].tolist() == ["a1", "a2", "a3", "a4"] and frame["family"].tolist() == ["math", "math", "geo",
                                                                                              "math"]
    assert not {"response", "answer_tokens", "beam_logprobs"} & set(frame.columns)
    assert all(len(t.surprisal) == 1 and t.answer == a for t, a in zip(generated.traces, frame["answer"], strict=True))
    err = capsys.readouterr().err
    assert "label" in err and "response" in err  # said, in one line
    assert len([line for line in err.splitlines() if "dropped" in line]) == 1


def test_the_matcher_and_tolerance_are_the_users(model, tmp_path, capsys):
    path = tmp_path / "p.csv"
    path.write_text("prompt,reference\nQ: 10 / 4 =,2.4\nQ: capital of France?,Paris\n", encoding="utf-8")
    out = tmp_path / "g.jsonl"
    assert _generate(path, out, "--matcher", "numeric", "--tolerance", "0.2", "--quiet") == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["label"] for r in rows[:1]] == [1]  # |2.5 - 2.4| <= 0.2
    assert rows[1]["label"] is None  # "Paris" holds no number: left unlabeled, with a warning
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: ") and "row 2" in err[0], err
    assert _generate(path, tmp_path / "g2.jsonl", "--quiet") == 0  # default: exact
    rows = [json.loads(line) for line in (tmp_path / "g2.jsonl").read_text(encoding="utf-8").splitlines()]
    assert rows[0]["label"] == 0


@pytest.mark.parametrize("quiet", [False, True])
def test_answers_in_sentences_that_exact_matching_labels_wrong_are_named(quiet, model, tmp_path, capsys):
    path = tmp_path / "p.csv"
    path.write_text("prompt,reference\nQ: 2 + 2 =,4\nQ: 3 + 4 =,7\nQ: capital of France?,Paris\n", encoding="utf-8")
    assert _generate(path, tmp_path / "g.csv", *(["--quiet"] if quiet else [])) == 0
    assert pd.read_csv(tmp_path / "g.csv")["label"].tolist() == [0, 1, 0]  # " 5" is wrong; " It is Paris." too
    err = [line for line in capsys.readouterr().err.splitlines() if "exact matcher" in line]
    assert len(err) == 1 and err[0].startswith("warning: "), err
    assert "1 of the 2 answers" in err[0] and "row 3: ' It is Paris.' against 'Paris'" in err[0], err
    assert _generate(path, tmp_path / "c.csv", "--matcher", "contains", "--quiet") == 0
    assert pd.read_csv(tmp_path / "c.csv")["label"].tolist() == [0, 1, 1]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("quiet", [False, True])
def test_an_input_label_without_a_reference_is_dropped(quiet, model, tmp_path, capsys):
    path = tmp_path / "p.csv"
    path.write_text("prompt,answer,label,family\nQ: 2 + 2 =,4,1,math\nQ: 3 + 4 =,7,yes,math\n", encoding="utf-8")
    out = tmp_path / "g.csv"
    assert _generate(path, out, *(["--quiet"] if quiet else [])) == 0
    written = pd.read_csv(out, dtype=str)
    assert "label" not in written.columns
    assert written["answer"].tolist() == [" 5", " 7"] and written["family"].tolist() == ["math", "math"]
    err = capsys.readouterr().err.strip().splitlines()
    said = [line for line in err if "`label`" in line]
    assert said == [] if quiet else len(said) == 1, err
    if quiet:
        assert err == []


@pytest.mark.parametrize("ext", [".csv", ".jsonl", ".parquet"])
def test_a_prompts_only_file_works(ext, model, tmp_path, capsys):
    path = tmp_path / f"prompts{ext}"
    frame = pd.DataFrame({"prompt": ["Q: 2 + 2 =", "Q: 3 + 4 ="]})
    if ext == ".parquet":
        frame.to_parquet(path, index=False)
    elif ext == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_json(path, orient="records", lines=True)
    out = tmp_path / "g.jsonl"
    assert _generate(path, out, "--quiet") == 0, capsys.readouterr().err
    generated = read_dataset(out, require_label=False)
    assert generated.frame["prompt"].tolist() == ["Q: 2 + 2 =", "Q: 3 + 4 ="]
    assert generated.frame["answer"].tolist() == [" 5", " 7"] and generated.has_traces
    assert "label" not in generated.frame.columns


def test_rows_without_a_prompt_are_skipped_and_named(model, tmp_path, capsys):
    path = tmp_path / "p.jsonl"
    long = "x" * 5000
    path.write_text("\n".join([json.dumps({"prompt": "Q: 2 + 2 =", "reference": "5"}),
                               json.dumps({"prompt": "   ", "reference": long}),
                               json.dumps({"reference": "7"}),
                               json.dumps({"prompt": [long], "reference": "7"}),
                               json.dumps({"prompt": "Q: 3 + 4 =", "reference": "7"})]) + "\n", encoding="utf-8")
    out = tmp_path / "g.jsonl"
    assert _generate(path, out, "--quiet") == 0
    assert model == ["Q: 2 + 2 =", "Q: 3 + 4 ="]
    generated = read_dataset(out)
    assert generated.frame["label"].tolist() == [1, 1]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: "), err
    assert all(f"row {n}" in err[0] for n in (2, 3, 4)) and len(err[0]) < 600, err


@pytest.mark.parametrize("content, words", [
    ("prompt,reference\n,4\n  ,5\n", "no row has a prompt"),
    ("question,reference\nQ,4\n", "needs a `prompt` column"),
])
def test_no_prompt_at_all_is_one_error(content, words, model, tmp_path, capsys):
    path = tmp_path / "p.csv"
    path.write_text(content, encoding="utf-8")
    assert _generate(path, tmp_path / "g.jsonl", "--quiet") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and words in err[0], err
    assert model == []


@pytest.mark.parametrize("name, content", [("p.csv", "prompt,answer\nQ: 2 + 2 =,4\nQ: 3 + 4 =,\n"),
                                           ("p.txt", "Q: 2 + 2 =\n\nQ: 3 + 4 =\n")])
def test_quiet_prints_nothing_but_problems(name, content, model, tmp_path, capsys):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    assert _generate(path, tmp_path / "g.jsonl", "--quiet") == 0
    assert capsys.readouterr().err == ""
    assert model == ["Q: 2 + 2 =", "Q: 3 + 4 ="]


@pytest.mark.parametrize("options, warned", [(["--sample"], True), (["--sample", "--seed", "3"], False),
                                             ([], False)])
def test_sampling_without_a_seed_warns_as_shard_by_shard(options, warned, model, tmp_path, capsys):
    path = tmp_path / "prompts.txt"
    path.write_text("Q: 2 + 2 =\n", encoding="utf-8")
    assert _generate(path, tmp_path / "g.jsonl", "--quiet", *options) == 0
    err = capsys.readouterr().err
    assert ("warning: --sample without --seed: the answers cannot be drawn again (their traces record "
            "\"seed\": null; --seed N draws the same answers again)" in err) is warned
    assert warned or err == ""


def test_the_tiny_model_end_to_end_labels_its_own_answers(tiny_model_dirs, tmp_path, capsys):
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": p, "reference": r, "label": 1})
                              for p, r in [("The capital of France is", "Paris"), ("2 plus 2 is", "4")]) + "\n",
                    encoding="utf-8")
    out = tmp_path / "g.parquet"
    assert main(["generate", str(path), "--model", str(tiny_model_dirs["gpt2"]), "--out", str(out),
                 "--max-new-tokens", "4", "--matcher", "contains", "--quiet"]) == 0
    generated = read_dataset(out, matcher="contains")
    assert generated.has_traces and generated.label_source == "label"
    assert generated.frame["label"].tolist() == [label_from_reference(a, r, matcher="contains") for a, r in
                                                 zip(generated.frame["answer"], generated.frame["reference"], strict=True)]
    assert not set(TRACE_COLUMNS) & set(generated.frame.columns)
