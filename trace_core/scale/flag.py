"""The per-shard work of ``trace-core flag`` over shards: every usable row of a shard scored with the calibrator
(:func:`trace_core.flagging.flag.score_rows`) and written with a ``flagged`` column, so that an output shard holds each
of its input's rows once (flagged or not) and any other threshold can be applied later without scoring again.

A threshold (given, or certified on labeled answers) is applied shard by shard. A coverage or a target risk is a
rule about all the answers at once: :func:`flag_decisions` reads every shard first (its probabilities only) and
decides which answers are flagged exactly as :func:`trace_core.flagging.flag.select_flagged` would on one file holding
every shard's rows in order; the shards are then written with those decisions.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from trace_core.checks import AnswerValueError
from trace_core.data import DatasetWarning, RowError, read_dataset
from trace_core.flagging.flag import FLAG_BY, output_collisions, previous_export, score_rows, select_flagged, unscored
from trace_core.policy import usable_rows
from trace_core.scale.shards import Shard
from trace_core.scale.stream import ShardOutput
from trace_core.traces.table import gather

__all__ = ["FLAGGED_COLUMN", "ShardFlagger", "flag_decisions"]

#: The column that says whether a row is flagged.
FLAGGED_COLUMN = "flagged"


class ShardFlagger:
    """Score one shard's rows with a calibrator and mark the flagged ones:
    ``ShardFlagger(calibrator, threshold=...)(shard) -> ShardOutput``.

    Parameters
    ----------
    calibrator
        As :func:`trace_core.flagging.flag.score_rows` takes it.
    threshold : float, optional
        Flag rows whose probability (``by``) is below it.
    decisions : mapping of str to ndarray of bool, optional
        Instead of ``threshold``: each shard's flags (by shard name, one per usable row in order), from
        :func:`flag_decisions`.
    by : {"answer", "span"}
        The answer's probability of being correct, or its riskiest span's.
    matcher, tolerance
        How answers are labeled against a ``reference`` column.

    Rows without a trace, or with an empty answer, cannot be scored: they are rejected with their row number and
    the shard's other rows are written.
    """

    def __init__(self, calibrator: Any, *, threshold: float | None = None,
                 decisions: Mapping[str, np.ndarray] | None = None, by: str = "answer", matcher: str = "exact",
                 tolerance: float = 1e-6) -> None:
        if (threshold is None) == (decisions is None):
            raise ValueError("give exactly one of `threshold` or `decisions`")
        self.calibrator, self.threshold, self.decisions = calibrator, threshold, decisions
        self.by, self.matcher, self.tolerance = by, matcher, tolerance

    def scored(self, shard: Shard) -> tuple[pd.DataFrame, Any, int, list[Any]]:
        """The shard's usable rows scored (:func:`~trace_core.flagging.flag.score_rows`), their traces, the rows read
        and the errors of the rows left out."""
        return score_shard(shard, self.calibrator, matcher=self.matcher, tolerance=self.tolerance)

    def __call__(self, shard: Shard) -> ShardOutput:
        scored, traces, n_read, errors = self.scored(shard)
        if self.decisions is not None:
            flagged = np.asarray(self.decisions[shard.name], dtype=bool)
        else:
            assert self.threshold is not None  # one of the two, checked on construction
            p = scored[FLAG_BY[self.by]].to_numpy(dtype=np.float64)
            flagged = np.where(np.isnan(p), 1.0, p) < self.threshold  # an answer without a span has no weak span
        scored[FLAGGED_COLUMN] = flagged
        return ShardOutput(frame=scored, traces=traces, n_read=n_read, errors=errors)


def score_shard(shard: Shard, calibrator: Any, *, matcher: str = "exact",
                tolerance: float = 1e-6) -> tuple[pd.DataFrame, Any, int, list[Any]]:
    """A shard's usable rows scored by :func:`trace_core.flagging.flag.score_rows`, their traces, the rows read, and a
    :class:`~trace_core.data.RowError` for each row rejected by the reader or left out (no trace, empty answer).
    A shard that is itself a flagged output is scored again (its earlier scores and flags replaced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DatasetWarning)  # the rejected rows are in dataset.errors
        dataset = read_dataset(shard.path, format=shard.format, matcher=matcher, tolerance=tolerance,
                               require_label=False)
    frame = dataset.frame
    if previous_export([*frame.columns, FLAGGED_COLUMN]):
        frame = unscored(frame).drop(columns=[FLAGGED_COLUMN], errors="ignore")
    taken = output_collisions([*frame.columns]) + ([FLAGGED_COLUMN] if FLAGGED_COLUMN in frame.columns else [])
    if taken:
        raise ValueError(f"{shard.name}: has column(s) {', '.join(str(c)[:80] for c in taken)} named like the "
                         "output of flag; rename them and run again")
    rows = frame[dataset.row_column].tolist()
    usable = usable_rows(dataset.traces, row_numbers=rows)
    errors = list(dataset.errors)
    errors += [RowError(rows[i], "", "has no trace; record it first (trace-core score)") for i in usable.missing]
    errors += [RowError(rows[i], "", "empty answer (no tokens): cannot be scored") for i in usable.empty]
    keep = usable.keep
    traces = gather(dataset.traces, keep)
    try:
        scored = score_rows(frame.iloc[keep].reset_index(drop=True), traces, calibrator)
    except AnswerValueError as exc:  # named by the shard's row, not by the answer's position among those kept
        raise ValueError(f"{shard.name}: row {rows[int(keep[exc.index])]}: {exc.reason}") from None
    return scored, traces, dataset.n_read, sorted(errors, key=lambda e: e.row)


def flag_decisions(shards: Sequence[Shard], flagger: Callable[[Shard], tuple[pd.DataFrame, Any, int, list[Any]]],
                   *, coverage: float | None = None, target_risk: float | None = None,
                   by: str = "answer") -> dict[str, np.ndarray]:
    """Which usable rows of every shard a ``coverage`` or ``target_risk`` flags (by shard name, in row order): the
    rule of :func:`trace_core.flagging.flag.select_flagged` on all the shards' rows at once, in shard order. Reads every
    shard (``flagger``: :meth:`ShardFlagger.scored` or :func:`score_shard`) and keeps only each row's probability
    and label (``target_risk`` needs labels in every shard)."""
    probabilities, labels, sizes = [], [], []
    for shard in shards:
        scored, _, _, _ = flagger(shard)
        probabilities.append(scored[FLAG_BY[by]].to_numpy(dtype=np.float64))
        if target_risk is not None:
            if "label" not in scored.columns:
                raise ValueError(f"{shard.name}: has no labels (a `label` or `reference` column); --target-risk "
                                 "measures the risk on labeled answers")
            labels.append(scored["label"].to_numpy())
        sizes.append(len(scored))
    column = FLAG_BY[by]
    whole = pd.DataFrame({column: np.concatenate(probabilities) if probabilities else np.zeros(0)})
    chosen = select_flagged(whole, coverage=coverage, target_risk=target_risk, by=by,
                            labels=np.concatenate(labels) if labels else None)
    flagged = np.zeros(len(whole), dtype=bool)
    flagged[chosen.index.to_numpy()] = True
    bounds = np.cumsum([0, *sizes])
    return {shard.name: flagged[a:b] for shard, a, b in zip(shards, bounds[:-1], bounds[1:], strict=True)}
