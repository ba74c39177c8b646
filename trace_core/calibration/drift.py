"""The drift check: are new answers drawn like the answers a calibrator (or a guarantee) was calibrated on?

A calibrator's probabilities, and the guaranteed error rate of :mod:`trace_core.flagging.guarantee`, assume that the new
answers are exchangeable with the calibration answers (same model, prompts of the same kind). This module tests that
assumption on the answers' trace features, one feature at a time, from a small summary of the calibration sample.

The summary (:class:`DriftSummary`, kept in the calibrator's JSON): for each feature, the calibration sample's
quantile edges at ``k / B`` (``B`` = :data:`BINS` = 10 equal-frequency bins; the edges are the order statistics
``x_(floor(n k / B) + 1)``) and the calibration count in each bin. Equal edges (ties, discrete features such as
``log T``) are merged, an edge at the sample's minimum is dropped (so no bin is empty), and a bin holding less than
half its share (``n / (2B)``) is merged into its smaller neighbour. A bin is ``[e_{j-1}, e_j)``. So a feature takes
at most ``2B - 1 = 19`` numbers, whatever the sample size: no raw data, at most about 600 bytes of JSON per feature.

The test, per feature: the calibration counts ``c_j`` and the new answers' counts ``m_j`` in the same bins form a
2 x K table; Pearson's chi-square statistic of homogeneity

    X^2 = sum_{r, j} (O_rj - E_rj)^2 / E_rj,   E_rj = (row total r) * (c_j + m_j) / (n + m),

has ``K - 1`` degrees of freedom under the null hypothesis that both samples come from one distribution; the p-value
is the chi-square survival function (:func:`chi2_sf`). Bins from the calibration sample's own quantiles make this a
rank test: the edges' randomness carries the calibration sample's share of the variance. Before testing, adjacent bins
are merged until every bin expects at least 5 answers of the smaller sample (the chi-square approximation's rule), so
a small new sample is tested on fewer, wider bins. A feature constant on the calibration answers has one bin and is
not tested.

Overall: Bonferroni over the ``d`` features tested, ``p = min(1, d * min_j p_j)``; a shift is reported when
``p < alpha`` with ``alpha`` = :data:`ALPHA` = 0.001, so a same-distribution sample trips the check in at most about
0.1% of draws (measured by simulation in ``tests/trace_core/calibration/test_drift.py``), while a clear shift in a few
hundred answers is found. Fewer than :data:`MIN_ANSWERS` answers on either side get no verdict ("not enough answers to
check"). """

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trace_core.checks import check_choice, check_int, check_real, check_strings

__all__ = ["ALPHA", "BINS", "EXTRA_FEATURES", "MIN_ANSWERS", "MIN_EXPECTED", "DriftResult", "DriftSummary",
           "FeatureBins", "FeatureDrift", "chi2_sf", "drift_check", "drift_two_sample", "homogeneity_test", "summarize"]

#: Equal-frequency bins per feature in a summary (before ties and small bins are merged).
BINS = 10
#: The overall (Bonferroni) p-value below which a shift is reported.
ALPHA = 0.001
#: Fewer answers than this on either side: no verdict.
MIN_ANSWERS = 30
#: Bins are merged until each expects at least this many answers of the smaller sample.
MIN_EXPECTED = 5.0
#: Features a calibrator's summary holds beside its own (when none of its own is the same up to a monotone map).
EXTRA_FEATURES = ("answer_length", "mean_surprisal")
#: How the features are called in sentences (identifiers not listed are quoted as they are).
FEATURE_WORDS = {"answer_length": "answer length in tokens", "mean_surprisal": "mean surprisal",
                 "score": "the calibrated score"}

STATUSES = ("shift", "no_shift", "too_few", "unavailable")


def chi2_sf(x: float, df: int) -> float:
    """The chi-square distribution's survival function ``P(X^2_df >= x)``, exact for whole ``df``.

    With ``y = x / 2`` it is the regularised upper incomplete gamma function ``Q(df / 2, y)``, a finite sum: for even
    ``df = 2k``, ``Q = sum_{i<k} e^{-y} y^i / i!``; for odd ``df = 2k + 1``, ``Q = erfc(sqrt(y)) + sum_{i=1..k}
    e^{-y} y^{i - 1/2} / Gamma(i + 1/2)``. Terms are summed in log space, so large ``x`` gives a tiny p-value, not 0/0.

    Examples
    --------
    >>> round(chi2_sf(3.841458820694124, 1), 6), round(chi2_sf(16.918977604620448, 9), 6)
    (0.05, 0.05)
    >>> chi2_sf(0.0, 4)
    1.0
    """
    df = check_int(df, "df", minimum=1)
    x = check_real(x, "x", minimum=0)
    y = x / 2.0
    if y == 0.0:
        return 1.0
    log_y = math.log(y)
    if df % 2 == 0:
        terms = [-y + i * log_y - math.lgamma(i + 1) for i in range(df // 2)]
        head = 0.0
    else:
        terms = [-y + (i - 0.5) * log_y - math.lgamma(i + 0.5) for i in range(1, df // 2 + 1)]
        head = math.erfc(math.sqrt(y))
    return float(min(1.0, head + sum(math.exp(t) for t in terms)))


def homogeneity_test(counts_a: Any, counts_b: Any) -> tuple[float, int, float]:
    """Pearson's chi-square test that two samples' counts over the same bins come from one distribution.

    Parameters
    ----------
    counts_a, counts_b : array-like of int, shape (K,)
        Counts of each sample in each bin (bins where both are 0 are left out).

    Returns
    -------
    statistic : float
        ``X^2 = sum_{r, j} (O_rj - E_rj)^2 / E_rj`` over the 2 x K table, ``E_rj = R_r * C_j / N``.
    df : int
        ``K' - 1`` for the ``K'`` bins holding any answer (0: nothing to test, p-value 1).
    p_value : float
        :func:`chi2_sf` of the statistic.

    Examples
    --------
    >>> stat, df, p = homogeneity_test([50, 50], [30, 70])
    >>> round(stat, 3), df, round(p, 4)
    (8.333, 1, 0.0039)
    """
    table = np.vstack([np.asarray(counts_a, dtype=np.float64), np.asarray(counts_b, dtype=np.float64)])
    if table.ndim != 2 or table.shape[0] != 2 or not np.isfinite(table).all() or (table < 0).any():
        raise ValueError("`counts_a` and `counts_b` must be two 1-D arrays of non-negative counts of the same length")
    table = table[:, table.sum(axis=0) > 0]
    rows, cols = table.sum(axis=1), table.sum(axis=0)
    if table.shape[1] < 2 or (rows == 0).any():
        return 0.0, 0, 1.0
    expected = np.outer(rows, cols) / table.sum()
    statistic = float(((table - expected) ** 2 / expected).sum())
    df = table.shape[1] - 1
    return statistic, df, chi2_sf(statistic, df)


@dataclass(frozen=True)
class FeatureBins:
    """One feature of a :class:`DriftSummary`: the calibration sample's bin edges and its count in each bin.

    ``edges`` (increasing, at most ``BINS - 1``) cut the line into ``len(edges) + 1`` bins ``[e_{j-1}, e_j)``;
    ``counts`` (each >= 1) sum to the summary's ``n``."""

    name: str
    edges: tuple[float, ...]
    counts: tuple[int, ...]

    def bin_of(self, values: np.ndarray) -> np.ndarray:
        """The bin index of each value, shape like ``values``."""
        return np.searchsorted(np.asarray(self.edges, dtype=np.float64), values, side="right")


@dataclass(frozen=True)
class DriftSummary:
    """What a calibrator keeps of its calibration features for the drift check (see the module docstring).

    Attributes
    ----------
    n : int
        Calibration answers summarised.
    features : tuple of FeatureBins
        One per feature, in the order of the feature matrix.
    bins : int
        The equal-frequency bins asked for (before merging).
    """

    n: int
    features: tuple[FeatureBins, ...]
    bins: int = BINS

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.features)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form: ``{"n": n, "bins": BINS, "features": [{"name", "edges", "counts"}, ...]}``; at most
        ``2 * bins - 1`` numbers per feature."""
        return {"n": self.n, "bins": self.bins, "features": [
            {"name": f.name, "edges": [float(e) for e in f.edges], "counts": [int(c) for c in f.counts]}
            for f in self.features]}


def _matrix(values: Any, name: str, n_columns: int | None = None) -> np.ndarray:
    """``values`` as a finite float64 matrix (n, d); a 1-D array is one column."""
    try:
        X = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must be a numeric array of shape (n_answers, n_features)") from None
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"`{name}` must have shape (n_answers, n_features), got {X.shape}")
    if n_columns is not None and X.shape[1] != n_columns:
        raise ValueError(f"`{name}` must have {n_columns} columns (one per feature), got {X.shape[1]}")
    if not np.isfinite(X).all():
        row, col = map(int, np.argwhere(~np.isfinite(X))[0])
        raise ValueError(f"`{name}` must be finite; row {row}, column {col} is {float(X[row, col])!r}")
    return X


def _merge_small(counts: Sequence[int], minimum: float) -> list[list[int]]:
    """Groups of adjacent bins (lists of bin indices) such that each group's count is at least ``minimum``: the
    smallest group is merged into its smaller neighbour until none is below (or one group is left)."""
    groups = [[j] for j in range(len(counts))]
    totals = [float(c) for c in counts]
    while len(totals) > 1 and min(totals) < minimum:
        i = int(np.argmin(totals))
        if i == 0:
            j = 1
        elif i == len(totals) - 1:
            j = i - 1
        else:
            j = i - 1 if totals[i - 1] <= totals[i + 1] else i + 1
        lo, hi = min(i, j), max(i, j)
        groups[lo:hi + 1] = [groups[lo] + groups[hi]]
        totals[lo:hi + 1] = [totals[lo] + totals[hi]]
    return groups


def _feature_bins(name: str, x: np.ndarray, bins: int) -> FeatureBins:
    # the order statistics x_(floor(n k / B) + 1): with distinct values, exactly n / B values below the first edge
    quantiles = np.sort(x)[(x.size * np.arange(1, bins)) // bins]
    edges = np.unique(quantiles)
    edges = edges[edges > x.min()]  # an edge at the minimum would leave the first bin empty
    counts = np.bincount(np.searchsorted(edges, x, side="right"), minlength=edges.size + 1)
    groups = _merge_small(counts.tolist(), x.size / (2 * bins))
    kept = [edges[g[0] - 1] for g in groups[1:]]  # a group starts at the edge before its first bin
    merged = [int(counts[g].sum()) for g in groups]
    return FeatureBins(name=name, edges=tuple(float(e) for e in kept), counts=tuple(merged))


def summarize(values: Any, names: Sequence[str], *, bins: int = BINS) -> DriftSummary:
    """The bounded summary of a calibration sample's features that :func:`drift_check` tests new answers against.

    Parameters
    ----------
    values : array-like, shape (n_answers, n_features)
        The calibration answers' features (finite).
    names : sequence of str, length n_features
        The features' names (unique).
    bins : int, default BINS (10)
        Equal-frequency bins per feature, 2 to 100, before equal edges and small bins are merged.

    Returns
    -------
    DriftSummary
        Per feature at most ``bins - 1`` edges and ``bins`` counts (see the module docstring).

    Examples
    --------
    >>> x = np.arange(100.0)
    >>> s = summarize(np.column_stack([x, x // 50]), ["x", "half"])
    >>> s.features[0].edges[:3], s.features[0].counts[:3]
    ((10.0, 20.0, 30.0), (10, 10, 10))
    >>> s.features[1]  # a 0/1 feature: two bins, split at 1
    FeatureBins(name='half', edges=(1.0,), counts=(50, 50))
    """
    names = check_strings([names] if isinstance(names, str) else names, "names")
    bins = check_int(bins, "bins", minimum=2, maximum=100)
    X = _matrix(values, "values", len(names))
    if len(set(names)) != len(names):
        raise ValueError(f"`names` must be unique, got {names}")
    if X.shape[0] == 0:
        raise ValueError("`values` holds no answers to summarise")
    return DriftSummary(n=int(X.shape[0]), features=tuple(_feature_bins(name, X[:, j], bins)
                                                           for j, name in enumerate(names)), bins=bins)


@dataclass(frozen=True)
class FeatureDrift:
    """One feature's test.

    Attributes
    ----------
    name, words : str
        The feature's name, and how sentences call it.
    statistic : float
        Pearson's X^2 over the 2 x K table (0 when not tested).
    df : int
        Its degrees of freedom, ``K - 1`` (0: the feature was constant on the calibration answers, not tested).
    p_value : float
        Uncorrected (1.0 when not tested).
    percentile : float
        Where the new answers sit in the calibration distribution on average, in [0, 1]: the mean over new answers
        of the calibration share below their bin's middle (about 0.5 when drawn alike; higher = larger values).
    crowded : tuple of float
        Where the new answers crowd most, as ``(low, high, new_share, expected_share)``: the run of adjacent
        calibration bins holding the largest excess of new answers over their calibration share, from the
        calibration ``low`` to ``high`` quantile (in [0, 1]), which holds ``new_share`` of the new answers and
        ``expected_share`` (= ``high - low``) of the calibration ones. The mean alone can hide a shift: new answers
        at both ends of the calibration range average out near its middle.
    """

    name: str
    words: str
    statistic: float
    df: int
    p_value: float
    percentile: float
    crowded: tuple[float, float, float, float] = (0.0, 1.0, 1.0, 1.0)

    def crowded_words(self) -> str:
        """:attr:`crowded` in words: "46% of the new answers lie below the 20th percentile of those, where 20% would
        if drawn alike"."""
        low, high, share, expected = self.crowded
        if low <= 0.0:
            where = f"below the {_ordinal(high)} percentile"
        elif high >= 1.0:
            where = f"above the {_ordinal(low)} percentile"
        else:
            where = f"between the {_ordinal(low)} and {_ordinal(high)} percentiles"
        return (f"{_percent(share)} of the new answers lie {where} of those, where {_percent(expected)} would if "
                "drawn alike")


@dataclass(frozen=True)
class DriftResult:
    """The drift check's verdict (see the module docstring), and the sentence that says it.

    Attributes
    ----------
    status : {"shift", "no_shift", "too_few", "unavailable"}
    features : tuple of FeatureDrift
        Every feature tested, in the summary's order (empty unless status is shift or no_shift).
    p_value : float or None
        Overall, Bonferroni over the features tested: ``min(1, d * min p_j)``.
    alpha : float
        The threshold: a shift when ``p_value < alpha``.
    n_reference, n_new : int
        Answers compared: the reference (calibration) sample and the new one.
    reference : str
        What the new answers were compared with, in words ("the answers the calibrator was fitted on").
    consequence : str
        What a shift means for the user, in words ("its probabilities may be miscalibrated for them").
    reason : str
        Why there is no verdict (status "unavailable").
    """

    status: str
    features: tuple[FeatureDrift, ...]
    p_value: float | None
    alpha: float
    n_reference: int
    n_new: int
    reference: str = "the answers the calibrator was fitted on"
    consequence: str = "its probabilities may be miscalibrated for them"
    reason: str = ""

    @classmethod
    def unavailable(cls, reason: str, *, n_new: int = 0) -> DriftResult:
        """A result that says why no check could be made (``reason`` completes "not available: ...")."""
        return cls("unavailable", (), None, ALPHA, 0, int(n_new), reason=reason)

    @property
    def detected(self) -> bool:
        """Whether a shift was found (overall p < alpha)."""
        return self.status == "shift"

    @property
    def tested(self) -> tuple[FeatureDrift, ...]:
        return tuple(f for f in self.features if f.df > 0)

    @property
    def shifted(self) -> tuple[FeatureDrift, ...]:
        """The features whose own test passes the Bonferroni level (``d * p_j < alpha``), most significant first."""
        d = max(len(self.tested), 1)
        return tuple(sorted((f for f in self.tested if f.p_value * d < self.alpha), key=lambda f: f.p_value))

    def sentence(self) -> str:
        """One plain-English sentence: the warning that names the shifted features, or a short pass."""
        if self.status == "unavailable":
            return f"Drift check: not available; {self.reason}."
        if self.status == "too_few":
            small = min(self.n_new, self.n_reference)
            which = "new answers" if self.n_new <= self.n_reference else "reference answers"
            return (f"Drift check: not enough {which} to check ({small:,}; at least {MIN_ANSWERS} are needed).")
        d = len(self.tested)
        if self.status == "no_shift":
            return (f"Drift check: no shift detected between the {self.n_new:,} new answers and {self.reference} "
                    f"in {d} feature{'s' if d != 1 else ''} (overall p = {self.p_value:.2g} ≥ {self.alpha:g}).")
        shown = self.shifted[:3]
        named = ", ".join(f"{f.words} ({f.crowded_words()})" for f in shown)
        more = len(self.shifted) - len(shown)
        named += f" and {more} more feature{'s' if more != 1 else ''}" if more > 0 else ""
        return (f"Drift: the {self.n_new:,} new answers differ from {self.reference} ({self.n_reference:,}) in "
                f"{named}; overall p = {self.p_value:.1g} (chi-square per feature, Bonferroni over {d}), below "
                f"{self.alpha:g}. The assumption that the new answers are drawn like those (exchangeable with them) "
                f"looks broken, so {self.consequence}.")


def _ordinal(share: float) -> str:
    k = int(round(100 * share))
    k = min(max(k, 1), 99)
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _percent(share: float) -> str:
    return f"{100 * share:.0f}%" if share >= 0.01 or share == 0 else "<1%"


def _crowded(counts: np.ndarray, new: np.ndarray) -> tuple[float, float, float, float]:
    """:attr:`FeatureDrift.crowded`: the run of adjacent bins with the largest excess of new answers' share over
    the calibration share (the maximum-sum run of the differences, the first when several tie)."""
    expected, observed = counts / counts.sum(), new / max(int(new.sum()), 1)
    excess = observed - expected
    best, best_run, start, running = -np.inf, (0, 0), 0, 0.0
    for j, e in enumerate(excess):
        if running <= 0.0:
            start, running = j, 0.0
        running += float(e)
        if running > best + 1e-12:
            best, best_run = running, (start, j)
    a, b = best_run
    edges = np.concatenate(([0], np.cumsum(counts))) / counts.sum()  # exactly 0 and 1 at the ends
    return (float(edges[a]), float(edges[b + 1]), float(observed[a:b + 1].sum()), float(edges[b + 1] - edges[a]))


def _test_feature(bins: FeatureBins, n: int, x: np.ndarray, words: str) -> FeatureDrift:
    counts = np.asarray(bins.counts, dtype=np.int64)
    where = bins.bin_of(x)
    new = np.bincount(where, minlength=counts.size)
    # the calibration share below each bin's middle: where a new answer in that bin sits, in calibration terms
    middle = (np.cumsum(counts) - counts / 2.0) / n
    percentile = float(middle[where].mean())
    crowded = _crowded(counts, new)
    # bins merged until each expects MIN_EXPECTED answers of the smaller sample (decided before looking at x)
    groups = _merge_small(counts.tolist(), MIN_EXPECTED * n / min(n, x.size))
    a = [int(counts[g].sum()) for g in groups]
    b = [int(new[g].sum()) for g in groups]
    statistic, df, p_value = homogeneity_test(a, b)
    return FeatureDrift(bins.name, words, statistic, df, p_value, percentile, crowded)


def drift_check(summary: DriftSummary, values: Any, *, names: Sequence[str] | None = None,
                alpha: float = ALPHA, words: Mapping[str, str] | None = None,
                reference: str = "the answers the calibrator was fitted on",
                consequence: str = "its probabilities may be miscalibrated for them") -> DriftResult:
    """Test new answers' features against a calibration :class:`DriftSummary` (see the module docstring).

    Parameters
    ----------
    summary : DriftSummary
        From :func:`summarize` on the calibration features (a calibrator keeps it).
    values : array-like, shape (n_new, n_features)
        The new answers' features, columns in the order of ``names``.
    names : sequence of str, optional
        The features in ``values`` (a subset of the summary's, e.g. when some cannot be computed); default all.
    alpha : float, default ALPHA (0.001)
        A shift is reported when the Bonferroni p-value over the features tested is below it.
    words : mapping, optional
        How sentences call each feature (default :data:`FEATURE_WORDS`, else the name quoted).
    reference, consequence : str
        What the new answers are compared with, and what a shift means, for the sentence.

    Returns
    -------
    DriftResult
        ``status`` "too_few" when either side has fewer than :data:`MIN_ANSWERS` answers.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> summary = summarize(rng.normal(size=(500, 2)), ["a", "b"])
    >>> drift_check(summary, rng.normal(size=(500, 2))).status
    'no_shift'
    >>> shifted = drift_check(summary, rng.normal(size=(500, 2)) + [0.0, 0.5])
    >>> shifted.status, [f.name for f in shifted.shifted]
    ('shift', ['b'])
    """
    if not isinstance(summary, DriftSummary):
        raise TypeError(f"`summary` must be a DriftSummary, got {type(summary).__name__}")
    alpha = check_real(alpha, "alpha", minimum=0, maximum=1, low_open=True, high_open=True)
    by_name = {f.name: f for f in summary.features}
    names = list(summary.names) if names is None else check_strings(
        [names] if isinstance(names, str) else names, "names")
    for name in names:
        check_choice(name, "names", list(by_name))
    X = _matrix(values, "values", len(names))
    n_new = int(X.shape[0])
    texts = {"reference": reference, "consequence": consequence}
    if min(n_new, summary.n) < MIN_ANSWERS:
        return DriftResult("too_few", (), None, alpha, summary.n, n_new, **texts)
    words = {**FEATURE_WORDS, **(words or {})}
    features = tuple(_test_feature(by_name[name], summary.n, X[:, j], words.get(name, repr(name)))
                     for j, name in enumerate(names))
    tested = [f for f in features if f.df > 0]
    if not tested:
        return DriftResult.unavailable("every feature was constant on the calibration answers", n_new=n_new)
    p_value = min(1.0, len(tested) * min(f.p_value for f in tested))
    status = "shift" if p_value < alpha else "no_shift"
    return DriftResult(status, features, p_value, alpha, summary.n, n_new, **texts)


def drift_two_sample(reference_values: Any, new_values: Any, names: Sequence[str], *, bins: int = BINS,
                     alpha: float = ALPHA, words: Mapping[str, str] | None = None,
                     reference: str = "the labeled answers that chose the threshold",
                     consequence: str = "the guaranteed error rate may not hold for them") -> DriftResult:
    """The same test when both samples are at hand: the summary is built from ``reference_values``
    (:func:`summarize`), then ``new_values`` are tested against it (:func:`drift_check`).

    Parameters
    ----------
    reference_values, new_values : array-like, shape (n, n_features) and (m, n_features)
    names : sequence of str
        The features' names, one per column.

    Examples
    --------
    >>> rng = np.random.default_rng(1)
    >>> lengths = rng.geometric(0.1, size=(400, 1))  # discrete, with ties
    >>> drift_two_sample(lengths, rng.geometric(0.1, size=(400, 1)), ["answer_length"]).detected
    False
    >>> drift_two_sample(lengths, 2 * rng.geometric(0.1, size=(400, 1)), ["answer_length"]).detected
    True
    """
    summary = summarize(reference_values, names, bins=bins)
    return drift_check(summary, new_values, alpha=alpha, words=words, reference=reference, consequence=consequence)
