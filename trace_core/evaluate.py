"""The evaluation protocol: every method scores the same answers, over repeated calibration/evaluation splits.

Per split (paper protocol): a random ``calibration_fraction`` of the answers (35% by default) fits the calibrators and
the rest is evaluated. AUROC, AUPRC, AURC and PRR are computed on each method's raw score; Brier and ECE on
probabilities from calibrators fitted on the calibration part:

- TRACE and every scalar baseline get *both* scalar calibrators, Platt scaling and isotonic regression, each fitted on
  the score's documented monotone transform (``registry.Method.transform``, e.g. the log of ``exp(sum log p)``), so
  that no score is handicapped by its scale. Results carry both (``calibrator`` "platt" / "isotonic");
  ``EvaluationConfig.scalar_calibrator`` picks the one the table shows.
- TRACE+, the supervised likelihood reference and the fitted baselines (:mod:`trace_core.fitted_baselines`: CES,
  WEPR, Trace Profile) are fitted on each calibration part and give their own probability (``calibrator``
  "logistic"; CES's is Platt scaling of its score, fitted on that part).
- Ranking metrics have ``calibrator`` "none".

A score that is constant (or nearly so: fewer than 2 distinct values, or a relative standard deviation below
:data:`CONSTANT_RTOL`) on the data or on a calibration part is *uninformative*: it is marked, never bolded and never
chosen as the best baseline (a constant predictor's ECE can be tiny). Results are the mean and standard deviation
over the splits (20 by default), plus the paired comparison of :mod:`trace_core.paired`.

On data without entropy (only the chosen tokens' log-probabilities) the methods that read entropy are skipped with
that reason, and TRACE and TRACE+ run as their surprisal-only variants under their own names; extended TRACE+ variants
asked for on such data do not run and get one note (:func:`trace_core.results.extended_entropy_note`).

When more than :data:`~trace_core.results.TRUNCATED_SHARE` (20%) of the answer tokens have probability exactly 1, the
log-probabilities are not the model's full distribution (top-p/top-k truncation, or a server's post-processing):
:class:`TruncatedDistributionWarning` and a note in the result (:func:`trace_core.results.truncation_note`) say so.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ._checks import AnswerValueError, check_bool, check_choice, check_int, check_real, set_checked
from .baselines import NO_ENTROPY_REASON, baseline_scores
from .calibrate import IsotonicCalibrator, PlattCalibrator, TracePlus, _sigmoid, transform_scores
from .features import feature_matrix_from_arrays, logit_of_surprisal
from .fitted_baselines import TOP_K_NEEDS, TopK, stack_top_logprobs
from .logistic import standardised_logistic
from .metrics import RankGroups
from .metrics.calibration import _brier, _ece_sorted
from .metrics.ranking import _ranking_from_groups
from .operators import Ragged, check_paired, segment_max, segment_mean
from .paired import FITTED, RAW, paired_comparison
from .registry import METHODS, METRICS, Method, method_names
from .results import (
    CONSTANT_RTOL,
    SCALAR_CALIBRATORS,
    TRUNCATED_SHARE,
    UNINFORMATIVE,
    EvaluationResult,
    average_results,
    extended_entropy_note,
    extended_needing_entropy,
    summarise,
    truncation_note,
)
from .trace import Trace

__all__ = ["AnswerValueError", "CONSTANT_RTOL", "SCALAR_CALIBRATORS", "TRUNCATED_SHARE", "UNINFORMATIVE",
           "EvaluationConfig", "NoUsableSplitError", "TruncatedDistributionWarning",
           "EvaluationResult", "SkippedSplitsWarning", "average_results", "data_note", "evaluate", "evaluate_arrays",
           "is_constant", "method_names", "stratified_folds"]


Progress = Callable[[int, int], None]

# The methods of a split run on threads (numpy releases the GIL in the bulk of the work): up to this many, and only
# from this many answers on (measured on 2 cores: 10% slower than one thread at 10,000 answers, 20% faster at 30,000,
# 30% at 100,000).
_MAX_WORKERS = 8
_THREADS_FROM = 20_000


class NoUsableSplitError(ValueError):
    """Every split left one class only in its calibration or evaluation part: the data cannot be evaluated as it
    is (too few answers of one class); a caller evaluating several groups can skip this one and go on."""


class SkippedSplitsWarning(UserWarning):
    """Some splits had one class only in their calibration or evaluation part and were skipped."""


class TruncatedDistributionWarning(UserWarning):
    """More than :data:`~trace_core.results.TRUNCATED_SHARE` of the answer tokens have probability exactly 1: the
    log-probabilities look truncated (top-p/top-k sampling, or a server's post-processing), so surprisal-based scores
    are not the model's. The result's ``notes`` say it too."""


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
        The calibrator of TRACE and the baselines that tables show (both are always computed; TRACE+ has its own
        logistic regression).
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
    metrics: tuple[str, ...] = ("brier", "ece", "auroc", "auprc", "aurc", "prr")

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


_SOURCE_WORDS = {"exact": "entropy exact", "absent": "chosen-token log-probabilities only (no entropy)"}


def data_note(summary: dict[str, Any] | None, *, n: int | None = None, has_entropy: bool = True) -> str:
    """What the data held, in words, for results headers: ``"1,160 traces: entropy exact"``, ``"3,869 traces:
    chosen-token log-probabilities only (no entropy): entropy methods skipped"``, ``"96,000 traces: top-10 entropy
    estimate"``; mixed sources are counted (``"… entropy exact (600), top-10 entropy estimate (400)"``).

    Parameters
    ----------
    summary : dict or None
        :func:`trace_core.score.entropy_summary` of the traces; None for arrays without traces (then ``n`` answers,
        with or without entropy as ``has_entropy`` says).
    """
    if summary is None:
        count = int(n or 0)
        parts = ["entropy given" if has_entropy else _SOURCE_WORDS["absent"]]
    else:
        k = summary.get("k") or []
        words = {**_SOURCE_WORDS, "top_k": f"top-{k[0]} entropy estimate" if len(k) == 1 else "top-k entropy estimate"}
        present = [s for s in ("exact", "top_k", "absent") if summary.get(s)]
        count = int(sum(summary.get(s, 0) for s in present))
        parts = ([words[s] for s in present] if len(present) == 1
                 else [f"{words[s]} ({summary[s]:,})" for s in present])
    note = f"{count:,} trace{'s' if count != 1 else ''}: " + ", ".join(parts)
    return note + ("" if has_entropy else ": entropy methods skipped")


def evaluate(traces: Sequence[Trace], labels: Any, *, config: EvaluationConfig = EvaluationConfig(),
             methods: Sequence[str] | None = None, beam_logprobs: Sequence[Sequence[float]] | None = None,
             embedder: Any = None, contexts: Sequence[str] | None = None,
             progress: Progress | None = None, relevance: Sequence[np.ndarray] | None = None) -> EvaluationResult:
    """Run the protocol on recorded traces and 0/1 correctness labels.

    Parameters
    ----------
    traces : sequence of Trace, length n_answers
    labels : array-like of 0/1, shape (n_answers,)
        1 = the answer is correct.
    config : EvaluationConfig
    methods : sequence of str, optional
        Default: :func:`trace_core.registry.method_names` (TRACE+, TRACE, every baseline whose inputs are
        available, the supervised likelihood reference). On data without entropy, methods that need it are skipped
        and TRACE / TRACE+ run as their surprisal-only variants.
    beam_logprobs, embedder, contexts, relevance
        Inputs of the beam and semantic baselines (see :func:`trace_core.baselines.compute_baselines`; ``relevance``,
        token relevances already computed, stands in for the embedder).
    progress : callable, optional
        ``progress(done, total)`` after the scores are computed (``done`` 0) and after each split.

    Examples
    --------
    >>> from trace_core import synthetic_traces, evaluate_arrays
    >>> s, h, y = synthetic_traces(300, seed=0)
    >>> result = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=2), methods=["TRACE", "SeqLogP"])
    >>> sorted(result.summary["calibrator"].unique())
    ['isotonic', 'none', 'platt']
    """
    from .score import entropy_summary, stack_traces

    traces = list(traces)
    surprisal, entropy = stack_traces(traces)
    held = entropy_summary(traces)
    result = _evaluate(surprisal, entropy, labels, config=config, methods=methods, traces=traces,
                       beam_logprobs=beam_logprobs, embedder=embedder, contexts=contexts,
                       note=data_note(held, has_entropy=entropy is not None), progress=progress,
                       relevance=relevance)
    result.entropy_summary = held
    return result


def evaluate_arrays(surprisal: Ragged, entropy: Ragged | None, labels: Any, *,
                    config: EvaluationConfig = EvaluationConfig(), methods: Sequence[str] | None = None,
                    beam_logprobs: Sequence[Sequence[float]] | None = None,
                    progress: Progress | None = None) -> EvaluationResult:
    """:func:`evaluate` from surprisal and entropy batches (entropy None: chosen-token log-probabilities only; no
    Trace objects, so the semantic baselines are skipped)."""
    note = data_note(None, n=len(surprisal), has_entropy=entropy is not None)
    return _evaluate(surprisal, entropy, labels, config=config, methods=methods, beam_logprobs=beam_logprobs,
                     note=note, progress=progress)


def _evaluate(surprisal: Ragged, entropy: Ragged | None, labels: Any, *, config: EvaluationConfig,
              methods: Sequence[str] | None, traces: Sequence[Trace] | None = None,
              beam_logprobs: Sequence[Sequence[float]] | None = None, embedder: Any = None,
              contexts: Sequence[str] | None = None, note: str = "",
              progress: Progress | None = None, relevance: Sequence[np.ndarray] | None = None) -> EvaluationResult:
    if not isinstance(config, EvaluationConfig):
        raise TypeError(f"`config` must be an EvaluationConfig, got {type(config).__name__}")
    wanted, skipped = _wanted(methods, has_entropy=entropy is not None)
    if entropy is not None:
        check_paired(surprisal, entropy, who="every method needs")
        entropy = surprisal.with_values(entropy.values)  # one set of index arrays for both
    else:
        _check_nonempty(surprisal)
    top, top_reason = None, f"needs {TOP_K_NEEDS}"
    if any(METHODS[m].needs == "top_k" for m in wanted) and traces is not None:
        top, why = stack_top_logprobs(traces)
        top_reason = why or top_reason
    if top is None:  # the fitted top-k baselines (the scalar ones are skipped by baseline_scores)
        skipped.update({m: top_reason for m in wanted if METHODS[m].kind == "fitted_baseline"
                        and METHODS[m].needs == "top_k"})
        wanted = [m for m in wanted if m not in skipped]
    baseline_names = [m for m in wanted if METHODS[m].kind == "baseline"]
    # TRACE's, TRACE+'s and the reference's own scores on a second thread while the baselines are computed, where the
    # protocol would run on threads too: both are passes over every token, and numpy releases the GIL in them.
    with ThreadPoolExecutor(max_workers=1) if _workers(len(surprisal), 2) > 1 else contextlib.nullcontext() as pool:
        own = pool.submit(_scores, surprisal, entropy, wanted, top) if pool is not None else None
        baselines = baseline_scores(surprisal, entropy, names=baseline_names, traces=traces,
                                    beam_logprobs=beam_logprobs, embedder=embedder, contexts=contexts,
                                    top_k=top, relevance=relevance) if baseline_names else None
        scalar, features = own.result() if own is not None else _scores(surprisal, entropy, wanted, top)
    if baselines is not None:
        skipped.update(baselines.skipped)
        scalar = {m: scalar[m] if m in scalar else baselines.scores[m].to_numpy(dtype=np.float64)
                  for m in wanted if m in scalar or m in baselines.scores.columns}
    certain_tokens = (int(np.count_nonzero(surprisal.values == 0)), int(surprisal.values.shape[0]))
    notes = []
    truncated = truncation_note(*certain_tokens)
    if truncated:
        warnings.warn(truncated, TruncatedDistributionWarning, stacklevel=3)
        notes.append(truncated)
    extended = extended_needing_entropy(skipped)
    if extended:
        notes.append(extended_entropy_note(extended))
    result = _run(surprisal, entropy, labels, scalar, features, config=config, wanted=wanted, skipped=skipped,
                  note=note, progress=progress)
    small = result.sample_note()
    if small:
        notes.append(small)
    result.notes, result.certain_tokens = notes, certain_tokens
    return result


def _workers(n: int, tasks: int) -> int:
    """Threads for ``tasks`` independent passes over ``n`` answers: one below :data:`_THREADS_FROM` answers."""
    return min(tasks, os.cpu_count() or 1, _MAX_WORKERS) if n >= _THREADS_FROM else 1


def _map(fn: Callable[[Any], Any], items: list[Any], *, workers: int) -> list[Any]:
    """``[fn(x) for x in items]``, on ``workers`` threads when more than one."""
    if workers <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))


def _check_nonempty(surprisal: Ragged) -> None:
    empty = np.flatnonzero(surprisal.lengths == 0)
    if empty.size:
        raise ValueError(f"trace {int(empty[0])} is empty; every method needs at least one token")


def _wanted(methods: Sequence[str] | None, *, has_entropy: bool) -> tuple[list[str], dict[str, str]]:
    """The methods to run, in order, and the ones skipped for lack of entropy (with the reason)."""
    if methods is not None:
        methods = [methods] if isinstance(methods, str) else list(methods)
        if not methods:
            raise ValueError("`methods` is empty: name at least one method, or pass None for all of them")
    if methods is None:
        names = method_names()
    else:
        known = method_names(extended=True)
        unknown = [m for m in methods if m not in known]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; known: {known}")
        names = list(dict.fromkeys(methods))
    out: list[str] = []
    skipped: dict[str, str] = {}
    for name in names:
        spec = METHODS[name]
        if spec.needs_entropy and not has_entropy:
            substitute = spec.surprisal_only
            skipped[name] = NO_ENTROPY_REASON + (f"; ran as {substitute}" if substitute else "")
            if substitute:
                out.append(substitute)
            continue
        out.append(name)
    return list(dict.fromkeys(out)), skipped


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


def is_constant(scores: Any) -> bool:
    """True when ``scores`` cannot rank anything: fewer than 2 distinct values, or a standard deviation below
    :data:`CONSTANT_RTOL` times the mean magnitude."""
    x = np.asarray(scores, dtype=np.float64)
    if x.size < 2 or x.min() == x.max():
        return True
    return bool(x.std() <= CONSTANT_RTOL * max(abs(float(x.mean())), np.finfo(np.float64).tiny))


def reference_features(surprisal: Ragged) -> np.ndarray:
    """The supervised likelihood reference's features, shape (n_answers, 3), each on the scale its scalar baseline is
    calibrated on: mean surprisal (the log of the geometric-mean token probability), ``log T`` and the logit of the
    minimum token probability ``logit(exp(-max s))`` (:func:`trace_core.features.logit_of_surprisal`), which keeps
    apart sure answers that the probability itself crowds against 1."""
    return np.column_stack([np.asarray(segment_mean(surprisal)), np.log(surprisal.lengths.astype(np.float64)),
                            logit_of_surprisal(np.asarray(segment_max(surprisal)))])


def _fit_reference(F: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """TRACE+'s fit (standardise on the calibration part, the same L2 logistic regression with C = 1) on the
    reference's features; returns the decision function."""
    return standardised_logistic(F, y)


def _feature_set(spec: Method) -> str:
    """A TRACE+ method's feature set (the registry gives every one a set)."""
    if spec.feature_set is None:
        raise ValueError(f"{spec.name!r} is not a TRACE+ method: it has no feature set")
    return spec.feature_set


def _scores(surprisal: Ragged, entropy: Ragged | None, wanted: list[str],
            top: TopK | None = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The methods' own scores: TRACE's (scalar) and the feature matrices of the TRACE+ variants, the fitted
    baselines and the reference (the scalar baselines come from :func:`trace_core.baselines.baseline_scores`)."""
    from . import score as score_module

    scalar: dict[str, np.ndarray] = {}
    features: dict[str, np.ndarray] = {}
    for method in wanted:
        spec = METHODS[method]
        if spec.kind == "trace":
            trace_config = (score_module.PAPER_CONFIG if spec.needs_entropy
                            else score_module.SURPRISAL_ONLY_CONFIG)
            risk = score_module._risk_from_arrays(surprisal, entropy if spec.needs_entropy else None, trace_config)
            scalar[method] = np.exp(-np.asarray(risk, dtype=np.float64))
        elif spec.kind == "trace_plus":
            features[method] = feature_matrix_from_arrays(surprisal, entropy, feature_set=_feature_set(spec))
        elif spec.kind == "reference":
            features[method] = reference_features(surprisal)
        elif spec.kind == "fitted_baseline" and spec.fitted is not None:
            features[method] = spec.fitted.features(surprisal, entropy, top)
    return scalar, features


def _check_finite(scalar: dict[str, np.ndarray], features: dict[str, np.ndarray], surprisal: Ragged,
                  entropy: Ragged | None) -> None:
    """Refuse, naming the answer, values so large that a score overflows (a sum of surprisals of 1e308 is inf):
    a clear message here instead of a calibrator's complaint about position i of some split."""
    for method, values in [*scalar.items(), *((m, F.sum(axis=1)) for m, F in features.items())]:
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            i = int(bad[0])
            largest = [float(np.max(np.abs(x.values[x.offsets[i]:x.offsets[i + 1]]), initial=0.0))
                       for x in (surprisal, entropy) if x is not None]
            raise AnswerValueError(i, f"makes {method}'s score non-finite: its trace holds values too large to "
                                      f"compute with (largest {max(largest):.3g} nats; a real token's surprisal or "
                                      "entropy is below 1,000 nats)")


def _probability_metric(name: str, y: np.ndarray, prob: np.ndarray, config: EvaluationConfig) -> float:
    """Brier or ECE as :func:`brier_score` and :func:`expected_calibration_error` compute them, without checking
    again what the protocol checked once (0/1 int64 labels; probabilities from a fitted calibrator). Probabilities
    in ascending score order (a calibrator is monotone) make the ECE bins runs; any order gives the same value."""
    if name == "brier":
        return _brier(y, prob)
    if name == "ece":
        return _ece_sorted(y, prob, config.n_bins)
    raise ValueError(f"no probability metric {name!r}")  # pragma: no cover - the registry lists brier and ece


_blas_lock = threading.Lock()
_blas_users = 0
_blas_limiter: Any = None


@contextlib.contextmanager
def _one_blas_thread(active: bool):
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


@dataclass(frozen=True)
class _Ascending:
    """A scalar score prepared once for every split: its rows in ascending order of the transformed score ``z``
    (stable), ``z`` and the labels in that order, and the raw score's tie groups along it. ``groups`` is None when
    every raw score is distinct; ``contiguous`` is False when the raw score is not ascending along the order (``z``
    ties distinct raw scores, e.g. the log floor): then the rankings take :class:`RankGroups`."""

    order: np.ndarray
    z: np.ndarray
    y: np.ndarray
    groups: np.ndarray | None
    contiguous: bool

    @classmethod
    def of(cls, raw: np.ndarray, z: np.ndarray, y: np.ndarray) -> _Ascending:
        order = np.argsort(z, kind="stable")
        raw_sorted = raw[order]
        steps = raw_sorted[1:] != raw_sorted[:-1]
        contiguous = bool(np.all(raw_sorted[1:] >= raw_sorted[:-1]))
        groups = None if bool(steps.all()) else np.concatenate([[0], np.cumsum(steps)])
        return cls(order=order, z=z[order], y=y[order], groups=groups, contiguous=contiguous)


def _ranking_part(prep: _Ascending, keep: np.ndarray, y_part: np.ndarray) -> dict[str, float]:
    """:meth:`RankGroups.ranking_metrics` of the rows ``prep.order[keep]`` (``keep``: ascending positions; labels
    ``y_part`` in that order): their tie groups are runs of the ascending order, so counting needs no scatter over
    every distinct score."""
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
    return _ranking_from_groups(total, pos, both_classes=0 < n_pos < k, singletons=prep.groups is None)


def _fit_scalar(name: str, z: np.ndarray, y: np.ndarray, z_ascending: np.ndarray,
                y_ascending: np.ndarray) -> PlattCalibrator | IsotonicCalibrator:
    """A scalar calibrator fitted on a calibration part: Platt on its rows in row order (``z``, ``y``), isotonic on
    the same rows in ascending order (``z_ascending``, ``y_ascending``), the same fit as on the unsorted part."""
    if name == "platt":
        return PlattCalibrator().fit(z, y)
    return IsotonicCalibrator()._fit_sorted(z_ascending, y_ascending)


#: Folds of out-of-fold values: a fitted baseline's on the calibration part (:func:`_out_of_fold`), a calibrator's
#: on the answers it was fitted on (:func:`trace_core.flag.out_of_fold_probabilities`).
OUT_OF_FOLD = 5


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


def _out_of_fold(fit: Callable[[np.ndarray, np.ndarray], Any], F: np.ndarray, y: np.ndarray,
                 full: Any) -> tuple[np.ndarray, np.ndarray]:
    """Scores and log-odds of a fitted baseline on its calibration part, each answer's from a fit on the other
    folds (:data:`OUT_OF_FOLD`, stratified by label, in row order); a fold whose complement lacks a class takes the
    fit on the whole part (``full``)."""
    fold = stratified_folds(y)
    score, log_odds = np.empty(y.shape[0]), np.empty(y.shape[0])
    for k in range(OUT_OF_FOLD):
        held = fold == k
        if not held.any():
            continue
        rest = ~held
        model = fit(F[rest], y[rest]) if np.unique(y[rest]).shape[0] == 2 else full
        score[held] = model.score(F[held])
        log_odds[held] = model.log_odds(score[held])
    return score, log_odds


@dataclass(frozen=True)
class _Part:
    """One split, shared by its methods: the calibration and evaluation rows (ascending), their labels and which
    rows calibrate."""

    cal: np.ndarray
    ev: np.ndarray
    y_cal: np.ndarray
    y_ev: np.ndarray
    in_cal: np.ndarray

    @classmethod
    def of(cls, cal: np.ndarray, ev: np.ndarray, y: np.ndarray) -> _Part:
        in_cal = np.zeros(y.shape[0], dtype=bool)
        in_cal[cal] = True
        return cls(cal=cal, ev=ev, y_cal=y[cal], y_ev=y[ev], in_cal=in_cal)


def _run(surprisal: Ragged, entropy: Ragged | None, labels: Any, scalar: dict[str, np.ndarray],  # noqa: C901 (the protocol's split loop and its per-method step, kept together)
         features: dict[str, np.ndarray], *, config: EvaluationConfig, wanted: list[str], skipped: dict[str, str],
         note: str, progress: Progress | None) -> EvaluationResult:
    from ._checks import check_labels

    n = len(surprisal)
    y = check_labels(labels, "labels", n=n, purpose="evaluation")
    _check_finite(scalar, features, surprisal, entropy)
    ran = [m for m in wanted if m in scalar or m in features]
    uninformative = {m: UNINFORMATIVE for m in ran if m in scalar and is_constant(scalar[m])}
    # Calibrators are fitted on each score's documented transform; rankings use the raw score, sorted once.
    transformed = {m: transform_scores(scalar[m], METHODS[m].transform) for m in scalar}
    prepared = dict(zip(transformed, _map(lambda m: _Ascending.of(scalar[m], transformed[m], y), list(transformed),
                                          workers=_workers(n, len(transformed)))))
    rank_groups = {m: RankGroups(scalar[m]) for m in scalar if not prepared[m].contiguous}
    ranking = [m for m in config.metrics if METRICS[m].on == "score"]
    probability = [m for m in config.metrics if METRICS[m].on == "probability"]
    rows: list[tuple[int, str, str, str, float]] = []
    cal_rows: list[tuple[int, str, str, str, float]] = []
    held: dict[str, np.ndarray] | None = None
    skipped_splits = 0
    splits = _splits(y, config)
    if progress is not None:
        progress(0, len(splits))

    def one(method: str, split: int, part: _Part, first: bool):
        """One method on one split: its rows, its calibration-part rows, its held-out columns (first split only)
        and whether its score is constant on the calibration part. Methods run on threads: nothing shared is
        written here."""
        spec = METHODS[method]
        cal, ev = part.cal, part.ev
        out_rows, out_cal, out_held, constant = [], [], {}, False
        if method in features:
            F = features[method]
            if spec.kind == "fitted_baseline" and spec.fitted is not None:
                model = spec.fitted.fit(F[cal], part.y_cal)
                raw = model.score(F[ev])
                probs = {FITTED: _sigmoid(model.log_odds(raw))}
                # the best-baseline choice reads its calibration-part values out of fold: in-sample, a fitted
                # baseline's values flatter it against the scalar baselines
                score_cal, log_odds_cal = _out_of_fold(spec.fitted.fit, F[cal], part.y_cal, model)
                on_cal = RankGroups(score_cal).ranking_metrics(part.y_cal) if ranking else {}
                p_cal = _sigmoid(log_odds_cal)
                out_cal += [(split, method, m, RAW, on_cal[m]) for m in ranking]
                out_cal += [(split, method, m, FITTED, _probability_metric(m, part.y_cal, p_cal, config))
                            for m in probability]
            else:
                decision: Callable[[np.ndarray], np.ndarray]
                if spec.kind == "trace_plus":
                    decision = TracePlus(feature_set=_feature_set(spec)).fit(F[cal], part.y_cal).decision_function
                else:
                    decision = _fit_reference(F[cal], part.y_cal)
                raw = decision(F[ev])
                probs = {FITTED: _sigmoid(raw)}  # TracePlus.predict_proba's function: held-out values equal it
            y_probs = part.y_ev
            ranked = RankGroups(raw).ranking_metrics(part.y_ev) if ranking else {}
        else:
            # Each part in ascending score order: the isotonic fit and prediction, the ECE bins and the rankings'
            # tie groups all want that order; Platt is fitted on the part in row order, as PlattCalibrator.fit on
            # z[cal] would be.
            prep, z = prepared[method], transformed[method]
            constant = is_constant(scalar[method][cal])
            # Positions rather than boolean masks: numpy's masked selection is slow on a random mask, finding the
            # positions once and gathering is not.
            in_cal = part.in_cal[prep.order]
            keep_cal, keep_ev = np.flatnonzero(in_cal), np.flatnonzero(~in_cal)
            z_cal, y_cal = prep.z[keep_cal], prep.y[keep_cal]
            z_ev, y_probs = prep.z[keep_ev], prep.y[keep_ev]
            fitted = {c: _fit_scalar(c, z[cal], part.y_cal, z_cal, y_cal) for c in SCALAR_CALIBRATORS}
            probs = {c: model.predict_proba(z_ev) for c, model in fitted.items()}

            def rankings(keep: np.ndarray, y_ascending: np.ndarray, rows: np.ndarray, y_rows: np.ndarray):
                if not ranking:
                    return {}
                if prep.contiguous:
                    return _ranking_part(prep, keep, y_ascending)
                return rank_groups[method].ranking_metrics(y_rows, rows)

            ranked = rankings(keep_ev, y_probs, ev, part.y_ev)
            if spec.kind == "baseline":  # the calibration part's values choose the best baseline
                on_cal = rankings(keep_cal, y_cal, cal, part.y_cal)
                out_cal += [(split, method, m, RAW, on_cal[m]) for m in ranking]
                out_cal += [(split, method, m, c, _probability_metric(m, y_cal, model.predict_proba(z_cal), config))
                            for c, model in fitted.items() for m in probability]
            if first:  # back to row order
                places = np.searchsorted(ev, prep.order[keep_ev])  # ev ascends
                for c, p in probs.items():
                    probs[c] = np.empty_like(p)
                    probs[c][places] = p
                y_probs, raw = part.y_ev, scalar[method][ev]
        out_rows += [(split, method, m, RAW, ranked[m]) for m in ranking]
        out_rows += [(split, method, m, c, _probability_metric(m, y_probs, p, config))
                     for c, p in probs.items() for m in probability]
        if first:
            out_held[method] = probs.get(FITTED, probs.get(config.scalar_calibrator))
            out_held[f"{method} score"] = raw
            if FITTED not in probs:
                out_held.update({f"{method} {c}": p for c, p in probs.items()})
        return out_rows, out_cal, out_held, constant

    workers = _workers(n, len(ran))
    with ThreadPoolExecutor(max_workers=workers) as pool, _one_blas_thread(workers > 1):
        for split, (cal, ev) in enumerate(splits):
            if np.unique(y[cal]).shape[0] < 2 or np.unique(y[ev]).shape[0] < 2:
                skipped_splits += 1
                if progress is not None:
                    progress(split + 1, len(splits))
                continue
            first = held is None
            part = _Part.of(cal, ev, y)
            if first:
                held = {"row": ev, "label": part.y_ev}
            # partial binds this split's values: the calls never see a later split's, however late they run
            runs = (pool.map if workers > 1 else map)(functools.partial(one, split=split, part=part, first=first), ran)
            for method, (method_rows, method_cal, method_held, constant) in zip(ran, runs):
                rows += method_rows
                cal_rows += method_cal
                if constant:
                    uninformative[method] = UNINFORMATIVE
                if first and held is not None:  # held is set above on the first split
                    held.update(method_held)
            if progress is not None:
                progress(split + 1, len(splits))
    if skipped_splits == config.n_splits:
        raise NoUsableSplitError("every split left one class only in its calibration or evaluation part; use more "
                                 "answers or stratified splits")
    if skipped_splits:
        warnings.warn(f"{skipped_splits} of {config.n_splits} splits skipped: one class only in the calibration or "
                      "evaluation part (use stratified splits to avoid this)", SkippedSplitsWarning, stacklevel=3)
    columns = ["split", "method", "metric", "calibrator", "value"]
    per_split = pd.DataFrame(rows, columns=columns)
    per_split.insert(2, "family", per_split["method"].map(lambda m: METHODS[m].family))
    calibration_values = pd.DataFrame(cal_rows, columns=columns)
    uninformative = {m: uninformative[m] for m in ran if m in uninformative}
    paired = paired_comparison(per_split, calibration_values, methods=ran, metrics=config.metrics,
                               uninformative=list(uninformative))
    return EvaluationResult(summary=summarise(per_split, list(uninformative)), per_split=per_split,
                            held_out=pd.DataFrame(held), skipped=skipped, config=config, n_answers=n,
                            skipped_splits=skipped_splits, methods=ran, accuracy=float(y.mean()),
                            calibration_values=calibration_values, paired=paired, uninformative=uninformative,
                            data_note=note)
