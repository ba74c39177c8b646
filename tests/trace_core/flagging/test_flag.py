from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from helpers import make_trace, random_traces

from trace_core import PlattCalibrator, TracePlus, explain_trace, trace_confidence
from trace_core.flagging.flag import score_rows, select_flagged, spike_context, spike_groups, threshold_for_risk


@pytest.fixture(scope="module")
def scored():
    traces = random_traces(60, seed=2)
    y = (trace_confidence(traces) > np.median(trace_confidence(traces))).astype(int)
    frame = pd.DataFrame({"prompt": [f"q{i}" for i in range(60)], "answer": [t.answer for t in traces]})
    return score_rows(frame, traces, TracePlus().fit(traces, y)), y, traces


def test_score_rows_adds_columns_and_keeps_inputs(scored):
    table, _, traces = scored
    assert list(table.columns[:2]) == ["prompt", "answer"]
    assert {"trace_confidence", "trace_risk", "probability_correct", "peak_risk_tokens", "spike_context"} \
        <= set(table.columns)
    assert table["probability_correct"].between(0, 1).all()
    scalar = score_rows(table[["prompt", "answer"]], traces,
                        PlattCalibrator().fit(trace_confidence(traces), np.arange(60) % 2))
    assert scalar["probability_correct"].between(0, 1).all()


def test_threshold_and_coverage(scored):
    table, _, _ = scored
    flagged = select_flagged(table, threshold=0.5)
    assert (flagged["probability_correct"] < 0.5).all()
    assert len(flagged) == int((table["probability_correct"] < 0.5).sum())
    assert flagged["probability_correct"].is_monotonic_increasing
    assert len(select_flagged(table, coverage=0.75)) == 15
    assert len(select_flagged(table, coverage=1.0)) == 0


def test_target_risk_keeps_the_largest_prefix_within_risk():
    p = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    y = np.array([1, 1, 0, 1, 0])
    # prefixes: 1/1 ok, 2/2 ok, 3 kept -> 1/3 errors, 4 -> 1/4, 5 -> 2/5
    assert threshold_for_risk(p, y, 0.25) == 0.6
    assert threshold_for_risk(p, y, 0.0) == 0.8
    assert threshold_for_risk(np.array([0.9]), np.array([0]), 0.1) == float("inf")
    table = pd.DataFrame({"probability_correct": p})
    assert select_flagged(table, target_risk=0.25, labels=y)["probability_correct"].tolist() == [0.5]


def test_target_risk_never_splits_ties():
    p = np.array([0.9, 0.7, 0.7, 0.5])
    y = np.array([1, 1, 0, 1])
    assert threshold_for_risk(p, y, 0.0) == 0.9  # keeping one 0.7 but not the other is impossible


@pytest.mark.parametrize("kwargs, match", [
    ({}, "exactly one"),
    ({"threshold": 0.5, "coverage": 0.5}, "exactly one"),
    ({"threshold": 1.5}, r"`threshold` must be a finite real number in \[0, 1\], got 1.5"),
    ({"coverage": 0.0}, r"`coverage` must be a finite real number in \(0, 1\], got 0.0"),
    ({"target_risk": 0.1}, "needs the answers' `labels`"),
])
def test_select_errors(scored, kwargs, match):
    with pytest.raises(ValueError, match=match):
        select_flagged(scored[0], **kwargs)


def test_select_options_of_the_wrong_type_raise_type_error(scored):
    with pytest.raises(TypeError, match="`threshold` must be a finite real number"):
        select_flagged(scored[0], threshold="0.5")
    with pytest.raises(TypeError, match="`width` must be an int >= 0"):
        spike_context(make_trace([0.1] * 4), [1], width=1.5)
    kept = select_flagged(scored[0], coverage=np.float32(0.5))  # numpy numbers are numbers
    assert len(kept) == len(select_flagged(scored[0], coverage=0.5))


def test_spike_context_marks_spikes_with_context():
    trace = make_trace([0.1] * 10)
    assert spike_context(trace, [5], width=1) == "…t4 [[t5 ]]t6 …"
    assert spike_context(trace, [0, 9], width=1) == "[[t0 ]]t1 …t8 [[t9 ]]"


def test_a_spike_without_text_is_shown_with_the_character_it_begins():
    # byte-level tokens: "" + "\u3069" spell one character; the last two are bytes the answer never completes
    tokens = ("\u308c", "\u306f", "", "\u3069", "\u308f", "", "\U0001f31f", "!", "", "")
    trace = dataclasses.replace(make_trace([0.1] * len(tokens)), tokens=tokens, answer="".join(tokens))
    assert spike_groups(tokens, [2, 3, 6, 8, 9]) == [(2, 3), (6, 6), (8, 8), (9, 9)]
    assert spike_context(trace, [2], width=1) == "\u2026\u306f[[\u3069]]\u308f\u2026"
    assert spike_context(trace, [2, 3], width=1) == "\u2026\u306f[[\u3069]]\u308f\u2026"  # one character, once
    assert spike_context(trace, [5], width=0) == "\u2026[[\U0001f31f]]\u2026"
    assert spike_context(trace, [8], width=1) == "\u2026![[\ufffd]]"
    assert spike_context(trace, [9], width=0) == "\u2026[[\ufffd]]"
    spiky = dataclasses.replace(trace, surprisal=np.array([0.1, 0.1, 3.0, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]))
    table = score_rows(pd.DataFrame({"answer": [spiky.answer]}), [spiky],
                       PlattCalibrator().fit(np.array([0.2, 0.8, 0.3, 0.9]), np.array([0, 1, 0, 1])))
    spikes = explain_trace(spiky).spikes.tolist()
    assert 2 in spikes and 3 not in spikes
    assert table["peak_risk_tokens"].iloc[0].split(" | ")[0] == "\u3069"
    assert "[[\u3069]]" in table["spike_context"].iloc[0] and "[[]]" not in table["spike_context"].iloc[0]


def test_no_spike_gives_empty_cells():
    trace = make_trace([0.1] * 10)
    assert spike_context(trace, []) == "" and spike_context(trace, np.zeros(0, dtype=np.int64)) == ""
    confident = make_trace([0.0, 0.02, 0.09])  # every token above 90% probability: nothing is marked
    spiky = make_trace([0.0, 0.02, 2.5])
    frame = pd.DataFrame({"answer": [confident.answer, spiky.answer]})
    table = score_rows(frame, [confident, spiky], PlattCalibrator().fit(np.array([0.2, 0.8, 0.3, 0.9]),
                                                                        np.array([0, 1, 0, 1])))
    assert table["peak_risk_tokens"].tolist() == ["", "t2 "]
    assert table["spike_context"].tolist() == ["", "t0 t1 [[t2 ]]"]


def test_score_rows_on_traces_without_entropy_uses_the_named_surprisal_only_variant():
    from trace_core import Trace, TraceMetadata
    from trace_core.methods.risk import SURPRISAL_ONLY_CONFIG

    full = random_traces(30, seed=5, min_len=2)
    bare = [Trace(prompt=t.prompt, answer=t.answer, token_ids=t.token_ids, tokens=t.tokens, surprisal=t.surprisal,
                  entropy=None, top_ids=np.zeros((len(t), 0)), top_logprobs=np.zeros((len(t), 0)),
                  metadata=TraceMetadata(entropy_source="absent")) for t in full]
    y = np.arange(30) % 2
    frame = pd.DataFrame({"prompt": [t.prompt for t in bare], "answer": [t.answer for t in bare]})
    table = score_rows(frame, bare, TracePlus(feature_set="surprisal").fit(bare, y))
    assert set(table["trace_variant"]) == {"TRACE (surprisal-only)"}
    np.testing.assert_allclose(table["trace_confidence"], trace_confidence(bare, config=SURPRISAL_ONLY_CONFIG))
    assert set(score_rows(frame, full, TracePlus().fit(full, y))["trace_variant"]) == {"TRACE"}


@pytest.mark.parametrize("taken", [["probability_correct"], ["trace_risk", "spike_context"], [" Trace_Confidence"],
                                   ["peak_risk_tokens", "trace_variant"]])
def test_score_rows_refuses_input_columns_named_like_its_output(taken):
    traces = random_traces(6, seed=4)
    frame = pd.DataFrame({"prompt": [f"q{i}" for i in range(6)], "answer": [t.answer for t in traces]})
    for c in taken:
        frame[c] = 0.5
    y = np.arange(6) % 2
    with pytest.raises(ValueError, match="already has column") as info:
        score_rows(frame, traces, TracePlus().fit(traces, y))
    assert all(repr(c) in str(info.value) for c in taken)
    assert frame[taken].eq(0.5).all().all()  # the caller's frame is untouched


def test_out_of_fold_probabilities_come_from_fits_without_each_answer():
    from helpers import random_traces
    from sklearn.metrics import roc_auc_score

    from trace_core.calibration.calibrators import TracePlus
    from trace_core.flagging.flag import out_of_fold_probabilities

    traces = random_traces(150, seed=11)
    y = np.random.default_rng(0).integers(0, 2, 150)  # labels unrelated to the traces
    model = TracePlus(feature_set="extended").fit(traces, y)
    in_sample = model.predict_proba(traces)
    oof = out_of_fold_probabilities(traces, y, model)
    assert oof.shape == (150,) and ((oof > 0) & (oof < 1)).all()
    assert roc_auc_score(y, in_sample) > 0.6 > roc_auc_score(y, oof)  # the fit flatters itself, out of fold not
    # fold k's answers are scored by a fit on the other folds, with the calibrator's settings
    fold = np.empty(150, dtype=int)
    for cls in (0, 1):
        at = np.flatnonzero(y == cls)
        fold[at] = np.arange(at.size) % 5
    rest = fold != 0
    by_hand = TracePlus(feature_set="extended").fit([t for t, r in zip(traces, rest, strict=True) if r], y[rest])
    np.testing.assert_allclose(oof[~rest], by_hand.predict_proba([t for t, r in zip(traces, rest, strict=True) if not r]))
    with pytest.raises(ValueError, match="labels"):
        out_of_fold_probabilities(traces, y[:10], model)


def test_an_export_without_the_spikes_in_context_is_flagged_again(tmp_path):
    # the dashboard's exports left spike_context out; flagging one again replaced nothing and refused the file
    from trace_core import write_dataset
    from trace_core.cli import main

    traces = random_traces(40, seed=4)
    labels = (trace_confidence(traces) > np.median(trace_confidence(traces))).astype(int)
    data, calibrator = tmp_path / "answers.jsonl", tmp_path / "cal.json"
    write_dataset(pd.DataFrame({"prompt": [f"q{i}" for i in range(40)], "answer": [t.answer for t in traces],
                                "label": labels}), data, traces=traces)
    assert main(["fit", str(data), "--out", str(calibrator), "--quiet"]) == 0
    first, again = tmp_path / "flagged.csv", tmp_path / "again.csv"
    assert main(["flag", str(data), "--calibrator", str(calibrator), "--coverage", "0.5", "--out", str(first),
                 "--quiet"]) == 0
    old = pd.read_csv(first, dtype=str, keep_default_na=False).drop(columns=["spike_context"])
    old.to_csv(first, index=False)
    assert main(["flag", str(first), "--calibrator", str(calibrator), "--threshold", "1.0", "--out", str(again),
                 "--quiet"]) == 0
    rescored = pd.read_csv(again)
    assert len(rescored) == len(old) and "spike_context" in rescored
    np.testing.assert_allclose(rescored["probability_correct"], old["probability_correct"].astype(float))
