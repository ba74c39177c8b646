"""Answers whose parts disagree with each other: a text the tokens do not spell, bytes that are not their token's,
a token listed twice with two log-probabilities, a chosen token whose own alternative entry gives another number.
Each is refused naming the row and the field (the file importer) or the field (a live server), while what real
servers legitimately write differently (tests/data/responses/, recorded from real servers) is still read."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from trace_core import read_dataset
from trace_core.data import DatasetWarning, trace_from_openai
from trace_core.record import ServerError
from trace_core.record.backends.server_steps import chat_rows, completion_rows
from trace_core.server_shapes.agreement import STOP_SLACK, bytes_agree

DATA = Path(__file__).resolve().parents[1] / "data"


def load(name: str) -> dict:
    return json.loads((DATA / "responses" / name).read_text(encoding="utf-8"))


def token(text: str, lp: float, *, raw: list[int] | None = None, alts: list | None = None) -> dict:
    """One chat ``logprobs.content`` entry; ``alts`` are (text, log-prob) or (text, log-prob, bytes)."""
    entry: dict = {"token": text, "logprob": lp, "bytes": list(text.encode()) if raw is None else raw}
    entry["top_logprobs"] = [{"token": a[0], "logprob": a[1], "bytes": list(a[2] if len(a) > 2 else a[0].encode())}
                             for a in (alts if alts is not None else [(text, lp)])]
    return entry


def chat(text: str | None, content: list[dict], *, finish: str = "stop", **message) -> dict:
    return {"object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": text,
                                                                         **message},
                         "logprobs": {"content": content}}]}


def responses_api(text: str, content: list[dict]) -> dict:
    return {"object": "response", "status": "completed", "model": "m", "output": [
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": text, "logprobs": content}]}]}


PARIS = [token(" Par", -0.5, alts=[(" Par", -0.5), (" Lon", -1.5)]), token("is", -0.1)]


# --------------------------------------------------------------------------------------------------
# 1. The tokens must spell the text


@pytest.mark.parametrize("response, field", [
    (chat(" London", PARIS), "choices[0].message.content"),
    (responses_api(" London", PARIS), "output[0].content[0].text"),
])
def test_a_text_its_tokens_do_not_spell_is_refused_showing_both(response, field):
    with pytest.raises(ValueError, match=f"^{re.escape(field)} is ' London' but the tokens "
                                         r"\(.*\) spell ' Paris'; expected the tokens to spell the answer text"):
        trace_from_openai(response)


def test_a_long_disagreement_is_shown_clipped_from_where_it_starts():
    same, tail = "word " * 400, " and more" * 300
    response = chat(same + "London" + tail, [token(same, -0.1), token("Paris" + tail, -0.2)])
    with pytest.raises(ValueError) as info:
        trace_from_openai(response)
    message = str(info.value)
    assert "content is 'word word word word London and more and more and m'... from character 1980" in message
    assert "spell 'word word word word Paris and more and more and mo'..." in message and len(message) < 300, message


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_the_file_importer_refuses_the_row_and_keeps_the_others(tmp_path, fmt):
    rows = [{"prompt": "p1", "response": chat(" Paris", PARIS), "reference": "Paris"},
            {"prompt": "p2", "response": chat(" London", PARIS), "reference": "London"},
            {"prompt": "p3", "response": responses_api(" London", PARIS), "reference": "London"},
            {"prompt": "p4", "response": responses_api(" Paris", PARIS), "reference": "Paris"}]
    path = tmp_path / f"data.{fmt}"
    if fmt == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    else:
        import pandas as pd
        pd.DataFrame([{**r, "response": json.dumps(r["response"])} for r in rows]).to_csv(path, index=False)
    with pytest.warns(DatasetWarning, match="rejected"):
        ds = read_dataset(path, matcher="contains")
    assert ds.frame["prompt"].tolist() == ["p1", "p4"] and ds.labels.tolist() == [1, 1]
    assert [(e.row, e.field) for e in ds.errors] == [(2, "response"), (3, "response")]
    assert "choices[0].message.content is ' London' but the tokens" in ds.errors[0].message
    assert "output[0].content[0].text is ' London' but the tokens" in ds.errors[1].message


def test_what_real_servers_write_differently_is_still_read():
    vllm = load("vllm_chat.json")  # partial characters: tokens "" with bytes [], the text U+FFFD
    assert trace_from_openai(vllm).answer == vllm["choices"][0]["message"]["content"]
    tgi = load("tgi_generate.json")  # the special end token is not in generated_text
    assert trace_from_openai(tgi).answer == " Paris"
    # The answer that stopped on vLLM's end-of-answer token lists it, the text does not write it.
    eos = token("<|endoftext|>", -0.2)
    assert trace_from_openai(chat(" Paris", [*PARIS, eos])).answer == " Paris"
    # A stop sequence inside a token: the text ends before it (vLLM), or the tokens end earlier (llama.cpp).
    assert trace_from_openai(chat(" Paris", [*PARIS, token(".\nQ", -0.3)])).answer == " Paris"
    assert trace_from_openai(chat(" Paris.", PARIS)).answer == " Paris."
    # Leading and trailing whitespace of the whole answer.
    assert trace_from_openai(chat("Paris\n", PARIS)).answer == "Paris\n"
    # Reasoning beside the text: the tokens spell it too.
    think = [token("<think>", -0.1), token("hmm", -0.1), token("</think>", -0.1), *PARIS]
    assert trace_from_openai(chat(" Paris", think, reasoning_content="hmm")).answer == " Paris"


def test_what_real_servers_write_differently_is_bounded():
    with pytest.raises(ValueError, match="spell ' Paris<|endoftext|>'"):  # an answer cut at its length: no slack
        trace_from_openai(chat(" Paris", [*PARIS, token("<|endoftext|>", -0.2)], finish="length"))
    beyond = token("." * (STOP_SLACK + 1), -0.3)
    with pytest.raises(ValueError, match="expected the tokens to spell"):
        trace_from_openai(chat(" Paris", [*PARIS, beyond]))
    think = [token("<think>", -0.1), token("hmm", -0.1), token("</think>", -0.1), *PARIS]
    with pytest.raises(ValueError, match="expected the tokens to spell"):
        trace_from_openai(chat(" London", think, reasoning_content="hmm"))
    with pytest.raises(ValueError, match="expected the tokens to spell"):  # U+FFFD stands for no real letter
        trace_from_openai(chat(" Par\ufffds", [token(" Par", -0.5), token("i", -0.1), token("s", -0.1)]))


# --------------------------------------------------------------------------------------------------
# 2. A token's bytes must be its own


@pytest.mark.parametrize("where, change", [
    ("choices[0].logprobs.content[1].bytes", lambda c: c[1].update(bytes=list(b"on"))),
    ("choices[0].logprobs.content[0].top_logprobs[1].bytes",
     lambda c: c[0]["top_logprobs"][1].update(bytes=list(b" Ber"))),
])
def test_bytes_that_are_not_their_token_are_refused(where, change):
    response = chat(" Paris", copy.deepcopy(PARIS))
    change(response["choices"][0]["logprobs"]["content"])
    with pytest.raises(ValueError, match=f"^{re.escape(where)} is .* but the token is '(is| Lon)'; expected the "
                                         "token's own"):
        trace_from_openai(response)


@pytest.mark.parametrize("text, raw", [
    ("é", "é".encode()),
    ("", b"\xc3"),  # llama.cpp: the token cut to valid UTF-8
    ("\ufffd", b"\x96"),  # llama.cpp, Ollama: a partial character shown as U+FFFD
    ("a\ufffd", b"a\xe6\x97"),
    ("\ud83d", b"\xf0\x9f"),  # half a surrogate pair, as UTF-16 servers show part of an emoji
    ("\\xc3", b"\xc3"),  # OpenAI chat
    ("bytes:\\xe6\\x97", b"\xe6\x97"),  # OpenAI completions
    ("byte: \\xe6", b"\xe6"),  # old llama.cpp
    ("<0x0A>", b"\n"),  # SentencePiece byte tokens
    ("▁the", b" the"),  # SentencePiece
    ("Ġthe", b" the"),  # GPT-2's byte-level alphabet
    ("Ċ", b"\n"),
    ("token_id:5", b"Paris"),  # vLLM's return_tokens_as_token_ids: an id, not a rendering
])
def test_lossy_or_written_forms_of_the_bytes_agree(text, raw):
    assert bytes_agree(text, raw)


@pytest.mark.parametrize("text, raw", [("is", b"on"), ("", b"on"), ("é", b"e"), ("\ufffd", b"ab"), ("Ġthe", b"the"),
                                       ("<0x0A>", b"\r")])
def test_clearly_other_bytes_disagree(text, raw):
    assert not bytes_agree(text, raw)


def test_the_recorded_byte_forms_still_import_from_their_bytes():
    for name in ("llamacpp_completion_recorded.json", "llamacpp_v1_chat_recorded.json", "llamacpp_completion.json"):
        trace = trace_from_openai(load(name))
        assert "".join(trace.tokens) == trace.answer, name


# --------------------------------------------------------------------------------------------------
# 3 and 4. One token, one log-probability per step


def test_a_token_listed_twice_with_two_log_probabilities_is_refused():
    content = [token(" Par", -0.5, alts=[(" Par", -0.5), (" Lon", -1.5), (" Lon", -2.5)]), token("is", -0.1)]
    with pytest.raises(ValueError, match=r"^choices\[0\]\.logprobs\.content\[0\]\.top_logprobs lists ' Lon' twice "
                                         r"\(\[1\] and \[2\]\) with the log-probabilities -1\.5 and -2\.5; expected "
                                         "each token once"):
        trace_from_openai(chat(" Paris", content))


def test_a_token_listed_twice_with_one_log_probability_is_kept_once():
    content = [token(" Par", -0.5, alts=[(" Par", -0.5), (" Lon", -1.5), (" Lon", -1.5 + 1e-9)]),
               token("is", -0.1, alts=[("is", -0.1), ("on", -3.0)])]
    trace = trace_from_openai(chat(" Paris", content))
    assert trace.top_tokens == ((" Par", " Lon"), ("is", "on"))
    assert trace.metadata.entropy_k == 2


def test_tokens_told_apart_by_id_may_share_a_text():
    response = load("llamacpp_completion.json")
    alts = response["completion_probabilities"][0]["top_logprobs"]
    alts.append({**alts[-1], "id": alts[-1]["id"] + 1000, "logprob": alts[-1]["logprob"] - 1})
    trace_from_openai(response)  # another id, the same text: two tokens
    alts[-1]["id"] -= 1000
    with pytest.raises(ValueError, match=r"completion_probabilities\[0\]\.top_logprobs lists .* \(id \d+\) twice"):
        trace_from_openai(response)


def test_tokens_whose_bytes_are_unknown_are_not_duplicates():
    vllm = load("vllm_chat.json")  # step 5 offers three tokens "" with bytes [], each another token
    assert [a["token"] for a in vllm["choices"][0]["logprobs"]["content"][5]["top_logprobs"]].count("") == 3
    trace_from_openai(vllm)


@pytest.mark.parametrize("name, change, match", [
    ("chat", lambda r: r["choices"][0]["logprobs"]["content"][0]["top_logprobs"][0].update(logprob=-0.7),
     r"choices\[0\]\.logprobs\.content\[0\]\.top_logprobs\[0\] gives the chosen token, ' Par', the log-probability "
     r"-0\.7 but the step gives it -0\.5"),
    ("completions", lambda r: r["choices"][0]["logprobs"]["top_logprobs"][0].update({" 4": -0.9}),
     r"choices\[0\]\.logprobs\.top_logprobs\[0\]\[\d\] gives the chosen token, ' 4',"),
    ("tgi", lambda r: r["details"]["top_tokens"][1][0].update(logprob=-0.5),
     r"details\.top_tokens\[1\]\[0\] gives the chosen token, 'is' \(id 275\),"),
])
def test_a_chosen_token_whose_alternative_gives_another_log_probability_is_refused(name, change, match):
    response = {"chat": lambda: chat(" Paris", copy.deepcopy(PARIS)),
                "completions": lambda: json.loads((DATA / "openai_completions_response.json").read_text()),
                "tgi": lambda: load("tgi_generate.json")}[name]()
    trace_from_openai(response)
    change(response)
    with pytest.raises(ValueError, match=match):
        trace_from_openai(response)


def test_a_log_probability_printed_with_less_precision_is_the_same():
    content = [token(" Par", -0.5, alts=[(" Par", -0.5000004), (" Lon", -1.5)]), token("is", -0.1)]
    assert trace_from_openai(chat(" Paris", content)).surprisal[0] == 0.5


# --------------------------------------------------------------------------------------------------
# The same rules for a live server's answers


def _chat_choice(steps: list[dict]) -> dict:
    return {"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "x"},
            "logprobs": {"content": steps}}


@pytest.mark.parametrize("steps, match", [
    ([{"token": "token_id:5", "logprob": -0.5, "top_logprobs": [
        {"token": "token_id:5", "logprob": -0.5}, {"token": "token_id:6", "logprob": -1.5},
        {"token": "token_id:06", "logprob": -2.5}]}],
     r"the server's logprobs\.content\[0\]\.top_logprobs lists the token id 6 twice \(\[1\] and \[2\]\)"),
    ([{"token": "token_id:5", "logprob": -0.5, "top_logprobs": [
        {"token": "token_id:6", "logprob": -1.5}, {"token": "token_id:5", "logprob": -0.9}]}],
     r"top_logprobs\[1\] gives the chosen token, the token id 5, the log-probability -0\.9 but the step gives it -0\.5"),
    ([{"token": "token_id:5", "logprob": -0.5, "bytes": list(b"Paris"), "top_logprobs": [
        {"token": "token_id:5", "logprob": -0.5, "bytes": list(b"Paris")},
        {"token": "London", "logprob": -1.5, "bytes": list(b"Paris")}]}],
     r"the server's logprobs\.content\[0\]\.top_logprobs\[1\]\.bytes is .* but the token is 'London'"),
])
def test_a_live_chat_answer_that_disagrees_with_itself_is_refused(steps, match):
    with pytest.raises(ServerError, match=match):
        chat_rows(_chat_choice(steps), 0, 100)
    good = [{"token": "token_id:5", "logprob": -0.5, "bytes": list(b"Paris"), "top_logprobs": [
        {"token": "token_id:5", "logprob": -0.5, "bytes": list(b"Paris")},
        {"token": "token_id:6", "logprob": -1.5}, {"token": "token_id:6", "logprob": -1.5}]}]
    ids, rows = chat_rows(_chat_choice(good), 0, 100)
    assert ids == [5] and rows[0].ids.tolist() == [5, 6]


@pytest.mark.parametrize("top, match", [
    ({"token_id:5": -0.9, "token_id:6": -1.5}, "gives the chosen token, the token id 5, the log-probability -0.9"),
    ({"token_id:5": -0.5, "token_id:6": -1.5, "token_id:006": -2.5}, "lists the token id 6 twice"),
])
def test_a_live_completion_that_disagrees_with_itself_is_refused(top, match):
    choice = {"index": 0, "text": "x", "finish_reason": "length",
              "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-0.5], "top_logprobs": [top]}}
    with pytest.raises(ServerError, match=match):
        completion_rows(choice, 0, 100)
    choice["logprobs"]["top_logprobs"] = [{"token_id:5": -0.5, "token_id:6": -1.5}]
    assert completion_rows(choice, 0, 100)[0] == [5]
