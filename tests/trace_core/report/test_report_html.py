"""The HTML report (trace_core.report.html, `trace-core evaluate --report`): the tables' numbers, the verdict, every data
text escaped, settings, versions and provenance; refused before any work when the name is wrong."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest
from helpers import random_traces

from trace_core import EvaluationConfig, evaluate
from trace_core.cli import main
from trace_core.evaluation.results import average_results
from trace_core.report.html import report_html

HOSTILE = "<script>window.__pwned=1</script>"


@pytest.fixture(scope="module")
def results():
    traces = random_traces(240, seed=2)
    y = (np.array([t.surprisal.mean() for t in traces]) < 1.0).astype(int)
    config = EvaluationConfig(n_splits=4, stratified=True)
    groups = {f"family = {HOSTILE}": evaluate(traces[:120], y[:120], config=config),
              "family = plain": evaluate(traces[120:], y[120:], config=config)}
    return {**groups, "average": average_results(groups)}


def test_report_holds_the_tables_verdict_settings_and_versions(results):
    text = report_html(results, title="Report", data={"file": "data.csv"},
                       provenance={"model_id": ["m"], "feature_set": "paper"})
    first = results[f"family = {HOSTILE}"]
    table = first.table()
    assert f"{table.loc['TRACE+', 'brier']:.3f} ± {table.loc['TRACE+', 'brier_std']:.3f}" in text
    assert html.escape(first.verdict().sentence) in text
    assert "<h2>Settings</h2>" in text and "<h2>Versions</h2>" in text and "trace-core" in text
    assert "<h2>Calibrator provenance</h2>" in text and "data.csv" in text
    assert text.count("plotly-graph-div") >= 6  # three figures per group, none for the average
    assert text.count("<script type=\"text/javascript\">/**") <= 1  # plotly.js inline once
    assert HOSTILE not in text.replace("\\u003cscript", "")  # never raw in the HTML
    assert html.escape(HOSTILE) in text
    assert not re.search(r"<script[^>]*src=", text)  # nothing fetched when it opens


def test_report_refuses_nothing_to_report_and_an_unknown_calibrator(results):
    with pytest.raises(ValueError, match="nothing to report"):
        report_html({})
    with pytest.raises(ValueError, match="calibrator"):
        report_html(results, calibrator="magic")


def test_cli_writes_the_report_and_checks_its_name_first(tmp_path, capsys):
    from trace_core import write_dataset

    traces = random_traces(120, seed=3)
    y = (np.array([t.surprisal.mean() for t in traces]) < 1.0).astype(int)
    path = tmp_path / "data.jsonl"
    import pandas as pd

    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y})
    write_dataset(frame, path, traces=traces)
    out = tmp_path / "report.html"
    assert main(["evaluate", str(path), "--splits", "3", "--stratified", "--quiet", "--report", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert "TRACE evaluation of data.jsonl" in text and "--report" in text
    assert main(["evaluate", str(path), "--report", str(tmp_path / "report.pdf")]) == 1
    assert "--report" in capsys.readouterr().err
    assert main(["evaluate", str(path), "--report", str(path)]) == 1  # never over the input


def test_figures_show_the_baselines_the_verdict_names_first():
    """figure_baselines: for Brier and AUROC, the baseline chosen most often on the calibration parts (the first the
    verdict names), then SeqLogP and Mean Entropy; without TRACE+ the same choice is read from TRACE's comparison."""
    from trace_core import evaluate_arrays, synthetic_traces
    from trace_core.report.html import FIGURE_BASELINES, figure_baselines

    surprisal, entropy, labels = synthetic_traces(600, seed=1)
    config = EvaluationConfig(n_splits=4)
    result = evaluate_arrays(surprisal, entropy, labels, config=config)
    first = [next(iter(result.paired.get("TRACE+", "best baseline", m, "platt")["chosen_counts"]))
             for m in ("brier", "auroc")]
    assert all(name in result.verdict().sentence for name in first)
    assert figure_baselines(result) == list(dict.fromkeys([*first, *FIGURE_BASELINES]))
    assert set(first) - set(FIGURE_BASELINES)  # this data's best baseline is another one
    without = evaluate_arrays(surprisal, entropy, labels, config=config,
                              methods=["TRACE", "MinProb", "SeqLogP", "Max Entropy"])
    assert "TRACE+" not in without.methods
    counts = without.paired.get("TRACE", "best baseline", "auroc")["chosen_counts"]
    assert figure_baselines(without)[0] == next(iter(without.paired.get("TRACE", "best baseline", "brier",
                                                                        "platt")["chosen_counts"]))
    assert next(iter(counts)) in figure_baselines(without)
