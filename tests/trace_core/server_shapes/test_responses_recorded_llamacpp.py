"""Responses recorded from a real llama.cpp server (``tests/engine/record_llamacpp.py``), imported.

The server served the tiny random-weight GPT-2 of ``save_tiny_gpt2`` converted to an F32 GGUF, with greedy decoding
(the requests are in ``tests/data/responses/llamacpp_requests.json``). Each recorded response is imported through
``trace_from_openai`` and through ``read_dataset``, and checked twice:

* against numbers computed here from the fixture itself: surprisal = -logprob, the token ids, the top-5
  alternatives sorted with their ids, the top-k entropy estimate, the answer;
* against teacher forcing of the same weights with torch: the prompt (the server's tokenization equals the Hugging
  Face tokenizer's; for chat the tokenizer's chat template renders it) followed by the recorded tokens. llama.cpp's
  CPU GELU reads an F16 table (the input rounded to F16, the output stored as F16), which moves this model's
  log-probs by up to ~1e-3 (the chosen tokens' by 1.04e-3 at most); with that GELU reproduced here the chosen tokens'
  agree within 1e-4 (5e-5 recorded) and the alternatives' within 5e-4; with the exact GELU within 2e-3.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from bench.server_throughput import save_tiny_gpt2
from trace_core import Trace, read_dataset
from trace_core.data import trace_from_openai

RESPONSES = Path(__file__).resolve().parents[2] / "data" / "responses"
PROMPT = "Q: What is the capital of France? A:"
# file -> (layout read, where its steps are, where its answer is)
RECORDED = {
    "llamacpp_completion_recorded.json": (
        "llamacpp_completion", lambda r: r["completion_probabilities"], lambda r: r["content"]),
    "llamacpp_v1_chat_recorded.json": (
        "chat", lambda r: r["choices"][0]["logprobs"]["content"], lambda r: r["choices"][0]["message"]["content"]),
    "llamacpp_v1_completions_recorded.json": (
        "chat", lambda r: r["choices"][0]["logprobs"]["content"], lambda r: r["choices"][0]["text"]),
}
K = 5  # top_logprobs / n_probs asked for


def load(name: str) -> dict:
    return json.loads((RESPONSES / name).read_text(encoding="utf-8"))


def requests() -> dict:
    return json.loads((RESPONSES / "llamacpp_requests.json").read_text(encoding="utf-8"))


def hand_entropy(logprobs: list[float]) -> float:
    """-sum p log p over the known probabilities, plus the rest of the mass as one outcome."""
    probs = [math.exp(lp) for lp in logprobs]
    rest = max(0.0, 1.0 - sum(probs))
    return -sum(p * lp for p, lp in zip(probs, logprobs, strict=True)) - (rest * math.log(rest) if rest > 0 else 0.0)


# --------------------------------------------------------------------------------------------------
# (a) The numbers of the fixture itself


def test_the_requests_asked_for_greedy_top_5():
    asked = requests()
    assert set(asked) == set(RECORDED)
    for name, request in asked.items():
        body = request["body"]
        assert body["temperature"] == 0
        assert K in (body.get("n_probs"), body.get("top_logprobs"), body.get("logprobs")), name
    assert asked["llamacpp_completion_recorded.json"]["endpoint"] == "/completion"
    assert load("llamacpp_completion_recorded.json")["generation_settings"]["post_sampling_probs"] is False


@pytest.mark.parametrize("name", list(RECORDED))
def test_recorded_response_imports_with_its_own_numbers(name):
    api, steps_of, answer_of = RECORDED[name]
    response = load(name)
    steps = steps_of(response)
    trace = trace_from_openai(response, prompt=PROMPT)
    assert len(trace) == len(steps) == 8
    assert trace.metadata.extra["api"] == api and trace.metadata.extra["finish_reason"] in ("limit", "length")
    assert trace.answer == answer_of(response) and "".join(trace.tokens) == trace.answer
    np.testing.assert_allclose(trace.surprisal, [-s["logprob"] for s in steps], rtol=0, atol=1e-12)
    assert trace.token_ids.tolist() == [s["id"] for s in steps]
    assert trace.metadata.entropy_source == "top_k" and trace.metadata.entropy_k == K == trace.n_alternatives
    for t, step in enumerate(steps):
        offered = sorted(step["top_logprobs"], key=lambda a: -a["logprob"])
        assert len(offered) == K
        np.testing.assert_allclose(trace.top_logprobs[t], [a["logprob"] for a in offered], rtol=0, atol=1e-12)
        assert trace.top_ids[t].tolist() == [a["id"] for a in offered]
        assert trace.top_tokens[t] == tuple(a["token"] for a in offered)
        np.testing.assert_allclose(trace.entropy[t], hand_entropy([a["logprob"] for a in offered]), rtol=1e-12)
        # greedy: the chosen token is the most likely one, the first alternative
        assert step["id"] == offered[0]["id"]
    assert Trace.from_json(trace.to_json()) == trace


def test_lone_bytes_keep_their_byte_and_the_answer_its_replacement_characters():
    """A token that is part of a UTF-8 character arrives with its byte in `bytes` and `token` "\ufffd" or ""; the
    answer joins the bytes the way the server's `content` does."""
    response = load("llamacpp_completion_recorded.json")
    lone = [s for s in response["completion_probabilities"] if len(s["bytes"]) == 1 and s["bytes"][0] >= 0x80]
    assert lone and all(s["token"] in ("\ufffd", "") for s in lone)
    assert trace_from_openai(response).answer == response["content"]


def test_recorded_responses_through_read_dataset(tmp_path):
    rows = [{"prompt": f"p{i}", "response": load(name), "label": i % 2} for i, name in enumerate(RECORDED)]
    path = tmp_path / "recorded.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    ds = read_dataset(path)
    assert not ds.errors and ds.frame["prompt"].tolist() == ["p0", "p1", "p2"]
    for i, (name, trace) in enumerate(zip(RECORDED, ds.traces, strict=True)):
        assert trace == trace_from_openai(load(name), prompt=f"p{i}"), name
        assert ds.frame["answer"].tolist()[i] == trace.answer


# --------------------------------------------------------------------------------------------------
# (b) The same weights, teacher-forced locally


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The tiny model the server served (same seed, same weights) and its tokenizer."""
    from transformers import AutoTokenizer, GPT2LMHeadModel

    folder = save_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2-llamacpp"))
    return GPT2LMHeadModel.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


def _ggml_cpu_gelu():
    """GELU as ggml's CPU backend computes it for F32: tanh GELU read from a table indexed by the F16 input and
    holding F16 outputs; 0 at or below -10, the input at or above 10."""
    import torch

    class GgmlCpuGelu(torch.nn.Module):
        def forward(self, x):
            h = x.half().float()
            y = (0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))).half().float()
            return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, y))

    return GgmlCpuGelu()


def teacher_forced(local, prompt_ids: list[int], ids: list[int], *, ggml_gelu: bool) -> np.ndarray:
    """Log-softmax over the vocabulary at each of `ids`' positions after `prompt_ids`, shape (len(ids), V)."""
    import torch

    model, _ = local
    acts = [block.mlp.act for block in model.transformer.h]
    try:
        if ggml_gelu:
            for block in model.transformer.h:
                block.mlp.act = _ggml_cpu_gelu()
        with torch.no_grad():
            logits = model(torch.tensor([prompt_ids + ids])).logits[0].double()
    finally:
        for block, act in zip(model.transformer.h, acts, strict=True):
            block.mlp.act = act
    n = len(prompt_ids)
    return torch.log_softmax(logits, dim=-1)[n - 1:n - 1 + len(ids)].numpy()


def prompt_ids(local, name: str, response: dict) -> list[int]:
    _, tokenizer = local
    body = requests()[name]["body"]
    if "messages" in body:
        text = tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=False)
    else:
        text = body["prompt"]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    served = response["usage"]["prompt_tokens"] if "usage" in response else response["tokens_evaluated"]
    assert len(ids) == served  # no BOS added by the server, the same split of the text
    return ids


@pytest.mark.parametrize("name", list(RECORDED))
def test_recorded_surprisal_equals_local_teacher_forcing(local, name):
    response = load(name)
    trace = trace_from_openai(response)
    ids = trace.token_ids.tolist()
    prompt = prompt_ids(local, name, response)
    like_ggml = teacher_forced(local, prompt, ids, ggml_gelu=True)
    exact = teacher_forced(local, prompt, ids, ggml_gelu=False)
    rows = np.arange(len(ids))
    # recorded: the chosen tokens within 5e-5 of ggml's GELU, 1.04e-3 of the exact one
    np.testing.assert_allclose(trace.surprisal, -like_ggml[rows, ids], rtol=0, atol=1e-4)
    np.testing.assert_allclose(trace.surprisal, -exact[rows, ids], rtol=0, atol=2e-3)
    # the alternatives are the local top 5, with the local log-probs (recorded: within 1.6e-4 of ggml's GELU;
    # F32 rounding moves a few GELU inputs across an F16 step)
    local_top = np.argsort(-like_ggml, axis=1, kind="stable")[:, :K]
    assert trace.top_ids.tolist() == local_top.tolist()
    np.testing.assert_allclose(trace.top_logprobs, np.take_along_axis(like_ggml, local_top, axis=1), rtol=0,
                               atol=5e-4)
