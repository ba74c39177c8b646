"""TRACE risk and confidence, and which tokens drive the risk.

``R = 0.40 * D_2(H) + 0.40 * M_4(H) + 0.20 * L_{1/4}(s)`` and ``c = exp(-R)``: the paper's fixed configuration, used for
every task and model. ``c`` ranks answers (higher = more likely correct); it is not a probability until calibrated.

Traces without entropy (``entropy_source == "absent"``: only the chosen token's log-probability was saved) get the
surprisal-only variant, reported under its own name, ``"TRACE (surprisal-only)"``:
``R_s = 0.40 * D_2(s) + 0.40 * M_4(s) + 0.20 * L_{1/4}(s)`` -- the same operators, with surprisal where TRACE uses
entropy (:data:`SURPRISAL_ONLY_CONFIG`). It is never substituted silently: :func:`trace_risk` refuses traces without
entropy under the entropy configuration, and :func:`explain_trace` records the variant it used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trace_core.checks import check_choice, check_int, check_real, set_checked
from trace_core.methods.operators import (
    KERNELS,
    decay_weights,
    decayed_mean,
    length_normalized_sum,
    window_max_mean,
    window_means,
)
from trace_core.traces.ragged import Ragged
from trace_core.traces.table import TraceTable, as_trace_list, as_traces
from trace_core.traces.trace import ENTROPY_SOURCES, Trace

__all__ = ["PAPER_CONFIG", "SIGNALS", "SPIKE_MARGIN", "SPIKE_MAX_SHARE", "SPIKE_MIN_SURPRISAL", "SURPRISAL_ONLY_CONFIG",
           "TraceConfig", "TraceExplanation", "config_for", "describe_entropy", "entropy_summary", "explain_trace",
           "spike_indices", "stack_traces", "trace_confidence", "trace_risk"]

#: The per-token signal of TRACE's decayed-mean and window terms, and the name each variant is reported under.
SIGNALS: dict[str, str] = {"entropy": "TRACE", "surprisal": "TRACE (surprisal-only)"}


@dataclass(frozen=True)
class TraceConfig:
    """Weights and operator settings of the TRACE risk (defaults: the paper's fixed configuration).

    ``R = weight_decay * D_decay_lam(x) + weight_window * M_window(x) + weight_length * L_length_rho(s)``, with the
    decayed mean's kernel ``decay_kernel`` (one of :data:`trace_core.methods.operators.KERNELS`) and ``x`` the per-token
    ``signal``: entropy H (``"entropy"``, TRACE) or surprisal s (``"surprisal"``, TRACE (surprisal-only), for traces
    without entropy). Weights are reals >= 0, ``decay_lam`` > 0, ``window`` an int >= 1; a wrong type raises
    TypeError, a value out of range ValueError.

    Examples
    --------
    >>> TraceConfig(signal="surprisal").variant
    'TRACE (surprisal-only)'
    """

    weight_decay: float = 0.40
    weight_window: float = 0.40
    weight_length: float = 0.20
    decay_lam: float = 2.0
    decay_kernel: str = "harmonic"
    window: int = 4
    length_rho: float = 0.25
    signal: str = "entropy"

    def __post_init__(self) -> None:
        checked = {name: check_real(getattr(self, name), name, minimum=0)
                   for name in ("weight_decay", "weight_window", "weight_length")}
        checked["window"] = check_int(self.window, "window", minimum=1)
        checked["decay_lam"] = check_real(self.decay_lam, "decay_lam", minimum=0, low_open=True)
        checked["decay_kernel"] = check_choice(self.decay_kernel, "decay_kernel", KERNELS)
        checked["length_rho"] = check_real(self.length_rho, "length_rho")
        checked["signal"] = check_choice(self.signal, "signal", SIGNALS)
        set_checked(self, checked)

    @property
    def variant(self) -> str:
        """The name results are reported under: ``"TRACE"`` or ``"TRACE (surprisal-only)"``."""
        return SIGNALS[self.signal]

    @property
    def needs_entropy(self) -> bool:
        """Whether the risk reads entropy (every answer must then have it)."""
        return self.signal == "entropy"


# The spike rule (a display rule, not part of the score): a token is a spike when the model gave it less than
# e^-1.4 (about 25%) probability, it is at least SPIKE_MARGIN nats more surprising than the answer's median token,
# and it is among the answer's most surprising SPIKE_MAX_SHARE of tokens (at least one). SPIKE_MIN_SURPRISAL and
# SPIKE_MARGIN were chosen on the real model's validation answers (assets/datasets/real_validation.csv) by
# `python -m bench.localisation` (grid search maximising "first wrong token marked" minus "share of the tokens of
# correct answers marked"; tests/trace_core/methods/test_risk.py re-runs it); SPIKE_MAX_SHARE is fixed by design, as in
# the earlier rule.
#: Surprisal floor of a spike, in nats: the chosen token had probability below ``exp(-SPIKE_MIN_SURPRISAL)``.
SPIKE_MIN_SURPRISAL = 1.4
#: How far (nats) a spike's surprisal must exceed the answer's median surprisal.
SPIKE_MARGIN = 1.0
#: At most this share of an answer's tokens, rounded down, are spikes; one may always be (so one under 20 tokens).
SPIKE_MAX_SHARE = 0.1

#: The paper's fixed configuration: ``R = 0.40 D_2(H) + 0.40 M_4(H) + 0.20 L_{1/4}(s)``.
PAPER_CONFIG = TraceConfig()
#: TRACE (surprisal-only): ``R_s = 0.40 D_2(s) + 0.40 M_4(s) + 0.20 L_{1/4}(s)``, for traces without entropy.
SURPRISAL_ONLY_CONFIG = TraceConfig(signal="surprisal")


def all_have_entropy(traces: Sequence[Trace]) -> bool:
    """Whether every trace has per-token entropy (a table's column, when ``traces`` is a table)."""
    if isinstance(traces, TraceTable):
        return bool(np.all(traces.has_entropy))
    return all(t.has_entropy for t in as_trace_list(traces))


def stack_traces(traces: Sequence[Trace]) -> tuple[Ragged, Ragged | None]:
    """Surprisal and entropy of many traces as two :class:`Ragged` batches with the same offsets.

    Returns
    -------
    surprisal : Ragged
    entropy : Ragged or None
        None when *any* trace has no entropy (``entropy_source == "absent"``): methods that use entropy need it for
        every answer, so a partial batch would score some answers one way and the rest another.

    Examples
    --------
    >>> from trace_core.traces.trace import TraceMetadata
    >>> t = Trace(prompt="", answer="a", token_ids=[1], tokens=("a",), surprisal=[0.5], entropy=None,
    ...           top_ids=[], top_logprobs=[], metadata=TraceMetadata(entropy_source="absent"))
    >>> stack_traces([t])[1] is None
    True
    """
    if isinstance(traces, TraceTable):  # stacked once, when the table was made
        return traces.surprisal_batch(), traces.entropy_batch()
    traces = as_trace_list(traces)
    surprisal = Ragged.from_arrays([t.surprisal for t in traces])
    if not all(t.has_entropy for t in traces):
        return surprisal, None
    entropy = surprisal.with_values(np.concatenate([t.entropy for t in traces]) if traces else np.zeros(0))
    return surprisal, entropy


def entropy_summary(traces: Sequence[Trace]) -> dict[str, Any]:
    """What the traces held: how many have each entropy source, and the k of the top-k estimates.

    Returns
    -------
    dict
        ``{"exact": int, "top_k": int, "absent": int, "k": list of int}``: counts per
        ``TraceMetadata.entropy_source`` (every key present, 0 when none) and the distinct known k values of the
        ``"top_k"`` traces, ascending. For the results header (:func:`describe_entropy`).

    Examples
    --------
    >>> entropy_summary([])
    {'exact': 0, 'top_k': 0, 'absent': 0, 'k': []}
    """
    metadata = traces.metadata if isinstance(traces, TraceTable) else [t.metadata for t in as_trace_list(traces)]
    counts: dict[str, Any] = {source: 0 for source in ENTROPY_SOURCES}
    ks: set[int] = set()
    for meta in metadata:
        counts[meta.entropy_source] += 1
        if meta.entropy_k is not None:
            ks.add(meta.entropy_k)
    counts["k"] = sorted(ks)
    return counts


def describe_entropy(summary: dict[str, Any]) -> str:
    """One line saying where the entropy came from, from :func:`entropy_summary`.

    Examples
    --------
    >>> describe_entropy({"exact": 0, "top_k": 120, "absent": 3, "k": [10]})
    'entropy: top-k estimate (k = 10) for 120 answers; absent (chosen-token log-probability only) for 3 answers'
    """
    k = summary.get("k") or []
    k_text = f" (k = {', '.join(map(str, k))})" if k else ""
    labels = {"exact": "exact (full distribution)", "top_k": f"top-k estimate{k_text}",
              "absent": "absent (chosen-token log-probability only)"}
    parts = [f"{labels[source]} for {summary[source]:,} answer{'s' if summary[source] != 1 else ''}"
             for source in ENTROPY_SOURCES if summary.get(source)]
    return "entropy: " + ("; ".join(parts) if parts else "no answers")


def config_for(traces: Sequence[Trace], config: TraceConfig | None = None) -> TraceConfig:
    """The configuration to score ``traces`` with: ``config`` (default :data:`PAPER_CONFIG`) when every trace has
    entropy or ``config`` does not read it, else the same settings with ``signal="surprisal"``.

    Callers that switch report ``config_for(...).variant`` as the method's name, so the switch is never silent.
    """
    config = PAPER_CONFIG if config is None else _check_config(config)
    if config.needs_entropy and not all_have_entropy(traces):
        return dataclasses.replace(config, signal="surprisal")
    return config


def _check_config(config: Any) -> TraceConfig:
    if not isinstance(config, TraceConfig):
        raise TypeError(f"`config` must be a TraceConfig, got {type(config).__name__}")
    return config


def _missing_entropy(n_without: int | None, n_traces: int | None) -> ValueError:
    count = f" but {n_without:,} of {n_traces:,} traces have none" if n_without is not None else (
        " but the entropy batch is None")
    return ValueError(f"TRACE needs entropy for every answer{count} (entropy_source='absent'); use "
                      f"config=SURPRISAL_ONLY_CONFIG (trace_core.methods.risk), the surprisal-only variant reported as "
                      f"'{SIGNALS['surprisal']}'")


def risk_from_arrays(surprisal: Ragged, entropy: Ragged | None, config: TraceConfig) -> np.ndarray:
    """R per trace from stacked arrays; ``entropy`` may be None under a surprisal-only ``config``."""
    if config.needs_entropy:
        if entropy is None:
            raise _missing_entropy(None, None)
        signal = entropy
    else:
        signal = surprisal
    return (config.weight_decay * np.asarray(decayed_mean(signal, lam=config.decay_lam, kernel=config.decay_kernel))
            + config.weight_window * np.asarray(window_max_mean(signal, w=config.window))
            + config.weight_length * np.asarray(length_normalized_sum(surprisal, rho=config.length_rho)))


def trace_risk(traces: Trace | Sequence[Trace], *, config: TraceConfig = PAPER_CONFIG) -> float | np.ndarray:
    """TRACE risk R (higher = riskier) of one trace (float) or many (array of shape (n_traces,)).

    ``R = a * D_lam(x) + b * M_w(x) + c * L_rho(s)`` with the weights, settings and signal ``x`` of ``config``
    (entropy for TRACE, surprisal for :data:`SURPRISAL_ONLY_CONFIG`). An empty trace gives NaN.

    Raises
    ------
    ValueError
        ``config`` reads entropy and a trace has none; pass ``config=SURPRISAL_ONLY_CONFIG`` (or
        :func:`config_for`) and report the result as ``config.variant``.

    Examples
    --------
    >>> from trace_core.traces.trace import TraceMetadata
    >>> t = Trace(prompt="", answer="ab", token_ids=[1, 2], tokens=("a", "b"), surprisal=[0.0, 1.0], entropy=None,
    ...           top_ids=[], top_logprobs=[], metadata=TraceMetadata(entropy_source="absent"))
    >>> round(trace_risk(t, config=SURPRISAL_ONLY_CONFIG), 4)  # 0.4 * D_2 0.4 + 0.4 * M_4 0.5 + 0.2 * 1 / 2**0.25
    0.5282
    """
    config = _check_config(config)
    single = isinstance(traces, Trace)
    batch = [traces] if isinstance(traces, Trace) else as_traces(traces)
    surprisal, entropy = stack_traces(batch)
    if config.needs_entropy and entropy is None:
        raise _missing_entropy(sum(not t.has_entropy for t in batch), len(batch))
    risk = risk_from_arrays(surprisal, entropy, config)
    return float(risk[0]) if single else risk


def trace_confidence(traces: Trace | Sequence[Trace], *, config: TraceConfig = PAPER_CONFIG) -> float | np.ndarray:
    """TRACE confidence ``c = exp(-R)`` in (0, 1]: a ranking score, higher = more likely correct.

    Same ``config`` rules as :func:`trace_risk`.
    """
    risk = trace_risk(traces, config=config)
    return float(np.exp(-risk)) if isinstance(traces, Trace) else np.exp(-risk)


@dataclass(frozen=True, eq=False)
class TraceExplanation:
    """What drives one answer's TRACE risk.

    Attributes
    ----------
    risk, confidence : float
    components : dict
        The three weighted terms of R: ``decay`` (early-token entropy), ``window`` (peak-window entropy) and
        ``length`` (length-normalised surprisal). They sum to ``risk``.
    contributions : ndarray, shape (T,)
        Each token's share of R; sums to ``risk``. Token t contributes ``a * w_t / sum(w) * x_t`` through the decayed
        mean, ``b * x_t / w`` if it lies in the peak window (``b * x_t / T`` for every token when T < w), and
        ``c * s_t / T**rho`` through the length term; ``x`` is entropy H for TRACE, surprisal s for the
        surprisal-only variant.
    peak_window : tuple of int
        ``(start, stop)`` token indices (stop exclusive) of the window with the highest mean ``x``; when several
        windows tie, the earliest (the first maximum).
    spikes : ndarray of int
        Indices (ascending) of the tokens that stand out in this answer, by :func:`spike_indices` on the surprisal:
        surprisal at least :data:`SPIKE_MIN_SURPRISAL` nats (the model gave the token less than ``exp(-1.4)``, about
        25%, probability), at least :data:`SPIKE_MARGIN` above the answer's median surprisal, and among its
        ``max(1, floor(0.1 * T))`` most surprising tokens. May be empty: an answer whose every token was likely has
        no spike. The same rule for TRACE and its surprisal-only variant; a display rule, not part of the score.
    variant : str
        The risk that was explained: ``"TRACE"`` or ``"TRACE (surprisal-only)"`` (:data:`SIGNALS`).
    """

    risk: float
    confidence: float
    components: dict[str, float]
    contributions: np.ndarray
    peak_window: tuple[int, int]
    spikes: np.ndarray
    variant: str = SIGNALS["entropy"]


def spike_indices(values: Any, *, floor: float = SPIKE_MIN_SURPRISAL, margin: float = SPIKE_MARGIN,
                  max_share: float = SPIKE_MAX_SHARE) -> np.ndarray:
    """The tokens that stand out in one answer's per-token signal (surprisal in :func:`explain_trace`).

    Token t is a spike when ``x_t >= floor``, ``x_t >= median(x) + margin`` and t is among the
    ``max(1, floor(max_share * T))`` largest values (ties: the earlier token first).

    Parameters
    ----------
    values : array-like of float, shape (T,)
        The per-token signal, finite.
    floor : float
        The absolute floor, >= 0 (nats for surprisal).
    margin : float
        How far above the answer's median a spike must be, >= 0.
    max_share : float
        The largest share of the tokens that may be spikes, in (0, 1]; at least one token may always be.

    Returns
    -------
    ndarray of int64, shape (n_spikes,)
        Ascending token indices; empty when no token qualifies (or T = 0).

    Examples
    --------
    >>> spike_indices([0.0, 0.05, 2.0]).tolist()  # the last digit had probability exp(-2.0), about 14%
    [2]
    >>> spike_indices([0.0, 0.01, 0.09]).tolist()  # every token likely: nothing stands out
    []
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or not np.isfinite(x).all():
        raise ValueError(f"`values` must be a 1-D array of finite numbers, got shape {x.shape}")
    floor = check_real(floor, "floor", minimum=0)
    margin = check_real(margin, "margin", minimum=0)
    max_share = check_real(max_share, "max_share", minimum=0, maximum=1, low_open=True)
    if x.size == 0:
        return np.zeros(0, dtype=np.int64)
    cap = max(1, int(np.floor(max_share * x.size)))
    top = np.argsort(-x, kind="stable")[:cap]
    bar = max(floor, float(np.median(x)) + margin)
    return np.sort(top[x[top] >= bar]).astype(np.int64)


def explain_trace(trace: Trace, *, config: TraceConfig = PAPER_CONFIG) -> TraceExplanation:
    """Decompose one trace's TRACE risk into per-token contributions, the peak window and spike tokens.

    Spikes come from the surprisal (:func:`spike_indices` with the module's constants), whichever signal the risk
    uses: surprisal is recorded for every trace, and on the demo validation data it located the first wrong token
    better than entropy or the risk contributions did (``python -m bench.localisation``).

    A trace without entropy is explained with the surprisal-only variant of ``config`` (``signal="surprisal"``,
    same weights); the explanation's ``variant`` says which risk it is, so the switch is visible.
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"`trace` must be a Trace, got {type(trace).__name__}")
    config = config_for([trace], _check_config(config))
    n = len(trace)
    if n == 0:
        return TraceExplanation(float("nan"), float("nan"), {"decay": float("nan"), "window": float("nan"),
                                                             "length": float("nan")},
                                np.zeros(0), (0, 0), np.zeros(0, dtype=np.int64), config.variant)
    s = trace.surprisal
    x = trace.entropy if config.needs_entropy else s
    if x is None:  # config_for switches to the surprisal signal for a trace without entropy
        raise _missing_entropy(1, 1)
    w = decay_weights(np.arange(n), lam=config.decay_lam, kernel=config.decay_kernel)
    decay_part = config.weight_decay * w / w.sum() * x
    window_part = np.zeros(n)
    if n < config.window:
        start, stop = 0, n
        window_part[:] = config.weight_window * x / n
    else:
        means, valid = window_means(x, w=config.window)
        end = int(np.argmax(np.where(valid, means, -np.inf)))  # first of equal maxima: earliest window
        start, stop = end - config.window + 1, end + 1
        window_part[start:stop] = config.weight_window * x[start:stop] / config.window
    length_part = config.weight_length * s / n ** config.length_rho
    contributions = decay_part + window_part + length_part
    components = {"decay": float(decay_part.sum()), "window": float(window_part.sum()),
                  "length": float(length_part.sum())}
    risk = float(sum(components.values()))
    spikes = spike_indices(s)
    return TraceExplanation(risk, float(np.exp(-risk)), components, contributions, (start, stop), spikes,
                            config.variant)
