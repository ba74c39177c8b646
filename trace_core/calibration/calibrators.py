"""Calibrators: TRACE+ (features -> probability), the scalar calibrators for single scores
(:mod:`trace_core.calibration.scalar`), and ScoreCalibrator (any trace-only score -- TRACE, a baseline -- with its
scalar calibrator, for flagging with the score that won).

All follow scikit-learn's conventions (``__init__`` stores parameters, ``fit`` returns self and sets trailing-underscore
attributes) and serialise to JSON, never pickle. Prediction needs numpy and scipy's ``expit`` only, so a calibrator
loaded from JSON works without scikit-learn's estimator objects. ``predict_proba`` returns the probability that each
answer is correct, shape (n_answers,).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np

from trace_core import __version__  # the package is imported by the time anything is fitted
from trace_core.calibration.drift import (
    ALPHA,
    EXTRA_FEATURES,
    DriftResult,
    DriftSummary,
    drift_check,
    drift_two_sample,
    summarize,
)
from trace_core.calibration.reading import CalibratorFormatError, decode_calibrator, parse_calibrator
from trace_core.calibration.reading import dumps_calibrator as _dumps
from trace_core.calibration.scalar import (
    IsotonicCalibrator,
    NotFittedError,
    PlattCalibrator,
    SavedCalibrator,
    check_fit_labels,
    check_fitted,
)
from trace_core.checks import AnswerValueError, check_choice, check_int, check_real
from trace_core.methods.baselines import compute_baselines
from trace_core.methods.features import feature_matrix, feature_names
from trace_core.methods.logistic import SCORE_TRANSFORMS, sigmoid, standardised_logistic_rows, transform_scores
from trace_core.methods.operators import segment_mean
from trace_core.methods.registry import METHODS, flaggable_methods, get_method
from trace_core.methods.risk import (
    PAPER_CONFIG,
    SURPRISAL_ONLY_CONFIG,
    as_traces,
    config_for,
    stack_traces,
    trace_confidence,
)
from trace_core.traces.table import TraceTable
from trace_core.traces.trace import Trace

__all__ = ["CALIBRATOR_WORDS", "SCORE_TRANSFORMS", "CalibratorFormatError", "IsotonicCalibrator", "NotFittedError",
           "PlattCalibrator", "ScoreCalibrator", "TracePlus", "calibrator_from_json", "check_drift",
           "load_calibrator", "method_scores", "probability_correct",
           "transform_scores", "unfitted_copy"]


def _metadata_of(traces: Sequence[Trace]) -> Sequence[Any]:
    """Each trace's metadata (a table's column: no Trace made per answer; None for an item without one)."""
    return traces.metadata if isinstance(traces, TraceTable) else [getattr(t, "metadata", None) for t in traces]


def _trace_origins(traces: Sequence[Trace]) -> dict[str, list[str]]:
    """The model ids, tokenizers and entropy sources of ``traces`` (sorted, unknown = empty ones left out)."""
    origins: dict[str, set[str]] = {"model_id": set(), "model_digest": set(), "tokenizer": set(),
                                    "entropy_source": set(), "source": set()}
    for meta in _metadata_of(traces):
        for key, names in origins.items():
            value = getattr(meta, key, "")
            if isinstance(value, str) and value:
                names.add(value)
    return {key: sorted(names) for key, names in origins.items()}


def _provenance(X: Sequence[Trace] | np.ndarray, feature_set: str | None, n_rows: int) -> dict[str, Any]:
    """Where a fit's data came from: traces' model ids, tokenizers and entropy sources (empty lists for a feature
    matrix), feature set (TracePlus only; None leaves it out), rows, date (UTC, ISO 8601) and trace_core version."""
    origins = _trace_origins(X) if not isinstance(X, np.ndarray) else {"model_id": [], "model_digest": [],
                                                                      "tokenizer": [], "entropy_source": [],
                                                                      "source": []}
    return {**origins, **({"feature_set": feature_set} if feature_set is not None else {}), "n_rows": int(n_rows),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "version": __version__}


def _origin_words(sources: set[str], words: dict[str, str]) -> str:
    return " and ".join(words.get(source, repr(source)) for source in sorted(sources))


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(repr(n[:100]) for n in names[:3])
    return shown + (f" and {len(names) - 3:,} more" if len(names) > 3 else "")


#: The extra drift features that one of a calibrator's own features already is, up to a monotone map (the drift test
#: bins by calibration quantiles, so both would give the same test).
_SAME_AS = {"answer_length": ("log_length",),
            "mean_surprisal": ("mean_surprisal_conf", "log_mean_surprisal_conf", "log_geomean_token_prob")}
#: Why a calibrator without a summary cannot be checked (completes "not available; ...").
_NO_SUMMARY = ("this calibrator file was saved before calibrators kept a summary of their calibration answers' "
               "features; fit it again to check new answers against them")


def _extra_names(own: Sequence[str]) -> tuple[str, ...]:
    """The extra drift features (:data:`trace_core.calibration.drift.EXTRA_FEATURES`) that ``own`` does not already
    hold."""
    return tuple(name for name in EXTRA_FEATURES if not set(_SAME_AS[name]) & set(own))


def _extra_columns(traces: Sequence[Trace], names: Sequence[str]) -> np.ndarray:
    """The extra drift features of each trace, shape (n, len(names)): answer length in tokens, mean surprisal (0 for
    an empty answer), from the stacked surprisal (a table's column: no per-answer work)."""
    surprisal, _ = stack_traces(traces)
    columns = {"answer_length": lambda: surprisal.lengths.astype(np.float64),
               "mean_surprisal": lambda: np.nan_to_num(np.asarray(segment_mean(surprisal), dtype=np.float64),
                                                       nan=0.0)}
    out = np.zeros((len(surprisal.lengths), len(names)), dtype=np.float64)
    for j, name in enumerate(names):
        out[:, j] = columns[name]()
    return out


class _FittedOnTraces:
    """What the calibrators fitted on traces (TracePlus, ScoreCalibrator) share: the provenance check and the drift
    check against the summary of the calibration features (``drift_summary_``, :mod:`trace_core.calibration.drift`)."""

    # Set by fit; None in files written before they were recorded.
    provenance_: dict[str, Any] | None
    drift_summary_: DriftSummary | None

    def _drift_features(self, X: Sequence[Trace] | np.ndarray,
                        names: Sequence[str] | None = None) -> tuple[tuple[str, ...], np.ndarray]:
        """The drift features of ``X`` (``names``, default all this calibrator's that ``X`` allows) and their
        matrix, shape (n, len(names))."""
        raise NotImplementedError

    def _drift_names(self, X: Sequence[Trace] | np.ndarray) -> tuple[str, ...]:
        """This calibrator's drift features for answers ``X``."""
        raise NotImplementedError

    def _drift_words(self) -> dict[str, str]:
        return {}

    def check_drift(self, X: Sequence[Trace] | np.ndarray, *, alpha: float = ALPHA) -> DriftResult:
        """Whether the answers ``X`` look drawn like the answers this calibrator was fitted on: each drift feature
        (the calibrator's own features or score, answer length, mean surprisal) tested against the summary kept at
        fit time (:func:`trace_core.calibration.drift.drift_check`). A calibrator loaded from a file written before the
        summary existed gives a result whose status is ``"unavailable"``, saying so."""
        summary: DriftSummary | None = getattr(self, "drift_summary_", None)
        n_new = len(X)
        if summary is None:
            return DriftResult.unavailable(_NO_SUMMARY, n_new=n_new)
        names, values = self._drift_features(X, [n for n in summary.names if self._computable(n, X)])
        if not names:
            return DriftResult.unavailable("none of the summarised features can be computed from these answers",
                                           n_new=n_new)
        return drift_check(summary, values, names=names, alpha=alpha, words=self._drift_words())

    def drift_from(self, reference: Sequence[Trace] | np.ndarray, X: Sequence[Trace] | np.ndarray, *,
                   alpha: float = ALPHA) -> DriftResult:
        """Whether the answers ``X`` look drawn like the ``reference`` answers (for a guarantee: the labeled answers
        that chose its threshold), on this calibrator's drift features of both
        (:func:`trace_core.calibration.drift.drift_two_sample`)."""
        names = tuple(n for n in self._drift_names(reference) if self._computable(n, X))
        _, ref_values = self._drift_features(reference, names)
        _, values = self._drift_features(X, names)
        return drift_two_sample(ref_values, values, names, alpha=alpha, words=self._drift_words())

    @staticmethod
    def _computable(name: str, X: Sequence[Trace] | np.ndarray) -> bool:
        return not (isinstance(X, np.ndarray) and name in EXTRA_FEATURES)

    def provenance_mismatch(self, X: Sequence[Trace] | np.ndarray) -> list[str]:
        """Sentences naming the model ids and entropy sources of ``X`` that this calibrator was not fitted on (empty
        when all match, for a feature matrix, or when the provenance is unknown). The dashboard shows them; the
        predicting methods warn with them."""
        provenance = getattr(self, "provenance_", None)
        if provenance is None or isinstance(X, np.ndarray):
            return []
        seen = _trace_origins(X)
        found = []
        # A model is identified by its content digest where both sides know it (the same model under two paths is
        # the same model), else by its id.
        fitted_digests, applied_digests = provenance.get("model_digest", []), seen["model_digest"]
        metadata = _metadata_of(X)
        by_digest = bool(fitted_digests) and bool(applied_digests) and all(
            getattr(meta, "model_digest", "") for meta in metadata)
        for key, what in (("model_id", "model"), ("entropy_source", "entropy source")):
            fitted_on, applied_to = provenance[key], seen[key]
            other = sorted(set(applied_to) - set(fitted_on))
            if key == "model_id" and by_digest:
                if set(applied_digests) <= set(fitted_digests):
                    continue
                other = sorted({meta.model_id or meta.model_digest for meta in metadata
                                if meta.model_digest not in set(fitted_digests)})
            if fitted_on and other:
                found.append(f"this calibrator was fitted on traces of {what} {_names(fitted_on)} and is applied to "
                             f"traces of {what} {_names(other)}; its probabilities may be miscalibrated for them")
        # Generated and teacher-forced answers differ; an imported trace may be either, so it never warns.
        known = {"generate", "teacher_forced"}
        fitted_sources = set(provenance.get("source", [])) & known
        applied_sources = set(seen["source"]) & known
        if fitted_sources and applied_sources - fitted_sources:
            words = {"generate": "the model's own generated answers",
                     "teacher_forced": "given answers scored by teacher forcing"}
            found.append(f"this calibrator was fitted on {_origin_words(fitted_sources, words)} and is applied to "
                         f"{_origin_words(applied_sources - fitted_sources, words)}; a model is less surprised by "
                         "its own answers than by others', so its probabilities may be miscalibrated for them")
        return found

    def _check_provenance(self, X: Sequence[Trace] | np.ndarray) -> None:
        for message in self.provenance_mismatch(X):
            warnings.warn(message, UserWarning, stacklevel=4)


class TracePlus(_FittedOnTraces, SavedCalibrator):
    """TRACE+: standardised trace features and logistic regression, fitted on a calibration split.

    Parameters
    ----------
    feature_set : str, default "paper"
        A key of :data:`trace_core.methods.features.FEATURE_SETS` ("paper" = the paper's 8 features).
    C : float, default 1.0
        Inverse L2 regularisation strength of the logistic regression.
    max_iter : int, default 1000

    Attributes
    ----------
    feature_names_ : tuple of str
    mean_, scale_ : ndarray, shape (n_features,)
        Standardisation statistics of the calibration split (a constant feature gets scale 1).
    coef_ : ndarray, shape (n_features,)
    intercept_ : float
    n_samples_ : int
    provenance_ : dict or None
        Where the fit's traces came from: ``model_id``, ``tokenizer``, ``entropy_source`` (lists of the names found
        in their metadata; empty for a feature matrix), ``feature_set``, ``n_rows``, ``date`` (UTC, ISO 8601) and
        ``version`` (trace_core's). Saved in the JSON; None for a calibrator loaded from an earlier version's file.
        Predicting on traces of a model id or entropy source outside these lists warns (UserWarning).
    drift_summary_ : DriftSummary or None
        The calibration answers' features, binned (:func:`trace_core.calibration.drift.summarize`: at most 19 numbers a
        feature): the TRACE+ features, plus answer length and mean surprisal when fitted on traces (unless a
        feature of the set already is one). :meth:`check_drift` tests new answers against it. Saved in the JSON;
        None for a calibrator loaded from an earlier version's file.
    """

    _type = "TracePlus"

    def __init__(self, *, feature_set: str = "paper", C: float = 1.0, max_iter: int = 1000) -> None:
        self.feature_set = feature_set
        self.C = C
        self.max_iter = max_iter

    @property
    def score_name(self) -> str:
        """The method of the comparison this calibrator is: ``"TRACE+"`` or ``"TRACE+ (<feature set>)"``."""
        return next((m.name for m in METHODS.values() if m.kind == "trace_plus" and m.feature_set == self.feature_set),
                    f"TRACE+ ({self.feature_set})")

    def get_params(self) -> dict[str, Any]:
        """The constructor's parameters (an unfitted copy is ``TracePlus(**model.get_params())``)."""
        return {"feature_set": self.feature_set, "C": self.C, "max_iter": self.max_iter}

    def _features(self, X: Sequence[Trace] | np.ndarray) -> np.ndarray:
        names = feature_names(self.feature_set)
        if isinstance(X, np.ndarray) and X.dtype != object:
            F = np.asarray(X, dtype=np.float64)
            if F.ndim != 2 or F.shape[1] != len(names):
                raise ValueError(f"feature matrix must have shape (n, {len(names)}) for feature set "
                                 f"{self.feature_set!r}, got {F.shape}")
        else:
            F = feature_matrix(as_traces(X), feature_set=self.feature_set)
        if not np.isfinite(F).all():
            row = int(np.flatnonzero(~np.isfinite(F).all(axis=1))[0])
            raise AnswerValueError(row, "has a non-finite feature: its trace holds values too large to compute with")
        return F

    def fit(self, X: Sequence[Trace] | np.ndarray, y: Any) -> TracePlus:
        """Fit on traces (or their feature matrix, shape (n, n_features)) and 0/1 correctness labels (n,)."""
        C = check_real(self.C, "C", minimum=0, low_open=True)
        max_iter = check_int(self.max_iter, "max_iter", minimum=1)
        F = self._features(X)
        labels = check_fit_labels(y, F.shape[0])
        model = standardised_logistic_rows(F, labels, C=C, max_iter=max_iter)
        self.feature_names_ = feature_names(self.feature_set)
        self.mean_, self.scale_ = model.mean, model.scale
        self.coef_, self.intercept_ = model.coef, model.intercept
        self.n_samples_ = int(F.shape[0])
        self.provenance_ = _provenance(X, self.feature_set, self.n_samples_)
        names, values = self._drift_features(X, F=F)
        self.drift_summary_ = summarize(values, names)
        return self

    def _drift_names(self, X: Sequence[Trace] | np.ndarray) -> tuple[str, ...]:
        own = feature_names(self.feature_set)
        return own + (() if isinstance(X, np.ndarray) else _extra_names(own))

    def _drift_features(self, X: Sequence[Trace] | np.ndarray, names: Sequence[str] | None = None, *,
                        F: np.ndarray | None = None) -> tuple[tuple[str, ...], np.ndarray]:
        own = feature_names(self.feature_set)
        names = self._drift_names(X) if names is None else tuple(names)
        if F is None:  # only computed when an own feature is asked for
            F = self._features(X) if set(names) & set(own) else np.zeros((len(X), len(own)))
        extras = [n for n in names if n not in own]
        if not extras:
            extra = np.zeros((len(X), 0))
        elif isinstance(X, np.ndarray):  # a feature matrix has none (see _computable)
            raise ValueError(f"the drift features {extras} need traces, not a feature matrix")
        else:
            extra = _extra_columns(X, extras)
        columns = [F[:, own.index(n)] if n in own else extra[:, extras.index(n)] for n in names]
        return names, (np.column_stack(columns) if columns else np.zeros((len(X), 0)))

    def decision_function(self, X: Sequence[Trace] | np.ndarray) -> np.ndarray:
        """Log-odds of correctness, shape (n_answers,). Warns (UserWarning) when the traces come from another model
        id or entropy source than those it was fitted on (its ``provenance_``)."""
        check_fitted(self, "coef_")
        F = self._features(X)
        self._check_provenance(X)
        return ((F - self.mean_) / self.scale_) @ self.coef_ + self.intercept_

    def predict_proba(self, X: Sequence[Trace] | np.ndarray) -> np.ndarray:
        """Probability that each answer is correct, shape (n_answers,)."""
        return sigmoid(self.decision_function(X))

    def feature_contributions(self, X: Sequence[Trace] | np.ndarray) -> np.ndarray:
        """Each feature's additive share of the log-odds, shape (n_answers, n_features); rows sum to log-odds minus
        the intercept. Used to explain a TRACE+ probability in plain language."""
        check_fitted(self, "coef_")
        F = self._features(X)
        self._check_provenance(X)
        return ((F - self.mean_) / self.scale_) * self.coef_

    def to_json(self) -> str:
        check_fitted(self, "coef_")
        return _dumps({
            "type": "TracePlus",
            "params": {"feature_set": self.feature_set, "C": self.C, "max_iter": self.max_iter},
            "feature_names": list(self.feature_names_),
            "mean": self.mean_.tolist(),
            "scale": self.scale_.tolist(),
            "coef": self.coef_.tolist(),
            "intercept": self.intercept_,
            "n_samples": self.n_samples_,
            **({"provenance": self.provenance_} if getattr(self, "provenance_", None) is not None else {}),
            **_summary_field(self),
        })

    @classmethod
    def _from_fields(cls, fields: Mapping[str, Any]) -> TracePlus:
        model = cls(**fields["params"])
        model.feature_names_ = fields["feature_names"]
        model.mean_, model.scale_, model.coef_ = fields["mean"], fields["scale"], fields["coef"]
        model.intercept_ = fields["intercept"]
        model.n_samples_ = fields["n_samples"]
        model.provenance_ = fields.get("provenance")  # None for files of earlier versions
        model.drift_summary_ = fields.get("drift_summary")  # None for files of earlier versions
        return model


#: Scalar calibrators of :class:`ScoreCalibrator`, with the words the tools use for them.
CALIBRATOR_WORDS = {"platt": "Platt scaling", "isotonic": "isotonic regression"}


def method_scores(traces: Sequence[Trace], method: str) -> np.ndarray:
    """One method's raw score of each answer (higher = more likely correct), shape (n_answers,), as the evaluation
    computes it: TRACE's ``exp(-R)`` or a baseline's confidence. ValueError, saying why, when the traces lack what
    the method needs (entropy, top-k alternatives)."""
    spec = get_method(method)
    if method not in flaggable_methods():
        raise ValueError(f"{method!r} cannot be calibrated on traces alone; calibrate one of: "
                         f"{', '.join(flaggable_methods())}")
    traces = as_traces(traces)
    if not traces:
        raise ValueError("no answers to score")
    if spec.kind == "trace":
        config = PAPER_CONFIG if spec.needs_entropy else SURPRISAL_ONLY_CONFIG
        return np.asarray(trace_confidence(traces, config=config), dtype=np.float64).reshape(-1)
    result = compute_baselines(traces, names=[method])
    if method in result.skipped:
        raise ValueError(f"{method} {result.skipped[method]}")
    return result.scores[method].to_numpy(dtype=np.float64)


class ScoreCalibrator(_FittedOnTraces, SavedCalibrator):
    """One method's score (TRACE or a baseline, see :func:`flaggable_methods`) turned into a probability of being
    correct by Platt scaling or isotonic regression, as the evaluation calibrates it: the calibrator is fitted on the
    score's documented transform (``registry.Method.transform``). Use it to flag answers with the score that won the
    comparison on your data when that is not TRACE+.

    Parameters
    ----------
    method : str, default "TRACE"
        The method's name in :data:`trace_core.methods.registry.METHODS` ("TRACE", "SeqLogP", "Mean Entropy", ...).
    calibrator : {"platt", "isotonic"}, default "platt"
    C : float, default 1e4
        Platt scaling's inverse regularisation strength (as in the evaluation); unused by isotonic regression.

    Attributes
    ----------
    transform_ : str
        The transform the calibrator was fitted on (a key of :data:`SCORE_TRANSFORMS`).
    calibrator_ : PlattCalibrator or IsotonicCalibrator
    n_samples_ : int
    provenance_ : dict
        As :attr:`TracePlus.provenance_`, without ``feature_set`` (the score is in the parameters).
    drift_summary_ : DriftSummary or None
        As :attr:`TracePlus.drift_summary_`: the score (on its transform's scale, ``"score"``), answer length and
        mean surprisal of the calibration answers, binned.

    Examples
    --------
    >>> from trace_core.traces.trace import TraceMetadata
    >>> def answer(s):  # two tokens, only the chosen tokens' log-probabilities known
    ...     return Trace(prompt="q", answer="ab", token_ids=[1, 2], tokens=("a", "b"), surprisal=[s, 0.1],
    ...                  entropy=None, top_ids=[], top_logprobs=[], metadata=TraceMetadata(entropy_source="absent"))
    >>> traces = [answer(0.5 * i) for i in range(8)]
    >>> model = ScoreCalibrator(method="SeqLogP", calibrator="isotonic").fit(traces, [1, 1, 1, 0, 1, 0, 0, 0])
    >>> model.score_name
    'SeqLogP with isotonic regression'
    >>> model.predict_proba([answer(0.2), answer(1.6), answer(9.0)]).round(2).tolist()
    [1.0, 0.5, 0.0]
    """

    _type = "ScoreCalibrator"

    def __init__(self, *, method: str = "TRACE", calibrator: str = "platt", C: float = 1e4) -> None:
        self.method = method
        self.calibrator = calibrator
        self.C = C

    @property
    def score_name(self) -> str:
        """The method and its calibrator, for tables and captions: ``"SeqLogP with Platt scaling"``."""
        return f"{self.method} with {CALIBRATOR_WORDS.get(self.calibrator, self.calibrator)}"

    def get_params(self) -> dict[str, Any]:
        """The constructor's parameters (an unfitted copy is ``ScoreCalibrator(**model.get_params())``)."""
        return {"method": self.method, "calibrator": self.calibrator, "C": self.C}

    def _check_params(self) -> str:
        check_choice(self.method, "method", flaggable_methods())
        check_choice(self.calibrator, "calibrator", list(CALIBRATOR_WORDS))
        check_real(self.C, "C", minimum=0, low_open=True)
        return get_method(self.method).transform

    def score(self, traces: Sequence[Trace]) -> np.ndarray:
        """The method's raw score of each answer (:func:`method_scores`)."""
        return method_scores(traces, self.method)

    def fit(self, traces: Sequence[Trace], y: Any) -> ScoreCalibrator:
        """Fit on traces and their 0/1 correctness labels."""
        transform = self._check_params()
        traces = as_traces(traces)
        z = transform_scores(self.score(traces), transform)
        labels = check_fit_labels(y, z.shape[0])
        model = PlattCalibrator(C=self.C) if self.calibrator == "platt" else IsotonicCalibrator()
        self.calibrator_ = model.fit(z, labels)
        self.transform_ = transform
        self.n_samples_ = int(z.shape[0])
        self.provenance_ = _provenance(traces, None, self.n_samples_)
        names, values = self._drift_features(traces, z=z)
        self.drift_summary_ = summarize(values, names)
        return self

    def _drift_features(self, X: Sequence[Trace] | np.ndarray, names: Sequence[str] | None = None, *,
                        z: np.ndarray | None = None) -> tuple[tuple[str, ...], np.ndarray]:
        traces = as_traces(X)
        names = self._drift_names(traces) if names is None else tuple(names)
        extras = [n for n in names if n != "score"]
        extra = _extra_columns(traces, extras)
        if "score" in names and z is None:  # the score on its transform's scale: finite, and the same bins
            z = transform_scores(self.score(traces), getattr(self, "transform_", None) or self._check_params())
        columns = [np.asarray(z) if n == "score" else extra[:, extras.index(n)] for n in names]  # z set just above
        return names, (np.column_stack(columns) if columns else np.zeros((len(traces), 0)))

    def _drift_names(self, X: Sequence[Trace] | np.ndarray) -> tuple[str, ...]:
        return ("score", *_extra_names(()))

    def _drift_words(self) -> dict[str, str]:
        return {"score": f"the {self.method} score"}

    def predict_proba(self, traces: Sequence[Trace]) -> np.ndarray:
        """Probability that each answer is correct, shape (n_answers,). Warns (UserWarning) when the traces come
        from another model or entropy source than those it was fitted on."""
        check_fitted(self, "calibrator_")
        traces = as_traces(traces)
        z = transform_scores(self.score(traces), self.transform_)
        self._check_provenance(traces)
        return self.calibrator_.predict_proba(z)

    def to_json(self) -> str:
        check_fitted(self, "calibrator_")
        inner = json.loads(self.calibrator_.to_json())
        for key in ("type", "format_version", "params"):
            inner.pop(key, None)
        return _dumps({"type": "ScoreCalibrator", "params": self.get_params(), "transform": self.transform_,
                       **inner, "n_samples": self.n_samples_,
                       **({"provenance": self.provenance_} if getattr(self, "provenance_", None) is not None
                          else {}), **_summary_field(self)})

    @classmethod
    def _from_fields(cls, fields: Mapping[str, Any]) -> ScoreCalibrator:
        model = cls(**fields["params"])
        inner_type = PlattCalibrator if model.calibrator == "platt" else IsotonicCalibrator
        model.calibrator_ = inner_type._from_fields({**fields, "params": (
            {"C": model.C} if model.calibrator == "platt" else {})})
        model.transform_ = fields["transform"]
        model.n_samples_ = fields["n_samples"]
        model.provenance_ = fields.get("provenance")
        model.drift_summary_ = fields.get("drift_summary")
        return model


def _summary_field(model: Any) -> dict[str, Any]:
    summary = getattr(model, "drift_summary_", None)
    return {"drift_summary": summary.to_dict()} if summary is not None else {}


#: What a shift means for a guarantee, for the drift sentence.
GUARANTEE_CONSEQUENCE = "the guaranteed error rate may not hold for them"


def check_drift(calibrator: Any, traces: Sequence[Trace], *, reference: Sequence[Trace] | None = None,
                alpha: float = ALPHA) -> DriftResult:
    """The drift check of new answers under any calibrator (:mod:`trace_core.calibration.drift`).

    Without ``reference``: against the summary of the answers the calibrator was fitted on
    (:meth:`TracePlus.check_drift`); "unavailable" for a file written before calibrators kept one, and for a bare
    Platt or isotonic calibrator. With ``reference`` (labeled answers that chose a guaranteed threshold): both
    samples compared directly on the calibrator's drift features (answer length and mean surprisal for a bare one).
    """
    traces = as_traces(traces)
    if reference is None:
        if isinstance(calibrator, (TracePlus, ScoreCalibrator)):
            return calibrator.check_drift(traces, alpha=alpha)
        return DriftResult.unavailable("a bare Platt or isotonic calibrator keeps no summary of its calibration "
                                       "answers", n_new=len(traces))
    reference = as_traces(reference)
    if isinstance(calibrator, (TracePlus, ScoreCalibrator)):
        result = calibrator.drift_from(reference, traces, alpha=alpha)
    else:
        names = _extra_names(())
        result = drift_two_sample(_extra_columns(reference, names), _extra_columns(traces, names), names,
                                  alpha=alpha)
    return dataclasses.replace(result, reference="the labeled answers that chose the threshold",
                               consequence=GUARANTEE_CONSEQUENCE)


def probability_correct(calibrator: Any, traces: Sequence[Trace], *, confidence: Any = None) -> np.ndarray:
    """Each answer's probability of being correct under any calibrator: TracePlus and ScoreCalibrator read the
    traces; a bare Platt or isotonic calibrator is applied to the TRACE confidence (the surprisal-only variant for
    every answer when some trace holds no entropy; ``confidence``, when the caller has computed it that way)."""
    traces = as_traces(traces)
    if isinstance(calibrator, (TracePlus, ScoreCalibrator)):
        return calibrator.predict_proba(traces)
    if confidence is None:

        confidence = trace_confidence(traces, config=config_for(traces))
    return calibrator.predict_proba(confidence)


def unfitted_copy(calibrator: TracePlus | ScoreCalibrator) -> TracePlus | ScoreCalibrator:
    """A calibrator of the same kind and parameters, not fitted (to refit it on other answers)."""
    return type(calibrator)(**calibrator.get_params())


_TYPES: dict[str, type[TracePlus] | type[PlattCalibrator] | type[IsotonicCalibrator] | type[ScoreCalibrator]] = {
    "TracePlus": TracePlus, "PlattCalibrator": PlattCalibrator, "IsotonicCalibrator": IsotonicCalibrator,
    "ScoreCalibrator": ScoreCalibrator}
#: What a calibrator file holds.
Calibrator = TracePlus | ScoreCalibrator | PlattCalibrator | IsotonicCalibrator


def calibrator_from_json(data: str | Mapping[str, Any]) -> Calibrator:
    """Load any calibrator saved with ``to_json`` (JSON text, a leading BOM allowed, or its parsed object).

    Raises
    ------
    CalibratorFormatError (a ValueError)
        Text over 10 MB, invalid or too deeply nested JSON, an unknown type or format version, or any field of the
        wrong type, length or range: one line per problem, naming the field.
    """
    fields = parse_calibrator(data)
    return _TYPES[fields["type"]]._from_fields(fields)


def load_calibrator(data: bytes) -> Calibrator:
    """Load a calibrator from a file's bytes (an upload): the size is checked before decoding, UTF-8 with or without
    a BOM. Raises CalibratorFormatError (a ValueError) with one line per problem."""
    return calibrator_from_json(decode_calibrator(data))
