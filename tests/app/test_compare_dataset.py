"""Compare over a dataset (app.compare_dataset): the same prompts answered by A and B, evaluated side by side, and
the prompts where they disagree."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import dashboard

pytest.importorskip("streamlit")
pytest.importorskip("torch")

from app.compare_dataset import disagreements, label_hints, labels_of, side_table  # noqa: E402
from trace_core import DecodingConfig, EvaluationConfig, evaluate, generate_traces, label_from_reference  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_dataset_answered_greedy_and_sampled_side_by_side():
    at = dashboard("../pages/compare.py", timeout=300)
    at.radio(key="compare_scope").set_value("A dataset of prompts").run()
    assert not at.exception
    at.selectbox(key="compare_demo_dataset").set_value("demo_validation").run()
    at.number_input(key="compare_n_prompts").set_value(30).run()
    at.number_input(key="compare_temperature").set_value(1.5).run()
    assert at.button(key="compare_dataset_run").label == "Answer 30 prompts with A and with B"
    at.button(key="compare_dataset_run").click().run()
    assert not at.exception and not at.error

    demo = pd.read_csv(ROOT / "assets" / "datasets" / "demo_validation.csv").head(30)
    lm = at.session_state["lm"]
    a = generate_traces(lm, demo["prompt"].tolist(), config=at.session_state["decoding"])
    b = generate_traces(lm, demo["prompt"].tolist(), config=DecodingConfig(do_sample=True, temperature=1.5, seed=0))
    la = [label_from_reference(t.answer, r) for t, r in zip(a, demo["reference"], strict=True)]
    lb = [label_from_reference(t.answer, r) for t, r in zip(b, demo["reference"], strict=True)]
    texts = " ".join(html.unescape(m.value) for m in at.markdown)
    assert f"**A** is right on {sum(la)} ({np.mean(la):.1%}) and **B** on {sum(lb)} ({np.mean(lb):.1%})" in texts
    table = at.dataframe[0].value.set_index("method")
    warnings = [html.unescape(w.value) for w in at.warning]
    assert f"A's figures are unreliable: 30 answers ({sum(la)} right, {30 - sum(la)} wrong)" in " ".join(warnings)
    if 0 < sum(la) < 30:  # A's methods measured as Calibrate would
        expected = evaluate(a, np.array(la), config=EvaluationConfig(n_splits=10)).table(calibrator="platt")
        assert table.loc["TRACE", "auroc A"] == pytest.approx(expected.loc["TRACE", "auroc"])
        assert table.loc["TRACE+", "brier A"] == pytest.approx(expected.loc["TRACE+", "brier"])
    differ = [i for i in range(30) if la[i] != lb[i]]
    if differ:
        rows = at.dataframe[1].value
        assert rows["row"].tolist() == [i + 1 for i in differ]
        assert rows["answer A"].tolist() == [a[i].answer for i in differ]


def test_side_table_and_disagreements_by_hand():
    from helpers import make_trace

    traces = {"A": [make_trace([0.1, 0.2]), make_trace([2.0]), make_trace([0.3])],
              "B": [make_trace([0.1, 0.2]), make_trace([0.2]), make_trace([3.0])]}
    labels = {"A": np.array([1, 0, 1]), "B": np.array([1, 1, -1])}
    diff = disagreements(traces, labels, ["p1", "p2", "p3"], [4, 5, 6])
    assert diff["row"].tolist() == [5] and diff["A correct"].tolist() == [False] and diff["B correct"].tolist() == [True]
    assert list(diff.columns) == ["row", "answer A", "A correct", "answer B", "B correct", "TRACE A", "TRACE B",
                                  "prompt"]
    assert side_table({"A": None, "B": None}).empty
    assert labels_of([make_trace([0.1])], [object()], "exact").tolist() in ([0], [-1])


def test_a_side_whose_sentences_exact_matching_labels_wrong_is_warned_of():
    from dataclasses import replace

    from helpers import make_trace

    answers = {"A": ["Paris", "Rome", "I think it is Lyon."], "B": ["It is Paris.", "Rome", "It is Lyon."]}
    traces = {side: [replace(make_trace([0.5]), answer=a) for a in texts] for side, texts in answers.items()}
    references = ["Paris", "Rome", "Lyon"]
    labels = {side: labels_of(traces[side], references, "exact") for side in traces}
    assert labels["A"].tolist() == [1, 1, 0] and labels["B"].tolist() == [0, 1, 0]
    hints = label_hints(traces, references, labels, [2, 3, 4], "exact")
    assert len(hints) == 2 and hints[0].startswith("A: the one answer that the exact matcher labeled wrong holds its reference") and "row 4:" in hints[0]
    assert hints[1].startswith("B: 2 of the 2 answers") and "row 2: 'It is Paris.'" in hints[1]
    contains = {side: labels_of(traces[side], references, "contains") for side in traces}
    assert label_hints(traces, references, contains, [2, 3, 4], "contains") == []

