"""Responses recorded from real TGI servers import as traces.

The two fixtures are TGI's own integration-test snapshots (text-generation-inference, Apache-2.0): what a real
``/generate`` returned for bigscience/bloom-560m (one shard, ``top_p=0.9, seed=0, decoder_input_details=true``) and for
huggyllama/llama-7b (two shards, flash attention, greedy). Neither asked for ``top_n_tokens``, so ``top_tokens`` is
null: the chosen tokens' log-probabilities only, the most common real layout. The checks are computed here from the
fixture itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trace_core import read_dataset, trace_confidence
from trace_core.data import trace_from_openai
from trace_core.methods.risk import SURPRISAL_ONLY_CONFIG

RESPONSES = Path(__file__).resolve().parents[2] / "data" / "responses"
RECORDED = ["tgi_generate_bloom560m_recorded.json", "tgi_generate_llama7b_recorded.json"]


def load(name: str) -> dict:
    return json.loads((RESPONSES / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_tgi_responses_import_their_chosen_tokens(name):
    response = load(name)
    tokens = response["details"]["tokens"]
    trace = trace_from_openai(response, prompt="p")
    assert trace.metadata.extra == {"api": "tgi_generate", "finish_reason": response["details"]["finish_reason"]}
    assert trace.token_ids.tolist() == [t["id"] for t in tokens]
    assert trace.tokens == tuple(t["text"] for t in tokens)
    np.testing.assert_array_equal(trace.surprisal, [-t["logprob"] for t in tokens])
    assert trace.answer == response["generated_text"] == "".join(t["text"] for t in tokens)
    # No top tokens: no entropy, no alternatives, and the surprisal-only score still works.
    assert trace.entropy is None and trace.metadata.entropy_source == "absent"
    assert trace.top_ids.shape == (len(tokens), 0)
    assert 0.0 < trace_confidence(trace, config=SURPRISAL_ONLY_CONFIG) < 1.0


def test_the_recorded_prefill_is_the_prompt_not_the_answer():
    response = load("tgi_generate_bloom560m_recorded.json")
    prefill = response["details"]["prefill"]
    assert len(prefill) == 11 and prefill[0]["logprob"] is None  # the first prompt token has no log-prob
    trace = trace_from_openai(response)
    del response["details"]["prefill"]
    assert trace_from_openai(response) == trace
    assert trace.answer == " le faire fondre à la casserole avec"


def test_a_zero_log_probability_is_zero_surprisal_not_minus_zero(tmp_path):
    # top_p=0.9 leaves tokens with log-prob 0.0 in the bloom response; "-0.0" must not reach an export.
    trace = trace_from_openai(load("tgi_generate_bloom560m_recorded.json"))
    zeros = trace.surprisal[trace.surprisal == 0]
    assert len(zeros) == 3 and not np.signbit(zeros).any()
    # Nor from a `logprobs` column, on the fast CSV path or the per-row one.
    for body in ("[0.0,-0.5]", "[0, -0.5]"):  # the first without spaces takes the fast path
        path = tmp_path / "lp.csv"
        path.write_text(f'prompt,answer,label,tokens,logprobs\np,ab,1,"[""a"",""b""]","{body}"\n', encoding="utf-8")
        surprisal = read_dataset(path).traces[0].surprisal
        assert surprisal.tolist() == [0.0, 0.5] and not np.signbit(surprisal[0])


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_recorded_tgi_responses_through_read_dataset(tmp_path, fmt):
    rows = [{"prompt": f"p{i}", "response": load(name), "label": i % 2} for i, name in enumerate(RECORDED)]
    path = tmp_path / f"data.{fmt}"
    if fmt == "jsonl":
        path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    else:
        import pandas as pd

        pd.DataFrame([{**r, "response": json.dumps(r["response"], ensure_ascii=False)} for r in rows]).to_csv(
            path, index=False)
    ds = read_dataset(path)
    assert not ds.errors
    for i, name in enumerate(RECORDED):
        assert ds.traces[i] == trace_from_openai(load(name), prompt=f"p{i}")
    assert ds.frame["answer"].tolist() == [load(name)["generated_text"] for name in RECORDED]
