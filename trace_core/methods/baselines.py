"""The 20 scalar baseline confidence scores TRACE is compared with, described once in :data:`BASELINES` (three more,
fitted on each calibration part, are in :mod:`trace_core.methods.fitted_baselines`).

Every baseline returns a *confidence*: higher = the answer is more likely correct. Each :class:`Baseline` entry carries
its name, family, what it needs, its formula, the transform its scalar calibrator is fitted on and the function that
scores it; the table below is documentation of that registry (a test checks that it lists exactly the registry's
names, families, needs, transforms and formulas). With ``p_t = exp(-s_t)`` the probability of the chosen token t and
``H_t`` its step's entropy:

====================  ==========  =========  =======  =============  ================================================
name                  family      needs      needs H  calibrated on  confidence
====================  ==========  =========  =======  =============  ================================================
First-Token Prob      likelihood  trace      no       logit          ``p_1``
MeanProb              likelihood  trace      no       logit          ``mean_t p_t``
Len-Norm LogP         likelihood  trace      no       log            ``exp(mean_t log p_t)``: geometric-mean p_t
SeqLogP               likelihood  trace      no       log            ``exp(sum_t log p_t)``: sequence probability
MinProb               likelihood  trace      no       logit          ``min_t p_t``
High-Prob Token Rate  likelihood  trace      no       identity       ``mean_t [p_t > 0.9]``: share of p_t above 0.9
Mean Entropy          entropy     trace      yes      identity       ``-mean_t H_t``
Max Entropy           entropy     trace      yes      identity       ``-max_t H_t``
First-k Entropy       entropy     trace      yes      identity       ``-mean H[:3]`` (all tokens when T < 3)
Last-k Entropy        entropy     trace      yes      identity       ``-mean H[-3:]``
Windowed Entropy      trajectory  trace      yes      identity       ``-M_4(H)``: minus the top 4-token mean of H
Entropy Variance      trajectory  trace      yes      identity       ``-var_t H_t`` (population variance)
Entropy Slope         trajectory  trace      yes      identity       ``-slope(H)`` (least squares over t; 0 if T < 2)
Prob Slope            trajectory  trace      no       identity       ``slope(p)``: least-squares slope of p over t
Beam-Ratio            beam        beam       no       logit          ``q_1 / (q_1 + q_2)``
Beam-TailThinness     beam        beam       no       logit          ``1 - sum_{i>=2} q_i`` (= q_1)
Beam Entropy          beam        beam       no       identity       ``sum_i q_i log q_i``: the beam entropy, negated
EPR                   top-k       top_k      no       identity       ``-mean_t sum_{k<=K} -q_{t,k} log q_{t,k}``
TokenSAR              semantic    embedding  no       log            ``exp(-sum_t r_t s_t)``, r: normalised relevance
MARS-style            semantic    embedding  no       log            ``exp(-sum_t (0.5 / T + 0.5 r_t) s_t)``
====================  ==========  =========  =======  =============  ================================================

**needs H**: the baseline needs the token entropy (:attr:`Baseline.needs_entropy`). On data that hold only the chosen
tokens' log-probabilities (``entropy_source == "absent"``) these are skipped with :data:`NO_ENTROPY_REASON` and the
others run.

**Calibrated on** is the monotone transform (:func:`trace_core.calibration.calibrators.transform_scores`) a scalar
calibrator (Platt) is fitted on, so that no baseline is handicapped by an ill-conditioned score; rankings (AUROC, AUPRC,
AURC, PRR) use the raw score. The rule, with each entry's one-line reason in its ``transform_reason``:

* ``log`` for ``exp(-(a sum or weighted mean of surprisals))``: these crowd against 0 over many orders of magnitude
  (``exp(sum log p)`` of a 100-token answer), and their log is the surprisal statistic itself.
* ``logit`` for a single probability, or a mean of probabilities, in [0, 1]: it crowds against 0 for unsure answers
  and against 1 for sure ones (a multiple-choice letter at p = 0.999); the logit equals the log near 0, spreads the
  scores near 1, and Platt on it is temperature scaling. For the beam ratios the logit is the log-probability gap
  between the top beam and the next beam / all the others.
* ``identity`` for scores already on a log or linear scale: negated entropies (nats), rates, variances, slopes.

EPR (entropy production rate, arXiv 2509.04492) reads the K most likely alternatives stored at each step, with
probabilities ``q_{t,k}`` (not renormalised; K the fewest any answer stores, at least 2; see
:mod:`trace_core.methods.fitted_baselines`). Beam baselines use ``q_i``, the beam sequence probabilities of one extra
beam-search call on the same prompt, normalised over the returned beams (sorted, most likely first). They describe
the prompt's answer distribution, not the decoded answer itself. Semantic baselines weight tokens by their relevance
to the answer's meaning, measured with a sentence-embedding model (see :mod:`trace_core.methods.semantic`). A baseline
whose input is missing is skipped with a stated reason, never silently.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from trace_core.methods.fitted_baselines import TOP_K_NEEDS, TopK, epr_confidence, stack_top_logprobs
from trace_core.methods.operators import (
    first_k_mean,
    last_k_mean,
    segment_max,
    segment_mean,
    segment_var,
    slope,
    window_max_mean,
)
from trace_core.methods.risk import stack_traces
from trace_core.methods.semantic import mars_confidence, token_relevance_batch, tokensar_confidence
from trace_core.traces.ragged import Ragged, check_paired, float64
from trace_core.traces.table import as_traces
from trace_core.traces.trace import LOGPROB_TOLERANCE, Trace

__all__ = ["BASELINES", "Baseline", "BaselineScores", "FIRST_K", "HIGH_PROB_THRESHOLD", "LAST_K", "NEEDS",
           "NO_ENTROPY_REASON", "WINDOW", "TraceBatch", "baseline_scores", "beam_scores", "compute_baselines",
           "trace_baseline_scores"]

FIRST_K = 3
LAST_K = 3
HIGH_PROB_THRESHOLD = 0.9
WINDOW = 4

#: What a baseline needs beyond the decoded answer's trace, and why it is skipped without it.
NEEDS: dict[str, str] = {
    "trace": "the answer's trace (surprisal per token; entropy too for the baselines with needs_entropy)",
    "beam": "a beam-search call on the same prompt (beam log-probabilities)",
    "embedding": "the answers' token texts and a sentence-embedding model",
    "top_k": TOP_K_NEEDS,
}

#: Why a baseline with ``needs_entropy`` is skipped on data without entropy (``entropy_source == "absent"``).
NO_ENTROPY_REASON = "needs token entropy; the data hold only the chosen tokens' log-probabilities"


@dataclass(frozen=True, eq=False)
class TraceBatch:
    """What the trace-only baselines read: surprisal, entropy and token probabilities of a batch of answers.

    Attributes
    ----------
    surprisal : Ragged
        Per-token surprisal of every answer.
    entropy : Ragged or None
        Per-token entropy (same offsets), or None when the data hold only the chosen tokens' log-probabilities; the
        baselines with ``needs_entropy`` do not run then.
    probs : Ragged
        ``p_t = exp(-s_t)``, computed once for all the baselines that use it.
    """

    surprisal: Ragged
    entropy: Ragged | None
    probs: Ragged

    @classmethod
    def from_arrays(cls, surprisal: Ragged, entropy: Ragged | None) -> TraceBatch:
        if entropy is None:
            empty = np.flatnonzero(surprisal.lengths == 0)
            if empty.size:
                raise ValueError(f"trace {int(empty[0])} is empty; baselines need at least one token")
        else:
            check_paired(surprisal, entropy, who="baselines need")
        return cls(surprisal, entropy, surprisal.with_values(np.exp(-surprisal.values)))

    @property
    def given_entropy(self) -> Ragged:
        """``entropy``, for a baseline with ``needs_entropy`` (skipped on data without it, so never None there)."""
        if self.entropy is None:
            raise ValueError(NO_ENTROPY_REASON)
        return self.entropy


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
        A key of :data:`NEEDS`: ``trace``, ``beam``, ``embedding`` or ``top_k``.
    formula : str
        The confidence, as the module table writes it.
    score : callable
        By ``needs``: ``trace``: ``score(batch: TraceBatch) -> ndarray (n_answers,)``; ``beam``:
        ``score(q) -> float`` for one answer's normalised beam probabilities ``q`` (most likely first);
        ``embedding``: ``score(surprisal, relevance) -> float`` for one answer; ``top_k``:
        ``score(surprisal: Ragged, top: TopK) -> ndarray (n_answers,)``.
    transform : str, default "identity"
        The monotone transform a scalar calibrator is fitted on (a key of
        :data:`trace_core.calibration.calibrators.SCORE_TRANSFORMS`; the rule is in the module docstring); rankings use
        the raw score.
    transform_reason : str
        One line: why this transform (shown in the docs and tooltips).
    needs_entropy : bool, default False
        Reads the per-token entropy H: skipped with :data:`NO_ENTROPY_REASON` on data without entropy.
    """

    name: str
    family: str
    needs: str
    formula: str
    score: Callable[..., Any] = field(repr=False, compare=False)
    transform: str = "identity"
    transform_reason: str = ""
    needs_entropy: bool = False


def _beam_negentropy(q: np.ndarray) -> float:
    nz = q[q > 0]
    return float((nz * np.log(nz)).sum())


def _first_token(b: TraceBatch) -> np.ndarray:
    return b.probs.values[b.surprisal.offsets[:-1]]


def _high_prob_rate(b: TraceBatch) -> np.ndarray:
    return np.asarray(segment_mean(b.probs.with_values((b.probs.values > HIGH_PROB_THRESHOLD).astype(np.float64))))


# One-line reasons for the calibration transforms (the rule is in the module docstring).
_SURPRISAL_SUM = "exp(-(a sum of surprisals)) crowds against 0 over many orders of magnitude; its log is that sum"
_ONE_PROB = "one token's probability crowds against 0 (unsure) and 1 (sure); the logit spreads both ends"
_ENTROPY = "a negated entropy in nats: already on a log scale"
_SHAPE = "a signed shape statistic (slope or variance), not a probability"


def _likelihood(name: str, formula: str, score: Callable[[TraceBatch], np.ndarray], transform: str,
                reason: str) -> Baseline:
    return Baseline(name, "likelihood", "trace", formula, score, transform, reason)


def _entropy(name: str, family: str, formula: str, score: Callable[[TraceBatch], np.ndarray],
             reason: str = _ENTROPY) -> Baseline:
    return Baseline(name, family, "trace", formula, score, "identity", reason, needs_entropy=True)


_LIST = [
    _likelihood("First-Token Prob", "p_1", _first_token, "logit", _ONE_PROB),
    _likelihood("MeanProb", "mean_t p_t", lambda b: np.asarray(segment_mean(b.probs)), "logit",
                "a mean of probabilities crowds against 1 for confident answers: the logit spreads it"),
    _likelihood("Len-Norm LogP", "exp(mean_t log p_t)", lambda b: np.exp(-np.asarray(segment_mean(b.surprisal))),
                "log", "its log is minus the mean surprisal, linear in the token surprisals"),
    _likelihood("SeqLogP", "exp(sum_t log p_t)",
                lambda b: np.exp(-np.asarray(segment_mean(b.surprisal)) * b.surprisal.lengths), "log", _SURPRISAL_SUM),
    _likelihood("MinProb", "min_t p_t", lambda b: np.exp(-np.asarray(segment_max(b.surprisal))), "logit",
                "one token's probability: tiny in long answers (logit = log = minus the largest surprisal), "
                "near 1 in sure short ones"),
    _likelihood("High-Prob Token Rate", f"mean_t [p_t > {HIGH_PROB_THRESHOLD}]", _high_prob_rate, "identity",
                "a share of tokens with many exact 0s and 1s: the logit would put them far apart"),
    _entropy("Mean Entropy", "entropy", "-mean_t H_t", lambda b: -np.asarray(segment_mean(b.given_entropy))),
    _entropy("Max Entropy", "entropy", "-max_t H_t", lambda b: -np.asarray(segment_max(b.given_entropy))),
    _entropy("First-k Entropy", "entropy", f"-mean H[:{FIRST_K}]",
             lambda b: -np.asarray(first_k_mean(b.given_entropy, k=FIRST_K))),
    _entropy("Last-k Entropy", "entropy", f"-mean H[-{LAST_K}:]",
             lambda b: -np.asarray(last_k_mean(b.given_entropy, k=LAST_K))),
    _entropy("Windowed Entropy", "trajectory", f"-M_{WINDOW}(H)",
             lambda b: -np.asarray(window_max_mean(b.given_entropy, w=WINDOW))),
    _entropy("Entropy Variance", "trajectory", "-var_t H_t", lambda b: -np.asarray(segment_var(b.given_entropy)),
             _SHAPE),
    _entropy("Entropy Slope", "trajectory", "-slope(H)", lambda b: -np.asarray(slope(b.given_entropy)), _SHAPE),
    Baseline("Prob Slope", "trajectory", "trace", "slope(p)", lambda b: np.asarray(slope(b.probs)), "identity", _SHAPE),
    Baseline("Beam-Ratio", "beam", "beam", "q_1 / (q_1 + q_2)", lambda q: q[0] / (q[0] + q[1]), "logit",
             "in [1/2, 1], crowding against 1 when the top beam dominates; its logit is log q_1 - log q_2"),
    Baseline("Beam-TailThinness", "beam", "beam", "1 - sum_{i>=2} q_i", lambda q: 1.0 - q[1:].sum(), "logit",
             "q_1 crowds against 1 when the top beam dominates; its logit is log q_1 - log(sum of the others)"),
    Baseline("Beam Entropy", "beam", "beam", "sum_i q_i log q_i", _beam_negentropy, "identity", _ENTROPY),
    Baseline("EPR", "top-k", "top_k", "-mean_t sum_{k<=K} -q_{t,k} log q_{t,k}", epr_confidence, "identity",
             "minus a mean of entropy contributions in nats: already on a log scale"),
    Baseline("TokenSAR", "semantic", "embedding", "exp(-sum_t r_t s_t)", tokensar_confidence, "log",
             "exp(-(a relevance-weighted mean of surprisals)): its log is that mean"),
    Baseline("MARS-style", "semantic", "embedding", "exp(-sum_t (0.5 / T + 0.5 r_t) s_t)", mars_confidence, "log",
             "exp(-(a relevance-weighted mean of surprisals)): its log is that mean"),
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


def _entropy_free(names: Sequence[str], entropy: Ragged | None) -> tuple[list[str], list[str]]:
    """``names`` split into those that can run and those that need the entropy the data lack."""
    if entropy is not None:
        return list(names), []
    return ([n for n in names if not BASELINES[n].needs_entropy], [n for n in names if BASELINES[n].needs_entropy])


def trace_baseline_scores(surprisal: Ragged, entropy: Ragged | None, *,
                          names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """The trace-only baselines (all 14, or those of ``names``) for a batch, vectorised.

    Parameters
    ----------
    surprisal : Ragged
    entropy : Ragged or None
        Same offsets as ``surprisal``; None when the data hold only the chosen tokens' log-probabilities: the
        baselines with ``needs_entropy`` are then left out (:func:`baseline_scores` reports them as skipped).
    names : sequence of str, optional

    Returns
    -------
    dict
        Baseline name -> confidences, shape (n_traces,), in registry order.
    """
    batch = TraceBatch.from_arrays(float64(surprisal), None if entropy is None else float64(entropy))
    runnable, _ = _entropy_free(_names(names, "trace"), entropy)
    return {n: BASELINES[n].score(batch) for n in runnable}


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
                      names: Sequence[str] | None = None,
                      relevance: Sequence[np.ndarray] | None = None) -> BaselineScores:
    """Compute every baseline whose inputs are available.

    Parameters
    ----------
    traces : sequence of Trace, length n_answers
    beam_logprobs : sequence of sequences of float, optional
        Beam log-probabilities per answer (see :func:`beam_scores`); without them the beam baselines are skipped.
        Traces without entropy (``entropy_source == "absent"``): the baselines with ``needs_entropy`` are skipped with
        :data:`NO_ENTROPY_REASON` (for all answers if any trace lacks it) and the others run.
    embedder : trace_core.methods.semantic.Embedder, optional
        Sentence-embedding model; without it TokenSAR and MARS-style are skipped.
    contexts : sequence of str, optional
        Text put before each answer when measuring token relevance (e.g. the prompt).
    names : sequence of str, optional
        Restrict to these baselines (display names); default all.
    relevance : sequence of arrays, optional
        Each answer's token relevances, already computed (:func:`trace_core.methods.semantic.token_relevance_batch`,
        e.g. with a progress bar): the semantic baselines use them instead of an ``embedder``.
    """
    traces = as_traces(traces)
    surprisal, entropy = stack_traces(traces)
    return baseline_scores(surprisal, entropy, names=names, traces=traces, beam_logprobs=beam_logprobs,
                           embedder=embedder, contexts=contexts, relevance=relevance)


def baseline_scores(surprisal: Ragged, entropy: Ragged | None, *, names: Sequence[str] | None = None,
                    traces: Sequence[Trace] | None = None, beam_logprobs: Sequence[Sequence[float]] | None = None,
                    embedder: Any = None, contexts: Sequence[str] | None = None,
                    top_k: TopK | None = None, relevance: Sequence[np.ndarray] | None = None,
                    top_k_reason: str = "") -> BaselineScores:
    """:func:`compute_baselines` from surprisal and entropy batches; the semantic baselines also need ``traces``
    (their token texts), EPR their top-k log-probabilities (``top_k``, else stacked from ``traces``; with
    ``top_k`` None and ``top_k_reason`` given, EPR is skipped with that reason: the caller's plan for a whole these
    answers are part of, :class:`~trace_core.methods.fitted_baselines.TopKPlan`).
    ``entropy=None`` (only the chosen tokens' log-probabilities): the baselines with ``needs_entropy`` are skipped
    with :data:`NO_ENTROPY_REASON`."""
    wanted = _names(names)
    wanted, no_entropy = _entropy_free(wanted, entropy)
    skipped: dict[str, str] = {n: NO_ENTROPY_REASON for n in no_entropy}
    columns: dict[str, np.ndarray] = trace_baseline_scores(surprisal, entropy, names=_names(wanted, "trace"))
    beam_wanted = _names(wanted, "beam")
    if beam_wanted:
        if beam_logprobs is None:
            skipped.update({n: f"needs {NEEDS['beam']}" for n in beam_wanted})
        else:
            if len(beam_logprobs) != len(surprisal):
                raise ValueError(f"got {len(beam_logprobs)} beam rows for {len(surprisal)} answers")
            columns.update(beam_scores(beam_logprobs, names=beam_wanted))
    top_wanted = _names(wanted, "top_k")
    if top_wanted:
        top, reason = (top_k, top_k_reason) if top_k is not None or top_k_reason else (
            stack_top_logprobs(traces) if traces is not None else (None, f"needs {NEEDS['top_k']}"))
        if top is None:
            skipped.update({n: reason for n in top_wanted})
        else:
            columns.update({n: BASELINES[n].score(surprisal, top) for n in top_wanted})
    semantic_wanted = _names(wanted, "embedding")
    if semantic_wanted and relevance is not None:
        if traces is None or len(relevance) != len(traces):
            raise ValueError(f"got {len(relevance)} token relevance rows for {len(surprisal)} answers")
        for i, (t, r) in enumerate(zip(traces, relevance, strict=True)):
            if np.shape(r) != (len(t),):
                raise ValueError(f"answer {i}: {np.shape(r)[0] if np.ndim(r) else 0} token relevances for "
                                 f"{len(t)} tokens")
        for n in semantic_wanted:
            columns[n] = np.array([BASELINES[n].score(t.surprisal, np.asarray(r, dtype=np.float64))
                                   for t, r in zip(traces, relevance, strict=True)])
    elif semantic_wanted:
        if embedder is None or traces is None:
            reason = ('needs a sentence-embedding model (`embedder`; install it with pip install -e ".[semantic]")'
                      if traces is not None
                      else f"needs {NEEDS['embedding']}")
            skipped.update({n: reason for n in semantic_wanted})
        else:
            relevance = token_relevance_batch(embedder, [t.tokens for t in traces], contexts=contexts)
            for n in semantic_wanted:
                columns[n] = np.array([BASELINES[n].score(t.surprisal, r)
                                       for t, r in zip(traces, relevance, strict=True)])
    ordered = {n: columns[n] for n in BASELINES if n in columns}
    return BaselineScores(pd.DataFrame(ordered), {n: skipped[n] for n in BASELINES if n in skipped})
