"""The alternatives' text (``Trace.top_tokens``) stored at recording time, against independent decodes."""

from __future__ import annotations

import io
import sys

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from trace_core import DecodingConfig, generate_trace, generate_traces, score_answer, score_answers  # noqa: E402
from trace_core.data import read_dataset, write_dataset  # noqa: E402
from trace_core.record import alternative_pieces, encode_prompt  # noqa: E402

PROMPTS = ["Q: What is 12 plus 7? A:", "The capital of France is", "Unicode: café"]
# Newlines, tabs, leading spaces, accents, CJK and an emoji: byte-level pieces of partial characters and, for the
# Llama-style tokenizer, byte-fallback pieces.
ODD_ANSWER = " café naïve\n  日本語 🙂\tdone"


def decode(tokenizer, ids):
    return tokenizer.decode([int(i) for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False)


def expected_alternatives(tokenizer, trace):
    """What each alternative reads as, the slow way: the text the answer would have gained had it been chosen.

    None where that is not defined without the next tokens (a prefix ending inside a multi-byte character).
    """
    out = []
    for i in range(len(trace)):
        if i == 0:
            out.append([decode(tokenizer, [a]) for a in trace.top_ids[0]])
            continue
        prefix = trace.token_ids[:i].tolist()
        base = decode(tokenizer, prefix)
        if base.endswith("\ufffd"):
            out.append(None)
            continue
        row = []
        for a in trace.top_ids[i]:
            full = decode(tokenizer, prefix + [int(a)])
            row.append(full[len(base):] if full.startswith(base) else None)
        out.append(row)
    return out


def check_alternatives(lm, trace):
    assert trace.top_tokens is not None
    assert len(trace.top_tokens) == len(trace) and all(len(r) == trace.n_alternatives for r in trace.top_tokens)
    checked = 0
    expected = expected_alternatives(lm.tokenizer, trace)
    for i, row in enumerate(expected):
        if row is None:
            continue
        for j, want in enumerate(row):
            if want is not None:
                assert trace.top_tokens[i][j] == want, (i, j, int(trace.top_ids[i, j]))
                checked += 1
    assert checked >= trace.n_alternatives  # at least the first step is always compared
    # An alternative that is the chosen token has the chosen token's piece, unless a character is split over several
    # tokens there (the answer's pieces move such a character onto the token that completes it).
    for i, j in zip(*np.nonzero(trace.top_ids == trace.token_ids[:, None]), strict=True):
        if expected[i] is not None and "\ufffd" not in decode(lm.tokenizer, [trace.token_ids[i]]):
            assert trace.top_tokens[i][j] == trace.tokens[i]


@pytest.mark.parametrize("config", [
    DecodingConfig(max_new_tokens=16, n_alternatives=8),
    DecodingConfig(max_new_tokens=16, n_alternatives=8, do_sample=True, temperature=1.5, seed=4),
], ids=["greedy", "sampled"])
def test_generated_alternatives_read_as_they_would_in_the_answer(lm, config):
    for trace in generate_traces(lm, PROMPTS, config=config, batch_size=2):
        check_alternatives(lm, trace)


def test_generated_alternatives_with_the_chat_template(tiny_models):
    lm = tiny_models["gpt2"]
    trace = generate_trace(lm, "hello", config=DecodingConfig(max_new_tokens=8, n_alternatives=6,
                                                               chat_template=True))
    assert trace.metadata.chat_template is True
    check_alternatives(lm, trace)


def test_teacher_forced_alternatives_over_the_whole_vocabulary(lm):
    """k = V: every token is an alternative at every step (special, byte and partial-character tokens included)."""
    vocab = lm.vocab_size
    trace = score_answer(lm, PROMPTS[2], ODD_ANSWER, n_alternatives=vocab)
    assert trace.n_alternatives == vocab
    check_alternatives(lm, trace)
    texts = dict(zip(trace.top_ids[0].tolist(), trace.top_tokens[0], strict=True))
    assert {i: decode(lm.tokenizer, [i]) for i in range(vocab)} == texts  # the first step: each id decoded alone
    assert any("\ufffd" in t for t in texts.values())  # partial characters are there, and did not crash
    assert lm.tokenizer.eos_token in texts.values()  # special tokens are kept as text


def test_byte_level_alternatives_equal_each_id_decoded_alone(tiny_models):
    """A byte-level decoder has no context rule: every alternative reads as ``tokenizer.decode([id])``."""
    lm = tiny_models["gpt2"]
    trace = score_answer(lm, PROMPTS[0], ODD_ANSWER, n_alternatives=lm.vocab_size)
    for ids, texts in zip(trace.top_ids, trace.top_tokens, strict=True):
        assert list(texts) == [decode(lm.tokenizer, [i]) for i in ids]


def test_sentencepiece_alternatives_keep_their_leading_space_after_the_first_token(tiny_models):
    lm = tiny_models["llama"]
    tok = lm.tokenizer
    paris, bare = tok.convert_tokens_to_ids(["▁Paris", "Paris"]) if "Paris" in tok.get_vocab() else (None, None)
    trace = score_answer(lm, PROMPTS[1], " Paris is big", n_alternatives=lm.vocab_size)
    assert trace.tokens[1].startswith(" ")
    row = dict(zip(trace.top_ids[1].tolist(), trace.top_tokens[1], strict=True))
    space = tok.convert_tokens_to_ids("▁")
    assert decode(tok, [space]) == "" and row[space] == " "  # alone the decoder drops it; in an answer it is there
    if paris is not None:  # both spellings exist: they stay distinguishable
        assert (row[paris], row[bare]) == (" Paris", "Paris")


def test_batched_and_single_recordings_store_the_same_texts(lm):
    config = DecodingConfig(max_new_tokens=12, n_alternatives=5)
    singles = [generate_trace(lm, p, config=config) for p in PROMPTS]
    batched = generate_traces(lm, PROMPTS, config=config, batch_size=3)
    assert len({len(encode_prompt(lm.tokenizer, p)) for p in PROMPTS}) > 1  # left padding really happens
    for one, many in zip(singles, batched, strict=True):
        np.testing.assert_array_equal(one.top_ids, many.top_ids)
        assert one.top_tokens == many.top_tokens
    answers = [t.token_ids.tolist() for t in singles]
    scored = [score_answer(lm, p, a, n_alternatives=5) for p, a in zip(PROMPTS, answers, strict=True)]
    chunked = score_answers(lm, PROMPTS, answers, n_alternatives=5, batch_size=2, max_logits_bytes=4 * lm.vocab_size)
    for generated, one, many in zip(singles, scored, chunked, strict=True):
        np.testing.assert_array_equal(one.top_ids, many.top_ids)
        assert one.top_tokens == many.top_tokens
        np.testing.assert_array_equal(one.top_ids, generated.top_ids)  # teacher forcing = generation
        assert one.top_tokens == generated.top_tokens


def test_each_tokenizer_gives_its_own_texts(tiny_models):
    """The same ids recorded with two models read as each model's tokenizer says (what a model switch broke)."""
    ids = np.arange(40, 60).reshape(4, 5)
    texts = {arch: alternative_pieces(m.tokenizer, ids) for arch, m in tiny_models.items()}
    assert texts["gpt2"] != texts["llama"]
    for arch, m in tiny_models.items():
        assert texts[arch][0] == tuple(decode(m.tokenizer, [i]) for i in ids[0])


def test_texts_are_shared_per_id_and_do_not_grow_with_the_vocabulary():
    from bench._models import random_lm

    config = DecodingConfig(max_new_tokens=16, n_alternatives=3)
    per_token = {}
    for vocab in (300, 6000):
        lm = random_lm(vocab_size=vocab, hidden=32, layers=1)
        generated = generate_traces(lm, ["w1 w2 w3", "w4 w5"], config=config)
        traces = [*generated, score_answer(lm, "w1 w2 w3", generated[0].token_ids, n_alternatives=3)]
        # What top_tokens adds per token: one k-tuple of references; equal texts are one string object.
        rows = [row for t in traces for row in t.top_tokens[1:]]
        per_token[vocab] = {sys.getsizeof(row) for row in rows}
        seen: dict[int, str] = {}
        for t in traces:
            for ids, texts in zip(t.top_ids[1:].tolist(), t.top_tokens[1:], strict=True):
                for i, text in zip(ids, texts, strict=True):
                    assert seen.setdefault(i, text) is text
        assert len(seen) <= min(vocab, sum(t.top_ids.size for t in traces))
    assert per_token[300] == per_token[6000] and len(per_token[300]) == 1


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_recorded_texts_survive_writing_and_reading(lm, fmt):
    traces = [score_answer(lm, PROMPTS[2], ODD_ANSWER, n_alternatives=12),
              generate_trace(lm, PROMPTS[0], config=DecodingConfig(max_new_tokens=10, n_alternatives=12))]
    texts = {t for trace in traces for row in trace.top_tokens for t in row}
    assert any(t.startswith(" ") for t in texts) and any(not t.isascii() for t in texts)
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces],
                          "label": [1, 0]})
    buffer = io.BytesIO()
    write_dataset(frame, buffer, traces=traces, format=fmt)
    back = read_dataset(buffer.getvalue(), format=fmt)
    assert back.n_rejected == 0
    for got, want in zip(back.traces, traces, strict=True):
        assert got.top_tokens == want.top_tokens
        assert got == want


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_odd_alternative_texts_survive_writing_and_reading(tiny_models, fmt):
    """Alternatives chosen to be awkward: a newline, leading spaces, non-ASCII, partial characters, byte-fallback."""
    lm = tiny_models["llama"]
    tok = lm.tokenizer
    wanted = ["\n", "▁", "▁Paris", "<0xE6>", "<0xF0>", "é", "</s>", "<0x09>"]
    ids = [i for i in tok.convert_tokens_to_ids(wanted) if i is not None and i != tok.unk_token_id]
    trace = score_answer(lm, PROMPTS[2], ODD_ANSWER, n_alternatives=lm.vocab_size)
    columns = [int(np.flatnonzero(trace.top_ids[1] == i)[0]) for i in ids]
    texts = [trace.top_tokens[1][c] for c in columns]
    assert "\n" in texts and " " in texts and "\ufffd" in texts and "\t" in texts
    frame = pd.DataFrame({"prompt": [trace.prompt], "answer": [trace.answer], "label": [1]})
    buffer = io.BytesIO()
    write_dataset(frame, buffer, traces=[trace], format=fmt)
    back = read_dataset(buffer.getvalue(), format=fmt).traces[0]
    assert back.top_tokens == trace.top_tokens


class StrictTokenizer:
    """A tokenizer without a Rust backend whose decoding raises on ids 3 and 4 (strict UTF-8), to check the guard."""

    def __init__(self):
        self.texts = {0: "a", 1: " b", 2: "\n", 5: "é"}

    def __len__(self):
        return 6

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [0] if text == "a" else []}

    def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=False):
        if any(i in (3, 4) for i in ids):
            raise UnicodeDecodeError("utf-8", b"\xe6", 0, 1, "unexpected end of data")
        return "".join(self.texts[i] for i in ids)

    def batch_decode(self, batches, **kwargs):
        return [self.decode(ids, **kwargs) for ids in batches]


def test_undecodable_and_negative_ids_do_not_crash():
    tok = StrictTokenizer()
    rows = alternative_pieces(tok, [[0, 3, 5], [1, 4, -1], [2, 5, 0]])
    assert rows == (("a", "\ufffd", "é"), (" b", "\ufffd", ""), ("\n", "é", "a"))
    assert alternative_pieces(tok, np.zeros((0, 3), dtype=np.int64)) == ()
    with pytest.raises(ValueError, match="2-D"):
        alternative_pieces(tok, [1, 2])
