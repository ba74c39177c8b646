"""No command writes over a file it reads: every subcommand's --out is checked against each of its inputs (dataset,
calibrator, prompts file) before any work, whether it names the same path, a symlink to it or a hard link to it; the
refusal is one line with exit status 1, and the input is left byte for byte as it was."""

from __future__ import annotations

import os
import shutil

import pandas as pd
import pytest
from helpers import labeled_answers

from trace_core import TracePlus, write_dataset
from trace_core.cli import main

LINKS = ["same path", "symlink", "hard link", "input through a symlink"]


@pytest.fixture
def files(tmp_path):
    frame, traces = labeled_answers(40, seed=3)
    labeled_csv = tmp_path / "labeled.csv"
    write_dataset(frame, labeled_csv, traces=traces)
    labeled_json = tmp_path / "labeled.json"  # JSON Lines named .json: the name fit's --out takes too
    write_dataset(frame, labeled_json, traces=traces, format="jsonl")
    calibrator = tmp_path / "cal.json"
    calibrator.write_text(TracePlus().fit(traces, frame["label"].to_numpy()).to_json(), encoding="utf-8")
    prompts = tmp_path / "prompts.csv"  # a prompt column (answers too, which generate replaces)
    pd.DataFrame({"prompt": ["Q: 2 + 2 =", "Q: 3 + 4 ="], "answer": ["", ""]}).to_csv(prompts, index=False)
    answers = tmp_path / "answers.csv"  # no traces: score records them
    pd.DataFrame({"prompt": ["Q: 2 + 2 =", "Q: 3 + 4 ="], "answer": [" 4", " 7"]}).to_csv(answers, index=False)
    return {"labeled_csv": labeled_csv, "labeled_json": labeled_json, "calibrator": calibrator, "prompts": prompts,
            "answers": answers, "tmp": tmp_path}


def _paths(files, target, link):
    """(the input as given, --out) for one way of naming the same file."""
    original = files[target]
    if link == "same path":
        return original, original
    if link == "symlink":
        out = files["tmp"] / f"link{original.suffix}"
        out.symlink_to(original)
        return original, out
    if link == "hard link":
        out = files["tmp"] / f"hard{original.suffix}"
        os.link(original, out)
        return original, out
    given = files["tmp"] / f"given{original.suffix}"
    given.symlink_to(original)
    return given, original


def _run(capsys, argv, original, what, option="--out"):
    before = original.read_bytes()
    assert main([str(a) for a in argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"error: {option} ") and f": is {what} (" in err[0], err
    assert original.read_bytes() == before


@pytest.mark.parametrize("link", LINKS)
def test_generate_never_writes_over_its_prompts_file(files, capsys, tiny_model_dirs, link):
    given, out = _paths(files, "prompts", link)
    _run(capsys, ["generate", given, "--out", out, "--model", tiny_model_dirs["gpt2"], "--max-new-tokens", "2",
                  "--quiet"], files["prompts"], "the prompts file")


@pytest.mark.parametrize("link", LINKS)
def test_score_never_writes_over_its_dataset(files, capsys, tiny_model_dirs, link):
    given, out = _paths(files, "answers", link)
    _run(capsys, ["score", given, "--out", out, "--model", tiny_model_dirs["gpt2"], "--quiet"], files["answers"],
         "the input file")


def test_score_refuses_before_dropping_a_rejected_row(files, capsys):
    """The report's case: a file with a rejected row, scored onto itself, lost the row; now nothing is written."""
    data = files["tmp"] / "mixed.csv"
    shutil.copy(files["labeled_csv"], data)
    with open(data, "a", encoding="utf-8") as stream:
        stream.write("Q99,,1,not a trace\n")
    _run(capsys, ["score", data, "--out", data, "--model", "nobody/no-such-model", "--quiet"], data,
         "the input file")


@pytest.mark.parametrize("link", LINKS)
def test_evaluate_never_writes_its_report_over_the_dataset(files, capsys, link):
    given, out = _paths(files, "labeled_csv", link)
    _run(capsys, ["evaluate", given, "--out", out, "--splits", "2", "--methods", "TRACE", "--quiet"],
         files["labeled_csv"], "the input file")


@pytest.mark.parametrize("link", LINKS)
def test_fit_never_writes_the_calibrator_over_a_json_lines_dataset(files, capsys, link):
    given, out = _paths(files, "labeled_json", link)
    _run(capsys, ["fit", given, "--out", out, "--quiet"], files["labeled_json"], "the input file")


@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize("target", ["labeled_json", "calibrator"])
def test_flag_never_writes_over_its_dataset_or_its_calibrator(files, capsys, link, target):
    given, out = _paths(files, target, link)
    data = given if target == "labeled_json" else files["labeled_json"]
    calibrator = given if target == "calibrator" else files["calibrator"]
    _run(capsys, ["flag", data, "--calibrator", calibrator, "--threshold", "1.0", "--out", out, "--quiet"],
         files[target], "the input file" if target == "labeled_json" else "--calibrator")


@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize("target", ["labeled_csv", "risk_data"])
def test_flag_never_writes_its_tokens_over_the_dataset_or_the_risk_data(files, capsys, link, target):
    """--tokens is checked like --out, and named as itself in the refusal."""
    files["risk_data"] = files["tmp"] / "risk.csv"
    shutil.copyfile(files["labeled_csv"], files["risk_data"])
    given, tokens = _paths(files, target, link)
    data = given if target == "labeled_csv" else files["labeled_json"]
    risk = given if target == "risk_data" else files["risk_data"]
    _run(capsys, ["flag", data, "--calibrator", files["calibrator"], "--max-risk", "0.3", "--risk-data", risk,
                  "--out", files["tmp"] / "flagged.csv", "--tokens", tokens, "--quiet"],
         files[target], "the input file" if target == "labeled_csv" else "--risk-data", option="--tokens")


def test_another_out_still_works(files, tmp_path):
    """The check refuses only the inputs: a new file next to them is written."""
    out = tmp_path / "report.csv"
    assert main(["evaluate", str(files["labeled_csv"]), "--out", str(out), "--splits", "2", "--methods", "TRACE",
                 "--quiet"]) == 0
    assert "TRACE" in out.read_text(encoding="utf-8")
