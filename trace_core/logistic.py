"""Logistic fits and score transforms shared by the calibrators: the sigmoid, the monotone transforms a scalar
calibrator is fitted on, and the damped Newton solvers (one feature for Platt, several for TRACE+) that reach
scikit-learn's ``LogisticRegression`` optimum on skewed, rare-positive, separable and constant inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ._checks import check_choice, check_scores

__all__ = ["SCORE_TRANSFORMS", "fit_logistic", "fit_logistic_1d", "sigmoid", "standardised_logistic",
           "transform_scores"]


def sigmoid(z: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-z))``: the one logistic function of the package (the evaluation protocol uses it too).

    scipy's expit: no overflow warnings for large |z|, exact in the tails where ``0.5 * (1 + tanh(z / 2))`` rounds to
    0 or 1, and several times faster than that tanh form, which matters in the protocol's hundreds of fits.
    """
    from scipy.special import expit  # imported on first use: `import trace_core` stays light

    return expit(z)


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
    x = check_scores(scores, "scores", probability=False)
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


def _softplus_sum(x: np.ndarray, *, same_magnitude: bool = False) -> float:
    """``sum log(1 + exp(x))`` as ``max(x, 0) + log1p(exp(-|x|))``: no overflow, exact in both tails, every term
    >= 0 (nothing cancels), and several times faster than ``np.logaddexp(0, x)``. ``same_magnitude``: every
    ``|x_i|`` is ``|x_0|``, so one exp and one log serve every term (the same values)."""
    if same_magnitude:
        tail = np.log1p(np.exp(-np.abs(x[:1])))[0]
        return float((np.maximum(x, 0.0) + tail).sum())
    return float((np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))).sum())


def _logistic_objective(u: np.ndarray, sign: np.ndarray, reg: np.ndarray, w: np.ndarray, *,
                        constant: bool = False) -> float:
    """The penalised log-loss at log-odds ``u = X @ w``: ``sum_i log(1 + exp(sign_i u_i)) + sum_j reg_j w_j**2 / 2``
    with ``sign = 1 - 2 y`` (the log-loss of label y at log-odds u is ``log(1 + exp((1 - 2 y) u))``). ``constant``:
    every ``u_i`` is ``u_0``."""
    return _softplus_sum(sign * u, same_magnitude=constant) + 0.5 * float((reg * w) @ w)


def _sigmoid_of_constant(u: np.ndarray) -> np.ndarray:
    """``sigmoid(u)`` for ``u`` holding one value: one evaluation, filled."""
    return np.full(u.shape[0], sigmoid(u[:1])[0])


def _damped_step(objective_at: Callable[[float], float], value: float,
                 decrease: float) -> tuple[float, float, bool]:
    """The step both Newton solvers take along the descent direction ``d`` from a point where the objective is
    ``value`` and the predicted decrease ``g @ d`` is ``decrease``; ``objective_at(t)`` is the objective at
    ``w - t d`` (the solver keeps that point: its last call is the step taken).

    Returns ``(t, objective at t, last)``, ``t`` 0 for no step and ``last`` when the fit stops: once ``decrease`` is
    below the rounding ``_ROUNDING * max(1, |value|)``, one full step if it raises the objective by no more than that
    rounding, then stop; otherwise the largest ``t`` in 1, 1/2, ... down to ``_MIN_STEP`` with
    ``objective_at(t) <= value - 1e-4 t decrease`` (Armijo), or, when there is none, stop where it is.
    """
    slack = _ROUNDING * max(1.0, abs(value))
    if decrease <= slack:  # f cannot tell steps apart: finish with one full Newton step
        trial = objective_at(1.0)
        return (1.0 if trial <= value + slack else 0.0), trial, True
    t = 1.0
    while t >= _MIN_STEP:
        trial = objective_at(t)
        if trial <= value - 1e-4 * t * decrease:
            return t, trial, False
        t *= 0.5
    return 0.0, value, True  # no step decreases f: the optimum to rounding


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
    # The start's log-odds are the intercept for every answer (X @ w adds zeros to it): the objective and sigmoids
    # there take one evaluation each, filled, with the same values as n of them.
    u = np.full(n, w[-1])
    constant = True
    value = _logistic_objective(u, sign, reg, w, constant=True)
    gtol = tol * max(n, 1)
    eye = np.eye(k)
    step = np.zeros(k)
    candidate, u_new = w, u

    def objective_at(t: float) -> float:
        """``f(w - t d)``, keeping the point and its log-odds (the last call's are the step taken)."""
        nonlocal candidate, u_new
        candidate = w - t * step
        u_new = X @ candidate
        return _logistic_objective(u_new, sign, reg, candidate)

    for _ in range(max_iter):
        link = _sigmoid_of_constant if constant else sigmoid
        p = link(u)
        grad = X.T @ (p - y) + reg * w
        if float(np.max(np.abs(grad))) <= gtol:
            break
        hess = (X * (p * link(-u))[:, None]).T @ X + np.diag(reg)  # p (1 - p), exact in the tails
        ridge = 0.0
        while True:
            try:
                np.linalg.cholesky(hess + ridge * eye)
                break
            except np.linalg.LinAlgError:
                ridge = max(100.0 * ridge, 1e-12 * float(np.trace(hess)), 1e-300)
        step = np.linalg.solve(hess + ridge * eye, grad)
        t, trial, last = _damped_step(objective_at, value, float(grad @ step))  # g @ d: the Newton decrement squared
        if t:
            w = candidate
        if last:
            break
        u, value = u_new, trial
        constant = False
    return w


def fit_logistic_1d(z: np.ndarray, y: np.ndarray, *, C: float, max_iter: int = 200,
                     tol: float = _GRADIENT_TOL) -> tuple[float, float]:
    """L2-regularised logistic regression on one (standardised) feature: ``p = sigmoid(a * z + b)``.

    Minimises ``f(a, b) = sum_i logloss_i + a**2 / (2 C)`` (intercept unpenalised), the optimum of scikit-learn's
    ``LogisticRegression(C=C)``, by the algorithm of :func:`_newton_logistic` (damped Newton from the intercept-only
    optimum, Armijo backtracking, the same stopping rules) written out for the 2 x 2 case, several
    times faster than the matrix form, which matters when the evaluation protocol calibrates every method on every
    split. Plain Newton steps diverge on skewed scores squeezed against one end (a coefficient of -2.46e6 on a real
    score with 3% positives); with the line search every step decreases ``f``.

    Each point costs one ``exp(-|u|)``: it gives the loss (``max(s u, 0) + log1p(e)``), the sigmoid
    (``1 / (1 + e)`` or ``e / (1 + e)`` by the sign of ``u``) and its derivative ``e / (1 + e)**2``, all exact in the
    tails, in preallocated buffers (the protocol runs hundreds of these fits; a sigmoid call per use and fresh
    temporaries took about twice as long).
    """
    z = np.asarray(z, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = z.shape[0]
    sign = 1.0 - 2.0 * y
    penalty = 1.0 / C
    mean_y = float(y.mean())
    a, b = 0.0, math.log(mean_y / (1.0 - mean_y))
    work_a, work_b, r = np.empty(n), np.empty(n), np.empty(n)
    nonneg = np.empty(n, dtype=bool)

    def loss(u: np.ndarray, e: np.ndarray, *, constant: bool = False) -> float:
        """``sum_i log(1 + exp(sign_i u_i))``; leaves ``e = exp(-|u|)`` for the next step. ``constant``: every
        ``u_i`` is ``u[0]`` (the start), so one exp and one log give every point's value, the same numbers."""
        if constant:
            e.fill(np.exp(np.negative(np.abs(u[:1])))[0])
            work_b.fill(np.log1p(e[:1])[0])
        else:
            np.abs(u, out=e)
            np.negative(e, out=e)
            np.exp(e, out=e)
            np.log1p(e, out=work_b)
        np.multiply(sign, u, out=work_a)
        np.maximum(work_a, 0.0, out=work_a)
        return float(work_a.sum()) + float(work_b.sum())

    u, e = np.full(n, b), np.empty(n)
    u_new, e_new = np.empty(n), np.empty(n)
    value = loss(u, e, constant=True)
    gtol = tol * max(n, 1)
    step_a = step_b = 0.0

    def objective_at(t: float) -> float:
        """``f(a - t step_a, b - t step_b)``, leaving its log-odds in ``u_new`` and ``exp(-|u|)`` in ``e_new``."""
        a_new = a - t * step_a
        np.add(np.multiply(z, a_new, out=u_new), b - t * step_b, out=u_new)
        return loss(u_new, e_new) + 0.5 * penalty * a_new * a_new

    for _ in range(max_iter):
        q = np.reciprocal(np.add(e, 1.0, out=work_a), out=work_a)  # 1 / (1 + e) = sigmoid(|u|)
        low = np.multiply(e, q, out=work_b)  # e / (1 + e) = sigmoid(-|u|)
        np.greater_equal(u, 0.0, out=nonneg)
        np.copyto(r, low)
        np.copyto(r, q, where=nonneg)  # sigmoid(u)
        np.subtract(r, y, out=r)
        g_a, g_b = float(z @ r) + penalty * a, float(r.sum())
        if max(abs(g_a), abs(g_b)) <= gtol:
            break
        w = np.multiply(low, q, out=work_b)  # p (1 - p) = e / (1 + e)**2, exact in the tails
        wz = np.multiply(w, z, out=work_a)
        h_aa, h_ab, h_bb = float(wz @ z) + penalty, float(wz.sum()), float(w.sum())
        det = h_aa * h_bb - h_ab * h_ab
        if not det > 1e-14 * h_aa * h_bb:  # singular to rounding (weights underflowed): a diagonally scaled step
            step_a, step_b = g_a / h_aa, g_b / max(h_bb, 1e-300)
        else:
            step_a, step_b = (h_bb * g_a - h_ab * g_b) / det, (h_aa * g_b - h_ab * g_a) / det
        t, trial, last = _damped_step(objective_at, value, g_a * step_a + g_b * step_b)
        if t:
            a, b = a - t * step_a, b - t * step_b
        if last:
            break
        value = trial
        u, u_new, e, e_new = u_new, u, e_new, e
    return float(a), float(b)


def fit_logistic(F: np.ndarray, y: np.ndarray, *, C: float, max_iter: int = 100) -> tuple[np.ndarray, float]:
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


def standardised_logistic(F: np.ndarray, y: np.ndarray, *, C: float = 1.0) -> Callable[[np.ndarray], np.ndarray]:
    """Fit TRACE+'s model on features ``F`` (n, d) and 0/1 labels: standardise with ``F``'s mean and standard deviation
    (a constant column is left unscaled), then the L2 logistic regression of :func:`fit_logistic`. Returns the
    decision function (log-odds of label 1) for new feature rows."""
    mean, scale = F.mean(axis=0), F.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    coef, intercept = fit_logistic((F - mean) / scale, np.asarray(y, dtype=np.float64), C=C)
    return lambda X: ((X - mean) / scale) @ coef + intercept
