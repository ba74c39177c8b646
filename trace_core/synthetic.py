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

Everything is vectorised: 1,000,000 traces take a few seconds.
"""

from __future__ import annotations

import numpy as np

from ._checks import check_choice, check_int, check_real
from .operators import Ragged

__all__ = ["KINDS", "synthetic_traces"]

KINDS = ("spike", "diffuse", "length")  # how wrong answers differ (see the module docstring)


def synthetic_traces(n: int, *, kind: str = "spike", mean_length: float = 64.0, error_rate: float = 0.4,
                     spike_width: int = 3, seed: int = 0) -> tuple[Ragged, Ragged, np.ndarray]:
    """Generate ``n`` traces and 0/1 correctness labels.

    Parameters
    ----------
    n : int
        Number of traces, >= 1.
    kind : {"spike", "diffuse", "length"}
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
        Batches with the same offsets.
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
    return Ragged(surprisal, offsets), Ragged(entropy, offsets), (~wrong).astype(np.int64)
