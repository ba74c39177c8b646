"""Traces without entropy (``entropy_source="absent"``), top-k estimates and the surprisal-only variants of TRACE and
TRACE+, on synthetic data shaped like real saved runs:

- chosen-token-only chains of 50-130 tokens where 50-60% of the token probabilities are exactly 1.0 (log-prob 0.0),
  the format of most saved runs (no entropy, no top-k);
- one-token answers with the top-10 log-probabilities (multiple-choice runs);
- an OpenAI chat response asked for ``logprobs=true`` without ``top_logprobs``.
"""

from __future__ import annotations

import io
import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from trace_core import Trace, TraceMetadata
from trace_core.data import entropy_from_top_k, read_dataset, trace_from_openai, write_dataset
from trace_core.methods.features import FEATURE_SETS, feature_matrix, feature_names, needs_entropy
from trace_core.methods.risk import (
    PAPER_CONFIG,
    SURPRISAL_ONLY_CONFIG,
    TraceConfig,
    config_for,
    describe_entropy,
    entropy_summary,
    explain_trace,
    stack_traces,
    trace_confidence,
    trace_risk,
)

ABSENT = TraceMetadata(source="imported", entropy_source="absent")


# --------------------------------------------------------------------------------------------------
# Synthetic data shaped like real saved runs
# --------------------------------------------------------------------------------------------------

def chain_logprobs(rng: np.random.Generator) -> np.ndarray:
    """A chain-of-draft answer: 50-130 chosen-token log-probs, 50-60% exactly 0.0 (probability 1.0)."""
    n = int(rng.integers(50, 131))
    logprobs = -rng.gamma(0.6, 0.8, size=n)
    certain = rng.permutation(n)[: int(round(rng.uniform(0.5, 0.6) * n))]
    logprobs[certain] = 0.0
    return logprobs


def chain_trace(rng: np.random.Generator, i: int = 0) -> Trace:
    lp = chain_logprobs(rng)
    tokens = tuple(f" w{j}" for j in range(lp.shape[0]))
    return Trace(prompt=f"Q{i}: 12 + 7 * 3 = ?", answer="".join(tokens), token_ids=np.full(lp.shape[0], -1),
                 tokens=tokens, surprisal=-lp, entropy=None, top_ids=[], top_logprobs=[], metadata=ABSENT)


def top10_row(rng: np.random.Generator) -> list[float]:
    """One step's top-10 log-probabilities, most likely first, summing to at most 1."""
    p = np.sort(rng.dirichlet(np.full(11, 0.3)))[::-1][:10]  # an 11th bucket keeps some mass outside the top 10
    return np.log(np.maximum(p, 1e-12)).tolist()


def one_token_rows(rng: np.random.Generator, n: int) -> list[dict]:
    """Multiple-choice answers: one token each, the chosen one the most likely, with its top-10 log-probs."""
    rows = []
    for i in range(n):
        top = top10_row(rng)
        rows.append({"prompt": f"MCQ {i}", "answer": "B", "label": int(i % 3 == 0), "tokens": ["B"],
                     "logprobs": [top[0]], "top_logprobs": [top],
                     "top_tokens": [["B", "A", "C", "D", " B", " A", "b", "a", "E", "c"]]})
    return rows


def jsonl_buffer(rows: list[dict], name: str = "runs.jsonl") -> io.BytesIO:
    buffer = io.BytesIO("\n".join(json.dumps(r) for r in rows).encode("utf-8"))
    buffer.name = name
    return buffer


def test_synthetic_chains_have_the_shape_of_real_runs():
    rng = np.random.default_rng(0)
    for _ in range(20):
        lp = chain_logprobs(rng)
        assert 50 <= lp.shape[0] <= 130
        assert 0.49 <= np.mean(np.exp(lp) == 1.0) <= 0.61


# --------------------------------------------------------------------------------------------------
# Trace and metadata
# --------------------------------------------------------------------------------------------------

def test_trace_without_entropy_round_trips_and_compares():
    trace = chain_trace(np.random.default_rng(1))
    assert not trace.has_entropy and trace.entropy is None and trace.n_alternatives == 0
    assert trace.to_dict()["entropy"] is None
    again = Trace.from_json(trace.to_json())
    assert again == trace and again.entropy is None
    with_entropy = Trace.from_dict({**trace.to_dict(), "entropy": trace.surprisal.tolist(),
                                    "metadata": TraceMetadata(source="imported").to_dict()})
    assert with_entropy.has_entropy and with_entropy != trace
    # The memory figure counts the arrays that exist: token ids and surprisal, 8 bytes per token each.
    assert trace.nbytes == 16 * len(trace)
    assert with_entropy.nbytes == 24 * len(trace)


def test_entropy_and_entropy_source_must_agree():
    base = chain_trace(np.random.default_rng(2)).to_dict()
    with pytest.raises(ValueError, match="`entropy` is None but `metadata.entropy_source` is 'exact'"):
        Trace.from_dict({**base, "metadata": {}})
    with pytest.raises(ValueError, match="'absent' but `entropy` was given"):
        Trace.from_dict({**base, "entropy": base["surprisal"]})


def test_metadata_entropy_sources_and_k():
    assert TraceMetadata().entropy_source == "exact" and TraceMetadata().entropy_k is None
    assert TraceMetadata(entropy_source="top_k", entropy_k=np.int64(10)).entropy_k == 10
    with pytest.raises(ValueError, match="`entropy_k` is 5 but `entropy_source` is 'exact'"):
        TraceMetadata(entropy_k=5)
    with pytest.raises(ValueError, match="`entropy_k` must be an int >= 1"):
        TraceMetadata(entropy_source="top_k", entropy_k=0)
    with pytest.raises(ValueError, match="`entropy_source` must be one of 'exact', 'top_k', 'absent'"):
        TraceMetadata(entropy_source="estimated")


def test_old_metadata_values_are_read():
    assert TraceMetadata.from_dict({"entropy_source": "full_vocabulary"}) == TraceMetadata(entropy_source="exact")
    old = TraceMetadata.from_dict({"entropy_source": "top_k_approximation"})
    assert (old.entropy_source, old.entropy_k) == ("top_k", None)
    # In a trace, k comes from the top-k width when the old metadata could not say it.
    top = [top10_row(np.random.default_rng(3))]
    trace = Trace.from_dict({"prompt": "p", "answer": "B", "token_ids": [-1], "tokens": ["B"],
                             "surprisal": [-top[0][0]], "entropy": entropy_from_top_k(top).tolist(),
                             "top_ids": [[-1] * 10], "top_logprobs": top,
                             "metadata": {"source": "imported", "entropy_source": "top_k_approximation"}})
    assert (trace.metadata.entropy_source, trace.metadata.entropy_k) == ("top_k", 10)
    assert Trace.from_json(trace.to_json()) == trace


# --------------------------------------------------------------------------------------------------
# Stacking and what the data held
# --------------------------------------------------------------------------------------------------

def test_stack_traces_entropy_is_none_when_any_trace_has_none():
    rng = np.random.default_rng(4)
    absent = [chain_trace(rng, i) for i in range(3)]
    exact = [Trace.from_dict({**t.to_dict(), "entropy": (t.surprisal + 0.5).tolist(), "metadata": {}})
             for t in absent]
    s, h = stack_traces(exact)
    assert h is not None and np.array_equal(h.offsets, s.offsets)
    s, h = stack_traces(exact[:2] + absent[:1])
    assert h is None and s.lengths.tolist() == [len(t) for t in exact[:2] + absent[:1]]
    assert stack_traces([])[1] is not None  # nothing lacks entropy


def test_entropy_summary_counts_sources_and_k():
    rng = np.random.default_rng(5)
    ds = read_dataset(jsonl_buffer(one_token_rows(rng, 4)))
    traces = ds.traces + [chain_trace(rng)] + [Trace.from_dict({**chain_trace(rng).to_dict(), "metadata": {},
                                                               "entropy": [0.0] * 60, "surprisal": [0.0] * 60,
                                                               "tokens": ["a"] * 60, "token_ids": [-1] * 60})]
    summary = entropy_summary(traces)
    assert summary == {"exact": 1, "top_k": 4, "absent": 1, "k": [10]}
    assert describe_entropy(summary) == ("entropy: exact (full distribution) for 1 answer; top-k estimate (k = 10) "
                                         "for 4 answers; absent (chosen-token log-probability only) for 1 answer")
    with pytest.raises(TypeError, match="wrap a single trace"):
        entropy_summary(traces[0])


# --------------------------------------------------------------------------------------------------
# TRACE (surprisal-only)
# --------------------------------------------------------------------------------------------------

def hand_surprisal_risk(s: list[float]) -> float:
    """R_s = 0.40 D_2(s) + 0.40 M_4(s) + 0.20 L_{1/4}(s), written out with the math module."""
    T = len(s)
    w = [2 / (2 + t) for t in range(T)]
    decay = sum(wi * si for wi, si in zip(w, s, strict=True)) / sum(w)
    window = sum(s) / T if T < 4 else max(sum(s[i:i + 4]) / 4 for i in range(T - 3))
    return 0.4 * decay + 0.4 * window + 0.2 * sum(s) / T ** 0.25


def test_surprisal_only_risk_matches_the_formula_by_hand():
    s = [0.0, 0.0, 2.0, 0.0, 1.5, 0.0]
    # D_2: w = [1, 2/3, 1/2, 2/5, 1/3, 2/7]; M_4 = max(3.5, 3.5, 3.5) / 4; L = 3.5 / 6 ** 0.25
    w = np.array([1, 2 / 3, 1 / 2, 2 / 5, 1 / 3, 2 / 7])
    expected = 0.4 * (2.0 * w[2] + 1.5 * w[4]) / w.sum() + 0.4 * 3.5 / 4 + 0.2 * 3.5 / 6 ** 0.25
    trace = Trace(prompt="", answer="", token_ids=[-1] * 6, tokens=("",) * 6, surprisal=s, entropy=None,
                  top_ids=[], top_logprobs=[], metadata=ABSENT)
    assert trace_risk(trace, config=SURPRISAL_ONLY_CONFIG) == pytest.approx(expected, rel=1e-12)
    assert hand_surprisal_risk(s) == pytest.approx(expected, rel=1e-12)
    assert trace_confidence(trace, config=SURPRISAL_ONLY_CONFIG) == pytest.approx(math.exp(-expected))


def test_surprisal_only_batch_on_realistic_chains():
    rng = np.random.default_rng(6)
    traces = [chain_trace(rng, i) for i in range(40)]
    risk = trace_risk(traces, config=SURPRISAL_ONLY_CONFIG)
    np.testing.assert_allclose(risk, [hand_surprisal_risk(t.surprisal.tolist()) for t in traces], rtol=1e-10)
    assert np.isfinite(risk).all()
    # On traces that do have entropy the variant ignores it.
    with_h = [Trace.from_dict({**t.to_dict(), "entropy": [9.0] * len(t), "metadata": {}}) for t in traces[:5]]
    np.testing.assert_allclose(trace_risk(with_h, config=SURPRISAL_ONLY_CONFIG), risk[:5], rtol=1e-12)


def test_trace_refuses_traces_without_entropy_instead_of_substituting():
    rng = np.random.default_rng(7)
    traces = [chain_trace(rng, i) for i in range(3)]
    with pytest.raises(ValueError, match=r"TRACE needs entropy for every answer but 3 of 3 traces have none.*"
                                         r"SURPRISAL_ONLY_CONFIG.*'TRACE \(surprisal-only\)'"):
        trace_risk(traces)
    with pytest.raises(ValueError, match="TRACE needs entropy"):
        trace_confidence(traces[0], config=PAPER_CONFIG)


def test_config_names_its_variant_and_config_for_switches_visibly():
    assert PAPER_CONFIG.variant == "TRACE" and SURPRISAL_ONLY_CONFIG.variant == "TRACE (surprisal-only)"
    assert TraceConfig(signal="surprisal") == SURPRISAL_ONLY_CONFIG and not SURPRISAL_ONLY_CONFIG.needs_entropy
    with pytest.raises(ValueError, match="`signal` must be one of 'entropy', 'surprisal'"):
        TraceConfig(signal="logits")
    rng = np.random.default_rng(8)
    absent = chain_trace(rng)
    exact = Trace.from_dict({**absent.to_dict(), "entropy": absent.surprisal.tolist(), "metadata": {}})
    assert config_for([exact]) is PAPER_CONFIG
    assert config_for([exact, absent]) == SURPRISAL_ONLY_CONFIG
    custom = TraceConfig(window=3)
    assert config_for([absent], custom) == TraceConfig(window=3, signal="surprisal")


def test_explain_trace_uses_the_surprisal_only_variant_and_says_so():
    s = [0.0] * 30
    s[17:20] = [3.0, 4.0, 2.5]
    trace = Trace(prompt="", answer="", token_ids=[-1] * 30, tokens=("",) * 30, surprisal=s, entropy=None,
                  top_ids=[], top_logprobs=[], metadata=ABSENT)
    exp = explain_trace(trace)
    assert exp.variant == "TRACE (surprisal-only)"
    assert exp.risk == pytest.approx(trace_risk(trace, config=SURPRISAL_ONLY_CONFIG))
    assert exp.contributions.sum() == pytest.approx(exp.risk)
    assert exp.peak_window == (16, 20) and 18 in exp.spikes
    with_h = Trace.from_dict({**trace.to_dict(), "entropy": [0.1] * 30, "metadata": {}})
    assert explain_trace(with_h).variant == "TRACE"
    assert explain_trace(Trace(prompt="", answer="", token_ids=[], tokens=(), surprisal=[], entropy=None,
                               top_ids=[], top_logprobs=[], metadata=ABSENT)).variant == "TRACE (surprisal-only)"


# --------------------------------------------------------------------------------------------------
# TRACE+ (surprisal-only) features
# --------------------------------------------------------------------------------------------------

def direct_surprisal_features(s: np.ndarray) -> list[float]:
    T = s.shape[0]

    def decayed(lam: float) -> float:
        w = lam / (lam + np.arange(T))
        return float(np.sum(w * s) / np.sum(w))

    slope = 0.0 if T < 2 else float(np.polyfit(np.arange(T), s, 1)[0])
    return [math.exp(-s[:3].mean()), math.exp(-s.mean()), math.log(T), slope, math.exp(-decayed(2)),
            math.exp(-decayed(4))]


def test_surprisal_feature_set_equals_a_direct_computation():
    rng = np.random.default_rng(9)
    traces = [chain_trace(rng, i) for i in range(25)]
    traces += read_dataset(jsonl_buffer(one_token_rows(rng, 5))).traces  # T = 1: slope 0, log T = 0
    assert feature_names("surprisal") == ("first3_surprisal_conf", "mean_surprisal_conf", "log_length",
                                          "surprisal_slope", "decayed_surprisal_conf_l2", "decayed_surprisal_conf_l4")
    F = feature_matrix(traces, feature_set="surprisal")
    np.testing.assert_allclose(F, [direct_surprisal_features(t.surprisal) for t in traces], rtol=1e-9, atol=1e-12)
    # The two decayed-surprisal features are the paper set's, not copies under new names.
    assert set(feature_names("surprisal")) & set(feature_names("paper")) == {
        "log_length", "decayed_surprisal_conf_l2", "decayed_surprisal_conf_l4"}


def test_feature_sets_that_need_entropy_refuse_traces_without_it():
    rng = np.random.default_rng(10)
    traces = [chain_trace(rng, i) for i in range(4)]
    for name in FEATURE_SETS:
        if needs_entropy(name):
            pattern = rf"feature set '{re.escape(name)}' needs entropy.* 4 of 4 traces have none"
            with pytest.raises(ValueError, match=pattern):
                feature_matrix(traces, feature_set=name)
    assert feature_matrix(traces, feature_set="surprisal").shape == (4, 6)


# --------------------------------------------------------------------------------------------------
# Reading: tables and API responses
# --------------------------------------------------------------------------------------------------

def test_chosen_token_only_rows_load_as_absent():
    rng = np.random.default_rng(11)
    rows = []
    for i in range(30):
        lp = chain_logprobs(rng)
        rows.append({"prompt": f"Q{i}", "answer": "x", "label": int(i % 2), "tokens": ["t"] * lp.shape[0],
                     "logprobs": lp.tolist()})
    ds = read_dataset(jsonl_buffer(rows))
    assert ds.errors == [] and ds.n_valid == 30
    for trace, row in zip(ds.traces, rows, strict=True):
        assert trace.entropy is None and trace.metadata.entropy_source == "absent"
        assert trace.metadata.entropy_k is None and trace.n_alternatives == 0
        assert np.array_equal(trace.surprisal, -np.asarray(row["logprobs"]))
    assert entropy_summary(ds.traces) == {"exact": 0, "top_k": 0, "absent": 30, "k": []}


def test_one_token_answers_with_top10_get_a_top_k_estimate():
    rng = np.random.default_rng(12)
    rows = one_token_rows(rng, 6)
    ds = read_dataset(jsonl_buffer(rows))
    assert ds.errors == []
    for trace, row in zip(ds.traces, rows, strict=True):
        assert (trace.metadata.entropy_source, trace.metadata.entropy_k) == ("top_k", 10)
        np.testing.assert_allclose(trace.entropy, entropy_from_top_k(row["top_logprobs"]), rtol=1e-12)
        assert trace.n_alternatives == 10 and len(trace) == 1


def test_empty_entropy_cells_make_those_rows_absent():
    text = ("prompt,answer,label,tokens,surprisal,entropy\n"
            'p,ab,1,"[""a"",""b""]","[0.0,1.0]","[0.5,0.7]"\n'
            'q,ab,0,"[""a"",""b""]","[0.0,2.0]",\n')
    buffer = io.BytesIO(text.encode())
    buffer.name = "mixed.csv"
    ds = read_dataset(buffer)
    assert ds.errors == []
    assert ds.traces[0].metadata.entropy_source == "exact" and ds.traces[0].entropy.tolist() == [0.5, 0.7]
    assert ds.traces[1].metadata.entropy_source == "absent" and ds.traces[1].entropy is None


def test_openai_response_without_top_logprobs_imports_as_absent():
    response = {"model": "m", "choices": [{"message": {"content": "7 + 5 = 12"}, "finish_reason": "stop",
                                           "logprobs": {"content": [
                                               {"token": "7", "logprob": 0.0, "bytes": [55], "top_logprobs": []},
                                               {"token": " +", "logprob": -0.25, "bytes": [32, 43]},
                                               {"token": " 5", "logprob": 0.0, "top_logprobs": []},
                                               {"token": " = 12", "logprob": -1.5, "top_logprobs": []}]}}]}
    trace = trace_from_openai(response, prompt="7 + 5?")
    assert trace.entropy is None and trace.metadata.entropy_source == "absent" and trace.metadata.entropy_k is None
    assert trace.surprisal.tolist() == [0.0, 0.25, 0.0, 1.5] and trace.tokens == ("7", " +", " 5", " = 12")
    assert trace.n_alternatives == 0 and trace.metadata.extra == {"api": "chat", "finish_reason": "stop"}
    assert Trace.from_json(trace.to_json()) == trace
    # With top_logprobs=2 at every step: a top-k estimate with k = 2.
    for entry in response["choices"][0]["logprobs"]["content"]:
        entry["top_logprobs"] = [{"token": entry["token"], "logprob": entry["logprob"]},
                                 {"token": "?", "logprob": -5.0}]
    trace = trace_from_openai(response)
    assert (trace.metadata.entropy_source, trace.metadata.entropy_k) == ("top_k", 2) and trace.has_entropy


# --------------------------------------------------------------------------------------------------
# Writing: every kind round-trips in every format
# --------------------------------------------------------------------------------------------------

def mixed_traces() -> list[Trace]:
    rng = np.random.default_rng(13)
    absent = [chain_trace(rng, i) for i in range(2)]
    top_k = read_dataset(jsonl_buffer(one_token_rows(rng, 2))).traces
    exact = Trace(prompt="Q", answer=" 4", token_ids=[5, 6], tokens=(" ", "4"), surprisal=[0.0, 1 / 3],
                  entropy=[0.1 + 0.2, 2.0], top_ids=[[5], [6]], top_logprobs=[[0.0], [-1 / 3]], ranks=[1, 1])
    return absent + top_k + [exact]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
@pytest.mark.parametrize("which", ["mixed", "absent only"])
def test_every_entropy_source_round_trips(tmp_path, fmt, which):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    traces = mixed_traces()
    if which == "absent only":
        traces = traces[:2]
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces],
                          "label": [i % 2 for i in range(len(traces))]})
    path = tmp_path / f"runs.{fmt}"
    write_dataset(frame, path, traces=traces)
    ds = read_dataset(path)
    assert ds.errors == [] and ds.traces == traces
    assert [t.metadata.entropy_source for t in ds.traces] == [t.metadata.entropy_source for t in traces]
    if fmt == "jsonl":
        first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        assert first.get("entropy") is None  # null (or no column at all), never a made-up value
    # Writing what was read gives the same traces again.
    buffer = io.BytesIO()
    write_dataset(ds.frame, buffer, traces=ds.traces, format=fmt)
    again = io.BytesIO(buffer.getvalue())
    again.name = f"again.{fmt}"
    assert read_dataset(again).traces == traces


def test_csv_writes_an_empty_entropy_cell_for_a_trace_without_entropy(tmp_path):
    traces = mixed_traces()
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces]})
    path = tmp_path / "runs.csv"
    write_dataset(frame, path, traces=traces)
    table = pd.read_csv(path, keep_default_na=False, dtype=str)
    assert table["entropy"].tolist()[:2] == ["", ""] and all(table["entropy"].tolist()[2:])
