"""The command line's outputs (issue 13, items 7 and 16): a bad ``--out`` is refused before any work, and ``flag``
never overwrites its input file or the input's columns."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from helpers import synthetic_trace_objects

from trace_core.calibration.calibrators import TracePlus
from trace_core.cli import common, generate, main
from trace_core.data import write_dataset
from trace_core.traces.trace import Trace


def _traces(n: int = 40) -> tuple[list[Trace], np.ndarray]:
    return synthetic_trace_objects(n, seed=7)


@pytest.fixture
def files(tmp_path):
    """A labeled JSONL file with traces, a calibrator, a prompts file and an answers file without traces."""
    traces, y = _traces()
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y})
    labeled = tmp_path / "labeled.jsonl"
    write_dataset(frame, labeled, traces=traces)
    calibrator = tmp_path / "cal.json"
    calibrator.write_text(TracePlus().fit(traces, y).to_json(), encoding="utf-8")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n", encoding="utf-8")
    answers = tmp_path / "answers.csv"
    answers.write_text("prompt,answer\nq,a\n", encoding="utf-8")
    (tmp_path / "a_folder").mkdir()
    return {"labeled": labeled, "calibrator": calibrator, "prompts": prompts, "answers": answers, "tmp": tmp_path}


# Each subcommand with an input that would be read and work that would run (a model that does not exist for the
# two that load one): the --out error must be the one reported, so the check comes first.
COMMANDS = {
    "generate": (["generate", "{prompts}", "--model", "nobody/no-such-model"], ".jsonl"),
    "score": (["score", "{answers}", "--model", "nobody/no-such-model"], ".jsonl"),
    "evaluate": (["evaluate", "{labeled}", "--splits", "2", "--methods", "TRACE"], ".csv"),
    "fit": (["fit", "{labeled}"], ".json"),
    "flag": (["flag", "{labeled}", "--calibrator", "{calibrator}", "--threshold", "1.0"], ".csv"),
}
BAD_OUTS = [
    ("results.xlsx", "unknown extension .xlsx"),
    ("results", "no extension"),
    ("no_such_folder/results{ext}", "no_such_folder does not exist; create it first"),
    ("a_folder", "is a folder"),
    ("a_folder/", "is a folder"),
]


def _argv(command: str, out: str, files: dict) -> list[str]:
    argv, ext = COMMANDS[command]
    return [a.format(**files) for a in argv] + ["--out", str(files["tmp"] / out.format(ext=ext)), "--quiet"]


@pytest.mark.parametrize("out, message", BAD_OUTS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bad_out_is_refused_before_any_work(command, out, message, files, capsys, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("work started before --out was checked")

    # reading the input is the first step of the work
    for module, name in ((common, "read_data"), (generate, "_read_prompts"), (common, "load_model")):
        monkeypatch.setattr(module, name, no_work)
    before = sorted(p.name for p in files["tmp"].rglob("*"))
    assert main(_argv(command, out, files)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: --out ") and message in err[0]
    assert "expected ." in err[0] or "does not exist" in err[0]
    assert sorted(p.name for p in files["tmp"].rglob("*")) == before  # nothing written


@pytest.mark.parametrize("command", ["generate", "score"])
def test_a_bad_out_is_reported_instead_of_the_missing_model(command, files, capsys):
    assert main(_argv(command, "results.xlsx", files)) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: --out ") and err.endswith("results.xlsx: unknown extension .xlsx; expected .csv, "
                                                           ".jsonl or .parquet (or .tsv, .json, .ndjson, .pq)")


def test_the_expected_extensions_are_named_per_subcommand(files, capsys):
    expected = {"generate": "expected .csv, .jsonl or .parquet", "score": "expected .csv, .jsonl or .parquet",
                "evaluate": "expected .md (Markdown), .csv or .json", "fit": "expected .json",
                "flag": "expected .csv or .jsonl"}
    for command, words in expected.items():
        assert main(_argv(command, "results.xlsx", files)) == 1
        assert words in capsys.readouterr().err


def test_flag_does_not_write_csv_into_an_xlsx(files, capsys):
    out = files["tmp"] / "f.xlsx"
    assert main(_argv("flag", "f.xlsx", files)) == 1
    assert not out.exists()
    assert "--out" in capsys.readouterr().err


def test_evaluate_out_must_match_the_format(files, capsys):
    assert main(["evaluate", str(files["labeled"]), "--format", "json", "--out", str(files["tmp"] / "r.csv")]) == 1
    assert "--format json" in capsys.readouterr().err
    assert not (files["tmp"] / "r.csv").exists()


def test_good_outs_still_work(files):
    out = files["tmp"] / "report.md"
    assert main(["evaluate", str(files["labeled"]), "--splits", "2", "--methods", "TRACE", "--out", str(out),
                 "--quiet"]) == 0
    assert out.read_text(encoding="utf-8").startswith("Generated by `trace-core evaluate")
    out = files["tmp"] / "again.json"
    assert main(["fit", str(files["labeled"]), "--out", str(out), "--quiet"]) == 0
    flagged = files["tmp"] / "flagged.jsonl"
    assert main(["flag", str(files["labeled"]), "--calibrator", str(out), "--coverage", "0.5", "--out", str(flagged),
                 "--quiet"]) == 0
    assert len(flagged.read_text(encoding="utf-8").splitlines()) == 20


# ------------------------------------------------------------------------------------------------------------------
# Item 7: flag never overwrites its input
# ------------------------------------------------------------------------------------------------------------------

def _flag(files: dict, out: str, data: str | None = None) -> list[str]:
    return ["flag", data or str(files["labeled"]), "--calibrator", str(files["calibrator"]), "--threshold", "1.0",
            "--out", out, "--quiet"]


def test_flag_refuses_to_write_over_its_input_file(files, capsys, monkeypatch):
    original = files["labeled"].read_bytes()
    monkeypatch.chdir(files["tmp"])
    for out in (str(files["labeled"]), "labeled.jsonl", "./sub/../labeled.jsonl"):
        (files["tmp"] / "sub").mkdir(exist_ok=True)
        assert main(_flag(files, out)) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: --out {out}: is the input file")
        assert files["labeled"].read_bytes() == original


def test_flag_refuses_an_out_that_is_the_input_through_a_link(files, capsys):
    original = files["labeled"].read_bytes()
    link = files["tmp"] / "link.jsonl"
    link.symlink_to(files["labeled"])
    assert main(_flag(files, str(link))) == 1
    assert "is the input file" in capsys.readouterr().err
    data_link = files["tmp"] / "data_link.jsonl"  # the input given through a link, the real file as --out
    data_link.symlink_to(files["labeled"])
    assert main(_flag(files, str(files["labeled"]), data=str(data_link))) == 1
    assert "is the input file" in capsys.readouterr().err
    hard = files["tmp"] / "hard.jsonl"
    os.link(files["labeled"], hard)
    assert main(_flag(files, str(hard))) == 1
    assert "is the input file" in capsys.readouterr().err
    assert files["labeled"].read_bytes() == original


def test_flag_refuses_to_write_over_the_calibrator(files, capsys):
    original = files["calibrator"].read_bytes()
    assert main(_flag(files, str(files["calibrator"]))) == 1
    assert "is --calibrator" in capsys.readouterr().err
    assert files["calibrator"].read_bytes() == original


@pytest.mark.parametrize("columns", [["probability_correct"], ["trace_risk", "spike_context"],
                                     ["trace_confidence", "peak_risk_tokens", "trace_variant"]])
def test_flag_refuses_input_columns_named_like_its_output(columns, files, capsys, monkeypatch):
    traces, y = _traces()
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y})
    for c in columns:
        frame[c] = "mine"
    data = files["tmp"] / "mine.csv"
    write_dataset(frame, data, traces=traces)
    out = files["tmp"] / "flagged.csv"

    def no_scoring(*args, **kwargs):
        raise AssertionError("scored before the columns were checked")

    monkeypatch.setattr("trace_core.cli.flag.score_rows", no_scoring)
    assert main(_flag(files, str(out), data=str(data))) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: {data}: has column(s) ") and "rename them" in err
    assert all(f"'{c}'" in err for c in columns)
    assert not out.exists()
