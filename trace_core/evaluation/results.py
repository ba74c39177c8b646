"""What the evaluation protocol returns: :class:`EvaluationResult`, its tables and captions, and averages over datasets.

Tidy frames carry a ``calibrator`` column: ``"platt"`` or ``"isotonic"`` for the Brier and ECE of TRACE and the
scalar baselines (both are always computed), ``"logistic"`` for those of TRACE+, the fitted baselines and the
supervised reference (their own fitted model, the same whichever scalar calibrator is shown), and ``"none"`` for the
ranking metrics (raw scores). Tables show one scalar calibrator (``EvaluationConfig.scalar_calibrator`` unless
another is asked for) and say which.

Every result also says how much skill there is to find: its share correct p, the base-rate Brier p(1-p) (the Brier of
always predicting p, computed on all the answers; for an average over groups, the mean of the groups'), the Brier skill
score 1 - Brier / p(1-p) of TRACE+ and of the best baseline (:meth:`EvaluationResult.skill_note`), and the
:class:`trace_core.evaluation.verdict.Verdict` on TRACE+ with AUROC intervals and, where no method's AUROC interval lies
above 0.5, a sentence saying the data show no detectable skill.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

from trace_core.checks import check_choice
from trace_core.evaluation.paired import BEST_BASELINE, FITTED, RAW, PairedComparison, average_paired
from trace_core.evaluation.small_sample import bold_caption, small_sample_note
from trace_core.evaluation.verdict import Verdict, auroc_skill, best_baseline_values, no_skill_sentence, verdict
from trace_core.methods.baselines import NO_ENTROPY_REASON
from trace_core.methods.registry import METHODS, METRICS, REFERENCE

if TYPE_CHECKING:  # pragma: no cover
    from trace_core.evaluation.run import EvaluationConfig

__all__ = ["CALIBRATOR_NAMES", "CONSTANT_RTOL", "SCALAR_CALIBRATORS", "TRUNCATED_SHARE", "UNINFORMATIVE",
           "EvaluationResult", "HeldOut", "HeldOutMethod", "MetricTable", "SplitValue", "average_results",
           "extended_entropy_note", "extended_needing_entropy", "report_markdown", "split_frame",
           "summarise", "truncation_note"]

SCALAR_CALIBRATORS = ("platt", "isotonic")  # how TRACE and the baselines get probabilities (both are computed)
#: How captions name the calibrators.
CALIBRATOR_NAMES = {"platt": "Platt scaling", "isotonic": "isotonic regression"}
CONSTANT_RTOL = 1e-12  # a score whose standard deviation is below this share of its mean magnitude is constant
UNINFORMATIVE = "uninformative (constant)"
REFERENCE_NOTE = "supervised reference"
#: More than this share of the answer tokens with probability exactly 1 (log-probability 0.0) means the
#: log-probabilities are not the model's full distribution. Measured: 0% of the tokens of SmolLM2-135M-Instruct's
#: greedy answers (exact entropy, assets/datasets/real_*.csv), 4.6% for the small demo GPT-2 (float32 rounds its most
#: confident steps to 1), 58% in Llama chain-of-draft runs whose log-probabilities were taken after top-p/top-k
#: truncation: 20% is well clear of both.
TRUNCATED_SHARE = 0.2


def truncation_note(certain: int, total: int) -> str:
    """The note on a truncated distribution when more than :data:`TRUNCATED_SHARE` of ``total`` answer tokens have
    probability exactly 1 (``certain`` of them); "" otherwise.

    >>> truncation_note(58, 100).split(" (")[0]
    '58% of the 100 answer tokens have probability exactly 1'
    >>> truncation_note(20, 100)
    ''
    """
    if total <= 0 or certain <= TRUNCATED_SHARE * total:
        return ""
    return (f"{certain / total:.0%} of the {total:,} answer tokens have probability exactly 1 (log-probability 0.0; "
            f"more than {TRUNCATED_SHARE:.0%}): the distribution looks truncated (top-p/top-k sampling, or a server "
            "that returns post-processed log-probabilities), so surprisal-based scores (TRACE, TRACE+, the likelihood "
            "baselines) are not the model's")


def extended_needing_entropy(skipped: Mapping[str, str]) -> list[str]:
    """The extended TRACE+ variants in ``skipped`` because the data hold no entropy."""
    return [m for m, why in skipped.items() if m in METHODS and METHODS[m].extended and METHODS[m].needs_entropy
            and why.startswith(NO_ENTROPY_REASON)]


def extended_entropy_note(names: Sequence[str]) -> str:
    """The one note that replaces a "skipped" line per extended TRACE+ variant on data without entropy."""
    return (f"the extended TRACE+ variants ({', '.join(names)}) need token entropy and these traces hold only the "
            "chosen tokens' log-probabilities: they did not run (TRACE+ (surprisal-only) and TRACE (surprisal-only) "
            "are the variants for such data)")


class SplitValue(NamedTuple):
    """One metric of one method on one split: a row of :attr:`EvaluationResult.per_split` (which adds the method's
    ``family``) and of :attr:`EvaluationResult.calibration_values`. ``calibrator`` is ``"platt"``, ``"isotonic"``,
    ``"logistic"`` (a method's own fitted model) or ``"none"`` (a ranking metric on the raw score)."""

    split: int
    method: str
    metric: str
    calibrator: str
    value: float


def split_frame(rows: Iterable[SplitValue]) -> pd.DataFrame:
    """The tidy frame of :class:`SplitValue` rows, its columns their fields (an empty frame keeps them)."""
    return pd.DataFrame(list(rows), columns=list(SplitValue._fields))


@dataclass(frozen=True)
class HeldOutMethod:
    """One method's values on the held-out answers of :class:`HeldOut`, in its row order.

    Attributes
    ----------
    score : ndarray of float64
        The raw score (what the ranking metrics rank).
    probabilities : mapping of str to ndarray of float64
        Calibrated probability of a correct answer per calibrator: ``"platt"`` and ``"isotonic"`` for TRACE and the
        scalar baselines, ``"logistic"`` for the methods with their own fitted model (TRACE+, the fitted baselines,
        the reference).
    """

    score: np.ndarray
    probabilities: Mapping[str, np.ndarray]

    def probability(self, calibrator: str) -> np.ndarray:
        """The probability under ``calibrator``; a method with its own fitted model gives that one whichever scalar
        calibrator is asked for (as the tables do)."""
        if calibrator in self.probabilities:
            return self.probabilities[calibrator]
        if FITTED in self.probabilities:
            return self.probabilities[FITTED]
        raise KeyError(f"no probabilities under {calibrator!r}; known: {sorted(self.probabilities)}")


@dataclass(frozen=True)
class HeldOut:
    """The first evaluated split's held-out answers: what the reliability, risk-coverage and ROC figures draw.

    Attributes
    ----------
    rows : ndarray of int64
        Each held-out answer's position in the inputs, ascending.
    labels : ndarray of int64
        Their 0/1 labels (1 = correct).
    methods : mapping of str to HeldOutMethod
        Every method that ran, in display order.
    """

    rows: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    labels: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    methods: Mapping[str, HeldOutMethod] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def scores(self, methods: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Raw scores per method (all of them, or ``methods`` in that order)."""
        return {m: self.methods[m].score for m in (self.methods if methods is None else methods)}

    def probabilities(self, calibrator: str, methods: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Probabilities per method under ``calibrator`` (:meth:`HeldOutMethod.probability`)."""
        return {m: self.methods[m].probability(calibrator) for m in (self.methods if methods is None else methods)}

    def to_frame(self) -> pd.DataFrame:
        """Tidy: one row per answer, method and calibrator, with columns row, label, method, calibrator, score,
        probability (for export or plotting elsewhere)."""
        parts = [pd.DataFrame({"row": self.rows, "label": self.labels, "method": method, "calibrator": calibrator,
                               "score": values.score, "probability": p})
                 for method, values in self.methods.items() for calibrator, p in values.probabilities.items()]
        if not parts:
            return pd.DataFrame(columns=["row", "label", "method", "calibrator", "score", "probability"])
        return pd.concat(parts, ignore_index=True)


@dataclass(frozen=True)
class MetricTable:
    """The results table under one calibrator (:meth:`EvaluationResult.metric_table`).

    Attributes
    ----------
    mean, std : DataFrame
        Index: the methods, in display order; columns: the metrics, in the configuration's order. The mean and the
        standard deviation (ddof 1) over the splits.
    family : Series
        Each method's family, on the same index.
    """

    mean: pd.DataFrame
    std: pd.DataFrame
    family: pd.Series

    @property
    def methods(self) -> list[str]:
        return [str(m) for m in self.mean.index]

    @property
    def metrics(self) -> list[str]:
        return [str(m) for m in self.mean.columns]

    def to_frame(self) -> pd.DataFrame:
        """One wide frame for display or export: ``family``, then each metric's mean, then each one's standard
        deviation (columns ``<metric>_std``)."""
        out = pd.concat([self.mean, self.std.add_suffix("_std")], axis=1)
        out.insert(0, "family", self.family)
        return out


def _shown(frame: pd.DataFrame, calibrator: str) -> pd.DataFrame:
    """The rows a table with ``calibrator`` shows (frames without a calibrator column are shown whole)."""
    if "calibrator" not in frame.columns:
        return frame
    return frame[frame["calibrator"].isin([calibrator, FITTED, RAW])]


def summarise(per_split: pd.DataFrame, uninformative: Sequence[str] = ()) -> pd.DataFrame:
    """Mean and standard deviation (ddof 1; 0 for one split) over splits, per method, metric and calibrator; the
    ``uninformative`` column marks constant scores."""
    keys = ["method", "metric", "calibrator"] if "calibrator" in per_split.columns else ["method", "metric"]
    grouped = per_split.groupby(keys, sort=False)["value"]
    summary = grouped.agg(mean="mean", std=lambda v: float(np.std(v, ddof=1)) if len(v) > 1 else 0.0,
                          n_splits="count").reset_index()
    summary.insert(1, "family", summary["method"].map(lambda m: METHODS[m].family))
    summary["uninformative"] = summary["method"].isin(list(uninformative))
    return summary


@dataclass
class EvaluationResult:
    """Results of :func:`trace_core.evaluation.run.evaluate`.

    Attributes
    ----------
    summary : DataFrame
        Tidy: one row per (method, metric, calibrator) with columns method, family, metric, calibrator, mean, std,
        n_splits, uninformative (see the module docstring for ``calibrator``).
    per_split : DataFrame
        Tidy raw values on each split's evaluation part: split, method, family, metric, calibrator, value.
    held_out : HeldOut
        The first evaluated split's held-out answers: their rows and labels, and every method's raw score and
        calibrated probabilities (empty for averages).
    skipped : dict
        Method -> why it did not run.
    config : EvaluationConfig
    n_answers : int
    skipped_splits : int
        Splits left out (one class only in a part; for an average: splits missing from some dataset).
    methods : list of str
        The methods that ran, in display order.
    accuracy : float
        Share of correct answers (for averages: over every group's answers together).
    calibration_values : DataFrame
        The baselines' values on each split's calibration part (same columns as ``per_split`` less family): what
        chooses the best baseline of the paired comparison.
    paired : PairedComparison or None
        TRACE methods minus the best baseline (chosen on calibration parts) and minus each baseline.
    uninformative : dict
        Method -> ``"uninformative (constant)"``: constant scores, never bolded or chosen as best.
    data_note : str
        What the data held (``"1,160 traces: entropy exact"``; see :func:`trace_core.evaluation.run.data_note`).
    entropy_summary : dict
        :func:`trace_core.methods.risk.entropy_summary` of the traces (empty for arrays and averages).
    group_note : str
        Averages only: ``"average over 3 groups, 17 of 20 splits present in every group"``.
    base_rate_brier : float
        The Brier of always predicting the share correct p: p(1-p) on all the answers (the default, from
        ``accuracy``); for averages, the mean of the groups' (see :func:`average_results`).
    notes : list of str
        Sentences that change how the table reads, shown with it: a truncated distribution
        (:func:`truncation_note`), extended variants that need entropy (:func:`extended_entropy_note`), for averages
        the methods constant in some groups only.
    certain_tokens : tuple of int
        (answer tokens with probability exactly 1, all answer tokens) over the answers evaluated; for averages, summed
        over the groups.
    """

    summary: pd.DataFrame
    per_split: pd.DataFrame
    held_out: HeldOut
    skipped: dict[str, str]
    config: EvaluationConfig
    n_answers: int
    skipped_splits: int = 0
    methods: list[str] = field(default_factory=list)
    accuracy: float = float("nan")
    calibration_values: pd.DataFrame = field(default_factory=pd.DataFrame)
    paired: PairedComparison | None = None
    uninformative: dict[str, str] = field(default_factory=dict)
    data_note: str = ""
    entropy_summary: dict[str, Any] = field(default_factory=dict)
    group_note: str = ""
    base_rate_brier: float = float("nan")
    notes: list[str] = field(default_factory=list)
    certain_tokens: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        if not np.isfinite(self.base_rate_brier) and np.isfinite(self.accuracy):
            self.base_rate_brier = float(self.accuracy * (1 - self.accuracy))

    @property
    def n_splits_used(self) -> int:
        """Splits the means are over."""
        return self.config.n_splits - self.skipped_splits

    def _calibrator(self, calibrator: str | None) -> str:
        return check_choice(calibrator or self.config.scalar_calibrator, "calibrator", SCALAR_CALIBRATORS)

    def note(self, method: str) -> str:
        """``"uninformative (constant)"``, ``"supervised reference"`` or ``""``."""
        if method in self.uninformative:
            return self.uninformative[method]
        return REFERENCE_NOTE if METHODS[method].kind == "reference" else ""

    def metric_table(self, *, calibrator: str | None = None) -> MetricTable:
        """Per method (in method order) and metric, the mean and standard deviation over the splits; Brier and ECE
        of scalar methods under ``calibrator`` (default ``config.scalar_calibrator``). Each method's note
        (uninformative, supervised reference) is :meth:`note`."""
        shown = _shown(self.summary, self._calibrator(calibrator))
        mean = shown.pivot(index="method", columns="metric", values="mean")
        std = shown.pivot(index="method", columns="metric", values="std")
        metrics = [m for m in self.config.metrics if m in mean.columns]
        methods = [m for m in self.methods if m in mean.index]
        mean, std = mean.reindex(index=methods, columns=metrics), std.reindex(index=methods, columns=metrics)
        mean.columns.name = std.columns.name = None
        family = pd.Series([METHODS[m].family for m in methods], index=mean.index, name="family")
        return MetricTable(mean=mean, std=std, family=family)

    def table(self, *, calibrator: str | None = None) -> pd.DataFrame:
        """:meth:`metric_table` as one wide frame (:meth:`MetricTable.to_frame`): ``family``, ``<metric>`` and
        ``<metric>_std`` columns, for display and export."""
        return self.metric_table(calibrator=calibrator).to_frame()

    def sample_note(self) -> str:
        """:func:`small_sample_note` of these answers ("" when there are enough); with the share correct unknown
        (NaN), by the number of answers alone."""
        known = np.isfinite(self.accuracy)
        return small_sample_note(self.n_answers, int(round(self.accuracy * self.n_answers)) if known else None)

    @property
    def small_sample(self) -> bool:
        """Too few answers, or of one class, to read the figures (:meth:`sample_note`)."""
        return bool(self.sample_note())

    def best_cells(self, table: MetricTable | pd.DataFrame) -> pd.DataFrame:
        """Which cells of the table's metric columns to show as the best (a :class:`MetricTable`, or a frame with a
        column of means per metric): each metric's best mean over the informative methods (uninformative scores never
        are; nothing on a small sample, :attr:`small_sample`)."""
        means = table.mean if isinstance(table, MetricTable) else table
        metrics = [m for m in self.config.metrics if m in means.columns]
        informative = ~means.index.isin(list(self.uninformative))
        out = pd.DataFrame(False, index=means.index, columns=metrics)
        if self.small_sample or not informative.any():
            return out
        for m in metrics:
            best = METRICS[m].best(means.loc[informative, m])
            if np.isfinite(best):
                out[m] = informative & np.isclose(means[m].to_numpy(dtype=float), best)
        return out

    def to_markdown(self, *, digits: int = 3, calibrator: str | None = None) -> str:
        """The wide table as Markdown, ``mean ± std``; the best mean per metric in bold (:meth:`best_cells`);
        uninformative methods and the reference say so after their name."""
        table = self.metric_table(calibrator=calibrator)
        metrics = table.metrics
        bold = self.best_cells(table)
        header = "| method | family | " + " | ".join(f"{m} {METRICS[m].arrow}" for m in metrics) + " |"
        lines = [header, "|" + "---|" * (len(metrics) + 2)]
        for method in table.methods:
            cells = []
            for m in metrics:
                text = f"{table.mean.at[method, m]:.{digits}f} ± {table.std.at[method, m]:.{digits}f}"
                cells.append(f"**{text}**" if bold.at[method, m] else text)
            name = f"{method} ({self.uninformative[method]})" if method in self.uninformative else method
            lines.append(f"| {name} | {table.family[method]} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def caption(self, *, calibrator: str | None = None) -> str:
        """Which calibrator made the table's probabilities and on which scores each metric is computed."""
        calibrator = self._calibrator(calibrator)
        on_score = [METRICS[m].label for m in self.config.metrics if METRICS[m].on == "score"]
        on_prob = [METRICS[m].label for m in self.config.metrics if METRICS[m].on == "probability"]
        parts = []
        if on_score:
            parts.append(f"{', '.join(on_score)} on raw scores")
        if on_prob:
            parts.append(f"{' and '.join(on_prob)} after {CALIBRATOR_NAMES[calibrator]} for TRACE and the scalar "
                         "baselines (fitted on each score's documented transform), the own fitted model for TRACE+, "
                         "the fitted baselines and the reference")
        return "; ".join(parts) + ". " + self.baselines_note()

    def baselines_note(self) -> str:
        """How many of the known baselines ran and which kind they are, e.g. "Baselines: 18 of 23 ran (15 scalar,
        3 fitted on each calibration part: CES, WEPR, Trace Profile)."; every count is of those that ran."""
        known = [m for m in METHODS.values() if m.is_baseline]
        ran = [METHODS[m] for m in self.methods if METHODS[m].is_baseline]
        fitted = [m.name for m in ran if m.kind == "fitted_baseline"]
        kinds = [f"{len(ran) - len(fitted)} scalar"]
        if fitted:
            kinds.append(f"{len(fitted)} fitted on each calibration part: {', '.join(fitted)}")
        return f"Baselines: {len(ran)} of {len(known)} ran ({', '.join(kinds)})."

    def verdict(self, *, calibrator: str | None = None, extra_metric: str | None = None) -> Verdict | None:
        """:func:`trace_core.evaluation.verdict.verdict` on TRACE+ (or its surprisal-only variant) against the best
        baseline and the supervised reference, on Brier and AUROC (and ``extra_metric``), with intervals corrected for
        the splits' overlap (this protocol's calibration fraction); None when TRACE+ or both opponents did not run."""
        if self.paired is None:
            return None
        metrics = [m for m in ("brier", "auroc") if m in self.config.metrics]
        return verdict(self.paired, values=self.per_split, calibrator=self._calibrator(calibrator), metrics=metrics,
                       extra_metric=extra_metric, calibration_fraction=self.config.calibration_fraction,
                       uninformative=list(self.uninformative))

    def reference_sentence(self, *, calibrator: str | None = None) -> str | None:
        """The :meth:`verdict` sentence (kept for callers of the old name); None when there is no verdict."""
        found = self.verdict(calibrator=calibrator)
        return None if found is None else found.sentence

    def no_skill_sentence(self) -> str | None:
        """``"No method's AUROC is detectably above 0.5 here (…): the data show no detectable skill."`` when no
        informative method's AUROC interval (as the verdict's) lies above 0.5; else None."""
        if "auroc" not in set(self.per_split.get("metric", pd.Series(dtype=object))):
            return None
        f = self.config.calibration_fraction
        best, detected = auroc_skill(self.per_split, test_train_ratio=(1 - f) / f,
                                     uninformative=list(self.uninformative))
        return no_skill_sentence(best) if detected is False else None

    def skill(self, *, calibrator: str | None = None) -> dict[str, Any]:
        """The share correct, the base-rate Brier p(1-p) and the Brier skill score ``1 - Brier / p(1-p)`` of the
        subject (TRACE+, its surprisal-only variant, or else the informative method with the best mean Brier) and of
        the best baseline (per split the one chosen on the calibration part, under ``calibrator``)."""
        calibrator = self._calibrator(calibrator)
        base = self.base_rate_brier
        out: dict[str, Any] = {"positive_rate": self.accuracy, "base_rate_brier": base,
                               "base_rate_on": "groups' mean" if self.group_note else "all answers",
                               "brier_skill_score": {}}
        if "brier" not in self.config.metrics or not base > 0:
            return out
        shown = _shown(self.summary, calibrator)
        brier = shown[shown["metric"] == "brier"].set_index("method")["mean"]
        subject = next((m for m in ("TRACE+", METHODS["TRACE+"].surprisal_only) if m in brier.index), None)
        if subject is None:
            informative = brier[~brier.index.isin(list(self.uninformative))]
            subject = informative.idxmin() if len(informative) else None
        if subject is not None:
            out["brier_skill_score"][subject] = float(1 - brier[subject] / base)
            if self.paired is not None and subject in set(self.paired.summary["method"]):
                best = best_baseline_values(self.paired, self.per_split, subject, "brier", calibrator)
                if not best.empty:
                    out["brier_skill_score"][BEST_BASELINE] = float(1 - best.mean() / base)
        return out

    def skill_note(self, *, calibrator: str | None = None) -> str:
        """``"Base-rate Brier p(1−p) 0.240 (p = 60.2% correct among all 1,430 answers); Brier skill score 1 −
        Brier/0.240: TRACE+ 0.434, best baseline (chosen on each calibration part) 0.476."``, then, when AUPRC is
        measured (and not averaged over groups), its level without skill: the share correct, since correct answers
        are its positives; "" without an accuracy. The score is that of the mean Brier over the splits."""
        skill = self.skill(calibrator=calibrator)
        base = skill["base_rate_brier"]
        if not np.isfinite(base):
            return ""
        on = ("the mean over the groups of each group's p(1−p), as the Briers averaged are each group's; "
              f"{self.accuracy:.1%} of all {self.n_answers:,} answers are correct" if self.group_note else
              f"p = {self.accuracy:.1%} correct among all {self.n_answers:,} answers")
        text = f"Base-rate Brier p(1−p) {base:.3f} ({on})"
        scores = skill["brier_skill_score"]
        if scores:
            names = {BEST_BASELINE: "best baseline (chosen on each calibration part)"}
            text += (f"; Brier skill score 1 − Brier/{base:.3f}: "
                     + ", ".join(f"{names.get(m, m)} {v:.3f}" for m, v in scores.items()))
            if any(v < 0 for v in scores.values()):
                text += " (below 0: less accurate than giving every answer the share correct as its probability)"
        text += "."
        if "auprc" in self.config.metrics and not self.group_note:  # its level without skill is the positives' share
            text += (f" AUPRC takes the correct answers as its positives: a score that ranks them at random gets "
                     f"about {self.accuracy:.1%}.")
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: config, counts, notes, skill, the summary under both calibrators, the paired comparison and
        the verdict on TRACE+ (``verdict``: see :meth:`trace_core.evaluation.verdict.Verdict.to_dict`)."""
        out = {"config": asdict(self.config), "n_answers": self.n_answers, "accuracy": self.accuracy,
               "data_note": self.data_note, "skipped": self.skipped, "skipped_splits": self.skipped_splits,
               "uninformative": self.uninformative, "skill": self.skill(),
               "summary": self.summary.to_dict(orient="records")}
        if self.group_note:
            out["group_note"] = self.group_note
        if self.notes:
            out["notes"] = list(self.notes)
        if self.paired is not None:
            out["paired"] = self.paired.summary.to_dict(orient="records")
            found = self.verdict()
            if found is not None:
                out["verdict"] = found.to_dict()
        out["no_skill_sentence"] = self.no_skill_sentence()
        return out


def _pooled_accuracy(results: Sequence[EvaluationResult]) -> float:
    """The share correct over every group's answers (not the mean of the groups' shares, which weighs a group of 58
    answers like one of 150)."""
    n = sum(r.n_answers for r in results)
    return float(sum(r.accuracy * r.n_answers for r in results) / n) if n else float("nan")


def average_results(results: Sequence[EvaluationResult] | Mapping[str, EvaluationResult]) -> EvaluationResult:
    """Average several datasets' results (e.g. task families), as the paper averages over datasets.

    ``results`` may be a mapping from group name (``"family = a"``) to result: the notes name the groups by it
    (else ``"group 1"``, ``"group 2"``, …).

    Only the splits present in every result (a dataset can skip a split that has one class only in a part) and the
    methods present in every result are kept. For each such split, method, metric and calibrator the values are
    averaged over the datasets; the mean and standard deviation are then taken over splits. ``group_note`` says how
    many splits that is; paired differences are averaged the same way (each dataset chooses its own best baseline;
    the counts of the chosen baselines are over every group's splits). The base-rate Brier is the mean of the
    groups' p(1-p), the reference of their mean Brier.

    A method is uninformative (constant) in the average only when it is in every group; one constant in some groups
    gets a note naming them (``"SeqLogP was constant in 1 of 4 groups (family = a)…"``) and an unmarked row. The
    groups' notes are kept once each, but the truncation note is recomputed over all the groups' tokens.
    """
    if isinstance(results, Mapping):
        names, results = [str(k) for k in results], list(results.values())
    else:
        results = list(results)
        names = [f"group {i + 1}" for i in range(len(results))]
    if not results:
        raise ValueError("`results` is empty")
    common = [m for m in results[0].methods if all(m in r.methods for r in results)]
    splits = sorted(set.intersection(*(set(r.per_split["split"]) for r in results)))
    frames = [r.per_split[r.per_split["method"].isin(common) & r.per_split["split"].isin(splits)] for r in results]
    keys = [k for k in ("split", "method", "family", "metric", "calibrator") if k in frames[0].columns]
    per_split = pd.concat(frames).groupby(keys, sort=False)["value"].agg(["mean", "count"]).reset_index()
    per_split = per_split[per_split["count"] == len(results)].drop(columns="count").rename(columns={"mean": "value"})
    skipped: dict[str, str] = {}
    for r in results:
        skipped.update(r.skipped)
    uninformative: dict[str, str] = {}
    # the groups' own sample notes stay with their sections (their counts are not the average's)
    group_notes = [n for r in results for n in r.notes if n not in (truncation_note(*r.certain_tokens),
                                                                     r.sample_note())]
    for m in common:
        constant_in = [name for name, r in zip(names, results, strict=True) if m in r.uninformative]
        if len(constant_in) == len(results):
            uninformative[m] = results[0].uninformative[m]
        elif constant_in:
            group_notes.append(f"{m} was constant in {len(constant_in)} of {len(results)} groups "
                               f"({', '.join(constant_in)}): uninformative there, averaged as any other method")
    certain_tokens = (sum(r.certain_tokens[0] for r in results), sum(r.certain_tokens[1] for r in results))
    truncated = truncation_note(*certain_tokens)
    n_splits = results[0].config.n_splits
    pairs = [r.paired for r in results if r.paired is not None]
    paired = average_paired(pairs, splits) if len(pairs) == len(results) else None
    notes = list(dict.fromkeys(r.data_note for r in results if r.data_note))
    group_note = (f"average over {len(results)} group{'s' if len(results) != 1 else ''}, {len(splits)} of "
                  f"{n_splits} splits present in every group")
    return EvaluationResult(summary=summarise(per_split, list(uninformative)), per_split=per_split,
                            held_out=HeldOut(), skipped=skipped, config=results[0].config,
                            n_answers=sum(r.n_answers for r in results), skipped_splits=n_splits - len(splits),
                            methods=common, accuracy=_pooled_accuracy(results), paired=paired,
                            uninformative=uninformative, data_note="; ".join(notes), group_note=group_note,
                            base_rate_brier=float(np.mean([r.base_rate_brier for r in results])),
                            notes=list(dict.fromkeys(([truncated] if truncated else []) + group_notes)),
                            certain_tokens=certain_tokens)


def _paired_block(result: EvaluationResult, calibrator: str, caption: str) -> str:
    """The paired table of one result (TRACE methods minus the best baseline, TRACE+ minus the reference), which
    baselines the calibration parts chose, the verdict on TRACE+ and the no-skill sentence; "" without pairs."""
    paired = result.paired
    text = ""
    if paired is not None and not paired.summary.empty:
        table = paired.to_markdown(calibrator=calibrator)
        plus = [m for m in result.methods if METHODS[m].kind == "trace_plus"]
        if REFERENCE in result.methods and plus:  # TRACE+ against the supervised reference, under the same header
            table += "\n" + "\n".join(paired.to_markdown(versus=[REFERENCE], methods=plus).splitlines()[2:])
        text += f"\n{caption}\n\n{table}\n"
        chosen = paired.chosen_note(calibrator=calibrator)
        if chosen:
            text += f"\nBest baseline chosen on calibration: {chosen}.\n"
        found = result.verdict(calibrator=calibrator)
        if found is not None:
            text += f"\n{found.sentence}\n"
            for extra in (found.strongest_sentence, found.auroc_sentence):
                if extra:
                    text += f"{extra}\n"
    no_skill = result.no_skill_sentence()
    if no_skill:
        text += f"\n{no_skill}\n"
    return text


def _notes_block(result: EvaluationResult, shown_later: Sequence[str] = ()) -> str:
    """The result's notes but those ``shown_later`` (a group's that the average repeats), one paragraph each
    (``"Note: …."``), or ""."""
    return "".join(f"Note: {note}.\n\n" for note in result.notes if note not in shown_later)


def report_markdown(results: Mapping[str, EvaluationResult], *, calibrator: str | None = None) -> str:
    """A results report in Markdown, as ``trace-core evaluate`` prints it.

    Each result (one untitled, or each group titled by its key then their average) gets: what the data held, its
    share correct with the base-rate Brier and Brier skill scores (:meth:`EvaluationResult.skill_note`), its table,
    its paired comparison (method minus the best baseline chosen on calibration, TRACE+ minus the supervised
    reference), the baselines the calibration parts chose with counts, the :meth:`EvaluationResult.verdict` on TRACE+
    with AUROC intervals, and the no-skill sentence where no method's AUROC interval lies above 0.5; its notes
    (:attr:`EvaluationResult.notes`) come before its table. Then how the tables were made (splits, calibrator), the
    verdict's rule and the skipped methods (the extended TRACE+ variants skipped for lack of entropy are the one note
    :func:`extended_entropy_note` instead of a line each)."""
    last = list(results.values())[-1]  # the only result, or the average over groups
    config = last.config
    calibrator = last._calibrator(calibrator)
    paired_caption = ("Paired differences (method minus the other, per split; the best baseline is chosen on each "
                      "split's calibration part, then measured on its evaluation part): mean ± std (wins/splits), "
                      f"Brier and ECE after {CALIBRATOR_NAMES[calibrator]}.")
    splits = (f"{last.n_splits_used} splits present in every group (of {config.n_splits})" if last.group_note
              else f"{last.n_splits_used} random splits" + (f" (of {config.n_splits})" if last.skipped_splits else ""))
    caption = (f"\nMean ± std over {splits}, {config.calibration_fraction:.0%} calibration, seed {config.seed}. "
               f"{last.caption(calibrator=calibrator)} ECE with {config.n_bins} bins. "
               f"{bold_caption([r.small_sample for r in results.values()])}\n")
    if last.uninformative:
        caption += ("Uninformative (constant): " + ", ".join(last.uninformative)
                    + " — the same score for (nearly) every answer; never bolded or chosen as best baseline.\n")
    parts = []
    for title, result in results.items():
        skill = result.skill_note(calibrator=calibrator)
        if title:
            used = (f", {result.n_splits_used} of {config.n_splits} splits" if result.skipped_splits
                    and not result.group_note else "")
            what = result.group_note or result.data_note
            parts.append(f"### {title} ({result.n_answers:,} answers, {result.accuracy:.1%} correct{used})\n\n"
                         + (f"{what}\n\n" if what else "") + (f"{skill}\n\n" if skill else "")
                         + _notes_block(result, last.notes if result is not last else ())
                         + result.to_markdown(calibrator=calibrator) + "\n"
                         + _paired_block(result, calibrator, "Paired differences: mean ± std (wins/splits)."))
        else:
            parts.append(f"{result.data_note}; {result.n_answers:,} answers, {result.accuracy:.1%} correct."
                         + (f" {skill}" if skill else "") + "\n\n" + _notes_block(result)
                         + result.to_markdown(calibrator=calibrator) + "\n" + caption
                         + _paired_block(result, calibrator, paired_caption))
    text = "\n".join(parts)
    if any(title for title in results):
        text += caption + f"\n{paired_caption}\n"
    found = last.verdict(calibrator=calibrator)
    if found is not None:
        text += f"\n{found.rule()}\n"
    extended = extended_needing_entropy(last.skipped)
    folded = set(extended) if extended and extended_entropy_note(extended) in last.notes else set()
    notes = [f"- {name}: skipped ({reason})" for name, reason in last.skipped.items() if name not in folded]
    if notes:
        text += "\n" + "\n".join(notes) + "\n"
    return text
