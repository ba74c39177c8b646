"""The evaluation protocol: every method scores the same answers, over repeated calibration/evaluation splits.

Per split (paper protocol): a random ``calibration_fraction`` of the answers (35% by default) fits the calibrators and
the rest is evaluated. AUROC, AUPRC, AURC and PRR are computed on each method's raw score; Brier and ECE on
probabilities from calibrators fitted on the calibration part:

- TRACE and every scalar baseline get *both* scalar calibrators, Platt scaling and isotonic regression, each fitted on
  the score's documented monotone transform (``registry.Method.transform``, e.g. the log of ``exp(sum log p)``), so
  that no score is handicapped by its scale. Results carry both (``calibrator`` "platt" / "isotonic");
  ``EvaluationConfig.scalar_calibrator`` picks the one the table shows.
- TRACE+, the supervised likelihood reference and the fitted baselines (:mod:`trace_core.methods.fitted_baselines`: CES,
  WEPR, Trace Profile) are fitted on each calibration part and give their own probability (``calibrator``
  "logistic"; CES's is Platt scaling of its score, fitted on that part).
- Ranking metrics have ``calibrator`` "none".

A score that is constant (or nearly so: fewer than 2 distinct values, or a relative standard deviation below
:data:`CONSTANT_RTOL`) on the data or on a calibration part is *uninformative*: it is marked, never bolded and never
chosen as the best baseline (a constant predictor's ECE can be tiny). Results are the mean and standard deviation
over the splits (20 by default), plus the paired comparison of :mod:`trace_core.evaluation.paired`.

On data without entropy (only the chosen tokens' log-probabilities) the methods that read entropy are skipped with
that reason, and TRACE and TRACE+ run as their surprisal-only variants under their own names; extended TRACE+ variants
asked for on such data do not run and get one note (:func:`trace_core.evaluation.results.extended_entropy_note`).

When more than :data:`~trace_core.evaluation.results.TRUNCATED_SHARE` (20%) of the answer tokens have probability
exactly 1, the log-probabilities are not the model's full distribution (top-p/top-k truncation, or a server's
post-processing): :class:`TruncatedDistributionWarning` and a note in the result
(:func:`trace_core.evaluation.results.truncation_note`) say so.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trace_core.checks import (
    AnswerValueError,
    check_bool,
    check_choice,
    check_int,
    check_labels,
    check_real,
    set_checked,
)
from trace_core.evaluation.chunked import chunked_protocol_inputs
from trace_core.evaluation.inputs import ProtocolInputs, check_finite_scores
from trace_core.evaluation.paired import paired_comparison
from trace_core.evaluation.protocol import is_constant, run_splits
from trace_core.evaluation.results import (
    CONSTANT_RTOL,
    SCALAR_CALIBRATORS,
    TRUNCATED_SHARE,
    UNINFORMATIVE,
    EvaluationResult,
    HeldOut,
    HeldOutMethod,
    average_results,
    extended_entropy_note,
    extended_needing_entropy,
    split_frame,
    summarise,
    truncation_note,
)
from trace_core.evaluation.splits import OUT_OF_FOLD, split_group_codes, stratified_folds
from trace_core.methods.registry import METHODS, METRICS, method_names
from trace_core.methods.risk import entropy_summary, stack_traces
from trace_core.traces.ragged import Ragged
from trace_core.traces.table import TraceTable
from trace_core.traces.trace import Trace

__all__ = ["AnswerValueError", "CONSTANT_RTOL", "SCALAR_CALIBRATORS", "TRUNCATED_SHARE", "UNINFORMATIVE",
           "EvaluationConfig", "NoUsableSplitError", "TruncatedDistributionWarning",
           "EvaluationResult", "HeldOut", "HeldOutMethod", "OUT_OF_FOLD", "SkippedSplitsWarning",
           "average_results", "evaluate_scores",
           "data_note", "evaluate", "evaluate_arrays", "is_constant", "method_names", "stratified_folds"]


Progress = Callable[[int, int], None]
#: The most splits: the splits share the answers, so more than this narrows nothing and only costs time.
MAX_SPLITS = 1_000
#: The most ECE bins (more bins than this hold a few answers each, whatever the data).
MAX_BINS = 1_000


class NoUsableSplitError(ValueError):
    """Every split left one class only in its calibration or evaluation part: the data cannot be evaluated as it
    is (too few answers of one class); a caller evaluating several groups can skip this one and go on."""


class SkippedSplitsWarning(UserWarning):
    """Some splits had one class only in their calibration or evaluation part and were skipped."""


class TruncatedDistributionWarning(UserWarning):
    """More than :data:`~trace_core.evaluation.results.TRUNCATED_SHARE` of the answer tokens have probability exactly 1:
    the log-probabilities look truncated (top-p/top-k sampling, or a server's post-processing), so surprisal-based
    scores are not the model's. The result's ``notes`` say it too."""


@dataclass(frozen=True)
class EvaluationConfig:
    """Settings of the protocol (serialisable with ``dataclasses.asdict``).

    Attributes
    ----------
    n_splits : int, default 20
        Random calibration/evaluation splits, 1 to :data:`MAX_SPLITS`.
    calibration_fraction : float, default 0.35
        Share of the answers that fits the calibrators, in (0, 1).
    stratified : bool, default False
        Keep each class's share in the calibration part (``round(fraction * n_class)`` of each class).
    seed : int, default 0
        Seed of the splits, >= 0.
    n_bins : int, default 10
        ECE bins, 1 to :data:`MAX_BINS`.
    scalar_calibrator : {"platt", "isotonic"}
        The calibrator of TRACE and the baselines that tables show (both are always computed; TRACE+ has its own
        logistic regression).
    metrics : tuple of str
        Keys of :data:`trace_core.methods.registry.METRICS`.

    Numpy numbers are accepted and stored as Python numbers; a wrong type raises TypeError, a value out of range
    ValueError.
    """

    n_splits: int = 20
    calibration_fraction: float = 0.35
    stratified: bool = False
    seed: int = 0
    n_bins: int = 10
    scalar_calibrator: str = "platt"
    metrics: tuple[str, ...] = ("brier", "ece", "auroc", "auprc", "aurc", "prr")

    def __post_init__(self) -> None:
        if isinstance(self.metrics, str) or not isinstance(self.metrics, Sequence):
            raise TypeError(f"`metrics` must be a sequence of metric names, got {type(self.metrics).__name__}")
        unknown = [m for m in self.metrics if m not in METRICS]
        if unknown:
            raise ValueError(f"unknown metrics {unknown}; known: {list(METRICS)}")
        checked = {
            "n_splits": check_int(self.n_splits, "n_splits", minimum=1, maximum=MAX_SPLITS),
            "calibration_fraction": check_real(self.calibration_fraction, "calibration_fraction", minimum=0,
                                               maximum=1, low_open=True, high_open=True),
            "stratified": check_bool(self.stratified, "stratified"),
            "seed": check_int(self.seed, "seed", minimum=0),
            "n_bins": check_int(self.n_bins, "n_bins", minimum=1, maximum=MAX_BINS),
            "scalar_calibrator": check_choice(self.scalar_calibrator, "scalar_calibrator", SCALAR_CALIBRATORS),
            "metrics": tuple(self.metrics),
        }
        set_checked(self, checked)


_SOURCE_WORDS = {"exact": "entropy exact", "absent": "chosen-token log-probabilities only (no entropy)"}


def data_note(summary: dict[str, Any] | None, *, n: int | None = None, has_entropy: bool = True) -> str:
    """What the data held, in words, for results headers: ``"1,160 traces: entropy exact"``, ``"3,869 traces:
    chosen-token log-probabilities only (no entropy): entropy methods skipped"``, ``"96,000 traces: top-10 entropy
    estimate"``; mixed sources are counted (``"… entropy exact (600), top-10 entropy estimate (400)"``).

    Parameters
    ----------
    summary : dict or None
        :func:`trace_core.methods.risk.entropy_summary` of the traces; None for arrays without traces (then ``n``
        answers, with or without entropy as ``has_entropy`` says).
    """
    if summary is None:
        count = int(n or 0)
        parts = ["entropy given" if has_entropy else _SOURCE_WORDS["absent"]]
    else:
        k = summary.get("k") or []
        words = {**_SOURCE_WORDS, "top_k": f"top-{k[0]} entropy estimate" if len(k) == 1 else "top-k entropy estimate"}
        present = [s for s in ("exact", "top_k", "absent") if summary.get(s)]
        count = int(sum(summary.get(s, 0) for s in present))
        parts = ([words[s] for s in present] if len(present) == 1
                 else [f"{words[s]} ({summary[s]:,})" for s in present])
    note = f"{count:,} trace{'s' if count != 1 else ''}: " + ", ".join(parts)
    return note + ("" if has_entropy else ": entropy methods skipped")


def evaluate(traces: Sequence[Trace], labels: Any, *, config: EvaluationConfig = EvaluationConfig(),
             methods: Sequence[str] | None = None, beam_logprobs: Sequence[Sequence[float]] | None = None,
             embedder: Any = None, contexts: Sequence[str] | None = None,
             progress: Progress | None = None, relevance: Sequence[np.ndarray] | None = None,
             split_groups: Any = None) -> EvaluationResult:
    """Run the protocol on recorded traces and 0/1 correctness labels.

    Parameters
    ----------
    traces : sequence of Trace or TraceTable, length n_answers
        A :class:`~trace_core.traces.table.TraceTable` is read column by column (no re-stacking).
    labels : array-like of 0/1, shape (n_answers,)
        1 = the answer is correct.
    config : EvaluationConfig
    methods : sequence of str, optional
        Default: :func:`trace_core.methods.registry.method_names` (TRACE+, TRACE, every baseline whose inputs are
        available, the supervised likelihood reference). On data without entropy, methods that need it are skipped
        and TRACE / TRACE+ run as their surprisal-only variants.
    beam_logprobs, embedder, contexts, relevance
        Inputs of the beam and semantic baselines (see :func:`trace_core.methods.baselines.compute_baselines`;
        ``relevance``, token relevances already computed, stands in for the embedder).
    progress : callable, optional
        ``progress(done, total)`` after the scores are computed (``done`` 0) and after each split.
    split_groups : array-like, shape (n_answers,), optional
        Each answer's group, e.g. its prompt: every split keeps each group whole in its calibration or its evaluation
        part, so that no prompt's answers are both calibrated on and evaluated (several answers per prompt would
        otherwise leak). Not with ``config.stratified``.

    Examples
    --------
    >>> from trace_core import synthetic_traces, evaluate_arrays
    >>> s, h, y = synthetic_traces(300, seed=0)
    >>> result = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=2), methods=["TRACE", "SeqLogP"])
    >>> sorted(result.summary["calibrator"].unique())
    ['isotonic', 'none', 'platt']
    """
    traces = traces if isinstance(traces, TraceTable) else list(traces)
    surprisal, entropy = stack_traces(traces)
    held = entropy_summary(traces)
    result = _evaluate(surprisal, entropy, labels, config=config, methods=methods, traces=traces,
                       beam_logprobs=beam_logprobs, embedder=embedder, contexts=contexts,
                       note=data_note(held, has_entropy=entropy is not None), progress=progress,
                       relevance=relevance, split_groups=split_groups)
    result.entropy_summary = held
    return result


def evaluate_arrays(surprisal: Ragged, entropy: Ragged | None, labels: Any, *,
                    config: EvaluationConfig = EvaluationConfig(), methods: Sequence[str] | None = None,
                    beam_logprobs: Sequence[Sequence[float]] | None = None,
                    progress: Progress | None = None, split_groups: Any = None) -> EvaluationResult:
    """:func:`evaluate` from surprisal and entropy batches (entropy None: chosen-token log-probabilities only; no
    Trace objects, so the semantic baselines are skipped)."""
    note = data_note(None, n=len(surprisal), has_entropy=entropy is not None)
    return _evaluate(surprisal, entropy, labels, config=config, methods=methods, beam_logprobs=beam_logprobs,
                     note=note, progress=progress, split_groups=split_groups)


def _evaluate(surprisal: Ragged, entropy: Ragged | None, labels: Any, *, config: EvaluationConfig,
              methods: Sequence[str] | None, traces: Sequence[Trace] | None = None,
              beam_logprobs: Sequence[Sequence[float]] | None = None, embedder: Any = None,
              contexts: Sequence[str] | None = None, note: str = "",
              progress: Progress | None = None, relevance: Sequence[np.ndarray] | None = None,
              split_groups: Any = None) -> EvaluationResult:
    if not isinstance(config, EvaluationConfig):
        raise TypeError(f"`config` must be an EvaluationConfig, got {type(config).__name__}")

    inputs = chunked_protocol_inputs(surprisal, entropy, methods=methods, traces=traces, beam_logprobs=beam_logprobs,
                                     embedder=embedder, contexts=contexts, relevance=relevance)
    check_finite_scores(inputs, surprisal, entropy)
    certain_tokens = (int(np.count_nonzero(surprisal.values == 0)), int(surprisal.values.shape[0]))
    # the scores were made here for this evaluation: the split loop drops each method's once its run is done
    return _evaluate_checked(inputs, labels, config=config, note=note, certain_tokens=certain_tokens,
                             progress=progress, stacklevel=4, split_groups=split_groups, release=True)


def evaluate_scores(inputs: ProtocolInputs, labels: Any, *, config: EvaluationConfig = EvaluationConfig(),
                    certain_tokens: tuple[int, int] = (0, 0), note: str = "",
                    progress: Progress | None = None, split_groups: Any = None) -> EvaluationResult:
    """The protocol on every method's per-answer scores (:func:`protocol_inputs`, e.g. computed shard by shard and
    put together): the result :func:`evaluate` gives on the answers those scores came from, with no per-token array.

    Parameters
    ----------
    inputs : ProtocolInputs
        Each method's score or features, one row per answer; every value finite.
    labels : array-like of 0/1, shape (n_answers,)
    certain_tokens : (int, int)
        Tokens with probability exactly 1, and all tokens, of the answers (the truncation note; (0, 0): none known).
    note : str
        What the data held (:func:`data_note`).
    split_groups : array-like, optional
        As :func:`evaluate` takes it.
    """
    if not isinstance(config, EvaluationConfig):
        raise TypeError(f"`config` must be an EvaluationConfig, got {type(config).__name__}")
    if not isinstance(inputs, ProtocolInputs):
        raise TypeError(f"`inputs` must be ProtocolInputs, got {type(inputs).__name__}")
    sizes = {m: np.shape(v)[0] for m, v in [*inputs.scalar.items(), *inputs.features.items()]}
    if not sizes or len(set(sizes.values())) > 1:
        raise ValueError(f"`inputs` must hold one score per answer for every method, got rows per method {sizes}")
    for method, values in [*inputs.scalar.items(), *inputs.features.items()]:
        bad = np.flatnonzero(~np.isfinite(values).reshape(values.shape[0], -1).all(axis=1))
        if bad.size:
            raise AnswerValueError(int(bad[0]), f"has a non-finite {method} score")
    return _evaluate_checked(inputs, labels, config=config, note=note, certain_tokens=certain_tokens,
                             progress=progress, stacklevel=3, split_groups=split_groups)


def _evaluate_checked(inputs: ProtocolInputs, labels: Any, *, config: EvaluationConfig, note: str,
                      certain_tokens: tuple[int, int], progress: Progress | None, stacklevel: int,
                      split_groups: Any = None, release: bool = False) -> EvaluationResult:
    """The split loop on finite scores, with the result's notes (``stacklevel``: the user's call, for warnings;
    ``release``: ``inputs`` belongs to this call, and each method's score leaves it once its run is done)."""
    n = len(next(iter([*inputs.scalar.values(), *inputs.features.values()])))
    groups = None if split_groups is None else split_group_codes(split_groups, n)
    notes = []
    truncated = truncation_note(*certain_tokens)
    if truncated:
        warnings.warn(truncated, TruncatedDistributionWarning, stacklevel=stacklevel)
        notes.append(truncated)
    extended = extended_needing_entropy(inputs.skipped)
    if extended:
        notes.append(extended_entropy_note(extended))
    result = _run(inputs, labels, config=config, note=note, progress=progress, stacklevel=stacklevel + 1,
                  groups=groups, release=release)
    small = result.sample_note()
    if small:
        notes.append(small)
    if groups is not None:
        notes.append(f"each split keeps every one of the {int(groups.max()) + 1:,} answer groups whole (calibrated "
                     "on or evaluated, never both)")
    result.notes, result.certain_tokens = notes, certain_tokens
    return result


def _run(inputs: ProtocolInputs, labels: Any, *, config: EvaluationConfig, note: str, progress: Progress | None,
         stacklevel: int, groups: np.ndarray | None = None, release: bool = False) -> EvaluationResult:
    """The split loop on checked labels and finite scores, and the result it makes."""
    scalar, features, wanted = inputs.scalar, inputs.features, inputs.wanted
    n = next(iter([*scalar.values(), *features.values()])).shape[0]
    y = check_labels(labels, "labels", n=n, purpose="evaluation")
    ran = [m for m in wanted if m in scalar or m in features]
    run = run_splits(y, scalar, features, config=config, methods=ran, progress=progress, groups=groups,
                     release=release)
    if run.skipped_splits == config.n_splits:
        raise NoUsableSplitError("every split left one class only in its calibration or evaluation part; use more "
                                 "answers or stratified splits")
    if run.skipped_splits:
        warnings.warn(f"{run.skipped_splits} of {config.n_splits} splits skipped: one class only in the calibration "
                      "or evaluation part (use stratified splits to avoid this)", SkippedSplitsWarning,
                      stacklevel=stacklevel)
    per_split = split_frame(run.rows)
    per_split.insert(2, "family", per_split["method"].map(lambda m: METHODS[m].family))
    calibration_values = split_frame(run.calibration)
    paired = paired_comparison(per_split, calibration_values, methods=ran, metrics=config.metrics,
                               uninformative=list(run.uninformative))
    return EvaluationResult(summary=summarise(per_split, list(run.uninformative)), per_split=per_split,
                            held_out=run.held_out, skipped=inputs.skipped, config=config, n_answers=n,
                            skipped_splits=run.skipped_splits, methods=ran, accuracy=float(y.mean()),
                            calibration_values=calibration_values, paired=paired, uninformative=run.uninformative,
                            data_note=note)
