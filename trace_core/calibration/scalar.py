"""Scalar calibrators of one score (Platt scaling, isotonic regression) and what every calibrator shares: the
not-fitted error, the fit-time checks and loading from JSON.

Both follow scikit-learn's conventions (``fit`` returns self and sets trailing-underscore attributes) and give the
numbers of scikit-learn's ``LogisticRegression`` on the standardised score and ``IsotonicRegression(y_min=0,
y_max=1, out_of_bounds="clip")``; both save to JSON (:mod:`trace_core.calibration.reading`), never pickle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

import numpy as np

from trace_core.calibration.reading import dumps_calibrator, parse_calibrator
from trace_core.checks import check_labels, check_real, check_scores
from trace_core.methods.logistic import fit_logistic_1d, sigmoid
from trace_core.metrics.kernels import (
    compiled,
)

__all__ = ["IsotonicCalibrator", "NotFittedError", "PlattCalibrator", "SavedCalibrator", "check_fit_labels",
           "check_fit_scores", "check_fitted", "isotonic_runs_loop", "platt_loop"]


class NotFittedError(ValueError, AttributeError):
    """Raised when predicting with a calibrator that has not been fitted."""


def check_fit_labels(y: Any, n: int) -> np.ndarray:
    return check_labels(y, "y", n=n, purpose="fitting")


def check_fit_scores(scores: Any) -> np.ndarray:
    return check_scores(scores, "scores", probability=False)


def check_fitted(obj: Any, attribute: str) -> None:
    if not hasattr(obj, attribute):
        raise NotFittedError(f"This {type(obj).__name__} is not fitted yet; call fit(...) before predicting.")


_S = TypeVar("_S", bound="SavedCalibrator")


class SavedCalibrator:
    """What every calibrator shares to load itself: ``from_json`` checks the saved fields for its kind (``_type``, the
    ``type`` its ``to_json`` writes) and ``_from_fields`` builds the fitted model from them."""

    _type: ClassVar[str]

    @classmethod
    def from_json(cls: type[_S], data: str | Mapping[str, Any]) -> _S:
        """Load a calibrator of this kind saved with ``to_json``; every field is checked (see
        :mod:`trace_core.calibration.reading`)."""
        return cls._from_fields(parse_calibrator(data, cls._type))

    @classmethod
    def _from_fields(cls: type[_S], fields: Mapping[str, Any]) -> _S:
        raise NotImplementedError


def platt_loop(x: np.ndarray, mean: float, scale: float, coef: float, intercept: float, out: np.ndarray) -> None:
    """:meth:`PlattCalibrator.predict_checked` in one pass (compiled by :func:`~trace_core.metrics.kernels.compiled`)
    instead of five: each value's arithmetic in the numpy expression's order, and the sigmoid as scipy's ``expit``
    computes it (``1 / (1 + exp(-u))``), so the same probabilities bit for bit."""
    for i in range(x.shape[0]):
        out[i] = 1.0 / (1.0 + math.exp(-(coef * (x[i] - mean) / scale + intercept)))


class PlattCalibrator(SavedCalibrator):
    """Platt scaling of one score: ``p = sigmoid(a * (score - mean) / std + b)``.

    Fitted by a damped Newton solver with a line search (the optimum of scikit-learn's ``LogisticRegression(C=C)`` on
    the standardised score, also on skewed, rare-positive and nearly separable scores). Give it a well-conditioned
    score: each method's documented transform, ``transform_scores(score, Method.transform)``.

    Parameters
    ----------
    C : float, default 1e4
        Inverse regularisation strength; large by default (plain Platt scaling).
    """

    _type = "PlattCalibrator"

    def __init__(self, *, C: float = 1e4) -> None:
        self.C = C

    def fit(self, scores: Any, y: Any) -> PlattCalibrator:
        x = check_fit_scores(scores)
        return self.fit_checked(x, check_fit_labels(y, x.shape[0]))

    def fit_checked(self, x: np.ndarray, y: np.ndarray, *, near: PlattCalibrator | None = None) -> PlattCalibrator:
        """Fit on scores already checked (float64) and their 0/1 int64 labels, in any order: :meth:`fit` without
        its checks, for a caller that checks once for many fits (the protocol). ``near``: a fit of the same score
        on other answers (the previous split's), to start from: the same optimum in fewer Newton steps."""
        C = check_real(self.C, "C", minimum=0, low_open=True)
        mean, std = float(x.mean()), float(x.std())
        std = std if std > 1e-12 else 1.0
        start = None
        if near is not None:  # near's function of x, in this standardisation
            slope = float(near.coef_) / float(near.scale_)
            start = (slope * std, float(near.intercept_) + slope * (mean - float(near.mean_)))
        coef, intercept = fit_logistic_1d((x - mean) / std, y, C=C, start=start)
        self.coef_: float = coef
        self.intercept_: float = intercept
        self.mean_: float = mean
        self.scale_: float = std
        return self

    def predict_proba(self, scores: Any) -> np.ndarray:
        """Probability of correctness, shape (n_answers,)."""
        return self.predict_checked(check_fit_scores(scores))

    def predict_checked(self, x: np.ndarray) -> np.ndarray:
        """:meth:`predict_proba` of scores already checked (float64)."""
        check_fitted(self, "coef_")
        loop = compiled(platt_loop)
        if loop is None:
            return sigmoid(self.coef_ * (x - self.mean_) / self.scale_ + self.intercept_)
        out = np.empty(x.shape[0])
        loop(x, float(self.mean_), float(self.scale_), float(self.coef_), float(self.intercept_), out)
        return out

    def to_json(self) -> str:
        check_fitted(self, "coef_")
        return dumps_calibrator({"type": "PlattCalibrator", "params": {"C": self.C}, "mean": self.mean_,
                                 "scale": self.scale_, "coef": self.coef_, "intercept": self.intercept_})

    @classmethod
    def _from_fields(cls, fields: Mapping[str, Any]) -> PlattCalibrator:
        model = cls(**fields["params"])
        model.mean_, model.scale_ = fields["mean"], fields["scale"]
        model.coef_, model.intercept_ = fields["coef"], fields["intercept"]
        return model


# scikit-learn's IsotonicRegression merges a score into the run of equal scores it extends while it is closer than
# this to the run's first score.
_ISOTONIC_EPS = float(np.finfo(np.float64).resolution)


def _tie_runs(x: np.ndarray) -> np.ndarray:
    """Start indices of the runs of (nearly) equal values of ascending ``x``, as scikit-learn's ``_make_unique`` finds
    them: a value starts a run when it is at least 1e-15 above the current run's first value."""
    starts = np.flatnonzero(np.concatenate(([True], np.diff(x) >= _ISOTONIC_EPS)))
    ends = np.append(starts[1:], x.shape[0])
    long = np.flatnonzero(x[ends - 1] - x[starts] >= _ISOTONIC_EPS)
    if long.size == 0:
        return starts
    extra = []  # runs chained by steps under 1e-15 but spanning more (rare): walk them as scikit-learn does
    for run in long.tolist():
        first = x[starts[run]]
        for j in range(int(starts[run]) + 1, int(ends[run])):
            if x[j] - first >= _ISOTONIC_EPS:
                extra.append(j)
                first = x[j]
    return np.union1d(starts, np.asarray(extra, dtype=np.int64))


def isotonic_runs_loop(x: np.ndarray, y: np.ndarray, eps: float, thresholds: np.ndarray,
                       means: np.ndarray, counts: np.ndarray) -> int:
    """The runs of :func:`_tie_runs` in one compiled pass (a value starts a run when it is at least ``eps`` above
    the run's first value): each run's first value, mean label and size written to ``thresholds``, ``means`` and
    ``counts``; returns the number of runs. Label sums are whole numbers (exact), so the means are those of
    :func:`_isotonic_from_sorted`'s numpy path, bit for bit."""
    runs = 0
    first = x[0]
    for j in range(x.shape[0]):
        if j == 0 or x[j] - first >= eps:
            first = x[j]
            thresholds[runs] = first
            means[runs] = 0.0
            counts[runs] = 0.0
            runs += 1
        means[runs - 1] += y[j]
        counts[runs - 1] += 1.0
    for r in range(runs):
        means[r] /= counts[r]
    return runs


def _isotonic_from_sorted(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Thresholds of ``IsotonicRegression(y_min=0, y_max=1, increasing=True)`` fitted on scores ``x`` in ascending
    order with 0/1 labels ``y``: the same runs, means, pool-adjacent-violators fit (scipy's, which scikit-learn calls)
    and trimming, so the same numbers. The evaluation protocol sorts each score once and takes every split's
    calibration part in that order, instead of sorting it again."""
    from scipy.optimize import isotonic_regression

    loop = compiled(isotonic_runs_loop)
    if loop is not None:
        thresholds, mean, weight = np.empty(x.shape[0]), np.empty(x.shape[0]), np.empty(x.shape[0])
        runs = loop(x, y, _ISOTONIC_EPS, thresholds, mean, weight)
        thresholds, mean, weight = thresholds[:runs], mean[:runs], weight[:runs]
    else:
        starts = _tie_runs(x)
        weight = np.diff(np.append(starts, x.shape[0])).astype(np.float64)
        mean = np.add.reduceat(y.astype(np.float64), starts) / weight  # sums of 0/1 labels: exact
        thresholds = x[starts]
    fitted = np.clip(np.asarray(isotonic_regression(mean, weights=weight, increasing=True).x, dtype=np.float64),
                     0.0, 1.0)
    keep = np.ones(fitted.shape[0], dtype=bool)
    keep[1:-1] = (fitted[1:-1] != fitted[:-2]) | (fitted[1:-1] != fitted[2:])
    return thresholds[keep], fitted[keep]


class IsotonicCalibrator(SavedCalibrator):
    """Isotonic regression of correctness on one score (non-decreasing, clipped outside the fitted range): the fit of
    scikit-learn's ``IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip")``, number for number."""

    _type = "IsotonicCalibrator"

    def fit(self, scores: Any, y: Any) -> IsotonicCalibrator:
        x = check_fit_scores(scores)
        labels = check_fit_labels(y, x.shape[0])
        order = np.argsort(x, kind="stable")
        return self.fit_presorted(x[order], labels[order])

    def fit_presorted(self, x: np.ndarray, y: np.ndarray) -> IsotonicCalibrator:
        """Fit on scores already checked and in ascending order (float64) and their 0/1 int64 labels: the fit of
        :meth:`fit` without its checks and sort, for callers that sort once for many fits (the protocol)."""
        self.x_thresholds_, self.y_thresholds_ = _isotonic_from_sorted(x, y)
        return self

    def predict_proba(self, scores: Any) -> np.ndarray:
        """Probability of correctness, shape (n_answers,)."""
        return self.predict_checked(check_fit_scores(scores))

    def predict_checked(self, x: np.ndarray) -> np.ndarray:
        """:meth:`predict_proba` of scores already checked (float64)."""
        check_fitted(self, "x_thresholds_")
        # np.interp clips to the end values outside the range, like out_of_bounds="clip".
        return np.interp(x, self.x_thresholds_, self.y_thresholds_)

    def to_json(self) -> str:
        check_fitted(self, "x_thresholds_")
        return dumps_calibrator({"type": "IsotonicCalibrator", "params": {},
                                 "x_thresholds": self.x_thresholds_.tolist(),
                                 "y_thresholds": self.y_thresholds_.tolist()})

    @classmethod
    def _from_fields(cls, fields: Mapping[str, Any]) -> IsotonicCalibrator:
        model = cls()
        model.x_thresholds_, model.y_thresholds_ = fields["x_thresholds"], fields["y_thresholds"]
        return model
