"""What the evaluation protocol returns: :class:`EvaluationResult`, its tables and captions, and averages over datasets.

Tidy frames carry a ``calibrator`` column: ``"platt"`` or ``"isotonic"`` for the Brier and ECE of TRACE and the
baselines (both are always computed), ``"logistic"`` for those of TRACE+ and the supervised reference (their own
logistic regression, the same whichever scalar calibrator is shown), and ``"none"`` for the ranking metrics (raw
scores). Tables show one scalar calibrator (``EvaluationConfig.scalar_calibrator`` unless another is asked for) and say
which.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd

from .compare import FITTED, RAW, PairedComparison, average_paired, reference_sentence
from .registry import METHODS, METRICS, REFERENCE

if TYPE_CHECKING:  # pragma: no cover
    from .evaluate import EvaluationConfig

__all__ = ["CALIBRATOR_NAMES", "CONSTANT_RTOL", "SCALAR_CALIBRATORS", "UNINFORMATIVE", "EvaluationResult",
           "average_results", "report_markdown", "summarise"]

SCALAR_CALIBRATORS = ("platt", "isotonic")  # how TRACE and the baselines get probabilities (both are computed)
#: How captions name the calibrators.
CALIBRATOR_NAMES = {"platt": "Platt scaling", "isotonic": "isotonic regression"}
CONSTANT_RTOL = 1e-12  # a score whose standard deviation is below this share of its mean magnitude is constant
UNINFORMATIVE = "uninformative (constant)"
REFERENCE_NOTE = "supervised reference"


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
    """Results of :func:`trace_core.evaluate.evaluate`.

    Attributes
    ----------
    summary : DataFrame
        Tidy: one row per (method, metric, calibrator) with columns method, family, metric, calibrator, mean, std,
        n_splits, uninformative (see the module docstring for ``calibrator``).
    per_split : DataFrame
        Tidy raw values on each split's evaluation part: split, method, family, metric, calibrator, value.
    held_out : DataFrame
        The first evaluated split's held-out answers: ``label``, ``row`` (index into the inputs), and for every method
        ``<method>`` (its calibrated probability, under ``config.scalar_calibrator`` for scalar methods),
        ``<method> score`` (its raw score) and, for scalar methods, ``<method> platt`` and ``<method> isotonic``.
    skipped : dict
        Method -> why it did not run.
    config : EvaluationConfig
    n_answers : int
    skipped_splits : int
        Splits left out (one class only in a part; for an average: splits missing from some dataset).
    methods : list of str
        The methods that ran, in display order.
    accuracy : float
        Share of correct answers (for averages: the mean over datasets).
    calibration_values : DataFrame
        The baselines' values on each split's calibration part (same columns as ``per_split`` less family): what
        chooses the best baseline of the paired comparison.
    paired : PairedComparison or None
        TRACE methods minus the best baseline (chosen on calibration parts) and minus each baseline.
    uninformative : dict
        Method -> ``"uninformative (constant)"``: constant scores, never bolded or chosen as best.
    data_note : str
        What the data held (``"1,160 traces: entropy exact"``; see :func:`trace_core.evaluate.data_note`).
    entropy_summary : dict
        :func:`trace_core.score.entropy_summary` of the traces (empty for arrays and averages).
    group_note : str
        Averages only: ``"average over 3 groups, 17 of 20 splits present in every group"``.
    """

    summary: pd.DataFrame
    per_split: pd.DataFrame
    held_out: pd.DataFrame
    skipped: dict[str, str]
    config: "EvaluationConfig"
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

    @property
    def n_splits_used(self) -> int:
        """Splits the means are over."""
        return self.config.n_splits - self.skipped_splits

    def _calibrator(self, calibrator: str | None) -> str:
        from ._checks import check_choice

        return check_choice(calibrator or self.config.scalar_calibrator, "calibrator", SCALAR_CALIBRATORS)

    def note(self, method: str) -> str:
        """``"uninformative (constant)"``, ``"supervised reference"`` or ``""``."""
        if method in self.uninformative:
            return self.uninformative[method]
        return REFERENCE_NOTE if METHODS[method].kind == "reference" else ""

    def table(self, *, calibrator: str | None = None) -> pd.DataFrame:
        """Wide table: one row per method (in method order): ``family``, ``<metric>`` and ``<metric>_std`` columns
        (Brier and ECE of scalar methods under ``calibrator``, default ``config.scalar_calibrator``). Each method's
        note (uninformative, supervised reference) is :meth:`note`."""
        shown = _shown(self.summary, self._calibrator(calibrator))
        wide = shown.pivot(index="method", columns="metric", values="mean")
        std = shown.pivot(index="method", columns="metric", values="std").add_suffix("_std")
        metrics = [m for m in self.config.metrics if m in wide.columns]
        out = pd.concat([wide[metrics], std[[f"{m}_std" for m in metrics]]], axis=1)
        out = out.reindex([m for m in self.methods if m in out.index])
        out.insert(0, "family", out.index.map(lambda m: METHODS[m].family))
        return out

    def to_markdown(self, *, digits: int = 3, calibrator: str | None = None) -> str:
        """The wide table as Markdown, ``mean ± std``; the best mean per metric in bold (uninformative scores never
        are); uninformative methods and the reference say so after their name."""
        table = self.table(calibrator=calibrator)
        metrics = [m for m in self.config.metrics if m in table.columns]
        informative = table[~table.index.isin(list(self.uninformative))]
        best = {m: METRICS[m].best(informative[m]) if len(informative) else np.nan for m in metrics}
        header = "| method | family | " + " | ".join(f"{m} {METRICS[m].arrow}" for m in metrics) + " |"
        lines = [header, "|" + "---|" * (len(metrics) + 2)]
        for method, row in table.iterrows():
            cells = []
            for m in metrics:
                text = f"{row[m]:.{digits}f} ± {row[f'{m}_std']:.{digits}f}"
                bold = method not in self.uninformative and np.isfinite(best[m]) and np.isclose(row[m], best[m])
                cells.append(f"**{text}**" if bold else text)
            name = f"{method} ({self.uninformative[method]})" if method in self.uninformative else method
            lines.append(f"| {name} | {row['family']} | " + " | ".join(cells) + " |")
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
            parts.append(f"{' and '.join(on_prob)} after {CALIBRATOR_NAMES[calibrator]} for TRACE and the baselines "
                         "(fitted on each score's documented transform), the own logistic regression for TRACE+ and "
                         "the reference")
        return "; ".join(parts) + "."

    def reference_sentence(self, *, calibrator: str | None = None) -> str | None:
        """Whether TRACE+ beats the supervised likelihood reference, in one sentence (see
        :func:`trace_core.compare.reference_sentence`); None when either did not run."""
        if self.paired is None:
            return None
        return reference_sentence(self.paired, calibrator=self._calibrator(calibrator))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: config, counts, notes, the summary under both calibrators and the paired comparison."""
        out = {"config": asdict(self.config), "n_answers": self.n_answers, "accuracy": self.accuracy,
               "data_note": self.data_note, "skipped": self.skipped, "skipped_splits": self.skipped_splits,
               "uninformative": self.uninformative, "summary": self.summary.to_dict(orient="records")}
        if self.group_note:
            out["group_note"] = self.group_note
        if self.paired is not None:
            out["paired"] = self.paired.summary.to_dict(orient="records")
            out["reference_sentence"] = self.reference_sentence()
        return out


def average_results(results: Sequence[EvaluationResult]) -> EvaluationResult:
    """Average several datasets' results (e.g. task families), as the paper averages over datasets.

    Only the splits present in every result (a dataset can skip a split that has one class only in a part) and the
    methods present in every result are kept. For each such split, method, metric and calibrator the values are
    averaged over the datasets; the mean and standard deviation are then taken over splits. ``group_note`` says how
    many splits that is; paired differences are averaged the same way (each dataset chooses its own best baseline).
    """
    results = list(results)
    if not results:
        raise ValueError("`results` is empty")
    common = [m for m in results[0].methods if all(m in r.methods for r in results)]
    splits = sorted(set.intersection(*(set(r.per_split["split"]) for r in results)))
    frames = [r.per_split[r.per_split["method"].isin(common) & r.per_split["split"].isin(splits)] for r in results]
    keys = [k for k in ("split", "method", "family", "metric", "calibrator") if k in frames[0].columns]
    per_split = pd.concat(frames).groupby(keys, sort=False)["value"].agg(["mean", "count"]).reset_index()
    per_split = per_split[per_split["count"] == len(results)].drop(columns="count").rename(columns={"mean": "value"})
    skipped: dict[str, str] = {}
    uninformative: dict[str, str] = {}
    for r in results:
        skipped.update(r.skipped)
        uninformative.update({m: v for m, v in r.uninformative.items() if m in common})
    n_splits = results[0].config.n_splits
    pairs = [r.paired for r in results if r.paired is not None]
    paired = average_paired(pairs, splits) if len(pairs) == len(results) else None
    notes = list(dict.fromkeys(r.data_note for r in results if r.data_note))
    group_note = (f"average over {len(results)} group{'s' if len(results) != 1 else ''}, {len(splits)} of "
                  f"{n_splits} splits present in every group")
    return EvaluationResult(summary=summarise(per_split, list(uninformative)), per_split=per_split,
                            held_out=pd.DataFrame(), skipped=skipped, config=results[0].config,
                            n_answers=sum(r.n_answers for r in results), skipped_splits=n_splits - len(splits),
                            methods=common, accuracy=float(np.mean([r.accuracy for r in results])), paired=paired,
                            uninformative=uninformative, data_note="; ".join(notes), group_note=group_note)


def report_markdown(results: Mapping[str, EvaluationResult], *, calibrator: str | None = None) -> str:
    """A results report in Markdown, as ``trace-core evaluate`` prints it: what the data held, the table(s) (titled
    by the keys of ``results``; one untitled result, or groups then their average), how they were made (splits,
    calibrator), the paired comparison, whether TRACE+ beats the supervised likelihood reference, skipped methods."""
    last = list(results.values())[-1]  # the only result, or the average over groups
    config = last.config
    calibrator = last._calibrator(calibrator)
    parts = []
    for title, result in results.items():
        if title:
            used = (f", {result.n_splits_used} of {config.n_splits} splits" if result.skipped_splits
                    and not result.group_note else "")
            what = result.group_note or result.data_note
            parts.append(f"### {title} ({result.n_answers:,} answers, {result.accuracy:.1%} correct{used})\n\n"
                         + (f"{what}\n\n" if what else "") + result.to_markdown(calibrator=calibrator) + "\n")
        else:
            parts.append(f"{result.data_note}; {result.n_answers:,} answers, {result.accuracy:.1%} correct.\n\n"
                         + result.to_markdown(calibrator=calibrator) + "\n")
    text = "\n".join(parts)
    splits = (f"{last.n_splits_used} splits present in every group (of {config.n_splits})" if last.group_note
              else f"{last.n_splits_used} random splits" + (f" (of {config.n_splits})" if last.skipped_splits else ""))
    text += (f"\nMean ± std over {splits}, {config.calibration_fraction:.0%} calibration, seed {config.seed}. "
             f"{last.caption(calibrator=calibrator)} ECE with {config.n_bins} bins. Bold: the best mean per column "
             "(uninformative scores excluded).\n")
    if last.uninformative:
        text += ("Uninformative (constant): " + ", ".join(last.uninformative)
                 + " — the same score for (nearly) every answer; never bolded or chosen as best baseline.\n")
    paired = last.paired
    if paired is not None and not paired.summary.empty:
        table = paired.to_markdown(calibrator=calibrator)
        plus = [m for m in last.methods if METHODS[m].kind == "trace_plus"]
        if REFERENCE in last.methods and plus:  # TRACE+ against the supervised reference, under the same header
            table += "\n" + "\n".join(paired.to_markdown(versus=[REFERENCE], methods=plus).splitlines()[2:])
        text += (f"\nPaired differences (method minus the other, per split; the best baseline is chosen on each "
                 f"split's calibration part, then measured on its evaluation part): mean ± std (wins/splits), "
                 f"Brier and ECE after {CALIBRATOR_NAMES[calibrator]}.\n\n" + table + "\n")
        chosen = paired.chosen_note(calibrator=calibrator)
        if chosen:
            text += f"\nBest baseline chosen on calibration: {chosen}.\n"
        sentence = last.reference_sentence(calibrator=calibrator)
        if sentence:
            text += f"\n{sentence}\n"
    notes = [f"- {name}: skipped ({reason})" for name, reason in last.skipped.items()]
    if notes:
        text += "\n" + "\n".join(notes) + "\n"
    return text
