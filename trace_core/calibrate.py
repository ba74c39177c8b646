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


# Monotone transforms a scalar calibrator is fitted on (registry: Method.transform; the rule per baseline is in the
# table of trace_core.baselines). Probability-type scores such as exp(sum log p) crowd against 0 over many orders of
# magnitude, and a single probability also crowds against 1 for sure answers; their log / logit is well conditioned.
SCORE_TRANSFORMS = ("identity", "log", "logit")
_LOG_FLOOR = np.finfo(np.float64).tiny  # log(0) would be -inf: a score of exactly 0 is the smallest positive float
_LOGIT_CEIL = 1.0 - 2.0 ** -53  # logit(1) would be +inf: a score of exactly 1 is the largest float below 1


def transform_scores(scores: Any, transform: str) -> np.ndarray:
    """``scores`` under a calibration transform; the order of the scores is kept (ties only where clipped).

    * ``identity``: ``x``; any finite scores.
    * ``log``: ``log(max(x, tiny))`` with tiny = 2.2e-308, so in [-708.4, inf); scores ``>= 0``.
    * ``logit``: ``log(q) - log(1 - q)`` with ``q = clip(x, tiny, 1 - 2**-53)``, so in [-708.4, 36.7]; scores in
      [0, 1].

    ``log`` suits scores of the form ``exp(-(a sum or mean of surprisals))``, which crowd against 0 over many orders
    of magnitude: their log is the surprisal statistic itself. ``logit`` suits a probability in [0, 1] that crowds
    against 1 as well (a sure token): it equals ``log`` near 0 and spreads the scores near 1; Platt scaling on it
    (affine in the logit) is temperature scaling of that probability, with a bias.

    Parameters
    ----------
    scores : array-like of shape (n_answers,)
    transform : {"identity", "log", "logit"}

    Returns
    -------
    ndarray of shape (n_answers,)

    Raises
    ------
    ValueError
        Unknown transform, non-finite scores, or scores outside the transform's domain (naming the first one).

    Examples
    --------
    >>> transform_scores([1.0, np.e], "log").round(6).tolist()
    [0.0, 1.0]
    >>> transform_scores([0.5, 0.75], "logit").round(6).tolist()
    [0.0, 1.098612]
    """
    check_choice(transform, "transform", SCORE_TRANSFORMS)
    x = _check_scores(scores)
    if transform == "identity":
        return x
    bad = (x < 0) | (x > 1) if transform == "logit" else x < 0
    if bad.any():
        i = int(np.argmax(bad))
        needs = "scores in [0, 1]" if transform == "logit" else "scores >= 0"
        raise ValueError(f"the {transform} transform needs {needs}; index {i} is {float(x[i])!r}")
    if transform == "log":
        return np.log(np.maximum(x, _LOG_FLOOR))
    q = np.clip(x, _LOG_FLOOR, _LOGIT_CEIL)
    return np.log(q) - np.log1p(-q)


# Damped Newton (see _newton_logistic): stop when the gradient of the mean loss is below _GRADIENT_TOL; a step is
# halved until it decreases the objective, at most down to _MIN_STEP; once the predicted decrease is below
# _ROUNDING * |objective| the objective cannot tell steps apart and one full Newton step finishes the fit.
_GRADIENT_TOL = 1e-11
_MIN_STEP = 2.0 ** -40
_ROUNDING = 1e-12


def _softplus_sum(x: np.ndarray) -> float:
    """``sum log(1 + exp(x))`` as ``max(x, 0) + log1p(exp(-|x|))``: no overflow, exact in both tails, every term
    >= 0 (nothing cancels), and several times faster than ``np.logaddexp(0, x)``."""
    return float((np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))).sum())


def _logistic_objective(u: np.ndarray, sign: np.ndarray, reg: np.ndarray, w: np.ndarray) -> float:
    """The penalised log-loss at log-odds ``u = X @ w``: ``sum_i log(1 + exp(sign_i u_i)) + sum_j reg_j w_j**2 / 2``
    with ``sign = 1 - 2 y`` (the log-loss of label y at log-odds u is ``log(1 + exp((1 - 2 y) u))``)."""
    return _softplus_sum(sign * u) + 0.5 * float((reg * w) @ w)


def _newton_logistic(X: np.ndarray, y: np.ndarray, reg: np.ndarray, *, max_iter: int,
                     tol: float = _GRADIENT_TOL) -> np.ndarray:
    """Minimise the L2-penalised logistic loss by damped Newton steps with a backtracking line search.

    Objective ``f(w) = sum_i [log(1 + exp(u_i)) - y_i u_i] + sum_j reg_j w_j**2 / 2`` with ``u = X @ w``; the last
    column of ``X`` is the intercept's column of ones (``reg`` 0 there).

    * Start: the intercept-only optimum, ``w = (0, ..., 0, log(ybar / (1 - ybar)))``.
    * Direction: Newton's ``d = H^-1 g`` with ``g = X^T (sigmoid(u) - y) + reg * w`` and
      ``H = X^T diag(p (1 - p)) X + diag(reg)``, positive definite (a tiny ridge is added only when rounding makes
      its Cholesky factorisation fail), so ``d`` is a descent direction.
    * Step: the largest ``t`` in 1, 1/2, 1/4, ... with ``f(w - t d) <= f(w) - 1e-4 t g @ d`` (Armijo), so ``f``
      decreases monotonically. Far from the optimum (skewed scores, rare positives, nearly separable data) the step
      is damped; near it the full step is taken and convergence is quadratic.
    * Stop: ``max_j |g_j| <= tol * n`` (the gradient of the *mean* loss below ``tol``); or once the predicted
      decrease ``g @ d`` is below ``1e-12 |f|``, where rounding hides any further decrease of ``f``: then one full
      Newton step (in the quadratic region, it squares the error) is taken if it raises ``f`` by no more than that
      rounding, and the fit stops; or when no step decreases ``f``; or after ``max_iter`` steps.

    Returns
    -------
    ndarray, shape (n_columns,)
        The coefficients, intercept last.
    """
    n, k = X.shape
    mean_y = float(y.mean())
    sign = 1.0 - 2.0 * y
    w = np.zeros(k)
    w[-1] = math.log(mean_y / (1.0 - mean_y))
    u = X @ w
    value = _logistic_objective(u, sign, reg, w)
    gtol = tol * max(n, 1)
    eye = np.eye(k)
    for _ in range(max_iter):
        p = _sigmoid(u)
        grad = X.T @ (p - y) + reg * w
        if float(np.max(np.abs(grad))) <= gtol:
            break
        hess = (X * (p * _sigmoid(-u))[:, None]).T @ X + np.diag(reg)  # p (1 - p), exact in the tails
        ridge = 0.0
        while True:
            try:
                np.linalg.cholesky(hess + ridge * eye)
                break
            except np.linalg.LinAlgError:
                ridge = max(100.0 * ridge, 1e-12 * float(np.trace(hess)), 1e-300)
        step = np.linalg.solve(hess + ridge * eye, grad)
        decrease = float(grad @ step)  # the Newton decrement squared, > 0
        slack = _ROUNDING * max(1.0, abs(value))
        if decrease <= slack:  # f cannot tell steps apart: finish with one full Newton step
            candidate = w - step
            u_new = X @ candidate
            if _logistic_objective(u_new, sign, reg, candidate) <= value + slack:
                w = candidate
            break
        t = 1.0
        while t >= _MIN_STEP:
            candidate = w - t * step
            u_new = X @ candidate
            trial = _logistic_objective(u_new, sign, reg, candidate)
            if trial <= value - 1e-4 * t * decrease:
                break
            t *= 0.5
        else:  # no step decreases f: the optimum to rounding
            break
        w, u, value = candidate, u_new, trial
    return w


def _fit_logistic_1d(z: np.ndarray, y: np.ndarray, *, C: float, max_iter: int = 200,
                     tol: float = _GRADIENT_TOL) -> tuple[float, float]:
    """L2-regularised logistic regression on one (standardised) feature: ``p = sigmoid(a * z + b)``.

    Minimises ``f(a, b) = sum_i logloss_i + a**2 / (2 C)`` (intercept unpenalised), the optimum of scikit-learn's
    ``LogisticRegression(C=C)``, by the algorithm of :func:`_newton_logistic` (damped Newton from the intercept-only
    optimum, Armijo backtracking, the same stopping rules) written out for the 2 x 2 case, several
    times faster than the matrix form, which matters when the evaluation protocol calibrates every method on every
    split. Plain Newton steps diverge on skewed scores squeezed against one end (a coefficient of -2.46e6 on a real
    score with 3% positives); with the line search every step decreases ``f``.
    """
    z = np.asarray(z, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = z.shape[0]
    sign = 1.0 - 2.0 * y
    penalty = 1.0 / C
    mean_y = float(y.mean())
    a, b = 0.0, math.log(mean_y / (1.0 - mean_y))
    u = np.full(n, b)
    value = _softplus_sum(sign * u)
    gtol = tol * max(n, 1)
    for _ in range(max_iter):
        p = _sigmoid(u)
        r = p - y
        g_a, g_b = float(z @ r) + penalty * a, float(r.sum())
        if max(abs(g_a), abs(g_b)) <= gtol:
            break
        w = p * _sigmoid(-u)  # p (1 - p), exact in the tails
        wz = w * z
        h_aa, h_ab, h_bb = float(wz @ z) + penalty, float(wz.sum()), float(w.sum())
        det = h_aa * h_bb - h_ab * h_ab
        if not det > 1e-14 * h_aa * h_bb:  # singular to rounding (weights underflowed): a diagonally scaled step
            step_a, step_b = g_a / h_aa, g_b / max(h_bb, 1e-300)
        else:
            step_a, step_b = (h_bb * g_a - h_ab * g_b) / det, (h_aa * g_b - h_ab * g_a) / det
        decrease = g_a * step_a + g_b * step_b
        slack = _ROUNDING * max(1.0, abs(value))
        if decrease <= slack:  # f cannot tell steps apart: finish with one full Newton step
            a_new, b_new = a - step_a, b - step_b
            if _softplus_sum(sign * (a_new * z + b_new)) + 0.5 * penalty * a_new * a_new <= value + slack:
                a, b = a_new, b_new
            break
        t = 1.0
        while t >= _MIN_STEP:
            a_new, b_new = a - t * step_a, b - t * step_b
            u_new = a_new * z + b_new
            trial = _softplus_sum(sign * u_new) + 0.5 * penalty * a_new * a_new
            if trial <= value - 1e-4 * t * decrease:
                break
            t *= 0.5
        else:  # no step decreases f: the optimum to rounding
            break
        a, b, u, value = a_new, b_new, u_new, trial
    return float(a), float(b)


def _fit_logistic(F: np.ndarray, y: np.ndarray, *, C: float, max_iter: int = 100) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression: ``p = sigmoid(F @ coef + intercept)``.

    Minimises ``sum_i logloss_i + |coef|**2 / (2 C)`` (intercept unpenalised), scikit-learn's
    ``LogisticRegression(C=C)`` objective, by :func:`_newton_logistic` to near machine precision. With a handful of
    features the (d+1)-square Newton system is tiny, so a fit takes a few passes over the data instead of lbfgs'
    dozens.
    """
    n, d = F.shape
    X = np.hstack([F, np.ones((n, 1))])
    reg = np.full(d + 1, 1.0 / C)
    reg[-1] = 0.0
    w = _newton_logistic(X, np.asarray(y, dtype=np.float64), reg, max_iter=max_iter)
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

    Fitted by a damped Newton solver with a line search (the optimum of scikit-learn's ``LogisticRegression(C=C)`` on
    the standardised score, also on skewed, rare-positive and nearly separable scores). Give it a well-conditioned
    score: each method's documented transform, ``transform_scores(score, Method.transform)``.

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
