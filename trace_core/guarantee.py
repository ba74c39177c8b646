"""Flagging with a guarantee: a probability threshold chosen on labeled calibration answers so that, with probability
at least ``1 - delta`` over the draw of those answers, the error rate among the new answers it keeps is at most
``max_risk``.

Method: Learn-then-Test (Angelopoulos, Bates, Candès, Jordan and Lei, 2021, "Learn then Test: Calibrating Predictive
Algorithms to Achieve Risk Control", arXiv 2110.01052) with fixed-sequence testing. The candidate thresholds are a
grid fixed in advance, :data:`GRID` (1.000, 0.999, ..., 0.000), tested from the strictest down. At threshold ``t`` the
calibration answers with P(correct) >= t are kept; given how many are kept (``n``), their errors are a binomial draw
with the selective risk ``R(t)`` as its rate, so the p-value of "R(t) > max_risk" is ``P(Binomial(n, max_risk) <=
errors)``. Thresholds that keep fewer than :func:`needed` answers cannot pass whatever the labels (their p-value is at
least ``(1 - max_risk) ** n > delta``), so the sequence starts at the first one that keeps enough (a start that
depends on the probabilities alone, never on the labels). Testing stops at the first threshold whose p-value exceeds
``delta``; the threshold returned is the loosest that passed, raised to the strictest grid value that keeps the same
calibration answers (new answers less confident than all of them are not kept on the strength of a gap in the
data). Fixed-sequence testing keeps the
chance that a certified threshold has ``R(t) > max_risk`` at most ``delta`` without a union bound; a simulation test
(``tests/trace_core/test_guarantee.py``) measures it over thousands of redrawn calibration sets.

Assumptions, said wherever the guarantee is shown: the calibration answers and the new answers are exchangeable
(drawn alike: same model, prompts of the same kind), and the calibrator was fitted on *other* answers (its
probabilities are fixed before these labels are seen). The guarantee is over the draw of the calibration answers:
about ``delta`` of the times one draws such a set, the threshold it gives lets more errors through than ``max_risk``.

With no error among the kept answers the p-value is ``(1 - max_risk) ** n``: at least
``ceil(log(delta) / log(1 - max_risk))`` kept answers are needed before any threshold can pass (:func:`needed`), and
a calibration set without enough confident, correct answers gets no threshold, with that number in the message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._checks import check_labels, check_real, check_scores

__all__ = ["GRID", "METHOD", "RiskGuarantee", "guaranteed_threshold", "needed"]

#: The thresholds tested, strictest first (fixed before any data is seen, as Learn-then-Test requires).
GRID = np.round(np.linspace(1.0, 0.0, 1001), 3)
#: How the threshold is chosen, for messages and exports.
METHOD = "Learn-then-Test with fixed-sequence binomial tests (Angelopoulos et al. 2021, arXiv 2110.01052)"


def needed(max_risk: float, delta: float) -> int:
    """The fewest kept calibration answers, all correct, for which a threshold can pass: the smallest n with
    ``(1 - max_risk) ** n <= delta``.

    >>> needed(0.05, 0.1), needed(0.1, 0.05)
    (45, 29)
    """
    max_risk = check_real(max_risk, "max_risk", minimum=0, maximum=1, low_open=True, high_open=True)
    delta = check_real(delta, "delta", minimum=0, maximum=1, low_open=True, high_open=True)
    return int(math.ceil(math.log(delta) / math.log1p(-max_risk) - 1e-12))


@dataclass(frozen=True)
class RiskGuarantee:
    """A threshold certified on labeled calibration answers (see the module docstring), or why there is none.

    Attributes
    ----------
    threshold : float or None
        Keep answers with P(correct) >= threshold, flag the rest; None when no threshold passed.
    max_risk, delta : float
        The error rate among kept answers guaranteed (alpha) and the chance the guarantee fails (delta).
    n_calibration : int
        Labeled calibration answers.
    n_kept, errors_kept : int
        Calibration answers the threshold keeps, and the wrong ones among them (0 when there is no threshold).
    needed : int
        The fewest kept answers, all correct, for which any threshold can pass (:func:`needed`).
    """

    threshold: float | None
    max_risk: float
    delta: float
    n_calibration: int
    n_kept: int
    errors_kept: int
    needed: int

    @property
    def certified(self) -> bool:
        return self.threshold is not None

    def sentence(self) -> str:
        """The guarantee, its assumption and what it rests on, in one paragraph (or why there is none)."""
        assumption = ("It assumes the calibration answers and the new ones are exchangeable (same model, prompts of "
                      "the same kind) and that the calibrator was fitted on other answers.")
        if self.threshold is None:
            return (f"No threshold can be guaranteed: for an error rate of at most {self.max_risk:.1%} among the kept "
                    f"answers with probability {1 - self.delta:.0%}, the calibration answers need at least "
                    f"{self.needed:,} confident ones that are all correct (more where some are wrong); these "
                    f"{self.n_calibration:,} labeled answers do not have them. Use more labeled answers, a larger "
                    "error rate or a larger delta. " + assumption)
        return (f"Keeping answers with P(correct) >= {self.threshold:.3f} guarantees an error rate of at most "
                f"{self.max_risk:.1%} among the kept answers with probability at least {1 - self.delta:.0%} over "
                f"the draw of the {self.n_calibration:,} labeled calibration answers (it keeps {self.n_kept:,} of "
                f"them, {self.errors_kept:,} wrong; at least {self.needed:,} kept are needed for any guarantee at "
                f"these settings). Chosen by {METHOD}. " + assumption)


def guaranteed_threshold(probability: Any, labels: Any, *, max_risk: float, delta: float = 0.1) -> RiskGuarantee:
    """The loosest threshold of :data:`GRID` that Learn-then-Test certifies on these labeled calibration answers
    (their calibrated P(correct) and 0/1 labels): keeping new answers with P(correct) >= it, their error rate is at
    most ``max_risk`` with probability at least ``1 - delta``. See the module docstring for the method and its
    assumptions.

    Examples
    --------
    >>> p = np.linspace(0.005, 0.995, 2000)
    >>> y = (np.random.default_rng(0).random(2000) < p).astype(int)  # calibrated: P(correct) = p
    >>> g = guaranteed_threshold(p, y, max_risk=0.1, delta=0.1)
    >>> bool(0.8 <= g.threshold <= 0.9), g.n_kept > g.needed
    (True, True)
    """
    from scipy.stats import binom

    max_risk = check_real(max_risk, "max_risk", minimum=0, maximum=1, low_open=True, high_open=True)
    delta = check_real(delta, "delta", minimum=0, maximum=1, low_open=True, high_open=True)
    p = check_scores(probability, "probability", probability=True)
    y = check_labels(labels, "labels", n=p.shape[0])  # one class is fine: all correct certifies the most
    order = np.argsort(-p, kind="stable")
    sorted_p, wrong = p[order], np.cumsum(1 - y[order])
    # kept(t) = answers with p >= t; the grid is descending, so kept counts grow along it
    kept = np.searchsorted(-sorted_p, -GRID, side="right")
    errors = np.where(kept > 0, wrong[np.maximum(kept - 1, 0)], 0)
    need = needed(max_risk, delta)
    start = int(np.searchsorted(kept, need, side="left"))  # the first threshold that keeps enough answers
    if start == GRID.shape[0]:
        return RiskGuarantee(None, max_risk, delta, int(p.shape[0]), 0, 0, need)
    p_values = binom.cdf(errors[start:], kept[start:], max_risk)
    passed = p_values <= delta
    first_fail = int(np.argmin(passed)) if not passed.all() else passed.shape[0]
    if first_fail == 0:
        return RiskGuarantee(None, max_risk, delta, int(p.shape[0]), 0, 0, need)
    last = start + first_fail - 1
    # of the thresholds that keep the same calibration answers as the loosest certified one, the strictest: new
    # answers less confident than every kept calibration answer are not kept on the strength of an empty gap
    same = int(np.searchsorted(kept, kept[last], side="left"))
    return RiskGuarantee(float(GRID[same]), max_risk, delta, int(p.shape[0]), int(kept[last]), int(errors[last]),
                         need)
