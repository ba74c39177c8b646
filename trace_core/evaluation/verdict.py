"""The verdict on TRACE+: one word per opponent and metric from the paired differences of
:mod:`trace_core.evaluation.paired`.

:func:`verdict` turns the per-split differences of TRACE+ into one word per opponent and metric (``"beats"``,
``"ties"``, ``"loses"``): a 95% t-interval over the splits (see :func:`t_interval`) must exclude zero *and* the mean
must exceed :data:`MIN_EFFECT` for a win or a loss; anything else is a tie. It says what the numbers say and nothing
about why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from trace_core.evaluation.paired import (
    BEST_BASELINE,
    FITTED,
    RAW,
    PairedComparison,
    chosen_text,
    count_text,
    signif,
    split_outcomes,
)
from trace_core.methods.registry import METHODS, METRICS, REFERENCE

__all__ = ["CONFIDENCE", "LOPSIDED", "MIN_EFFECT", "Verdict", "VerdictEntry", "auroc_skill", "best_baseline_values",
           "lopsided_note", "no_skill_sentence", "outcome", "reference_sentence", "t_interval", "verdict",
           "verdict_word"]

#: Level of the verdict's intervals over splits.
CONFIDENCE = 0.95
#: Smallest |mean paired difference|, in the metric's own units, that :func:`verdict_word` calls a win or a loss: a
#: difference whose interval excludes zero but is smaller than this is a tie. Chosen as the smallest gap that changes
#: a decision made from the scores, and about one method's own spread over 20 splits of ~1,000 answers:
MIN_EFFECT: dict[str, float] = {
    "brier": 0.005,  # 2-4% of a useful score's Brier (0.12-0.22 at 40-80% correct); below it, probabilities that
    #                  differ this little lead to the same flags (demo data: one method's std over splits 0.003-0.005)
    "ece": 0.01,     # a calibration error in probability units like Brier's, but noisier (demo data: one method's
    #                  std over splits 0.007-0.02 for most methods)
    "auroc": 0.01,   # 1 in 100 (correct, wrong) pairs ordered differently, a gap commonly taken as the smallest worth
    #                  reporting, and about AUROC's std over splits at ~1,000 answers (demo data: 0.005-0.015)
    "auprc": 0.01,   # AUROC's scale
    "aurc": 0.005,   # a risk averaged over coverages: Brier's scale
    "prr": 0.02,     # PRR is about a rescaled AUROC spanning twice its range
}


def t_interval(values: Any, *, test_train_ratio: float | None = None,
               level: float = CONFIDENCE) -> tuple[float, float, float]:
    """Mean of per-split ``values`` and its two-sided ``level`` t-interval, ``(mean, low, high)``.

    ``mean ± t_{(1+level)/2, n-1} · sd · sqrt(1/n + r)`` over the n finite values (NaN left out), ``sd`` with ddof 1.
    With ``r = 0`` (``test_train_ratio`` None) this is the plain t-interval ``sd/√n``, which treats the splits as
    independent samples. They are not: repeated random splits of one dataset overlap, so the plain interval is
    optimistic (too narrow) for what a new dataset would show. With ``r = n_evaluation / n_calibration`` it is the
    corrected resampled t-test's variance (Nadeau and Bengio 2003, "Inference for the generalization error";
    Bouckaert and Frank 2004), a heuristic that widens the interval for the overlap. :func:`verdict` uses the
    corrected variance whenever the calibration fraction is known (``r = (1 - fraction) / fraction``, 1.86 at the
    default 35%), the plain one otherwise. Fewer than 2 values: ``(mean, nan, nan)`` (no interval).

    Examples
    --------
    >>> mean, low, high = t_interval([1.0, 2.0, 3.0])  # sd 1, t_{0.975, 2} = 4.303: 2 ± 4.303/√3
    >>> round(mean, 3), round(low, 3), round(high, 3)
    (2.0, -0.484, 4.484)
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    n = int(x.shape[0])
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(x.mean())
    if n < 2:
        return mean, float("nan"), float("nan")
    from scipy.special import stdtrit  # the t quantile; imported on first use: `import trace_core` stays light

    ratio = 0.0 if test_train_ratio is None else float(test_train_ratio)
    half = float(stdtrit(n - 1, 0.5 + level / 2)) * float(np.std(x, ddof=1)) * math.sqrt(1.0 / n + ratio)
    return mean, mean - half, mean + half


def verdict_word(metric: str, mean: float, low: float, high: float, min_effect: float | None = None) -> str:
    """``"beats"`` when the interval ``[low, high]`` of ``method - versus`` lies wholly on the metric's good side of
    zero and ``|mean|`` exceeds ``min_effect`` (default :data:`MIN_EFFECT` of the metric), ``"loses"`` when both hold
    on the bad side, else ``"ties"`` (also when there is no interval).

    Examples
    --------
    >>> verdict_word("brier", -0.02, -0.03, -0.01), verdict_word("auroc", -0.02, -0.03, -0.01)
    ('beats', 'loses')
    >>> verdict_word("auroc", 0.004, 0.003, 0.005)  # the interval excludes 0, the gap is below 0.01
    'ties'
    """
    spec = METRICS[metric]
    effect = MIN_EFFECT.get(metric, 0.0) if min_effect is None else min_effect
    if not (math.isfinite(low) and math.isfinite(high)) or not abs(mean) > effect:
        return "ties"
    above, below = low > 0, high < 0
    if above or below:
        return "beats" if above == spec.higher_is_better else "loses"
    return "ties"


@dataclass(frozen=True)
class VerdictEntry:
    """One (opponent, metric) of a :class:`Verdict`: ``word`` and the numbers behind it (``method - versus``)."""

    versus: str
    metric: str
    word: str
    mean: float
    low: float
    high: float
    wins: int
    ties: int
    losses: int
    n_splits: int
    min_effect: float
    chosen: dict[str, int] = field(default_factory=dict)  # best baseline only: name -> how often chosen
    chosen_unit: str = "splits"

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("versus", "metric", "word", "mean", "low", "high", "wins", "ties",
                                              "losses", "n_splits", "min_effect")}
        out = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}
        if self.versus == BEST_BASELINE:
            out["chosen"] = dict(self.chosen)
            out["chosen_unit"] = self.chosen_unit
        return out


_OPPONENT = {BEST_BASELINE: "the best baseline", REFERENCE: "the supervised likelihood reference"}
# What each kind of outcome is called: (first phrase, before the opponent's name; the same about "it" later on).
_PHRASES = {
    "beats": ("beats {name}", "beats it"),
    "loses": ("loses to {name}", "loses to it"),
    "better": ("is detectably but negligibly better than {name}", "detectably but negligibly better than it"),
    "worse": ("is detectably but negligibly worse than {name}", "detectably but negligibly worse than it"),
    "unclear": ("cannot be told apart from {name}", "cannot be told apart from it"),
}
#: Share of the splits won (or lost) from which an outcome whose interval holds 0 gets a sentence saying why those
#: wins are no win.
LOPSIDED = 0.8


def outcome(entry: VerdictEntry) -> str:
    """What an entry says, in more detail than its word: ``"beats"``, ``"loses"``; for a tie, ``"better"`` /
    ``"worse"`` (the interval excludes 0 but the difference is under the minimum effect: detectable and negligible)
    or ``"unclear"`` (the interval holds 0, or there is none)."""
    if entry.word != "ties":
        return entry.word
    if not (math.isfinite(entry.low) and math.isfinite(entry.high)) or entry.low <= 0 <= entry.high:
        return "unclear"
    return "better" if (entry.low > 0) == METRICS[entry.metric].higher_is_better else "worse"


def _interval_text(mean: float, low: float, high: float) -> str:
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{signif(mean)}, no interval from one split"
    return f"{signif(mean)}, {CONFIDENCE:.0%} CI {signif(low)} to {signif(high)}"


def _part(entry: VerdictEntry, chosen: str = "") -> str:
    """``"AUROC (+0.0123, 95% CI … , wins 14 of 20 splits)"``; a negligible difference names the minimum effect."""
    text = f"{METRICS[entry.metric].label} ({_interval_text(entry.mean, entry.low, entry.high)}"
    if outcome(entry) in ("better", "worse"):
        text += f", under the minimum effect of {entry.min_effect:g}"
    return text + f", wins {count_text(entry.wins, entry.n_splits)}" + (f"; chosen: {chosen}" if chosen else "") + ")"


def _clause(name: str, entries: list[VerdictEntry], chosen: dict[int, str]) -> str:
    """The opponent's part of the sentence: its entries grouped by :func:`outcome`, in their order."""
    by_kind: dict[str, list[tuple[int, VerdictEntry]]] = {}
    for i, e in enumerate(entries):
        by_kind.setdefault(outcome(e), []).append((i, e))
    pieces = []
    for i, (kind, group) in enumerate(by_kind.items()):
        verb = _PHRASES[kind][0].format(name=name) if i == 0 else _PHRASES[kind][1]
        pieces.append(f"{verb} on " + " and on ".join(_part(e, chosen.get(j, "")) for j, e in group))
    return " and ".join(pieces)


def _lopsided(entry: VerdictEntry) -> str | None:
    """For an outcome whose interval holds 0 although nearly every split went one way, ``"better than the best
    baseline on Brier in 20 of 20 splits"``; None otherwise."""
    if outcome(entry) != "unclear" or not (math.isfinite(entry.low) and math.isfinite(entry.high)):
        return None
    most = max(entry.wins, entry.losses)
    if entry.n_splits < 2 or most < LOPSIDED * entry.n_splits:
        return None
    side = "better" if entry.wins >= entry.losses else "worse"
    return (f"{side} than {_OPPONENT.get(entry.versus, entry.versus)} on {METRICS[entry.metric].label} in "
            f"{count_text(most, entry.n_splits)}")


def lopsided_note(method: str, entries: Sequence[VerdictEntry]) -> str | None:
    """One sentence on why splits that nearly all go one way are not called a win or a loss when the interval holds
    0: the splits reuse the same answers. None when no entry is like that."""
    found = [text for e in entries if (text := _lopsided(e))]
    if not found:
        return None
    listed = ", ".join(found[:-1]) + (" and " if len(found) > 1 else "") + found[-1]
    called = ("none of these is called a win or a loss" if len(found) > 1 else
              f"this is not called a {'win' if found[0].startswith('better') else 'loss'}")
    return (f"{method} is {listed}, yet {called}: the splits reuse the same answers, so they agree with each other "
            "more than independent samples would, and the interval, corrected for that overlap, still holds 0 (more "
            "answers would narrow it).")


@dataclass
class Verdict:
    """What the paired comparison says about TRACE+ (see :func:`verdict`): one :class:`VerdictEntry` per opponent
    and metric, and the AUROC of TRACE+, the best baseline and the reference with their intervals.

    Attributes
    ----------
    method : str
    entries : list of VerdictEntry
    auroc : dict
        ``"TRACE+"`` / ``"best baseline"`` / the reference -> (mean, low, high) of AUROC over the splits, the same
        t-interval as the differences' with its ends clipped to [0, 1] (the best baseline's is, per split, the
        baseline chosen on that split's calibration part by AUROC).
    best_auroc : tuple or None
        (method, mean, low, high) of the informative method with the highest mean AUROC.
    skill_detected : bool or None
        Whether some informative method's AUROC interval lies above 0.5 (None: no AUROC values).
    test_train_ratio : float or None
        The interval's overlap correction (see :func:`t_interval`); None: plain t-intervals.
    strongest : list of VerdictEntry
        Per metric, TRACE+ against the baseline with the best mean over the splits (``versus`` its name), chosen
        after the fact; left out where that baseline was the best baseline of every split.
    """

    method: str
    entries: list[VerdictEntry]
    auroc: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    best_auroc: tuple[str, float, float, float] | None = None
    skill_detected: bool | None = None
    test_train_ratio: float | None = None
    strongest: list[VerdictEntry] = field(default_factory=list)

    def get(self, versus: str, metric: str) -> VerdictEntry | None:
        return next((e for e in self.entries if e.versus == versus and e.metric == metric), None)

    def word(self, versus: str, metric: str) -> str | None:
        """``"beats"``, ``"ties"`` or ``"loses"``; None when that comparison did not run."""
        entry = self.get(versus, metric)
        return None if entry is None else entry.word

    def _opponent_clause(self, versus: str, entries: list[VerdictEntry]) -> str:
        name = _OPPONENT.get(versus, versus)
        shared = versus == BEST_BASELINE and all(e.chosen == entries[0].chosen for e in entries)
        if shared and entries[0].chosen:
            name += f" ({chosen_text(entries[0].chosen, entries[0].chosen_unit, limit=3)})"
        chosen = ({i: chosen_text(e.chosen, e.chosen_unit, limit=3) for i, e in enumerate(entries) if e.chosen}
                  if versus == BEST_BASELINE and not shared else {})
        return _clause(name, entries, chosen)

    @property
    def sentence(self) -> str:
        """``"TRACE+ loses to the best baseline (SeqLogP in 14 of 20 splits, MinProb in 6) on Brier (+0.0123, 95% CI
        +0.00800 to +0.0166, wins 0 of 20 splits) and cannot be told apart from it on AUROC (…); it …"``, then, for
        an outcome whose interval holds 0 although nearly every split went one way, why that is no win. It says what
        the numbers say, never why."""
        opponents = list(dict.fromkeys(e.versus for e in self.entries))
        clauses = [self._opponent_clause(v, [e for e in self.entries if e.versus == v]) for v in opponents]
        note = lopsided_note(self.method, self.entries)
        return f"{self.method} " + "; it ".join(clauses) + "." + (f" {note}" if note else "")

    @property
    def strongest_sentence(self) -> str | None:
        """The baseline with the best mean in the table, per metric, chosen after seeing the evaluation parts (so
        the comparison favours it), with TRACE+'s difference and wins against it; None when it is the best
        baseline of every split already (nothing new to say) or when there is none."""
        if not self.strongest:
            return None
        by_name: dict[str, list[VerdictEntry]] = {}
        for e in self.strongest:
            by_name.setdefault(e.versus, []).append(e)
        clauses = [_clause(name, entries, {}) for name, entries in by_name.items()]
        return ("Against the strongest baseline of the table, picked after seeing the evaluation parts (so the "
                f"comparison favours it): {self.method} " + "; it ".join(clauses) + ".")

    def paragraph(self) -> str:
        """:attr:`sentence`, :attr:`strongest_sentence` and :attr:`auroc_sentence`: what a page or report shows."""
        return " ".join(t for t in (self.sentence, self.strongest_sentence, self.auroc_sentence) if t)

    @property
    def auroc_sentence(self) -> str | None:
        """``"AUROC, mean over splits (95% CI): TRACE+ 0.888 (0.874 to 0.902), best baseline 0.901 (…)."``"""
        if not self.auroc:
            return None
        parts = []
        for name, (mean, low, high) in self.auroc.items():
            interval = f" ({low:.3f} to {high:.3f})" if math.isfinite(low) and math.isfinite(high) else ""
            parts.append(f"{_OPPONENT.get(name, name).removeprefix('the ')} {mean:.3f}{interval}")
        return f"AUROC, mean over splits ({CONFIDENCE:.0%} CI): " + ", ".join(parts) + "."

    @property
    def no_skill_sentence(self) -> str | None:
        """The no-detectable-skill sentence when no informative method's AUROC interval lies above 0.5, else None."""
        return no_skill_sentence(self.best_auroc) if self.skill_detected is False else None

    def text(self) -> str:
        """:meth:`paragraph`, then :attr:`no_skill_sentence` where there is one."""
        return " ".join(t for t in (self.paragraph(), self.no_skill_sentence) if t)

    def rule(self) -> str:
        """How the words were decided, for a caption."""
        metrics = list(dict.fromkeys(e.metric for e in self.entries))
        effects = ", ".join(f"{METRICS[m].label} {MIN_EFFECT.get(m, 0.0):g}" for m in metrics)
        variance = (f"Its variance is corrected for the splits' overlap (Nadeau–Bengio: sd²·(1/n + r), r = "
                    f"{self.test_train_ratio:.2f} the ratio of evaluation to calibration sizes), an approximation."
                    if self.test_train_ratio
                    else "It treats the splits as independent, so it is optimistic: they overlap.")
        return (f"Verdict: beats (loses) when the paired difference's {CONFIDENCE:.0%} t-interval over the splits lies "
                f"wholly on the better (worse) side of 0 and |mean| exceeds the minimum effect ({effects}); otherwise "
                f"ties. {variance}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the rule's settings, every comparison and the AUROC intervals."""
        def interval(values: tuple[float, ...]) -> dict[str, Any]:
            return {k: (v if math.isfinite(v) else None) for k, v in zip(("mean", "low", "high"), values, strict=True)}

        out: dict[str, Any] = {
            "method": self.method, "confidence": CONFIDENCE, "test_train_ratio": self.test_train_ratio,
            "interval": "corrected resampled t (Nadeau-Bengio)" if self.test_train_ratio else "t over splits",
            "comparisons": [e.to_dict() for e in self.entries],
            "auroc": {name: interval(v) for name, v in self.auroc.items()},
            "skill_detected": self.skill_detected,
            "strongest": [e.to_dict() for e in self.strongest],
            "sentence": self.sentence, "strongest_sentence": self.strongest_sentence,
            "auroc_sentence": self.auroc_sentence,
            "no_skill_sentence": self.no_skill_sentence}
        if self.best_auroc is not None:
            out["best_auroc"] = {"method": self.best_auroc[0], **interval(self.best_auroc[1:])}
        return out


def no_skill_sentence(best: tuple[str, float, float, float] | None) -> str:
    """``"No method's AUROC is detectably above 0.5 here (best: X 0.530, 95% CI 0.470 to 0.590): the data show no
    detectable skill."``; ``best`` is (method, mean, low, high) of the highest mean AUROC."""
    if best is None or not math.isfinite(best[1]):
        return "No method's AUROC is detectably above 0.5 here: the data show no detectable skill."
    name, mean, low, high = best
    interval = (f", {CONFIDENCE:.0%} CI {low:.3f} to {high:.3f}" if math.isfinite(low) and math.isfinite(high)
                else ", no interval from one split")
    return (f"No method's AUROC is detectably above 0.5 here (best: {name} {mean:.3f}{interval}): the data show no "
            "detectable skill.")


def _auroc_interval(values: Any, ratio: float | None) -> tuple[float, float, float]:
    """:func:`t_interval` of per-split AUROC values, its ends clipped to [0, 1] (AUROC cannot leave it)."""
    mean, low, high = t_interval(values, test_train_ratio=ratio)
    return mean, (max(low, 0.0) if math.isfinite(low) else low), (min(high, 1.0) if math.isfinite(high) else high)


def _series(values: pd.DataFrame, method: str, metric: str, calibrator: str) -> pd.Series:
    """Split -> ``method``'s ``metric`` (scalar methods under ``calibrator``, fitted ones under "logistic")."""
    rows = values[(values["method"] == method) & (values["metric"] == metric)
                  & values["calibrator"].isin([calibrator, FITTED, RAW])]
    return rows.drop_duplicates("split").set_index("split")["value"].astype(np.float64)


def _differences(paired: PairedComparison, method: str, versus: str, metric: str, calibrator: str) -> pd.Series:
    cal = RAW if METRICS[metric].on == "score" else calibrator
    p = paired.per_split
    rows = p[(p["method"] == method) & (p["versus"] == versus) & (p["metric"] == metric) & (p["calibrator"] == cal)]
    return rows.drop_duplicates("split").set_index("split")["difference"].astype(np.float64)


def _subject(paired: PairedComparison) -> str | None:
    present = set(paired.summary["method"])
    return next((m for m in ("TRACE+", METHODS["TRACE+"].surprisal_only) if m in present), None)


def best_baseline_values(paired: PairedComparison, values: pd.DataFrame, method: str, metric: str,
                         calibrator: str = "platt") -> pd.Series:
    """Split -> the value of the baseline chosen on that split's calibration part (``method``'s value minus the
    paired difference): what "the best baseline" scored on each evaluation part."""
    diff = _differences(paired, method, BEST_BASELINE, metric, calibrator)
    own = _series(values, method, metric, calibrator)
    return (own - diff).dropna()


def verdict(paired: PairedComparison, *, values: pd.DataFrame | None = None, calibrator: str = "platt",
            method: str | None = None, metrics: Sequence[str] = ("brier", "auroc"), extra_metric: str | None = None,
            opponents: Sequence[str] = (BEST_BASELINE, REFERENCE), calibration_fraction: float | None = None,
            uninformative: Sequence[str] = ()) -> Verdict | None:
    """The verdict on TRACE+ against the best baseline and the supervised likelihood reference.

    For each opponent (the best baseline chosen on each split's calibration part; :data:`REFERENCE`) and metric
    (``metrics``, then ``extra_metric``, e.g. the one a table is sorted by), the per-split differences ``method -
    versus`` get a :func:`t_interval` (corrected for overlapping splits when ``calibration_fraction`` is given) and a
    word from :func:`verdict_word`: "beats" only when the interval excludes zero on the better side *and* |mean|
    exceeds :data:`MIN_EFFECT`, "loses" likewise on the worse side, else "ties". Comparisons that did not run are left
    out; None when none ran.

    Parameters
    ----------
    paired : PairedComparison
    values : DataFrame, optional
        Per-split values (split, method, metric, calibrator, value; :attr:`EvaluationResult.per_split`): for the
        AUROC intervals of TRACE+, the best baseline and the reference, and whether any method shows skill (an
        AUROC interval above 0.5; ``uninformative`` methods are left out).
    calibrator : str
        The scalar calibrator of the baselines' Brier and ECE (TRACE+ and the reference use their own).
    method : str, optional
        Default: "TRACE+", or "TRACE+ (surprisal-only)" when only that ran.
    calibration_fraction : float, optional
        The protocol's calibration share; gives the interval's overlap correction ``(1 - f) / f``.
    """
    method = method or _subject(paired)
    if method is None:
        return None
    wanted = [m for m in dict.fromkeys([*metrics, *([extra_metric] if extra_metric else [])]) if m in METRICS]
    ratio = (1 - calibration_fraction) / calibration_fraction if calibration_fraction else None
    entries = []
    for versus in opponents:
        for metric in wanted:
            row = paired.get(method, versus, metric, calibrator)
            if row is None or not row["n_splits"]:
                continue
            mean, low, high = t_interval(_differences(paired, method, versus, metric, calibrator).to_numpy(),
                                         test_train_ratio=ratio)
            counts = row.get("chosen_counts") if versus == BEST_BASELINE else None
            entries.append(VerdictEntry(versus, metric, verdict_word(metric, mean, low, high), mean, low, high,
                                        int(row["wins"]), int(row["ties"]), int(row["losses"]), int(row["n_splits"]),
                                        MIN_EFFECT.get(metric, 0.0), dict(counts or {}), paired.chosen_unit))
    if not entries:
        return None
    out = Verdict(method, entries, test_train_ratio=ratio)
    if values is not None and not values.empty and "auroc" in set(values["metric"]):
        own = _series(values, method, "auroc", calibrator)
        if not own.empty:
            out.auroc[method] = _auroc_interval(own.to_numpy(), ratio)
        best = best_baseline_values(paired, values, method, "auroc", calibrator)
        if not best.empty:
            out.auroc[BEST_BASELINE] = _auroc_interval(best.to_numpy(), ratio)
        if REFERENCE in opponents:
            reference = _series(values, REFERENCE, "auroc", calibrator)
            if not reference.empty:
                out.auroc[REFERENCE] = _auroc_interval(reference.to_numpy(), ratio)
        out.best_auroc, out.skill_detected = auroc_skill(values, test_train_ratio=ratio, uninformative=uninformative)
    if values is not None and not values.empty and BEST_BASELINE in opponents:
        out.strongest = [e for metric in wanted
                         if (e := _strongest(paired, values, method, metric, calibrator, ratio, uninformative))]
    return out


def _strongest(paired: PairedComparison, values: pd.DataFrame, method: str, metric: str, calibrator: str,
               ratio: float | None, uninformative: Sequence[str]) -> VerdictEntry | None:
    """``method`` against the baseline whose mean ``metric`` over the splits is best (chosen after the fact), as a
    :class:`VerdictEntry`; None without baselines, or when that baseline was the best baseline of every split."""
    spec = METRICS[metric]
    present = [m for m in dict.fromkeys(values["method"]) if m in METHODS and METHODS[m].is_baseline
               and m not in set(uninformative)]
    own = _series(values, method, metric, calibrator)
    means = {m: float(v.mean()) for m in present if not (v := _series(values, m, metric, calibrator)).dropna().empty}
    if own.dropna().empty or not means:
        return None
    name = (max if spec.higher_is_better else min)(means, key=lambda m: means[m])
    row = paired.get(method, BEST_BASELINE, metric, calibrator)
    counts = dict(row.get("chosen_counts") or {}) if row is not None else {}
    if counts and set(counts) == {name}:
        return None
    diff = (own - _series(values, name, metric, calibrator)).dropna().to_numpy()
    if diff.shape[0] == 0:
        return None
    mean, low, high = t_interval(diff, test_train_ratio=ratio)
    wins, ties, losses = split_outcomes(diff, spec.higher_is_better)
    return VerdictEntry(name, metric, verdict_word(metric, mean, low, high), mean, low, high, wins, ties, losses,
                        int(diff.shape[0]), MIN_EFFECT.get(metric, 0.0))


def auroc_skill(values: pd.DataFrame, *, test_train_ratio: float | None = None,
                uninformative: Sequence[str] = ()) -> tuple[tuple[str, float, float, float] | None, bool | None]:
    """((method, mean, low, high) of the highest mean AUROC, whether any method's AUROC interval lies above 0.5),
    over the informative methods of per-split ``values``; (None, None) without AUROC values, and None for the second
    when there is no interval (one split)."""
    auroc = values[(values["metric"] == "auroc") & ~values["method"].isin(list(uninformative))]
    if auroc.empty:
        return None, None
    intervals = {m: _auroc_interval(group.drop_duplicates("split")["value"].to_numpy(), test_train_ratio)
                 for m, group in auroc.groupby("method", sort=False)}
    intervals = {m: v for m, v in intervals.items() if math.isfinite(v[0])}
    if not intervals:
        return None, None
    name = max(intervals, key=lambda m: intervals[m][0])
    if not any(math.isfinite(low) for _, low, _ in intervals.values()):  # one split: no interval, no claim
        return (name, *intervals[name]), None
    detected = any(math.isfinite(low) and low > 0.5 for _, low, _ in intervals.values())
    return (name, *intervals[name]), detected


def reference_sentence(paired: PairedComparison, *, calibrator: str = "platt", method: str | None = None,
                       metrics: Sequence[str] = ("brier", "auroc"), calibration_fraction: float | None = None
                       ) -> str | None:
    """The :func:`verdict` sentence of TRACE+ against the supervised likelihood reference only (kept for callers of
    the old name; its rule is the verdict's). None when either did not run."""
    found = verdict(paired, calibrator=calibrator, method=method, metrics=metrics, opponents=(REFERENCE,),
                    calibration_fraction=calibration_fraction)
    return None if found is None else found.sentence
