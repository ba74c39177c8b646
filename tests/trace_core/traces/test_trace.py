from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import make_trace

from trace_core import DecodingConfig, Trace, TraceMetadata


def full_trace() -> Trace:
    return Trace(
        prompt="Q: 2+2? <b>", answer=" 4 🙂", token_ids=[10, 11, 12], tokens=(" 4", " ", "🙂"),
        surprisal=[0.1, 2.5, 1e-9], entropy=[0.3, 1.7, 0.0],
        top_ids=[[10, 3], [11, 4], [12, 5]], top_logprobs=[[-0.1, -2.4], [-0.5, -2.5], [-1e-9, -30.0]],
        ranks=[1, 2, 1],
        metadata=TraceMetadata(model_id="demo", source="generate", decoding=DecodingConfig(seed=1).to_dict(),
                               tokenizer="demo", extra={"finish_reason": "eos"}))


def test_round_trip_dict_and_json_is_lossless():
    trace = full_trace()
    assert Trace.from_dict(trace.to_dict()) == trace
    text = trace.to_json()
    json.loads(text)  # plain JSON
    again = Trace.from_json(text)
    assert again == trace
    np.testing.assert_array_equal(again.surprisal, trace.surprisal)  # bit-exact floats
    assert again.surprisal.dtype == np.float64 and again.top_ids.dtype == np.int64


def test_round_trip_with_top_tokens():
    trace = Trace.from_dict({**full_trace().to_dict(), "top_ids": [[-1, -1]] * 3,
                             "top_tokens": [[" 4", " four"], [" ", "!"], ["🙂", ":)"]]})
    assert trace.top_tokens[2] == ("🙂", ":)")
    assert Trace.from_json(trace.to_json()) == trace
    with pytest.raises(ValueError, match="`top_tokens` must have shape"):
        Trace.from_dict({**full_trace().to_dict(), "top_tokens": [["a"]] * 3})


def test_round_trip_without_top_k_or_ranks():
    trace = Trace(prompt="", answer="ab", token_ids=[1, 2], tokens=("a", "b"), surprisal=[1, 2], entropy=[1, 1],
                  top_ids=[], top_logprobs=[])
    assert trace.n_alternatives == 0 and trace.ranks is None
    assert Trace.from_json(trace.to_json()) == trace


def test_arrays_are_read_only_and_equality_compares_values():
    trace = full_trace()
    with pytest.raises(ValueError):
        trace.surprisal[0] = 5.0
    other = Trace.from_dict({**trace.to_dict(), "entropy": [0.3, 1.7, 0.1]})
    assert other != trace


@pytest.mark.parametrize("change, error, match", [
    ({"tokens": ["a", "b"]}, ValueError, "`tokens` has 2 entries but `token_ids` has 3"),
    ({"surprisal": [0.1, 0.2]}, ValueError, "`surprisal` has 2 rows"),
    ({"surprisal": [0.1, float("nan"), 0.2]}, ValueError, "`surprisal` must be finite, got nan at token 1"),
    ({"entropy": [0.1, -1.0, 0.2]}, ValueError, "`entropy` must be >= 0"),
    ({"top_logprobs": [[-0.1], [-0.2], [-0.3]]}, ValueError, "`top_ids` has shape"),
    ({"top_logprobs": [[0.5, -1], [-0.5, -2], [-1, -3]]}, ValueError, "log-probabilities"),
    ({"ranks": [0, 1, 1]}, ValueError, "1-based"),
    ({"token_ids": [1.5, 2, 3]}, ValueError, "integers"),
    ({"prompt": 3}, TypeError, "`prompt` must be a str"),
    ({"tokens": ["a", 1, "c"]}, TypeError, r"`tokens\[1\]` must be a str"),
])
def test_validation_names_field_and_problem(change, error, match):
    data = {**full_trace().to_dict(), **change}
    with pytest.raises(error, match=match):
        Trace.from_dict(data)


def test_from_dict_rejects_unknown_and_missing_fields():
    data = full_trace().to_dict()
    with pytest.raises(ValueError, match="unknown trace fields"):
        Trace.from_dict({**data, "bogus": 1})
    del data["entropy"]
    with pytest.raises(ValueError, match="missing"):
        Trace.from_dict(data)


def test_metadata_validation():
    with pytest.raises(ValueError, match="`source` must be one of"):
        TraceMetadata(source="magic")
    with pytest.raises(ValueError, match="`entropy_source`"):
        TraceMetadata(entropy_source="guess")
    with pytest.raises(ValueError, match="unknown metadata fields"):
        TraceMetadata.from_dict({"model": "x"})


@pytest.mark.parametrize("kwargs, error, match", [
    ({"max_new_tokens": 0}, ValueError, "`max_new_tokens` must be an int in \\[1, 1048576\\], got 0"),
    ({"temperature": 0.0}, ValueError, r"`temperature` must be a finite real number > 0, got 0\.0"),
    ({"top_p": 1.5}, ValueError, r"`top_p` must be a finite real number in \(0, 1\], got 1\.5"),
    ({"top_k": -1}, ValueError, "`top_k` must be an int in \\[0, 2147483647\\]"),
    # A value of the wrong type is a TypeError (the shared rule of trace_core.checks), also for 2.5 as an int.
    ({"n_alternatives": 2.5}, TypeError, "`n_alternatives` must be an int in \\[0, 1000\\], got 2.5"),
    ({"seed": "7"}, TypeError, "`seed` must be an int in \\[0, 9223372036854775807\\]"),
    ({"temperature": "hot"}, TypeError, "`temperature` must be a finite real number"),
    ({"do_sample": 1}, TypeError, "`do_sample` must be True or False"),
])
def test_decoding_config_validation(kwargs, error, match):
    with pytest.raises(error, match=match):
        DecodingConfig(**kwargs)


def test_decoding_config_takes_numpy_scalars_and_stores_python_ones():
    config = DecodingConfig(max_new_tokens=np.int64(8), temperature=np.float32(0.5), seed=np.int64(3),
                            do_sample=np.bool_(True))
    assert config == DecodingConfig(max_new_tokens=8, temperature=0.5, seed=3, do_sample=True)
    assert type(config.max_new_tokens) is int and type(config.temperature) is float and type(config.do_sample) is bool
    json.dumps(config.to_dict())  # plain Python values: serialisable


def test_decoding_config_round_trip():
    config = DecodingConfig(max_new_tokens=9, do_sample=True, temperature=0.5, top_k=4, top_p=0.8, seed=7)
    assert DecodingConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ValueError, match="unknown decoding settings"):
        DecodingConfig.from_dict({"beams": 3})


def test_token_probs_and_len():
    trace = make_trace([0.0, np.log(2)])
    assert len(trace) == 2
    np.testing.assert_allclose(trace.token_probs, [1.0, 0.5])


def test_trace_without_entropy():
    absent = TraceMetadata(source="imported", entropy_source="absent")
    trace = Trace(prompt="", answer="ab", token_ids=[1, 2], tokens=("a", "b"), surprisal=[0.0, 2.0], entropy=None,
                  top_ids=[], top_logprobs=[], metadata=absent)
    assert not trace.has_entropy and trace.entropy is None and full_trace().has_entropy
    assert Trace.from_json(trace.to_json()) == trace and trace.to_dict()["entropy"] is None
    assert trace != Trace.from_dict({**trace.to_dict(), "entropy": [0.0, 0.0], "metadata": {}})
    assert trace.nbytes == 2 * 8 * 2
    assert full_trace().nbytes == 3 * 8 * 3 + 2 * 3 * 2 * 8 + 3 * 8  # ids, s, H; top ids and log-probs; ranks
    with pytest.raises(ValueError, match="`entropy` is None but `metadata.entropy_source` is 'exact'"):
        Trace.from_dict({**trace.to_dict(), "metadata": {}})


def test_entropy_sources_old_names_and_k():
    assert TraceMetadata(entropy_source="full_vocabulary").entropy_source == "exact"
    assert TraceMetadata.from_dict({"entropy_source": "top_k_approximation"}).entropy_source == "top_k"
    trace = Trace.from_dict({**full_trace().to_dict(), "metadata": {"entropy_source": "top_k_approximation"}})
    assert trace.metadata.entropy_k == 2  # filled from the top-k width
    assert TraceMetadata.from_dict(trace.metadata.to_dict()) == trace.metadata
    with pytest.raises(ValueError, match="`entropy_k` is 3 but `entropy_source` is 'absent'"):
        TraceMetadata(entropy_source="absent", entropy_k=3)
    with pytest.raises(TypeError, match="`entropy_k` must be an int >= 1"):
        TraceMetadata(entropy_source="top_k", entropy_k=2.0)
