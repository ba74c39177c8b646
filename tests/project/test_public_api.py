"""The public API: every name users had before the library was split into packages is still there, the warnings and
errors they catch are public, the names load on first use, and the type checkers' list equals the runtime one."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import trace_core

ROOT = Path(__file__).resolve().parents[2]

#: The public names of ``trace_core`` before the packages (one flat module per concern): none may go.
NAMES_BEFORE = ["__version__", "align_tokens", "Alignment", "auprc", "aurc", "auroc", "average_results", "Baseline", "BASELINES", "BaselineScores", "beam_logprobs", "bin_probabilities", "bootstrap_ci", "brier_score", "calibrator_from_json", "CalibratorFormatError", "check_drift", "compute_baselines", "connect_server", "DatasetError", "decayed_mean", "DecodingConfig", "divergence_summary", "drift_check", "drift_two_sample", "DriftResult", "DriftSummary", "evaluate", "evaluate_arrays", "EvaluationConfig", "EvaluationResult", "expected_calibration_error", "explain_trace", "export_flagged", "feature_matrix", "feature_matrix_from_arrays", "feature_names", "FEATURE_SETS", "first_k_mean", "generate_trace", "generate_traces", "get_method", "IsotonicCalibrator", "label_from_reference", "LabeledDataset", "last_k_mean", "length_normalized_sum", "load_calibrator", "load_model", "LoadedModel", "Method", "method_names", "METHODS", "METRICS", "MetricSpec", "ModelLoadError", "ModelNotAllowedError", "ModelNotFoundError", "NotFittedError", "paired_comparison", "PairedComparison", "PlattCalibrator", "prr", "Ragged", "rank_spans", "read_dataset", "REFERENCE", "reference_sentence", "reliability_table", "report_markdown", "risk_at_coverage", "risk_coverage_curve", "riskiest_span", "roc_curve", "RowError", "sanitize_cell", "score_answer", "score_answers", "ScoreCalibrator", "segment", "segment_max", "segment_mean", "segment_var", "ServerError", "ServerModel", "slope", "Span", "span_risks", "SpanCalibrator", "SpanRisk", "spike_indices", "stream_trace", "synthetic_traces", "tpr_at_fpr", "Trace", "trace_confidence", "trace_from_openai", "trace_risk", "TraceConfig", "TraceExplanation", "TraceMetadata", "TracePlus", "TraceTable", "transform_scores", "UndefinedMetricWarning", "UnsafeModelError", "verdict", "Verdict", "wilson_interval", "window_max_mean", "write_dataset"]

#: What users catch, beyond the errors and warnings that were public already.
CAUGHT = ("NoUsableSplitError", "SkippedSplitsWarning", "TruncatedDistributionWarning", "DatasetWarning")


def test_every_name_users_had_is_still_public():
    assert sorted(set(NAMES_BEFORE) - set(trace_core.__all__)) == []
    assert len(NAMES_BEFORE) == 111


@pytest.mark.parametrize("name", [n for n in trace_core.__all__ if n != "__version__"])
def test_every_public_name_resolves_and_is_listed_by_dir(name):
    assert getattr(trace_core, name) is not None
    assert name in dir(trace_core)


def test_the_caught_warnings_and_errors_and_the_checks_are_public():
    for name in CAUGHT:
        assert issubclass(getattr(trace_core, name), Exception)
    assert trace_core.checks.check_int(3, "n") == 3
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        trace_core.nope  # noqa: B018


def test_the_type_checkers_names_are_the_runtime_names():
    """``__init__`` lists each name twice: in the map that loads it on first use and under TYPE_CHECKING."""
    tree = ast.parse((ROOT / "trace_core" / "__init__.py").read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    typed = {(node.module, alias.name) for node in block.body for alias in node.names}
    runtime = {(module, name) for module, names in trace_core._API.items() for name in names}
    assert typed - {("trace_core", "checks")} == runtime


def test_importing_the_package_loads_nothing_heavy():
    """``import trace_core`` imports no numpy, pandas or scikit-learn; the evaluation loads neither torch nor the
    dashboard's, Ray's or the figures' libraries."""
    code = ("import sys, trace_core\n"
            "print(sorted(m for m in ('numpy', 'pandas', 'sklearn', 'pyarrow', 'scipy') if m in sys.modules))\n"
            "trace_core.evaluate, trace_core.read_dataset, trace_core.TracePlus\n"
            "print(sorted(m for m in ('torch', 'transformers', 'streamlit', 'ray', 'plotly') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.split("\n")[:2] == ["[]", "[]"]
