"""Model servers' own response layouts: llama.cpp ``/completion``, Ollama ``/api/generate`` and ``/api/chat``, TGI
``/generate`` and vLLM ``prompt_logprobs``, plus llama.cpp's OpenAI-compatible chat (with token ids).

Each fixture in ``tests/data/responses`` (hand-written in the server's exact layout; its README names the version)
is imported and checked against numbers computed here from the fixture itself: surprisal, the top-k estimate of the
entropy (the chosen token's mass added when it is not among the alternatives), the sorted alternatives and their
ids. Bad variants (a missing field, a wrong type, a probability above 1, a message of a stream) are refused with a
message naming the field, through the library and through ``read_dataset``.
"""

from __future__ import annotations

import copy
import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from trace_core import Trace, read_dataset
from trace_core.data import DatasetWarning, trace_from_openai
from trace_core.data.responses import RESPONSE_SHAPES

RESPONSES = Path(__file__).resolve().parents[2] / "data" / "responses"
DATA = Path(__file__).resolve().parents[2] / "data"


def load(name: str) -> dict:
    return json.loads((RESPONSES / name).read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------------------------
# What a response should import to, computed here from the fixture
# --------------------------------------------------------------------------------------------------

def hand_entropy(logprobs: list[float]) -> float:
    """-sum p log p over the known probabilities, plus the rest of the mass as one outcome."""
    probs = [math.exp(lp) for lp in logprobs]
    rest = max(0.0, 1.0 - sum(probs))
    return -sum(p * lp for p, lp in zip(probs, logprobs, strict=True)) - (rest * math.log(rest) if rest > 0 else 0.0)


def expected(steps: list[tuple[object, float, list[tuple[object, str, float, int]]]]) -> dict:
    """The arrays a trace of ``steps`` holds. Each step is (what identifies the chosen token, its log-prob,
    [(what identifies an alternative, its text, its log-prob, its id)]): alternatives below -1000 dropped, sorted
    most likely first, cut to the smallest number any step offers."""
    kept = [sorted((a for a in offered if a[2] >= -1000), key=lambda a: -a[2]) for _, _, offered in steps]
    k = min(len(a) for a in kept)
    entropy = [hand_entropy([a[2] for a in alts] + ([] if key in {a[0] for a in alts} else [lp]))
               for (key, lp, _), alts in zip(steps, kept, strict=True)]
    return {"surprisal": [-lp for _, lp, _ in steps], "entropy": entropy, "k": k,
            "top_logprobs": [[a[2] for a in alts[:k]] for alts in kept],
            "top_tokens": tuple(tuple(a[1] for a in alts[:k]) for alts in kept),
            "top_ids": [[a[3] for a in alts[:k]] for alts in kept]}


def check(trace: Trace, want: dict, *, token_ids: list[int], api: str) -> None:
    np.testing.assert_allclose(trace.surprisal, want["surprisal"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(trace.entropy, want["entropy"], rtol=1e-12)
    np.testing.assert_allclose(trace.top_logprobs, want["top_logprobs"], rtol=0, atol=1e-12)
    assert trace.top_tokens == want["top_tokens"]
    assert trace.top_ids.tolist() == want["top_ids"] and trace.token_ids.tolist() == token_ids
    meta = trace.metadata
    assert (meta.source, meta.entropy_source, meta.entropy_k) == ("imported", "top_k", want["k"])
    assert meta.extra["api"] == api
    assert Trace.from_json(trace.to_json()) == trace


def llama_steps(response: dict, value: str = "logprob", top: str = "top_logprobs") -> list:
    """Steps of llama.cpp's current layout, identified by id; probabilities (``value="prob"``) as their log."""
    def lp(item: dict) -> float:
        if value == "logprob":
            return item["logprob"]
        return math.log(item["prob"]) if item["prob"] > 0 else -math.inf
    return [(e["id"], lp(e), [(a["id"], a["token"], lp(a), a["id"]) for a in e[top]])
            for e in response["completion_probabilities"]]


def content_steps(content: list[dict], *, ids: bool) -> list:
    """Steps of an OpenAI-style content list: identified by id when ``ids``, else by bytes."""
    def key(item):
        return item["id"] if ids else bytes(item["bytes"])
    return [(key(e), e["logprob"], [(key(a), a["token"], a["logprob"], a["id"] if ids else -1)
                                    for a in e["top_logprobs"]]) for e in content]


# --------------------------------------------------------------------------------------------------
# 1. llama.cpp server
# --------------------------------------------------------------------------------------------------

def test_llamacpp_completion_imports_with_ids_and_split_characters():
    response = load("llamacpp_completion.json")
    trace = trace_from_openai(response, prompt="Coffee in French:")
    entries = response["completion_probabilities"]
    check(trace, expected(llama_steps(response)), token_ids=[e["id"] for e in entries], api="llamacpp_completion")
    # `token` is cut to valid UTF-8 by the server ("" for a lone byte); the bytes carry the character.
    assert [e["token"] for e in entries] == [" caf", "", "", "."]
    assert trace.tokens == (" caf", "", "é", ".") and trace.answer == response["content"] == " café."
    assert trace.metadata.model_id == response["model"] and trace.metadata.extra["finish_reason"] == "limit"
    assert "post_sampling_probs" not in trace.metadata.extra
    # The last step's chosen token (id 13) is not among its alternatives: its own mass is part of the estimate.
    assert 13 not in [a["id"] for a in entries[3]["top_logprobs"]]
    lps = [a["logprob"] for a in entries[3]["top_logprobs"]] + [entries[3]["logprob"]]
    assert trace.entropy[3] == pytest.approx(hand_entropy(lps), rel=1e-12)


def test_llamacpp_post_sampling_probabilities_are_read_and_marked():
    response = load("llamacpp_completion.json")
    for entry in response["completion_probabilities"]:  # what post_sampling_probs=true sends instead
        for item in [entry, *entry["top_logprobs"]]:
            item["prob"] = round(math.exp(item.pop("logprob")), 6)
        entry["top_probs"] = entry.pop("top_logprobs")
    trace = trace_from_openai(response)
    entries = response["completion_probabilities"]
    check(trace, expected(llama_steps(response, "prob", "top_probs")), token_ids=[e["id"] for e in entries],
          api="llamacpp_completion")
    assert trace.metadata.extra["post_sampling_probs"] is True


def test_llamacpp_legacy_probabilities_are_read_as_their_log():
    response = load("llamacpp_completion_legacy.json")
    trace = trace_from_openai(response)

    def key(text: str) -> bytes:  # "byte: \xc3" is the lone byte 0xc3
        return bytes([int(text[-2:], 16)]) if text.startswith("byte: \\x") else text.encode()

    steps = []
    for entry in response["completion_probabilities"]:
        alts = [(key(a["tok_str"]), a["tok_str"], math.log(a["prob"]) if a["prob"] > 0 else -math.inf, -1)
                for a in entry["probs"]]
        chosen = next(lp for k, _, lp, _ in alts if k == key(entry["content"]))
        steps.append((key(entry["content"]), chosen, alts))
    want = expected(steps)
    assert want["k"] == 2  # a probability of 0 is no probability: dropped like -inf
    check(trace, want, token_ids=[-1] * 4, api="llamacpp_completion")
    assert trace.tokens == (" caf", "", "é", ".") and trace.answer == " café."
    assert trace.surprisal[3] == pytest.approx(-math.log(0.35), rel=1e-12)  # "." is the second most likely
    assert trace.metadata.extra == {"api": "llamacpp_completion", "post_sampling_probs": True}


def test_llamacpp_openai_chat_keeps_token_ids():
    response = load("llamacpp_v1_chat.json")
    trace = trace_from_openai(response)
    content = response["choices"][0]["logprobs"]["content"]
    check(trace, expected(content_steps(content, ids=True)), token_ids=[e["id"] for e in content], api="chat")
    assert trace.answer == "Oui." and trace.metadata.extra["finish_reason"] == "stop"
    # "." (id 13) is not offered at its step: decided by id, its mass is added.
    assert trace.entropy[1] == pytest.approx(hand_entropy([-0.6, -2.2, -1.4]), rel=1e-12)


def test_llamacpp_openai_completions_take_the_answer_from_text():
    response = load("llamacpp_v1_chat.json")
    choice = response["choices"][0]
    choice["text"] = choice.pop("message")["content"] + " (text)"
    response["object"] = "text_completion"
    assert trace_from_openai(response).answer == "Oui. (text)"


# --------------------------------------------------------------------------------------------------
# 2. Ollama
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, api, text", [("ollama_generate.json", "ollama_generate", lambda r: r["response"]),
                                             ("ollama_chat.json", "ollama_chat", lambda r: r["message"]["content"])])
def test_ollama_responses_import(name, api, text):
    response = load(name)
    trace = trace_from_openai(response, prompt="q")
    check(trace, expected(content_steps(response["logprobs"], ids=False)), token_ids=[-1] * len(response["logprobs"]),
          api=api)
    assert trace.answer == text(response) == "".join(trace.tokens)
    assert trace.metadata.extra == {"api": api, "finish_reason": "stop"}
    assert trace.metadata.model_id == "test-model:1b"


def test_ollama_chosen_token_outside_the_alternatives_adds_its_mass():
    response = load("ollama_generate.json")
    step = response["logprobs"][2]  # " ça", not among its alternatives
    assert step["token"] not in [a["token"] for a in step["top_logprobs"]]
    trace = trace_from_openai(response)
    assert trace.tokens[2] == " ça"
    assert trace.entropy[2] == pytest.approx(hand_entropy([a["logprob"] for a in step["top_logprobs"]]
                                                          + [step["logprob"]]), rel=1e-12)


def test_ollama_without_top_logprobs_has_no_entropy():
    response = load("ollama_chat.json")
    for step in response["logprobs"]:
        del step["top_logprobs"]  # logprobs: true alone (omitted when empty)
    trace = trace_from_openai(response)
    assert trace.entropy is None and trace.metadata.entropy_source == "absent" and trace.n_alternatives == 0
    assert trace.surprisal.tolist() == [0.4, 1.3]


# --------------------------------------------------------------------------------------------------
# 3. TGI
# --------------------------------------------------------------------------------------------------

def test_tgi_generate_imports_with_ids_and_ignores_the_prefill():
    response = load("tgi_generate.json")
    details = response["details"]
    trace = trace_from_openai(response)
    steps = [(t["id"], t["logprob"], [(a["id"], a["text"], a["logprob"], a["id"]) for a in top])
             for t, top in zip(details["tokens"], details["top_tokens"], strict=True)]
    check(trace, expected(steps), token_ids=[t["id"] for t in details["tokens"]], api="tgi_generate")
    assert trace.tokens == (" Par", "is", "</s>") and trace.answer == " Paris"
    assert trace.metadata.extra == {"api": "tgi_generate", "finish_reason": "eos_token"}
    # Step 0's chosen token (id 3681) is not among the top tokens: its mass is added.
    assert trace.entropy[0] == pytest.approx(hand_entropy([-0.9, -1.2, -1.6]), rel=1e-12)
    # The prefill is the prompt: the trace does not change without it.
    del details["prefill"]
    assert trace_from_openai(response) == trace


def test_tgi_without_top_tokens_has_no_entropy():
    response = load("tgi_generate.json")
    del response["details"]["top_tokens"]  # top_n_tokens not asked for: the field is left out
    trace = trace_from_openai(response)
    assert trace.metadata.entropy_source == "absent" and trace.token_ids.tolist() == [3681, 275, 2]


# --------------------------------------------------------------------------------------------------
# 4. vLLM prompt_logprobs
# --------------------------------------------------------------------------------------------------

def vllm_steps(response: dict, answer_tokens: int, holder: dict | None = None) -> list:
    """The last ``answer_tokens`` positions; the prompt's token is an alternative when its rank is within its
    entry's size (then it is among the most likely)."""
    holder = response["choices"][0] if holder is None else holder
    entries, ids = holder["prompt_logprobs"], holder["prompt_token_ids"]
    steps = []
    for entry, token_id in list(zip(entries, ids, strict=True))[-answer_tokens:]:
        own = entry[str(token_id)]
        alts = [(int(k), v["decoded_token"], v["logprob"], int(k)) for k, v in entry.items()
                if int(k) != token_id or own["rank"] <= len(entry)]
        steps.append((token_id, own["logprob"], alts))
    return steps


def test_vllm_prompt_logprobs_import_the_last_answer_tokens():
    response = load("vllm_prompt_logprobs_completions.json")
    choice = response["choices"][0]
    trace = trace_from_openai(response, answer_tokens=2)
    check(trace, expected(vllm_steps(response, 2)), token_ids=choice["prompt_token_ids"][-2:],
          api="vllm_prompt_logprobs")
    assert trace.tokens == (" Paris", ".") and trace.answer == " Paris."  # not the generated "\n"
    assert trace.ranks.tolist() == [1, 7]
    assert trace.metadata.extra == {"api": "vllm_prompt_logprobs", "answer_start": 7}
    # "." has rank 7, outside its entry's top 2: it is not an alternative, but its mass counts.
    assert trace.top_ids.tolist()[1] == [13, 29991]
    assert trace.entropy[1] == pytest.approx(hand_entropy([-0.5, -1.4, -2.3]), rel=1e-12)


def test_vllm_prompt_logprobs_prompt_token_within_the_top_is_an_alternative():
    response = load("vllm_prompt_logprobs_completions.json")
    response["choices"][0]["prompt_logprobs"][8]["29889"]["rank"] = 3  # the entry is then the top 3
    trace = trace_from_openai(response, answer_tokens=2)
    check(trace, expected(vllm_steps(response, 2)), token_ids=[3681, 29889], api="vllm_prompt_logprobs")
    assert trace.entropy[1] == pytest.approx(hand_entropy([-0.5, -1.4, -2.3]), rel=1e-12)
    assert trace.ranks.tolist() == [1, 3]
    # Alone, that step's top 3 are its three entries.
    assert trace_from_openai(response, answer_tokens=1).top_ids.tolist() == [[13, 29991, 29889]]


def test_vllm_prompt_logprobs_prompt_token_outside_the_top_is_not_an_alternative():
    response = load("vllm_prompt_logprobs_completions.json")
    trace = trace_from_openai(response, answer_tokens=1)  # ".", rank 7, sent next to the top 2
    assert trace.n_alternatives == 2 and trace.top_ids.tolist() == [[13, 29991]]
    assert trace.top_tokens == (("\n", "!"),) and trace.ranks.tolist() == [7]
    assert trace.entropy[0] == pytest.approx(hand_entropy([-0.5, -1.4, -2.3]), rel=1e-12)


def test_vllm_prompt_logprobs_of_a_chat_response_are_at_the_top_level():
    completions = load("vllm_prompt_logprobs_completions.json")
    choice = completions["choices"][0]
    chat = {"id": "chatcmpl-x", "object": "chat.completion", "created": 1767225600, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "\n"}, "logprobs": None,
                         "finish_reason": "length", "stop_reason": None, "token_ids": [13]}],
            "usage": {"prompt_tokens": 9, "total_tokens": 10, "completion_tokens": 1},
            "prompt_logprobs": choice["prompt_logprobs"], "prompt_token_ids": choice["prompt_token_ids"],
            "kv_transfer_params": None}
    trace = trace_from_openai(chat, answer_tokens=3)
    check(trace, expected(vllm_steps(chat, 3, holder=chat)), token_ids=choice["prompt_token_ids"][-3:],
          api="vllm_prompt_logprobs")
    assert trace.answer == ": Paris." and trace.metadata.extra["answer_start"] == 6


def test_vllm_prompt_logprobs_read_only_the_answer_positions():
    response = load("vllm_prompt_logprobs_completions.json")
    entries = response["choices"][0]["prompt_logprobs"]
    entries[3]["7483"]["logprob"] = -9999.0  # a prompt token no bound allows: not part of the answer
    assert trace_from_openai(response, answer_tokens=2).surprisal.tolist() == [0.4, 2.3]
    with pytest.raises(ValueError, match=r"^choices\[0\]\.prompt_logprobs\[3\]\['7483'\]\.logprob is -9999\.0; "
                                         r"below -1000 nats"):
        trace_from_openai(response, answer_tokens=6)
    empty = trace_from_openai(response, answer_tokens=0)
    assert len(empty) == 0 and empty.answer == ""


@pytest.mark.parametrize("answer_tokens, match", [
    (None, r"^response has choices\[0\]\.prompt_logprobs \(an existing answer scored as the end of the prompt\) "
           r"but where the answer starts is not known: give answer_tokens"),
    (9, r"^answer_tokens is 9 but only 8 of the prompt's tokens have a log-probability"),
    (-1, r"^answer_tokens must be an int >= 0"),
    (True, r"^answer_tokens must be an int >= 0"),
    (2.0, r"^answer_tokens must be an int >= 0"),
])
def test_vllm_prompt_logprobs_need_a_valid_answer_tokens(answer_tokens, match):
    with pytest.raises(ValueError, match=match):
        trace_from_openai(load("vllm_prompt_logprobs_completions.json"), answer_tokens=answer_tokens)


def test_answer_tokens_must_agree_with_a_generated_answer():
    response = load("llamacpp_completion.json")
    assert len(trace_from_openai(response, answer_tokens=4)) == 4
    assert len(trace_from_openai(response, answer_tokens=np.int64(4))) == 4
    with pytest.raises(ValueError, match=r"^answer_tokens is 3 but the response's answer has 4 tokens "
                                         r"\(completion_probabilities\)$"):
        trace_from_openai(response, answer_tokens=3)


# --------------------------------------------------------------------------------------------------
# 5. Detection: exactly one layout
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, api", [
    ("llamacpp_completion.json", "llamacpp_completion"), ("llamacpp_completion_legacy.json", "llamacpp_completion"),
    ("llamacpp_v1_chat.json", "chat"), ("ollama_generate.json", "ollama_generate"),
    ("ollama_chat.json", "ollama_chat"), ("tgi_generate.json", "tgi_generate"),
    ("vllm_prompt_logprobs_completions.json", "vllm_prompt_logprobs"), ("openai_responses.json", "responses"),
])
def test_each_fixture_matches_exactly_one_layout(name, api):
    assert [s.api for s in RESPONSE_SHAPES if s.detect(load(name))] == [api]


def test_the_openai_fixtures_still_match_only_their_layout():
    for name, api in (("openai_chat_response.json", "chat"), ("openai_completions_response.json", "completions")):
        response = json.loads((DATA / name).read_text(encoding="utf-8"))
        assert [s.api for s in RESPONSE_SHAPES if s.detect(response)] == [api]


def test_a_response_matching_two_layouts_is_refused_naming_both():
    response = load("vllm_prompt_logprobs_completions.json")
    response["choices"][0]["logprobs"] = {"tokens": ["\n"], "token_logprobs": [-0.3], "top_logprobs": None}
    with pytest.raises(ValueError, match=r"^response matches 2 layouts, completions \(OpenAI completions .*\) and "
                                         r"vllm_prompt_logprobs \(vLLM prompt_logprobs .*\); expected exactly one"):
        trace_from_openai(response, answer_tokens=2)
    both = load("ollama_chat.json")
    both["response"] = "Yes!"
    with pytest.raises(ValueError, match=r"^response matches 2 layouts, ollama_generate .* and ollama_chat"):
        trace_from_openai(both)


@pytest.mark.parametrize("response, hint", [
    ({"id": 3}, None),
    ({"model": "m", "created_at": "2026-01-01T00:00:00Z", "response": "Hi", "done": True},
     "it looks like an Ollama response without `logprobs`: ask with logprobs: true"),
    ({"content": "Hi", "id_slot": 0, "stop": True, "tokens_predicted": 1},
     "it looks like a llama.cpp /completion response without `completion_probabilities`: ask with n_probs=k"),
    ({"generated_text": "Hi"}, "it looks like a TGI /generate response without `details`: ask with details: true"),
])
def test_a_response_matching_no_layout_says_what_was_expected(response, hint):
    with pytest.raises(ValueError) as info:
        trace_from_openai(response)
    message = str(info.value)
    assert message.startswith("response has no choices: expected an OpenAI-style response with a non-empty "
                              "`choices` list, or one of: OpenAI Responses API (`output[].content[].logprobs` of its "
                              "`output_text` parts); llama.cpp /completion (`completion_probabilities`); ")
    assert "TGI /generate (`generated_text` and `details`)" in message and "\n" not in message
    assert (hint is None) == ("it looks like" not in message) and (hint is None or hint in message)


# --------------------------------------------------------------------------------------------------
# 6. Bad variants: one message naming the field
# --------------------------------------------------------------------------------------------------

def mutate(name: str, change) -> dict:
    response = copy.deepcopy(load(name))
    change(response)
    return response


def set_path(path: list, value):
    def change(response):
        target = response
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return change


LLAMA, LEGACY, OLLAMA, CHAT, TGI, VLLM = ("llamacpp_completion.json", "llamacpp_completion_legacy.json",
                                         "ollama_generate.json", "ollama_chat.json", "tgi_generate.json",
                                         "vllm_prompt_logprobs_completions.json")
CP, PL = "completion_probabilities", ["choices", 0, "prompt_logprobs"]

BAD = [
    # llama.cpp, current layout
    (LLAMA, set_path([CP, 1, "logprob"], KeyError),
     r"^completion_probabilities\[1\] has no `logprob`; expected \{id, token, bytes, logprob, top_logprobs\} "
     r"\(llama\.cpp /completion with n_probs\)$"),
    (LLAMA, set_path([CP, 0, "top_logprobs"], "x"), r"^completion_probabilities\[0\]\.top_logprobs must be a list"),
    (LLAMA, set_path([CP, 2, "id"], "169"), r"^completion_probabilities\[2\]\.id must be a token id"),
    (LLAMA, set_path([CP, 0, "top_logprobs", 1, "logprob"], 0.5),
     r"^completion_probabilities\[0\]\.top_logprobs\[1\]\.logprob is 0\.5; expected a log-probability"),
    (LLAMA, set_path([CP, 3, "logprob"], -9999.0), r"^completion_probabilities\[3\]\.logprob is -9999\.0; below -1000"),
    (LLAMA, set_path([CP, 0, "top_logprobs", 1, "logprob"], -0.3),
     r"^completion_probabilities\[0\]\.top_logprobs sum to probability 1\.\d+; more than 1 \+ 0\.01"),
    (LLAMA, set_path([CP], {"0": 1}), r"^completion_probabilities must be a list"),
    (LLAMA, set_path(["stop"], False),
     r"^response is a streamed message \(`stop` is false\), a few tokens of the answer, not the whole response: "
     r"join the stream's messages into one response first, or ask with stream=false$"),
    # llama.cpp, legacy layout
    (LEGACY, set_path([CP, 0, "probs", 1, "prob"], 1.5),
     r"^completion_probabilities\[0\]\.probs\[1\]\.prob is 1\.5; expected a probability \(a number from 0 to 1\)$"),
    (LEGACY, set_path([CP, 0, "probs", 1, "prob"], 0.5),
     r"^completion_probabilities\[0\]\.probs sum to probability 1\.32; more than 1 \+ 0\.01"),
    (LEGACY, set_path([CP, 3, "content"], "?"),
     r"^completion_probabilities\[3\]\.content '\?' is not among completion_probabilities\[3\]\.probs, so its "
     r"probability is unknown: ask for a larger n_probs$"),
    (LEGACY, set_path([CP, 2, "probs", 0, "prob"], 0),
     r"^completion_probabilities\[2\]\.probs\[0\]\.prob is 0; the chosen token needs a probability above 0$"),
    (LEGACY, set_path([CP, 1, "probs", 0, "tok_str"], KeyError),
     r"^completion_probabilities\[1\]\.probs\[0\] has no `tok_str`"),
    (LEGACY, set_path([CP, 1, "probs"], "0.9"), r"^completion_probabilities\[1\]\.probs must be a list"),
    # Ollama
    (OLLAMA, set_path(["logprobs", 1, "token"], KeyError), r"^logprobs\[1\] must be an object with a string `token`"),
    (OLLAMA, set_path(["logprobs", 1, "logprob"], KeyError), r"^logprobs\[1\]\.logprob is None; expected a log-prob"),
    (OLLAMA, set_path(["logprobs"], {"token": "Paris"}), r"^logprobs must be a list"),
    (OLLAMA, set_path(["logprobs"], None), r"^response `logprobs` is null: ask Ollama for logprobs: true"),
    (OLLAMA, set_path(["logprobs", 0, "bytes"], "Paris"), r"^logprobs\[0\]\.bytes must be a list of ints 0\.\.255"),
    (OLLAMA, set_path(["logprobs", 3, "top_logprobs", 1, "logprob"], -0.2),
     r"^logprobs\[3\]\.top_logprobs sum to probability 1\.7\d+; more than 1 \+ 0\.01"),
    (OLLAMA, set_path(["response"], 7), r"^the response's answer text must be a string, got 7$"),
    (OLLAMA, set_path(["done"], False),
     r"^response is a streamed line \(`done` is false\), a few tokens of the answer, not the whole response: "
     r"join the stream's NDJSON lines into one response first"),
    (CHAT, set_path(["message"], "Yes!"), r"^message must be an object, got 'Yes!'$"),
    (CHAT, set_path(["logprobs", 0, "logprob"], -1e308), r"^logprobs\[0\]\.logprob is -1e\+308; below -1000 nats"),
    # TGI
    (TGI, set_path(["details"], None), r"^response `details` is null: ask TGI for details: true"),
    (TGI, set_path(["details", "tokens", 1, "logprob"], KeyError),
     r"^details\.tokens\[1\] has no `logprob`; expected \{id, text, logprob, special\}$"),
    (TGI, set_path(["details", "tokens", 1, "logprob"], None), r"^details\.tokens\[1\]\.logprob is None; expected a "),
    (TGI, set_path(["details", "tokens", 0, "text"], 5), r"^details\.tokens\[0\]\.text must be a string, got 5$"),
    (TGI, set_path(["details", "tokens", 2, "id"], -2), r"^details\.tokens\[2\]\.id must be a token id"),
    (TGI, set_path(["details", "top_tokens"], [[]]), r"^details\.top_tokens must be a list with one list per token"),
    (TGI, set_path(["details", "top_tokens", 2, 1, "logprob"], -0.1),
     r"^details\.top_tokens\[2\] sum to probability 1\.\d+; more than 1 \+ 0\.01"),
    (TGI, set_path(["details", "tokens"], KeyError), r"^details has no `tokens`"),
    # vLLM prompt_logprobs
    (VLLM, set_path(PL + [7, "3681"], KeyError),
     r"^choices\[0\]\.prompt_logprobs\[7\] has no entry for the prompt's token 3681"),
    (VLLM, set_path(PL + [7, " Paris"], {"logprob": -0.4}),
     r"^choices\[0\]\.prompt_logprobs\[7\] has the key ' Paris'; expected token ids as keys"),
    (VLLM, set_path(PL + [8, "29889", "logprob"], 0.2),
     r"^choices\[0\]\.prompt_logprobs\[8\]\['29889'\]\.logprob is 0\.2; expected a log-probability"),
    (VLLM, set_path(PL + [8, "29889", "rank"], 0), r"^choices\[0\]\.prompt_logprobs\[8\]\['29889'\]\.rank must be an "
                                                 r"int >= 1 or null"),
    (VLLM, set_path(PL + [7, "3681", "decoded_token"], 3681),
     r"^choices\[0\]\.prompt_logprobs\[7\]\['3681'\]\.decoded_token must be a string or null"),
    (VLLM, set_path(PL + [7, "27813", "logprob"], -0.2),
     r"^choices\[0\]\.prompt_logprobs\[7\] sum to probability 1\.489; more than 1 \+ 0\.01"),
    (VLLM, set_path(PL + [8], [-0.5]), r"^choices\[0\]\.prompt_logprobs\[8\] must be an object"),
    (VLLM, set_path(["choices", 0, "prompt_token_ids"], KeyError),
     r"^response has choices\[0\]\.prompt_logprobs but no choices\[0\]\.prompt_token_ids, .*return_token_ids: true$"),
    (VLLM, set_path(["choices", 0, "prompt_token_ids"], [1, 2]),
     r"^choices\[0\]\.prompt_logprobs has 9 entries but choices\[0\]\.prompt_token_ids has 2$"),
    (VLLM, set_path(PL, "[null]"), r"^choices\[0\]\.prompt_logprobs must be a list"),
]


@pytest.mark.parametrize("name, change, match", BAD)
def test_bad_variants_are_refused_naming_the_field(name, change, match):
    with pytest.raises(ValueError, match=match) as info:
        trace_from_openai(mutate(name, change), answer_tokens=2 if name == VLLM else None)
    assert "\n" not in str(info.value)


def test_a_tgi_stream_event_is_refused():
    event = {"index": 3, "token": {"id": 2, "text": "</s>", "logprob": -0.3, "special": True},
             "top_tokens": [{"id": 2, "text": "</s>", "logprob": -0.3, "special": True}],
             "generated_text": " Paris", "details": {"finish_reason": "eos_token", "generated_tokens": 3,
                                                     "seed": None, "input_length": 5}}
    with pytest.raises(ValueError, match=r"^response is a streamed event of /generate_stream \(it has a `token`\), "
                                         r"a few tokens of the answer, not the whole response: join the stream's "
                                         r"events into one response first"):
        trace_from_openai(event)


# --------------------------------------------------------------------------------------------------
# 7. Through a dataset file
# --------------------------------------------------------------------------------------------------

IMPORTED = ["llamacpp_completion.json", "llamacpp_completion_legacy.json", "llamacpp_v1_chat.json",
            "ollama_generate.json", "ollama_chat.json", "tgi_generate.json"]


def write_rows(tmp_path: Path, rows: list[dict], fmt: str) -> Path:
    path = tmp_path / f"data.{fmt}"
    if fmt == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
        return path
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in r.items()} for r in rows)
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_every_layout_through_read_dataset(tmp_path, fmt):
    rows = [{"prompt": f"p{i}", "response": load(name), "label": i % 2} for i, name in enumerate(IMPORTED)]
    streamed = mutate(OLLAMA, set_path(["done"], False))
    rows += [{"prompt": "scored", "response": load(VLLM), "label": 1},
             {"prompt": "scored, answer given", "response": load(VLLM), "answer_tokens": 2, "label": 1},
             {"prompt": "bad count", "response": load(VLLM), "answer_tokens": "two", "label": 1},
             {"prompt": "streamed", "response": streamed, "label": 0},
             {"prompt": "too likely", "response": mutate(LEGACY, set_path([CP, 0, "probs", 1, "prob"], 1.5)),
              "label": 0}]
    with pytest.warns(DatasetWarning, match="rejected"):
        ds = read_dataset(write_rows(tmp_path, rows, fmt))
    assert ds.frame["prompt"].tolist() == [f"p{i}" for i in range(len(IMPORTED))] + ["scored, answer given"]
    scored = ds.traces[-1]  # the row's answer_tokens says where the answer starts
    assert scored == trace_from_openai(load(VLLM), prompt="scored, answer given", answer_tokens=2)
    assert scored.answer == " Paris." and ds.frame["answer"].tolist()[-1] == " Paris."
    for i, (name, trace) in enumerate(zip(IMPORTED, ds.traces[:len(IMPORTED)], strict=True)):
        direct = trace_from_openai(load(name), prompt=f"p{i}")
        assert trace == direct, name
        assert ds.frame["answer"].tolist()[i] == direct.answer
    errors = [(e.row, e.field) for e in ds.errors]
    assert errors == [(7, "response"), (9, "answer_tokens"), (10, "response"), (11, "response")]
    messages = [e.message for e in ds.errors]
    # Without an answer_tokens cell a prompt_logprobs response is refused with the reason.
    assert "where the answer starts is not known: give answer_tokens" in messages[0]
    assert "is 'two'; expected a whole number of tokens >= 0" in messages[1]
    assert "join the stream's NDJSON lines into one response first" in messages[2]
    assert "completion_probabilities[0].probs[1].prob is 1.5; expected a probability" in messages[3]


# --------------------------------------------------------------------------------------------------
# Responses recorded from a real vLLM server (tests/engine/record_fixtures.py)


def test_recorded_vllm_chat_imports_with_its_numbers():
    response = load("vllm_chat.json")
    steps = response["choices"][0]["logprobs"]["content"]
    trace = trace_from_openai(response)
    assert len(trace) == len(steps) and trace.metadata.extra["api"] == "chat"
    np.testing.assert_allclose(trace.surprisal, [-s["logprob"] for s in steps], atol=1e-12)
    assert trace.metadata.entropy_source == "top_k" and trace.metadata.entropy_k == 5
    for t, step in enumerate(steps):
        offered = sorted((a["logprob"] for a in step["top_logprobs"]), reverse=True)
        np.testing.assert_allclose(trace.top_logprobs[t], offered[:trace.n_alternatives], atol=1e-12)


def test_recorded_vllm_responses_api_imports_as_its_chat_answer():
    """The same greedy request to one real vLLM server through /v1/responses and /v1/chat/completions: the two
    layouts import to the same trace, cut answer included."""
    via_responses = trace_from_openai(load("vllm_responses.json"))
    via_chat = trace_from_openai(load("vllm_chat.json"))
    assert via_responses.metadata.extra == {"api": "responses", "finish_reason": "length"}
    assert via_chat.metadata.extra == {"api": "chat", "finish_reason": "length"}
    assert (via_responses.tokens, via_responses.top_tokens, via_responses.answer) == (
        via_chat.tokens, via_chat.top_tokens, via_chat.answer)
    for name in ("surprisal", "entropy", "top_logprobs", "top_ids", "token_ids"):
        assert getattr(via_responses, name).tobytes() == getattr(via_chat, name).tobytes(), name


def test_recorded_vllm_prompt_logprobs_import_the_answer_span():
    response = load("vllm_prompt_logprobs.json")
    choice = response["choices"][0]
    ids, entries = choice["prompt_token_ids"], choice["prompt_logprobs"]
    trace = trace_from_openai(response, answer_tokens=5)
    assert trace.token_ids.tolist() == ids[-5:]
    expected = [-entries[p][str(ids[p])]["logprob"] for p in range(len(ids) - 5, len(ids))]
    np.testing.assert_allclose(trace.surprisal, expected, atol=1e-12)
    assert trace.ranks.tolist() == [entries[p][str(ids[p])]["rank"] for p in range(len(ids) - 5, len(ids))]


def test_recorded_vllm_completions_with_token_ids_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="tokens are token ids .*return_tokens_as_token_ids"):
        trace_from_openai(load("vllm_completions.json"))


# --------------------------------------------------------------------------------------------------
# OpenAI's Responses API (/v1/responses with include: ["message.output_text.logprobs"])
# --------------------------------------------------------------------------------------------------

RESPONSES_API = "openai_responses.json"


def _text_part(response: dict) -> dict:
    return response["output"][0]["content"][0]


def test_responses_api_imports_its_output_text_logprobs():
    response = load(RESPONSES_API)
    trace = trace_from_openai(response, prompt="Where?")
    content = _text_part(response)["logprobs"]
    check(trace, expected(content_steps(content, ids=False)), token_ids=[-1] * len(content), api="responses")
    assert trace.answer == "Paris, café." and "".join(trace.tokens) == trace.answer
    assert trace.metadata.model_id == "gpt-4.1-mini-2025-04-14" and trace.metadata.extra["finish_reason"] == "stop"
    # the chosen "," is not among its step's alternatives: its mass is added to the estimate (checked in expected)
    assert b"," not in {bytes(a["bytes"]) for a in content[1]["top_logprobs"]}


def test_responses_api_reads_every_output_text_part_and_skips_other_items():
    response = load(RESPONSES_API)
    whole = trace_from_openai(response)
    message = response["output"][0]
    first, second = copy.deepcopy(_text_part(response)), copy.deepcopy(_text_part(response))
    first["text"], first["logprobs"] = "Paris,", first["logprobs"][:2]
    second["text"], second["logprobs"] = " café.", second["logprobs"][2:]
    message["content"] = [first, second]
    response["output"] = [{"id": "rs_1", "type": "reasoning", "summary": []}, message,
                          {"id": "fc_1", "type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"}]
    split = trace_from_openai(response)
    assert split == whole and split.answer == "Paris, café."


def _with(change):
    response = load(RESPONSES_API)
    change(response)
    return response


@pytest.mark.parametrize("change, match", [
    (lambda r: r.update(status="in_progress"), r"^response status is in_progress: the answer is not finished"),
    (lambda r: r.update(status="failed", error={"code": "server_error", "message": "boom"}),
     r"^response status is failed: 'boom'; it holds no answer to import$"),
    (lambda r: r.update(status="cancelled"), r"^response status is cancelled; it holds no answer"),
    (lambda r: _text_part(r).pop("logprobs"),
     r'^response has no log-probabilities in output\[0\]\.content\[0\]\.logprobs: ask with include: '
     r'\["message\.output_text\.logprobs"\]'),
    (lambda r: _text_part(r).update(logprobs=[]), r"^response has no log-probabilities in output\[0\]"),
    (lambda r: _text_part(r).update(text=None), r"^output\[0\]\.content\[0\]\.text must be a string"),
    (lambda r: r["output"][0].update(content=[{"type": "refusal", "refusal": "I can't help with that."}]),
     r"^output\[0\]\.content\[0\] is a refusal \(\"I can't help with that\.\"\)"),
    (lambda r: r.update(output=[{"id": "rs_1", "type": "reasoning", "summary": []}]),
     r"^response has no output_text part in a `message` item"),
    (lambda r: r["output"][0].update(content="Paris"), r"^output\[0\]\.content must be a list"),
    (lambda r: _text_part(r)["logprobs"][3].update(logprob=0.5),
     r"^output\[0\]\.content\[0\]\.logprobs\[3\]\.logprob is 0\.5; expected a log-probability"),
    (lambda r: _text_part(r)["logprobs"][1]["top_logprobs"][0].update(logprob=-0.01),
     r"^output\[0\]\.content\[0\]\.logprobs\[1\]\.top_logprobs "),
])
def test_bad_responses_api_objects_are_refused_naming_the_field(change, match):
    with pytest.raises(ValueError, match=match):
        trace_from_openai(_with(change))


def test_a_responses_api_answer_cut_at_max_output_tokens_is_marked_as_cut():
    cut = _with(lambda r: r.update(status="incomplete", incomplete_details={"reason": "max_output_tokens"}))
    assert trace_from_openai(cut).metadata.extra["finish_reason"] == "length"  # what the pages call a cut answer
    other = _with(lambda r: r.update(status="incomplete", incomplete_details=None))
    assert trace_from_openai(other).metadata.extra["finish_reason"] == "incomplete"


def test_a_responses_api_stream_event_says_what_to_import():
    event = {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0,
             "delta": "Par", "logprobs": [], "sequence_number": 4}
    with pytest.raises(ValueError, match=r"it looks like one event of a Responses API stream "
                                         r"\('response\.output_text\.delta'\): import the finished response"):
        trace_from_openai(event)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_responses_api_objects_through_read_dataset(tmp_path, fmt):
    rows = [{"prompt": "Where?", "response": load(RESPONSES_API), "label": 1},
            {"prompt": "No logprobs", "response": _with(lambda r: _text_part(r).update(logprobs=[])), "label": 0}]
    with pytest.warns(DatasetWarning, match="rejected"):
        ds = read_dataset(write_rows(tmp_path, rows, fmt))
    assert ds.traces[0] == trace_from_openai(load(RESPONSES_API), prompt="Where?")
    assert ds.frame["answer"].tolist() == ["Paris, café."]
    assert [(e.row, e.field) for e in ds.errors] == [(2, "response")]
    assert 'include: ["message.output_text.logprobs"]' in ds.errors[0].message
