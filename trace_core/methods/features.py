"""TRACE+ feature matrices for many traces at once.

Every feature is computed from the trace only (surprisal s and entropy H per token), vectorised over the batch.
Feature sets:

``paper`` (8, the paper's TRACE+, as published)
    first-3 entropy confidence ``exp(-mean H[:3])``, mean entropy confidence ``exp(-mean H)``, log answer length
    ``log T``, entropy slope (least-squares slope of H over t; 0 when T < 2), decayed entropy confidence
    ``exp(-D_lam(H))`` for lam = 2 and 4, decayed surprisal confidence ``exp(-D_lam(s))`` for lam = 2 and 4.
``extended`` (13)
    the paper's eight on a well-conditioned scale (below), plus ``M_4(H)``, ``M_4(s)``, the spike gaps
    ``M_4(H) - mean H`` and ``M_4(s) - mean s``, and TRACE R.
``paper+likelihood`` (11) / ``extended+likelihood`` (16) (ablations)
    ``paper`` (as published) / ``extended`` plus likelihood summaries, well conditioned: the logit of the minimum
    token probability ``logit(min p_t)``, the log geometric-mean token probability ``-mean s``, and the
    low-probability token rate ``mean(p_t < 0.1)``. The paper excludes these by default.
``surprisal`` (6, TRACE+ (surprisal-only), for traces without entropy)
    the paper set with surprisal s in place of entropy H, as published: first-3 surprisal confidence
    ``exp(-mean s[:3])`` (``first3_surprisal_conf``), mean surprisal confidence ``exp(-mean s)``
    (``mean_surprisal_conf``), ``log T``, surprisal slope (``surprisal_slope``), and ``exp(-D_lam(s))`` for lam = 2
    and 4. The paper set's two decayed-surprisal features are these last two, so they appear once, under their paper
    names.

**Well-conditioned scale.** A linear logistic on ``exp(-x)`` sees answers whose mean entropy or surprisal differ
by several nats as nearly the same value near 0, and on a probability near 1 (a multiple-choice letter at
p = 0.999 against 0.9) it sees differences the logit spreads over several units. Outside the published sets, every
feature of the form ``exp(-statistic)`` enters as its log, the statistic negated (named ``log_<name>``, e.g.
``log_mean_entropy_conf = -mean H``), and the single probability ``min p_t`` as its logit (``logit_min_token_prob``,
computed from ``max s`` as ``-s - log(1 - exp(-s))`` with ``s >= 2**-53``, so at most 36.7 as in
:func:`trace_core.calibration.calibrators.transform_scores`): the same transforms the scalar baselines are calibrated on
(:mod:`trace_core.methods.baselines`). Lengths, slopes, nats and rates stay as they are.

Every feature has one name, used in every set that holds it; :func:`needs_entropy` says whether a set reads H.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trace_core.checks import check_choice
from trace_core.methods.operators import decayed_mean, first_k_mean, segment_max, segment_mean, slope, window_max_mean
from trace_core.methods.risk import PAPER_CONFIG, TraceConfig, risk_from_arrays, stack_traces
from trace_core.traces.ragged import Ragged, check_paired, float64
from trace_core.traces.table import as_traces
from trace_core.traces.trace import Trace

__all__ = ["FEATURE_SETS", "LOW_PROB_THRESHOLD", "default_feature_set", "feature_matrix", "feature_matrix_from_arrays",
           "feature_names", "logit_of_surprisal", "needs_entropy"]

LOW_PROB_THRESHOLD = 0.1

_PAPER = (
    "first3_entropy_conf",
    "mean_entropy_conf",
    "log_length",
    "entropy_slope",
    "decayed_entropy_conf_l2",
    "decayed_entropy_conf_l4",
    "decayed_surprisal_conf_l2",
    "decayed_surprisal_conf_l4",
)
_EXTENDED = ("window_entropy_max", "window_surprisal_max", "entropy_spike_gap", "surprisal_spike_gap", "trace_risk")
_LIKELIHOOD = ("logit_min_token_prob", "log_geomean_token_prob", "low_prob_rate")
_SURPRISAL = (
    "first3_surprisal_conf",
    "mean_surprisal_conf",
    "log_length",
    "surprisal_slope",
    "decayed_surprisal_conf_l2",
    "decayed_surprisal_conf_l4",
)
#: The features that read entropy; a set holding any of them needs entropy for every answer.
_ENTROPY_FEATURES = frozenset({
    "first3_entropy_conf", "mean_entropy_conf", "entropy_slope", "decayed_entropy_conf_l2", "decayed_entropy_conf_l4",
    "log_first3_entropy_conf", "log_mean_entropy_conf", "log_decayed_entropy_conf_l2", "log_decayed_entropy_conf_l4",
    "window_entropy_max", "entropy_spike_gap", "trace_risk"})
#: The smallest surprisal the logit feature reads: logit(exp(-s)) is +inf at s = 0; at 2**-53 it is 36.7, the ceiling
#: of the scalar calibrators' logit transform.
_LOGIT_MIN_SURPRISAL = 2.0 ** -53

#: The paper's features of the form exp(-statistic) on the well-conditioned (log) scale: the statistic, negated.
_PAPER_LOG = tuple(name if name in ("log_length", "entropy_slope") else f"log_{name}" for name in _PAPER)

FEATURE_SETS: dict[str, tuple[str, ...]] = {
    "paper": _PAPER,
    "extended": _PAPER_LOG + _EXTENDED,
    "paper+likelihood": _PAPER + _LIKELIHOOD,
    "extended+likelihood": _PAPER_LOG + _EXTENDED + _LIKELIHOOD,
    "surprisal": _SURPRISAL,
}


def logit_of_surprisal(s: np.ndarray) -> np.ndarray:
    """``logit(exp(-s))`` computed from the surprisal, exact near p = 1 where ``1 - p`` would cancel: ``-s -
    log(1 - exp(-s))``, with ``s`` floored at 2**-53 (at most 36.7, the calibrators' logit ceiling)."""
    s = np.maximum(np.asarray(s, dtype=np.float64), _LOGIT_MIN_SURPRISAL)
    return -s - np.log(-np.expm1(-s))


def feature_names(feature_set: str = "paper") -> tuple[str, ...]:
    """Column names of :func:`feature_matrix` for ``feature_set``."""
    return FEATURE_SETS[check_choice(feature_set, "feature_set", FEATURE_SETS)]


def needs_entropy(feature_set: str) -> bool:
    """Whether ``feature_set`` reads entropy (every set but ``"surprisal"``).

    Examples
    --------
    >>> needs_entropy("paper"), needs_entropy("surprisal")
    (True, False)
    """
    return bool(_ENTROPY_FEATURES & set(feature_names(feature_set)))


def default_feature_set(traces: Sequence[Trace]) -> str:
    """The TRACE+ feature set for these traces: ``"paper"`` when every trace has entropy, else ``"surprisal"`` (what
    the protocol reports as ``TRACE+ (surprisal-only)``); callers say which they used."""
    return "paper" if all(t.has_entropy for t in traces) else "surprisal"


def _missing_entropy(feature_set: str, detail: str = "the entropy batch is None") -> ValueError:
    return ValueError(f"feature set {feature_set!r} needs entropy for every answer, but {detail} "
                      f"(entropy_source='absent'); use feature_set='surprisal', TRACE+ (surprisal-only)")


def feature_matrix(traces: Sequence[Trace], *, feature_set: str = "paper") -> np.ndarray:
    """TRACE+ features of many traces.

    Parameters
    ----------
    traces : sequence of Trace, length n_traces
        Each must have at least one token; for a set that reads entropy (:func:`needs_entropy`), each must have
        entropy too.
    feature_set : str
        A key of :data:`FEATURE_SETS`.

    Returns
    -------
    ndarray of float64, shape (n_traces, n_features)
        Columns in the order of ``feature_names(feature_set)``.

    Raises
    ------
    ValueError
        An empty trace, or ``feature_set`` reads entropy and a trace has none (the message names the set and
        suggests ``"surprisal"``).
    """
    traces = as_traces(traces)
    surprisal, entropy = stack_traces(traces)
    if entropy is None and needs_entropy(feature_set):
        without = sum(not t.has_entropy for t in traces)
        raise _missing_entropy(feature_set, f"{without:,} of {len(traces):,} traces have none")
    return feature_matrix_from_arrays(surprisal, entropy, feature_set=feature_set)


def feature_matrix_from_arrays(surprisal: Ragged, entropy: Ragged | None = None, *, feature_set: str = "paper",
                               config: TraceConfig = PAPER_CONFIG) -> np.ndarray:
    """Same as :func:`feature_matrix`, from surprisal and entropy batches that share offsets.

    ``entropy`` may be None (traces without entropy) for a set that does not read it (``"surprisal"``); otherwise
    ValueError naming the set.
    """
    names = feature_names(feature_set)
    if entropy is None and needs_entropy(feature_set):
        raise _missing_entropy(feature_set)
    check_paired(surprisal, entropy, who="TRACE+ needs")
    surprisal, entropy = float64(surprisal), None if entropy is None else float64(entropy)
    lengths = surprisal.lengths
    wanted = set(names)
    columns: dict[str, np.ndarray] = {"log_length": np.log(lengths.astype(np.float64))}
    # Statistics x whose published feature is exp(-x); the well-conditioned feature log_<name> is -x.
    stats: dict[str, np.ndarray] = {}
    for lam in (2, 4):
        stats[f"decayed_surprisal_conf_l{lam}"] = np.asarray(decayed_mean(surprisal, lam=lam))
    if wanted & set(_SURPRISAL):
        stats["first3_surprisal_conf"] = np.asarray(first_k_mean(surprisal, k=3))
        stats["mean_surprisal_conf"] = np.asarray(segment_mean(surprisal))
        columns["surprisal_slope"] = np.asarray(slope(surprisal))
    if entropy is not None and wanted & _ENTROPY_FEATURES:
        mean_h = np.asarray(segment_mean(entropy))
        stats["first3_entropy_conf"] = np.asarray(first_k_mean(entropy, k=3))
        stats["mean_entropy_conf"] = mean_h
        columns["entropy_slope"] = np.asarray(slope(entropy))
        for lam in (2, 4):
            stats[f"decayed_entropy_conf_l{lam}"] = np.asarray(decayed_mean(entropy, lam=lam))
    if set(_EXTENDED) & wanted:
        if entropy is None:  # every set with the extended features reads entropy: refused above
            raise _missing_entropy(feature_set)
        mean_s = np.asarray(segment_mean(surprisal))
        columns["window_entropy_max"] = np.asarray(window_max_mean(entropy, w=4))
        columns["window_surprisal_max"] = np.asarray(window_max_mean(surprisal, w=4))
        columns["entropy_spike_gap"] = columns["window_entropy_max"] - mean_h
        columns["surprisal_spike_gap"] = columns["window_surprisal_max"] - mean_s
        columns["trace_risk"] = risk_from_arrays(surprisal, entropy, config)
    if set(_LIKELIHOOD) & wanted:
        columns["logit_min_token_prob"] = logit_of_surprisal(np.asarray(segment_max(surprisal)))
        columns["log_geomean_token_prob"] = -np.asarray(segment_mean(surprisal))
        columns["low_prob_rate"] = np.asarray(segment_mean(surprisal.with_values(
            (np.exp(-surprisal.values) < LOW_PROB_THRESHOLD).astype(np.float64))))
    for name, x in stats.items():
        columns[name] = np.exp(-x)
        columns[f"log_{name}"] = -x
    return np.column_stack([columns[name] for name in names]) if len(lengths) else np.zeros((0, len(names)))
