"""A real vLLM server against the local Hugging Face path, on the same tiny random-weight GPT-2.

Each test compares what comes over HTTP with an independent local computation (``load_model`` of the same folder,
then ``generate_traces`` or ``score_answers``): first the server's raw responses, then the traces of
``connect_server``. Skipped unless ``TRACE_VLLM_PYTHON`` names a Python with vLLM (see conftest.py).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from serving import connect

from bench.server_throughput import SERVED_NAME, post_json
from trace_core import DecodingConfig, generate_traces, score_answers
from trace_core.record import context_length, encode_prompt

PROMPTS = [
    "Q: What is 12 plus 7? A:",
    "Q: What is the capital of France? A:",
    "The quick brown fox",
    "Numbers: 0 1 2 3",
    "Unicode: café naïve",
    "Line one\nLine two\n\t",
    "Q: What is 100 plus 1000? A:",
    "The lazy dog jumps over",
]
# Existing answers to score, not the model's own (so that surprisal is high on some tokens).
ANSWERS = [" 19", " Paris", " jumps over the lazy dog.", " 4 5 6 7 8 9", " 日本語 emoji 🙂 done.",
           "Tabbed <b>bold</b> $x$", " 1100", " the quick brown fox."]
CONFIG = DecodingConfig(max_new_tokens=24, n_alternatives=5)
ATOL = 1e-4


@pytest.fixture(scope="module")
def local_generated(local):
    return generate_traces(local, PROMPTS, config=CONFIG)


@pytest.fixture(scope="module")
def local_scored(local):
    return score_answers(local, PROMPTS, ANSWERS, n_alternatives=5)


@pytest.fixture(scope="module")
def full(server_url, model_dir):
    """The server asked for every log-probability: exact entropy."""
    return connect(server_url, model_dir, full_distribution=True, top_logprobs=5)


def _entropy(logprobs: dict) -> float:
    values = np.array(list(logprobs.values()), dtype=np.float64)
    return float(-(np.exp(values) * values).sum())


def _close(a, b) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=0.0, atol=ATOL))


# ---------------------------------------------------------------------------------------------------------------------
# The server's own responses (no client library in between)


def test_raw_completions_with_full_distribution_match_local_generation(server_url, local, local_generated):
    vocab = local.model.config.vocab_size
    for prompt, trace in zip(PROMPTS, local_generated, strict=True):
        body = {"model": SERVED_NAME, "prompt": encode_prompt(local.tokenizer, prompt), "temperature": 0.0,
                "max_tokens": CONFIG.max_new_tokens, "logprobs": -1, "return_tokens_as_token_ids": True}
        choice = json.loads(post_json(f"{server_url}/v1/completions", body))["choices"][0]
        logprobs = choice["logprobs"]
        ids = [int(t.removeprefix("token_id:")) for t in logprobs["tokens"]]
        steps = len(trace)
        if choice["finish_reason"] == "stop":  # the server keeps the EOS token; a trace stops before it
            assert ids[steps:] == [local.tokenizer.eos_token_id]
        assert ids[:steps] == trace.token_ids.tolist(), prompt
        assert all(len(top) == vocab for top in logprobs["top_logprobs"][:steps])
        chosen = -np.array(logprobs["token_logprobs"][:steps])
        entropy = np.array([_entropy(top) for top in logprobs["top_logprobs"][:steps]])
        assert _close(chosen, trace.surprisal) and _close(entropy, trace.entropy), prompt
        for top in logprobs["top_logprobs"][:steps]:  # a distribution: sums to 1
            assert math.isclose(sum(math.exp(v) for v in top.values()), 1.0, abs_tol=1e-4)


def test_raw_prompt_logprobs_match_local_teacher_forcing(server_url, local, local_scored):
    for prompt, answer, trace in zip(PROMPTS, ANSWERS, local_scored, strict=True):
        prompt_ids = encode_prompt(local.tokenizer, prompt)
        answer_ids = local.tokenizer(answer, add_special_tokens=False)["input_ids"]
        body = {"model": SERVED_NAME, "prompt": prompt_ids + answer_ids, "max_tokens": 1, "temperature": 0.0,
                "prompt_logprobs": -1}
        choice = json.loads(post_json(f"{server_url}/v1/completions", body))["choices"][0]
        answer_part = choice["prompt_logprobs"][len(prompt_ids):]
        assert answer_ids == trace.token_ids.tolist() and len(answer_part) == len(answer_ids)
        chosen = -np.array([entry[str(t)]["logprob"] for entry, t in zip(answer_part, answer_ids, strict=True)])
        entropy = np.array([_entropy({k: v["logprob"] for k, v in entry.items()}) for entry in answer_part])
        ranks = np.array([entry[str(t)]["rank"] for entry, t in zip(answer_part, answer_ids, strict=True)])
        assert _close(chosen, trace.surprisal) and _close(entropy, trace.entropy), answer
        assert np.array_equal(ranks, trace.ranks), answer  # both count from 1


# ---------------------------------------------------------------------------------------------------------------------
# connect_server's traces


def test_server_model_reads_the_server_context_and_vocabulary(full, local):
    assert context_length(full) == 256  # the server's --max-model-len
    assert full.vocab_size == local.vocab_size


def test_greedy_answers_through_the_server_equal_local_generation(full, local_generated):
    remote = generate_traces(full, PROMPTS, config=CONFIG)
    for prompt, r, loc in zip(PROMPTS, remote, local_generated, strict=True):
        assert r.token_ids.tolist() == loc.token_ids.tolist(), prompt
        assert r.answer == loc.answer and r.tokens == loc.tokens, prompt
        assert r.metadata.extra.get("finish_reason") == loc.metadata.extra.get("finish_reason"), prompt


def test_full_distribution_surprisal_and_entropy_equal_the_local_recorder(full, local_generated):
    remote = generate_traces(full, PROMPTS, config=CONFIG)
    for prompt, r, loc in zip(PROMPTS, remote, local_generated, strict=True):
        assert r.metadata.entropy_source == "exact", prompt
        assert _close(r.surprisal, loc.surprisal) and _close(r.entropy, loc.entropy), prompt
        assert _close(r.top_logprobs, loc.top_logprobs), prompt
        assert np.array_equal(r.ranks, loc.ranks), prompt


def test_scoring_through_prompt_logprobs_equals_local_teacher_forcing(full, local_scored):
    remote = score_answers(full, PROMPTS, ANSWERS, n_alternatives=5)
    for answer, r, loc in zip(ANSWERS, remote, local_scored, strict=True):
        assert r.metadata.source == "teacher_forced" and r.metadata.entropy_source == "exact", answer
        assert r.token_ids.tolist() == loc.token_ids.tolist(), answer
        assert _close(r.surprisal, loc.surprisal) and _close(r.entropy, loc.entropy), answer
        assert _close(r.top_logprobs, loc.top_logprobs), answer


def test_scoring_generated_token_ids_equals_their_generation(full, local_generated):
    # token ids, not text: the exact tokens generated, scored again through the server
    remote = score_answers(full, PROMPTS, [t.token_ids.tolist() for t in local_generated], n_alternatives=5)
    for prompt, r, loc in zip(PROMPTS, remote, local_generated, strict=True):
        assert r.token_ids.tolist() == loc.token_ids.tolist(), prompt
        assert _close(r.surprisal, loc.surprisal) and _close(r.entropy, loc.entropy), prompt


def test_chat_generation_equals_local_generation_with_the_chat_template(server_url, model_dir, local):
    """Through /v1/chat/completions the server applies its chat template to the prompt's text: the same answers
    and numbers as the local model reading the prompt through the local chat template."""
    config = DecodingConfig(max_new_tokens=24, n_alternatives=5, chat_template=True)
    expected = generate_traces(local, PROMPTS, config=config)
    chat = connect(server_url, model_dir, full_distribution=True, top_logprobs=5, api="chat")
    remote = generate_traces(chat, PROMPTS, config=config)
    for prompt, r, loc in zip(PROMPTS, remote, expected, strict=True):
        assert r.token_ids.tolist() == loc.token_ids.tolist(), prompt
        assert r.answer == loc.answer and r.tokens == loc.tokens, prompt
        assert r.metadata.extra["finish_reason"] == loc.metadata.extra["finish_reason"], prompt
        # the server's count of the templated prompt equals the local template's
        assert r.metadata.extra["prompt_tokens"] == loc.metadata.extra["prompt_tokens"], prompt
        assert r.metadata.extra["api"] == "chat" and r.metadata.chat_template is True
        assert r.metadata.entropy_source == "exact", prompt
        assert _close(r.surprisal, loc.surprisal) and _close(r.entropy, loc.entropy), prompt
        assert _close(r.top_logprobs, loc.top_logprobs) and np.array_equal(r.top_ids, loc.top_ids), prompt
        assert np.array_equal(r.ranks, loc.ranks), prompt


def test_chat_sampling_top_k_equals_local_teacher_forcing(server_url, model_dir, local):
    """Sampled through chat with the top 2: the numbers of the drawn tokens are those of local teacher forcing, and
    a drawn token outside the top 2 leaves the top 2 intact (rank capped at 3)."""
    k = 2
    config = DecodingConfig(max_new_tokens=24, n_alternatives=k, do_sample=True, temperature=1.5, seed=3,
                            chat_template=True)
    chat = connect(server_url, model_dir, top_logprobs=k, api="chat")
    remote = generate_traces(chat, PROMPTS, config=config)
    scored = score_answers(local, PROMPTS, [r.token_ids.tolist() for r in remote], n_alternatives=k,
                           chat_template=True)
    outside = 0
    for prompt, r, loc in zip(PROMPTS, remote, scored, strict=True):
        assert r.token_ids.tolist() == loc.token_ids.tolist(), prompt
        assert _close(r.surprisal, loc.surprisal) and _close(r.top_logprobs, loc.top_logprobs), prompt
        assert np.array_equal(r.top_ids, loc.top_ids), prompt
        assert np.array_equal(r.ranks, np.minimum(loc.ranks, k + 1)), prompt
        lower = np.asarray(r.metadata.extra["entropy_lower"])
        upper = np.asarray(r.metadata.extra["entropy_upper"])
        assert np.all(lower <= loc.entropy + ATOL) and np.all(loc.entropy <= upper + ATOL), prompt
        outside += int((loc.ranks > k).sum())
    assert outside > 0  # the case where the chat endpoint would have dropped the k-th alternative happened


def _assert_within_bounds(remote, local_traces, k, vocab):
    checked = 0
    for r, loc in zip(remote, local_traces, strict=True):
        assert r.metadata.entropy_source == "top_k" and r.metadata.entropy_k == k
        lower = np.asarray(r.metadata.extra["entropy_lower"], dtype=np.float64)
        upper = np.asarray(r.metadata.extra["entropy_upper"], dtype=np.float64)
        assert lower.shape == upper.shape == loc.entropy.shape
        assert np.all(lower >= 0) and np.all(upper <= math.log(vocab) + ATOL)  # bounds, not wider than [0, log V]
        assert np.all(lower <= loc.entropy + ATOL), (lower - loc.entropy).max()
        assert np.all(loc.entropy <= upper + ATOL), (loc.entropy - upper).max()
        assert _close(r.surprisal, loc.surprisal)
        checked += len(loc)
    assert checked > 0


def test_top_k_bounds_hold_the_exact_entropy_in_generation(server_url, model_dir, local_generated):
    top5 = connect(server_url, model_dir, top_logprobs=5)
    remote = generate_traces(top5, PROMPTS, config=CONFIG)
    assert [r.token_ids.tolist() for r in remote] == [t.token_ids.tolist() for t in local_generated]
    _assert_within_bounds(remote, local_generated, 5, top5.vocab_size)


def test_top_k_bounds_hold_the_exact_entropy_in_scoring(server_url, model_dir, local_scored):
    top5 = connect(server_url, model_dir, top_logprobs=5)
    _assert_within_bounds(score_answers(top5, PROMPTS, ANSWERS, n_alternatives=5), local_scored, 5, top5.vocab_size)


@pytest.mark.parametrize("full_distribution", [False, True], ids=["top-5", "full"])
def test_concurrency_1_and_4_give_identical_traces(server_url, model_dir, full_distribution):
    one, four = (connect(server_url, model_dir, top_logprobs=5, full_distribution=full_distribution,
                         concurrency=c) for c in (1, 4))
    assert generate_traces(one, PROMPTS, config=CONFIG) == generate_traces(four, PROMPTS, config=CONFIG)
    assert score_answers(one, PROMPTS, ANSWERS) == score_answers(four, PROMPTS, ANSWERS)


@pytest.mark.parametrize("api", ["completions", "chat"])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "seeded-sampling"])
@pytest.mark.parametrize("full_distribution", [False, True], ids=["top-5", "full"])
def test_streamed_traces_equal_non_streamed(server_url, model_dir, api, sampled, full_distribution):
    """vLLM's stream (server-sent events, per-chunk log-probabilities) ends with the trace of the same request
    answered at once, and it did stream: the answer grew over several chunks first."""
    from trace_core import generate_trace
    from trace_core.record import stream_trace

    sm = connect(server_url, model_dir, top_logprobs=5, full_distribution=full_distribution, api=api)
    config = DecodingConfig(max_new_tokens=24, n_alternatives=5, do_sample=sampled, temperature=1.5, seed=3,
                            chat_template=api == "chat")
    for prompt in PROMPTS[:3]:
        expected = generate_trace(sm, prompt, config=config)
        streamed = list(stream_trace(sm, prompt, config=config))
        assert streamed[-1] == expected, prompt
        if len(expected) >= 3:
            assert len(streamed) >= 3, prompt
        for partial in streamed[:-1]:
            assert partial.metadata.extra["finish_reason"] == "stopped"
            assert partial.token_ids.tolist() == expected.token_ids[:len(partial)].tolist(), prompt
