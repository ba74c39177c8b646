"""Per-token log-probabilities: the bounds every reader and recorder applies to them, and entropy from a step's
top-k log-probabilities (an estimate and its exact lower and upper bounds).

One module for the numbers themselves, shared by the dataset readers (:mod:`trace_core.data`), the response
importers and live recording from a model server (:mod:`trace_core.record`), so that they refuse and estimate alike.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trace_core.checks import is_number, show
from trace_core.traces.trace import LOGPROB_TOLERANCE

__all__ = ["ENTROPY_TOLERANCE", "MAX_ENTROPY_NATS", "MAX_NATS", "TOP_K_MASS_TOLERANCE", "check_logprob",
           "entropy_from_top_k", "too_much_mass", "top_k_entropy_bounds", "unlikely_chosen"]

#: The largest surprisal, in nats, that the readers accept (the chosen token's log-probability is at least -MAX_NATS),
#: and the log-probability below which an alternative counts as "no probability". A probability below e^-1000 (about
#: 5e-435, far below the smallest float64) does not come out of a float32 or bfloat16 model's log-softmax in practice;
#: what lies beyond are placeholders: servers write -9999 (vLLM) or -inf for "no probability", and a value like 1e308
#: would overflow later (a sum of surprisals becomes inf). A chosen token beyond the bound is a row error; an
#: alternative beyond it is dropped, as -inf ones are.
MAX_NATS = 1000.0

#: How far above 1 the probabilities of one step's alternatives (plus the chosen token's when it is not among them)
#: may add up: servers print log-probabilities rounded (to 4 to 6 decimals, or float32), so near-certain steps sum a
#: little above 1. Beyond 1 + this the numbers cannot be probabilities of one distribution (e.g. alternatives copied
#: from several steps, or probabilities given as log-probabilities): a row error.
TOP_K_MASS_TOLERANCE = 0.01

#: The largest entropy, in nats, accepted when the vocabulary size is not known: log(2**31), about 21.49 nats. Entropy
#: over V tokens is at most log V, and no vocabulary has 2**31 tokens (engines store token ids as int32).
MAX_ENTROPY_NATS = math.log(2**31)

#: How far above log V an entropy may lie when the vocabulary size V is known: a recorder sums p log p over the whole
#: vocabulary in float32, which lands about 1e-6 above log V for a near-uniform step (1.5e-6 measured at V = 256,000).
ENTROPY_TOLERANCE = 1e-4


def unlikely_chosen(side: str) -> str:
    """Why a chosen token's log-probability below -MAX_NATS (``side="below"``; its surprisal ``"above"`` MAX_NATS)
    is refused: the tail of the row error, after the value."""
    bound = f"-{MAX_NATS:g}" if side == "below" else f"{MAX_NATS:g}"
    return (f"{side} {bound} nats (probability e^-{MAX_NATS:g}, MAX_NATS): servers write -9999 for -inf; the chosen "
            f"token needs a real log-probability")


def too_much_mass(mass: float, chosen: float | None = None) -> str | None:
    """Why one step's probabilities (``mass``, the chosen token's ``chosen`` included when it is not among the
    alternatives) cannot be: the tail of the row error after its field, or None when they add up to at most
    ``1 + TOP_K_MASS_TOLERANCE``. Shared by both readers, so they say it alike."""
    if mass <= 1.0 + TOP_K_MASS_TOLERANCE:
        return None
    added = "" if chosen is None else f", the chosen token's {chosen:.4g} included (it is not among them)"
    return (f"sum to probability {mass:.4g}{added}; more than 1 + {TOP_K_MASS_TOLERANCE:g}: one step's probabilities "
            "cannot add up to more than 1")


def check_logprob(value: object, where: str, *, chosen: bool = False) -> float:
    """A log-probability from a model server's answer (<= 0 within the slack Trace allows); the chosen token's must
    also be finite and at least ``-MAX_NATS`` (an alternative's may be lower, or -inf: it is dropped later as "no
    probability"). One rule for importing saved responses and for recording live from a server.

    Raises
    ------
    ValueError
        Naming ``where``, the value (shortened) and what was expected.
    """
    try:
        lp = float(value) if is_number(value) else math.nan  # type: ignore[arg-type]
    except OverflowError:  # an integer too large for a float
        lp = math.nan
    if math.isnan(lp) or lp > LOGPROB_TOLERANCE:
        raise ValueError(f"{where} is {show(value)}; expected a log-probability (a number <= 0)")
    if chosen and not math.isfinite(lp):
        raise ValueError(f"{where} is {lp}; the chosen token needs a finite log-probability")
    if chosen and lp < -MAX_NATS:
        raise ValueError(f"{where} is {show(lp)}; {unlikely_chosen('below')}")
    return lp


def entropy_from_top_k(top_logprobs: Any) -> np.ndarray:
    """Entropy estimated from the top-k log-probabilities, with the rest of the mass as one extra outcome.

    ``p_i = exp(l_i)``, ``r = max(0, 1 - sum_i p_i)``, ``H = -sum_i p_i l_i - r log r``. Merging the unseen tokens into
    one bucket can only lower the entropy, so (for exact top-k log-probs) this is a lower bound on the full-vocabulary
    entropy; it is exact when the top-k hold all the mass. ``-inf`` entries count as probability 0; values above 0
    by at most :data:`~trace_core.traces.trace.LOGPROB_TOLERANCE` count as 0.

    Parameters
    ----------
    top_logprobs : array-like of float, shape (T, k)

    Returns
    -------
    ndarray of float64, shape (T,)

    Raises
    ------
    ValueError
        Not 2-D, NaN, or a log-probability above 0 (beyond the tolerance).

    Examples
    --------
    >>> entropy_from_top_k([[np.log(0.5), np.log(0.5)]]).round(4)  # all the mass in the top 2: exact
    array([0.6931])
    """
    lp = np.asarray(top_logprobs, dtype=np.float64)
    if lp.ndim != 2:
        raise ValueError(f"`top_logprobs` must be 2-D (T, k), got shape {lp.shape}")
    if np.isnan(lp).any() or (lp > LOGPROB_TOLERANCE).any():
        raise ValueError("`top_logprobs` must be log-probabilities (<= 0, not NaN)")
    lp = np.minimum(lp, 0.0)
    p = np.exp(lp)
    known = -np.sum(np.where(p > 0, p * np.where(np.isfinite(lp), lp, 0.0), 0.0), axis=1)
    rest = np.clip(1.0 - p.sum(axis=1), 0.0, None)
    tail = -np.where(rest > 0, rest * np.log(np.where(rest > 0, rest, 1.0)), 0.0)
    return np.maximum(known + tail, 0.0)


def top_k_entropy_bounds(top_logprobs: Any, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds on the full-vocabulary entropy of each step, from its top-k log-probabilities.

    Per step, with the top-k probabilities ``p_1 >= ... >= p_k`` (their entropy part ``K = -sum_i p_i log p_i``),
    the rest ``r = 1 - sum_i p_i`` lies on the ``V - k`` unseen tokens, each at most ``p_k`` (the top-k are the k
    most likely). Entropy is concave, so over that set of tails it is

    * largest when ``r`` is spread evenly: ``upper = K + r log((V - k) / r)`` (each unseen token gets
      ``r / (V - k) <= p_k``);
    * smallest at a corner, ``r`` on as few tokens as possible: ``n = floor(r / p_k)`` tokens of ``p_k`` and one of
      the remainder ``r - n p_k``: ``lower = K - n p_k log p_k - (r - n p_k) log(r - n p_k)``.

    Both are attained by some distribution with these top-k, so no tighter bounds exist. Putting all of ``r`` on
    one token (:func:`entropy_from_top_k`) gives at most ``lower``. With ``k = 0`` the cap is 1 (bounds 0 and
    ``log V``). Numbers that are not exactly a distribution's top-k are read leniently: a sum a little above 1
    (rounded log-probabilities) leaves ``r = 0``; a k-th probability of 0 (``-inf``) means the unseen tokens have
    none, and a leftover ``r`` is rounding (``lower = K``); so is a leftover when ``k >= V``. Always
    ``lower <= upper``.

    Parameters
    ----------
    top_logprobs : array-like of float, shape (T, k)
        Each step's k most likely log-probabilities (any order; ``-inf`` is probability 0).
    vocab_size : int
        V, the size of the distribution (the model's logit vector), at least k.

    Returns
    -------
    lower, upper : ndarray of float64, shape (T,)
        In nats.

    Raises
    ------
    ValueError
        Not 2-D, NaN, a log-probability above 0 (beyond the tolerance), or ``vocab_size`` below k.

    Examples
    --------
    >>> lower, upper = top_k_entropy_bounds([[np.log(0.5)]], 3)  # the rest, 0.5, on 2 tokens of at most 0.5
    >>> lower.round(4), upper.round(4)  # from [0.5, 0.5, 0] and [0.5, 0.25, 0.25]
    (array([0.6931]), array([1.0397]))
    """
    lp = np.asarray(top_logprobs, dtype=np.float64)
    if lp.ndim != 2:
        raise ValueError(f"`top_logprobs` must be 2-D (T, k), got shape {lp.shape}")
    if np.isnan(lp).any() or (lp > LOGPROB_TOLERANCE).any():
        raise ValueError("`top_logprobs` must be log-probabilities (<= 0, not NaN)")
    k = lp.shape[1]
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < max(k, 1):
        raise ValueError(f"`vocab_size` must be an integer of at least k = {max(k, 1)}, got {vocab_size!r}")
    lp = np.minimum(lp, 0.0)
    p = np.exp(lp)
    known = -np.sum(np.where(p > 0, p * np.where(np.isfinite(lp), lp, 0.0), 0.0), axis=1)
    rest = np.clip(1.0 - p.sum(axis=1), 0.0, None)
    unseen = int(vocab_size) - k
    if unseen <= 0:  # every token is among the top-k: a leftover is rounding
        return known.copy(), known.copy()
    cap = p.min(axis=1) if k else np.ones(lp.shape[0])
    spread = rest > 0
    safe_rest = np.where(spread, rest, 1.0)
    upper = known + np.where(spread, rest * np.log(unseen / safe_rest), 0.0)
    capped = cap > 0
    safe_cap = np.where(capped, cap, 1.0)
    n_full = np.where(capped, np.minimum(np.floor(rest / safe_cap), unseen), 0.0)
    remainder = np.clip(np.where(capped, rest - n_full * safe_cap, 0.0), 0.0, None)
    lower = known + n_full * _entr(safe_cap) + _entr(remainder)
    lower = np.where(capped, lower, known)
    return np.maximum(np.minimum(lower, upper), 0.0), np.maximum(upper, 0.0)


def _entr(p: np.ndarray) -> np.ndarray:
    """``-p log p`` elementwise, 0 at p = 0."""
    return -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
