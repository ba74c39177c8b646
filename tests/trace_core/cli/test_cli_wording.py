"""What the command line prints: ``evaluate``'s table on standard output unless ``--out`` (``--report`` always in
addition, one file or shards), rows named by their number in the file (never the library's 0-based positions), and
counts with their nouns in the right number."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import synthetic_trace_objects

from trace_core.cli import common, main
from trace_core.data import write_dataset
from trace_core.data.prompts import empty_answers_note

# ----------------------------------------------------------------------------------------------------------------
# evaluate: where the table goes

EVALUATE = ["--splits", "2", "--methods", "TRACE+", "TRACE", "Mean Entropy", "--quiet"]


@pytest.fixture
def labeled(tmp_path):
    """One labeled dataset with traces, and the same rows as a folder of two shards."""
    traces, y = synthetic_trace_objects(160, seed=5)
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y})
    write_dataset(frame, tmp_path / "all.jsonl", traces=traces)
    (tmp_path / "shards").mkdir()
    for k, (a, b) in enumerate([(0, 80), (80, 160)]):
        write_dataset(frame.iloc[a:b].reset_index(drop=True), tmp_path / "shards" / f"part-{k}.parquet",
                      traces=traces[a:b])
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("data", ["all.jsonl", "shards"])
@pytest.mark.parametrize("out, report", [(False, False), (False, True), (True, False), (True, True)])
def test_evaluate_prints_the_table_unless_out_and_writes_the_report_in_addition(labeled, data, out, report, capsys):
    options = [*(["--out", str(labeled / "table.md")] if out else []),
               *(["--report", str(labeled / "report.html")] if report else [])]
    assert main(["evaluate", str(labeled / data), *EVALUATE, *options]) == 0
    captured = capsys.readouterr()
    if out:
        assert captured.out == ""
        assert "| TRACE | trace |" in (labeled / "table.md").read_text(encoding="utf-8")
    else:  # the table, then the verdict
        assert "| TRACE | trace |" in captured.out
        assert any(line.startswith("TRACE+ ") and "the best baseline" in line for line in captured.out.splitlines())
    assert (labeled / "report.html").exists() is report
    assert ("wrote the report to" in captured.err) is report


# ----------------------------------------------------------------------------------------------------------------
# Rows named by their number in the file


@pytest.fixture
def short_model(short_context_lm, monkeypatch):
    """The tiny GPT-2 that reads at most 24 tokens stands in for whatever --model names (one place: common)."""
    monkeypatch.setattr(common, "load_model", lambda args: short_context_lm)
    return short_context_lm


LONG = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen"


@pytest.mark.slow
@pytest.mark.parametrize("name, text, row", [
    ("p.txt", f"{LONG}\nQ: 2 + 2 =\n", 1),  # the first row, as the file numbers it (not "prompt 0")
    ("p.csv", f"prompt,id\n,0\nQ: 2 + 2 =,1\n{LONG},2\n", 3),  # after a row without a prompt: its position is 1
])
def test_generate_names_the_prompt_too_long_for_the_model_by_its_row(short_model, tmp_path, capsys, name, text, row):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert main(["generate", str(path), "--model", "m", "--out", str(tmp_path / "o.jsonl"), "--max-new-tokens", "8",
                 "--no-chat-template", "--quiet"]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"error: {path}: row {row}: the answer cannot be generated: its prompt is ")
    assert "and --max-new-tokens is 8, but the model reads at most 24 tokens" in error
    assert error.endswith("; shorten the prompt or lower --max-new-tokens")


@pytest.mark.slow
def test_generate_shards_name_the_prompt_too_long_for_the_model_by_shard_and_row(short_model, tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text(f"{LONG}\n", encoding="utf-8")
    assert main(["generate", str(tmp_path / "in"), "--model", "m", "--out", str(tmp_path / "out"),
                 "--max-new-tokens", "8", "--no-chat-template", "--quiet"]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: a.txt: row 1: the answer cannot be generated: its prompt is ")
    assert "--max-new-tokens is 8" in error


@pytest.mark.slow
@pytest.mark.parametrize("sharded", [False, True])
def test_score_names_the_answer_too_long_for_the_model_by_its_row(short_model, tmp_path, capsys, sharded):
    (tmp_path / "in").mkdir()
    data = tmp_path / "in" / "d.csv"
    pd.DataFrame({"prompt": ["Q: 2 + 2 =", "Q: 3 + 3 ="], "answer": [f" {LONG} {LONG}", " 6"]}).to_csv(data,
                                                                                                    index=False)
    target = tmp_path / "in" if sharded else data
    out = tmp_path / ("out" if sharded else "o.jsonl")
    assert main(["score", str(target), "--model", "m", "--out", str(out), "--no-chat-template", "--quiet"]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    where = "d.csv" if sharded else str(data)
    assert error == (f"error: {where}: row 1: prompt and answer do not fit the model's context (24 tokens, prompt "
                     "and answer together); shorten them or leave the row out")


@pytest.mark.slow
@pytest.mark.parametrize("sharded", [False, True])
def test_flag_names_an_answer_it_cannot_score_by_its_row(labeled, tmp_path, capsys, monkeypatch, sharded):
    """The reader bounds a trace's values, so the library's refusal (an answer by its 0-based position) is injected;
    the first row is rejected, so position 2 of the rows kept is the file's row 4."""
    import importlib

    from trace_core.evaluation.run import AnswerValueError

    assert main(["fit", str(labeled / "all.jsonl"), "--out", str(tmp_path / "cal.json"), "--quiet"]) == 0
    frame = pd.read_json(labeled / "all.jsonl", lines=True)
    frame["label"] = frame["label"].astype(object)
    frame.loc[0, "label"] = "maybe"
    (tmp_path / "in").mkdir()
    data = tmp_path / "in" / "new.jsonl"
    frame.to_json(data, orient="records", lines=True)

    def failing(frame, traces, calibrator):
        raise AnswerValueError(2, "has a non-finite feature")

    for where in ("trace_core.cli.flag", "trace_core.scale.flag"):  # one file's scoring and each shard's
        monkeypatch.setattr(importlib.import_module(where), "score_rows", failing)
    target, out = (tmp_path / "in", tmp_path / "out") if sharded else (data, tmp_path / "flagged.csv")
    assert main(["flag", str(target), "--calibrator", str(tmp_path / "cal.json"), "--threshold", "0.5", "--out",
                 str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert ("new.jsonl: failed: new.jsonl: row 4: has a non-finite feature" if sharded
            else f"error: {data}: row 4: has a non-finite feature") in err


# ----------------------------------------------------------------------------------------------------------------
# Counts in the right number


@pytest.mark.slow
def test_one_prompt_is_counted_in_the_singular(tiny_model_dirs, tmp_path, capsys):
    prompts = tmp_path / "p.csv"
    prompts.write_text("prompt\nQ: 2 + 2 =\n", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    assert main(["generate", str(prompts), "--model", str(tiny_model_dirs["gpt2"]), "--out", str(out),
                 "--max-new-tokens", "2"]) == 0
    err = capsys.readouterr().err
    assert "1 row read: 1 prompt\n" in err and f"wrote 1 row to {out}\n" in err
    assert main(["score", str(out), "--model", str(tiny_model_dirs["gpt2"]), "--out", str(tmp_path / "s.jsonl"),
                 "--rescore"]) == 0
    assert "recorded 1 trace; 0 rows already had one\n" in capsys.readouterr().err


def test_one_empty_answer_is_counted_in_the_singular():
    assert empty_answers_note([""], template_unused=False) == ("1 of 1 answer is empty (the model ended its answer "
                                                               "at once)")
    assert empty_answers_note(["", " ", "Paris"], template_unused=True).startswith("2 of 3 answers are empty")
