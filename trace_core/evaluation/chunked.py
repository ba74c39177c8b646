"""Every method's per-answer scores computed one chunk of answers at a time, so that memory stays near the inputs'.

Each method's score or features of an answer depend on that answer's tokens only, so the per-token work of
:func:`~trace_core.evaluation.run.protocol_inputs` (dozens of passes over every token, each with float64 temporaries the
size of the whole batch) is done on consecutive chunks of answers of at most :data:`CHUNK_TOKENS` tokens, upcast to
float64 one chunk at a time; only the per-answer results are kept whole. The results are those of one pass over all
the answers (tested): the chunks only bound how much per-token memory is alive at once, so that evaluating a million
answers stored as float32 needs little more than the float32 arrays themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from trace_core.evaluation.inputs import ProtocolInputs, protocol_inputs
from trace_core.methods.fitted_baselines import TopKPlan
from trace_core.methods.registry import METHODS
from trace_core.traces.ragged import Ragged, check_paired, float64
from trace_core.traces.table import gather
from trace_core.traces.trace import Trace

if TYPE_CHECKING:
    pass

__all__ = ["CHUNK_TOKENS", "answer_ranges", "chunked_protocol_inputs"]

#: Tokens per chunk: 16 MiB per float64 temporary, and (at typical answer lengths) enough answers per chunk for the
#: per-token passes to run on two threads.
CHUNK_TOKENS = 2**21


def answer_ranges(offsets: np.ndarray, max_tokens: int) -> list[tuple[int, int]]:
    """Consecutive answer ranges ``[a, b)`` covering every answer, each of at most ``max_tokens`` tokens (an answer
    longer than that is a range of its own).

    Examples
    --------
    >>> answer_ranges(np.array([0, 3, 5, 9, 10]), 5)
    [(0, 2), (2, 4)]
    """
    n = len(offsets) - 1
    ranges: list[tuple[int, int]] = []
    a = 0
    while a < n:
        b = int(np.searchsorted(offsets, offsets[a] + max_tokens, side="right")) - 1
        b = min(max(b, a + 1), n)
        ranges.append((a, b))
        a = b
    return ranges


def _chunk(batch: Ragged, a: int, b: int) -> Ragged:
    lo, hi = int(batch.offsets[a]), int(batch.offsets[b])
    return Ragged(batch.values[lo:hi].astype(np.float64), batch.offsets[a:b + 1] - lo)


def _part(values: Sequence[Any] | None, a: int, b: int) -> Any:
    return None if values is None else values[a:b]


def _layout(method: str) -> Literal["C", "F"]:
    """The memory order the split loop reads a method's features in (:class:`~trace_core.evaluation.protocol.run_splits`
    gathers a fitted baseline's and the reference's column by column, TRACE+'s as given): filled in that order
    here, they are not copied again there."""
    return "C" if METHODS[method].kind == "trace_plus" else "F"


def chunked_protocol_inputs(surprisal: Ragged, entropy: Ragged | None, *, methods: Sequence[str] | None = None,
                            traces: Sequence[Trace] | None = None,
                            beam_logprobs: Sequence[Sequence[float]] | None = None, embedder: Any = None,
                            contexts: Sequence[str] | None = None, relevance: Sequence[np.ndarray] | None = None,
                            max_tokens: int = CHUNK_TOKENS, top_k: TopKPlan | None = None) -> ProtocolInputs:
    """:func:`~trace_core.evaluation.run.protocol_inputs` (same arguments and result), chunk by chunk of answers.

    Every chunk reads the number of alternatives per token that the whole does (its :class:`TopKPlan`, or
    ``top_k``'s, the plan of a larger whole). Should the methods that run, or the reasons for skipping one, still
    differ between chunks (a property of the data that only some chunks have), the scores are computed again in one
    pass over all the answers, as without chunks.
    """
    check_paired(surprisal, entropy, who="every method needs")  # messages name answers of the whole batch
    if top_k is None and traces is not None:
        top_k = TopKPlan.of(traces)
    options = {"methods": methods, "embedder": embedder, "top_k": top_k}
    ranges = answer_ranges(surprisal.offsets, max_tokens)

    def whole() -> ProtocolInputs:
        return protocol_inputs(float64(surprisal), None if entropy is None else float64(entropy), traces=traces,
                               beam_logprobs=beam_logprobs, contexts=contexts, relevance=relevance, **options)

    if len(ranges) <= 1:
        return whole()
    n = len(surprisal)
    out: ProtocolInputs | None = None
    for a, b in ranges:
        part = protocol_inputs(_chunk(surprisal, a, b), None if entropy is None else _chunk(entropy, a, b),
                               traces=None if traces is None else gather(traces, np.arange(a, b)),
                               beam_logprobs=_part(beam_logprobs, a, b), contexts=_part(contexts, a, b),
                               relevance=_part(relevance, a, b), **options)
        if out is None:  # the whole result's arrays, filled chunk by chunk
            out = ProtocolInputs(
                scalar={m: np.empty(n, dtype=v.dtype) for m, v in part.scalar.items()},
                features={m: np.empty((n, *F.shape[1:]), dtype=F.dtype, order=_layout(m))
                          for m, F in part.features.items()},
                wanted=part.wanted, skipped=part.skipped)
        elif (part.wanted, part.skipped, list(part.scalar), list(part.features)) != (
                out.wanted, out.skipped, list(out.scalar), list(out.features)):
            return whole()
        for m, v in part.scalar.items():
            out.scalar[m][a:b] = v
        for m, F in part.features.items():
            out.features[m][a:b] = F
    assert out is not None
    return out
