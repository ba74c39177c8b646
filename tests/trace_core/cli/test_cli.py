"""The command line end to end on a tiny model: generate -> score -> evaluate -> fit -> flag."""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pandas as pd
import pytest

from trace_core.cli import main
from trace_core.data import read_dataset, write_dataset
from trace_core.traces.synthetic import synthetic_traces
from trace_core.traces.trace import Trace


@pytest.fixture
def labeled_file(tmp_path):
    """A JSONL dataset with recorded-style traces and labels, plus a hostile cell for the export check."""
    s, h, y = synthetic_traces(120, kind="spike", seed=3, mean_length=12)
    traces = []
    for i, (si, hi) in enumerate(zip(s.split(), h.split(), strict=True)):
        tokens = tuple(f" w{j}" for j in range(len(si)))
        traces.append(Trace(prompt=f"q{i}", answer="".join(tokens), token_ids=np.arange(len(si)), tokens=tokens,
                            surprisal=si, entropy=hi, top_ids=np.zeros((len(si), 0)), top_logprobs=np.zeros((len(si), 0))))
    import pandas as pd

    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y,
                          "note": ["=HYPERLINK(\"http://x\")" if i == 0 else "ok" for i in range(len(traces))]})
    path = tmp_path / "labeled.jsonl"
    write_dataset(frame, path, traces=traces)
    return path


def test_generate_then_score_reproduces_traces(tiny_model_dirs, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Q: What is 2 plus 2? A:\n\nThe capital of France is\n", encoding="utf-8")
    out = tmp_path / "gen.jsonl"
    # Bare prompts: through its chat template this random model's first answer token is a partial UTF-8 byte, which
    # the answer's text re-tokenizes differently from its first position on (nothing left to compare).
    assert main(["generate", str(prompts), "--model", str(tiny_model_dirs["gpt2"]), "--out", str(out),
                 "--max-new-tokens", "6", "--no-chat-template", "--quiet"]) == 0
    generated = read_dataset(out, require_label=False)
    assert generated.n_valid == 2 and generated.has_traces
    assert generated.frame["prompt"].tolist() == ["Q: What is 2 plus 2? A:", "The capital of France is"]
    rescored_path = tmp_path / "rescored.jsonl"
    assert main(["score", str(out), "--model", str(tiny_model_dirs["gpt2"]), "--out", str(rescored_path),
                 "--rescore", "--no-chat-template", "--quiet"]) == 0
    rescored = read_dataset(rescored_path, require_label=False)
    assert len(generated.traces) == len(rescored.traces) == 2
    compared = 0
    for a, b in zip(generated.traces, rescored.traces, strict=True):
        # The answer text, re-tokenized on its own, can split differently from the generated tokens (a random model
        # emits partial UTF-8 bytes that decode to U+FFFD). Token t's surprisal and entropy depend only on the prompt
        # and tokens <= t, so teacher forcing must reproduce the generated trace over the common token prefix.
        ids_a, ids_b = a.token_ids.tolist(), b.token_ids.tolist()
        k = next((i for i, (x, y) in enumerate(zip(ids_a, ids_b, strict=True)) if x != y), min(len(ids_a), len(ids_b)))
        assert k >= 1, (ids_a, ids_b)
        np.testing.assert_allclose(a.surprisal[:k], b.surprisal[:k], atol=1e-4)
        np.testing.assert_allclose(a.entropy[:k], b.entropy[:k], atol=1e-4)
        compared += k
    assert compared >= 2
    assert capsys.readouterr().err == ""  # --quiet: only problems reach stderr


def test_evaluate_prints_markdown_and_writes_csv_json(labeled_file, tmp_path, capsys):
    assert main(["evaluate", str(labeled_file), "--splits", "3", "--methods", "TRACE+", "TRACE", "Mean Entropy",
                 "Likelihood LR (reference)"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert out.startswith("120 traces: entropy exact; 120 answers, ")
    assert "| TRACE+ | trace |" in out and "3 random splits" in out and "after Platt scaling" in out
    assert "| prr ↑ |" in out
    assert "| TRACE+ | best baseline |" in out and "| TRACE+ | Likelihood LR (reference) |" in out
    assert "Best baseline chosen on calibration: Brier: Mean Entropy in 3 of 3 splits" in out
    verdict = next(line for line in out.splitlines() if line.startswith("TRACE+ "))
    said = r"(beats|cannot be told apart from|is detectably but negligibly (?:better|worse) than|loses to)"
    assert re.match(rf"TRACE\+ {said} the best baseline \(Mean Entropy in 3 of 3 splits\) on Brier", verdict)
    assert re.search(rf"; it {said} the supervised likelihood reference on Brier", verdict)
    assert "length-aware" not in out and "Base-rate Brier p(1−p) " in out and "Verdict: beats (loses) when" in out
    assert "scoring 120 answers" in captured.err  # progress on stderr
    assert main(["evaluate", str(labeled_file), "--splits", "3", "--methods", "TRACE", "--calibrator", "isotonic",
                 "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "after isotonic regression" in captured.out and "scoring" not in captured.err
    target = tmp_path / "results.csv"
    assert main(["evaluate", str(labeled_file), "--splits", "2", "--out", str(target)]) == 0
    rows = list(csv.DictReader(target.open()))
    assert {r["method"] for r in rows} >= {"TRACE+", "TRACE", "SeqLogP"}
    assert {r["calibrator"] for r in rows if r["method"] == "SeqLogP"} == {"platt", "isotonic", "none"}
    target = tmp_path / "results.json"
    assert main(["evaluate", str(labeled_file), "--splits", "2", "--out", str(target)]) == 0
    data = json.loads(target.read_text())
    assert data["all"]["config"]["n_splits"] == 2 and "Beam-Ratio" in data["all"]["skipped"]
    assert data["all"]["data_note"] == "120 traces: entropy exact"
    assert {r["versus"] for r in data["all"]["paired"]} >= {"best baseline", "SeqLogP", "Likelihood LR (reference)"}
    verdict = data["all"]["verdict"]
    assert verdict["sentence"].startswith("TRACE+ ") and verdict["method"] == "TRACE+"
    assert {(c["versus"], c["metric"]) for c in verdict["comparisons"]} == {
        (v, m) for v in ("best baseline", "Likelihood LR (reference)") for m in ("brier", "auroc")}
    for c in verdict["comparisons"]:
        assert c["word"] in ("beats", "ties", "loses") and c["n_splits"] == 2 and c["low"] <= c["mean"] <= c["high"]
        assert (sum(c["chosen"].values()) == 2) if c["versus"] == "best baseline" else "chosen" not in c
    accuracy = data["all"]["accuracy"]
    assert data["all"]["skill"]["base_rate_brier"] == pytest.approx(accuracy * (1 - accuracy))


def test_fit_then_flag_exports_safe_rows(labeled_file, tmp_path):
    calibrator = tmp_path / "cal.json"
    assert main(["fit", str(labeled_file), "--out", str(calibrator)]) == 0
    assert json.loads(calibrator.read_text())["type"] == "TracePlus"
    flagged = tmp_path / "flagged.csv"
    assert main(["flag", str(labeled_file), "--calibrator", str(calibrator), "--coverage", "0.5",
                 "--out", str(flagged)]) == 0
    with flagged.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 60
    assert {"trace_confidence", "trace_risk", "probability_correct", "peak_risk_tokens", "note"} <= set(rows[0])
    probabilities = [float(r["probability_correct"]) for r in rows]
    assert probabilities == sorted(probabilities)
    for r in rows:
        assert not r["note"].startswith("=")  # the hostile cell is neutralised if flagged
    assert main(["flag", str(labeled_file), "--calibrator", str(calibrator), "--threshold", "1.0",
                 "--out", str(flagged)]) == 0
    with flagged.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 120 and any(r["note"] == "'=HYPERLINK(\"http://x\")" for r in rows)


@pytest.mark.parametrize("rule", [["--coverage", "0.5"], ["--target-risk", "0.3"], ["--threshold", "1.0"],
                                  ["--threshold", "0.0"]])
def test_flag_says_the_error_rate_of_the_kept_and_the_flagged_answers_by_their_labels(labeled_file, tmp_path, rule,
                                                                                      capsys):
    import pandas as pd

    calibrator, flagged = tmp_path / "cal.json", tmp_path / "flagged.csv"
    assert main(["fit", str(labeled_file), "--out", str(calibrator), "--quiet"]) == 0
    assert main(["flag", str(labeled_file), "--calibrator", str(calibrator), *rule, "--out", str(flagged)]) == 0
    line = [x for x in capsys.readouterr().err.splitlines() if x.startswith("flagged ")][-1]
    labels = pd.read_json(labeled_file, lines=True)["label"]
    out = pd.read_csv(flagged)["label"]  # the flagged rows' labels, as exported
    sides = []
    kept_n, kept_right = len(labels) - len(out), int(labels.sum() - out.sum())
    if kept_n:
        sides.append(f"{1 - kept_right / kept_n:.1%} among the {kept_n:,} kept")
    if len(out):
        sides.append(f"{1 - out.mean():.1%} among the {len(out):,} flagged")
    assert line == (f"flagged {len(out):,} of {len(labels):,} answers (error rate by the labels: {', '.join(sides)}); "
                    f"wrote {flagged}")


def test_flag_without_labels_says_the_mean_probability_of_the_kept_answers(labeled_file, tmp_path, capsys):
    import pandas as pd

    calibrator, flagged, unlabeled = tmp_path / "cal.json", tmp_path / "flagged.csv", tmp_path / "unlabeled.jsonl"
    assert main(["fit", str(labeled_file), "--out", str(calibrator), "--quiet"]) == 0
    unlabeled.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "label"}) + "\n"
                                 for line in labeled_file.read_text().splitlines()))
    assert main(["flag", str(unlabeled), "--calibrator", str(calibrator), "--threshold", "1.0",
                 "--out", str(flagged), "--quiet"]) == 0
    assert "(none kept)" in capsys.readouterr().err
    assert main(["flag", str(unlabeled), "--calibrator", str(calibrator), "--threshold", "0.5",
                 "--out", str(flagged), "--quiet"]) == 0
    err = capsys.readouterr().err
    everything = tmp_path / "all.csv"
    assert main(["flag", str(unlabeled), "--calibrator", str(calibrator), "--threshold", "1.0",
                 "--out", str(everything), "--quiet"]) == 0
    p = pd.read_csv(everything)["probability_correct"]
    kept = p[p >= 0.5]
    assert f"(mean P(correct) of the {len(kept):,} kept: {kept.mean():.1%})" in err


@pytest.mark.parametrize("argv, message", [
    (["evaluate", "missing.csv"], "missing.csv"),
    (["fit", "{labeled}", "--out", "x.json", "--C", "0"], "--C must be a finite real number > 0, got 0.0"),
    (["flag", "{labeled}", "--calibrator", "nope.json", "--threshold", "0.5", "--out", "f.csv"], "nope.json: no such"),
    (["generate", "{prompts}", "--model", "nobody/no-model", "--out", "g.jsonl"], "was not found locally"),
])
def test_errors_are_one_line_with_nonzero_exit(argv, message, labeled_file, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompts.txt").write_text("hello\n")
    argv = [a.format(labeled=labeled_file, prompts=tmp_path / "prompts.txt") for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1]
    assert not any("Traceback" in line for line in err)


def test_debug_shows_the_traceback(labeled_file, tmp_path):
    with pytest.raises(ValueError, match="`C` must be"):
        main(["fit", str(labeled_file), "--out", str(tmp_path / "c.json"), "--C", "-1", "--debug"])


def test_feature_set_is_a_usage_error_listing_the_choices(labeled_file, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", str(labeled_file), "--out", str(tmp_path / "c.json"), "--feature-set", "everything"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'everything'" in err
    assert all(name in err for name in ("'paper'", "'extended'", "'paper+likelihood'", "'extended+likelihood'"))
    calibrator = tmp_path / "ext.json"
    assert main(["fit", str(labeled_file), "--out", str(calibrator), "--feature-set", "extended"]) == 0
    assert json.loads(calibrator.read_text())["params"]["feature_set"] == "extended"


def test_every_subcommand_takes_the_shared_options():
    from trace_core.cli import build_parser

    parser = build_parser()
    for command in ("generate", "score", "evaluate", "fit", "flag"):
        required = {"generate": ["p.txt", "--model", "m", "--out", "o"], "score": ["d", "--model", "m", "--out", "o"],
                    "evaluate": ["d"], "fit": ["d", "--out", "o"],
                    "flag": ["d", "--calibrator", "c", "--threshold", "0.5", "--out", "o"]}[command]
        args = parser.parse_args([command, *required, "--debug", "--quiet"])
        assert args.debug and args.quiet and args.command == command


def test_evaluate_needs_traces(tmp_path, capsys):
    path = tmp_path / "plain.csv"
    path.write_text("prompt,answer,label\nq,a,1\nq2,b,0\n", encoding="utf-8")
    assert main(["evaluate", str(path)]) == 1
    assert "have no trace" in capsys.readouterr().err


def test_module_entry_point_runs():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "trace_core", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "evaluate" in result.stdout


def test_evaluate_group_by_reports_each_group_and_the_average(labeled_file, tmp_path, capsys):
    dataset = read_dataset(labeled_file)
    frame = dataset.frame.drop(columns=[dataset.row_column]).assign(family=["a", "b"] * 60)
    grouped = tmp_path / "grouped.jsonl"
    write_dataset(frame, grouped, traces=dataset.traces)
    assert main(["evaluate", str(grouped), "--splits", "2", "--methods", "TRACE", "Mean Entropy",
                 "--group-by", "family"]) == 0
    out = capsys.readouterr().out
    assert "### family = a (60 answers" in out and "### family = b (60 answers" in out
    assert "### average (120 answers" in out
    assert "average over 2 groups, 2 of 2 splits present in every group" in out
    assert main(["evaluate", str(grouped), "--group-by", "nope"]) == 1
    assert "no column 'nope'" in capsys.readouterr().err


def test_evaluate_group_by_makes_no_trace_per_answer(labeled_file, tmp_path, monkeypatch, capsys):
    """Each group is a view of the file's table (its columns taken at the group's rows): evaluating every group
    reads no answer of the table as a Trace, whatever the number of answers."""
    from trace_core import TraceTable

    dataset = read_dataset(labeled_file)
    frame = dataset.frame.drop(columns=[dataset.row_column]).assign(family=["a", "b", "c"] * 40)
    grouped = tmp_path / "grouped.jsonl"
    write_dataset(frame, grouped, traces=dataset.traces)
    rows_read = []
    for name in ("__getitem__", "__iter__"):  # the two ways a table hands out its answers as Traces
        real = getattr(TraceTable, name)
        monkeypatch.setattr(TraceTable, name, lambda self, *a, real=real, name=name: rows_read.append(name)
                            or real(self, *a))
    assert main(["evaluate", str(grouped), "--splits", "2", "--methods", "TRACE", "TRACE+", "Mean Entropy",
                 "--group-by", "family", "--quiet"]) == 0
    assert "### family = c (40 answers" in capsys.readouterr().out
    assert rows_read == []


def test_group_by_reports_skipped_splits_per_group_as_plain_lines(labeled_file, tmp_path, capsys):
    dataset = read_dataset(labeled_file)
    labels = dataset.frame["label"].to_numpy()
    # group "small": 2 wrong answers among 12, so some unstratified splits have one class only in a part
    wrong = np.flatnonzero(labels == 0)[:2].tolist()
    right = np.flatnonzero(labels == 1)[:10].tolist()
    family = np.array(["big"] * len(labels), dtype=object)
    family[wrong + right] = "small"
    frame = dataset.frame.drop(columns=[dataset.row_column]).assign(family=family)
    grouped = tmp_path / "grouped.jsonl"
    write_dataset(frame, grouped, traces=dataset.traces)
    assert main(["evaluate", str(grouped), "--splits", "20", "--methods", "TRACE", "SeqLogP",
                 "--group-by", "family", "--quiet"]) == 0
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    skipped = [line for line in err if "splits skipped" in line]
    assert len(skipped) == 1 and skipped[0].startswith("warning: family = small: ")
    assert skipped[0].endswith("use --stratified to keep both classes in every part")
    assert not any("UserWarning" in line or ".py:" in line or "stratified=True" in line for line in err)
    n_used = int(skipped[0].split(": ")[2].split(" of ")[0])
    assert f"average over 2 groups, {20 - n_used} of 20 splits present in every group" in captured.out
    assert f"Mean ± std over {20 - n_used} splits present in every group (of 20)" in captured.out


def test_evaluate_on_traces_without_entropy_says_what_the_data_held(tmp_path, capsys):
    from trace_core.traces.trace import TraceMetadata

    s, _, y = synthetic_traces(150, kind="surprisal_spike", mean_length=20, seed=4)
    traces = [Trace(prompt=f"q{i}", answer="".join(f" w{j}" for j in range(len(si))), token_ids=np.arange(len(si)),
                    tokens=tuple(f" w{j}" for j in range(len(si))), surprisal=si, entropy=None,
                    top_ids=np.zeros((len(si), 0)), top_logprobs=np.zeros((len(si), 0)),
                    metadata=TraceMetadata(entropy_source="absent")) for i, si in enumerate(s.split())]
    import pandas as pd

    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y})
    path = tmp_path / "no_entropy.jsonl"
    write_dataset(frame, path, traces=traces)
    assert main(["evaluate", str(path), "--splits", "3", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("150 traces: chosen-token log-probabilities only (no entropy): entropy methods skipped")
    assert "| TRACE (surprisal-only) | trace |" in out and "| TRACE | trace |" not in out
    assert "First-Token Prob (uninformative (constant))" in out
    assert "- Mean Entropy: skipped (needs token entropy" in out


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_flagged_export_keeps_the_traces_reads_back_and_scores_again_the_same(labeled_file, tmp_path, suffix, capsys):
    from trace_core.data import read_dataset

    calibrator = tmp_path / "cal.json"
    assert main(["fit", str(labeled_file), "--out", str(calibrator)]) == 0
    flagged = tmp_path / f"flagged.{suffix}"
    tokens = tmp_path / "tokens.csv"
    assert main(["flag", str(labeled_file), "--calibrator", str(calibrator), "--coverage", "0.5",
                 "--out", str(flagged), "--tokens", str(tokens)]) == 0
    original = {t.prompt: t for t in read_dataset(labeled_file).traces}
    back = read_dataset(flagged)
    assert {"tokens", "surprisal", "entropy", "trace_metadata"} <= set(pd.read_json(flagged, lines=True).columns
                                                                        if suffix == "jsonl" else
                                                                        pd.read_csv(flagged).columns)
    assert len(back.traces) == 60
    for trace in back.traces:
        np.testing.assert_array_equal(trace.surprisal, original[trace.prompt].surprisal)  # bit for bit
        np.testing.assert_array_equal(trace.entropy, original[trace.prompt].entropy)
    # scored again: the earlier scores are replaced, the probabilities are the same
    again = tmp_path / f"again.{suffix}"
    capsys.readouterr()
    assert main(["flag", str(flagged), "--calibrator", str(calibrator), "--threshold", "1.0",
                 "--out", str(again)]) == 0
    assert "a flagged export; its earlier scores" in capsys.readouterr().err
    first = read_dataset(flagged).frame.set_index("prompt")["probability_correct"]
    second = read_dataset(again).frame.set_index("prompt")["probability_correct"]
    np.testing.assert_allclose(second.loc[first.index].to_numpy(dtype=float), first.to_numpy(dtype=float))
    table = pd.read_csv(tokens)
    assert list(table.columns) == ["row", "position", "token", "token_id", "probability", "surprisal", "entropy",
                                   "rank", "alternatives"]
    assert len(table) == sum(len(t) for t in back.traces) and table["row"].nunique() == 60


def test_fit_says_how_many_answers_of_each_class_and_warns_when_one_is_rare(labeled_file, tmp_path, capsys):
    import pandas as pd

    labels = pd.read_json(labeled_file, lines=True)["label"]
    calibrator = tmp_path / "cal.json"
    assert main(["fit", str(labeled_file), "--out", str(calibrator), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert (f"fitted TRACE+ (paper) on {len(labels)} answers ({labels.sum()} correct, {len(labels) - labels.sum()} "
            f"wrong); wrote {calibrator}") in err
    assert "warning" not in err
    rare = tmp_path / "rare.jsonl"  # every wrong answer and 3 right ones
    lines = labeled_file.read_text().splitlines()
    keep = [line for line, y in zip(lines, labels, strict=True) if y == 0] + [
        line for line, y in zip(lines, labels, strict=True) if y == 1][:3]
    rare.write_text("\n".join(keep) + "\n")
    assert main(["fit", str(rare), "--method", "SeqLogP", "--out", str(calibrator), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"on {len(keep)} answers (3 correct, {len(keep) - 3} wrong)" in err
    assert "warning: a calibrator fitted on fewer than 100 answers, or fewer than 10 of either class" in err
