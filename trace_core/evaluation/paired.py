"""Paired comparison of TRACE+ and TRACE with the baselines, split by split, without optimistic selection.

On every split of the protocol, for every metric, each TRACE method is compared with

``"best baseline"``
    the baseline that is best *on that split's calibration part* (by that metric computed on the calibration part;
    for Brier, on the calibrated probabilities of the calibration part), then measured on the evaluation part. ECE is
    chosen by the calibration part's Brier (:data:`CHOSEN_BY`): an isotonic calibrator's ECE on its own calibration
    part is 0 for every score, so it cannot tell baselines apart. The best baseline is never chosen by looking at the
    evaluation part, so the comparison is not optimistic.
    Uninformative (constant) scores and the supervised reference are never chosen.
each baseline and the supervised likelihood reference
    by name.

The difference is ``method - versus`` in the metric's own units (so for Brier, ECE and AURC a negative difference
is an improvement); a *win* is a split where the method is better in the metric's direction by more than
:data:`TIE_TOLERANCE`, a *tie* one within it. Results are the mean ± standard deviation of the difference and the
wins, ties and losses out of the N splits.

Brier and ECE are compared under each scalar calibrator (``calibrator`` "platt" or "isotonic": the calibrator of
TRACE and of the baselines; TRACE+ and the reference always use their own logistic regression); ranking metrics have
``calibrator`` "none".

:mod:`trace_core.evaluation.verdict` reads these differences as one word per opponent and metric.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from trace_core.methods.registry import METHODS, METRICS

__all__ = ["BEST_BASELINE", "CHOSEN_BY", "FITTED", "RAW", "TIE_TOLERANCE", "PairedComparison", "average_paired",
           "chosen_by", "chosen_text", "count_text", "paired_comparison", "signif", "split_outcomes"]

BEST_BASELINE = "best baseline"
TIE_TOLERANCE = 1e-12
RAW = "none"  # the calibrator column of metrics on raw scores
FITTED = "logistic"  # the calibrator column of TRACE+ and the reference: their own logistic regression
_SUMMARY_COLUMNS = ["method", "versus", "metric", "calibrator", "mean", "std", "wins", "ties", "losses", "n_splits",
                    "chosen", "chosen_counts"]
_PER_SPLIT_COLUMNS = ["split", "method", "versus", "metric", "calibrator", "chosen", "difference"]


def count_text(wins: int, n: int) -> str:
    return f"{wins} of {n} split{'s' if n != 1 else ''}"


@dataclass
class PairedComparison:
    """Paired differences between the TRACE methods and the baselines (see the module docstring).

    Attributes
    ----------
    summary : DataFrame
        One row per (method, versus, metric, calibrator): ``mean`` and ``std`` (ddof 1) of ``method - versus`` over
        the splits, ``wins``, ``ties``, ``losses``, ``n_splits``; for ``versus == "best baseline"``, ``chosen``
        names every baseline the calibration parts chose with its count, most often first (``"SeqLogP in 14 of 20
        splits, MinProb in 6"``; for an average over groups the counts are over every group's splits, ``"... of 40
        group splits"``) and ``chosen_counts`` is the same as a dict (name -> count); else ``""`` and ``{}``.
    per_split : DataFrame
        split, method, versus, metric, calibrator, chosen (the baseline compared on that split), difference.
    chosen_unit : str
        What ``chosen`` counts: ``"splits"``, or ``"group splits"`` for an average over groups.
    """

    summary: pd.DataFrame
    per_split: pd.DataFrame
    chosen_unit: str = "splits"

    def get(self, method: str, versus: str, metric: str, calibrator: str = "platt") -> pd.Series | None:
        """The summary row of one comparison, or None when it was not computed. ``calibrator`` is ignored for
        ranking metrics (their rows say "none")."""
        cal = RAW if METRICS[metric].on == "score" else calibrator
        rows = self.summary[(self.summary["method"] == method) & (self.summary["versus"] == versus)
                            & (self.summary["metric"] == metric) & (self.summary["calibrator"] == cal)]
        return None if rows.empty else rows.iloc[0]

    def table(self, *, calibrator: str = "platt", versus: Sequence[str] = (BEST_BASELINE,),
              methods: Sequence[str] | None = None, digits: int = 3) -> pd.DataFrame:
        """Wide text table: one row per (method, versus), one ``"+0.012 ± 0.004 (18/20)"`` column per metric (the
        mean ± std of ``method - versus`` and its wins out of the splits; a nonzero number that would round to zero
        at ``digits`` decimals shows two significant digits instead, ``"+0.00042"``). ``methods``: only these
        subjects."""
        frame = self.summary[self.summary["versus"].isin(list(versus))
                             & self.summary["calibrator"].isin([calibrator, RAW])]
        if methods is not None:
            frame = frame[frame["method"].isin(list(methods))]
        metrics = list(dict.fromkeys(frame["metric"]))
        rows = []
        for (method, other), group in frame.groupby(["method", "versus"], sort=False):
            cells = {r.metric: f"{_fixed(r.mean, digits, '+')} ± {_fixed(r.std, digits)} ({r.wins}/{r.n_splits})"
                     for r in group.itertuples()}
            rows.append({"method": method, "versus": other, **{m: cells.get(m, "") for m in metrics}})
        return pd.DataFrame(rows, columns=["method", "versus", *metrics])

    def to_markdown(self, *, calibrator: str = "platt", versus: Sequence[str] = (BEST_BASELINE,),
                    methods: Sequence[str] | None = None, digits: int = 3) -> str:
        """:meth:`table` as Markdown; headers say each metric's direction."""
        table = self.table(calibrator=calibrator, versus=versus, methods=methods, digits=digits)
        metrics = [c for c in table.columns if c in METRICS]
        lines = ["| method | minus | " + " | ".join(METRICS[m].title for m in metrics) + " |",
                 "|" + "---|" * (len(metrics) + 2)]
        for row in table.itertuples(index=False):
            values = row._asdict()
            lines.append(f"| {row.method} | {row.versus} | " + " | ".join(values[m] for m in metrics) + " |")
        return "\n".join(lines)

    def chosen_note(self, *, calibrator: str = "platt") -> str:
        """Which baselines the calibration parts chose, per metric, with counts: ``"AUROC: SeqLogP in 14 of 20
        splits, MinProb in 6; …"`` (for an average over groups: counts over every group's splits)."""
        frame = self.summary[(self.summary["versus"] == BEST_BASELINE)
                             & self.summary["calibrator"].isin([calibrator, RAW])]
        seen = frame.drop_duplicates("metric")
        def label(metric: str) -> str:
            by = chosen_by(metric, list(seen["metric"]))
            return METRICS[metric].label + (f" (chosen by {METRICS[by].label})" if by != metric else "")

        return "; ".join(f"{label(r.metric)}: {r.chosen}" for r in seen.itertuples() if r.chosen)


def _fixed(x: float, digits: int, sign: str = "") -> str:
    """``x`` with ``digits`` decimals, or two significant digits where that would print a nonzero ``x`` as zero."""
    text = f"{x:{sign}.{digits}f}"
    if x != 0 and math.isfinite(x) and float(text) == 0:
        text = f"{x:{sign}#.2g}"
    return text


def signif(x: float, sign: str = "+") -> str:
    """Three significant digits (scientific below 1e-4), so that a small nonzero difference never reads as zero:
    ``+0.0123``, ``-0.00150``, ``+4.00e-05``; ``0`` exactly zero."""
    if not math.isfinite(x):
        return "n/a"
    if x == 0:
        return "0"
    return f"{x:{sign}#.3g}"


def _chosen_counts(names: Sequence[str]) -> dict[str, int]:
    """Name -> how often, most often first (ties in order of first appearance)."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))  # sorted is stable: first appearance breaks ties


def chosen_text(counts: dict[str, int], unit: str = "splits", limit: int | None = None) -> str:
    """``"SeqLogP in 14 of 20 splits, MinProb in 6"``; with ``limit``, the first ``limit`` then ``"others in 3"``."""
    if not counts:
        return ""
    total = sum(counts.values())
    unit = unit.removesuffix("s") if total == 1 else unit
    items = list(counts.items())
    shown, rest = (items, []) if limit is None or len(items) <= limit + 1 else (items[:limit], items[limit:])
    parts = [f"{name} in {n} of {total} {unit}" if i == 0 else f"{name} in {n}" for i, (name, n) in enumerate(shown)]
    if rest:
        parts.append(f"others in {sum(n for _, n in rest)}")
    return ", ".join(parts)


def _empty() -> PairedComparison:
    return PairedComparison(pd.DataFrame(columns=_SUMMARY_COLUMNS), pd.DataFrame(columns=_PER_SPLIT_COLUMNS))


class _Values:
    """A long frame (split, method, metric, calibrator, value) indexed once, so that each metric's split x method
    table is a few dictionary lookups instead of a filter and a pivot of the whole frame (the paired comparison asks
    for one per metric and calibrator). Built with plain dictionaries and numpy: this runs on every evaluation, and
    a pandas group and Series per key cost more than the rest of the comparison at 10,000 answers."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.series: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]] = {}
        if frame.empty:
            return
        rows: dict[tuple[str, str, str], list[int]] = {}
        for i, key in enumerate(zip(frame["metric"].tolist(), frame["calibrator"].tolist(),
                                    frame["method"].tolist(), strict=True)):
            rows.setdefault(key, []).append(i)
        splits = frame["split"].to_numpy()
        values = frame["value"].to_numpy(dtype=np.float64)
        for key, index in rows.items():
            at = np.asarray(index)
            split, first = np.unique(splits[at], return_index=True)  # a split's first value, splits ascending
            self.series[key] = (split, values[at[first]])

    def wide(self, metric: str, calibrator: str, methods: Sequence[str]) -> _Wide:
        """split x method values of one metric: scalar methods under ``calibrator``, fitted ones under "logistic";
        the splits any of them has, in ascending order, NaN where a method lacks one (where a method has values
        under several of these calibrators, a split takes the first that is not NaN, as a groupby "first" did)."""
        found = {}
        for method in methods:
            parts = [self.series[k] for c in (calibrator, FITTED, RAW) if (k := (metric, c, method)) in self.series]
            if parts:
                found[method] = parts
        if not found:
            return _Wide(np.empty(0, dtype=np.int64), {})
        splits = np.unique(np.concatenate([split for parts in found.values() for split, _ in parts]))
        columns = {}
        for method, parts in found.items():
            column = np.full(splits.shape[0], np.nan)
            filled = np.zeros(splits.shape[0], dtype=bool)
            for split, value in parts:
                at = np.searchsorted(splits, split)
                take = ~filled[at] & (~np.isnan(value) | (len(parts) == 1))
                column[at[take]] = value[take]
                filled[at[take]] = True
            columns[method] = column
        return _Wide(splits, columns)


@dataclass(frozen=True)
class _Wide:
    """One metric's values: ``splits`` ascending and a column of values per method aligned with them."""

    splits: np.ndarray
    columns: dict[str, np.ndarray]


def split_outcomes(diff: np.ndarray, higher_is_better: bool) -> tuple[int, int, int]:
    """(wins, ties, losses) of per-split differences ``method - versus``: a win is better in the metric's direction
    by more than :data:`TIE_TOLERANCE`, a tie within it."""
    signed = diff if higher_is_better else -diff
    ties = int(np.sum(np.abs(diff) <= TIE_TOLERANCE))
    wins = int(np.sum(signed > TIE_TOLERANCE))
    return wins, ties, int(diff.shape[0]) - wins - ties


def _summarise(per_split: pd.DataFrame, chosen_counts: dict[tuple, dict[str, int]] | None = None,
               unit: str = "splits") -> pd.DataFrame:
    """The summary rows of :class:`PairedComparison`. ``chosen_counts``: (method, versus, metric, calibrator) ->
    counts of the chosen baselines, instead of counting ``per_split["chosen"]`` (an average over groups counts every
    group's choices); ``unit`` names what was counted."""
    rows = []
    groups: dict[tuple[str, str, str, str], list[int]] = {}  # in order of first appearance, as groupby(sort=False)
    keys = zip(*(per_split[k].tolist() for k in ("method", "versus", "metric", "calibrator")), strict=True)
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    difference = per_split["difference"].to_numpy(dtype=np.float64)
    for key, index in groups.items():
        at = np.asarray(index)
        finite = np.isfinite(difference[at])
        diff = difference[at][finite]
        n = int(diff.shape[0])
        wins, ties, losses = split_outcomes(diff, METRICS[key[2]].higher_is_better)
        counts: dict[str, int] = {}
        if key[1] == BEST_BASELINE and n:
            if chosen_counts is not None:
                counts = dict(chosen_counts.get(key, {}))
            else:
                counts = _chosen_counts(per_split["chosen"].iloc[at[finite]].tolist())  # the splits compared
        rows.append((*key, float(diff.mean()) if n else float("nan"),
                     float(np.std(diff, ddof=1)) if n > 1 else 0.0, wins, ties, losses, n,
                     chosen_text(counts, unit), counts))
    return pd.DataFrame(rows, columns=_SUMMARY_COLUMNS)


#: Metrics whose best baseline is chosen by another metric on the calibration part (see the module docstring).
CHOSEN_BY = {"ece": "brier"}


def chosen_by(metric: str, metrics: Sequence[str] = ()) -> str:
    """The metric that chooses ``metric``'s best baseline on the calibration part: :data:`CHOSEN_BY`'s when the
    evaluation computes it (``metrics``; empty means it does), else ``metric`` itself."""
    by = CHOSEN_BY.get(metric, metric)
    return by if not metrics or by in metrics else metric


def paired_comparison(per_split: pd.DataFrame, calibration_values: pd.DataFrame, *, methods: Sequence[str],
                      metrics: Sequence[str], uninformative: Sequence[str] = ()) -> PairedComparison:
    """Paired differences of every TRACE method against the best baseline and against each other method.

    Parameters
    ----------
    per_split : DataFrame
        Evaluation-part values: columns split, method, metric, calibrator, value (as
        :attr:`trace_core.evaluation.run.EvaluationResult.per_split`).
    calibration_values : DataFrame
        The same columns, the baselines' values on each split's *calibration* part; they choose the best baseline.
    methods : sequence of str
        Methods that ran, in display order (ties in the choice go to the earlier one).
    metrics : sequence of str
        Keys of :data:`trace_core.methods.registry.METRICS`.
    uninformative : sequence of str
        Methods never chosen as the best baseline (constant scores).

    Examples
    --------
    >>> ev = pd.DataFrame({"split": [0, 0, 0], "method": ["TRACE+", "SeqLogP", "MinProb"],
    ...                    "metric": "auroc", "calibrator": "none", "value": [0.80, 0.70, 0.75]})
    >>> cal = ev[ev.method != "TRACE+"].assign(value=[0.72, 0.71])  # SeqLogP is best on calibration
    >>> p = paired_comparison(ev, cal, methods=["TRACE+", "SeqLogP", "MinProb"], metrics=["auroc"])
    >>> round(float(p.get("TRACE+", "best baseline", "auroc")["mean"]), 3)
    0.1
    """
    methods = list(methods)
    subjects = [m for m in methods if METHODS[m].is_trace]
    others = [m for m in methods if METHODS[m].is_baseline or METHODS[m].kind == "reference"]
    candidates = [m for m in methods if METHODS[m].is_baseline and m not in set(uninformative)]
    if not subjects or per_split.empty:
        return _empty()
    calibrators = [c for c in dict.fromkeys(per_split["calibrator"]) if c not in (RAW, FITTED)] or ["platt"]
    evaluated, calibrated = _Values(per_split), _Values(calibration_values)
    blocks = _Blocks()
    for metric in metrics:
        spec = METRICS[metric]
        by = chosen_by(metric, metrics)
        for calibrator in ([RAW] if spec.on == "score" else calibrators):
            ev = evaluated.wide(metric, calibrator, methods)
            chosen = _best_on_calibration(calibrated.wide(by, calibrator, candidates), METRICS[by].higher_is_better)
            splits, values = ev.splits, ev.columns
            picks = [chosen.get(s) for s in splits]
            has_pick = np.array([p is not None and p in values for p in picks], dtype=bool)
            for subject in (s for s in subjects if s in values):
                if has_pick.any():
                    best = np.array([values[p][i] if ok and p is not None else np.nan
                                     for i, (p, ok) in enumerate(zip(picks, has_pick, strict=True))])
                    blocks.add(splits[has_pick], subject, BEST_BASELINE, metric, calibrator,
                               np.asarray(picks, dtype=object)[has_pick], (values[subject] - best)[has_pick])
                for other in (o for o in others if o in values):
                    blocks.add(splits, subject, other, metric, calibrator, other, values[subject] - values[other])
    frame = blocks.frame()
    return PairedComparison(_summarise(frame), frame)


class _Blocks:
    """The per-split rows of the paired comparison, gathered as columns and made into one frame at the end."""

    def __init__(self) -> None:
        self.columns: dict[str, list] = {c: [] for c in _PER_SPLIT_COLUMNS}

    def add(self, splits: np.ndarray, method: str, versus: str, metric: str, calibrator: str, chosen: Any,
            difference: np.ndarray) -> None:
        n = len(splits)
        for column, value in (("split", splits), ("method", [method] * n), ("versus", [versus] * n),
                              ("metric", [metric] * n), ("calibrator", [calibrator] * n),
                              ("chosen", list(chosen) if isinstance(chosen, np.ndarray) else [chosen] * n),
                              ("difference", difference)):
            self.columns[column].append(value)

    def frame(self) -> pd.DataFrame:
        if not self.columns["split"]:
            return pd.DataFrame(columns=_PER_SPLIT_COLUMNS)
        return pd.DataFrame({c: np.concatenate(v) if c in ("split", "difference") else list(itertools.chain(*v))
                             for c, v in self.columns.items()})


def _best_on_calibration(cal: _Wide, higher_is_better: bool) -> dict[int, str]:
    """Split -> the baseline with the best calibration-part value (NaN never wins). Values within
    :data:`TIE_TOLERANCE` of the best are ties and the first column among them wins, so rounding never picks: an
    isotonic calibrator's ECE on its own calibration part is 0 up to rounding for every baseline."""
    if cal.splits.shape[0] == 0 or not cal.columns:
        return {}
    names = list(cal.columns)
    values = np.column_stack([cal.columns[m] for m in names])
    signed = np.where(np.isfinite(values), values if higher_is_better else -values, -np.inf)
    top = signed.max(axis=1, keepdims=True)
    best = np.argmax(signed >= top - TIE_TOLERANCE, axis=1)  # first of the tied best
    ok = np.isfinite(signed[np.arange(len(best)), best])
    return {split: names[b] for split, b, good in zip(cal.splits.tolist(), best, ok, strict=True) if good}


def average_paired(paired: Sequence[PairedComparison], splits: Sequence[int]) -> PairedComparison:
    """The paired comparison of an average over datasets: per split, the mean of the datasets' differences (each
    dataset choosing its own best baseline on its calibration part), over the ``splits`` every dataset has.

    The per-split ``chosen`` of the best baseline is ``"per dataset"``; the summary's ``chosen`` and
    ``chosen_counts`` count every dataset's choice on every kept split (``"SeqLogP in 30 of 40 group splits, ..."``).
    """
    frames = [p.per_split[p.per_split["split"].isin(list(splits))] for p in paired]
    if not frames or all(f.empty for f in frames):
        return _empty()
    keys = ["split", "method", "versus", "metric", "calibrator"]
    every = pd.concat(frames)
    grouped = every.groupby(keys, sort=False)["difference"].agg(["mean", "count"]).reset_index()
    grouped = grouped[grouped["count"] == len(frames)].drop(columns="count").rename(columns={"mean": "difference"})
    kept = every[every["versus"] == BEST_BASELINE].merge(grouped[keys], on=keys)
    counts = {key: _chosen_counts(group["chosen"].tolist())
              for key, group in kept.groupby(keys[1:], sort=False)}
    grouped.insert(5, "chosen", np.where(grouped["versus"] == BEST_BASELINE, "per dataset", grouped["versus"]))
    return PairedComparison(_summarise(grouped, counts, unit="group splits"), grouped[_PER_SPLIT_COLUMNS],
                            chosen_unit="group splits")
