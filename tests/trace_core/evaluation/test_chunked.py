"""Per-answer scores computed chunk by chunk equal one pass over all the answers; float32 inputs are read in float64."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import random_traces

from trace_core import EvaluationConfig, TraceTable, evaluate, evaluate_arrays, synthetic_traces
from trace_core.evaluation.chunked import answer_ranges, chunked_protocol_inputs
from trace_core.evaluation.inputs import protocol_inputs
from trace_core.methods.risk import stack_traces
from trace_core.traces.ragged import Ragged, float64


def _same_inputs(a, b) -> None:
    assert (a.wanted, a.skipped, list(a.scalar), list(a.features)) == (b.wanted, b.skipped, list(b.scalar),
                                                                       list(b.features))
    # equal to rounding: a score summed from a cumulative sum over the batch (Trace Profile's thirds) sums
    # another prefix in a chunk, which moves its last bits
    for m in a.scalar:
        np.testing.assert_allclose(a.scalar[m], b.scalar[m], rtol=1e-12, atol=1e-12, err_msg=m)
    for m in a.features:
        np.testing.assert_allclose(a.features[m], b.features[m], rtol=1e-12, atol=1e-12, err_msg=m)


@pytest.mark.parametrize("max_tokens", [1, 37, 500, 10**9])
def test_answer_ranges_cover_every_answer_once_within_the_limit(max_tokens):
    lengths = np.random.default_rng(0).integers(0, 40, size=200)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    ranges = answer_ranges(offsets, max_tokens)
    assert ranges[0][0] == 0 and ranges[-1][1] == 200
    assert all(b1 == a2 for (_, b1), (a2, _) in zip(ranges, ranges[1:], strict=False))
    assert all(b > a and (b - a == 1 or offsets[b] - offsets[a] <= max_tokens) for a, b in ranges)


@pytest.mark.parametrize("kind", ["spike", "surprisal_spike"])
def test_chunks_give_the_scores_of_one_pass(kind):
    surprisal, entropy, _ = synthetic_traces(3_000, kind=kind, mean_length=20, seed=1)
    whole = protocol_inputs(surprisal, entropy)
    chunked = chunked_protocol_inputs(surprisal, entropy, max_tokens=7_001)
    assert len(answer_ranges(surprisal.offsets, 7_001)) > 5  # the test ran on many chunks
    _same_inputs(whole, chunked)


def test_chunks_of_a_table_with_top_k_and_beams_give_the_scores_of_one_pass():
    table = TraceTable.from_traces(random_traces(400, seed=4))
    surprisal, entropy = stack_traces(table)
    beams = [[-0.5 - i % 7, -1.5] for i in range(400)]
    whole = protocol_inputs(surprisal, entropy, traces=table, beam_logprobs=beams)
    chunked = chunked_protocol_inputs(surprisal, entropy, traces=table, beam_logprobs=beams, max_tokens=500)
    assert any(m in chunked.features for m in ("WePR", "EPR")) or any(m in chunked.scalar for m in ("EPR",))
    _same_inputs(whole, chunked)


def test_an_empty_answer_is_named_by_its_place_in_the_whole_batch():
    surprisal, entropy, _ = synthetic_traces(50, seed=2)
    lengths = surprisal.lengths.copy()
    values = np.delete(surprisal.values, np.arange(surprisal.offsets[40], surprisal.offsets[41]))
    lengths[40] = 0
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    with pytest.raises(ValueError, match="trace 40 is empty"):
        chunked_protocol_inputs(Ragged(values, offsets), None, max_tokens=30)


def test_float32_inputs_are_kept_and_read_as_float64():
    surprisal, entropy, labels = synthetic_traces(2_000, mean_length=16, seed=3)
    s32, h32 = (Ragged(x.values.astype(np.float32), x.offsets) for x in (surprisal, entropy))
    assert s32.values.dtype == np.float32 and float64(s32).values.dtype == np.float64
    s64, h64 = (Ragged(x.values.astype(np.float32).astype(np.float64), x.offsets) for x in (surprisal, entropy))
    config = EvaluationConfig(n_splits=3, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = evaluate_arrays(s32, h32, labels, config=config)
        b = evaluate_arrays(s64, h64, labels, config=config)
    assert a.per_split.equals(b.per_split)


def test_evaluate_on_a_table_is_unchanged_by_chunking(monkeypatch):
    import trace_core.evaluation.chunked as chunked

    traces = random_traces(300, seed=6)
    labels = np.random.default_rng(6).integers(0, 2, size=300)
    config = EvaluationConfig(n_splits=3, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = evaluate(TraceTable.from_traces(traces), labels, config=config)
        monkeypatch.setattr(chunked, "CHUNK_TOKENS", 100)
        monkeypatch.setitem(chunked.chunked_protocol_inputs.__kwdefaults__, "max_tokens", 100)
        parts = evaluate(TraceTable.from_traces(traces), labels, config=config)
    columns = ["split", "method", "metric", "calibrator"]
    assert whole.per_split[columns].equals(parts.per_split[columns])
    np.testing.assert_allclose(whole.per_split["value"], parts.per_split["value"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("ks", [(5, 3), (4, 1)])
def test_chunks_whose_answers_store_different_numbers_of_alternatives_read_the_whole_s(ks):
    """Each chunk reads the fewest alternatives any answer of the whole stores (or skips the top-k baselines with
    the whole's reason), as one pass does, not its own."""
    from helpers import make_trace

    rng = np.random.default_rng(9)
    traces = [make_trace(rng.gamma(1.0, 1.0, size=12), rng.gamma(2.0, 1.0, size=12), k=ks[i >= 150])
              for i in range(300)]
    table = TraceTable.from_traces(traces)
    surprisal, entropy = stack_traces(table)
    whole = protocol_inputs(surprisal, entropy, traces=table)
    chunked = chunked_protocol_inputs(surprisal, entropy, traces=table, max_tokens=500)
    if min(ks) >= 2:
        assert "EPR" in chunked.scalar and "WEPR" in chunked.features
    else:
        assert "150 of 300 answers store fewer" in chunked.skipped["EPR"]
    _same_inputs(whole, chunked)
