"""TRACE and TRACE+: single-pass decoding-trace risk localization and calibrated confidence for LLM answers.

The public names are listed below, grouped by the package that holds them; each is imported on first use (PEP 562), so
``import trace_core`` costs next to nothing and ``trace_core.evaluate`` loads only what an evaluation needs. torch and
transformers are imported only when a trace is recorded (``trace_core.record``), plotly only for figures and the report.
``trace_core.checks`` holds the input checks the library applies (public for code built on it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Each public name, by the module it is imported from.
_API: dict[str, tuple[str, ...]] = {
    # One answer's trace, many answers' traces
    "trace_core.traces.trace": ("DecodingConfig", "Trace", "TraceMetadata"),
    "trace_core.traces.table": ("TraceTable",),
    "trace_core.traces.ragged": ("Ragged",),
    "trace_core.traces.align": ("align_tokens", "Alignment", "divergence_summary"),
    "trace_core.traces.synthetic": ("synthetic_traces",),
    # Datasets: reading, labeling, writing
    "trace_core.data": ("DatasetError", "DatasetWarning", "export_flagged", "label_from_reference", "LabeledDataset",
        "read_dataset", "RowError", "sanitize_cell", "trace_from_openai", "write_dataset"),
    # Recording traces from a model or a server
    "trace_core.record": ("beam_logprobs", "connect_server", "generate_trace", "generate_traces", "load_model",
        "LoadedModel", "ModelLoadError", "ModelNotAllowedError", "ModelNotFoundError", "score_answer",
        "score_answers", "ServerError", "ServerModel", "stream_trace", "UnsafeModelError"),
    # TRACE, its operators and spans
    "trace_core.methods.risk": ("explain_trace", "spike_indices", "trace_confidence", "trace_risk", "TraceConfig",
        "TraceExplanation"),
    "trace_core.methods.operators": ("decayed_mean", "first_k_mean", "last_k_mean", "length_normalized_sum",
        "segment_max", "segment_mean", "segment_var", "slope", "window_max_mean"),
    "trace_core.methods.spans": ("rank_spans", "riskiest_span", "segment", "Span", "span_risks", "SpanCalibrator",
        "SpanRisk"),
    # TRACE+'s features, the baselines and the registry of methods and metrics
    "trace_core.methods.features": ("feature_matrix", "feature_matrix_from_arrays", "feature_names", "FEATURE_SETS"),
    "trace_core.methods.baselines": ("Baseline", "BASELINES", "BaselineScores", "compute_baselines"),
    "trace_core.methods.registry": ("get_method", "Method", "method_names", "METHODS", "METRICS", "MetricSpec",
        "REFERENCE"),
    # Calibrators and the drift check
    "trace_core.calibration.calibrators": ("calibrator_from_json", "check_drift", "IsotonicCalibrator",
        "load_calibrator", "NotFittedError", "PlattCalibrator", "ScoreCalibrator", "TracePlus", "transform_scores"),
    "trace_core.calibration.reading": ("CalibratorFormatError",),
    "trace_core.calibration.drift": ("drift_check", "drift_two_sample", "DriftResult", "DriftSummary"),
    # The evaluation protocol, its results, the paired comparison and the verdict
    "trace_core.evaluation.run": ("average_results", "evaluate", "evaluate_arrays", "EvaluationConfig",
        "EvaluationResult", "NoUsableSplitError", "SkippedSplitsWarning", "TruncatedDistributionWarning"),
    "trace_core.evaluation.results": ("report_markdown",),
    "trace_core.evaluation.paired": ("paired_comparison", "PairedComparison"),
    "trace_core.evaluation.verdict": ("reference_sentence", "Verdict", "verdict"),
    # Metrics
    "trace_core.metrics": ("auprc", "aurc", "auroc", "bin_probabilities", "bootstrap_ci", "brier_score",
        "expected_calibration_error", "prr", "reliability_table", "risk_at_coverage", "risk_coverage_curve",
        "roc_curve", "tpr_at_fpr", "UndefinedMetricWarning", "wilson_interval"),
}
_SUBMODULES = ("checks",)
_WHERE = {name: module for module, names in _API.items() for name in names}

__all__ = ["__version__", *_SUBMODULES, *_WHERE]

if TYPE_CHECKING:  # the same names, for type checkers and editors (tests/project/test_public_api.py keeps both equal)
    from trace_core import checks
    from trace_core.calibration.calibrators import (
        IsotonicCalibrator,
        NotFittedError,
        PlattCalibrator,
        ScoreCalibrator,
        TracePlus,
        calibrator_from_json,
        check_drift,
        load_calibrator,
        transform_scores,
    )
    from trace_core.calibration.drift import DriftResult, DriftSummary, drift_check, drift_two_sample
    from trace_core.calibration.reading import CalibratorFormatError
    from trace_core.data import (
        DatasetError,
        DatasetWarning,
        LabeledDataset,
        RowError,
        export_flagged,
        label_from_reference,
        read_dataset,
        sanitize_cell,
        trace_from_openai,
        write_dataset,
    )
    from trace_core.evaluation.paired import PairedComparison, paired_comparison
    from trace_core.evaluation.results import report_markdown
    from trace_core.evaluation.run import (
        EvaluationConfig,
        EvaluationResult,
        NoUsableSplitError,
        SkippedSplitsWarning,
        TruncatedDistributionWarning,
        average_results,
        evaluate,
        evaluate_arrays,
    )
    from trace_core.evaluation.verdict import Verdict, reference_sentence, verdict
    from trace_core.methods.baselines import BASELINES, Baseline, BaselineScores, compute_baselines
    from trace_core.methods.features import FEATURE_SETS, feature_matrix, feature_matrix_from_arrays, feature_names
    from trace_core.methods.operators import (
        decayed_mean,
        first_k_mean,
        last_k_mean,
        length_normalized_sum,
        segment_max,
        segment_mean,
        segment_var,
        slope,
        window_max_mean,
    )
    from trace_core.methods.registry import METHODS, METRICS, REFERENCE, Method, MetricSpec, get_method, method_names
    from trace_core.methods.risk import (
        TraceConfig,
        TraceExplanation,
        explain_trace,
        spike_indices,
        trace_confidence,
        trace_risk,
    )
    from trace_core.methods.spans import Span, SpanCalibrator, SpanRisk, rank_spans, riskiest_span, segment, span_risks
    from trace_core.metrics import (
        UndefinedMetricWarning,
        auprc,
        aurc,
        auroc,
        bin_probabilities,
        bootstrap_ci,
        brier_score,
        expected_calibration_error,
        prr,
        reliability_table,
        risk_at_coverage,
        risk_coverage_curve,
        roc_curve,
        tpr_at_fpr,
        wilson_interval,
    )
    from trace_core.record import (
        LoadedModel,
        ModelLoadError,
        ModelNotAllowedError,
        ModelNotFoundError,
        ServerError,
        ServerModel,
        UnsafeModelError,
        beam_logprobs,
        connect_server,
        generate_trace,
        generate_traces,
        load_model,
        score_answer,
        score_answers,
        stream_trace,
    )
    from trace_core.traces.align import Alignment, align_tokens, divergence_summary
    from trace_core.traces.ragged import Ragged
    from trace_core.traces.synthetic import synthetic_traces
    from trace_core.traces.table import TraceTable
    from trace_core.traces.trace import DecodingConfig, Trace, TraceMetadata



def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"trace_core.{name}")
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'trace_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
