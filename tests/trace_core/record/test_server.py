"""Recording through an OpenAI-compatible model server (vLLM's shapes), against the same weights run locally.

The server is an in-process fake (tests/fake_server.py) on 127.0.0.1 that runs the tiny models with its own torch
code; every comparison is with ``trace_core``'s local recorder or with an independent computation.
"""

from __future__ import annotations

import json
import math
import socket
import threading

import numpy as np
import pytest

pytest.importorskip("torch")

from fake_server import FakeServer, fast_backoff, serve  # noqa: E402, F401 (fixtures)

from trace_core import DecodingConfig, generate_traces, load_model, score_answers  # noqa: E402
from trace_core.policy import fit_new_tokens, rows_over_context  # noqa: E402
from trace_core.record import (  # noqa: E402
    ServerError,
    ServerModel,
    beam_logprobs,
    connect_server,
    context_length,
    encode_prompt,
)
from trace_core.traces.logprobs import entropy_from_top_k, top_k_entropy_bounds  # noqa: E402

PROMPTS = ["Q: What is 12 plus 7? A:", "The quick brown", "Unicode: caf", "Numbers: 0 1 2"]
ANSWERS = [" 19", " fox jumps over", "é naïve 日本", " 3 4 5 6 7"]
KEY = "sk-test-0123456789abcdef"


pytestmark = pytest.mark.usefixtures("fast_backoff")


def _connect(fake, folder, **options):
    return connect_server(fake.url, fake.served_name, tokenizer=str(folder), **options)


# ----------------------------------------------------------------------------------------------------------------
# The same numbers as a local model


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_greedy_generation_equals_local(arch, tiny_model_dirs, tiny_models, serve):
    folder, lm = tiny_model_dirs[arch], tiny_models[arch]
    fake = serve(folder)
    sm = _connect(fake, folder, full_distribution=True)
    config = DecodingConfig(max_new_tokens=10, n_alternatives=4)
    local = generate_traces(lm, PROMPTS, config=config)
    served = generate_traces(sm, PROMPTS, config=config)
    for a, b in zip(local, served, strict=True):
        assert b.prompt == a.prompt
        np.testing.assert_array_equal(b.token_ids, a.token_ids)
        assert b.tokens == a.tokens and b.answer == a.answer
        np.testing.assert_allclose(b.surprisal, a.surprisal, atol=1e-4)
        np.testing.assert_allclose(b.entropy, a.entropy, atol=1e-4)
        np.testing.assert_array_equal(b.top_ids, a.top_ids)
        np.testing.assert_allclose(b.top_logprobs, a.top_logprobs, atol=1e-4)
        np.testing.assert_array_equal(b.ranks, a.ranks)
        assert b.top_tokens == a.top_tokens
        assert b.metadata.entropy_source == "exact" and b.metadata.processed is False
        assert b.metadata.model_id == "tiny" and b.metadata.decoding == a.metadata.decoding
        extra = b.metadata.extra
        assert extra["finish_reason"] == a.metadata.extra["finish_reason"]
        assert extra["vocab_size"] == a.metadata.extra["vocab_size"] == lm.vocab_size
        assert extra["prompt_tokens"] == a.metadata.extra["prompt_tokens"]
        assert (extra["api"], extra["base_url"], extra["logprobs_mode"]) == ("completions", fake.url,
                                                                             "raw (server default)")
        assert "entropy_lower" not in extra
    # Each prompt went as the token ids the local model read, and the full distribution as V entries (vLLM's
    # completions endpoint would keep nothing of logprobs=-1).
    assert sorted(body["prompt"] for body in fake.bodies) == sorted(encode_prompt(lm.tokenizer, p) for p in PROMPTS)
    assert all(body["logprobs"] == lm.vocab_size and body["temperature"] == 0.0 for body in fake.bodies)
    assert all(body["return_tokens_as_token_ids"] is True for body in fake.bodies)


def _stopping_at(eos: int, tiny_model_dirs, tiny_models, folder):
    """The tiny GPT-2 saved to ``folder`` with ``eos`` as its end-of-answer token, loaded back."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_model_dirs["gpt2"]))
    model.generation_config.eos_token_id = eos
    model.save_pretrained(folder)
    tiny_models["gpt2"].tokenizer.save_pretrained(folder)
    return load_model(folder, device="cpu")


def test_generation_stops_before_eos_as_local(tiny_model_dirs, tiny_models, serve, tmp_path):
    """A model whose end-of-answer token is one that greedy decoding reaches: both stop before it."""
    first = generate_traces(tiny_models["gpt2"], PROMPTS[:1], config=DecodingConfig(max_new_tokens=6))[0]
    eos = int(first.token_ids[3])
    stop_at = int(np.flatnonzero(first.token_ids == eos)[0])
    local_lm = _stopping_at(eos, tiny_model_dirs, tiny_models, tmp_path)
    fake = serve(tmp_path)
    sm = _connect(fake, tmp_path, full_distribution=True)
    config = DecodingConfig(max_new_tokens=6, n_alternatives=2)
    a = generate_traces(local_lm, PROMPTS[:1], config=config)[0]
    b = generate_traces(sm, PROMPTS[:1], config=config)[0]
    assert len(a) == stop_at and a.metadata.extra["finish_reason"] == "eos"
    np.testing.assert_array_equal(b.token_ids, a.token_ids)
    np.testing.assert_allclose(b.entropy, a.entropy, atol=1e-4)
    assert b.metadata.extra["finish_reason"] == "eos"


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_scoring_equals_local_teacher_forcing(arch, tiny_model_dirs, tiny_models, serve):
    folder, lm = tiny_model_dirs[arch], tiny_models[arch]
    fake = serve(folder)
    sm = _connect(fake, folder, full_distribution=True)
    answers = ANSWERS + [""]
    prompts = PROMPTS + ["An empty answer:"]
    local = score_answers(lm, prompts, answers, n_alternatives=3)
    served = score_answers(sm, prompts, answers, n_alternatives=3)
    for a, b in zip(local, served, strict=True):
        np.testing.assert_array_equal(b.token_ids, a.token_ids)
        np.testing.assert_allclose(b.surprisal, a.surprisal, atol=1e-4)
        np.testing.assert_allclose(b.entropy, a.entropy, atol=1e-4)
        np.testing.assert_array_equal(b.top_ids, a.top_ids)
        np.testing.assert_array_equal(b.ranks, a.ranks)
        assert b.metadata.source == "teacher_forced" and b.metadata.entropy_source == "exact"
    assert len(served[-1]) == 0
    assert len(fake.bodies) == len(ANSWERS)  # no request for the empty answer
    assert all(body["max_tokens"] == 1 and body["prompt_logprobs"] == -1 for body in fake.bodies)
    sent = {tuple(body["prompt"]) for body in fake.bodies}
    expected = {tuple(encode_prompt(lm.tokenizer, p) + lm.tokenizer(a, add_special_tokens=False)["input_ids"])
                for p, a in zip(PROMPTS, ANSWERS, strict=True)}
    assert sent == expected


def test_top_k_bounds_contain_the_exact_entropy(tiny_model_dirs, tiny_models, serve):
    folder, lm = tiny_model_dirs["gpt2"], tiny_models["gpt2"]
    fake = serve(folder)
    k = 3
    sm = _connect(fake, folder, top_logprobs=k)
    config = DecodingConfig(max_new_tokens=12, n_alternatives=2)
    pairs = [(generate_traces(lm, PROMPTS, config=config), generate_traces(sm, PROMPTS, config=config)),
             (score_answers(lm, PROMPTS, ANSWERS, n_alternatives=2),
              score_answers(sm, PROMPTS, ANSWERS, n_alternatives=2))]
    checked = 0
    for local, served in pairs:
        for a, b in zip(local, served, strict=True):
            np.testing.assert_array_equal(b.token_ids, a.token_ids)
            np.testing.assert_allclose(b.surprisal, a.surprisal, atol=1e-4)
            np.testing.assert_array_equal(b.top_ids, a.top_ids)
            np.testing.assert_array_equal(b.ranks, np.minimum(a.ranks, k + 1) if b.metadata.source == "generate"
                                          else a.ranks)  # teacher forcing: vLLM gives the exact rank
            assert b.metadata.entropy_source == "top_k" and b.metadata.entropy_k == k
            lower = np.array(b.metadata.extra["entropy_lower"])
            upper = np.array(b.metadata.extra["entropy_upper"])
            assert lower.shape == upper.shape == (len(a),)
            assert np.all(lower <= a.entropy + 1e-5) and np.all(a.entropy <= upper + 1e-5)
            assert np.all(b.entropy <= lower + 1e-9)  # one bucket for the rest: the loosest lower bound
            assert np.all(b.entropy < a.entropy)  # a random tiny model spreads mass beyond its top 3
            checked += len(a)
    assert checked > 30
    assert all(body.get("logprobs", body.get("prompt_logprobs")) == k for body in fake.bodies)


def test_top_k_ranks_outside_are_capped_and_said(tiny_model_dirs, tiny_models, serve):
    """Sampled tokens outside the top k get rank k + 1, and the trace says so."""
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder)
    sm = _connect(fake, folder, top_logprobs=1)
    config = DecodingConfig(max_new_tokens=24, do_sample=True, seed=3, n_alternatives=1)
    traces = generate_traces(sm, PROMPTS, config=config)
    ranks = np.concatenate([t.ranks for t in traces])
    assert set(ranks.tolist()) == {1, 2}  # sampling from a flat distribution leaves the top 1 often
    for t in traces:
        in_top = t.top_ids[:, 0] == t.token_ids
        np.testing.assert_array_equal(t.ranks, np.where(in_top, 1, 2))
        assert t.metadata.extra.get("ranks_capped_at") == (2 if (~in_top).any() else None)


def test_sampling_seeds_are_per_prompt_and_reproducible(tiny_model_dirs, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder)
    sm = _connect(fake, folder)
    config = DecodingConfig(max_new_tokens=8, do_sample=True, temperature=0.8, top_k=50, top_p=0.9, seed=11)
    first = generate_traces(sm, PROMPTS, config=config, batch_size=3)
    again = generate_traces(sm, PROMPTS, config=config, batch_size=1)
    assert [t.token_ids.tolist() for t in first] == [t.token_ids.tolist() for t in again]
    bodies = fake.bodies[:len(PROMPTS)]
    assert sorted(b["seed"] for b in bodies) == [11, 12, 13, 14]
    assert all((b["temperature"], b["top_k"], b["top_p"]) == (0.8, 50, 0.9) for b in bodies)
    assert all(b["repetition_penalty"] == 1.0 for b in bodies)


def test_chat_template_is_applied_locally(tiny_model_dirs, tiny_models, serve):
    folder, lm = tiny_model_dirs["gpt2"], tiny_models["gpt2"]
    fake = serve(folder)
    sm = _connect(fake, folder, full_distribution=True)
    config = DecodingConfig(max_new_tokens=4, chat_template=True)
    a = generate_traces(lm, ["Hello"], config=config)[0]
    b = generate_traces(sm, ["Hello"], config=config)[0]
    assert fake.bodies[0]["prompt"] == encode_prompt(lm.tokenizer, "Hello", chat_template=True)
    np.testing.assert_array_equal(b.token_ids, a.token_ids)
    assert b.metadata.chat_template is True


# ----------------------------------------------------------------------------------------------------------------
# Generation through the chat endpoint (the server applies its chat template)


def _assert_same_numbers(b, a, *, entropy=True):
    np.testing.assert_array_equal(b.token_ids, a.token_ids)
    assert b.tokens == a.tokens and b.answer == a.answer
    np.testing.assert_allclose(b.surprisal, a.surprisal, atol=1e-4)
    if entropy:
        np.testing.assert_allclose(b.entropy, a.entropy, atol=1e-4)
    np.testing.assert_array_equal(b.top_ids, a.top_ids)
    np.testing.assert_allclose(b.top_logprobs, a.top_logprobs, atol=1e-4)


def _with_chat_template(arch, tiny_model_dirs, tiny_models, tmp_path):
    """The tiny model's folder and local model, with a chat template: Llama's starts with its BOS token (so a
    server that added special tokens too would read it twice)."""
    if arch == "gpt2":
        return tiny_model_dirs[arch], tiny_models[arch]
    import shutil

    import transformers

    shutil.copytree(tiny_model_dirs[arch], tmp_path, dirs_exist_ok=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    tokenizer.chat_template = ("{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>"
                               "{{ message['content'] }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>"
                               "{% endif %}")
    tokenizer.save_pretrained(tmp_path)
    return tmp_path, load_model(tmp_path, device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_chat_greedy_generation_equals_local_with_the_chat_template(arch, tiny_model_dirs, tiny_models, serve,
                                                                    tmp_path):
    folder, lm = _with_chat_template(arch, tiny_model_dirs, tiny_models, tmp_path)
    if arch == "llama":  # one BOS, from the template
        assert encode_prompt(lm.tokenizer, PROMPTS[0], chat_template=True).count(lm.tokenizer.bos_token_id) == 1
    fake = serve(folder)
    sm = _connect(fake, folder, full_distribution=True, api="chat")
    assert sm.api == "chat" and "chat endpoint" in sm.describe()
    local = generate_traces(lm, PROMPTS, config=DecodingConfig(max_new_tokens=10, n_alternatives=4,
                                                               chat_template=True))
    # chat_template=False too: the server applies its template whatever the config says, never twice.
    served = generate_traces(sm, PROMPTS, config=DecodingConfig(max_new_tokens=10, n_alternatives=4))
    for a, b in zip(local, served, strict=True):
        _assert_same_numbers(b, a)
        np.testing.assert_array_equal(b.ranks, a.ranks)
        assert b.top_tokens == a.top_tokens
        assert b.metadata.entropy_source == "exact" and b.metadata.chat_template is True
        extra = b.metadata.extra
        assert extra["api"] == "chat" and extra["base_url"] == fake.url
        assert extra["finish_reason"] == a.metadata.extra["finish_reason"]
        assert extra["prompt_tokens"] == a.metadata.extra["prompt_tokens"]  # the server's count, the same here
    assert fake.paths == ["/v1/chat/completions"] * len(PROMPTS)
    assert sorted(json.dumps(body["messages"]) for body in fake.bodies) == sorted(
        json.dumps([{"role": "user", "content": p}]) for p in PROMPTS)  # the text, no local template
    for body in fake.bodies:
        assert "prompt" not in body and "<|user|>" not in body["messages"][0]["content"]
        assert (body["logprobs"], body["top_logprobs"], body["return_tokens_as_token_ids"]) == (True, -1, True)
        assert body["temperature"] == 0.0 and body["skip_special_tokens"] is False
        assert body["max_completion_tokens"] == body["max_tokens"] == 10
        assert body["repetition_penalty"] == 1.0 and "seed" not in body


def test_chat_stops_before_eos_as_local(tiny_model_dirs, tiny_models, serve, tmp_path):
    config = DecodingConfig(max_new_tokens=8, n_alternatives=2, chat_template=True)
    first = generate_traces(tiny_models["gpt2"], PROMPTS[:1], config=config)[0]
    eos = int(first.token_ids[3])
    local_lm = _stopping_at(eos, tiny_model_dirs, tiny_models, tmp_path)
    fake = serve(tmp_path)
    sm = _connect(fake, tmp_path, full_distribution=True, api="chat")
    a = generate_traces(local_lm, PROMPTS[:1], config=config)[0]
    b = generate_traces(sm, PROMPTS[:1], config=config)[0]
    assert a.metadata.extra["finish_reason"] == "eos" and len(a) <= 3
    _assert_same_numbers(b, a)
    assert b.metadata.extra["finish_reason"] == "eos" and eos not in b.token_ids.tolist()


def test_chat_top_k_greedy_equals_local_within_bounds(tiny_model_dirs, tiny_models, serve):
    folder, lm = tiny_model_dirs["gpt2"], tiny_models["gpt2"]
    fake = serve(folder)
    k = 3
    sm = _connect(fake, folder, top_logprobs=k, api="chat")
    config = DecodingConfig(max_new_tokens=12, n_alternatives=2, chat_template=True)
    local = generate_traces(lm, PROMPTS, config=config)
    served = generate_traces(sm, PROMPTS, config=config)
    for a, b in zip(local, served, strict=True):
        _assert_same_numbers(b, a, entropy=False)
        np.testing.assert_array_equal(b.ranks, a.ranks)  # greedy: every chosen token is the most likely
        assert b.metadata.entropy_source == "top_k" and b.metadata.entropy_k == k
        lower = np.array(b.metadata.extra["entropy_lower"])
        upper = np.array(b.metadata.extra["entropy_upper"])
        assert np.all(lower <= a.entropy + 1e-5) and np.all(a.entropy <= upper + 1e-5)
        assert "ranks_capped_at" not in b.metadata.extra
    assert all(body["top_logprobs"] == k for body in fake.bodies)  # greedy: k is enough


@pytest.mark.parametrize("k", [1, 3])
def test_chat_seeded_sampling_equals_completions_and_local_scoring(k, tiny_model_dirs, tiny_models, serve):
    """Sampled answers through chat: the same draws as through completions with the local template (the same
    seeds), and the numbers of local teacher forcing of the drawn tokens; a sampled token outside the top k does not
    push the k-th alternative out (k + 1 are asked)."""
    folder, lm = tiny_model_dirs["gpt2"], tiny_models["gpt2"]
    fake = serve(folder)
    config = DecodingConfig(max_new_tokens=16, do_sample=True, temperature=1.5, seed=5, n_alternatives=k,
                            chat_template=True)
    chat = generate_traces(_connect(fake, folder, top_logprobs=k, api="chat"), PROMPTS, config=config)
    chat_bodies = list(fake.bodies)
    plain = generate_traces(_connect(fake, folder, top_logprobs=k), PROMPTS, config=config)
    local = score_answers(lm, PROMPTS, [t.token_ids.tolist() for t in chat], n_alternatives=k, chat_template=True)
    outside = 0
    for c, p, a in zip(chat, plain, local, strict=True):
        np.testing.assert_array_equal(c.token_ids, p.token_ids)
        np.testing.assert_array_equal(c.top_ids, p.top_ids)
        np.testing.assert_array_equal(c.ranks, p.ranks)
        np.testing.assert_allclose(c.entropy, p.entropy, atol=1e-9)
        _assert_same_numbers(c, a, entropy=False)
        np.testing.assert_array_equal(c.ranks, np.minimum(a.ranks, k + 1))
        outside += int((a.ranks > k).sum())
        assert c.metadata.extra["api"] == "chat" and p.metadata.extra["api"] == "completions"
    assert outside > 0  # the case that needs the spare entry happened
    assert sorted(b["seed"] for b in chat_bodies) == [5, 6, 7, 8]
    assert all(b["top_logprobs"] == k + 1 and b["temperature"] == 1.5 and b["top_k"] == -1 for b in chat_bodies)


def test_chat_context_check_counts_the_local_template_as_an_estimate(tiny_model_dirs, tiny_models, serve):
    folder, lm = tiny_model_dirs["gpt2"], tiny_models["gpt2"]
    fake = serve(folder, max_model_len=40)
    sm = _connect(fake, folder, api="chat")
    templated = len(encode_prompt(lm.tokenizer, PROMPTS[0], chat_template=True))
    assert templated > len(encode_prompt(lm.tokenizer, PROMPTS[0]))
    with pytest.raises(ValueError, match=f"about {templated} tokens \\(estimated locally\\)"):
        generate_traces(sm, PROMPTS[:1], config=DecodingConfig(max_new_tokens=40 - templated + 1))
    assert fake.bodies == []
    trace = generate_traces(sm, PROMPTS[:1], config=DecodingConfig(max_new_tokens=40 - templated))[0]
    assert trace.metadata.extra["prompt_tokens"] == templated


def test_chat_without_a_template_anywhere_passes_the_servers_refusal(tiny_model_dirs, tiny_models, serve, tmp_path):
    """No chat template in the tokenizer: the context check counts the plain prompt, the request still carries the
    text, and the server's refusal is shown as it said it."""
    import transformers

    lm = tiny_models["gpt2"]
    transformers.AutoModelForCausalLM.from_pretrained(str(tiny_model_dirs["gpt2"])).save_pretrained(tmp_path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tiny_model_dirs["gpt2"]))
    tokenizer.chat_template = None
    tokenizer.save_pretrained(tmp_path)
    fake = serve(tmp_path, max_model_len=len(encode_prompt(lm.tokenizer, PROMPTS[0])) + 4)
    sm = _connect(fake, tmp_path, api="chat")
    with pytest.raises(ServerError, match=r"HTTP 400\): As of transformers v4.44, default chat template"):
        generate_traces(sm, PROMPTS[:1], config=DecodingConfig(max_new_tokens=4, chat_template=True))
    assert fake.bodies[0]["messages"] == [{"role": "user", "content": PROMPTS[0]}]


def test_chat_scoring_stays_on_completions(tiny_model_dirs, tiny_models, serve):
    folder, lm = tiny_model_dirs["gpt2"], tiny_models["gpt2"]
    fake = serve(folder)
    sm = _connect(fake, folder, full_distribution=True, api="chat")
    local = score_answers(lm, PROMPTS, ANSWERS, n_alternatives=3, chat_template=True)
    served = score_answers(sm, PROMPTS, ANSWERS, n_alternatives=3, chat_template=True)
    for a, b in zip(local, served, strict=True):
        _assert_same_numbers(b, a)
        assert b.metadata.extra["api"] == "completions"
    assert set(fake.paths) == {"/v1/completions"} and all(b["prompt_logprobs"] == -1 for b in fake.bodies)


def test_chat_caps_and_bad_answers_are_explained(tiny_model_dirs, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder, max_logprobs=5)
    greedy = DecodingConfig(max_new_tokens=2)
    sampled = DecodingConfig(max_new_tokens=2, do_sample=True, seed=0, n_alternatives=4)
    assert len(generate_traces(_connect(fake, folder, top_logprobs=5, api="chat"), PROMPTS[:1], config=greedy)[0])
    with pytest.raises(ServerError, match=r"at most 5 log-probabilities per token and 6 were asked \(top_logprobs "
                                          r"\+ 1.*connect with top_logprobs <= 4"):
        generate_traces(_connect(fake, folder, top_logprobs=5, api="chat"), PROMPTS[:1], config=sampled)
    assert len(generate_traces(_connect(fake, folder, top_logprobs=4, api="chat"), PROMPTS[:1], config=sampled)[0])
    with pytest.raises(ServerError, match="--max-logprobs -1"):
        generate_traces(_connect(fake, folder, full_distribution=True, api="chat"), PROMPTS[:1], config=greedy)
    sm = _connect(fake, folder, top_logprobs=2, api="chat")
    # A chat answer without log-probabilities, or with token texts instead of ids.
    fake.script = [("reply", {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"},
                                           "logprobs": None, "finish_reason": "length"}]})]
    with pytest.raises(ServerError, match="no log-probabilities"):
        generate_traces(sm, PROMPTS[:1], config=greedy)
    fake.script = [("reply", {"choices": [{"index": 0, "logprobs": {"content": [
        {"token": " x", "logprob": -1.0, "top_logprobs": [{"token": " x", "logprob": -1.0}]}]},
        "finish_reason": "length"}]})]
    with pytest.raises(ServerError, match="return_tokens_as_token_ids"):
        generate_traces(sm, PROMPTS[:1], config=greedy)
    with pytest.raises(ValueError, match="`api` must be one of 'completions', 'chat'"):
        connect_server(fake.url, "tiny", tokenizer=str(folder), api="responses")


# ----------------------------------------------------------------------------------------------------------------
# The entropy bounds


def test_top_k_entropy_bounds_hold_and_are_attained():
    """For random distributions over small vocabularies with their true top-k: lower <= H <= upper, and the two
    extreme tails (spread evenly, packed at the cap) reach the bounds."""
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(400):
        v = int(rng.integers(1, 9))
        p = rng.dirichlet(np.full(v, rng.choice([0.1, 1.0, 5.0])))
        p = np.sort(p)[::-1]
        for k in range(0, v + 1):
            top = p[:k]
            lower, upper = top_k_entropy_bounds(np.log(top)[None, :], v)
            h = float(-np.sum(p[p > 0] * np.log(p[p > 0])))
            assert lower[0] <= h + 1e-12 and h <= upper[0] + 1e-12
            assert entropy_from_top_k(np.log(top)[None, :])[0] <= lower[0] + 1e-12
            # The extremes, built by brute force over the unseen tokens.
            rest, unseen = 1.0 - top.sum(), v - k
            cap = top[-1] if k else 1.0
            if unseen and rest > 1e-12:
                even = np.concatenate([top, np.full(unseen, rest / unseen)])
                packed = np.zeros(unseen)
                left = rest
                for j in range(unseen):
                    packed[j] = min(cap, left)
                    left -= packed[j]
                packed = np.concatenate([top, packed])
                for q, bound in ((even, upper[0]), (packed, lower[0])):
                    assert math.isclose(q.sum(), 1.0, abs_tol=1e-9) and q[k:].max() <= cap + 1e-12
                    assert math.isclose(float(-np.sum(q[q > 0] * np.log(q[q > 0]))), bound, abs_tol=1e-9)
            checked += 1
    assert checked > 1000


def test_top_k_entropy_bounds_edge_cases():
    lower, upper = top_k_entropy_bounds(np.zeros((2, 0)), 8)  # nothing known: [0, log V]
    np.testing.assert_allclose(lower, 0.0, atol=1e-12)
    np.testing.assert_allclose(upper, math.log(8))
    lower, upper = top_k_entropy_bounds([[0.0]], 5)  # certain
    assert lower[0] == upper[0] == 0.0
    lower, upper = top_k_entropy_bounds([[math.log(0.6), math.log(0.41)]], 10)  # sums above 1 (rounding)
    assert lower[0] == upper[0]
    lower, upper = top_k_entropy_bounds([[math.log(0.5), -math.inf]], 10)  # k-th has nothing: neither has the rest
    assert lower[0] <= upper[0]
    with pytest.raises(ValueError, match="vocab_size"):
        top_k_entropy_bounds([[0.0, -1.0]], 1)
    with pytest.raises(ValueError, match="2-D"):
        top_k_entropy_bounds([0.0], 3)
    with pytest.raises(ValueError, match="log-probabilities"):
        top_k_entropy_bounds([[0.5]], 3)


# ----------------------------------------------------------------------------------------------------------------
# Connecting


def test_connect_reads_the_server_and_the_tokenizer(tiny_model_dirs, tiny_models, serve, monkeypatch):
    folder, lm = tiny_model_dirs["llama"], tiny_models["llama"]
    fake = serve(folder, max_model_len=64)
    sm = connect_server(fake.url + "/v1/", "tiny", tokenizer=str(folder), top_logprobs=7)
    assert isinstance(sm, ServerModel)
    assert sm.base_url == fake.url and sm.model_id == "tiny"
    assert sm.vocab_size == lm.vocab_size and sm.context_length == 64 and context_length(sm) == 64
    assert sm.tokenizer("a b")["input_ids"] == lm.tokenizer("a b")["input_ids"]
    line = sm.describe()
    assert "\n" not in line and fake.url in line and "top 7" in line and "bounds" in line
    assert "exact" in _connect(fake, folder, full_distribution=True).describe()
    # The context rules shared by the CLI and the dashboard work on a server model.
    n_prompt = len(encode_prompt(sm.tokenizer, "Hello there"))
    fit = fit_new_tokens(sm, "Hello there", max_new_tokens=100)
    assert fit.limit == 64 and fit.max_new_tokens == 64 - n_prompt
    assert rows_over_context(sm, ["Hello", "Hello"], ["x", "x " * 80]) == [1]
    with pytest.raises(ValueError, match="reads at most 64"):
        generate_traces(sm, ["Hello"], config=DecodingConfig(max_new_tokens=100))


def test_connect_uses_the_served_name_as_tokenizer_when_it_is_a_folder(tiny_model_dirs, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder, served_name=str(folder))
    sm = connect_server(fake.url, str(folder))
    assert sm.model == str(folder) and sm.vocab_size > 0


def test_connect_without_a_local_tokenizer_says_to_pass_one(tiny_model_dirs, serve):
    fake = serve(tiny_model_dirs["gpt2"])
    with pytest.raises(ServerError, match="tokenizer=") as info:
        connect_server(fake.url, "tiny")
    assert "\n" not in str(info.value)
    with pytest.raises(ServerError, match="no tokenizer folder"):
        connect_server(fake.url, "tiny", tokenizer="./no/such/folder")


def test_connect_names_the_served_models(tiny_model_dirs, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder, served_name="served-one")
    with pytest.raises(ServerError, match="does not serve the model 'other'.*'served-one'"):
        connect_server(fake.url, "other", tokenizer=str(folder))


def test_unreachable_server_is_one_line():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServerError) as info:
        connect_server(f"http://127.0.0.1:{port}", "tiny", max_retries=1)
    message = str(info.value)
    assert message.startswith(f"cannot reach the model server at http://127.0.0.1:{port}: ")
    assert message.endswith("is it running?") and "\n" not in message and "2 attempts" in message


def test_connect_checks_its_arguments():
    with pytest.raises(ValueError, match="credentials") as info:
        connect_server("http://user:hunter2@127.0.0.1:1", "tiny")
    assert "hunter2" not in str(info.value)
    with pytest.raises(ValueError, match="http://"):
        connect_server("ftp://127.0.0.1", "tiny")
    with pytest.raises(ValueError, match="model"):
        connect_server("http://127.0.0.1:1", " ")
    with pytest.raises(ValueError, match="concurrency"):
        connect_server("http://127.0.0.1:1", "tiny", concurrency=0)
    with pytest.raises(ValueError, match="top_logprobs"):
        connect_server("http://127.0.0.1:1", "tiny", top_logprobs=0)
    with pytest.raises(ValueError, match="api_key_env"):
        connect_server("http://127.0.0.1:1", "tiny", api_key_env="NOT A NAME")


# ----------------------------------------------------------------------------------------------------------------
# HTTP: retries, errors, keys, concurrency


def test_retries_429_500_and_dropped_connections(tiny_model_dirs, tiny_models, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder)
    sm = _connect(fake, folder, max_retries=3, concurrency=1)
    expected = generate_traces(sm, PROMPTS[:1], config=DecodingConfig(max_new_tokens=3))[0]
    for script in ([("status", 429, {"Retry-After": "0"}, "slow down")], [("status", 500, {}, "oops")],
                   [("drop",)], [("status", 503, {}, "busy"), ("status", 429, {}, "slow down")]):
        fake.attempts = 0
        fake.script = list(script)
        trace = generate_traces(sm, PROMPTS[:1], config=DecodingConfig(max_new_tokens=3))[0]
        assert fake.attempts == len(script) + 1
        np.testing.assert_array_equal(trace.token_ids, expected.token_ids)


def test_retries_run_out_with_the_status_and_count(tiny_model_dirs, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder)
    sm = _connect(fake, folder, max_retries=2)
    fake.attempts = 0
    fake.script = [("status", 503, {}, "overloaded")] * 3
    with pytest.raises(ServerError, match=r"HTTP 503 \(3 attempts\): overloaded"):
        generate_traces(sm, PROMPTS[:1], config=DecodingConfig(max_new_tokens=2))
    assert fake.attempts == 3


def test_400_is_not_retried_and_shows_the_servers_message(tiny_model_dirs, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder)
    sm = _connect(fake, folder)
    fake.attempts = 0
    fake.script = [("status", 400, {}, "max_tokens must be at least 1, got 0. " + "x" * 500)]
    with pytest.raises(ServerError, match=r"HTTP 400\): max_tokens must be at least 1") as info:
        generate_traces(sm, PROMPTS[:1], config=DecodingConfig(max_new_tokens=2))
    assert fake.attempts == 1
    assert len(str(info.value)) < 300 and "\n" not in str(info.value)


def test_api_key_is_sent_and_never_shown(tiny_model_dirs, serve, monkeypatch):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder)
    fake.required_key = KEY
    monkeypatch.delenv("TRACE_TEST_KEY", raising=False)
    with pytest.raises(ServerError, match="401"):
        connect_server(fake.url, "tiny", tokenizer=str(folder), api_key_env="TRACE_TEST_KEY")
    monkeypatch.setenv("TRACE_TEST_KEY", KEY)
    sm = connect_server(fake.url, "tiny", tokenizer=str(folder), api_key_env="TRACE_TEST_KEY")
    trace = generate_traces(sm, PROMPTS[:1], config=DecodingConfig(max_new_tokens=2))[0]
    scored = score_answers(sm, PROMPTS[:1], ANSWERS[:1])[0]
    assert fake.auth_headers[-1] == f"Bearer {KEY}"
    shown = [repr(sm), str(sm), sm.describe(), json.dumps(trace.metadata.to_dict()),
             json.dumps(scored.metadata.to_dict())]
    # A server that echoes the header in its error message: the key is redacted before the message is clipped.
    fake.script = [("status", 400, {}, f"bad header Bearer {KEY}" + " pad" * 100)]
    with pytest.raises(ServerError) as info:
        generate_traces(sm, PROMPTS[:1], config=DecodingConfig(max_new_tokens=2))
    shown.append(str(info.value))
    assert "bad header Bearer ***" in shown[-1]
    assert not any(KEY in text or KEY[:12] in text for text in shown)


def test_concurrency_is_bounded_and_order_kept(tiny_model_dirs, tiny_models, serve):
    """The first 4 requests wait for each other at a barrier (so 4 are in flight together) and finish in reverse
    order; never more than 4 run at once; traces come back in input order."""
    folder, lm = tiny_model_dirs["gpt2"], tiny_models["gpt2"]
    fake = serve(folder)
    fake.barrier = threading.Barrier(4)
    fake.hold_first = [0.3, 0.2, 0.1, 0.0]
    sm = _connect(fake, folder, concurrency=4, full_distribution=True)
    prompts = [f"Numbers: {i} {i + 1}" for i in range(10)]
    config = DecodingConfig(max_new_tokens=3)
    served = generate_traces(sm, prompts, config=config, batch_size=10)
    local = generate_traces(lm, prompts, config=config)
    assert fake.max_in_flight == 4
    assert [t.prompt for t in served] == prompts
    for a, b in zip(local, served, strict=True):
        np.testing.assert_array_equal(b.token_ids, a.token_ids)
        np.testing.assert_allclose(b.surprisal, a.surprisal, atol=1e-4)


# ----------------------------------------------------------------------------------------------------------------
# What a server cannot do


def test_top_k_cap_is_explained(tiny_model_dirs, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder, max_logprobs=5)
    with pytest.raises(ServerError, match="at most 5 log-probabilities per token and 20 were asked; connect with "
                                          "top_logprobs <= 5"):
        generate_traces(_connect(fake, folder), PROMPTS[:1], config=DecodingConfig(max_new_tokens=2))
    with pytest.raises(ServerError, match="--max-logprobs -1"):
        score_answers(_connect(fake, folder, full_distribution=True), PROMPTS[:1], ANSWERS[:1])
    trace = generate_traces(_connect(fake, folder, top_logprobs=5), PROMPTS[:1],
                            config=DecodingConfig(max_new_tokens=2))[0]
    assert trace.metadata.entropy_k == 5


def test_server_without_prompt_logprobs_cannot_score(tiny_model_dirs, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder)
    fake.no_prompt_logprobs = True
    sm = _connect(fake, folder)
    with pytest.raises(ServerError, match=r"cannot score existing answers.*load_model"):
        score_answers(sm, PROMPTS[:1], ANSWERS[:1])
    assert len(generate_traces(sm, PROMPTS[:1], config=DecodingConfig(max_new_tokens=2))[0]) == 2


def test_scoring_refuses_a_server_that_changed_the_prompt_ids(tiny_model_dirs, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder)
    fake.echo_offset = 1
    with pytest.raises(ServerError, match="differ from the"):
        score_answers(_connect(fake, folder), PROMPTS[:1], ANSWERS[:1])


def test_beams_and_extra_generate_options_are_refused(tiny_model_dirs, serve):
    folder = tiny_model_dirs["gpt2"]
    fake = serve(folder)
    sm = _connect(fake, folder)
    with pytest.raises(ServerError, match="local model"):
        beam_logprobs(sm, PROMPTS[:1], num_beams=2, max_new_tokens=2)
    with pytest.raises(ValueError, match="no_repeat_ngram_size"):
        generate_traces(sm, PROMPTS[:1], generate_kwargs={"no_repeat_ngram_size": 2})
    assert fake.bodies == []
