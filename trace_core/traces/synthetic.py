"""Synthetic traces with a known ground truth, for tests and benchmarks.

Correct and wrong answers share the same per-token noise; what differs is set by ``kind``:

``spike``
    A wrong answer has one local burst: ``spike_width`` consecutive tokens with high entropy and surprisal, at a random
    position. Averages dilute the burst on long answers, so a local operator (TRACE's ``M_4``) should beat the mean.
``diffuse``
    A wrong answer has slightly raised entropy and surprisal on every token and no burst, so the plain mean is the
    right statistic and should beat TRACE.
``length``
    The probability of being wrong grows with the answer's length; tokens carry no signal.
``surprisal_spike``
    Chosen-token log-probabilities only (entropy is None), shaped like saved chain-of-thought runs: confident chains
    (lengths uniform in ``[0.55, 1.45] * mean_length``) where 50-60% of the token probabilities are exactly 1.0 and
    the first token always is (so First-Token Prob is constant: an uninformative score). A wrong answer has a local
    spike of ``spike_width`` consecutive tokens of high surprisal; surprisal-only TRACE should beat mean surprisal.
``likelihood``
    The log-odds of being correct are linear in the mean surprisal and ``log T`` only (entropy follows surprisal), so
    the supervised likelihood reference (a logistic regression on those summaries) should tie TRACE+.

Everything is vectorised: 1,000,000 traces take a few seconds.
"""

from __future__ import annotations

import numpy as np

from trace_core.checks import check_choice, check_int, check_real
from trace_core.traces.ragged import Ragged

__all__ = ["KINDS", "synthetic_traces"]

KINDS = ("spike", "diffuse", "length", "surprisal_spike", "likelihood")  # see the module docstring


def synthetic_traces(n: int, *, kind: str = "spike", mean_length: float = 64.0, error_rate: float = 0.4,
                     spike_width: int = 3, seed: int = 0) -> tuple[Ragged, Ragged | None, np.ndarray]:
    """Generate ``n`` traces and 0/1 correctness labels.

    Parameters
    ----------
    n : int
        Number of traces, >= 1.
    kind : {"spike", "diffuse", "length", "surprisal_spike", "likelihood"}
        How wrong answers differ (see the module docstring).
    mean_length : float
        Mean answer length in tokens, > 4 (lengths are 4 + a geometric variable, so at least 4).
    error_rate : float
        Share of wrong answers, in [0, 1] (for ``length``, the average share, in (0, 1)).
    spike_width : int
        Tokens in a ``spike`` burst, >= 1.
    seed : int
        Seed of ``numpy.random.default_rng``, >= 0.

    Returns
    -------
    surprisal, entropy : Ragged
        Batches with the same offsets; entropy is None for ``surprisal_spike`` (chosen-token log-probabilities only).
    labels : ndarray of int64, shape (n,)
        1 = correct.
    """
    n = check_int(n, "n", minimum=1)
    kind = check_choice(kind, "kind", KINDS)
    mean_length = check_real(mean_length, "mean_length", minimum=4, low_open=True)
    # The "length" kind takes the log-odds of the error rate, so 0 and 1 are excluded there.
    error_rate = check_real(error_rate, "error_rate", minimum=0, maximum=1, low_open=kind == "length",
                            high_open=kind == "length")
    spike_width = check_int(spike_width, "spike_width", minimum=1)
    seed = check_int(seed, "seed", minimum=0)
    rng = np.random.default_rng(seed)
    if kind == "surprisal_spike":
        return _surprisal_spike(n, rng, mean_length=mean_length, error_rate=error_rate, spike_width=spike_width)
    lengths = 4 + rng.geometric(1.0 / (mean_length - 3), size=n) - 1
    if kind == "length":
        z = (lengths - lengths.mean()) / max(lengths.std(), 1e-9)
        logit = np.log(error_rate / (1 - error_rate)) + 1.5 * z
        wrong = rng.random(n) < 1 / (1 + np.exp(-logit))
    else:
        wrong = rng.random(n) < error_rate
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    total = int(offsets[-1])
    seg = np.repeat(np.arange(n), lengths)
    # Per-answer level (some answers are globally less certain, right or wrong) plus per-token noise.
    level = rng.gamma(2.0, 0.25, size=n)[seg]
    entropy = level + rng.gamma(1.5, 0.3, size=total)
    surprisal = 0.5 * level + rng.exponential(0.25, size=total)
    if kind == "spike":
        width = np.minimum(spike_width, lengths)
        start = (rng.random(n) * (lengths - width + 1)).astype(np.int64)
        pos = np.arange(total) - offsets[:-1][seg]
        in_spike = wrong[seg] & (pos >= start[seg]) & (pos < start[seg] + width[seg])
        entropy = entropy + in_spike * rng.uniform(1.5, 3.0, size=total)
        surprisal = surprisal + in_spike * rng.uniform(1.0, 3.0, size=total)
    elif kind == "diffuse":
        entropy = entropy + wrong[seg] * 0.3
        surprisal = surprisal + wrong[seg] * 0.15
    elif kind == "likelihood":
        # Labels from the answer's own mean surprisal and length only, centred so the error rate is about right.
        mean_s = np.bincount(seg, weights=surprisal, minlength=n) / lengths
        z_s = (mean_s - mean_s.mean()) / max(mean_s.std(), 1e-9)
        z_t = (np.log(lengths) - np.log(lengths).mean()) / max(np.log(lengths).std(), 1e-9)
        logit = np.log((1 - error_rate + 1e-9) / (error_rate + 1e-9)) - 1.5 * z_s - 0.8 * z_t
        wrong = rng.random(n) >= 1 / (1 + np.exp(-logit))
        entropy = 1.5 * surprisal + rng.gamma(1.5, 0.1, size=total)
    return Ragged(surprisal, offsets), Ragged(entropy, offsets), (~wrong).astype(np.int64)


def _surprisal_spike(n: int, rng: np.random.Generator, *, mean_length: float, error_rate: float,
                     spike_width: int) -> tuple[Ragged, None, np.ndarray]:
    lo, hi = max(2, int(round(0.55 * mean_length))), max(3, int(round(1.45 * mean_length)))
    lengths = rng.integers(lo, hi + 1, size=n)
    wrong = rng.random(n) < error_rate
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    total = int(offsets[-1])
    seg = np.repeat(np.arange(n), lengths)
    pos = np.arange(total) - offsets[:-1][seg]
    certain_share = rng.uniform(0.5, 0.6, size=n)[seg]  # tokens with probability exactly 1.0
    level = rng.gamma(2.0, 0.12, size=n)[seg]  # some chains are globally less sure, right or wrong
    surprisal = np.where(rng.random(total) < certain_share, 0.0, rng.exponential(1.0, size=total) * level)
    surprisal[pos == 0] = 0.0  # the first token ("Step") is always certain
    width = np.minimum(spike_width, lengths - 1)
    start = 1 + (rng.random(n) * (lengths - width)).astype(np.int64)
    in_spike = wrong[seg] & (pos >= start[seg]) & (pos < start[seg] + width[seg])
    surprisal = np.where(in_spike, rng.uniform(1.0, 3.0, size=total), surprisal)
    return Ragged(surprisal, offsets), None, (~wrong).astype(np.int64)
