"""The shipped real-model datasets (assets/datasets/real_*) agree with the rules that made them: every label and first
wrong token is what demo/real_tasks.py gives for the stored answer, the splits share no subject, the summary's
accuracies are the files', and the Inspect examples come from the validation answers (no model is run)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from demo import real_tasks as rt
from trace_core import read_dataset

ROOT = Path(__file__).resolve().parents[2]
DATASETS = ROOT / "assets" / "datasets"
SUMMARY = json.loads((DATASETS / "real_summary.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module", params=["validation", "test"])
def shipped(request):
    return request.param, read_dataset(DATASETS / f"real_{request.param}.csv")


def _problems(split: str) -> dict[str, rt.Problem]:
    """Every problem the builder could have asked in the split, by prompt."""
    settings = SUMMARY["settings"]
    found = [*rt.short_fact_problems(split), *rt.country_fact_problems(split),
             *rt.arithmetic_problems(settings["n_arithmetic"], split=split, seed=settings["seed"],
                                     sizes=settings["arithmetic_sizes"]),
             *rt.word_problems(settings["n_word_problems"], split=split, seed=settings["seed"],
                               high=settings["word_high"])]
    return {p.prompt: p for p in found}


def test_labels_and_first_wrong_tokens_follow_the_documented_rules(shipped):
    split, data = shipped
    problems = _problems(split)
    frame = data.frame
    assert set(frame["split"]) == {split} and set(frame["family"]) == set(rt.FAMILIES)
    for i, row in frame.iterrows():
        problem = problems[row["prompt"]]  # every prompt is one of the split's problems
        trace = data.traces[i]
        assert trace is not None and trace.answer == row["answer"] and trace.has_entropy
        label, detail, position = rt.label_of(problem, trace.answer)
        assert (int(row["label"]), row["detail"], row["reference"]) == (label, detail, problem.reference), i
        token = rt.first_wrong_token_of(trace.tokens, trace.answer, position)
        stored = pd.to_numeric(pd.Series([row["first_wrong_token"]]), errors="coerce").iloc[0]
        assert (None if pd.isna(stored) else int(stored)) == token, i


def test_the_splits_share_no_subject_and_the_summary_is_the_files():
    prompts = {split: set(pd.read_csv(DATASETS / f"real_{split}.csv", usecols=["prompt"])["prompt"])
               for split in ("validation", "test")}
    assert not prompts["validation"] & prompts["test"]
    subjects = {split: {p.subject for p in _problems(split).values() if p.prompt in prompts[split]}
                for split in prompts}
    assert not subjects["validation"] & subjects["test"]
    for split in ("validation", "test"):
        frame = pd.read_csv(DATASETS / f"real_{split}.csv", usecols=["family", "label"])
        for family, group in frame.groupby("family"):
            entry = SUMMARY["accuracy"][split][family]
            assert (entry["n"], entry["accuracy"]) == (len(group), round(float(group["label"].mean()), 4))
    total = sum(SUMMARY["file_bytes"].values())
    assert total <= 30e6 and all((DATASETS / name).stat().st_size == size
                                 for name, size in SUMMARY["file_bytes"].items())


def test_the_inspect_examples_are_validation_answers_of_each_kind():
    examples = json.loads((DATASETS / "real_try_prompts.json").read_text(encoding="utf-8"))
    assert examples["model"] == SUMMARY["model"] and examples["source"] == "real_validation.csv"
    frame = pd.read_csv(DATASETS / "real_validation.csv", usecols=["prompt", "answer", "label", "family"])
    rows = {r.prompt: r for r in frame.itertuples()}
    kinds = set()
    for e in examples["examples"]:
        row = rows[e["prompt"]]
        assert (row.answer, int(row.label), row.family) == (e["answer"], e["label"], e["family"])
        assert e["label"] == (1 if e["kind"] == "right" else 0)
        kinds.add(e["kind"])
    assert kinds == {"right", "one token away", "confidently wrong"}
