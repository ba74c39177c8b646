"""The 2025–26 single-pass baselines: EPR (a scalar score) and the three fitted on each calibration part (CES, WEPR
and the uncertainty trace profile), described once in :data:`FITTED_BASELINES`.

With ``H_t`` the entropy of step t, ``p_t`` the chosen token's probability, ``T`` the answer's length and
``c_{t,k} = -q_{t,k} log q_{t,k}`` the entropy contribution of the k-th most likely of the K alternatives stored at
step t (``q`` their probabilities, not renormalised):

EPR (entropy production rate; Moslonka et al. 2025, arXiv 2509.04492; :data:`trace_core.methods.baselines.BASELINES`)
    ``-mean_t sum_{k<=K} c_{t,k}``: minus the mean over the answer of the top-K entropy contributions. Unsupervised.
    K is the smallest number of alternatives any answer of the data stores, so every answer is scored on the same K
    (the paper uses up to the 10–15 an API returns).
WEPR (weighted EPR; same paper)
    A logistic regression on the 2K features ``mean_t c_{t,k}`` and ``max_t c_{t,k}`` for k = 1..K: the paper's
    sequence score, a learned weight per rank on the mean and on the maximum contribution.
CES (Calibrated Entropy Score; Villani et al. 2026, arXiv 2605.28264)
    The paper combines the mean and the maximum of an answer's token entropies through a reference CDF estimated
    on faithful answers. Its exact combination was not available to us; we use the two empirical CDFs
    ``F_mean`` and ``F_max`` of ``mean_t H_t`` and ``max_t H_t`` over the *correct* answers of the calibration part,
    and the confidence ``1 - (F_mean(mean_t H_t) + F_max(max_t H_t)) / 2`` (1: less uncertain than every correct
    reference answer on both). It ranks by that confidence; its probability is a logistic fit of it (Platt scaling
    with TRACE+'s regularisation) on the same calibration part.
Trace Profile (uncertainty trace profile; Grünefeld, Højer et al. 2026, arXiv 2605.07776)
    A logistic regression on the shape of each per-token uncertainty series: its early, middle and late means
    (token t of T is in third ``floor(3 t / T)``; an empty third, T < 3, takes the answer's mean), its least-squares
    slope over relative position ``t / (T - 1)`` (0 when T < 2) and its linearity R² (0 when T < 3 or the series is
    constant). The series are the paper's two single-pass ones for the generated tokens: the distributional
    uncertainty ``H_t`` (when the data hold entropy) and the committal uncertainty ``p_t (1 - p_t)``; the paper's
    epistemic (gradient) series and its answer channel need extra passes and are left out.

The fitted ones are fitted like TRACE+ and the supervised reference (standardised features, the same L2 logistic
regression with C = 1) on each split's calibration part and measured on its evaluation part. They join the
best-baseline choice with *out-of-fold* values on the calibration part (5 folds, see :mod:`trace_core.evaluation.run`):
in-sample, a model fitted on the part would look better there than it is and win the choice against scalar
baselines that predict the evaluation part better.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from trace_core.methods.logistic import StandardisedLogistic, standardised_logistic
from trace_core.methods.operators import segment_max, segment_mean, segment_var, slope
from trace_core.traces.ragged import Ragged
from trace_core.traces.table import TraceTable
from trace_core.traces.trace import Trace

__all__ = ["FITTED_BASELINES", "FitBaseline", "Fitted", "FittedBaseline", "TOP_K_NEEDS", "TopK", "ces_confidence",
           "entropy_contributions", "epr_confidence", "feature_ranks", "stack_top_logprobs",
           "TopKPlan", "trace_profile_features", "wepr_features"]

#: What the top-k baselines need, and why they are skipped without it.
TOP_K_NEEDS = "each token's top-k log-probabilities (at least 2 alternatives per token in every answer)"
#: The fewest alternatives per token EPR and WEPR read.
MIN_ALTERNATIVES = 2


@dataclass(frozen=True)
class TopK:
    """Every answer's top-K log-probabilities, one row per token (rows in the order of the surprisal batch), sorted
    most likely first; K is the smallest number of alternatives any answer stores."""

    logprobs: np.ndarray  # (n_tokens, K)

    @property
    def k(self) -> int:
        return int(self.logprobs.shape[1])


@dataclass(frozen=True)
class TopKPlan:
    """How many alternatives per token the top-k baselines read on some answers: the fewest any of them stores
    (``k``), with the number of answers that store fewer than :data:`MIN_ALTERNATIVES` (``short``) of ``n``. Plans of
    parts of the answers (chunks, shards) put together (:meth:`merge`) give the plan of the whole, so that every part
    reads the same ``k`` as one pass over the whole would."""

    k: int
    short: int
    n: int

    @classmethod
    def of(cls, traces: Sequence[Trace]) -> TopKPlan:
        if isinstance(traces, TraceTable):
            ks = traces.top_k
        else:
            ks = np.array([t.top_logprobs.shape[1] for t in traces], dtype=np.int64)
        if not ks.shape[0]:
            return cls(k=0, short=0, n=0)
        return cls(k=int(ks.min()), short=int(np.count_nonzero(ks < MIN_ALTERNATIVES)), n=int(ks.shape[0]))

    @classmethod
    def merge(cls, plans: Sequence[TopKPlan]) -> TopKPlan:
        plans = [p for p in plans if p.n]
        if not plans:
            return cls(k=0, short=0, n=0)
        return cls(k=min(p.k for p in plans), short=sum(p.short for p in plans), n=sum(p.n for p in plans))

    @property
    def reason(self) -> str:
        """Why the top-k baselines cannot run on these answers ("" when they can)."""
        if not self.n:
            return f"needs {TOP_K_NEEDS}"
        if self.k < MIN_ALTERNATIVES:
            return f"needs {TOP_K_NEEDS}; {self.short:,} of {self.n:,} answers store fewer"
        return ""


def stack_top_logprobs(traces: Sequence[Trace], *, plan: TopKPlan | None = None) -> tuple[TopK | None, str]:
    """The traces' top-k log-probabilities as one :class:`TopK`, or None and the reason (fewer than
    :data:`MIN_ALTERNATIVES` stored for some answer). ``plan``: the plan of a whole these traces are part of
    (:class:`TopKPlan`), whose ``k`` (and reason) they follow; default: their own."""
    plan = TopKPlan.of(traces) if plan is None else plan
    if plan.reason:
        return None, plan.reason
    table = traces if isinstance(traces, TraceTable) else None
    rows: Sequence[Trace] = table if table is not None else list(traces)
    k = plan.k
    if table is not None and int(table.top_k.min()) == int(table.top_k.max()):
        # one k: the table's alternatives are already (tokens, k) rows, cut to the plan's k after sorting
        stored = int(table.top_k.max())
        ordered = -np.sort(-table.top_logprobs.reshape(-1, stored), axis=1)
        return TopK(ordered if stored == k else np.ascontiguousarray(ordered[:, :k])), ""
    # each answer's alternatives most likely first, cut to the k every answer has
    return TopK(np.concatenate([-np.sort(-t.top_logprobs, axis=1)[:, :k] for t in rows])), ""


def entropy_contributions(logprobs: np.ndarray) -> np.ndarray:
    """``-q log q`` of each alternative (``q = exp(logprob)``), same shape; 0 where q is 0 (log-prob -inf).

    Examples
    --------
    >>> entropy_contributions(np.log([[0.5, 0.25]])).round(4).tolist()
    [[0.3466, 0.3466]]
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    q = np.exp(lp)
    with np.errstate(invalid="ignore"):
        out = -q * lp
    return np.where(q > 0, out, 0.0)


def epr_confidence(surprisal: Ragged, top: TopK) -> np.ndarray:
    """EPR as a confidence: ``-mean_t sum_k c_{t,k}`` per answer (see the module docstring)."""
    per_token = entropy_contributions(top.logprobs).sum(axis=1)
    return -np.asarray(segment_mean(surprisal.with_values(per_token)), dtype=np.float64)


def wepr_features(surprisal: Ragged, top: TopK) -> np.ndarray:
    """WEPR's 2K features per answer: ``mean_t c_{t,k}`` for k = 1..K, then ``max_t c_{t,k}``."""
    c = entropy_contributions(top.logprobs)
    means = [np.asarray(segment_mean(surprisal.with_values(np.ascontiguousarray(c[:, k])))) for k in range(top.k)]
    maxes = [np.asarray(segment_max(surprisal.with_values(np.ascontiguousarray(c[:, k])))) for k in range(top.k)]
    return np.column_stack(means + maxes)


def _wepr_from(surprisal: Ragged, entropy: Ragged | None, top: TopK | None) -> np.ndarray:
    """:func:`wepr_features` as a baseline's ``features``: the protocol skips WEPR when no top-k is stacked."""
    if top is None:
        raise ValueError(f"WEPR {TOP_K_NEEDS}")
    return wepr_features(surprisal, top)


def _profile(series: Ragged) -> list[np.ndarray]:
    """Early, middle and late means, slope over relative position and R² of each answer's series."""
    lengths = series.lengths
    T = lengths.astype(np.float64)
    whole = np.asarray(segment_mean(series))
    # third j of an answer holds positions ceil(j T / 3) .. ceil((j + 1) T / 3) - 1: t with floor(3 t / T) = j
    starts = series.offsets[:-1, None] + (np.arange(3)[None, :] * lengths[:, None] + 2) // 3
    counts = np.diff(np.column_stack([starts, series.offsets[1:]]), axis=1)
    padded = np.append(series.values.astype(np.float64), 0.0)  # a third that starts at the very end reads the pad
    sums = np.add.reduceat(padded, starts.ravel()).reshape(-1, 3)
    thirds = np.where(counts > 0, sums / np.maximum(counts, 1), whole[:, None])
    per_step = np.asarray(slope(series))  # least squares over t = 0..T-1; 0 when T < 2
    var = np.asarray(segment_var(series))  # population variance
    # R² = slope² sum (t - mean t)² / sum (x - mean x)², with sum (t - mean t)² = T (T² - 1) / 12
    ok = (lengths >= 3) & (var > 1e-300)
    r2 = np.where(ok, per_step ** 2 * (T ** 2 - 1) / (12.0 * np.where(ok, var, 1.0)), 0.0)
    return [thirds[:, 0], thirds[:, 1], thirds[:, 2], per_step * np.maximum(T - 1, 0), np.minimum(r2, 1.0)]


def trace_profile_features(surprisal: Ragged, entropy: Ragged | None) -> np.ndarray:
    """The uncertainty trace profile: 5 features of ``p_t (1 - p_t)``, then 5 of ``H_t`` when ``entropy`` is given
    (early, middle, late mean, slope, R²; see the module docstring)."""
    p = np.exp(-surprisal.values)
    columns = _profile(surprisal.with_values(p * (1.0 - p)))
    if entropy is not None:
        columns += _profile(entropy)
    return np.column_stack(columns)


def _ecdf(ascending: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Share of the reference values (``ascending``, sorted) <= each ``x``."""
    return np.searchsorted(ascending, x, side="right") / ascending.shape[0]


def ces_confidence(F: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """CES confidence of answers with features ``F`` (columns ``mean_t H_t``, ``max_t H_t``) against the reference
    answers' features: ``1 - (F_mean + F_max) / 2`` (see the module docstring).

    Examples
    --------
    >>> reference = np.array([[0.1, 0.5], [0.2, 1.0], [0.3, 2.0], [0.4, 3.0]])
    >>> ces_confidence(np.array([[0.05, 0.4], [0.25, 2.5], [0.9, 9.0]]), reference).tolist()
    [1.0, 0.375, 0.0]
    """
    return _ces_of_sorted(F, np.sort(reference, axis=0))


def _ces_of_sorted(F: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    """:func:`ces_confidence` against reference features already sorted column by column."""
    return 1.0 - 0.5 * (_ecdf(ascending[:, 0], F[:, 0]) + _ecdf(ascending[:, 1], F[:, 1]))


def ces_features(surprisal: Ragged, entropy: Ragged | None) -> np.ndarray:
    """CES's inputs per answer: ``mean_t H_t`` and ``max_t H_t``."""
    assert entropy is not None  # CES needs entropy; the protocol skips it on data without
    return np.column_stack([np.asarray(segment_mean(entropy)), np.asarray(segment_max(entropy))])


class Fitted(Protocol):
    """A fitted baseline on one calibration part: ``score`` ranks answers (higher = more likely correct) and
    ``log_odds`` maps those scores to the log-odds of being correct (so the score is computed once per part)."""

    def score(self, F: np.ndarray) -> np.ndarray: ...

    def log_odds(self, score: np.ndarray) -> np.ndarray: ...


class FitBaseline(Protocol):
    """How a fitted baseline is fitted on a calibration part: ``near``, a fit of the same baseline on other rows of
    the same answers (the whole part, for a fit on some of its folds), may serve as a start; the fit is the same."""

    def __call__(self, F: np.ndarray, y: np.ndarray, near: Fitted | None = None) -> Fitted: ...


@dataclass(frozen=True)
class _Logistic:
    decision: StandardisedLogistic

    def score(self, F: np.ndarray) -> np.ndarray:
        return self.decision(F)

    def log_odds(self, score: np.ndarray) -> np.ndarray:
        return score


def _fit_logistic_baseline(F: np.ndarray, y: np.ndarray, near: Fitted | None = None) -> Fitted:
    return _Logistic(standardised_logistic(F, y, near=near.decision if isinstance(near, _Logistic) else None))


def feature_ranks(F: np.ndarray) -> np.ndarray:
    """Each column's dense ranks (0 for its smallest value, equal values equal ranks), int64: a baseline that reads
    only the order of its features (``FittedBaseline.order_only``) gives the same scores on them, and CES then
    counts instead of searching (:func:`_fit_ces`)."""
    return np.column_stack([np.unique(F[:, j], return_inverse=True)[1].reshape(-1) for j in range(F.shape[1])])


def _counts_at_or_below(reference: np.ndarray) -> np.ndarray:
    """For ranks (int64 >= 0): the number of ``reference`` values at or below each rank 0 .. max(reference)."""
    return np.cumsum(np.bincount(reference))


def _ecdf_of_counts(counts: np.ndarray, x: np.ndarray) -> np.ndarray:
    """:func:`_ecdf` for ranks, from :func:`_counts_at_or_below` of the reference (ranks above its largest see all)."""
    return counts[np.minimum(x, counts.shape[0] - 1)] / counts[-1]


#: CES's reference answers as one fit keeps them: their features with each column sorted, or for ranks each
#: column's counts at or below every rank.
_Reference = np.ndarray | tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class _CES:
    reference: _Reference
    platt: StandardisedLogistic

    def score(self, F: np.ndarray) -> np.ndarray:
        return _ces_of_reference(F, self.reference)

    def log_odds(self, score: np.ndarray) -> np.ndarray:
        return self.platt(score[:, None])


def _ces_of_reference(F: np.ndarray, reference: _Reference) -> np.ndarray:
    """:func:`_ces_of_sorted`, or on ranks from the reference's counts: the same values, one gather per column
    instead of a binary search per answer."""
    if not isinstance(reference, tuple):
        return _ces_of_sorted(F, reference)
    return 1.0 - 0.5 * (_ecdf_of_counts(reference[0], F[:, 0]) + _ecdf_of_counts(reference[1], F[:, 1]))


def _fit_ces(F: np.ndarray, y: np.ndarray, near: Fitted | None = None) -> Fitted:
    """CES on one calibration part; on integer features (ranks, :func:`feature_ranks`) the reference CDFs are
    cumulative counts."""
    reference = F[y == 1]
    if reference.shape[0] == 0:  # the protocol skips splits with one class; a direct caller gets a clear error
        raise ValueError("CES needs correct answers in the calibration part for its reference CDF")
    kept: _Reference
    if np.issubdtype(F.dtype, np.integer):
        kept = (_counts_at_or_below(reference[:, 0]), _counts_at_or_below(reference[:, 1]))
    else:
        kept = np.sort(reference, axis=0)
    confidence = _ces_of_reference(F, kept)
    platt = standardised_logistic(confidence[:, None], y, near=near.platt if isinstance(near, _CES) else None)
    return _CES(kept, platt)


@dataclass(frozen=True)
class FittedBaseline:
    """One baseline fitted on each calibration part.

    Attributes
    ----------
    name, family, formula, source : str
        Display name, family, the score in one line, the paper (arXiv id).
    needs : str
        ``"trace"`` or ``"top_k"`` (each token's top-k log-probabilities, :data:`TOP_K_NEEDS`).
    needs_entropy : bool
        Skipped on data without entropy.
    features : callable
        ``features(surprisal, entropy, top) -> ndarray (n_answers, n_features)``.
    fit : callable
        ``fit(F_cal, y_cal, near=None) -> Fitted`` (:class:`FitBaseline`).
    order_only : bool
        Reads only the order of each feature: its scores are the same on :func:`feature_ranks`, which the protocol
        passes instead (CES).
    """

    name: str
    family: str
    needs: str
    needs_entropy: bool
    formula: str
    source: str
    features: Callable[[Ragged, Ragged | None, TopK | None], np.ndarray] = field(repr=False, compare=False)
    fit: FitBaseline = field(repr=False, compare=False)
    order_only: bool = False


_LIST = [
    FittedBaseline("CES", "entropy", "trace", True,
                   "1 - (F_mean(mean H) + F_max(max H)) / 2, CDFs of the calibration part's correct answers",
                   "arXiv 2605.28264", lambda s, h, top: ces_features(s, h), _fit_ces, order_only=True),
    FittedBaseline("WEPR", "top-k", "top_k", False, "logistic on mean_t c_{t,k} and max_t c_{t,k}, k = 1..K",
                   "arXiv 2509.04492", _wepr_from, _fit_logistic_baseline),
    FittedBaseline("Trace Profile", "trajectory", "trace", False,
                   "logistic on early/middle/late mean, slope and R² of p(1 - p) and of H",
                   "arXiv 2605.07776", lambda s, h, top: trace_profile_features(s, h), _fit_logistic_baseline),
]

FITTED_BASELINES: dict[str, FittedBaseline] = {b.name: b for b in _LIST}
