"""The backend seam: the public recording functions need nothing from a backend but the Backend protocol."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from trace_core import DecodingConfig, generate_traces, score_answers  # noqa: E402
from trace_core.record import beam_logprobs, context_length  # noqa: E402
from trace_core.record.backends import HuggingFaceBackend, RecordedAnswer, backend_of  # noqa: E402


class FixedBackend:
    """A backend that runs no model: every answer is the token ids 5, 6, 7 with made-up statistics.

    Its log-probabilities are a hair above 0 in places, as float32 rounding can leave them, to check the clipping.
    """

    model_id = "fixed-backend"

    def __init__(self, tokenizer, limit=None):
        self.tokenizer = tokenizer
        self.limit = limit
        self.calls = []

    @property
    def vocab_size(self):
        return 400

    def context_length(self):
        return self.limit

    def check_generate_options(self, options):
        if "forbidden" in options:
            raise ValueError("this backend cannot trace `forbidden`")

    def _answer(self, ids, **fields):
        n = len(ids)
        return RecordedAnswer(token_ids=np.asarray(ids), chosen_logprobs=np.array([1e-7, -1.0, -2.0][:n]),
                              entropy=np.array([-1e-7, 0.5, 1.5][:n]), top_logprobs=np.full((n, 2), 1e-7),
                              top_ids=np.tile([5, 9], (n, 1)), ranks=np.ones(n, dtype=np.int64), **fields)

    def generate(self, prompt_ids, config, options, *, seed_offset):
        self.calls.append(("generate", [list(p) for p in prompt_ids], seed_offset))
        return [self._answer([5, 6, 7], processed=True, finish_reason="length") for _ in prompt_ids]

    def score(self, prompt_ids, answer_ids, *, n_alternatives, max_logits_bytes):
        self.calls.append(("score", [list(a) for a in answer_ids], n_alternatives))
        return [self._answer(list(a)) for a in answer_ids]

    def beam_logprobs(self, prompt_ids, *, num_beams, max_new_tokens):
        return [-float(i) for i in range(1, num_beams + 1)]


@pytest.fixture
def fixed(tiny_models, monkeypatch):
    backend = FixedBackend(tiny_models["gpt2"].tokenizer)
    for module in ("generate", "teacher", "beam", "tokens"):
        monkeypatch.setattr(f"trace_core.record.{module}.backend_of", lambda lm: backend)
    return backend


def test_generation_goes_through_the_backend_and_one_trace_builder(fixed):
    traces = generate_traces(object(), ["Q: 1", "Q: 22", "Q: 333"], config=DecodingConfig(n_alternatives=2),
                             batch_size=2)
    assert [c[0] for c in fixed.calls] == ["generate", "generate"]
    assert [c[2] for c in fixed.calls] == [0, 2]  # seed offsets: the first prompt of each batch
    assert [len(c[1]) for c in fixed.calls] == [2, 1]
    for trace in traces:
        np.testing.assert_array_equal(trace.token_ids, [5, 6, 7])
        assert trace.answer == "".join(trace.tokens) == fixed.tokenizer.decode([5, 6, 7])
        np.testing.assert_array_equal(trace.surprisal, [0.0, 1.0, 2.0])  # -log p clipped at 0
        np.testing.assert_array_equal(trace.entropy, [0.0, 0.5, 1.5])
        assert (trace.top_logprobs == 0.0).all()
        meta = trace.metadata
        assert (meta.model_id, meta.source, meta.processed) == ("fixed-backend", "generate", True)
        assert meta.entropy_source == "exact"  # RecordedAnswer's default: a local model's full distribution
        assert meta.extra["finish_reason"] == "length" and meta.decoding == DecodingConfig(n_alternatives=2).to_dict()
    assert [t.metadata.extra["prompt_tokens"] for t in traces] == [
        len(fixed.tokenizer(p)["input_ids"]) for p in ["Q: 1", "Q: 22", "Q: 333"]]


def test_scoring_goes_through_the_backend_in_input_order(fixed):
    traces = score_answers(object(), ["Q: a", "Q: b"], [[5, 6, 7], [8]], n_alternatives=2)
    assert fixed.calls[0][0] == "score" and fixed.calls[0][2] == 2
    assert [t.token_ids.tolist() for t in traces] == [[5, 6, 7], [8]]
    for trace in traces:
        meta = trace.metadata
        assert (meta.source, meta.processed, meta.decoding) == ("teacher_forced", False, {})
        assert "finish_reason" not in meta.extra


def test_backend_options_context_and_beams(fixed):
    with pytest.raises(ValueError, match="cannot trace `forbidden`"):
        generate_traces(object(), ["Q"], generate_kwargs={"forbidden": 1})
    assert context_length(object()) is None
    fixed.limit = 4
    assert context_length(object()) == 4
    with pytest.raises(ValueError, match="at most 4"):
        generate_traces(object(), ["Q: 1"], config=DecodingConfig(max_new_tokens=8))
    assert fixed.calls == []  # refused before the backend ran
    assert beam_logprobs(object(), ["Q", "R"], num_beams=3) == [[-1.0, -2.0, -3.0]] * 2


def test_a_loaded_model_runs_on_the_hugging_face_backend(tiny_models):
    lm = tiny_models["gpt2"]
    backend = backend_of(lm)
    assert isinstance(backend, HuggingFaceBackend)
    assert (backend.model_id, backend.tokenizer, backend.vocab_size) == (lm.model_id, lm.tokenizer, lm.vocab_size)
    assert backend.context_length() == context_length(lm) == lm.model.config.max_position_embeddings


def test_a_backend_without_entropy_gives_traces_that_say_so(fixed, monkeypatch):
    """A backend that knows only the chosen tokens' log-probabilities (a server without top_logprobs)."""
    def chosen_only(ids, **fields):
        n = len(ids)
        return RecordedAnswer(token_ids=np.asarray(ids), chosen_logprobs=np.array([0.0, -1.0, -2.0][:n]),
                              entropy=None, top_logprobs=np.zeros((n, 0)), top_ids=np.zeros((n, 0), dtype=np.int64),
                              ranks=np.ones(n, dtype=np.int64), entropy_source="absent", **fields)

    monkeypatch.setattr(fixed, "_answer", chosen_only)
    trace = score_answers(object(), ["Q: a"], [[5, 6, 7]], n_alternatives=0)[0]
    assert trace.entropy is None and trace.metadata.entropy_source == "absent"
    np.testing.assert_array_equal(trace.surprisal, [0.0, 1.0, 2.0])
    assert RecordedAnswer(token_ids=np.zeros(0), chosen_logprobs=np.zeros(0), entropy=np.zeros(0),
                          top_logprobs=np.zeros((0, 0)), top_ids=np.zeros((0, 0)),
                          ranks=np.zeros(0)).entropy_source == "exact"


def test_alternatives_text_comes_from_the_backend_or_from_the_tokenizer(fixed, monkeypatch):
    tok = fixed.tokenizer
    trace = score_answers(object(), ["Q: a"], [[5, 6, 7]], n_alternatives=2)[0]
    first = tuple(tok.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False) for i in (5, 9))
    assert trace.top_tokens[0] == first and len(trace.top_tokens) == 3  # decoded with the backend's tokenizer

    given = (("x", " y"), ("\n", "é"), ("", "z"))
    answer = fixed._answer
    monkeypatch.setattr(fixed, "_answer", lambda ids, **fields: answer(ids, top_tokens=given, **fields))
    trace = generate_traces(object(), ["Q: 1"], config=DecodingConfig(n_alternatives=2))[0]
    assert trace.top_tokens == given  # a backend that knows the texts is believed
