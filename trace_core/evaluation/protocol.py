"""The protocol's split loop: every method fitted on each split's calibration part and measured on its evaluation
part, on the same answers (:func:`trace_core.evaluation.run.evaluate` prepares the scores and calls :func:`run_splits`).

The splits are drawn once (:class:`~trace_core.evaluation.splits.Splits`); then each method runs over all of them, and
what it keeps for them is made when its run starts and dropped when it ends, so that the memory holds one method's state
at a time (per thread), not every method's. Each scalar score is sorted once (:class:`Ascending`) and every split's
parts are taken in that order: the isotonic fit and prediction, the ECE bins (runs of the order) and the rankings (tie
groups that are runs) need no sort per split. Methods with their own fitted model (TRACE+, the fitted baselines, the
reference) are fitted per split. From :data:`THREADS_FROM` answers the methods run on threads (numpy releases the GIL in
the bulk of the work), with BLAS on one thread meanwhile.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from trace_core.calibration.calibrators import IsotonicCalibrator, PlattCalibrator, TracePlus
from trace_core.evaluation.paired import FITTED, RAW
from trace_core.evaluation.results import (
    CONSTANT_RTOL,
    SCALAR_CALIBRATORS,
    UNINFORMATIVE,
    HeldOut,
    HeldOutMethod,
    SplitValue,
)
from trace_core.evaluation.splits import (
    OUT_OF_FOLD,
    Part,
    Splits,
    both_classes,
    draw_splits,
    iter_splits,
    split_group_codes,
    stratified_folds,
)
from trace_core.methods.fitted_baselines import FitBaseline, Fitted, feature_ranks
from trace_core.methods.logistic import (
    StandardisedLogistic,
    fit_logistic_1d,
    sigmoid,
    standardised_logistic,
    standardised_logistic_rows,
    transform_scores,
)
from trace_core.methods.registry import METHODS, METRICS, Method
from trace_core.metrics import RankGroups
from trace_core.metrics.kernels import (
    RADIX_FROM,
    brier_and_ece_of_monotone,
    brier_kernel,
    compiled,
    ece_of_ascending,
    ranking_of_groups,
    stable_argsort,
)

if TYPE_CHECKING:  # pragma: no cover
    from trace_core.evaluation.run import EvaluationConfig

__all__ = ["MAX_WORKERS", "OUT_OF_FOLD", "THREADS_FROM", "Ascending", "MethodOnSplit", "Part", "SplitRun", "Splits",
           "draw_splits", "preload", "feature_set", "fit_reference", "is_constant", "iter_splits",
           "one_blas_thread", "out_of_fold", "probability_metric", "probability_metrics", "ranking_of_scores",
           "ranking_part", "run_splits", "split_ascending_loop", "split_group_codes", "stratified_folds", "take_rows",
           "workers_for"]

Progress = Callable[[int, int], None]

#: The most threads the methods run on, and the number of answers from which they do (below it one thread is
#: faster: starting threads costs more than the work they share).
MAX_WORKERS = 8
THREADS_FROM = 20_000


def workers_for(n: int, tasks: int) -> int:
    """Threads for ``tasks`` independent passes over ``n`` answers: one below :data:`THREADS_FROM` answers."""
    return min(tasks, os.cpu_count() or 1, MAX_WORKERS) if n >= THREADS_FROM else 1


def is_constant(scores: Any) -> bool:
    """True when ``scores`` cannot rank anything: fewer than 2 distinct values, or a standard deviation below
    :data:`~trace_core.evaluation.results.CONSTANT_RTOL` times the mean magnitude."""
    x = np.asarray(scores, dtype=np.float64)
    if x.size < 2 or x.min() == x.max():
        return True
    return bool(x.std() <= CONSTANT_RTOL * max(abs(float(x.mean())), np.finfo(np.float64).tiny))


def fit_reference(F: np.ndarray, y: np.ndarray, *, near: StandardisedLogistic | None = None) -> StandardisedLogistic:
    """TRACE+'s fit (standardise on the calibration part, the same L2 logistic regression with C = 1) on the
    supervised reference's features; returns the model, which gives the decision function. ``near``: a start
    (:func:`~trace_core.methods.logistic.standardised_logistic`)."""
    return standardised_logistic(F, y, near=near)


def take_rows(F: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``F[rows]`` of a column-major ``F`` (n, d), column-major too: one contiguous gather per column, several
    times faster than numpy's row gather, and what the fits read
    (:func:`~trace_core.methods.logistic.standardised_logistic` works column by column)."""
    return np.take(F.T, rows, axis=1).T


def _row_gather(F: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return F[rows]


def _order_only(spec: Method) -> bool:
    return spec.kind == "fitted_baseline" and spec.fitted is not None and spec.fitted.order_only


def feature_set(spec: Method) -> str:
    """A TRACE+ method's feature set (the registry gives every one a set)."""
    if spec.feature_set is None:
        raise ValueError(f"{spec.name!r} is not a TRACE+ method: it has no feature set")
    return spec.feature_set


def probability_metric(name: str, y: np.ndarray, prob: np.ndarray, n_bins: int) -> float:
    """Brier or ECE as :func:`~trace_core.metrics.brier_score` and
    :func:`~trace_core.metrics.expected_calibration_error` compute them, on inputs the protocol checked once (0/1
    int64 labels; probabilities from a fitted calibrator). Probabilities in ascending score order (a calibrator is
    monotone) make the ECE bins runs; any order gives the same value."""
    if name == "brier":
        return brier_kernel(y, prob)
    if name == "ece":
        return ece_of_ascending(y, prob, n_bins)
    raise ValueError(f"no probability metric {name!r}")  # pragma: no cover - the registry lists brier and ece


def probability_metrics(names: Sequence[str], y: np.ndarray, prob: np.ndarray, n_bins: int) -> list[float]:
    """:func:`probability_metric` of each of ``names``, the same numbers; Brier and ECE together take one pass
    (:func:`~trace_core.metrics.kernels.brier_and_ece_of_monotone`), as the protocol asks for both on every
    calibrator, method and split."""
    if len(names) == 2 and set(names) == {"brier", "ece"}:
        both = dict(zip(("brier", "ece"), brier_and_ece_of_monotone(y, prob, n_bins), strict=True))
        return [both[m] for m in names]
    return [probability_metric(m, y, prob, n_bins) for m in names]


_blas_lock = threading.Lock()
_blas_users = 0
_blas_limiter: Any = None


@contextlib.contextmanager
def one_blas_thread(active: bool) -> Iterator[None]:
    """BLAS on one thread while the methods run on threads (TRACE+'s Newton steps call it): each method's BLAS
    starting its own threads on the same cores made the threaded protocol slower than the serial one. The limit is
    process-wide, so overlapping evaluations (dashboard sessions) share it: the first one in sets it, the last one
    out restores the original."""
    global _blas_users, _blas_limiter
    if not active:
        yield
        return
    try:
        from threadpoolctl import threadpool_limits  # installed with scikit-learn
    except ImportError:  # pragma: no cover - scikit-learn requires it
        yield
        return
    with _blas_lock:
        if _blas_users == 0:
            _blas_limiter = threadpool_limits(limits=1, user_api="blas")
        _blas_users += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_users -= 1
            if _blas_users == 0:
                _blas_limiter.restore_original_limits()
                _blas_limiter = None


def split_ascending_loop(in_cal: np.ndarray, order: np.ndarray, z: np.ndarray, y: np.ndarray,
                         cal: tuple[np.ndarray, np.ndarray, np.ndarray],
                         ev: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    """:meth:`Ascending.parts` in one pass (compiled by :func:`~trace_core.metrics.kernels.compiled`): each position
    of the ascending order, with its ``z`` and label, written to the calibration part's arrays or the evaluation
    part's (positions, ``z``, int64 labels) by whether its row calibrates."""
    positions_cal, z_cal, y_cal = cal
    positions_ev, z_ev, y_ev = ev
    a = b = 0
    for i in range(order.shape[0]):
        if in_cal[order[i]]:
            positions_cal[a], z_cal[a], y_cal[a] = i, z[i], y[i]
            a += 1
        else:
            positions_ev[b], z_ev[b], y_ev[b] = i, z[i], y[i]
            b += 1


@dataclass(frozen=True)
class Ascending:
    """A scalar score prepared once for every split: its rows in ascending order of the transformed score ``z``
    (stable), ``z`` and the labels (int8) in that order, and the raw score's tie groups along it (int32). ``groups``
    is None when every raw score is distinct; ``contiguous`` is False when the raw score is not ascending along the
    order (``z`` ties distinct raw scores, e.g. the log floor): then the rankings take
    :class:`~trace_core.metrics.RankGroups`. About 17 bytes per answer, kept for every split: the raw score stays
    with the caller, in row order."""

    order: np.ndarray
    z: np.ndarray
    y: np.ndarray
    groups: np.ndarray | None
    contiguous: bool

    @classmethod
    def of(cls, raw: np.ndarray, z: np.ndarray, y: np.ndarray) -> Ascending:
        order = stable_argsort(z)
        raw_sorted = raw[order]
        steps = raw_sorted[1:] != raw_sorted[:-1]
        contiguous = bool(np.all(raw_sorted[1:] >= raw_sorted[:-1]))
        groups = (None if bool(steps.all())
                  else np.concatenate([np.zeros(1, np.int32), np.cumsum(steps, dtype=np.int32)]))
        return cls(order=order, z=z[order], y=y[order].astype(np.int8), groups=groups, contiguous=contiguous)

    def parts(self, in_cal: np.ndarray, n_cal: int) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray],
                                                             tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The calibration part (rows where ``in_cal``, ``n_cal`` of them) and the evaluation part in ascending order:
        each as (its positions in the order, ``z`` there, the 0/1 int64 labels there); with numba in one pass."""
        loop = compiled(split_ascending_loop)
        if loop is None:
            # Positions rather than boolean masks: numpy's masked selection is slow on a random mask, finding the
            # positions once and gathering is not.
            mask = in_cal[self.order]
            keep_cal, keep_ev = np.flatnonzero(mask), np.flatnonzero(~mask)
            return ((keep_cal, self.z[keep_cal], self.labels(keep_cal)),
                    (keep_ev, self.z[keep_ev], self.labels(keep_ev)))
        n_ev = self.order.shape[0] - n_cal
        cal = (np.empty(n_cal, np.int64), np.empty(n_cal), np.empty(n_cal, np.int64))
        ev = (np.empty(n_ev, np.int64), np.empty(n_ev), np.empty(n_ev, np.int64))
        loop(in_cal, self.order, self.z, self.y, cal, ev)
        return cal, ev

    def labels(self, keep: np.ndarray) -> np.ndarray:
        """The 0/1 int64 labels at ``keep`` (ascending positions), as the calibrators and metrics take them."""
        return self.y[keep].astype(np.int64)

    def spread(self, keep: np.ndarray, raw: np.ndarray) -> bool:
        """True when the raw scores at ``keep`` (ascending positions, at least 2; ``raw``: the raw score in row
        order) are certainly not constant for :func:`is_constant`: their range alone forces a standard deviation
        above twice its threshold (``k`` values spanning ``r`` have a standard deviation of at least
        ``r / sqrt(2 k)``, and their mean lies inside the range). False means: ask :func:`is_constant`."""
        if not self.contiguous:
            return False
        low, high = float(raw[self.order[keep[0]]]), float(raw[self.order[keep[-1]]])
        bound = (high - low) / math.sqrt(2.0 * keep.shape[0])
        return bound > 2.0 * CONSTANT_RTOL * max(abs(low), abs(high), np.finfo(np.float64).tiny)


def ranking_part(prep: Ascending, keep: np.ndarray, y_part: np.ndarray) -> dict[str, float]:
    """:meth:`~trace_core.metrics.RankGroups.ranking_metrics` of the rows ``prep.order[keep]`` (``keep``: ascending
    positions; labels ``y_part`` in that order): their tie groups are runs of the ascending order, so counting needs
    no scatter over every distinct score."""
    k = y_part.shape[0]
    pos = y_part.astype(np.float64)
    if prep.groups is None:
        total = np.ones(k)
    else:
        g = prep.groups[keep]
        starts = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))
        total = np.diff(np.append(starts, k)).astype(np.float64)
        pos = np.add.reduceat(pos, starts)
    n_pos = int(y_part.sum())
    return ranking_of_groups(total, pos, both_classes=0 < n_pos < k, singletons=prep.groups is None)


def ranking_of_scores(score: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """:meth:`~trace_core.metrics.RankGroups.ranking_metrics` of a score fitted on one split (checked, finite) and
    its 0/1 int64 labels, both classes present: one sort, and when every score is distinct (a fitted model's usual
    case) the groups of one, without counting per distinct value; else the tie groups as runs of that order (CES's
    scores: the same groups and counts as RankGroups, without its second sort)."""
    order = stable_argsort(score)
    ascending = score[order]
    steps = ascending[1:] != ascending[:-1]
    pos = y[order].astype(np.float64)
    if bool(steps.all()):
        return ranking_of_groups(np.ones(score.shape[0]), pos, both_classes=True, singletons=True)
    starts = np.flatnonzero(np.concatenate(([True], steps)))
    total = np.diff(np.append(starts, score.shape[0])).astype(np.float64)
    return ranking_of_groups(total, np.add.reduceat(pos, starts), both_classes=True)


def out_of_fold(fit: FitBaseline, F: np.ndarray, y: np.ndarray, full: Fitted) -> tuple[np.ndarray, np.ndarray]:
    """Scores and log-odds of a fitted baseline on its calibration part, each answer's from a fit on the other
    folds (:data:`OUT_OF_FOLD`, stratified by label, in row order), started from the fit on the whole part
    (``full``; the same optimum in fewer steps); a fold whose complement lacks a class takes ``full`` itself."""
    fold = stratified_folds(y)
    score, log_odds = np.empty(y.shape[0]), np.empty(y.shape[0])
    for k in range(OUT_OF_FOLD):
        held = np.flatnonzero(fold == k)
        if not held.shape[0]:
            continue
        rest = np.flatnonzero(fold != k)
        model = fit(take_rows(F, rest), y[rest], near=full) if both_classes(y[rest]) else full
        score[held] = model.score(take_rows(F, held))
        log_odds[held] = model.log_odds(score[held])
    return score, log_odds


@dataclass
class MethodOnSplit:
    """What one method gives on one split: its evaluation-part values, its calibration-part values (which choose the
    best baseline), its held-out values (first split only) and whether its score is constant on the calibration
    part."""

    rows: list[SplitValue] = field(default_factory=list)
    calibration: list[SplitValue] = field(default_factory=list)
    held: HeldOutMethod | None = None
    constant: bool = False


@dataclass
class SplitRun:
    """The split loop's output, which :func:`trace_core.evaluation.run.evaluate` turns into an
    :class:`~trace_core.evaluation.results.EvaluationResult`."""

    rows: list[SplitValue]
    calibration: list[SplitValue]
    held_out: HeldOut
    uninformative: dict[str, str]
    skipped_splits: int


@dataclass(frozen=True)
class _Prepared:
    """One method's state for every split, made when its run starts and dropped when it ends: a scalar score's
    ascending order (and its tie groups where the order does not keep them as runs), or a fitted model's features in
    the layout its fits read."""

    ascending: Ascending | None = None
    rank_groups: RankGroups | None = None
    features: np.ndarray | None = None


class _Protocol:
    """Everything the methods' runs share: the labels, each method's score or features and the metrics asked for.
    Methods may run on threads, each over every split: nothing here is written after construction but each method's
    own entry of ``previous``."""

    def __init__(self, y: np.ndarray, scalar: dict[str, np.ndarray], features: dict[str, np.ndarray],
                 config: EvaluationConfig, *, release: bool = False) -> None:
        self.y, self.scalar, self.features, self.config, self.release = y, scalar, features, config, release
        self.own_model = frozenset(features)
        # Each method's fit on the previous split, a start for its fit on the next (the same optimum in fewer Newton
        # steps): only that method's run writes its entry, split after split.
        self.previous: dict[str, Any] = {}
        self.ranking = [m for m in config.metrics if METRICS[m].on == "score"]
        self.probability = [m for m in config.metrics if METRICS[m].on == "probability"]

    def prepare(self, method: str) -> _Prepared:
        """A method's state for all its splits. A scalar score: calibrators are fitted on its documented transform
        and rankings use the raw score, each sorted once (only the transform's sorted copy is kept). A fitted
        baseline that reads only its features' order gets their ranks (the same scores, cheaper fits), column-major
        as the fits read them; TRACE+'s features stay as given, for TracePlus.fit's arithmetic."""
        if method in self.own_model:
            F = self.features[method]
            if METHODS[method].kind != "trace_plus":
                F = np.asfortranarray(feature_ranks(F) if _order_only(METHODS[method]) else F)
            return _Prepared(features=F)
        raw = self.scalar[method]
        ascending = Ascending.of(raw, transform_scores(raw, METHODS[method].transform), self.y)
        return _Prepared(ascending=ascending, rank_groups=None if ascending.contiguous else RankGroups(raw))

    def run(self, method: str, splits: Splits, tick: Callable[[], None]) -> list[MethodOnSplit]:
        """One method on every usable split, in order (``tick()`` after each)."""
        state = self.prepare(method)
        out = []
        for part in splits.parts(self.y):
            out.append(self.on_split(method, part, state))
            tick()
        if self.release:  # each run removes only its own method's entry
            (self.features if method in self.own_model else self.scalar).pop(method)
        return out

    def values(self, part: Part, method: str, ranked: dict[str, float], y: np.ndarray,
               probs: dict[str, np.ndarray]) -> list[SplitValue]:
        """One method's metric values on some rows: rankings of the raw score, Brier and ECE per calibrator."""
        out = [SplitValue(part.split, method, m, RAW, ranked[m]) for m in self.ranking]
        for c, p in probs.items():
            metrics = probability_metrics(self.probability, y, p, self.config.n_bins)
            out += [SplitValue(part.split, method, m, c, v) for m, v in zip(self.probability, metrics, strict=True)]
        return out

    def on_split(self, method: str, part: Part, state: _Prepared) -> MethodOnSplit:
        """One method on one split (``state``: :meth:`prepare`'s)."""
        if state.features is not None:
            return self._own_model(method, part, state.features)
        assert state.ascending is not None
        return self._scalar(method, part, state.ascending, state.rank_groups)

    def _own_model(self, method: str, part: Part, F: np.ndarray) -> MethodOnSplit:
        """A method with its own fitted model: TRACE+, the reference, or a fitted baseline (whose calibration-part
        values, out of fold, choose the best baseline: in-sample they would flatter it against the scalar ones)."""
        spec, out = METHODS[method], MethodOnSplit()
        rows = take_rows if F.flags.f_contiguous else _row_gather
        F_cal, F_ev = rows(F, part.cal), rows(F, part.ev)
        if spec.kind == "fitted_baseline" and spec.fitted is not None:
            model = spec.fitted.fit(F_cal, part.y_cal, near=self.previous.get(method))
            self.previous[method] = model
            raw = model.score(F_ev)
            probs = {FITTED: sigmoid(model.log_odds(raw))}
            score_cal, log_odds_cal = out_of_fold(spec.fitted.fit, F_cal, part.y_cal, model)
            on_cal = ranking_of_scores(score_cal, part.y_cal) if self.ranking else {}
            out.calibration = self.values(part, method, on_cal, part.y_cal, {FITTED: sigmoid(log_odds_cal)})
        else:
            if spec.kind == "trace_plus":  # TracePlus's model and decision to the last bit, without its drift summary
                plus = TracePlus(feature_set=feature_set(spec))
                raw = standardised_logistic_rows(F_cal, part.y_cal, C=plus.C,
                                                 max_iter=plus.max_iter).standardised_decision(F_ev)
            else:
                decision = fit_reference(F_cal, part.y_cal, near=self.previous.get(method))
                self.previous[method] = decision
                raw = decision(F_ev)
            probs = {FITTED: sigmoid(raw)}  # TracePlus.predict_proba's function: held-out values equal it
        ranked = ranking_of_scores(raw, part.y_ev) if self.ranking else {}
        out.rows = self.values(part, method, ranked, part.y_ev, probs)
        if part.first:
            out.held = HeldOutMethod(score=raw, probabilities=probs)
        return out

    def _rankings(self, prep: Ascending, rank_groups: RankGroups | None, keep: np.ndarray, y_ascending: np.ndarray,
                  part: Part, *, calibration: bool) -> dict[str, float]:
        """The rankings on the part's calibration or evaluation rows (``keep``: their ascending positions)."""
        if not self.ranking:
            return {}
        if rank_groups is None:
            return ranking_part(prep, keep, y_ascending)
        if calibration:
            return rank_groups.ranking_metrics(part.y_cal, part.cal)
        return rank_groups.ranking_metrics(part.y_ev, part.ev)

    def _scalar(self, method: str, part: Part, prep: Ascending, rank_groups: RankGroups | None) -> MethodOnSplit:
        """TRACE or a scalar baseline: both scalar calibrators fitted on the calibration part's transformed score.
        Each part is taken in ascending score order (the isotonic fit and prediction, the ECE bins and the
        rankings' tie groups all want it); Platt is fitted on the same part (the sums of ``PlattCalibrator.fit`` on
        ``z[cal]``, in another order), started from the previous split's fit."""
        (keep_cal, z_cal, y_cal), (keep_ev, z_ev, y_ev) = prep.parts(part.in_cal, part.n_cal)
        raw = self.scalar[method]
        out = MethodOnSplit(constant=not prep.spread(keep_cal, raw) and is_constant(raw[part.cal]))
        fitted: dict[str, PlattCalibrator | IsotonicCalibrator] = {
            "platt": PlattCalibrator().fit_checked(z_cal, y_cal, near=self.previous.get(method)),
            "isotonic": IsotonicCalibrator().fit_presorted(z_cal, y_cal)}
        self.previous[method] = fitted["platt"]
        probs = {c: fitted[c].predict_checked(z_ev) for c in SCALAR_CALIBRATORS}
        ranked = self._rankings(prep, rank_groups, keep_ev, y_ev, part, calibration=False)
        if METHODS[method].kind == "baseline":  # the calibration part's values choose the best baseline
            on_cal = self._rankings(prep, rank_groups, keep_cal, y_cal, part, calibration=True)
            out.calibration = self.values(part, method, on_cal, y_cal,
                                          {c: fitted[c].predict_checked(z_cal) for c in SCALAR_CALIBRATORS})
        out.rows = self.values(part, method, ranked, y_ev, probs)
        if part.first:  # back to row order
            places = part.ev_positions()[prep.order[keep_ev]]
            in_rows = {}
            for c, p in probs.items():
                in_rows[c] = np.empty_like(p)
                in_rows[c][places] = p
            out.held = HeldOutMethod(score=raw[part.ev], probabilities=in_rows)
        return out


def run_splits(y: np.ndarray, scalar: dict[str, np.ndarray], features: dict[str, np.ndarray], *,
               config: EvaluationConfig, methods: Sequence[str],
               progress: Progress | None = None, groups: np.ndarray | None = None,
               release: bool = False) -> SplitRun:
    """Every method in ``methods`` (each in ``scalar`` or ``features``) on every split of ``config``; a split with
    one class only in a part is skipped and counted. ``y``: 0/1 int64 labels, checked by the caller; ``groups``:
    splits keep each group whole (:func:`iter_splits`). ``release``: the caller hands ``scalar`` and ``features``
    over, and each method's entry is removed from them once its run is done (its memory freed if nothing else holds
    it).

    The splits are drawn once; then each method runs over all of them and its state for them (a scalar score's
    sorted copy, a fitted baseline's feature ranks) is dropped when it is done, so that only the methods running at
    the time hold theirs. Methods run on threads from :data:`THREADS_FROM` answers, those with their own fitted model
    (the longest runs) first. ``progress(done, n_splits)`` is called from this thread with the splits' worth of work
    done: 0 first, ``n_splits`` last. The values come out in split order, methods in ``methods``' order within a
    split. Each method's fits start from its own fit on the previous split, so its numbers do not depend on the
    other methods, nor on the threads."""
    splits = Splits.draw(y, config, groups)
    protocol = _Protocol(y, scalar, features, config, release=release)
    uninformative = {m: UNINFORMATIVE for m in methods if m in scalar and is_constant(scalar[m])}
    if progress is not None:
        progress(0, config.n_splits)
    runs = _run_methods(protocol, splits, methods, _Ticker(progress, config.n_splits, len(methods), splits.skipped))
    rows: list[SplitValue] = []
    calibration: list[SplitValue] = []
    for k in range(len(splits.used)):
        for method in methods:
            rows += runs[method][k].rows
            calibration += runs[method][k].calibration
            if runs[method][k].constant:
                uninformative[method] = UNINFORMATIVE
    held = HeldOut()
    if splits.used:
        first = next(splits.parts(y))
        held = HeldOut(rows=first.ev, labels=first.y_ev,
                       methods={m: held_m for m in methods if (held_m := runs[m][0].held) is not None})
    if progress is not None:
        progress(config.n_splits, config.n_splits)
    return SplitRun(rows=rows, calibration=calibration, held_out=held,
                    uninformative={m: uninformative[m] for m in methods if m in uninformative},
                    skipped_splits=splits.skipped)


class _Ticker:
    """Counts the (method, split) runs done, from any thread, as splits' worth of work for ``progress``."""

    def __init__(self, progress: Progress | None, n_splits: int, n_methods: int, skipped: int) -> None:
        self.progress, self.n_splits, self.n_methods = progress, n_splits, max(n_methods, 1)
        self.done = skipped * self.n_methods
        self.shown = 0
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.done += 1

    def tick_and_show(self) -> None:
        """A run done and reported, on one thread."""
        self()
        self.show()

    def show(self) -> None:
        """Report the splits' worth done, when it has grown (called from the protocol's own thread only)."""
        splits = min(self.done // self.n_methods, self.n_splits - 1)
        if self.progress is not None and splits > self.shown:
            self.shown = splits
            self.progress(splits, self.n_splits)


def _run_methods(protocol: _Protocol, splits: Splits, methods: Sequence[str],
                 ticker: _Ticker) -> dict[str, list[MethodOnSplit]]:
    """Each method's run over every split (:meth:`_Protocol.run`), on threads where :func:`workers_for` says."""
    workers = workers_for(splits.n, len(methods))
    if workers <= 1:
        out = {}
        for method in methods:
            out[method] = protocol.run(method, splits, ticker.tick_and_show)
        return out
    longest_first = sorted(methods, key=lambda m: m not in protocol.own_model)
    with ThreadPoolExecutor(max_workers=workers) as pool, one_blas_thread(True):
        futures = {m: pool.submit(protocol.run, m, splits, ticker) for m in longest_first}
        pending = set(futures.values())
        while pending:
            _, pending = wait(pending, timeout=0.1, return_when=FIRST_EXCEPTION)
            ticker.show()
            failed = [f for f in futures.values() if f.done() and not f.cancelled() and f.exception() is not None]
            if failed:  # the first error raised, the runs not started yet cancelled
                for f in pending:
                    f.cancel()
                error = failed[0].exception()
                assert error is not None
                raise error
        return {m: futures[m].result() for m in methods}


def preload() -> None:
    """Import what the calibrators load on first use: scipy's sigmoid and its isotonic regression (about half a
    second together on a small machine), and, with numba, the protocol's compiled loops (loaded from their disk
    cache in about a second, or compiled on a first run: several seconds; ``make install`` does it once) by one small
    call of each. ``import trace_core`` stays light; a server calls this at start-up, on a thread, so that no user's
    first evaluation waits for them."""
    import scipy.optimize  # noqa: F401
    import scipy.special  # noqa: F401

    x = np.linspace(-1.0, 1.0, RADIX_FROM)
    y = (np.arange(RADIX_FROM) % 3 == 0).astype(np.int64)
    fit_logistic_1d(x, y, C=1.0)
    standardised_logistic(np.column_stack([x, x * x]), y)
    IsotonicCalibrator().fit_presorted(x, y)
    ranking_of_groups(np.ones(RADIX_FROM), y[stable_argsort(-x)].astype(np.float64), both_classes=True,
                      singletons=True)
    brier_and_ece_of_monotone(y, (x + 1.0) / 2.0, 10)
    PlattCalibrator().fit(x, y).predict_proba(x)
    in_cal = y == 0  # a split's parts, as the protocol takes them
    Ascending.of(x, x, y).parts(in_cal, int(in_cal.sum()))
