"""TRACE risk and confidence, and which tokens drive the risk.

``R = 0.40 * D_2(H) + 0.40 * M_4(H) + 0.20 * L_{1/4}(s)`` and ``c = exp(-R)``: the paper's fixed configuration, used for
every task and model. ``c`` ranks answers (higher = more likely correct); it is not a probability until calibrated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ._checks import check_choice, check_int, check_real, set_checked
from .operators import (
    KERNELS,
    Ragged,
    decay_weights,
    decayed_mean,
    length_normalized_sum,
    window_max_mean,
    window_means,
)
from .trace import Trace

__all__ = ["TraceConfig", "TraceExplanation", "trace_risk", "trace_confidence", "explain_trace", "stack_traces"]


@dataclass(frozen=True)
class TraceConfig:
    """Weights and operator settings of the TRACE risk (defaults: the paper's fixed configuration).

    ``R = weight_decay * D_decay_lam(H) + weight_window * M_window(H) + weight_length * L_length_rho(s)``, with the
    decayed mean's kernel ``decay_kernel`` (one of :data:`trace_core.operators.KERNELS`). Weights are reals >= 0,
    ``decay_lam`` > 0, ``window`` an int >= 1; a wrong type raises TypeError, a value out of range ValueError.
    """

    weight_decay: float = 0.40
    weight_window: float = 0.40
    weight_length: float = 0.20
    decay_lam: float = 2.0
    decay_kernel: str = "harmonic"
    window: int = 4
    length_rho: float = 0.25

    def __post_init__(self) -> None:
        checked = {name: check_real(getattr(self, name), name, minimum=0)
                   for name in ("weight_decay", "weight_window", "weight_length")}
        checked["window"] = check_int(self.window, "window", minimum=1)
        checked["decay_lam"] = check_real(self.decay_lam, "decay_lam", minimum=0, low_open=True)
        checked["decay_kernel"] = check_choice(self.decay_kernel, "decay_kernel", KERNELS)
        checked["length_rho"] = check_real(self.length_rho, "length_rho")
        set_checked(self, checked)


PAPER_CONFIG = TraceConfig()


def stack_traces(traces: Sequence[Trace]) -> tuple[Ragged, Ragged]:
    """Surprisal and entropy of many traces as two :class:`Ragged` batches with the same offsets."""
    if isinstance(traces, Trace):
        raise TypeError("`traces` must be a sequence of Trace objects; wrap a single trace in a list")
    surprisal = Ragged.from_arrays([t.surprisal for t in traces])
    entropy = surprisal.with_values(np.concatenate([t.entropy for t in traces]) if len(traces) else np.zeros(0))
    return surprisal, entropy


def _risk_from_arrays(surprisal: Ragged, entropy: Ragged, config: TraceConfig) -> np.ndarray:
    return (config.weight_decay * np.asarray(decayed_mean(entropy, lam=config.decay_lam, kernel=config.decay_kernel))
            + config.weight_window * np.asarray(window_max_mean(entropy, w=config.window))
            + config.weight_length * np.asarray(length_normalized_sum(surprisal, rho=config.length_rho)))


def trace_risk(traces: Trace | Sequence[Trace], *, config: TraceConfig = PAPER_CONFIG) -> float | np.ndarray:
    """TRACE risk R (higher = riskier) of one trace (float) or many (array of shape (n_traces,)).

    ``R = a * D_lam(H) + b * M_w(H) + c * L_rho(s)`` with the weights and settings of ``config``.
    An empty trace gives NaN.
    """
    single = isinstance(traces, Trace)
    surprisal, entropy = stack_traces([traces] if single else traces)
    risk = _risk_from_arrays(surprisal, entropy, config)
    return float(risk[0]) if single else risk


def trace_confidence(traces: Trace | Sequence[Trace], *, config: TraceConfig = PAPER_CONFIG) -> float | np.ndarray:
    """TRACE confidence ``c = exp(-R)`` in (0, 1]: a ranking score, higher = more likely correct."""
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
        Each token's share of R; sums to ``risk``. Token t contributes ``a * w_t / sum(w) * H_t`` through the decayed
        mean, ``b * H_t / w`` if it lies in the peak window (``b * H_t / T`` for every token when T < w), and
        ``c * s_t / T**rho`` through the length term.
    peak_window : tuple of int
        ``(start, stop)`` token indices (stop exclusive) of the window with the highest mean entropy; when several
        windows tie, the earliest (the first maximum).
    spikes : ndarray of int
        Indices of spike tokens: contribution above ``mean + 2 * std`` of the contributions (at most the top 10%,
        at least the single largest contributor when T >= 1). A display rule, not part of the score.
    """

    risk: float
    confidence: float
    components: dict[str, float]
    contributions: np.ndarray
    peak_window: tuple[int, int]
    spikes: np.ndarray


def explain_trace(trace: Trace, *, config: TraceConfig = PAPER_CONFIG) -> TraceExplanation:
    """Decompose one trace's TRACE risk into per-token contributions, the peak window and spike tokens."""
    if not isinstance(trace, Trace):
        raise TypeError(f"`trace` must be a Trace, got {type(trace).__name__}")
    n = len(trace)
    if n == 0:
        return TraceExplanation(float("nan"), float("nan"), {"decay": float("nan"), "window": float("nan"),
                                                             "length": float("nan")},
                                np.zeros(0), (0, 0), np.zeros(0, dtype=np.int64))
    H, s = trace.entropy, trace.surprisal
    w = decay_weights(np.arange(n), lam=config.decay_lam, kernel=config.decay_kernel)
    decay_part = config.weight_decay * w / w.sum() * H
    window_part = np.zeros(n)
    if n < config.window:
        start, stop = 0, n
        window_part[:] = config.weight_window * H / n
    else:
        means, valid = window_means(H, w=config.window)
        end = int(np.argmax(np.where(valid, means, -np.inf)))  # first of equal maxima: earliest window
        start, stop = end - config.window + 1, end + 1
        window_part[start:stop] = config.weight_window * H[start:stop] / config.window
    length_part = config.weight_length * s / n ** config.length_rho
    contributions = decay_part + window_part + length_part
    components = {"decay": float(decay_part.sum()), "window": float(window_part.sum()),
                  "length": float(length_part.sum())}
    risk = float(sum(components.values()))
    threshold = contributions.mean() + 2 * contributions.std()
    order = np.argsort(-contributions, kind="stable")
    max_spikes = max(1, int(np.floor(0.1 * n)))
    top = order[:max_spikes]
    spikes = top[contributions[top] > threshold]
    spikes = np.sort(spikes if spikes.size else order[:1]).astype(np.int64)
    return TraceExplanation(risk, float(np.exp(-risk)), components, contributions, (start, stop), spikes)
