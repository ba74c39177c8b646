"""The note on answers that the exact matcher labeled wrong although they hold their reference as whole words: an
instruct model answers in sentences ("The capital of France is Paris."), and exact matching against "Paris" labels
every such answer wrong. The note is made by ``exact_match_hint`` and carried by ``read_dataset`` (``label_note``, so the
CLI and the pages show it) and by ``trace-core generate`` (a warning)."""

from __future__ import annotations

import pandas as pd
import pytest

from trace_core.data import read_dataset
from trace_core.data.labels import EXACT_HINT_ROWS, exact_match_hint


def test_no_note_when_the_wrong_answers_do_not_hold_their_reference():
    assert exact_match_hint(["Paris", "It is Lyon.", "17 + 25 = 32."], ["Paris", "Paris", "42"], [1, 0, 0],
                            [1, 2, 3]) is None
    assert exact_match_hint([], [], [], []) is None


def test_the_note_counts_the_answers_labeled_wrong_that_hold_their_reference_and_quotes_the_first():
    answers = ["Paris", "17 + 25 = 32.", "The capital of France is Paris.", "It is 42.", "4"]
    references = ["Paris", "42", "Paris", "42", "5"]
    note = exact_match_hint(answers, references, [1, 0, 0, 0, 0], [10, 11, 12, 13, 14])
    assert note is not None
    assert note.startswith("2 of the 4 answers that the exact matcher labeled wrong hold their reference")
    assert "row 12: 'The capital of France is Paris.' against 'Paris'" in note
    assert "contains, numeric or f1" in note


def test_unlabeled_answers_and_references_no_matcher_can_use_are_passed_over():
    answers = ["It is Paris.", "It is Paris.", "It is Paris."]
    note = exact_match_hint(answers, ["Paris", "the", "Paris"], [None, 0, 0], [1, 2, 3])
    assert note is not None and note.startswith("1 of the 2 answers") and "row 3:" in note


def test_only_the_first_rows_labeled_wrong_are_looked_at_and_the_note_says_so():
    n = EXACT_HINT_ROWS + 5
    answers = ["It is Paris."] * n
    note = exact_match_hint(answers, ["Paris"] * n, [0] * n, list(range(1, n + 1)))
    assert note is not None and note.startswith(f"{EXACT_HINT_ROWS:,} of the first {EXACT_HINT_ROWS:,} answers")
    exactly = exact_match_hint(answers[:EXACT_HINT_ROWS], ["Paris"] * EXACT_HINT_ROWS, [0] * EXACT_HINT_ROWS,
                               list(range(1, EXACT_HINT_ROWS + 1)))
    assert exactly is not None and f"of the {EXACT_HINT_ROWS:,} answers" in exactly


def test_long_answers_and_references_are_quoted_short():
    answer, reference = "Paris " + "x" * 10_000, "Paris " + "y" * 10_000
    note = exact_match_hint([answer + " " + reference], [reference], [0], [7])
    assert note is not None and len(note) < 500 and "row 7:" in note


def _answers_file(tmp_path, answers, references, **extra):
    path = tmp_path / "answers.csv"
    pd.DataFrame({"prompt": [f"Q{i}" for i in range(len(answers))], "answer": answers, "reference": references,
                  **extra}).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("matcher, noted", [("exact", True), ("contains", False), ("f1", False)])
def test_read_dataset_notes_it_only_for_the_exact_matcher(tmp_path, matcher, noted):
    path = _answers_file(tmp_path, ["The capital of France is Paris.", "Berlin", "It is 5."], ["Paris", "Berlin", "4"])
    dataset = read_dataset(path, matcher=matcher)
    assert dataset.notes == []
    assert (dataset.label_note is not None) == noted
    if noted:
        assert dataset.frame["label"].tolist() == [0, 1, 0]
        assert "row 1:" in dataset.label_note and dataset.summary().endswith(dataset.label_note)


def test_read_dataset_says_nothing_when_labels_are_given(tmp_path):
    path = _answers_file(tmp_path, ["The capital of France is Paris.", "Berlin"], ["Paris", "Berlin"], label=[1, 1])
    assert read_dataset(path).label_note is None


def test_a_generated_shard_carries_the_note(tmp_path, monkeypatch):
    import numpy as np

    from trace_core.scale.generate import ShardGenerator
    from trace_core.scale.shards import Shard
    from trace_core.traces.trace import DecodingConfig, Trace

    path = tmp_path / "a.csv"
    path.write_text("prompt,reference\nQ: capital of France?,Paris\nQ: 3 + 4 =,7\n", encoding="utf-8")
    answers = {"Q: capital of France?": " It is Paris.", "Q: 3 + 4 =": " 7"}

    def generate(self, prompts, config, description):
        return [Trace(prompt=p, answer=answers[p], token_ids=np.arange(1), tokens=("x",), surprisal=np.array([0.5]),
                      entropy=np.array([0.5]), top_ids=np.zeros((1, 0)), top_logprobs=np.zeros((1, 0)))
                for p in prompts]

    monkeypatch.setattr(ShardGenerator, "generate_answers", generate)
    shard = Shard(path=path, name="a.csv", format="csv", output="a.csv")
    exact = ShardGenerator(lambda: None, config=DecodingConfig())(shard)
    assert exact.frame["label"].tolist() == [0, 1]
    assert len(exact.notes) == 1 and "row 1: ' It is Paris.' against 'Paris'" in exact.notes[0]
    assert ShardGenerator(lambda: None, config=DecodingConfig(), matcher="contains")(shard).notes == []


@pytest.mark.parametrize("quiet", [False, True])
def test_evaluate_says_it_even_when_quiet(tmp_path, capsys, quiet):
    from trace_core.cli import main

    path = _answers_file(tmp_path, ["The capital of France is Paris.", "Berlin", "Rome"], ["Paris", "Berlin", "Rome"])
    assert main(["evaluate", str(path), *(["--quiet"] if quiet else [])]) == 1  # no trace: nothing to evaluate
    err = [line for line in capsys.readouterr().err.splitlines() if "exact matcher" in line]
    assert len(err) == 1 and "row 1: 'The capital of France is Paris.' against 'Paris'" in err[0], err
    assert err[0].startswith("warning: ") == quiet
