"""The protocol's calibration/evaluation splits: drawn from a seed (:func:`iter_splits`, whole groups with
:func:`split_group_codes`), kept as packed bits (:class:`Splits`) and taken one at a time as a :class:`Part`; and the
stratified folds of out-of-fold values."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from trace_core.evaluation.run import EvaluationConfig

__all__ = ["OUT_OF_FOLD", "Part", "Splits", "both_classes", "draw_splits", "iter_splits", "split_group_codes",
           "stratified_folds"]

#: Folds of out-of-fold values: a fitted baseline's on the calibration part
#: (:func:`trace_core.evaluation.protocol.out_of_fold`), a calibrator's on the answers it was fitted on
#: (:func:`trace_core.flagging.flag.out_of_fold_probabilities`).
OUT_OF_FOLD = 5


def draw_splits(y: np.ndarray, config: EvaluationConfig) -> list[tuple[np.ndarray, np.ndarray]]:
    """The protocol's ``config.n_splits`` (calibration rows, evaluation rows) pairs, each ascending, from
    ``config.seed``; stratified splits keep ``round(fraction * n_class)`` of each class in the calibration part."""
    return list(iter_splits(y, config))


def split_group_codes(groups: Any, n: int) -> np.ndarray:
    """Each answer's group (e.g. its prompt) as a code 0 .. n_groups - 1, in order of first appearance, for
    :func:`iter_splits`; ValueError naming the first answer whose group is missing (None, NaN), or for a length
    other than ``n``, or fewer than 2 groups."""
    import pandas as pd

    values = pd.Series(list(groups) if not isinstance(groups, (np.ndarray, pd.Series)) else groups)
    if len(values) != n:
        raise ValueError(f"`split_groups` has {len(values):,} values for {n:,} answers")
    missing = np.flatnonzero(values.isna().to_numpy())
    if missing.size:
        raise ValueError(f"answer {int(missing[0])} has no split group (missing value)")
    codes, uniques = pd.factorize(values, sort=False)
    if len(uniques) < 2:
        raise ValueError(f"`split_groups` holds {len(uniques)} group; splits that keep groups whole need at least 2")
    return np.asarray(codes, dtype=np.int64)


def iter_splits(y: np.ndarray, config: EvaluationConfig,
                groups: np.ndarray | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """:func:`draw_splits` one split at a time (the same pairs, from the same draws): the split loop holds one
    split's rows, not every split's (16 bytes per answer and split).

    ``groups`` (codes from :func:`split_group_codes`): each split puts ``round(fraction * n_groups)`` whole groups in
    the calibration part (at least one, and at least one left), so that no group (e.g. no prompt) is both calibrated
    on and evaluated. Not with stratified splits."""
    rng = np.random.default_rng(config.seed)
    n = y.shape[0]
    if groups is not None:
        yield from _group_splits(rng, groups, config)
        return
    for _ in range(config.n_splits):
        if config.stratified:
            cal_parts = []
            for cls in (0, 1):
                idx = np.flatnonzero(y == cls)
                k = int(round(config.calibration_fraction * idx.shape[0]))
                cal_parts.append(rng.permutation(idx)[:k])
            cal = np.sort(np.concatenate(cal_parts))
        else:
            k = int(round(config.calibration_fraction * n))
            cal = np.sort(rng.permutation(n)[:k])
        mask = np.zeros(n, dtype=bool)
        mask[cal] = True
        yield cal, np.flatnonzero(~mask)


def _group_splits(rng: np.random.Generator, groups: np.ndarray,
                  config: EvaluationConfig) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    if config.stratified:
        raise ValueError("splits that keep groups whole cannot also be stratified; use one or the other")
    n_groups = int(groups.max()) + 1
    k = min(max(int(round(config.calibration_fraction * n_groups)), 1), n_groups - 1)
    for _ in range(config.n_splits):
        chosen = np.zeros(n_groups, dtype=bool)
        chosen[rng.permutation(n_groups)[:k]] = True
        in_cal = chosen[groups]
        yield np.flatnonzero(in_cal), np.flatnonzero(~in_cal)


def both_classes(y: np.ndarray) -> bool:
    """0/1 labels hold both classes."""
    positives = int(np.count_nonzero(y))
    return 0 < positives < y.shape[0]


def stratified_folds(y: np.ndarray, folds: int = OUT_OF_FOLD) -> np.ndarray:
    """Each answer's fold, 0 to ``folds - 1``: each class dealt round the folds in row order, so every fold holds
    its share of both.

    >>> stratified_folds(np.array([1, 0, 1, 1, 0]), 2).tolist()
    [0, 0, 1, 0, 1]
    """
    fold = np.empty(y.shape[0], dtype=np.int64)
    for cls in (0, 1):
        at = np.flatnonzero(y == cls)
        fold[at] = np.arange(at.shape[0]) % folds
    return fold


class Part:
    """One split of one method's run: which rows calibrate, and (computed when first asked) the calibration and
    evaluation rows (ascending) and their labels. A scalar score's split needs only ``in_cal``
    (:meth:`trace_core.evaluation.protocol.Ascending.parts`); the rows are gathered for the methods with their own model
    and for the held-out values."""

    def __init__(self, split: int, in_cal: np.ndarray, y: np.ndarray, *, first: bool) -> None:
        self.split, self.in_cal, self.y, self.first = split, in_cal, y, first
        self.n_cal = int(np.count_nonzero(in_cal))

    @functools.cached_property
    def cal(self) -> np.ndarray:
        return np.flatnonzero(self.in_cal)

    @functools.cached_property
    def ev(self) -> np.ndarray:
        return np.flatnonzero(~self.in_cal)

    @functools.cached_property
    def y_cal(self) -> np.ndarray:
        return self.y[self.cal]

    @functools.cached_property
    def y_ev(self) -> np.ndarray:
        return self.y[self.ev]

    def ev_positions(self) -> np.ndarray:
        """Each evaluation row's position in ``ev`` (at its row; ``ev`` ascends, so it counts the evaluation rows
        before it): the held-out values go back to row order by one gather instead of a binary search per row."""
        return np.cumsum(~self.in_cal) - 1


@dataclass(frozen=True)
class Splits:
    """The protocol's splits, drawn once (:func:`iter_splits`) and kept as each usable split's calibration rows in
    packed bits (an eighth of a byte per answer and split), from which every method's run takes its :class:`Part`;
    ``skipped``: the splits with one class only in a part."""

    n: int
    used: tuple[tuple[int, np.ndarray], ...]
    skipped: int

    @classmethod
    def draw(cls, y: np.ndarray, config: EvaluationConfig, groups: np.ndarray | None = None) -> Splits:
        used, skipped = [], 0
        for split, (cal, ev) in enumerate(iter_splits(y, config, groups)):
            if not (both_classes(y[cal]) and both_classes(y[ev])):
                skipped += 1
                continue
            in_cal = np.zeros(y.shape[0], dtype=bool)
            in_cal[cal] = True
            used.append((split, np.packbits(in_cal)))
        return cls(n=y.shape[0], used=tuple(used), skipped=skipped)

    def parts(self, y: np.ndarray) -> Iterator[Part]:
        """Each usable split's part, in order; the first one's held-out values are kept."""
        for k, (split, packed) in enumerate(self.used):
            yield Part(split, np.unpackbits(packed, count=self.n).view(bool), y, first=k == 0)
