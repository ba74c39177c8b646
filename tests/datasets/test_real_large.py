"""The large real-model datasets (assets/datasets/real_large_*) agree with the rules that made them: every prompt of
each split is there with its greedy and sampled answers, every label and first wrong token is what
demo/build_large.py gives for the stored answer, the splits share no subject, and the summary is the files (no model
is run)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from demo import build_large as bl
from demo import real_tasks as rt
from trace_core import read_dataset

ROOT = Path(__file__).resolve().parents[2]
DATASETS = ROOT / "assets" / "datasets"
SUMMARY = json.loads((DATASETS / "real_large_summary.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module", params=["validation", "test"])
def shipped(request):
    return request.param, read_dataset(DATASETS / f"real_large_{request.param}.parquet")


def _problems(split: str) -> dict[str, rt.Problem]:
    return {p.prompt: p for items in bl.problems_of(split, list(bl.FAMILIES), False).values() for p in items}


def test_every_prompt_is_answered_greedily_and_sampled(shipped):
    split, data = shipped
    frame, problems = data.frame, _problems(split)
    samples = SUMMARY["splits"][split]["samples"]
    assert set(frame["prompt"]) == set(problems)  # every prompt of the split, nothing else
    counts = frame.groupby("prompt")["sample"].agg(lambda s: sorted(s.tolist()))
    assert all(c == list(range(samples + 1)) for c in counts), "one greedy answer and the sampled ones per prompt"
    assert set(frame["split"]) == {split} and set(frame["family"]) == set(bl.FAMILIES)


def test_labels_and_first_wrong_tokens_follow_the_documented_rules(shipped):
    split, data = shipped
    problems = _problems(split)
    for i, row in data.frame.iterrows():
        problem = problems[row["prompt"]]
        trace = data.traces[i]
        assert trace is not None and trace.answer == row["answer"] and trace.has_entropy
        assert "".join(trace.tokens) == trace.answer
        label, detail, _, token = rt.labeled(problem, trace.tokens, trace.answer)
        assert (int(row["label"]), row["detail"], row["reference"]) == (label, detail, problem.reference), i
        stored = row["first_wrong_token"]
        assert (None if pd.isna(stored) else int(stored)) == token, i


def test_the_splits_share_no_subject_and_the_summary_is_the_files():
    frames = {split: pd.read_parquet(DATASETS / f"real_large_{split}.parquet",
                                     columns=["prompt", "subject", "family", "label", "first_wrong_token", "sample"])
              for split in ("validation", "test")}
    assert not set(frames["validation"]["subject"]) & set(frames["test"]["subject"])
    assert not set(frames["validation"]["prompt"]) & set(frames["test"]["prompt"])
    for split, frame in frames.items():
        entry = SUMMARY["splits"][split]
        assert entry["rows"] == len(frame) and entry["prompts"] == frame["prompt"].nunique()
        for family, row in entry["accuracy"].items():
            group = frame[frame["family"] == family]
            assert row["n"] == len(group) and row["accuracy"] == round(float(group["label"].mean()), 4)
            wrong = group[group["label"] == 0]
            assert row["wrong"] == len(wrong) and row["wrong_located"] == int(wrong["first_wrong_token"].notna().sum())
        located = int(((frame["label"] == 0) & frame["first_wrong_token"].notna()).sum())
        assert entry["wrong_located"] == located
        assert entry["file_bytes"] == (DATASETS / f"real_large_{split}.parquet").stat().st_size


def test_the_test_split_has_the_power_the_results_need():
    """At least 3,000 labeled test answers and 200 located first wrong tokens (docs/results.md rests on them)."""
    test = SUMMARY["splits"]["test"]
    assert test["rows"] >= 3000 and test["wrong_located"] >= 200
