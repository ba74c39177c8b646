"""The claim matcher, hyphens as word boundaries, what a matcher found (matched_span) and labels flipped by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trace_core.data import (
    FLIPPED_COLUMN,
    MATCHERS,
    claim_text,
    flip_labels,
    label_from_reference,
    matched_span,
    read_dataset,
    write_dataset,
)


@pytest.mark.parametrize(("answer", "reference", "contains", "claim"), [
    # the reference only beside the claim: contains calls it right, the claim matcher does not
    ("The official language of the Bahamas is Bahamiskat, which is a mix of English and Bahamicos.", "English", 1, 0),
    ("Grenada's official language is French, with English being the country's primary language.", "English", 1, 0),
    ("Morocco is a desert nation nestled between Africa and Europe.", "Africa || African continent", 1, 0),
    ("Its official language is Tokelauan, spoken primarily by the Samoan people, which is Polynesian.", "Samoan", 1, 1),
    ("Its official language is Tokelauan, which is spoken primarily by the Samoan people.", "Samoan", 1, 0),
    ("The capital is Rome. Paris is the largest city.", "Paris", 1, 0),  # only the first sentence claims
    ("Let me think. 3 apples and 4 more.\nAnswer: Paris", "Paris", 1, 1),  # the Answer: line is the claim
    ("Paris is nice.\nAnswer: Lyon", "Paris", 1, 0),
    ("St. John's is the capital of Antigua and Barbuda.", "St. John's", 1, 1),  # "St." ends no sentence
    # a hyphen joins words (SQuAD's normalisation): splitting them measured worse on the hand labels
    ("Cameroon has a relatively English-speaking population.", "English", 0, 0),
    ("The capital is Porto-Novo.", "Porto-Novo", 1, 1),
    ("Brazil's capital is Brasilia.", "Brasília || Brasilia", 1, 1),
])
def test_claim_and_contains(answer, reference, contains, claim):
    assert label_from_reference(answer, reference, matcher="contains") == contains
    assert label_from_reference(answer, reference, matcher="claim") == claim


def test_claim_is_a_matcher_everywhere():
    assert "claim" in MATCHERS
    frame = pd.DataFrame({"prompt": ["Q1", "Q2"], "reference": ["English", "English"],
                          "answer": ["It is English.", "It is Bahamiskat, which is a mix of English."]})
    dataset = read_dataset(frame.to_csv(index=False).encode(), format="csv", matcher="claim")
    assert dataset.labels.tolist() == [1, 0] and dataset.label_source == "reference:claim"


def test_claim_text_edges():
    assert claim_text("") == ""
    assert claim_text("Answer:\nParis.") == "Paris."  # the answer on the next line
    assert claim_text("It is Rome. Answer:") == "It is Rome."  # an empty Answer: line is no claim: the first sentence
    assert claim_text("No. 5 is the answer. Next.") == "No. 5 is the answer."
    assert claim_text("J. R. R. Tolkien wrote it. Then more.") == "J. R. R. Tolkien wrote it."


@pytest.mark.parametrize(("answer", "reference", "matcher", "span"), [
    ("The capital is Paris.", "paris", "contains", (15, 20)),
    ("The capital is PARIS, France.", "Lyon || Paris", "contains", (15, 20)),
    ("The capital is Porto-Novo.", "Porto-Novo", "contains", (15, 25)),
    ("It is Bahamiskat, which is a mix of English.", "English", "claim", None),
    ("It is English, which is a mix of English.", "English", "claim", (6, 13)),
    ("2 + 3 = 5.", "5", "numeric", (8, 9)),
    ("I do not know.", "5", "numeric", None),
    ("Paris", "Paris", "exact", (0, 5)),
    ("Bogota", "Bogotá", "contains", None),  # matched after accents were folded: not shown, not wrong
])
def test_matched_span(answer, reference, matcher, span):
    assert matched_span(answer, reference, matcher) == span


def test_flip_labels_changes_only_the_copy_and_says_so():
    frame = pd.DataFrame({"prompt": ["a", "b", "c"], "answer": ["x", "y", "z"], "label": [1, 0, 1]})
    dataset = read_dataset(frame.to_csv(index=False).encode(), format="csv")
    flipped = flip_labels(dataset, [2, 0, 2])
    assert flipped.labels.tolist() == [0, 0, 0] and dataset.labels.tolist() == [1, 0, 1]
    assert flipped.frame[FLIPPED_COLUMN].tolist() == [True, False, True]
    assert flipped.labels.dtype == np.int64 and "2 labels corrected by hand" in flipped.notes
    assert flip_labels(dataset, []) is dataset
    with pytest.raises(ValueError, match="row 3 is out of range: the dataset has 3 valid rows"):
        flip_labels(dataset, [3])


def test_flipped_labels_survive_a_round_trip(tmp_path):
    frame = pd.DataFrame({"prompt": ["a", "b"], "answer": ["x", "y"], "label": [1, 0]})
    dataset = flip_labels(read_dataset(frame.to_csv(index=False).encode(), format="csv"), [1])
    write_dataset(dataset.frame, tmp_path / "reviewed.csv")
    again = read_dataset(tmp_path / "reviewed.csv")
    assert again.labels.tolist() == [1, 1] and again.frame[FLIPPED_COLUMN].astype(str).tolist() == ["False", "True"]


def test_matched_span_of_claim_skips_hedges_and_asides():
    answer = "Located between Africa and Europe, it is in Africa, which borders Europe."
    assert matched_span(answer, "Europe", "claim") is None  # only in a hedge and an aside
    start, end = matched_span(answer, "Africa", "claim")
    assert answer[start:end] == "Africa" and start > answer.index("Europe")  # the one outside the hedge
    assert matched_span("Reasoning here.\nFinal answer: Paris", "Paris", "claim") == (30, 35)
    assert claim_text("I reanswer: no. It is Paris.") == "I reanswer: no."  # "answer:" must start a word
