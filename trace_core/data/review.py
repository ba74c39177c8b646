"""Reviewing labels made from references: what a matcher found in each answer, and labels corrected by hand."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from trace_core.checks import counted
from trace_core.data.claim import claim_region, find_span, hedged_spans
from trace_core.data.dataset import LabeledDataset
from trace_core.data.labels import last_number_span, reference_pieces

__all__ = ["FLIPPED_COLUMN", "flip_labels", "matched_span"]

#: The column :func:`flip_labels` adds: True where the label was corrected by hand.
FLIPPED_COLUMN = "label_flipped"


def matched_span(answer: str, reference: object, matcher: str) -> tuple[int, int] | None:
    """The characters of ``answer`` that its label rests on, for showing: the first place a reference occurs (the
    claim's, for ``claim``: inside the answer's claim), or the last number (``numeric``); the whole answer for
    ``exact`` and ``f1``, which compare all of it. None when nothing is shown: no reference occurs as written (an
    answer labeled right may still match after accents or articles are folded away), or no number.

    Examples
    --------
    >>> matched_span("The capital is Paris.", "paris || lyon", "contains")
    (15, 20)
    >>> matched_span("Bahamiskat, which is a mix of English", "English", "claim") is None
    True
    >>> matched_span("2 + 3 = 5.", "5", "numeric")
    (8, 9)
    """
    if matcher in ("exact", "f1"):
        return (0, len(answer)) if answer else None
    if matcher == "numeric":
        return last_number_span(answer)
    forms = [str(r) for r in reference_pieces(reference)]
    if matcher == "claim":
        start, end = claim_region(answer)
        region = answer[start:end]
        found = find_span(region, forms, skip=hedged_spans(region))
        return None if found is None else (start + found[0], start + found[1])
    return find_span(answer, forms)


def flip_labels(dataset: LabeledDataset, rows: Iterable[int]) -> LabeledDataset:
    """``dataset`` with the labels of ``rows`` (positions 0..n_valid-1) flipped, and a :data:`FLIPPED_COLUMN` column
    saying which; the input is not changed. With no row to flip, the dataset itself.

    Raises
    ------
    ValueError
        The dataset has no labels, or a row is out of range.
    """
    picked = sorted(set(int(r) for r in rows))
    if not picked:
        return dataset
    if "label" not in dataset.frame.columns:
        raise ValueError("this dataset has no labels to flip (label_source is 'none')")
    if picked[0] < 0 or picked[-1] >= dataset.n_valid:
        raise ValueError(f"row {picked[0] if picked[0] < 0 else picked[-1]} is out of range: the dataset has "
                         f"{dataset.n_valid:,} valid rows (0 to {dataset.n_valid - 1:,})")
    frame = dataset.frame.copy()
    flipped = np.zeros(len(frame), dtype=bool)
    flipped[picked] = True
    frame["label"] = np.where(flipped, 1 - frame["label"].to_numpy(), frame["label"].to_numpy()).astype(np.int64)
    frame[FLIPPED_COLUMN] = flipped
    note = f"{counted(len(picked), 'label')} corrected by hand"
    return dataclasses.replace(dataset, frame=frame, notes=[*dataset.notes, note])
