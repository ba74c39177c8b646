"""Paired comparison of TRACE+ and TRACE with the baselines, split by split, without optimistic selection.

On every split of the protocol, for every metric, each TRACE method is compared with

``"best baseline"``
    the baseline that is best *on that split's calibration part* (by that metric computed on the calibration part;
    for Brier and ECE, on the calibrated probabilities of the calibration part), then measured on the evaluation
    part. The best baseline is never chosen by looking at the evaluation part, so the comparison is not optimistic.
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
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .registry import METHODS, METRICS, REFERENCE

__all__ = ["BEST_BASELINE", "TIE_TOLERANCE", "PairedComparison", "average_paired", "paired_comparison",
           "reference_sentence"]

BEST_BASELINE = "best baseline"
TIE_TOLERANCE = 1e-12
RAW = "none"  # the calibrator column of metrics on raw scores
FITTED = "logistic"  # the calibrator column of TRACE+ and the reference: their own logistic regression
_SUMMARY_COLUMNS = ["method", "versus", "metric", "calibrator", "mean", "std", "wins", "ties", "losses", "n_splits",
                    "chosen"]
_PER_SPLIT_COLUMNS = ["split", "method", "versus", "metric", "calibrator", "chosen", "difference"]


def _count(wins: int, n: int) -> str:
    return f"{wins} of {n} split{'s' if n != 1 else ''}"


@dataclass
class PairedComparison:
    """Paired differences between the TRACE methods and the baselines (see the module docstring).

    Attributes
    ----------
    summary : DataFrame
        One row per (method, versus, metric, calibrator): ``mean`` and ``std`` (ddof 1) of ``method - versus`` over
        the splits, ``wins``, ``ties``, ``losses``, ``n_splits``, and ``chosen`` (for ``versus == "best baseline"``:
        the baseline chosen most often and on how many splits, e.g. ``"SeqLogP (14 of 20)"``; else ``""``).
    per_split : DataFrame
        split, method, versus, metric, calibrator, chosen (the baseline compared on that split), difference.
    """

    summary: pd.DataFrame
    per_split: pd.DataFrame

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
        mean ± std of ``method - versus`` and its wins out of the splits). ``methods``: only these subjects."""
        frame = self.summary[self.summary["versus"].isin(list(versus))
                             & self.summary["calibrator"].isin([calibrator, RAW])]
        if methods is not None:
            frame = frame[frame["method"].isin(list(methods))]
        metrics = list(dict.fromkeys(frame["metric"]))
        rows = []
        for (method, other), group in frame.groupby(["method", "versus"], sort=False):
            cells = {r.metric: f"{r.mean:+.{digits}f} ± {r.std:.{digits}f} ({r.wins}/{r.n_splits})"
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
        """Which baseline the calibration parts chose, per metric: ``"AUROC: SeqLogP (14 of 20); …"``."""
        frame = self.summary[(self.summary["versus"] == BEST_BASELINE)
                             & self.summary["calibrator"].isin([calibrator, RAW])]
        seen = frame.drop_duplicates("metric")
        return "; ".join(f"{METRICS[r.metric].label}: {r.chosen}" for r in seen.itertuples() if r.chosen)


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
                                    frame["method"].tolist())):
            rows.setdefault(key, []).append(i)
        splits = frame["split"].to_numpy()
        values = frame["value"].to_numpy(dtype=np.float64)
        for key, index in rows.items():
            at = np.asarray(index)
            split, first = np.unique(splits[at], return_index=True)  # a split's first value, splits ascending
            self.series[key] = (split, values[at[first]])

    def wide(self, metric: str, calibrator: str, methods: Sequence[str]) -> "_Wide":
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


def _outcomes(diff: np.ndarray, higher_is_better: bool) -> tuple[int, int, int]:
    signed = diff if higher_is_better else -diff
    ties = int(np.sum(np.abs(diff) <= TIE_TOLERANCE))
    wins = int(np.sum(signed > TIE_TOLERANCE))
    return wins, ties, int(diff.shape[0]) - wins - ties


def _summarise(per_split: pd.DataFrame) -> pd.DataFrame:
    rows = []
    groups: dict[tuple[str, str, str, str], list[int]] = {}  # in order of first appearance, as groupby(sort=False)
    keys = zip(*(per_split[k].tolist() for k in ("method", "versus", "metric", "calibrator")))
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    difference = per_split["difference"].to_numpy(dtype=np.float64)
    for key, index in groups.items():
        at = np.asarray(index)
        diff = difference[at]
        diff = diff[np.isfinite(diff)]
        n = int(diff.shape[0])
        wins, ties, losses = _outcomes(diff, METRICS[key[2]].higher_is_better)
        chosen = ""
        if key[1] == BEST_BASELINE and n:
            counts = per_split["chosen"].iloc[at].value_counts(sort=True)
            chosen = f"{counts.index[0]} ({int(counts.iloc[0])} of {int(counts.sum())})"
        rows.append((*key, float(diff.mean()) if n else float("nan"),
                     float(np.std(diff, ddof=1)) if n > 1 else 0.0, wins, ties, losses, n, chosen))
    return pd.DataFrame(rows, columns=_SUMMARY_COLUMNS)


def paired_comparison(per_split: pd.DataFrame, calibration_values: pd.DataFrame, *, methods: Sequence[str],
                      metrics: Sequence[str], uninformative: Sequence[str] = ()) -> PairedComparison:
    """Paired differences of every TRACE method against the best baseline and against each other method.

    Parameters
    ----------
    per_split : DataFrame
        Evaluation-part values: columns split, method, metric, calibrator, value (as
        :attr:`trace_core.evaluate.EvaluationResult.per_split`).
    calibration_values : DataFrame
        The same columns, the baselines' values on each split's *calibration* part; they choose the best baseline.
    methods : sequence of str
        Methods that ran, in display order (ties in the choice go to the earlier one).
    metrics : sequence of str
        Keys of :data:`trace_core.registry.METRICS`.
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
    others = [m for m in methods if METHODS[m].kind in ("baseline", "reference")]
    candidates = [m for m in methods if METHODS[m].kind == "baseline" and m not in set(uninformative)]
    if not subjects or per_split.empty:
        return _empty()
    calibrators = [c for c in dict.fromkeys(per_split["calibrator"]) if c not in (RAW, FITTED)] or ["platt"]
    evaluated, calibrated = _Values(per_split), _Values(calibration_values)
    blocks = _Blocks()
    for metric in metrics:
        spec = METRICS[metric]
        for calibrator in ([RAW] if spec.on == "score" else calibrators):
            ev = evaluated.wide(metric, calibrator, methods)
            chosen = _best_on_calibration(calibrated.wide(metric, calibrator, candidates), spec.higher_is_better)
            splits, values = ev.splits, ev.columns
            picks = [chosen.get(s) for s in splits]
            has_pick = np.array([p is not None and p in values for p in picks], dtype=bool)
            for subject in (s for s in subjects if s in values):
                if has_pick.any():
                    best = np.array([values[p][i] if ok else np.nan for i, (p, ok) in enumerate(zip(picks, has_pick))])
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
    return {split: names[b] for split, b, good in zip(cal.splits.tolist(), best, ok) if good}


def average_paired(paired: Sequence[PairedComparison], splits: Sequence[int]) -> PairedComparison:
    """The paired comparison of an average over datasets: per split, the mean of the datasets' differences (each
    dataset choosing its own best baseline on its calibration part), over the ``splits`` every dataset has."""
    frames = [p.per_split[p.per_split["split"].isin(list(splits))] for p in paired]
    if not frames or all(f.empty for f in frames):
        return _empty()
    keys = ["split", "method", "versus", "metric", "calibrator"]
    grouped = pd.concat(frames).groupby(keys, sort=False)["difference"].agg(["mean", "count"]).reset_index()
    grouped = grouped[grouped["count"] == len(frames)].drop(columns="count").rename(columns={"mean": "difference"})
    grouped.insert(5, "chosen", np.where(grouped["versus"] == BEST_BASELINE, "per dataset", grouped["versus"]))
    return PairedComparison(_summarise(grouped), grouped[_PER_SPLIT_COLUMNS])


def _beats(row: pd.Series) -> bool:
    higher = METRICS[row["metric"]].higher_is_better
    better = row["mean"] > TIE_TOLERANCE if higher else row["mean"] < -TIE_TOLERANCE
    return bool(better and row["wins"] > row["n_splits"] / 2)


def _flipped(row: pd.Series) -> pd.Series:
    """The row as the reference sees it (the difference and the wins reversed)."""
    return pd.Series({**row.to_dict(), "mean": -row["mean"], "wins": row["losses"]})


def reference_sentence(paired: PairedComparison, *, calibrator: str = "platt", method: str | None = None,
                       metrics: Sequence[str] = ("auroc", "brier"), digits: int = 3) -> str | None:
    """One sentence: does TRACE+ beat the supervised likelihood reference (:data:`trace_core.registry.REFERENCE`)?

    TRACE+ *beats* it on a metric when the mean paired difference is better in the metric's direction and TRACE+ is
    better on more than half of the splits. Returns None when either method did not run.

    Parameters
    ----------
    paired : PairedComparison
    calibrator : str
        Only for the lookup; TRACE+ and the reference both use their own logistic regression.
    method : str, optional
        Default: "TRACE+", or "TRACE+ (surprisal-only)" when only that ran.
    metrics : sequence of str
        The ranking metric first, then the probability metric (default AUROC and Brier).

    Examples
    --------
    A typical output: ``"TRACE+ does not beat the supervised likelihood reference on AUROC (-0.001 ± 0.004, wins 9
    of 20 splits) or Brier (+0.000 ± 0.002, wins 8 of 20 splits): its gain here is length-aware likelihood."``
    """
    if method is None:
        present = set(paired.summary["method"])
        method = next((m for m in ("TRACE+", METHODS["TRACE+"].surprisal_only) if m in present), None)
        if method is None:
            return None
    rows = [paired.get(method, REFERENCE, m, calibrator) for m in metrics if m in METRICS]
    rows = [r for r in rows if r is not None and r["n_splits"] > 0]
    if not rows:
        return None

    def part(row: pd.Series) -> str:
        return (f"{METRICS[row['metric']].label} ({row['mean']:+.{digits}f} ± {row['std']:.{digits}f}, "
                f"wins {_count(int(row['wins']), int(row['n_splits']))})")

    won = [r for r in rows if _beats(r)]
    lost = [r for r in rows if not _beats(r)]
    subject = f"{method} "
    if not lost:
        return subject + "beats the supervised likelihood reference on " + " and ".join(map(part, won)) + "."
    if not won:
        worse = all(_beats(_flipped(r)) for r in lost)
        return (subject + "does not beat the supervised likelihood reference on " + " or ".join(map(part, lost))
                + (": the likelihood summaries alone do better here." if worse
                   else ": its gain here is length-aware likelihood."))
    if METRICS[rows[0]["metric"]].on == "score" and _beats(rows[0]):
        return (subject + "beats the supervised likelihood reference on " + " and ".join(map(part, won))
                + " but not on " + " or ".join(map(part, lost)) + ".")
    return (subject + "does not beat the supervised likelihood reference on " + " or ".join(map(part, lost))
            + ", only on " + " and ".join(map(part, won)) + ": its ranking gain here is length-aware likelihood.")
