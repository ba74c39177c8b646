"""The compact per-answer table: every method's score (or features) of each answer, its label and where it came
from, without its per-token arrays. Evaluating shards builds one part per shard (:func:`compact_scores`) and puts
the parts together (:func:`concat_compact`); the protocol then runs on the whole table
(:func:`trace_core.evaluation.run.evaluate_scores`), so no more than one shard's per-token arrays are held at once.

A million answers take about 300 bytes each here (the default methods' scores and features in float64), against
about 520 bytes of float32 surprisal and entropy at 64 tokens per answer, and far more as the traces were stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from trace_core.checks import AnswerValueError
from trace_core.evaluation.chunked import chunked_protocol_inputs
from trace_core.evaluation.inputs import ProtocolInputs, check_finite_scores
from trace_core.methods.fitted_baselines import TopKPlan
from trace_core.methods.registry import METHODS
from trace_core.methods.risk import entropy_summary, stack_traces

__all__ = ["CompactScores", "compact_scores", "concat_compact", "merge_entropy_summaries"]


@dataclass
class CompactScores:
    """Every method's per-answer score on some answers, with their labels and origin.

    Attributes
    ----------
    inputs : ProtocolInputs
        Each method's score or feature matrix, one row per answer (:func:`~trace_core.evaluation.run.protocol_inputs`).
    labels : ndarray of int8, shape (n_answers,)
        1 = correct.
    shard : ndarray of int32, shape (n_answers,)
        Each answer's shard, an index into ``shard_names``.
    rows : ndarray of int64, shape (n_answers,)
        Each answer's row number in its shard (what messages name).
    shard_names : list of str
    certain_tokens : (int, int)
        Tokens with probability exactly 1, and all tokens (the truncation note).
    entropy_summary : dict
        :func:`trace_core.methods.risk.entropy_summary` of the answers' traces.
    has_entropy : bool
        Whether the scores read entropy (False: the surprisal-only variants ran).
    top_k : TopKPlan or None
        The answers' own top-k plan (how many alternatives they store).
    groups : ndarray of object or None
        Each answer's value of a grouping column (as text), when one was asked for.
    split_groups : ndarray of object or None
        Each answer's value of the column whose groups every split keeps whole (as text), when one was asked for.
    """

    inputs: ProtocolInputs
    labels: np.ndarray
    shard: np.ndarray
    rows: np.ndarray
    shard_names: list[str]
    certain_tokens: tuple[int, int]
    entropy_summary: dict[str, Any]
    has_entropy: bool = True
    top_k: TopKPlan | None = None
    groups: np.ndarray | None = None
    split_groups: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def take(self, positions: np.ndarray) -> CompactScores:
        """The answers at ``positions`` (e.g. one group's), as a table of their own."""
        inputs = ProtocolInputs(scalar={m: v[positions] for m, v in self.inputs.scalar.items()},
                                features={m: F[positions] for m, F in self.inputs.features.items()},
                                wanted=list(self.inputs.wanted), skipped=dict(self.inputs.skipped))
        return CompactScores(inputs=inputs, labels=self.labels[positions], shard=self.shard[positions],
                             rows=self.rows[positions], shard_names=self.shard_names,
                             certain_tokens=self.certain_tokens, entropy_summary=self.entropy_summary,
                             has_entropy=self.has_entropy, top_k=self.top_k,
                             groups=None if self.groups is None else self.groups[positions],
                             split_groups=None if self.split_groups is None else self.split_groups[positions])

    def where(self, i: int) -> str:
        """``"a/b.parquet: row 7"``: answer ``i``'s shard and row."""
        return f"{self.shard_names[int(self.shard[i])]}: row {int(self.rows[i])}"


def compact_scores(traces: Sequence[Any], labels: Any, *, rows: Sequence[int], shard_name: str,
                   methods: Sequence[str] | None = None, beam_logprobs: Sequence[Sequence[float]] | None = None,
                   embedder: Any = None, groups: Sequence[Any] | None = None, use_entropy: bool = True,
                   top_k: TopKPlan | None = None, split_groups: Sequence[Any] | None = None) -> CompactScores:
    """One shard's compact table from its usable traces (every one non-empty) and their 0/1 labels.

    ``use_entropy=False`` scores them as traces without entropy (the surprisal-only variants), as one pass over
    every answer does when any answer lacks entropy; ``top_k``, the top-k plan of all the shards, has them read as
    many alternatives per token as one pass would (default: their own plan, kept in the result's ``top_k``).

    The scores are :func:`~trace_core.evaluation.chunked.chunked_protocol_inputs`'s (one chunk of answers at a time),
    checked finite here, where a non-finite one can still be traced to its answer's tokens: ValueError naming the shard
    and row (``rows``: each answer's row number in the shard).
    """
    surprisal, entropy = stack_traces(traces)
    entropy = entropy if use_entropy else None
    own = TopKPlan.of(traces)
    inputs = chunked_protocol_inputs(surprisal, entropy, methods=methods, traces=traces,
                                     beam_logprobs=beam_logprobs, embedder=embedder,
                                     top_k=own if top_k is None else top_k)
    row_numbers = np.asarray(rows, dtype=np.int64)
    try:
        check_finite_scores(inputs, surprisal, entropy)
    except AnswerValueError as exc:
        raise ValueError(f"{shard_name}: row {int(row_numbers[exc.index])}: {exc.reason}") from None
    n = len(surprisal)
    summary = entropy_summary(traces)
    return CompactScores(inputs=inputs, labels=np.asarray(labels).astype(np.int8), shard=np.zeros(n, np.int32),
                         rows=row_numbers, shard_names=[shard_name],
                         certain_tokens=(int(np.count_nonzero(surprisal.values == 0)),
                                         int(surprisal.values.shape[0])),
                         entropy_summary=summary, has_entropy=entropy is not None, top_k=own,
                         groups=_texts(groups), split_groups=_texts(split_groups))


def _texts(values: Sequence[Any] | None) -> np.ndarray | None:
    return None if values is None else np.asarray([str(v) for v in values], dtype=object)


def merge_entropy_summaries(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """:func:`trace_core.methods.risk.entropy_summary` of several sets of traces put together: counts added, k values
    joined."""
    out: dict[str, Any] = {}
    ks: set[int] = set()
    for summary in summaries:
        for key, value in summary.items():
            if key == "k":
                ks.update(value)
            else:
                out[key] = out.get(key, 0) + value
    out["k"] = sorted(ks)
    return out


def _common_methods(parts: Sequence[CompactScores]) -> tuple[list[str], dict[str, str]]:
    """The methods every part has a score for (in the first part's order), and why each other one is left out: its
    own reason where a part skipped it, else that a part lacks it."""
    have = [set(p.inputs.scalar) | set(p.inputs.features) for p in parts]
    common = set.intersection(*have)
    skipped: dict[str, str] = {}
    for part in parts:
        for method, reason in part.inputs.skipped.items():
            skipped.setdefault(method, reason)
    for method in sorted(set.union(*have) - common):
        lacking = next(p.shard_names[0] for p, m in zip(parts, have, strict=True) if method not in m)
        skipped.setdefault(method, f"not available for every shard (e.g. {lacking}: "
                                   f"{_reason(parts, lacking, method)})")
    wanted = [m for m in parts[0].inputs.wanted if m in common]
    return wanted, skipped


def _reason(parts: Sequence[CompactScores], shard: str, method: str) -> str:
    for part in parts:
        if part.shard_names[0] == shard:
            return part.inputs.skipped.get(method, "not computed there")
    return "not computed there"  # pragma: no cover - the shard is one of the parts


def concat_compact(parts: Sequence[CompactScores]) -> CompactScores:
    """The parts (one per shard, from :func:`compact_scores`) as one table, in order. Methods that some part lacks
    are left out of the whole, each with its reason in ``inputs.skipped``; the top-k baselines' reason is the
    whole's (:meth:`TopKPlan.merge` of the parts' plans)."""
    if not parts:
        raise ValueError("no shard gave an answer to evaluate")
    wanted, skipped = _common_methods(parts)
    plans = [p.top_k for p in parts if p.top_k is not None]
    plan = TopKPlan.merge(plans) if plans else None
    if plan is not None and plan.reason:
        skipped.update({m: plan.reason for m in skipped if METHODS[m].needs == "top_k"})
    scalar = {m: np.concatenate([p.inputs.scalar[m] for p in parts]) for m in wanted if m in parts[0].inputs.scalar}
    features = {m: _concat_features([p.inputs.features[m] for p in parts])
                for m in wanted if m in parts[0].inputs.features}
    names = [name for p in parts for name in p.shard_names]
    shard = np.concatenate([p.shard + offset for p, offset in
                            zip(parts, np.cumsum([0] + [len(p.shard_names) for p in parts[:-1]]), strict=True)])
    groups = _joined([p.groups for p in parts])
    split_groups = _joined([p.split_groups for p in parts])
    return CompactScores(
        inputs=ProtocolInputs(scalar=scalar, features=features, wanted=wanted, skipped=skipped),
        labels=np.concatenate([p.labels for p in parts]), shard=shard.astype(np.int32),
        rows=np.concatenate([p.rows for p in parts]), shard_names=names,
        certain_tokens=(sum(p.certain_tokens[0] for p in parts), sum(p.certain_tokens[1] for p in parts)),
        entropy_summary=merge_entropy_summaries([p.entropy_summary for p in parts]),
        has_entropy=all(p.has_entropy for p in parts), top_k=plan, groups=groups, split_groups=split_groups)


def _joined(columns: Sequence[np.ndarray | None]) -> np.ndarray | None:
    """The parts' per-answer values joined, or None when some part has none."""
    if any(c is None for c in columns):
        return None
    return np.concatenate([c for c in columns if c is not None])


def _concat_features(blocks: list[np.ndarray]) -> np.ndarray:
    """The blocks stacked, in the first block's memory order (what the split loop reads them in)."""
    order: Literal["C", "F"] = "F" if blocks[0].flags.f_contiguous and not blocks[0].flags.c_contiguous else "C"
    out = np.empty((sum(b.shape[0] for b in blocks), *blocks[0].shape[1:]), dtype=blocks[0].dtype, order=order)
    start = 0
    for block in blocks:
        out[start:start + block.shape[0]] = block
        start += block.shape[0]
    return out
