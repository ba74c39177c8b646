"""Flagging with a guarantee: a probability threshold chosen on labeled calibration answers so that, with probability
at least ``1 - delta`` over the draw of those answers, the error rate among the new answers it keeps is at most
``max_risk``.

Method: Learn-then-Test (Angelopoulos, Bates, Candès, Jordan and Lei, 2021, "Learn then Test: Calibrating Predictive
Algorithms to Achieve Risk Control", arXiv 2110.01052) with the fallback procedure of Wiens (2003) as its multiple
test. The candidate thresholds are a grid fixed in advance, :data:`GRID` (1.000, 0.999, ..., 0.000), ordered from the
strictest to the loosest. At threshold ``t`` the calibration answers with P(correct) >= t are kept; given how many
are kept (``n``), their errors are a binomial draw with the selective risk ``R(t)`` as its rate, so the p-value of
"R(t) > max_risk" is ``P(Binomial(n, max_risk) <= errors)``.

The level ``delta`` is split equally among ``K`` *starts* (:func:`fallback_starts`): the thresholds that first keep
``m``, ``2m``, ``4m``, ... of the calibration answers, where ``m`` is the fewest answers, all correct, that pass at
level ``delta / K`` and ``K`` is as large as ``n`` allows. The starts depend on how many answers there are and on their
probabilities, never on their labels. Thresholds are tested in grid order; each is tested at its own share (``delta
/ K`` at a start, 0 elsewhere) plus the level of the threshold before it when that one passed. A threshold that fails
keeps its level, so the sequence stops there and resumes, with a fresh ``delta / K``, at the next start. The
threshold returned is the loosest that passed, raised to the strictest grid value that keeps the same calibration
answers (new answers less confident than all of them are not kept on the strength of a gap in the data).

Why the split: a single fixed sequence from the strictest threshold stops at the first test it fails, and with
language models a confident wrong answer among the ten or twenty most confident is the normal case, so such a
sequence certifies nothing on most such calibration sets. Here those answers cost one start's share of ``delta``.

Why it holds (the fallback procedure's argument): take the first threshold in grid order that passes although its
risk exceeds ``max_risk``. Every earlier such threshold failed, so the run of passed thresholds that carried level to
it began after the previous one, and its level is at most the shares placed between the two. Those stretches are
disjoint, so the chance of any false pass is at most the sum of all shares, ``delta``. ``tests/trace_core`` and
``bench/guarantee_power.py`` measure it over thousands of redrawn calibration sets, confident mistakes included.

Assumptions, said wherever the guarantee is shown: the calibration answers and the new answers are exchangeable
(drawn alike: same model, prompts of the same kind), and the calibrator was fitted on *other* answers (its
probabilities are fixed before these labels are seen). The guarantee is over the draw of the calibration answers:
about ``delta`` of the times one draws such a set, the threshold it gives lets more errors through than ``max_risk``.

When no threshold passes, keeping no answer (flagging every one) is the only guaranteed choice; the guarantee then
names the confident wrong answers that stopped the first test and estimates how many labeled answers drawn alike
would let a threshold pass (:meth:`RiskGuarantee.sentence`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trace_core.checks import check_int, check_labels, check_real, check_scores, clip

__all__ = ["GRID", "METHOD", "RiskGuarantee", "fallback_starts", "guaranteed_threshold", "guaranteed_thresholds",
           "needed", "repeated_prompts_note"]

#: The thresholds tested, strictest first (fixed before any data is seen, as Learn-then-Test requires).
GRID = np.round(np.linspace(1.0, 0.0, 1001), 3)
#: How the threshold is chosen, for messages and exports.
METHOD = ("Learn-then-Test with fallback binomial tests started at the m, 2m, 4m, ... most confident answers "
          "(Angelopoulos et al. 2021, arXiv 2110.01052; Wiens 2003)")
#: Calibration sets larger than this are not suggested: past it, more labeled answers would not help in practice.
MOST_SUGGESTED = 10_000_000
#: Wrong answers named in a message; the others are counted.
NAMED = 5


def needed(max_risk: float, delta: float) -> int:
    """The fewest kept calibration answers, all correct, for which a threshold can pass: the smallest n with
    ``(1 - max_risk) ** n <= delta``.

    >>> needed(0.05, 0.1), needed(0.1, 0.05)
    (45, 29)
    """
    max_risk = check_real(max_risk, "max_risk", minimum=0, maximum=1, low_open=True, high_open=True)
    delta = check_real(delta, "delta", minimum=0, maximum=1, low_open=True, high_open=True)
    return _needed(max_risk, delta)


def _needed(max_risk: float, delta: float) -> int:
    return int(math.ceil(math.log(delta) / math.log1p(-max_risk) - 1e-12))


def fallback_starts(n: int, max_risk: float, delta: float) -> list[int]:
    """How many of the most confident calibration answers each start keeps (at least), for ``n`` answers: ``m``,
    ``2m``, ..., ``2 ** (K - 1) m``, with ``m = needed(max_risk, delta / K)`` and ``K`` the most starts that fit in
    ``n``; each is tested at level ``delta / K``. Empty when ``n < needed(max_risk, delta)``.

    >>> fallback_starts(1_500, 0.2, 0.1)
    [20, 40, 80, 160, 320, 640, 1280]
    >>> fallback_starts(10, 0.2, 0.1)
    []
    """
    n = check_int(n, "n", minimum=0)
    max_risk = check_real(max_risk, "max_risk", minimum=0, maximum=1, low_open=True, high_open=True)
    delta = check_real(delta, "delta", minimum=0, maximum=1, low_open=True, high_open=True)
    return _starts(n, max_risk, delta)


def _starts(n: int, max_risk: float, delta: float) -> list[int]:
    k = 1
    while _needed(max_risk, delta / (k + 1)) * 2 ** k <= n:
        k += 1
    first = _needed(max_risk, delta / k)
    return [first * 2 ** j for j in range(k)] if first <= n else []


@dataclass(frozen=True)
class RiskGuarantee:
    """A threshold certified on labeled calibration answers (see the module docstring), or why there is none.

    Attributes
    ----------
    threshold : float or None
        Keep answers with P(correct) >= threshold, flag the rest; None when no threshold passed (keep none).
    max_risk, delta : float
        The error rate among kept answers guaranteed (alpha) and the chance the guarantee fails (delta).
    n_calibration : int
        Labeled calibration answers.
    n_kept, errors_kept : int
        Calibration answers the threshold keeps, and the wrong ones among them (0 when there is no threshold).
    needed : int
        The fewest kept answers, all correct, for which any threshold can pass (:func:`needed`).
    blocking : tuple of int
        When no threshold passed: the 0-based positions (in the arrays given) of the wrong answers among the
        ``n_top`` most confident, most confident first; they stopped the first test.
    n_top : int
        How many of the most confident answers the first test kept (0 when there was no test).
    starts : tuple of (int, int)
        When no threshold passed: each start's kept answers and wrong answers among them.
    labeled_needed : int or None
        When no threshold passed: about how many labeled answers drawn like these would let a threshold pass, at the
        error rates seen here at every coverage; None when more answers would not help (it would take more than
        :data:`MOST_SUGGESTED`).
    """

    threshold: float | None
    max_risk: float
    delta: float
    n_calibration: int
    n_kept: int
    errors_kept: int
    needed: int
    blocking: tuple[int, ...] = ()
    n_top: int = 0
    starts: tuple[tuple[int, int], ...] = ()
    labeled_needed: int | None = None

    @property
    def certified(self) -> bool:
        return self.threshold is not None

    def sentence(self, rows: Sequence[Any] | None = None) -> str:
        """The guarantee, its assumption and what it rests on, in one paragraph, or why there is none. ``rows``: each
        calibration answer's row in its file (what a wrong answer is named by); without it, its 1-based position."""
        assumption = ("It assumes the calibration answers and the new ones are exchangeable (same model, prompts of "
                      "the same kind) and that the calibrator was fitted on other answers.")
        if self.threshold is not None:
            return (f"Keeping answers with P(correct) >= {self.threshold:.3f} guarantees an error rate of at most "
                    f"{self.max_risk:.1%} among the kept answers with probability at least {1 - self.delta:.0%} "
                    f"over the draw of the {self.n_calibration:,} labeled calibration answers (it keeps "
                    f"{self.n_kept:,} of them, {self.errors_kept:,} wrong; at least {self.needed:,} kept are needed "
                    f"for any guarantee at these settings). Chosen by {METHOD}. " + assumption)
        goal = (f"No threshold can be guaranteed: for an error rate of at most {self.max_risk:.1%} among the kept "
                f"answers with probability {1 - self.delta:.0%}, ")
        keep_none = "Flagging every answer (keeping none) is the only guaranteed choice. "
        if not self.starts:
            return (goal + f"the calibration answers need at least {self.needed:,} confident ones that are all "
                    f"correct (more where some are wrong); these {self.n_calibration:,} labeled answers do not have "
                    "them. Use more labeled answers, a larger error rate or a larger delta. " + keep_none + assumption)
        return goal + self._blocked(rows) + " " + keep_none + assumption

    def _blocked(self, rows: Sequence[Any] | None) -> str:
        """Which confident wrong answers stopped the first test, how the other starts fared, what would help."""
        wrong = len(self.blocking)
        named = [clip(str(rows[i]), 40) if rows is not None else str(i + 1) for i in self.blocking[:NAMED]]
        more = f" and {wrong - NAMED:,} more" if wrong > NAMED else ""
        listed = (", ".join(named[:-1]) + " and " + named[-1]) if len(named) > 1 and not more else ", ".join(named)
        where = "row" if rows is not None else "answer"
        plural = wrong != 1
        text = (f"the {wrong:,} wrong answer{'s' if plural else ''} among the {self.n_top:,} most confident "
                f"({where}{'s' if plural else ''} {listed}{more}) stop{'' if plural else 's'} the first test")
        if len(self.starts) > 1:
            kept, errors = self.starts[-1]
            later = (f"the {len(self.starts) - 1} later starts fail" if len(self.starts) > 2 else
                     "the later start fails")
            text += f", and {later} too (up to the {kept:,} most confident, {errors / kept:.1%} of them wrong)"
        if self.labeled_needed is not None:
            return (text + f". About {self.labeled_needed:,} labeled answers would be needed if they had the error "
                    "rates seen here; or use a larger error rate or a larger delta.")
        return (text + f". More labeled answers would not help: the error rates seen here are not clearly below "
                f"{self.max_risk:.1%} at any coverage; use a larger error rate, or a calibrator that ranks the "
                "answers better.")


def guaranteed_threshold(probability: Any, labels: Any, *, max_risk: float, delta: float = 0.1) -> RiskGuarantee:
    """The loosest threshold of :data:`GRID` that Learn-then-Test certifies on these labeled calibration answers
    (their calibrated P(correct) and 0/1 labels): keeping new answers with P(correct) >= it, their error rate is at
    most ``max_risk`` with probability at least ``1 - delta``. See the module docstring for the method and its
    assumptions.

    Examples
    --------
    >>> p = np.linspace(0.005, 0.995, 2000)
    >>> y = (np.random.default_rng(0).random(2000) < p).astype(int)  # calibrated: P(correct) = p
    >>> y[-3:] = 0  # the three most confident answers are wrong: that stops the first start only
    >>> g = guaranteed_threshold(p, y, max_risk=0.2, delta=0.1)
    >>> bool(0.6 <= g.threshold <= 0.75), g.n_kept > g.needed
    (True, True)
    """
    from scipy.stats import binom

    max_risk = check_real(max_risk, "max_risk", minimum=0, maximum=1, low_open=True, high_open=True)
    delta = check_real(delta, "delta", minimum=0, maximum=1, low_open=True, high_open=True)
    p = check_scores(probability, "probability", probability=True)
    y = check_labels(labels, "labels", n=p.shape[0])  # one class is fine: all correct certifies the most
    n = int(p.shape[0])
    order = np.argsort(-p, kind="stable")
    wrong = np.cumsum(1 - y[order])
    # kept(t) = answers with p >= t; the grid is descending, so kept counts grow along it
    kept = np.searchsorted(-p[order], -GRID, side="right")
    errors = np.where(kept > 0, wrong[np.maximum(kept - 1, 0)], 0)
    need = _needed(max_risk, delta)
    counts = _starts(n, max_risk, delta)
    if not counts:
        return RiskGuarantee(None, max_risk, delta, n, 0, 0, need)
    starts = np.searchsorted(kept, counts, side="left")  # the first threshold keeping each count
    last = _fallback(binom.cdf(errors, kept, max_risk), starts, delta / len(counts))
    if last is None:
        return _none_passed(order, y, kept, errors, starts, max_risk, delta)
    # of the thresholds that keep the same calibration answers as the loosest certified one, the strictest: new
    # answers less confident than every kept calibration answer are not kept on the strength of an empty gap
    same = int(np.searchsorted(kept, kept[last], side="left"))
    return RiskGuarantee(float(GRID[same]), max_risk, delta, n, int(kept[last]), int(errors[last]), need)


def guaranteed_thresholds(probability: Any, labels: Any, groups: Any, *, max_risk: float,
                          delta: float = 0.1) -> dict[str, RiskGuarantee]:
    """One certified threshold per group (:func:`guaranteed_threshold` on each group's answers at level
    ``delta / G`` for ``G`` groups), by group (as ``str``).

    By the union bound the ``G`` guarantees hold together with probability at least ``1 - delta``: then the error
    rate among the kept new answers of every group is at most ``max_risk``, so also among all of them. A group whose
    threshold is None keeps none of its answers. Use it when groups differ (task families, languages, customers):
    one pooled threshold can keep too many errors of a weak group while the pooled rate holds.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> p = rng.random(4000)
    >>> group = np.where(np.arange(4000) % 2 == 0, "easy", "hard")
    >>> y = (rng.random(4000) < np.where(group == "easy", p ** 0.5, p ** 2)).astype(int)
    >>> found = guaranteed_thresholds(p, y, group, max_risk=0.2, delta=0.1)
    >>> found["easy"].threshold < found["hard"].threshold, found["easy"].delta
    (True, 0.05)
    """
    delta = check_real(delta, "delta", minimum=0, maximum=1, low_open=True, high_open=True)
    p = check_scores(probability, "probability", probability=True)
    y = check_labels(labels, "labels", n=p.shape[0])
    keys = np.asarray([str(g) for g in groups], dtype=object)
    if keys.shape[0] != p.shape[0]:
        raise ValueError(f"`groups` has {keys.shape[0]:,} values for {p.shape[0]:,} answers; one per answer is needed")
    names = sorted(set(keys.tolist()))
    if not names:
        raise ValueError("no answers to certify a threshold on")
    masks = {name: keys == name for name in names}
    return {name: guaranteed_threshold(p[mask], y[mask], max_risk=max_risk, delta=delta / len(names))
            for name, mask in masks.items()}


def repeated_prompts_note(prompts: Sequence[Any]) -> str | None:
    """A warning when labeled answers share prompts, else None: the guarantee's binomial tests count every answer
    as independent, and answers to one prompt are not (``bench/guarantee_real.py``: with four answers per prompt the
    level is missed)."""
    prompts = list(prompts)
    repeated = len(prompts) - len(set(prompts))
    if not repeated:
        return None
    return (f"{repeated:,} labeled answers repeat an earlier answer's prompt; the guarantee counts every labeled "
            "answer as independent, and answers to one prompt are not, so its level is not assured: keep one answer "
            "per prompt (e.g. the greedy one)")


def _fallback(p_values: np.ndarray, starts: np.ndarray, share: float) -> int | None:
    """The fallback procedure over the grid: the index of the loosest threshold that passes, or None. ``starts``:
    ascending grid indices (repeats add their shares), each given ``share`` of the level; a passed threshold hands
    its level to the next, a failed one keeps it (the sequence resumes at the next start)."""
    points, repeats = np.unique(starts, return_counts=True)
    best, carried = None, 0
    for j, (start, own) in enumerate(zip(points.tolist(), repeats.tolist(), strict=True)):
        end = int(points[j + 1]) if j + 1 < points.shape[0] else p_values.shape[0]
        shares = carried + own  # the level in whole shares: no rounding lets it pass delta
        passed = p_values[start:end] <= shares * share
        run = int(np.argmin(passed)) if not passed.all() else passed.shape[0]
        if run:
            best = start + run - 1
        carried = shares if run == passed.shape[0] else 0
    return best


def _none_passed(order: np.ndarray, y: np.ndarray, kept: np.ndarray, errors: np.ndarray, starts: np.ndarray,
                 max_risk: float, delta: float) -> RiskGuarantee:
    """The guarantee when no threshold passed: the wrong answers among the first start's, each start's counts, and
    the labeled answers that would be needed at the error rates seen."""
    n = int(y.shape[0])
    at = tuple((int(kept[s]), int(errors[s])) for s in starts)
    top = at[0][0]
    blocking = tuple(int(i) for i in order[:top] if y[i] == 0)
    return RiskGuarantee(None, max_risk, delta, n, 0, 0, _needed(max_risk, delta), blocking, top, at,
                         _labeled_needed(kept, errors, top, max_risk, delta))


def _labeled_needed(kept: np.ndarray, errors: np.ndarray, top: int, max_risk: float, delta: float) -> int | None:
    """About the fewest labeled answers for which a threshold would pass if they had the error rates seen here at
    every coverage from the first test's (``top`` answers: rates measured on fewer are too rough to promise): these
    answers repeated ``k`` times (every threshold keeps ``k`` times the answers and errors) for the smallest such
    ``k``, found by doubling then bisection, rounded up to two significant digits. None when it would take more
    than :data:`MOST_SUGGESTED` answers."""
    from scipy.stats import binom

    n = int(kept[-1])

    def passes(k: int) -> bool:
        counts = _starts(k * n, max_risk, delta)
        p_values = np.where(kept >= top, binom.cdf(k * errors, k * kept, max_risk), 1.0)
        starts = np.searchsorted(k * kept, counts, side="left")
        return bool(counts) and _fallback(p_values, starts, delta / len(counts)) is not None

    high = 2
    while not passes(high):
        if high * n > MOST_SUGGESTED:
            return None
        high *= 2
    low = high // 2  # fails (k = 1 is these answers, which failed)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if passes(middle) else (middle, high)
    step = 10 ** max(len(str(high * n)) - 2, 0)
    return int(math.ceil(high * n / step) * step)
