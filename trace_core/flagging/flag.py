"""Flagging low-confidence answers: score rows with a calibrator and pick the ones to review.

Three ways to choose: a probability ``threshold`` (flag answers less likely than that to be correct), a ``coverage``
(keep the most confident share, flag the rest), or a ``target_risk`` (keep as many answers as possible while the
error rate among the kept ones, measured on labeled data, stays at or below the target).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from trace_core.calibration.calibrators import (
    CALIBRATOR_WORDS,
    ScoreCalibrator,
    TracePlus,
    flaggable_methods,
    probability_correct,
    unfitted_copy,
)
from trace_core.checks import check_choice, check_int, check_real, shorten
from trace_core.evaluation.splits import OUT_OF_FOLD, stratified_folds
from trace_core.methods.registry import METHODS
from trace_core.methods.risk import config_for, explain_trace, trace_confidence, trace_risk
from trace_core.methods.spans import SpanCalibrator, completing_token_of, default_span_calibrator, riskiest_span
from trace_core.traces.table import as_traces, gather
from trace_core.traces.trace import Trace

__all__ = ["FLAG_BY", "OUT_OF_FOLD", "OUTPUT_COLUMNS", "SPAN_COLUMNS", "FlagScore", "best_flag_score", "flag_scores",
           "out_of_fold_probabilities", "output_collisions", "previous_export", "score_rows", "select_flagged",
           "flag_every", "flag_summary", "spike_context", "spike_groups", "threshold_for_risk", "unscored"]

#: The riskiest span's columns (:func:`trace_core.methods.spans.riskiest_span`): its text, kind, character offsets into
#: the answer's tokens' text (start inclusive, end exclusive) and the span calibrator's probability that it is right.
SPAN_COLUMNS = ("riskiest_span_text", "riskiest_span_kind", "riskiest_span_start", "riskiest_span_end",
                "riskiest_span_probability")
_ANSWER_COLUMNS = ("trace_confidence", "trace_risk", "trace_variant", "probability_correct", "peak_risk_tokens",
                   "spike_context")
#: The columns that :func:`score_rows` adds, in order.
OUTPUT_COLUMNS = _ANSWER_COLUMNS + SPAN_COLUMNS


def _column_key(name: object) -> str:
    return str(name).strip().casefold()


def output_collisions(columns: Sequence[object]) -> list[str]:
    """The input columns named like an output column of :func:`score_rows` (compared without surrounding spaces and
    case, so that no two columns of the result read alike), in input order."""
    outputs = {_column_key(c) for c in OUTPUT_COLUMNS}
    return [str(c) for c in columns if _column_key(c) in outputs]


def previous_export(columns: Sequence[object]) -> bool:
    """Whether ``columns`` hold every answer-level output column of :func:`score_rows` (exactly as it names them;
    exports made before the span columns existed lack those, and the dashboard's lacked ``spike_context``): a
    flagged export being scored again, whose earlier scores are to be replaced rather than refused as look-alikes."""
    return set(_ANSWER_COLUMNS) - {"spike_context"} <= {str(c) for c in columns}


def unscored(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without an earlier flagging's scores when it is a flagged export opened again
    (:func:`previous_export`): they are to be replaced, not refused as look-alike columns; ``frame`` otherwise."""
    if not previous_export(frame.columns):
        return frame
    return frame.drop(columns=[c for c in OUTPUT_COLUMNS if c in frame.columns])


def spike_groups(tokens: Sequence[str], spikes: Sequence[int] | np.ndarray) -> list[tuple[int, int]]:
    """The spikes as runs of tokens ``(first, last)``, ascending: a spike token without text (bytes of a character
    that a later token completes, :func:`trace_core.methods.spans.completing_token_of`) runs to that token, so that
    exports show the character it chose; a spike inside an earlier run is part of it.

    >>> spike_groups(["A", "", "\u3053", "!"], [1, 2, 3])
    [(1, 2), (3, 3)]
    """
    groups: list[tuple[int, int]] = []
    for i in sorted({int(i) for i in spikes}):
        if groups and i <= groups[-1][1]:
            continue
        owner = completing_token_of(tokens, i)  # i itself for a token with text
        groups.append((i, owner if owner >= 0 else i))
    return groups


def _group_text(tokens: Sequence[str], first: int, last: int) -> str:
    """A run's text; U+FFFD for bytes that no token completes (an answer cut inside a character)."""
    return "".join(tokens[first:last + 1]) or "\ufffd"


def spike_context(trace: Trace, spikes: Sequence[int] | np.ndarray, *, width: int = 3) -> str:
    """The spike tokens in context: ``…the capital is [[Parus]] .…`` (plain text, for tables and exports).

    Each spike is shown with up to ``width`` tokens either side; ``…`` marks the tokens left out. A spike without
    text is marked with the character it begins (:func:`spike_groups`). An answer without spikes (nothing stood out,
    see :func:`trace_core.methods.risk.spike_indices`) gives ``""``: an empty cell says that no token was marked, where
    the answer's start would suggest a mark that is not there.
    """
    width = check_int(width, "width", minimum=0)
    if len(trace) == 0 or not len(spikes):
        return ""
    groups = spike_groups(trace.tokens, spikes)
    ends = dict(groups)
    pieces, last = [], -1
    for first, end in groups:
        lo, hi = max(0, first - width), min(len(trace), end + width + 1)
        if lo > last + 1:
            pieces.append("…")
        j = max(lo, last + 1)
        while j < hi:
            if j in ends:
                pieces.append(f"[[{_group_text(trace.tokens, j, ends[j])}]]")
                hi, j = max(hi, min(len(trace), ends[j] + width + 1)), ends[j] + 1
            else:
                pieces.append(trace.tokens[j])
                j += 1
        last = max(last, hi - 1)
    if last < len(trace) - 1:
        pieces.append("…")
    return "".join(pieces).replace("\n", "⏎")


def score_rows(frame: pd.DataFrame, traces: Sequence[Trace], calibrator: Any, *,
               span_calibrator: SpanCalibrator | None = None) -> pd.DataFrame:
    """``frame`` plus ``trace_confidence``, ``trace_risk``, ``trace_variant``, ``probability_correct``,
    ``peak_risk_tokens`` and ``spike_context`` columns, then the riskiest span's (:data:`SPAN_COLUMNS`), one row per
    trace, same order. ``peak_risk_tokens`` joins the spike tokens
    (:attr:`trace_core.methods.risk.TraceExplanation.spikes`) with ``" | "``; both are ``""`` for an answer without
    spikes. The riskiest span is the answer's riskiest date, number or name, else its riskiest sentence
    (:func:`trace_core.methods.spans.riskiest_span`), ranked by ``span_calibrator``'s probability that it is right
    (default: :func:`trace_core.methods.spans.default_span_calibrator`).

    ``calibrator`` is a :class:`TracePlus` (uses the trace features), a :class:`ScoreCalibrator` (the score it names,
    e.g. SeqLogP with isotonic regression) or a bare scalar calibrator (applied to the TRACE confidence); see
    :func:`trace_core.calibration.calibrators.probability_correct`. When some trace has no entropy, TRACE is its
    surprisal-only variant for every row (:func:`trace_core.methods.risk.config_for`), and ``trace_variant`` says so.

    Raises ValueError when ``frame`` already has a column named like one of these outputs (:data:`OUTPUT_COLUMNS`,
    compared without surrounding spaces and case): its values would be silently replaced or shown next to a
    look-alike. Rename or drop such columns first.
    """
    taken = output_collisions(list(frame.columns))
    if taken:
        raise ValueError(f"the input already has column(s) {', '.join(shorten(c) for c in taken)}, named like the "
                         "output of flagging; rename or drop them so that they are not overwritten")
    traces = list(traces)
    if len(traces) != len(frame):
        raise ValueError(f"got {len(traces)} traces for {len(frame)} rows")
    empty = [i for i, t in enumerate(traces) if len(t) == 0]
    if empty:
        raise ValueError(f"row {empty[0] + 1} has an empty answer (no tokens); remove it or record it again")
    config = config_for(traces)  # one variant for all rows, so their confidences compare
    confidence = trace_confidence(traces, config=config)
    probability = probability_correct(calibrator, traces, confidence=confidence)
    explanations = [explain_trace(t, config=config) for t in traces]
    out = frame.copy()
    out["trace_confidence"] = confidence
    out["trace_risk"] = trace_risk(traces, config=config)
    out["trace_variant"] = config.variant
    out["probability_correct"] = probability
    out["peak_risk_tokens"] = [" | ".join(_group_text(t.tokens, a, b) for a, b in spike_groups(t.tokens, e.spikes))
                               for t, e in zip(traces, explanations, strict=True)]
    out["spike_context"] = [spike_context(t, e.spikes) for t, e in zip(traces, explanations, strict=True)]
    span_calibrator = default_span_calibrator() if span_calibrator is None else span_calibrator
    spans = [riskiest_span(t, calibrator=span_calibrator, explanation=e)
             for t, e in zip(traces, explanations, strict=True)]
    out["riskiest_span_text"] = [r.span.text if r is not None else "" for r in spans]
    out["riskiest_span_kind"] = [r.kind if r is not None else "" for r in spans]
    out["riskiest_span_start"] = np.array([r.span.start if r is not None else -1 for r in spans], dtype=np.int64)
    out["riskiest_span_end"] = np.array([r.span.end if r is not None else -1 for r in spans], dtype=np.int64)
    out["riskiest_span_probability"] = np.array([r.probability if r is not None else np.nan for r in spans],
                                                dtype=np.float64)
    return out


@dataclass(frozen=True)
class FlagScore:
    """A calibrated score to flag with: TRACE+ on a feature set (``calibrator`` "logistic", its own logistic
    regression), or TRACE or a baseline with ``calibrator`` "platt" or "isotonic".

    Attributes
    ----------
    method : str
        The method's name in the comparison (:data:`trace_core.methods.registry.METHODS`).
    calibrator : {"logistic", "platt", "isotonic"}
    brier : float
        Its mean Brier score on the comparison's held-out parts; NaN when it was not in the comparison.
    """

    method: str
    calibrator: str
    brier: float = float("nan")

    @property
    def name(self) -> str:
        """``"TRACE+"``, ``"SeqLogP with isotonic regression"``."""
        return self.method if self.calibrator == "logistic" else (
            f"{self.method} with {CALIBRATOR_WORDS[self.calibrator]}")

    def calibrator_model(self) -> TracePlus | ScoreCalibrator:
        """The unfitted calibrator of this score."""
        if self.calibrator == "logistic":
            return TracePlus(feature_set=METHODS[self.method].feature_set or "paper")
        return ScoreCalibrator(method=self.method, calibrator=self.calibrator)


def flag_scores(result: Any) -> list[FlagScore]:
    """The scores an :class:`~trace_core.evaluation.run.EvaluationResult`'s answers can be flagged with, each with its
    mean held-out Brier: the TRACE+ variants and the scalar methods of
    :func:`trace_core.calibration.calibrators.flaggable_methods` that ran and were informative (each scalar one with
    Platt scaling and with isotonic regression), then the TRACE+ feature sets the comparison did not run (Brier NaN;
    only the surprisal set on data without entropy). The fitted baselines (CES, WEPR, trace profile), the beam and
    semantic baselines and the supervised reference are not among them."""
    summary = result.summary
    brier = summary[(summary["metric"] == "brier") & ~summary["uninformative"]]
    means = {(m, c): float(v) for m, c, v in zip(brier["method"], brier["calibrator"], brier["mean"], strict=True)}
    scalar = set(flaggable_methods())
    out: list[FlagScore] = []
    for method in result.methods:
        spec = METHODS[method]
        if spec.kind == "trace_plus" and (method, "logistic") in means:
            out.append(FlagScore(method, "logistic", means[method, "logistic"]))
        elif method in scalar:
            out += [FlagScore(method, c, means[method, c]) for c in ("platt", "isotonic") if (method, c) in means]
    ran = {s.method for s in out}
    no_entropy = "TRACE+ (surprisal-only)" in result.methods
    out += [FlagScore(m.name, "logistic") for m in METHODS.values() if m.kind == "trace_plus" and m.name not in ran
            and (m.feature_set == "surprisal" or not no_entropy)]
    return out


def best_flag_score(scores: Sequence[FlagScore]) -> FlagScore | None:
    """The score with the lowest held-out Brier (the first listed on a tie; TRACE+ is listed first); None when none
    was compared. Brier rewards both ranking the answers and stating calibrated probabilities, which is what a
    threshold on P(correct) needs."""
    compared = [s for s in scores if np.isfinite(s.brier)]
    return min(compared, key=lambda s: s.brier) if compared else None


def out_of_fold_probabilities(traces: Sequence[Trace], labels: Any, calibrator: TracePlus | ScoreCalibrator, *,
                              folds: int = OUT_OF_FOLD) -> np.ndarray:
    """Each answer's probability of being correct from a calibrator fitted *without* it: the answers are cut into
    ``folds`` parts (stratified by label, in row order) and each part is scored by a calibrator of ``calibrator``'s
    kind and settings (TRACE+'s feature set and C; a ScoreCalibrator's method and calibrator) fitted on the other
    parts. Error rates measured with these are honest estimates for new answers; measured with ``calibrator`` fitted
    on these very answers, they flatter it. A part whose complement holds one class only is scored by ``calibrator``
    itself.
    """
    folds = check_int(folds, "folds", minimum=2)
    traces = as_traces(traces)
    y = np.asarray(labels).astype(np.int64)
    if y.shape != (len(traces),):
        raise ValueError(f"got {y.shape[0] if y.ndim else 0} labels for {len(traces)} answers")
    fold = stratified_folds(y, folds)
    out = np.empty(len(traces))
    for k in range(folds):
        held = np.flatnonzero(fold == k)
        if not held.size:
            continue
        rest = np.flatnonzero(fold != k)
        part = gather(traces, held)
        if np.unique(y[rest]).shape[0] < 2:
            out[held] = calibrator.predict_proba(part)
            continue
        model = unfitted_copy(calibrator).fit(gather(traces, rest), y[rest])
        out[held] = model.predict_proba(part)
    return out


def threshold_for_risk(probability: np.ndarray, labels: np.ndarray, target_risk: float) -> float:
    """The lowest probability threshold whose kept answers (probability >= threshold) have an error rate
    <= ``target_risk`` on these labeled answers; ``inf`` (keep nothing) when no threshold achieves it."""
    target_risk = check_real(target_risk, "target_risk", minimum=0, maximum=1)
    p = np.asarray(probability, dtype=np.float64)
    y = np.asarray(labels)
    order = np.argsort(-p, kind="stable")
    errors = np.cumsum(1 - y[order])
    kept = np.arange(1, len(p) + 1)
    # Only cut between different probabilities, so that a threshold keeps exactly that prefix.
    boundary = np.append(p[order][1:] < p[order][:-1], True)
    ok = (errors / kept <= target_risk + 1e-12) & boundary
    if not ok.any():
        return float("inf")
    return float(p[order][np.flatnonzero(ok)[-1]])


def flag_summary(flagged: np.ndarray, probability: np.ndarray, labels: np.ndarray | None) -> str:
    """What the flagged and the kept answers are like, in words (as the Flag page shows it): with 0/1 ``labels``,
    each side's error rate by them; without, the kept answers' mean probability of being correct. ``flagged``: a
    boolean per answer; ``probability``: each answer's probability of being correct.

    >>> flag_summary(np.array([True, False, False]), np.array([0.2, 0.9, 0.7]), np.array([0, 1, 0]))
    'error rate by the labels: 50.0% among the 2 kept, 100.0% among the 1 flagged'
    >>> flag_summary(np.array([True, False, False]), np.array([0.2, 0.9, 0.7]), None)
    'mean P(correct) of the 2 kept: 80.0%'
    """
    flagged = np.asarray(flagged, dtype=bool)
    kept = ~flagged
    if labels is None:
        if not kept.any():
            return "none kept"
        return f"mean P(correct) of the {int(kept.sum()):,} kept: {float(np.mean(probability[kept])):.1%}"
    y = np.asarray(labels, dtype=np.float64)
    sides = [f"{1 - float(y[side].mean()):.1%} among the {int(side.sum()):,} {name}"
             for name, side in (("kept", kept), ("flagged", flagged)) if side.any()]
    return "error rate by the labels: " + ", ".join(sides)


#: What :func:`select_flagged` can flag by: the answer's probability of being correct, or its riskiest span's.
FLAG_BY = {"answer": "probability_correct", "span": "riskiest_span_probability"}


def select_flagged(scored: pd.DataFrame, *, threshold: float | None = None, coverage: float | None = None,
                   target_risk: float | None = None, labels: np.ndarray | None = None,
                   by: str = "answer") -> pd.DataFrame:
    """The rows of ``scored`` (from :func:`score_rows`) to flag, least likely to be correct first.

    Give exactly one of ``threshold`` (in [0, 1]), ``coverage`` (in (0, 1]) or ``target_risk`` (in [0, 1], needs
    ``labels``). ``by="span"`` applies the rule to the riskiest span's probability of being right instead of the
    answer's (an answer is flagged when its weakest span is; ``target_risk`` still counts wrong answers).
    """
    column = FLAG_BY[check_choice(by, "by", tuple(FLAG_BY))]
    given = [v is not None for v in (threshold, coverage, target_risk)]
    if sum(given) != 1:
        raise ValueError("give exactly one of `threshold`, `coverage` or `target_risk`")
    p = scored[column].to_numpy(dtype=np.float64)
    p = np.where(np.isnan(p), 1.0, p)  # an answer without a span has no weak span
    if coverage is not None:
        coverage = check_real(coverage, "coverage", minimum=0, maximum=1, low_open=True)
        keep = int(np.ceil(coverage * len(p) - 1e-9))
        flagged = np.ones(len(p), dtype=bool)
        flagged[np.argsort(-p, kind="stable")[:keep]] = False
    else:
        if target_risk is not None:
            if labels is None:
                raise ValueError("`target_risk` needs the answers' `labels` to measure the risk")
            threshold = threshold_for_risk(p, labels, target_risk)
        else:
            threshold = check_real(threshold, "threshold", minimum=0, maximum=1)
        flagged = p < threshold
    order = np.argsort(p[flagged], kind="stable")
    return scored[flagged].iloc[order]


def flag_every(scored: pd.DataFrame) -> pd.DataFrame:
    """Every row of ``scored`` (from :func:`score_rows`), least likely to be correct first, as
    :func:`select_flagged` orders them: what a guarantee that certifies no threshold flags (keeping none is the only
    choice it guarantees)."""
    p = scored[FLAG_BY["answer"]].to_numpy(dtype=np.float64)
    return scored.iloc[np.argsort(np.where(np.isnan(p), 1.0, p), kind="stable")]
