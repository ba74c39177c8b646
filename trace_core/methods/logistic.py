"""Logistic fits and score transforms shared by the calibrators: the sigmoid, the monotone transforms a scalar
calibrator is fitted on, and the damped Newton solvers (one feature for Platt, several for TRACE+) that reach
scikit-learn's ``LogisticRegression`` optimum on skewed, rare-positive, separable and constant inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from trace_core.checks import check_choice, check_scores
from trace_core.metrics.kernels import compiled

__all__ = ["SCORE_TRANSFORMS", "StandardisedLogistic", "fit_logistic", "fit_logistic_1d", "loss_terms_loop",
           "negative_abs_affine_loop", "point_1d_loop", "sigmoid", "standardised_logistic",
           "standardised_logistic_rows", "transform_scores"]


def sigmoid(z: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-z))``: the one logistic function of the package (the evaluation protocol uses it too).

    scipy's expit: no overflow warnings for large |z|, exact in the tails where ``0.5 * (1 + tanh(z / 2))`` rounds to
    0 or 1, and several times faster than that tanh form, which matters in the protocol's hundreds of fits.
    """
    from scipy.special import expit  # imported on first use: `import trace_core` stays light

    return expit(z)


# Monotone transforms a scalar calibrator is fitted on (registry: Method.transform; the rule per baseline is in the
# table of trace_core.methods.baselines). Probability-type scores such as exp(sum log p) crowd against 0 over many
# orders of magnitude, and a single probability also crowds against 1 for sure answers; their log / logit is well
# conditioned.
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


# Sums of log(1 + e) in the compiled loops: the product of up to this many factors 1 + e in [1, 2] stays finite,
# and one log per block replaces one log per term (each term's rounding, below 1.2e-16, is far below the line
# search's rounding slack).
_LOG_BLOCK = 512


def loss_terms_loop(u: np.ndarray, y: np.ndarray, e: np.ndarray, r: np.ndarray, weight: np.ndarray) -> float:
    """The log-loss sum at log-odds ``u`` (labels ``y``, ``e = exp(-|u|)``) in one pass, writing the residuals
    ``r = sigmoid(u) - y`` and the Newton weights ``weight = p (1 - p) = e / (1 + e)**2`` (compiled by
    :func:`~trace_core.metrics.kernels.compiled`; :func:`_loss_terms` is the numpy path)."""
    loss = 0.0
    logs = 0.0
    block = 1.0
    for i in range(u.shape[0]):
        ei = e[i]
        q = 1.0 / (1.0 + ei)  # sigmoid(|u|)
        low = ei * q  # sigmoid(-|u|)
        s = (1.0 - 2.0 * y[i]) * u[i]
        if s > 0.0:
            loss += s
        r[i] = (q if u[i] >= 0.0 else low) - y[i]
        weight[i] = low * q
        block *= 1.0 + ei
        if (i & (_LOG_BLOCK - 1)) == _LOG_BLOCK - 1:
            logs += math.log(block)
            block = 1.0
    return loss + logs + math.log(block)


def negative_abs_affine_loop(z: np.ndarray, a: float, b: float, out: np.ndarray) -> None:
    """``out = -|a z + b|`` in one pass (compiled), the argument of the one ``exp`` a Newton point needs."""
    for i in range(z.shape[0]):
        out[i] = -abs(a * z[i] + b)


def point_1d_loop(z: np.ndarray, y: np.ndarray, a: float, b: float,
                  e: np.ndarray) -> tuple[float, float, float, float, float, float]:
    """At ``u = a z + b`` with ``e = exp(-|u|)``: the log-loss sum, its gradient in (a, b) and its Hessian's three
    entries, in one pass (compiled; :func:`_point_1d` is the numpy path)."""
    loss = 0.0
    logs = 0.0
    block = 1.0
    g_a = g_b = h_aa = h_ab = h_bb = 0.0
    for i in range(z.shape[0]):
        ei = e[i]
        u = a * z[i] + b
        q = 1.0 / (1.0 + ei)
        low = ei * q
        s = (1.0 - 2.0 * y[i]) * u
        if s > 0.0:
            loss += s
        r = (q if u >= 0.0 else low) - y[i]
        w = low * q
        g_a += z[i] * r
        g_b += r
        wz = w * z[i]
        h_aa += wz * z[i]
        h_ab += wz
        h_bb += w
        block *= 1.0 + ei
        if (i & (_LOG_BLOCK - 1)) == _LOG_BLOCK - 1:
            logs += math.log(block)
            block = 1.0
    return loss + logs + math.log(block), g_a, g_b, h_aa, h_ab, h_bb


def _loss_terms(u: np.ndarray, y: np.ndarray, r: np.ndarray, weight: np.ndarray) -> float:
    """:func:`loss_terms_loop` at ``u``, compiled when numba is installed, else in numpy: ``sum max(s u, 0) +
    log1p(exp(-|u|))`` with ``s = 1 - 2 y`` (no overflow, exact in both tails, nothing cancels) and the
    residuals and weights from the same ``exp(-|u|)``, exact in the tails."""
    e = np.exp(np.negative(np.abs(u)))
    loop = compiled(loss_terms_loop)
    if loop is not None:
        return float(loop(u, y, e, r, weight))
    q = 1.0 / (1.0 + e)
    low = e * q
    np.subtract(np.where(u >= 0.0, q, low), y, out=r)
    np.multiply(low, q, out=weight)
    return float(np.maximum((1.0 - 2.0 * y) * u, 0.0).sum()) + float(np.log1p(e).sum())


def _point_1d(z: np.ndarray, y: np.ndarray, a: float, b: float,
              e: np.ndarray) -> tuple[float, float, float, float, float, float]:
    """:func:`point_1d_loop` (``e`` a buffer), compiled when numba is installed, else in numpy."""
    loop, first = compiled(point_1d_loop), compiled(negative_abs_affine_loop)
    if loop is not None and first is not None:
        first(z, a, b, e)
        np.exp(e, out=e)
        out: tuple[float, float, float, float, float, float] = loop(z, y, a, b, e)
        return out
    u = np.add(np.multiply(z, a), b)
    r, weight = np.empty_like(u), e
    loss = _loss_terms(u, y, r, weight)
    wz = weight * z
    return loss, float(z @ r), float(r.sum()), float(wz @ z), float(wz.sum()), float(weight.sum())


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



# Columns of Xt per block of _gradient_and_gram: the block's weighted copy (at most a dozen rows) stays in cache.
_GRAM_BLOCK = 8192


def _gradient_and_gram(Xt: np.ndarray, r: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``X^T r`` and ``X^T diag(weight) X`` for ``Xt = X^T`` (k, n), block by block of columns: each block is read
    once for both, and its weighted copy ``Xt * sqrt(weight)`` gives the Gram matrix as one symmetric product
    (BLAS syrk) while it is still in cache."""
    k, n = Xt.shape
    root_weight = np.sqrt(weight)
    grad, gram = np.zeros(k), np.zeros((k, k))
    root = np.empty((k, min(n, _GRAM_BLOCK)))
    for first in range(0, n, _GRAM_BLOCK):
        last = min(first + _GRAM_BLOCK, n)
        block, scaled = Xt[:, first:last], root[:, :last - first]
        grad += block @ r[first:last]
        np.multiply(block, root_weight[first:last], out=scaled)
        gram += scaled @ scaled.T
    return grad, gram


def _newton_logistic(Xt: np.ndarray, y: np.ndarray, reg: np.ndarray, *, max_iter: int,
                     tol: float = _GRADIENT_TOL, start: np.ndarray | None = None) -> np.ndarray:
    """Minimise the L2-penalised logistic loss by damped Newton steps with a backtracking line search.

    Objective ``f(w) = sum_i [log(1 + exp(u_i)) - y_i u_i] + sum_j reg_j w_j**2 / 2`` with ``u = X @ w``; ``Xt`` is
    ``X`` transposed, one row per column (k, n), C-contiguous: every pass then runs along a long row instead of
    across a few columns (several times faster for numpy's element-wise steps); its last row is the intercept's
    ones (``reg`` 0 there).

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

    ``start``: coefficients to start from instead (a nearby fit's), taken only where the objective there is below the
    default start's (see :func:`fit_logistic_1d`); the optimum is the same.

    Returns
    -------
    ndarray, shape (n_columns,)
        The coefficients, intercept last.
    """
    k, n = Xt.shape
    mean_y = float(y.mean())
    w = np.zeros(k)
    w[-1] = math.log(mean_y / (1.0 - mean_y))
    r, weight = np.empty(n), np.empty(n)
    r_new, weight_new = np.empty(n), np.empty(n)
    value = _loss_terms(w @ Xt, y, r, weight) + 0.5 * float((reg * w) @ w)
    if start is not None:  # taken only where it is better than the default start (see fit_logistic_1d)
        w_start = np.array(start, dtype=np.float64)
        value_start = _loss_terms(w_start @ Xt, y, r_new, weight_new) + 0.5 * float((reg * w_start) @ w_start)
        if value_start < value:
            w, value = w_start, value_start
            r, r_new, weight, weight_new = r_new, r, weight_new, weight
    gtol = tol * max(n, 1)
    eye = np.eye(k)
    step: np.ndarray = np.zeros(k)
    candidate = w

    def objective_at(t: float) -> float:
        """``f(w - t d)``, keeping the point, its residuals and weights (the last call's are the step taken)."""
        nonlocal candidate
        candidate = w - t * step
        return _loss_terms(candidate @ Xt, y, r_new, weight_new) + 0.5 * float((reg * candidate) @ candidate)

    for _ in range(max_iter):
        sums, gram = _gradient_and_gram(Xt, r, weight)
        grad = sums + reg * w
        if float(np.max(np.abs(grad))) <= gtol:
            break
        hess = gram + np.diag(reg)
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
        value = trial
        r, r_new, weight, weight_new = r_new, r, weight_new, weight
    return w


def fit_logistic_1d(z: np.ndarray, y: np.ndarray, *, C: float, max_iter: int = 200,
                     tol: float = _GRADIENT_TOL,
                     start: tuple[float, float] | None = None) -> tuple[float, float]:
    """L2-regularised logistic regression on one (standardised) feature: ``p = sigmoid(a * z + b)``.

    Minimises ``f(a, b) = sum_i logloss_i + a**2 / (2 C)`` (intercept unpenalised), the optimum of scikit-learn's
    ``LogisticRegression(C=C)``, by the algorithm of :func:`_newton_logistic` (damped Newton from the intercept-only
    optimum, Armijo backtracking, the same stopping rules) written out for the 2 x 2 case, several
    times faster than the matrix form, which matters when the evaluation protocol calibrates every method on every
    split. Plain Newton steps diverge on skewed scores squeezed against one end (a coefficient of -2.46e6 on a real
    score with 3% positives); with the line search every step decreases ``f``.

    Each point costs one ``exp(-|u|)``: it gives the loss (``max(s u, 0) + log1p(e)``), the sigmoid
    (``1 / (1 + e)`` or ``e / (1 + e)`` by the sign of ``u``) and its derivative ``e / (1 + e)**2``, all exact in the
    tails; with numba the sums of a point take one compiled pass after that ``exp`` (:func:`point_1d_loop`; the
    protocol runs hundreds of these fits).

    ``start``: the ``(a, b)`` to start from instead of the intercept-only optimum (a nearby fit's, for a fit on a
    subset of its rows), taken only where the objective there is below the default start's; the optimum is the same,
    found in fewer steps.
    """
    z = np.asarray(z, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    penalty = 1.0 / C
    mean_y = float(y.mean())
    a, b = 0.0, math.log(mean_y / (1.0 - mean_y))
    e = np.empty(z.shape[0])
    loss, *sums = _point_1d(z, y, a, b, e)
    value = loss + 0.5 * penalty * a * a
    if start is not None:
        # A start is taken only where its objective is below the default start's. Another part's fit can be far
        # out on a flat ridge here (a small part separable along another boundary): some log-odds are then in the
        # hundreds, their Newton weights underflow, and the line search finds no decrease along the Newton
        # direction long before the optimum.
        start_loss, *start_sums = _point_1d(z, y, start[0], start[1], e)
        start_value = start_loss + 0.5 * penalty * start[0] * start[0]
        if start_value < value:
            (a, b), sums, value = start, start_sums, start_value
    gtol = tol * max(z.shape[0], 1)
    step_a = step_b = 0.0
    trial_sums = sums

    def objective_at(t: float) -> float:
        """``f(a - t step_a, b - t step_b)``, keeping the point's sums (the last call's are the step taken)."""
        nonlocal trial_sums
        a_new = a - t * step_a
        trial_loss, *trial_sums = _point_1d(z, y, a_new, b - t * step_b, e)
        return trial_loss + 0.5 * penalty * a_new * a_new

    for _ in range(max_iter):
        g_a, g_b = sums[0] + penalty * a, sums[1]
        if max(abs(g_a), abs(g_b)) <= gtol:
            break
        h_aa, h_ab, h_bb = sums[2] + penalty, sums[3], sums[4]
        det = h_aa * h_bb - h_ab * h_ab
        if not det > 1e-14 * h_aa * h_bb:  # singular to rounding (weights underflowed): a diagonally scaled step
            step_a, step_b = g_a / h_aa, g_b / max(h_bb, 1e-300)
        else:
            step_a, step_b = (h_bb * g_a - h_ab * g_b) / det, (h_aa * g_b - h_ab * g_a) / det
        t, trial, last = _damped_step(objective_at, value, g_a * step_a + g_b * step_b)
        if t:
            a, b = a - t * step_a, b - t * step_b
            sums = trial_sums
        if last:
            break
        value = trial
    return float(a), float(b)


def fit_logistic(F: np.ndarray, y: np.ndarray, *, C: float, max_iter: int = 100) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression: ``p = sigmoid(F @ coef + intercept)``.

    Minimises ``sum_i logloss_i + |coef|**2 / (2 C)`` (intercept unpenalised), scikit-learn's
    ``LogisticRegression(C=C)`` objective, by :func:`_newton_logistic` to near machine precision. With a handful of
    features the (d+1)-square Newton system is tiny, so a fit takes a few passes over the data instead of lbfgs'
    dozens.
    """
    n, d = F.shape
    Xt = np.empty((d + 1, n))
    Xt[:d] = F.T
    Xt[d] = 1.0
    reg = np.full(d + 1, 1.0 / C)
    reg[-1] = 0.0
    w = _newton_logistic(Xt, np.asarray(y, dtype=np.float64), reg, max_iter=max_iter)
    return w[:-1].copy(), float(w[-1])


@dataclass(frozen=True)
class StandardisedLogistic:
    """A logistic model on standardised features: the log-odds of label 1 for feature rows ``X`` (n, d) are
    ``((X - mean) / scale) @ coef + intercept`` (the model is called on ``X``)."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """The log-odds, as one product: ``X @ (coef / scale)`` plus the intercept moved by the means (equal to
        :meth:`standardised_decision` to rounding, without standardising a copy of ``X``)."""
        slope = self.coef / self.scale
        return X @ slope + (self.intercept - float(self.mean @ slope))

    def standardised_decision(self, X: np.ndarray) -> np.ndarray:
        """The log-odds in ``TracePlus.decision_function``'s arithmetic (standardise, then the coefficients): its
        numbers to the last bit, for the same model."""
        return ((X - self.mean) / self.scale) @ self.coef + self.intercept

    def coefficients_in(self, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """The same decision function's coefficients (intercept last) on features standardised with ``mean`` and
        ``scale`` instead: a start for a fit on other rows of the same features."""
        coef = self.coef * scale / self.scale
        return np.append(coef, self.intercept + float(((mean - self.mean) / self.scale) @ self.coef))


def standardised_logistic_rows(F: np.ndarray, y: np.ndarray, *, C: float, max_iter: int) -> StandardisedLogistic:
    """:func:`standardised_logistic` in ``TracePlus.fit``'s arithmetic (numpy's column means and standard
    deviations of ``F``, the standardised copy, :func:`fit_logistic`): ``TracePlus.fit``'s model to the last bit on
    the same ``F``, which the protocol's TRACE+ promises; :func:`standardised_logistic` gives the same model up to
    the order of its sums."""
    mean, scale = F.mean(axis=0), F.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    coef, intercept = fit_logistic((F - mean) / scale, np.asarray(y, dtype=np.float64), C=C, max_iter=max_iter)
    return StandardisedLogistic(mean, scale, coef, intercept)


def standardised_logistic(F: np.ndarray, y: np.ndarray, *, C: float = 1.0, max_iter: int = 100,
                          near: StandardisedLogistic | None = None) -> StandardisedLogistic:
    """Fit TRACE+'s model on features ``F`` (n, d) and 0/1 labels: standardise with ``F``'s mean and standard deviation
    (a constant column is left unscaled), then the L2 logistic regression of :func:`fit_logistic`. Returns the model,
    which gives the decision function (log-odds of label 1) for new feature rows. ``near``: a model fitted on other
    rows of the same features (the fit on a whole calibration part, for a fit on some of its folds), to start from;
    the optimum is the same, reached in fewer Newton steps."""
    n, d = F.shape
    # Feature-major: F.T is free for a column-major F (the protocol's), a copy otherwise.
    Xt = np.empty((d + 1, n))  # the standardised features and the intercept's ones, row by row
    Xt[d] = 1.0
    Ft = F.T
    mean = Ft.mean(axis=1)
    centred = np.subtract(Ft, mean[:, None], out=Xt[:d])
    scale = np.sqrt(np.einsum("ij,ij->i", centred, centred) / n)  # numpy's std: the mean squared deviation
    scale = np.where(scale > 1e-12, scale, 1.0)
    np.divide(centred, scale[:, None], out=centred)
    reg = np.full(d + 1, 1.0 / C)
    reg[-1] = 0.0
    start = None if near is None else near.coefficients_in(mean, scale)
    w = _newton_logistic(Xt, np.asarray(y, dtype=np.float64), reg, max_iter=max_iter, start=start)
    return StandardisedLogistic(mean, scale, w[:-1].copy(), float(w[-1]))
