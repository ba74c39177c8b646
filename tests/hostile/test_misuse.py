"""Library misuse is caught at the boundary with a clear error, not deep inside torch or numpy."""

from __future__ import annotations

import pytest
from helpers import synthetic_trace_objects

from trace_core import DecodingConfig, TracePlus, evaluate


def test_decoding_seed_beyond_64_bits_is_refused():
    with pytest.raises(ValueError, match="seed"):
        DecodingConfig(seed=2**64 + 5)
    assert DecodingConfig(seed=2**63 - 1).seed == 2**63 - 1


def test_evaluate_with_no_methods_is_an_error():
    traces, y = synthetic_trace_objects(60)
    with pytest.raises(ValueError, match="`methods` is empty"):
        evaluate(traces, y, methods=[])
    result = evaluate(traces, y, methods=(m for m in ["TRACE", "SeqLogP"]))  # any iterable, read once
    assert result.methods == ["TRACE", "SeqLogP"]


def test_traceplus_refuses_bad_parameters_and_inputs():
    traces, y = synthetic_trace_objects(60)
    with pytest.raises(ValueError, match="max_iter"):
        TracePlus(max_iter=0).fit(traces, y)
    with pytest.raises(TypeError, match="C"):
        TracePlus(C=True).fit(traces, y)
    with pytest.raises(TypeError, match="Trace"):
        TracePlus().fit(traces, y).predict_proba("abc")


def test_score_answers_refuses_token_ids_outside_the_vocabulary(tiny_model_dirs):
    pytest.importorskip("torch")
    from trace_core import load_model, score_answers

    lm = load_model(tiny_model_dirs["gpt2"], device="cpu")
    with pytest.raises(ValueError, match=r"answers\[1\].*token id .*outside the model's vocabulary"):
        score_answers(lm, ["a", "b"], [[1, 2], [3, lm.vocab_size + 7]])
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        score_answers(lm, ["a"], [[-1]])
