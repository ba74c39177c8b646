"""Calibrators: TRACE+ (features -> probability) and scalar calibrators for single scores.

All follow scikit-learn's conventions (``__init__`` stores parameters, ``fit`` returns self and sets trailing-underscore
attributes) and serialise to JSON, never pickle. Prediction needs numpy and scipy's ``expit`` only, so a calibrator
loaded from JSON works without scikit-learn's estimator objects. ``predict_proba`` returns the probability that each
answer is correct, shape (n_answers,).
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, Sequence

import numpy as np

from ._checks import check_choice, check_int, check_labels, check_real, check_scores, shorten
from .features import feature_matrix, feature_names
from .trace import Trace

__all__ = ["SCORE_TRANSFORMS", "IsotonicCalibrator", "NotFittedError", "PlattCalibrator", "TracePlus", "calibrator_from_json",
           "transform_scores"]

_FORMAT_VERSION = 1


class NotFittedError(ValueError, AttributeError):
    """Raised when predicting with a calibrator that has not been fitted."""


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-z))``: the one logistic function of the package (the evaluation protocol uses it too).

    scipy's expit: no overflow warnings for large |z|, exact in the tails where ``0.5 * (1 + tanh(z / 2))`` rounds to
    0 or 1, and several times faster than that tanh form, which matters in the protocol's hundreds of fits.
    """
    from scipy.special import expit  # imported on first use: `import trace_core` stays light

    return expit(z)


def _check_labels(y: Any, n: int) -> np.ndarray:
    return check_labels(y, "y", n=n, purpose="fitting")


def _check_scores(scores: Any) -> np.ndarray:
    return check_scores(scores, "scores", probability=False)


def _check_fitted(obj: Any, attribute: str) -> None:
    if not hasattr(obj, attribute):
        raise NotFittedError(f"This {type(obj).__name__} is not fitted yet; call fit(...) before predicting.")


def _loads(data: str | Mapping[str, Any], expected_type: str | None = None) -> dict[str, Any]:
    obj = json.loads(data) if isinstance(data, str) else dict(data)
    if not isinstance(obj, dict) or "type" not in obj:
        raise ValueError("not a calibrator JSON: expected an object with a 'type' field")
    if expected_type is not None and obj["type"] != expected_type:
        raise ValueError(f"expected a {expected_type} calibrator, got {shorten(obj['type'])}")
    if obj.get("format_version") != _FORMAT_VERSION:
        raise ValueError(f"unsupported calibrator format_version {shorten(obj.get('format_version'))}; "
                         f"this version reads {_FORMAT_VERSION}")
    return obj


def _dumps(obj: Mapping[str, Any]) -> str:
    return json.dumps({"format_version": _FORMAT_VERSION, **obj}, indent=2, allow_nan=False)


# Monotone transforms a scalar calibrator is fitted on (registry: Method.transform). Probability-type scores such as
# exp(sum log p) crowd against 0 over many orders of magnitude; their log is well conditioned.
SCORE_TRANSFORMS = ("identity", "log")
_LOG_FLOOR = np.finfo(np.float64).tiny  # log(0) would be -inf: a score of exactly 0 is the smallest positive float


def transform_scores(scores: Any, transform: str) -> np.ndarray:
    """``scores`` under a calibration transform (order kept): ``identity`` or ``log`` (of ``max(score, tiny)``).

    >>> transform_scores([1.0, np.e], "log").round(6).tolist()
    [0.0, 1.0]
    """
    check_choice(transform, "transform", SCORE_TRANSFORMS)
    x = _check_scores(scores)
    if transform == "log":
        if (x < 0).any():
            i = int(np.argmax(x < 0))
            raise ValueError(f"the log transform needs scores >= 0; index {i} is {float(x[i])!r}")
        return np.log(np.maximum(x, _LOG_FLOOR))
    return x


def _fit_logistic_1d(z: np.ndarray, y: np.ndarray, *, C: float, max_iter: int = 100) -> tuple[float, float]:
    """L2-regularised logistic regression on one feature by Newton's method: ``p = sigmoid(a * z + b)``.

    Minimises ``sum_i logloss_i + a**2 / (2 C)`` (intercept unpenalised): the same optimum as scikit-learn's
    ``LogisticRegression(C=C)``, in microseconds rather than milliseconds, which matters when the evaluation protocol
    fits a calibrator for every method on every split.
    """
    a, b = 0.0, float(np.log((y.mean() + 1e-12) / (1 - y.mean() + 1e-12)))
    penalty = 1.0 / C
    zz, z1, n = float(z @ z), float(z.sum()), float(z.shape[0])
    for _ in range(max_iter):
        p = _sigmoid(a * z + b)
        r = p - y
        w = p * (1 - p)
        g_a, g_b = float(z @ r) + penalty * a, float(r.sum())
        h_aa, h_ab, h_bb = float((w * z) @ z) + penalty, float(w @ z), float(w.sum())
        det = h_aa * h_bb - h_ab * h_ab
        if det <= 1e-300 * max(zz, z1 * z1, n):
            break
        step_a = (h_bb * g_a - h_ab * g_b) / det
        step_b = (h_aa * g_b - h_ab * g_a) / det
        a, b = a - step_a, b - step_b
        if abs(step_a) < 1e-10 and abs(step_b) < 1e-10:
            break
    return float(a), float(b)


def _fit_logistic(F: np.ndarray, y: np.ndarray, *, C: float, max_iter: int = 100) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression by damped Newton steps: ``p = sigmoid(F @ coef + intercept)``.

    Minimises ``sum_i logloss_i + |coef|**2 / (2 C)`` (intercept unpenalised), scikit-learn's
    ``LogisticRegression(C=C)`` objective, solved to near machine precision. With a handful of features the
    (d+1)-square Newton system is tiny, so a fit takes a few passes over the data instead of lbfgs' dozens.
    """
    n, d = F.shape
    X = np.hstack([F, np.ones((n, 1))])
    reg = np.full(d + 1, 1.0 / C)
    reg[-1] = 0.0
    mean_y = float(y.mean())
    w = np.zeros(d + 1)
    w[-1] = math.log(mean_y / (1.0 - mean_y))

    def loss(weights: np.ndarray) -> float:
        z = X @ weights
        # logloss = log(1 + e^z) - y z, computed stably
        return float(np.logaddexp(0.0, z).sum() - y @ z + 0.5 * (reg * weights) @ weights)

    current = loss(w)
    for _ in range(max_iter):
        p = _sigmoid(X @ w)
        grad = X.T @ (p - y) + reg * w
        hess = (X * (p * (1.0 - p))[:, None]).T @ X + np.diag(reg)
        try:
            step = np.linalg.solve(hess + 1e-12 * np.eye(d + 1), grad)
        except np.linalg.LinAlgError:  # pragma: no cover - only for degenerate, all-constant features
            step = grad / (np.diag(hess) + 1e-12)
        t = 1.0
        while True:  # backtracking: Newton's full step can overshoot far from the optimum
            candidate = w - t * step
            value = loss(candidate)
            if value <= current + 1e-4 * t * float(grad @ -step) or t < 1e-8:
                break
            t *= 0.5
        w, previous, current = candidate, current, value
        if np.max(np.abs(t * step)) < 1e-10 or previous - current < 1e-14 * max(1.0, abs(current)):
            break
    return w[:-1].copy(), float(w[-1])


class TracePlus:
    """TRACE+: standardised trace features and logistic regression, fitted on a calibration split.

    Parameters
    ----------
    feature_set : str, default "paper"
        A key of :data:`trace_core.features.FEATURE_SETS` ("paper" = the paper's 8 features).
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
    """

    def __init__(self, *, feature_set: str = "paper", C: float = 1.0, max_iter: int = 1000) -> None:
        self.feature_set = feature_set
        self.C = C
        self.max_iter = max_iter

    def _features(self, X: Sequence[Trace] | np.ndarray) -> np.ndarray:
        names = feature_names(self.feature_set)
        if isinstance(X, np.ndarray) and X.dtype != object:
            F = np.asarray(X, dtype=np.float64)
            if F.ndim != 2 or F.shape[1] != len(names):
                raise ValueError(f"feature matrix must have shape (n, {len(names)}) for feature set "
                                 f"{self.feature_set!r}, got {F.shape}")
        else:
            F = feature_matrix(list(X), feature_set=self.feature_set)
        if not np.isfinite(F).all():
            row = int(np.flatnonzero(~np.isfinite(F).all(axis=1))[0])
            raise ValueError(f"answer {row} has a non-finite feature; check its trace")
        return F

    def fit(self, X: Sequence[Trace] | np.ndarray, y: Any) -> "TracePlus":
        """Fit on traces (or their feature matrix, shape (n, n_features)) and 0/1 correctness labels (n,)."""
        C = check_real(self.C, "C", minimum=0, low_open=True)
        max_iter = check_int(self.max_iter, "max_iter", minimum=1)
        F = self._features(X)
        labels = _check_labels(y, F.shape[0])
        mean = F.mean(axis=0)
        scale = F.std(axis=0)
        scale = np.where(scale > 1e-12, scale, 1.0)
        coef, intercept = _fit_logistic((F - mean) / scale, labels.astype(np.float64), C=C, max_iter=max_iter)
        self.feature_names_ = feature_names(self.feature_set)
        self.mean_, self.scale_ = mean, scale
        self.coef_, self.intercept_ = coef, intercept
        self.n_samples_ = int(F.shape[0])
        return self

    def decision_function(self, X: Sequence[Trace] | np.ndarray) -> np.ndarray:
        """Log-odds of correctness, shape (n_answers,)."""
        _check_fitted(self, "coef_")
        F = self._features(X)
        return ((F - self.mean_) / self.scale_) @ self.coef_ + self.intercept_

    def predict_proba(self, X: Sequence[Trace] | np.ndarray) -> np.ndarray:
        """Probability that each answer is correct, shape (n_answers,)."""
        return _sigmoid(self.decision_function(X))

    def feature_contributions(self, X: Sequence[Trace] | np.ndarray) -> np.ndarray:
        """Each feature's additive share of the log-odds, shape (n_answers, n_features); rows sum to log-odds minus
        the intercept. Used to explain a TRACE+ probability in plain language."""
        _check_fitted(self, "coef_")
        F = self._features(X)
        return ((F - self.mean_) / self.scale_) * self.coef_

    def to_json(self) -> str:
        _check_fitted(self, "coef_")
        return _dumps({
            "type": "TracePlus",
            "params": {"feature_set": self.feature_set, "C": self.C, "max_iter": self.max_iter},
            "feature_names": list(self.feature_names_),
            "mean": self.mean_.tolist(),
            "scale": self.scale_.tolist(),
            "coef": self.coef_.tolist(),
            "intercept": self.intercept_,
            "n_samples": self.n_samples_,
        })

    @classmethod
    def from_json(cls, data: str | Mapping[str, Any]) -> "TracePlus":
        obj = _loads(data, "TracePlus")
        model = cls(**obj["params"])
        names = tuple(obj["feature_names"])
        if names != feature_names(model.feature_set):
            raise ValueError(f"calibrator features {shorten(list(names))} do not match feature set {model.feature_set!r} "
                             f"of this version ({list(feature_names(model.feature_set))})")
        d = len(names)
        arrays = {k: np.asarray(obj[k], dtype=np.float64) for k in ("mean", "scale", "coef")}
        for key, arr in arrays.items():
            if arr.shape != (d,) or not np.isfinite(arr).all():
                raise ValueError(f"calibrator field {key!r} must be {d} finite numbers")
        if (arrays["scale"] <= 0).any():
            raise ValueError("calibrator field 'scale' must be positive")
        model.feature_names_ = names
        model.mean_, model.scale_, model.coef_ = arrays["mean"], arrays["scale"], arrays["coef"]
        model.intercept_ = float(obj["intercept"])
        model.n_samples_ = int(obj.get("n_samples", 0))
        return model


class PlattCalibrator:
    """Platt scaling of one score: ``p = sigmoid(a * (score - mean) / std + b)``.

    Parameters
    ----------
    C : float, default 1e4
        Inverse regularisation strength; large by default (plain Platt scaling).
    """

    def __init__(self, *, C: float = 1e4) -> None:
        self.C = C

    def fit(self, scores: Any, y: Any) -> "PlattCalibrator":
        C = check_real(self.C, "C", minimum=0, low_open=True)
        x = _check_scores(scores)
        labels = _check_labels(y, x.shape[0])
        mean, std = float(x.mean()), float(x.std())
        std = std if std > 1e-12 else 1.0
        self.coef_, self.intercept_ = _fit_logistic_1d((x - mean) / std, labels, C=C)
        self.mean_, self.scale_ = mean, std
        return self

    def predict_proba(self, scores: Any) -> np.ndarray:
        """Probability of correctness, shape (n_answers,)."""
        _check_fitted(self, "coef_")
        x = _check_scores(scores)
        return _sigmoid(self.coef_ * (x - self.mean_) / self.scale_ + self.intercept_)

    def to_json(self) -> str:
        _check_fitted(self, "coef_")
        return _dumps({"type": "PlattCalibrator", "params": {"C": self.C}, "mean": self.mean_,
                       "scale": self.scale_, "coef": self.coef_, "intercept": self.intercept_})

    @classmethod
    def from_json(cls, data: str | Mapping[str, Any]) -> "PlattCalibrator":
        obj = _loads(data, "PlattCalibrator")
        model = cls(**obj["params"])
        values = [float(obj[k]) for k in ("mean", "scale", "coef", "intercept")]
        if not all(math.isfinite(v) for v in values) or values[1] <= 0:
            raise ValueError("calibrator fields must be finite numbers with a positive 'scale'")
        model.mean_, model.scale_, model.coef_, model.intercept_ = values
        return model


class IsotonicCalibrator:
    """Isotonic regression of correctness on one score (non-decreasing, clipped outside the fitted range)."""

    def fit(self, scores: Any, y: Any) -> "IsotonicCalibrator":
        from sklearn.isotonic import IsotonicRegression

        x = _check_scores(scores)
        labels = _check_labels(y, x.shape[0])
        model = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(x, labels)
        self.x_thresholds_ = np.asarray(model.X_thresholds_, dtype=np.float64)
        self.y_thresholds_ = np.asarray(model.y_thresholds_, dtype=np.float64)
        return self

    def predict_proba(self, scores: Any) -> np.ndarray:
        """Probability of correctness, shape (n_answers,)."""
        _check_fitted(self, "x_thresholds_")
        x = _check_scores(scores)
        # np.interp clips to the end values outside the range, like out_of_bounds="clip".
        return np.interp(x, self.x_thresholds_, self.y_thresholds_)

    def to_json(self) -> str:
        _check_fitted(self, "x_thresholds_")
        return _dumps({"type": "IsotonicCalibrator", "params": {}, "x_thresholds": self.x_thresholds_.tolist(),
                       "y_thresholds": self.y_thresholds_.tolist()})

    @classmethod
    def from_json(cls, data: str | Mapping[str, Any]) -> "IsotonicCalibrator":
        obj = _loads(data, "IsotonicCalibrator")
        x = np.asarray(obj["x_thresholds"], dtype=np.float64)
        y = np.asarray(obj["y_thresholds"], dtype=np.float64)
        if x.ndim != 1 or x.shape != y.shape or x.size == 0 or not (np.isfinite(x).all() and np.isfinite(y).all()):
            raise ValueError("'x_thresholds' and 'y_thresholds' must be equal-length non-empty lists of numbers")
        if (np.diff(x) < 0).any() or (np.diff(y) < 0).any() or y.min() < 0 or y.max() > 1:
            raise ValueError("isotonic thresholds must be non-decreasing with y in [0, 1]")
        model = cls()
        model.x_thresholds_, model.y_thresholds_ = x, y
        return model


_TYPES = {"TracePlus": TracePlus, "PlattCalibrator": PlattCalibrator, "IsotonicCalibrator": IsotonicCalibrator}


def calibrator_from_json(data: str | Mapping[str, Any]) -> TracePlus | PlattCalibrator | IsotonicCalibrator:
    """Load any calibrator saved with ``to_json``."""
    obj = _loads(data)
    if obj["type"] not in _TYPES:
        raise ValueError(f"unknown calibrator type {shorten(obj['type'])}; expected one of {sorted(_TYPES)}")
    return _TYPES[obj["type"]].from_json(obj)
