"""The evaluation protocol: every method scores the same answers, over repeated calibration/evaluation splits.

Per split (paper protocol): a random ``calibration_fraction`` of the answers (35% by default) fits the calibrators and
the rest is evaluated. AUROC, AUPRC and AURC are computed on each method's raw score; Brier and ECE on probabilities
from a calibrator fitted on the calibration split: TRACE and every scalar baseline go through the same scalar
calibrator (Platt by default), TRACE+ through its own logistic regression on trace features. Results are reported as
mean and standard deviation over the splits (20 by default).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ._checks import check_bool, check_choice, check_int, check_labels, check_real, set_checked
from .baselines import baseline_scores
from .calibrate import IsotonicCalibrator, PlattCalibrator, TracePlus, _sigmoid
from .features import feature_matrix_from_arrays
from .metrics import RankGroups, brier_score, expected_calibration_error
from .operators import Ragged, check_paired
from .registry import METHODS, METRICS, method_names
from .score import PAPER_CONFIG, _risk_from_arrays, stack_traces
from .trace import Trace

__all__ = ["SCALAR_CALIBRATORS", "EvaluationConfig", "EvaluationResult", "average_results", "evaluate",
           "evaluate_arrays"]

SCALAR_CALIBRATORS = ("platt", "isotonic")  # how TRACE and the baselines get probabilities


@dataclass(frozen=True)
class EvaluationConfig:
    """Settings of the protocol (serialisable with ``dataclasses.asdict``).

    Attributes
    ----------
    n_splits : int, default 20
        Random calibration/evaluation splits, >= 1.
    calibration_fraction : float, default 0.35
        Share of the answers that fits the calibrators, in (0, 1).
    stratified : bool, default False
        Keep each class's share in the calibration part (``round(fraction * n_class)`` of each class).
    seed : int, default 0
        Seed of the splits, >= 0.
    n_bins : int, default 10
        ECE bins, >= 1.
    scalar_calibrator : {"platt", "isotonic"}
        Calibrator of TRACE and the baselines (TRACE+ has its own logistic regression).
    metrics : tuple of str
        Keys of :data:`trace_core.registry.METRICS`.

    Numpy numbers are accepted and stored as Python numbers; a wrong type raises TypeError, a value out of range
    ValueError.
    """

    n_splits: int = 20
    calibration_fraction: float = 0.35
    stratified: bool = False
    seed: int = 0
    n_bins: int = 10
    scalar_calibrator: str = "platt"
    metrics: tuple[str, ...] = ("brier", "ece", "auroc", "auprc", "aurc")

    def __post_init__(self) -> None:
        if isinstance(self.metrics, str) or not isinstance(self.metrics, Sequence):
            raise TypeError(f"`metrics` must be a sequence of metric names, got {type(self.metrics).__name__}")
        unknown = [m for m in self.metrics if m not in METRICS]
        if unknown:
            raise ValueError(f"unknown metrics {unknown}; known: {list(METRICS)}")
        checked = {
            "n_splits": check_int(self.n_splits, "n_splits", minimum=1),
            "calibration_fraction": check_real(self.calibration_fraction, "calibration_fraction", minimum=0,
                                               maximum=1, low_open=True, high_open=True),
            "stratified": check_bool(self.stratified, "stratified"),
            "seed": check_int(self.seed, "seed", minimum=0),
            "n_bins": check_int(self.n_bins, "n_bins", minimum=1),
            "scalar_calibrator": check_choice(self.scalar_calibrator, "scalar_calibrator", SCALAR_CALIBRATORS),
            "metrics": tuple(self.metrics),
        }
        set_checked(self, checked)


def _families(methods: pd.Series) -> pd.Series:
    return methods.map(lambda m: METHODS[m].family)


@dataclass
class EvaluationResult:
    """Results of :func:`evaluate`.

    Attributes
    ----------
    summary : DataFrame
        Tidy: one row per (method, metric) with columns method, family, metric, mean, std, n_splits.
    per_split : DataFrame
        Tidy raw values: split, method, family, metric, value.
    held_out : DataFrame
        The first evaluated split's held-out answers: column ``label``, ``row`` (index into the inputs), and for every
        method ``<method>`` (its calibrated probability) and ``<method> score`` (its raw score), for plots.
    skipped : dict
        Method -> why it did not run.
    config : EvaluationConfig
    n_answers : int
    """

    summary: pd.DataFrame
    per_split: pd.DataFrame
    held_out: pd.DataFrame
    skipped: dict[str, str]
    config: EvaluationConfig
    n_answers: int
    skipped_splits: int = 0
    methods: list[str] = field(default_factory=list)
    accuracy: float = float("nan")  # share of correct answers (for averages: the mean over datasets)

    def table(self) -> pd.DataFrame:
        """Wide table: one row per method (in method order), ``<metric>`` and ``<metric>_std`` columns."""
        wide = self.summary.pivot(index="method", columns="metric", values="mean")
        std = self.summary.pivot(index="method", columns="metric", values="std").add_suffix("_std")
        metrics = [m for m in self.config.metrics if m in wide.columns]
        out = pd.concat([wide[metrics], std[[f"{m}_std" for m in metrics]]], axis=1)
        out = out.reindex([m for m in self.methods if m in out.index])
        out.insert(0, "family", _families(out.index.to_series()).to_numpy())
        return out

    def to_markdown(self, *, digits: int = 3) -> str:
        """The wide table as Markdown, ``mean ± std``; the best mean per metric in bold."""
        table = self.table()
        metrics = [m for m in self.config.metrics if m in table.columns]
        best = {m: METRICS[m].best(table[m]) for m in metrics}
        header = "| method | family | " + " | ".join(f"{m} {METRICS[m].arrow}" for m in metrics) + " |"
        lines = [header, "|" + "---|" * (len(metrics) + 2)]
        for method, row in table.iterrows():
            cells = []
            for m in metrics:
                text = f"{row[m]:.{digits}f} ± {row[f'{m}_std']:.{digits}f}"
                cells.append(f"**{text}**" if np.isclose(row[m], best[m]) else text)
            lines.append(f"| {method} | {row['family']} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "n_answers": self.n_answers, "accuracy": self.accuracy,
                "skipped": self.skipped,
                "skipped_splits": self.skipped_splits, "summary": self.summary.to_dict(orient="records")}


def evaluate(traces: Sequence[Trace], labels: Any, *, config: EvaluationConfig = EvaluationConfig(),
             methods: Sequence[str] | None = None, beam_logprobs: Sequence[Sequence[float]] | None = None,
             embedder: Any = None, contexts: Sequence[str] | None = None) -> EvaluationResult:
    """Run the protocol on recorded traces and 0/1 correctness labels.

    Parameters
    ----------
    traces : sequence of Trace, length n_answers
    labels : array-like of 0/1, shape (n_answers,)
        1 = the answer is correct.
    config : EvaluationConfig
    methods : sequence of str, optional
        Default: TRACE+, TRACE and every baseline whose inputs are available
        (see :func:`trace_core.registry.method_names`).
    beam_logprobs, embedder, contexts
        Inputs of the beam and semantic baselines (see :func:`trace_core.baselines.compute_baselines`).
    """
    traces = list(traces)
    surprisal, entropy = stack_traces(traces)
    return _evaluate(surprisal, entropy, labels, config=config, methods=methods, traces=traces,
                     beam_logprobs=beam_logprobs, embedder=embedder, contexts=contexts)


def evaluate_arrays(surprisal: Ragged, entropy: Ragged, labels: Any, *, config: EvaluationConfig = EvaluationConfig(),
                    methods: Sequence[str] | None = None,
                    beam_logprobs: Sequence[Sequence[float]] | None = None) -> EvaluationResult:
    """:func:`evaluate` from surprisal and entropy batches (no Trace objects; semantic baselines are skipped)."""
    return _evaluate(surprisal, entropy, labels, config=config, methods=methods, beam_logprobs=beam_logprobs)


def _evaluate(surprisal: Ragged, entropy: Ragged, labels: Any, *, config: EvaluationConfig,
              methods: Sequence[str] | None, traces: Sequence[Trace] | None = None,
              beam_logprobs: Sequence[Sequence[float]] | None = None, embedder: Any = None,
              contexts: Sequence[str] | None = None) -> EvaluationResult:
    wanted = _wanted(methods)
    check_paired(surprisal, entropy, who="every method needs")
    baseline_names = [m for m in wanted if METHODS[m].kind == "baseline"]
    baselines = baseline_scores(surprisal, entropy, names=baseline_names, traces=traces, beam_logprobs=beam_logprobs,
                                embedder=embedder, contexts=contexts) if baseline_names else None
    return _run(surprisal, entropy, labels, config=config, wanted=wanted, baselines=baselines)


def _wanted(methods: Sequence[str] | None) -> list[str]:
    if methods is None:
        return method_names()
    known = method_names(extended=True)
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {known}")
    return list(dict.fromkeys(methods))


def _splits(y: np.ndarray, config: EvaluationConfig) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(config.seed)
    n = y.shape[0]
    out = []
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
        out.append((cal, np.flatnonzero(~mask)))
    return out


def _run(surprisal: Ragged, entropy: Ragged, labels: Any, *, config: EvaluationConfig, wanted: list[str],
         baselines: Any) -> EvaluationResult:
    if not isinstance(config, EvaluationConfig):
        raise TypeError(f"`config` must be an EvaluationConfig, got {type(config).__name__}")
    n = len(surprisal)
    y = check_labels(labels, "labels", n=n, purpose="evaluation")
    scalar: dict[str, np.ndarray] = {}
    if "TRACE" in wanted:
        scalar["TRACE"] = np.exp(-_risk_from_arrays(surprisal, entropy, PAPER_CONFIG))
    skipped: dict[str, str] = {}
    if baselines is not None:
        skipped.update(baselines.skipped)
        for name in baselines.scores.columns:
            scalar[name] = baselines.scores[name].to_numpy(dtype=np.float64)
    feature_sets: dict[str, tuple[str, np.ndarray]] = {}
    for method in wanted:
        if METHODS[method].kind == "trace_plus":
            fs = METHODS[method].feature_set
            feature_sets[method] = (fs, feature_matrix_from_arrays(surprisal, entropy, feature_set=fs))
    ran = [m for m in wanted if m in scalar or m in feature_sets]
    # Each scalar score is sorted once for all splits; TRACE+'s raw score changes per split.
    rank_groups = {m: RankGroups(scalar[m]) for m in ran if m in scalar}
    ranking = [m for m in config.metrics if METRICS[m].on == "score"]
    rows: list[tuple[int, str, str, float]] = []
    held_out: pd.DataFrame | None = None
    skipped_splits = 0
    for split, (cal, ev) in enumerate(_splits(y, config)):
        if np.unique(y[cal]).shape[0] < 2 or np.unique(y[ev]).shape[0] < 2:
            skipped_splits += 1
            continue
        first = held_out is None
        if first:
            held_out = pd.DataFrame({"row": ev, "label": y[ev]})
        for method in ran:
            if method in feature_sets:
                fs, F = feature_sets[method]
                model = TracePlus(feature_set=fs).fit(F[cal], y[cal])
                raw = model.decision_function(F[ev])
                prob = _sigmoid(raw)  # TracePlus.predict_proba's function, so held-out probabilities equal it
                ranked = RankGroups(raw).ranking_metrics(y[ev]) if ranking else {}
            else:
                score = scalar[method]
                calibrator = PlattCalibrator() if config.scalar_calibrator == "platt" else IsotonicCalibrator()
                prob = calibrator.fit(score[cal], y[cal]).predict_proba(score[ev])
                raw = score[ev]
                ranked = rank_groups[method].ranking_metrics(y[ev], ev) if ranking else {}
            for metric in config.metrics:
                value = ranked[metric] if metric in ranked else _metric(metric, y[ev], prob, config)
                rows.append((split, method, metric, value))
            if first:
                held_out[method] = prob
                held_out[f"{method} score"] = raw
    if skipped_splits == config.n_splits:
        raise ValueError("every split left one class only in its calibration or evaluation part; use more answers "
                         "or `stratified=True`")
    if skipped_splits:
        warnings.warn(f"{skipped_splits} of {config.n_splits} splits skipped: one class only in the calibration or "
                      "evaluation part (use stratified=True to avoid this)", stacklevel=2)
    per_split = pd.DataFrame(rows, columns=["split", "method", "metric", "value"])
    per_split.insert(2, "family", _families(per_split["method"]))
    return EvaluationResult(summary=_summary(per_split), per_split=per_split, held_out=held_out, skipped=skipped,
                            config=config, n_answers=n, skipped_splits=skipped_splits, methods=ran,
                            accuracy=float(y.mean()))


def _summary(per_split: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation (ddof 1; 0 for one split) over splits, per method and metric."""
    grouped = per_split.groupby(["method", "metric"], sort=False)["value"]
    summary = grouped.agg(mean="mean", std=lambda v: float(np.std(v, ddof=1)) if len(v) > 1 else 0.0,
                          n_splits="count").reset_index()
    summary.insert(1, "family", _families(summary["method"]))
    return summary


def _metric(name: str, y: np.ndarray, prob: np.ndarray, config: EvaluationConfig) -> float:
    if name == "brier":
        return brier_score(y, prob)
    return expected_calibration_error(y, prob, n_bins=config.n_bins)


def average_results(results: Sequence[EvaluationResult]) -> EvaluationResult:
    """Average several datasets' results (e.g. task families), as the paper averages over datasets.

    For each split index, method and metric the values are averaged over the datasets; the mean and standard deviation
    are then taken over splits. Only methods present in every result are kept.
    """
    results = list(results)
    if not results:
        raise ValueError("`results` is empty")
    common = [m for m in results[0].methods if all(m in r.methods for r in results)]
    frames = [r.per_split[r.per_split["method"].isin(common)] for r in results]
    per_split = (pd.concat(frames).groupby(["split", "method", "family", "metric"], sort=False)["value"]
                 .agg(["mean", "count"]).reset_index())
    per_split = per_split[per_split["count"] == len(results)].drop(columns="count").rename(columns={"mean": "value"})
    skipped: dict[str, str] = {}
    for r in results:
        skipped.update(r.skipped)
    return EvaluationResult(summary=_summary(per_split), per_split=per_split, held_out=pd.DataFrame(), skipped=skipped,
                            config=results[0].config, n_answers=sum(r.n_answers for r in results),
                            skipped_splits=max(r.skipped_splits for r in results), methods=common,
                            accuracy=float(np.mean([r.accuracy for r in results])))
