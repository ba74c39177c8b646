"""Report defects: a truncated distribution is said (warning and note), --extended on data without entropy adds no
duplicate variants and says why in one line, and an average marks a method constant only when every group does."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from helpers import make_trace

from trace_core.cli import main
from trace_core.data import write_dataset
from trace_core.evaluation.results import UNINFORMATIVE, report_markdown
from trace_core.evaluation.run import (
    TRUNCATED_SHARE,
    EvaluationConfig,
    TruncatedDistributionWarning,
    average_results,
    evaluate,
    evaluate_arrays,
)
from trace_core.methods.risk import stack_traces
from trace_core.traces.trace import Trace, TraceMetadata

CONFIG = EvaluationConfig(n_splits=3, stratified=True)


def _labeled_traces(n: int, *, certain_share: float, seed: int = 0, length: int = 10, entropy: bool = True,
                    first_certain: bool = False) -> tuple[list[Trace], np.ndarray]:
    """``n`` answers of ``length`` tokens, ``certain_share`` of each answer's tokens with surprisal exactly 0
    (probability 1); wrong answers are more surprising. ``first_certain``: every first token has probability 1 (the
    First-Token Prob baseline is then constant)."""
    rng = np.random.default_rng(seed)
    y = (np.arange(n) % 2).astype(int)
    traces = []
    for i in range(n):
        s = rng.gamma(1.0, 0.5 if y[i] else 1.5, size=length) + 0.01
        s[: int(round(certain_share * length))] = 0.0
        if first_certain:
            s[0] = 0.0
        rng.shuffle(s[1:] if first_certain else s)
        if entropy:
            traces.append(make_trace(s, prompt=f"q{i}"))
        else:
            tokens = tuple(f" w{j}" for j in range(length))
            traces.append(Trace(prompt=f"q{i}", answer="".join(tokens), token_ids=np.full(length, -1), tokens=tokens,
                                surprisal=s, entropy=None, top_ids=[], top_logprobs=[],
                                metadata=TraceMetadata(source="imported", entropy_source="absent")))
    return traces, y


def _write(tmp_path, traces, y, name="data.jsonl", **columns) -> str:
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y,
                          **columns})
    path = tmp_path / name
    write_dataset(frame, path, traces=traces)
    return str(path)


def _warning_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


# --------------------------------------------------------------------------------------------------
# (e) a truncated distribution
# --------------------------------------------------------------------------------------------------

def test_many_tokens_of_probability_one_warn_and_note_that_the_distribution_looks_truncated():
    traces, y = _labeled_traces(100, certain_share=0.6)  # 600 of the 1,000 tokens have probability 1
    with pytest.warns(TruncatedDistributionWarning) as caught:
        result = evaluate(traces, y, config=CONFIG, methods=["TRACE", "SeqLogP"])
    message = str(caught[0].message)
    assert message.startswith("60% of the 1,000 answer tokens have probability exactly 1")
    assert "looks truncated (top-p/top-k sampling, or a server that returns post-processed log-probabilities)" in message
    assert "surprisal-based scores" in message and "are not the model's" in message
    assert result.notes == [message] and result.certain_tokens == (600, 1000)
    assert f"\nNote: {message}.\n" in report_markdown({"": result})
    assert result.to_dict()["notes"] == [message]
    # The array entry point says the same
    s, h = stack_traces(traces)
    with pytest.warns(TruncatedDistributionWarning, match="60% of the 1,000 answer tokens"):
        evaluate_arrays(s, h, y, config=CONFIG, methods=["TRACE"])


@pytest.mark.parametrize("share", [0.0, 0.1, TRUNCATED_SHARE])  # the limit itself is not "more than"
def test_a_full_distribution_gives_no_truncation_warning_or_note(share):
    traces, y = _labeled_traces(100, certain_share=share)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TruncatedDistributionWarning)
        result = evaluate(traces, y, config=CONFIG, methods=["TRACE", "SeqLogP"])
    assert result.notes == [] and "notes" not in result.to_dict()
    assert "Note:" not in report_markdown({"": result})


def test_cli_says_a_truncated_distribution_in_one_warning_line(tmp_path, capsys):
    traces, y = _labeled_traces(100, certain_share=0.6)
    path = _write(tmp_path, traces, y)
    assert main(["evaluate", path, "--splits", "3", "--stratified", "--methods", "TRACE", "SeqLogP", "--quiet"]) == 0
    captured = capsys.readouterr()
    lines = _warning_lines(captured.err)
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("warning: 60% of the 1,000 answer tokens have probability exactly 1")
    assert "looks truncated" in lines[0]
    assert "\nNote: 60% of the 1,000 answer tokens have probability exactly 1" in captured.out


def test_cli_group_by_says_a_truncated_distribution_once_over_every_answer(tmp_path, capsys):
    a, ya = _labeled_traces(60, certain_share=0.6, seed=1)
    b, yb = _labeled_traces(60, certain_share=0.5, seed=2)
    path = _write(tmp_path, a + b, np.concatenate([ya, yb]), family=["a"] * 60 + ["b"] * 60)
    assert main(["evaluate", path, "--splits", "3", "--stratified", "--methods", "TRACE", "SeqLogP",
                 "--group-by", "family", "--quiet"]) == 0
    captured = capsys.readouterr()
    lines = _warning_lines(captured.err)
    assert lines == ["warning: 55% of the 1,200 answer tokens have probability exactly 1 (log-probability 0.0; more "
                     "than 20%): the distribution looks truncated (top-p/top-k sampling, or a server that returns "
                     "post-processed log-probabilities), so surprisal-based scores (TRACE, TRACE+, the likelihood "
                     "baselines) are not the model's"]
    sections = captured.out.split("### ")[1:]
    assert "Note: 60% of the 600 answer tokens" in sections[0] and "Note: 50% of the 600 answer tokens" in sections[1]
    assert "Note: 55% of the 1,200 answer tokens" in sections[2]


# --------------------------------------------------------------------------------------------------
# (f) --extended on data without entropy
# --------------------------------------------------------------------------------------------------

def test_extended_on_data_without_entropy_adds_no_duplicate_variants_and_says_so_once(tmp_path, capsys):
    traces, y = _labeled_traces(80, certain_share=0.0, entropy=False)
    path = _write(tmp_path, traces, y)
    assert main(["evaluate", path, "--splits", "3", "--stratified", "--extended", "--quiet"]) == 0
    captured = capsys.readouterr()
    rows = [line.split(" | ")[0] for line in captured.out.splitlines() if line.startswith("| ")
            and " | trace | " in line]
    assert rows == ["| TRACE+ (surprisal-only)", "| TRACE (surprisal-only)"]  # each once, no entropy variants
    lines = [line for line in _warning_lines(captured.err) if "extended" in line]
    assert lines == ["warning: the extended TRACE+ variants (TRACE+ (extended), TRACE+ (paper+likelihood), "
                     "TRACE+ (extended+likelihood)) need token entropy and these traces hold only the chosen tokens' "
                     "log-probabilities: they did not run (TRACE+ (surprisal-only) and TRACE (surprisal-only) are "
                     "the variants for such data)"]
    assert captured.out.count("the extended TRACE+ variants") == 1  # one note, not a skipped line per variant
    assert "- TRACE+ (extended): skipped" not in captured.out
    assert "- Mean Entropy: skipped (needs token entropy" in captured.out  # the other skipped methods as before


def test_extended_variants_without_entropy_are_a_note_of_the_result():
    traces, y = _labeled_traces(80, certain_share=0.0, entropy=False)
    result = evaluate(traces, y, config=CONFIG, methods=["TRACE+", "TRACE+ (extended)", "TRACE+ (surprisal-only)"])
    assert result.methods == ["TRACE+ (surprisal-only)"]
    notes = [n for n in result.notes if not n.startswith("Only 80 answers")]  # and the small-sample note
    assert len(notes) == 1 and notes[0].startswith("the extended TRACE+ variants (TRACE+ (extended)) need token entropy")
    assert "TRACE+ (extended)" in result.skipped  # the library still says why each asked-for method did not run


def test_extended_on_data_with_entropy_runs_every_variant_without_a_note(tmp_path, capsys):
    traces, y = _labeled_traces(80, certain_share=0.0)
    path = _write(tmp_path, traces, y)
    assert main(["evaluate", path, "--splits", "2", "--stratified", "--extended", "--quiet"]) == 0
    captured = capsys.readouterr()
    for name in ("TRACE+", "TRACE+ (extended)", "TRACE+ (paper+likelihood)", "TRACE+ (extended+likelihood)"):
        assert captured.out.count(f"| {name} | trace |") == 1
    assert "the extended TRACE+ variants" not in captured.out + captured.err


# --------------------------------------------------------------------------------------------------
# (g) constant in some groups only
# --------------------------------------------------------------------------------------------------

def _two_groups() -> dict:
    """First-Token Prob is constant in group a (every first token has probability 1), not in group b."""
    a = evaluate(*_labeled_traces(60, certain_share=0.0, seed=1, first_certain=True), config=CONFIG,
                 methods=["TRACE", "First-Token Prob", "SeqLogP"])
    b = evaluate(*_labeled_traces(60, certain_share=0.0, seed=2), config=CONFIG,
                 methods=["TRACE", "First-Token Prob", "SeqLogP"])
    assert a.uninformative == {"First-Token Prob": UNINFORMATIVE} and b.uninformative == {}
    return {"family = a": a, "family = b": b}


def test_average_marks_a_method_constant_only_when_every_group_does():
    groups = _two_groups()
    averaged = average_results(groups)
    assert averaged.uninformative == {}
    assert not averaged.summary["uninformative"].any()
    assert averaged.notes == ["First-Token Prob was constant in 1 of 2 groups (family = a): uninformative there, "
                              "averaged as any other method"]
    assert "(uninformative (constant))" not in averaged.to_markdown()
    # Without names the groups are numbered
    assert average_results(list(groups.values())).notes[0].startswith("First-Token Prob was constant in 1 of 2 groups "
                                                                      "(group 1)")
    # Constant in every group: marked in the average, no note
    both = average_results({"x": groups["family = a"], "y": groups["family = a"]})
    assert both.uninformative == {"First-Token Prob": UNINFORMATIVE} and both.notes == []


def test_cli_group_by_average_says_which_group_a_method_was_constant_in(tmp_path, capsys):
    a, ya = _labeled_traces(60, certain_share=0.0, seed=1, first_certain=True)
    b, yb = _labeled_traces(60, certain_share=0.0, seed=2)
    path = _write(tmp_path, a + b, np.concatenate([ya, yb]), family=["a"] * 60 + ["b"] * 60)
    assert main(["evaluate", path, "--splits", "3", "--stratified", "--methods", "TRACE", "First-Token Prob",
                 "SeqLogP", "--group-by", "family", "--quiet"]) == 0
    out = capsys.readouterr().out
    sections = out.split("### ")[1:]
    assert [s.split(" (")[0] for s in sections] == ["family = a", "family = b", "average"]
    assert "| First-Token Prob (uninformative (constant)) | likelihood |" in sections[0]
    assert "| First-Token Prob | likelihood |" in sections[1] and "| First-Token Prob | likelihood |" in sections[2]
    assert ("Note: First-Token Prob was constant in 1 of 2 groups (family = a): uninformative there, averaged as any "
            "other method.") in sections[2]
    assert "Uninformative (constant): " not in sections[2]  # the caption lists the average's constant methods only
