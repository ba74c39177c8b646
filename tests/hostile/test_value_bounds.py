"""Bounds on the values the readers accept (trace_core.traces.logprobs' MAX_NATS, TOP_K_MASS_TOLERANCE,
MAX_ENTROPY_NATS, ENTROPY_TOLERANCE), and the response importer's choice of answer.

Each impossible value is checked through the library (``trace_from_openai``) and through ``read_dataset`` on a small
file: the bad row is rejected with a message naming the row and the field, the valid rows are kept. The boundary
cases that must still pass are here too.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from trace_core import read_dataset
from trace_core.data import DatasetWarning, trace_from_openai, write_dataset
from trace_core.traces.logprobs import (
    ENTROPY_TOLERANCE,
    MAX_ENTROPY_NATS,
    MAX_NATS,
    TOP_K_MASS_TOLERANCE,
)
from trace_core.traces.logprobs import (
    __all__ as LOGPROBS_ALL,
)

# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------

def alt(token: str, logprob: float) -> dict:
    return {"token": token, "logprob": logprob}


def step(token: str, logprob: float, *alternatives: dict) -> dict:
    return {"token": token, "logprob": logprob, "top_logprobs": list(alternatives)}


def chat(*steps: dict, text: str | None = None, **choice) -> dict:
    """A chat.completions response with one choice whose answer is the steps' tokens (or ``text``)."""
    content = "".join(s["token"] for s in steps) if text is None else text
    return {"object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop",
                         "logprobs": {"content": list(steps)}, **choice}]}


def completions(tokens: list[str], logprobs: list[float], tops: list[dict] | None = None) -> dict:
    return {"object": "text_completion", "choices": [{"index": 0, "text": "".join(tokens), "logprobs": {
        "tokens": tokens, "token_logprobs": logprobs, "top_logprobs": tops}}]}


GOOD = chat(step("Hi", -0.1, alt("Hi", -0.1), alt("Hey", -2.5)), step("!", -0.5, alt("!", -0.5), alt(".", -1.2)))


def write_jsonl(tmp_path, rows: list[dict], name: str = "data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def write_csv(tmp_path, rows: list[dict], name: str = "data.csv"):
    """Rows as CSV; list and dict cells become JSON text, as the reader expects."""
    path = tmp_path / name
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in r.items()}
                         for r in rows)
    return path


def read(path, *, rejects: bool):
    if rejects:
        with pytest.warns(DatasetWarning, match="rejected"):
            return read_dataset(path)
    return read_dataset(path)


def one_rejected(ds, row: int, field: str, *pieces: str) -> str:
    """The dataset rejected exactly ``row``, for ``field``, with a one-line message holding every piece."""
    assert [(e.row, e.field) for e in ds.errors] == [(row, field)], ds.errors
    message = ds.errors[0].message
    assert "\n" not in message
    for piece in pieces:
        assert piece in message, message
    assert str(ds.errors[0]).startswith(f"row {row}: {field}: ")
    return message


def response_rows(bad: dict) -> list[dict]:
    """Three rows with a `response` column: valid, ``bad``, valid."""
    return [{"prompt": "p1", "response": GOOD, "label": 1},
            {"prompt": "p2", "response": bad, "label": 0},
            {"prompt": "p3", "response": GOOD, "label": 1}]


def trace_row(prompt: str, **cells) -> dict:
    row = {"prompt": prompt, "answer": "ab", "label": 1, "tokens": ["a", "b"], "surprisal": [0.5, 1.0]}
    row.update(cells)
    return row


def trace_rows(**bad) -> list[dict]:
    """Three rows with trace columns: valid, one with ``bad`` cells, valid."""
    return [trace_row("p1"), trace_row("p2", **bad), trace_row("p3")]


def check_reader_rejects(tmp_path, rows: list[dict], field: str, *pieces: str) -> None:
    """Row 2 of ``rows`` is rejected for ``field`` in JSON Lines and in CSV; rows 1 and 3 are kept."""
    for path in (write_jsonl(tmp_path, rows), write_csv(tmp_path, rows)):
        ds = read(path, rejects=True)
        one_rejected(ds, 2, field, *pieces)
        assert ds.frame["prompt"].tolist() == ["p1", "p3"] and all(t is not None for t in ds.traces)


def test_constants_are_public_and_documented_values():
    assert {"MAX_NATS", "TOP_K_MASS_TOLERANCE", "MAX_ENTROPY_NATS", "ENTROPY_TOLERANCE"} <= set(LOGPROBS_ALL)
    assert MAX_NATS == 1000.0 and TOP_K_MASS_TOLERANCE == 0.01
    assert pytest.approx(31 * math.log(2)) == MAX_ENTROPY_NATS and 21.4 < MAX_ENTROPY_NATS < 21.5
    assert 0 < ENTROPY_TOLERANCE <= 1e-4


# --------------------------------------------------------------------------------------------------
# 1. A chosen token's log-probability below -MAX_NATS (-9999 for -inf, 1e308)
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [-9999.0, -1e308, -1000.5])
def test_importer_refuses_a_chosen_logprob_beyond_max_nats(value):
    bad = chat(step("Hi", -0.1, alt("Hi", -0.1)), step("!", value, alt(".", -0.2)))
    with pytest.raises(ValueError) as info:
        trace_from_openai(bad)
    message = str(info.value)
    assert message.startswith(f"choices[0].logprobs.content[1].logprob is {value!r}; below -1000 nats")
    assert "servers write -9999 for -inf" in message and "\n" not in message
    with pytest.raises(ValueError, match=r"^choices\[0\]\.logprobs\.token_logprobs\[1\] is -9999\.0; below -1000"):
        trace_from_openai(completions(["Hi", "!"], [-0.1, -9999.0]))


def test_importer_accepts_a_chosen_logprob_of_exactly_minus_max_nats():
    trace = trace_from_openai(chat(step("Hi", -0.1, alt("Hi", -0.1)), step("!", -MAX_NATS, alt(".", -0.2))))
    assert trace.surprisal.tolist() == [0.1, 1000.0]
    assert np.isfinite(trace.surprisal.sum())


def test_response_column_rejects_the_row_with_a_minus_9999_chosen_logprob(tmp_path):
    bad = chat(step("Hi", -0.1, alt("Hi", -0.1)), step("!", -9999.0, alt(".", -0.2)))
    ds = read(write_jsonl(tmp_path, response_rows(bad)), rejects=True)
    one_rejected(ds, 2, "response", "choices[0].logprobs.content[1].logprob is -9999.0", "below -1000 nats")
    assert ds.frame["prompt"].tolist() == ["p1", "p3"] and ds.frame["answer"].tolist() == ["Hi!", "Hi!"]


@pytest.mark.parametrize("cells, field, pieces", [
    ({"surprisal": [0.5, 9999.0]}, "surprisal", ["surprisal[1] is 9999.0; above 1000 nats", "-9999 for -inf"]),
    ({"surprisal": [1e308, 1.0]}, "surprisal", ["surprisal[0] is 1e+308; above 1000 nats"]),
    ({"surprisal": None, "logprobs": [-0.5, -9999.0]}, "logprobs", ["logprobs[1] is -9999.0; below -1000 nats"]),
])
def test_trace_columns_reject_a_surprisal_beyond_max_nats(tmp_path, cells, field, pieces):
    bad = {k: v for k, v in cells.items() if v is not None}
    rows = trace_rows(**bad)
    if "surprisal" in cells and cells["surprisal"] is None:
        del rows[1]["surprisal"]
    check_reader_rejects(tmp_path, rows, field, *pieces)


def test_trace_columns_accept_a_surprisal_of_exactly_max_nats(tmp_path):
    rows = [trace_row("p1", surprisal=[0.5, MAX_NATS]), trace_row("p2", surprisal=None, logprobs=[-MAX_NATS, -1.0])]
    del rows[1]["surprisal"]
    ds = read(write_jsonl(tmp_path, rows), rejects=False)
    assert ds.traces[0].surprisal.tolist() == [0.5, 1000.0] and ds.traces[1].surprisal.tolist() == [1000.0, 1.0]


# --------------------------------------------------------------------------------------------------
# 1b. Alternatives below -MAX_NATS are "no probability": dropped like -inf, in both readers
# --------------------------------------------------------------------------------------------------

def test_importer_drops_minus_9999_alternatives_as_it_drops_minus_inf():
    def response(placeholder: float) -> dict:
        return chat(step("Hi", -0.1, alt("Hi", -0.1), alt("Hey", -2.5), alt("x", placeholder)),
                    step("!", -0.5, alt("!", -0.5), alt(".", -1.2), alt("?", -3.0)))

    with_inf, with_9999 = trace_from_openai(response(-math.inf)), trace_from_openai(response(-9999.0))
    assert with_inf == with_9999  # the same trace, bit for bit
    assert with_9999.n_alternatives == 2 and with_9999.top_tokens == (("Hi", "Hey"), ("!", "."))
    np.testing.assert_array_equal(with_9999.entropy, with_inf.entropy)
    # Completions: the same rule.
    tops = [{"Hi": -0.1, "x": -9999.0}, {"!": -0.5, "?": -3.0}]
    trace = trace_from_openai(completions(["Hi", "!"], [-0.1, -0.5], tops))
    assert trace.n_alternatives == 1 and trace.top_logprobs.tolist() == [[-0.1], [-0.5]]


def test_importer_minus_inf_alternatives_as_before():
    trace = trace_from_openai(chat(step("Hi", -0.1, alt("Hi", -0.1), alt("Hey", -math.inf)),
                                   step("!", -0.5, alt("!", -0.5), alt(".", -1.2))))
    assert trace.n_alternatives == 1 and trace.top_logprobs.tolist() == [[-0.1], [-0.5]]


def test_trace_columns_drop_minus_9999_and_minus_inf_alternatives_like_the_importer(tmp_path):
    top = [[-0.1, -2.5, -9999.0], [-0.5, -1.2, -3.0]]
    tokens = [["a", "A", "x"], ["b", "B", "y"]]
    rows = [trace_row("p1", top_logprobs=top, top_tokens=tokens),
            trace_row("p2", top_logprobs=[[-0.1, -2.5, -math.inf], [-0.5, -1.2, -3.0]], top_tokens=tokens),
            trace_row("p3", top_logprobs=[[-0.1, -2.5], [-0.5, -1.2]], top_tokens=[["a", "A"], ["b", "B"]])]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")  # -inf as JSON's -Infinity
    ds = read(path, rejects=False)
    first, second, third = ds.traces
    assert first.n_alternatives == 2 and first.top_logprobs.tolist() == [[-0.1, -2.5], [-0.5, -1.2]]
    assert first.top_tokens == (("a", "A"), ("b", "B")) and first.metadata.entropy_k == 2
    # A placeholder, -inf, or no third alternative at all: the same trace.
    assert first == replace(second, prompt="p1") == replace(third, prompt="p1")
    assert np.isfinite(first.entropy).all()


# --------------------------------------------------------------------------------------------------
# 2. One step's probabilities add up to at most 1 + TOP_K_MASS_TOLERANCE
# --------------------------------------------------------------------------------------------------

def test_importer_refuses_alternatives_summing_above_one():
    # exp(-0.1) + exp(-0.2) + exp(-0.3) = 2.464
    bad = chat(step("Hi", -0.1, alt("Hi", -0.1)), step("!", -0.1, alt("!", -0.1), alt(".", -0.2), alt("?", -0.3)))
    with pytest.raises(ValueError, match=r"^choices\[0\]\.logprobs\.content\[1\]\.top_logprobs sum to probability "
                                         r"2\.464; more than 1 \+ 0\.01"):
        trace_from_openai(bad)
    tops = [{"Hi": -0.1}, {"!": -0.1, ".": -0.2, "?": -0.3}]
    with pytest.raises(ValueError, match=r"^choices\[0\]\.logprobs\.top_logprobs\[1\] sum to probability 2\.464"):
        trace_from_openai(completions(["Hi", "!"], [-0.1, -0.1], tops))


def test_importer_counts_the_chosen_token_when_it_is_not_among_the_alternatives():
    # Alternatives 0.5 + 0.4; the chosen token (not among them) 0.3: 1.2 in all.
    bad = chat(step("!", math.log(0.3), alt(".", math.log(0.5)), alt("?", math.log(0.4))))
    with pytest.raises(ValueError, match=r"content\[0\]\.top_logprobs sum to probability 1\.2, the chosen token's "
                                         r"0\.3 included \(it is not among them\)"):
        trace_from_openai(bad)
    # Among them, it is counted once: 0.5 + 0.4.
    trace_from_openai(chat(step(".", math.log(0.5), alt(".", math.log(0.5)), alt("?", math.log(0.4)))))


def test_importer_accepts_a_sum_within_the_rounding_tolerance():
    trace = trace_from_openai(chat(step("Hi", math.log(0.6), alt("Hi", math.log(0.6)), alt("Hey", math.log(0.405)))))
    assert trace.n_alternatives == 2  # 1.005 <= 1.01


def test_response_column_rejects_the_row_whose_alternatives_sum_above_one(tmp_path):
    bad = chat(step("Hi", -0.1, alt("Hi", -0.1), alt("Hey", -0.2), alt("Ho", -0.3)))
    ds = read(write_jsonl(tmp_path, response_rows(bad)), rejects=True)
    one_rejected(ds, 2, "response", "choices[0].logprobs.content[0].top_logprobs sum to probability 2.464")
    assert ds.frame["prompt"].tolist() == ["p1", "p3"]


def test_trace_columns_reject_a_step_whose_alternatives_sum_above_one(tmp_path):
    top = [[-0.1, -3.0, -4.0], [-0.1, -0.2, -0.3]]
    check_reader_rejects(tmp_path, trace_rows(top_logprobs=top), "top_logprobs",
                         "top_logprobs[1] sum to probability 2.464; more than 1 + 0.01")


def test_trace_columns_count_the_chosen_token_when_its_id_is_not_among_the_top_ids(tmp_path):
    top = [[math.log(0.5), math.log(0.4)], [math.log(0.5), math.log(0.4)]]
    # Step 1's chosen token (id 8, probability 0.3) is not among ids 1 and 2: 1.2 in all.
    bad = {"surprisal": [-math.log(0.5), -math.log(0.3)], "token_ids": [1, 8], "top_ids": [[1, 2], [1, 2]],
           "top_logprobs": top}
    check_reader_rejects(tmp_path, trace_rows(**bad), "top_logprobs",
                         "top_logprobs[1] sum to probability 1.2, the chosen token's 0.3 included")
    # Without ids it cannot be told apart: only the alternatives count (0.9).
    ds = read(write_jsonl(tmp_path, [trace_row("p", surprisal=bad["surprisal"], top_logprobs=top)]), rejects=False)
    assert ds.traces[0].n_alternatives == 2


def test_trace_columns_accept_a_sum_within_the_rounding_tolerance(tmp_path):
    top = [[math.log(0.6), math.log(0.405)], [-0.5, -1.5]]  # 1.005 and 0.83
    ds = read(write_csv(tmp_path, [trace_row("p", top_logprobs=top)]), rejects=False)
    assert ds.traces[0].top_logprobs.tolist() == top


# --------------------------------------------------------------------------------------------------
# 3. Several choices: the one with index 0 is the answer
# --------------------------------------------------------------------------------------------------

def two_choices(first_index, second_index) -> dict:
    a = chat(step("One", -0.2, alt("One", -0.2)))["choices"][0]
    b = chat(step("Zero", -0.3, alt("Zero", -0.3)))["choices"][0]
    a, b = dict(a), dict(b)
    for choice, index in ((a, first_index), (b, second_index)):
        if index is None:
            del choice["index"]
        else:
            choice["index"] = index
    return {"object": "chat.completion", "model": "m", "choices": [a, b]}


def test_importer_takes_the_choice_with_index_0_not_the_first_listed():
    trace = trace_from_openai(two_choices(1, 0))
    assert trace.answer == "Zero" and trace.surprisal.tolist() == [0.3]
    assert trace.metadata.extra == {"api": "chat", "finish_reason": "stop", "n_choices": 2}
    # Without indices, the first; n_choices still says there were others.
    trace = trace_from_openai(two_choices(None, None))
    assert trace.answer == "One" and trace.metadata.extra["n_choices"] == 2
    # A single choice is the answer whatever its index, and adds nothing to the metadata.
    single = two_choices(3, 0)
    single["choices"] = single["choices"][:1]
    trace = trace_from_openai(single)
    assert trace.answer == "One" and "n_choices" not in trace.metadata.extra


@pytest.mark.parametrize("indices, piece", [((1, 2), "none with index 0"), ((0, 0), "2 with index 0")])
def test_importer_refuses_several_choices_without_exactly_one_index_0(indices, piece):
    with pytest.raises(ValueError, match=r"^response has 2 choices and " + piece):
        trace_from_openai(two_choices(*indices))


def test_importer_messages_name_the_position_of_the_choice_imported():
    response = two_choices(1, 0)
    response["choices"][1]["logprobs"]["content"][0]["logprob"] = -9999.0
    with pytest.raises(ValueError, match=r"^choices\[1\]\.logprobs\.content\[0\]\.logprob is -9999\.0"):
        trace_from_openai(response)


def test_response_column_imports_choice_index_0_and_rejects_ambiguous_rows(tmp_path):
    rows = [{"prompt": "p1", "response": two_choices(1, 0), "label": 1},
            {"prompt": "p2", "response": two_choices(1, 2), "label": 0},
            {"prompt": "p3", "response": GOOD, "label": 1}]
    ds = read(write_jsonl(tmp_path, rows), rejects=True)
    one_rejected(ds, 2, "response", "response has 2 choices and none with index 0")
    assert ds.frame["answer"].tolist() == ["Zero", "Hi!"]
    assert ds.traces[0].metadata.extra["n_choices"] == 2


# --------------------------------------------------------------------------------------------------
# 4. A streamed chunk is not a response
# --------------------------------------------------------------------------------------------------

def chunk() -> dict:
    return {"object": "chat.completion.chunk", "model": "m", "choices": [{
        "index": 0, "delta": {"content": "Hi"}, "finish_reason": None,
        "logprobs": {"content": [step("Hi", -0.1, alt("Hi", -0.1))]}}]}


def test_importer_refuses_a_streamed_chunk():
    with pytest.raises(ValueError, match=r"^response is a streamed chunk .*join the stream's chunks into one "
                                         r"response first$"):
        trace_from_openai(chunk())
    # A chunk whose `object` is not given (or a text_completion chunk): its choice has a delta, not a message.
    no_object = chunk()
    del no_object["object"]
    no_object["choices"][0]["logprobs"] = {"tokens": ["Hi"], "token_logprobs": [-0.1]}
    with pytest.raises(ValueError, match=r"^response choices\[0\] has a `delta`, not a `message`: it is a streamed "
                                         r"chunk.*join the stream's chunks into one response first$"):
        trace_from_openai(no_object)


def test_response_column_rejects_a_streamed_chunk(tmp_path):
    ds = read(write_jsonl(tmp_path, response_rows(chunk())), rejects=True)
    one_rejected(ds, 2, "response", "streamed chunk", "join the stream's chunks into one response first")


# --------------------------------------------------------------------------------------------------
# 5. A non-empty answer needs tokens
# --------------------------------------------------------------------------------------------------

def test_importer_refuses_a_non_empty_answer_without_tokens():
    with pytest.raises(ValueError, match=r"^the answer is non-empty \('Hi there'\) but the response has no token "
                                         r"log-probabilities \(choices\[0\]\.logprobs\.content is empty\)"):
        trace_from_openai(chat(text="Hi there"))
    with pytest.raises(ValueError, match=r"no token log-probabilities \(choices\[0\]\.logprobs\.tokens is empty\)"):
        trace_from_openai({"choices": [{"text": "Hi", "logprobs": {"tokens": [], "token_logprobs": []}}]})
    # An empty answer with no tokens is fine: T = 0.
    assert len(trace_from_openai(chat(text=""))) == 0


def test_response_column_rejects_a_non_empty_answer_without_tokens(tmp_path):
    ds = read(write_jsonl(tmp_path, response_rows(chat(text="Hi there"))), rejects=True)
    one_rejected(ds, 2, "response", "the answer is non-empty", "no token log-probabilities")


# --------------------------------------------------------------------------------------------------
# 6. Entropy is at most log V (V known) or MAX_ENTROPY_NATS
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, shown", [(50.0, "50.0"), (1e308, "1e+308"), (21.5, "21.5")])
def test_trace_columns_reject_an_entropy_above_the_ceiling(tmp_path, value, shown):
    check_reader_rejects(tmp_path, trace_rows(entropy=[1.0, value]), "entropy",
                         f"entropy[1] is {shown}; above 21.49 nats = log(2**31) (MAX_ENTROPY_NATS)")


def test_trace_columns_accept_an_entropy_up_to_the_ceiling(tmp_path):
    ds = read(write_jsonl(tmp_path, [trace_row("p", entropy=[1.0, MAX_ENTROPY_NATS])]), rejects=False)
    assert ds.traces[0].entropy.tolist() == [1.0, MAX_ENTROPY_NATS]


def vocab_metadata(vocab_size) -> dict:
    return {"model_id": "m", "source": "generate", "entropy_source": "exact", "extra": {"vocab_size": vocab_size}}


def test_trace_columns_bound_entropy_by_log_v_when_the_vocabulary_size_is_known(tmp_path):
    log_v = math.log(100)  # 4.605
    rows = trace_rows(entropy=[1.0, 4.7], trace_metadata=vocab_metadata(100))
    rows[0]["entropy"], rows[0]["trace_metadata"] = [1.0, log_v + ENTROPY_TOLERANCE], vocab_metadata(100)
    check_reader_rejects(tmp_path, rows, "entropy", "entropy[1] is 4.7; above log V = 4.605 nats (V = 100")
    bad_v = trace_rows(entropy=[1.0, 2.0], trace_metadata=vocab_metadata("many"))
    check_reader_rejects(tmp_path, bad_v, "trace_metadata", "extra.vocab_size is 'many'")


def test_recorded_traces_store_the_vocabulary_size_and_are_read_back_with_it(tmp_path, tiny_models):
    from trace_core import DecodingConfig, generate_traces

    lm = tiny_models["gpt2"]
    traces = generate_traces(lm, ["Q: What is 12 plus 7? A:", "Numbers:"], config=DecodingConfig(max_new_tokens=4))
    assert all(t.metadata.extra["vocab_size"] == lm.vocab_size for t in traces)
    log_v = math.log(lm.vocab_size)
    assert all((t.entropy <= log_v + ENTROPY_TOLERANCE).all() for t in traces)
    frame = {"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": [1, 0]}
    import pandas as pd

    path = tmp_path / "recorded.jsonl"
    write_dataset(pd.DataFrame(frame), path, traces=traces)
    ds = read(path, rejects=False)
    assert ds.traces == traces
    # The same file with one entropy above log V (but below the general ceiling): that row is rejected.
    lines = path.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[1])
    record["entropy"][0] = log_v + 0.5
    lines[1] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ds = read(path, rejects=True)
    one_rejected(ds, 2, "entropy", f"above log V = {log_v:.4g} nats (V = {lm.vocab_size}")
    assert ds.frame["prompt"].tolist() == [traces[0].prompt]


# --------------------------------------------------------------------------------------------------
# Downstream: what used to overflow is stopped at reading
# --------------------------------------------------------------------------------------------------

def test_a_huge_surprisal_no_longer_reaches_the_scores(tmp_path):
    rows = [trace_row(f"p{i}", label=i % 2, surprisal=[0.5 + i, 1e308 if i == 3 else 1.0]) for i in range(6)]
    ds = read(write_jsonl(tmp_path, rows), rejects=True)
    one_rejected(ds, 4, "surprisal", "surprisal[1] is 1e+308")
    assert ds.n_valid == 5 and all(np.isfinite(t.surprisal.sum()) for t in ds.traces)
