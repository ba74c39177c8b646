"""What the split loop takes: every method's per-answer score (TRACE, the scalar baselines) or feature matrix (TRACE+,
the fitted baselines, the supervised reference) on a set of answers, the methods that run and those skipped with the
reason. :mod:`trace_core.evaluation.chunked` computes the same chunk by chunk; :mod:`trace_core.evaluation.run` hands
it to the split loop."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from trace_core.checks import AnswerValueError
from trace_core.evaluation.protocol import feature_set, workers_for
from trace_core.methods.baselines import NO_ENTROPY_REASON, baseline_scores
from trace_core.methods.features import feature_matrix_from_arrays, logit_of_surprisal
from trace_core.methods.fitted_baselines import TOP_K_NEEDS, TopK, TopKPlan, stack_top_logprobs
from trace_core.methods.operators import segment_max, segment_mean
from trace_core.methods.registry import METHODS, method_names
from trace_core.methods.risk import PAPER_CONFIG, SURPRISAL_ONLY_CONFIG, risk_from_arrays
from trace_core.traces.ragged import Ragged, check_paired
from trace_core.traces.trace import Trace

__all__ = ["ProtocolInputs", "check_finite_scores", "check_nonempty", "protocol_inputs", "reference_features"]


@dataclass
class ProtocolInputs:
    """What the split loop takes (:func:`trace_core.evaluation.protocol.run_splits`): each method's scalar score (TRACE,
    the scalar baselines) or feature matrix (TRACE+, the fitted baselines, the reference), the methods that run, in
    order, and those skipped with the reason."""

    scalar: dict[str, np.ndarray]
    features: dict[str, np.ndarray]
    wanted: list[str]
    skipped: dict[str, str]


def protocol_inputs(surprisal: Ragged, entropy: Ragged | None, *, methods: Sequence[str] | None = None,
                    traces: Sequence[Trace] | None = None, beam_logprobs: Sequence[Sequence[float]] | None = None,
                    embedder: Any = None, contexts: Sequence[str] | None = None,
                    relevance: Sequence[np.ndarray] | None = None, top_k: TopKPlan | None = None) -> ProtocolInputs:
    """Every method's score or features on these answers, as :func:`evaluate` computes them before its splits
    (arguments as there; ``entropy`` None: the surprisal-only variants; ``top_k``: the top-k plan of a whole these
    answers are part of, which they follow, :class:`~trace_core.methods.fitted_baselines.TopKPlan`)."""
    wanted, skipped = _wanted(methods, has_entropy=entropy is not None)
    if entropy is not None:
        check_paired(surprisal, entropy, who="every method needs")
        entropy = surprisal.with_values(entropy.values)  # one set of index arrays for both
    else:
        check_nonempty(surprisal)
    top, top_reason = None, f"needs {TOP_K_NEEDS}"
    if any(METHODS[m].needs == "top_k" for m in wanted) and traces is not None:
        top, why = stack_top_logprobs(traces, plan=top_k)
        top_reason = why or top_reason
    if top is None:  # the fitted top-k baselines (the scalar ones are skipped by baseline_scores)
        skipped.update({m: top_reason for m in wanted if METHODS[m].kind == "fitted_baseline"
                        and METHODS[m].needs == "top_k"})
        wanted = [m for m in wanted if m not in skipped]
    baseline_names = [m for m in wanted if METHODS[m].kind == "baseline"]
    # TRACE's, TRACE+'s and the reference's own scores on a second thread while the baselines are computed, where the
    # protocol would run on threads too: both are passes over every token, and numpy releases the GIL in them.
    with ThreadPoolExecutor(max_workers=1) if workers_for(len(surprisal), 2) > 1 else contextlib.nullcontext() as pool:
        own = pool.submit(_scores, surprisal, entropy, wanted, top) if pool is not None else None
        baselines = (baseline_scores(surprisal, entropy, names=baseline_names, traces=traces,
                                     beam_logprobs=beam_logprobs, embedder=embedder, contexts=contexts,
                                     top_k=top, relevance=relevance,
                                     top_k_reason=top_reason if top is None and traces is not None else "")
                     if baseline_names else None)
        scalar, features = own.result() if own is not None else _scores(surprisal, entropy, wanted, top)
    if baselines is not None:
        skipped.update(baselines.skipped)
        scalar = {m: scalar[m] if m in scalar else baselines.scores[m].to_numpy(dtype=np.float64)
                  for m in wanted if m in scalar or m in baselines.scores.columns}
    return ProtocolInputs(scalar=scalar, features=features, wanted=wanted, skipped=skipped)


def check_nonempty(surprisal: Ragged) -> None:
    empty = np.flatnonzero(surprisal.lengths == 0)
    if empty.size:
        raise ValueError(f"trace {int(empty[0])} is empty; every method needs at least one token")


def _wanted(methods: Sequence[str] | None, *, has_entropy: bool) -> tuple[list[str], dict[str, str]]:
    """The methods to run, in order, and the ones skipped for lack of entropy (with the reason)."""
    if methods is not None:
        methods = [methods] if isinstance(methods, str) else list(methods)
        if not methods:
            raise ValueError("`methods` is empty: name at least one method, or pass None for all of them")
    if methods is None:
        names = method_names()
    else:
        known = method_names(extended=True)
        unknown = [m for m in methods if m not in known]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; known: {known}")
        names = list(dict.fromkeys(methods))
    out: list[str] = []
    skipped: dict[str, str] = {}
    for name in names:
        spec = METHODS[name]
        if spec.needs_entropy and not has_entropy:
            substitute = spec.surprisal_only
            skipped[name] = NO_ENTROPY_REASON + (f"; ran as {substitute}" if substitute else "")
            if substitute:
                out.append(substitute)
            continue
        out.append(name)
    return list(dict.fromkeys(out)), skipped


def reference_features(surprisal: Ragged) -> np.ndarray:
    """The supervised likelihood reference's features, shape (n_answers, 3), each on the scale its scalar baseline is
    calibrated on: mean surprisal (the log of the geometric-mean token probability), ``log T`` and the logit of the
    minimum token probability ``logit(exp(-max s))`` (:func:`trace_core.methods.features.logit_of_surprisal`), which
    keeps apart sure answers that the probability itself crowds against 1."""
    return np.column_stack([np.asarray(segment_mean(surprisal)), np.log(surprisal.lengths.astype(np.float64)),
                            logit_of_surprisal(np.asarray(segment_max(surprisal)))])


def _scores(surprisal: Ragged, entropy: Ragged | None, wanted: list[str],
            top: TopK | None = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The methods' own scores: TRACE's (scalar) and the feature matrices of the TRACE+ variants, the fitted
    baselines and the reference (the scalar baselines come from
    :func:`trace_core.methods.baselines.baseline_scores`)."""
    scalar: dict[str, np.ndarray] = {}
    features: dict[str, np.ndarray] = {}
    for method in wanted:
        spec = METHODS[method]
        if spec.kind == "trace":
            trace_config = PAPER_CONFIG if spec.needs_entropy else SURPRISAL_ONLY_CONFIG
            risk = risk_from_arrays(surprisal, entropy if spec.needs_entropy else None, trace_config)
            scalar[method] = np.exp(-np.asarray(risk, dtype=np.float64))
        elif spec.kind == "trace_plus":
            features[method] = feature_matrix_from_arrays(surprisal, entropy, feature_set=feature_set(spec))
        elif spec.kind == "reference":
            features[method] = reference_features(surprisal)
        elif spec.kind == "fitted_baseline" and spec.fitted is not None:
            features[method] = spec.fitted.features(surprisal, entropy, top)
    return scalar, features


def check_finite_scores(inputs: ProtocolInputs, surprisal: Ragged, entropy: Ragged | None) -> None:
    """Refuse, naming the answer (:class:`AnswerValueError`), values so large that a score overflows (a sum of
    surprisals of 1e308 is inf): a clear message here instead of a calibrator's complaint about position i of some
    split. ``surprisal`` and ``entropy``: the answers' tokens, whose largest value the message gives."""
    for method, values in [*inputs.scalar.items(), *((m, F.sum(axis=1)) for m, F in inputs.features.items())]:
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            i = int(bad[0])
            largest = [float(np.max(np.abs(x.values[x.offsets[i]:x.offsets[i + 1]]), initial=0.0))
                       for x in (surprisal, entropy) if x is not None]
            raise AnswerValueError(i, f"makes {method}'s score non-finite: its trace holds values too large to "
                                      f"compute with (largest {max(largest):.3g} nats; a real token's surprisal or "
                                      "entropy is below 1,000 nats)")
