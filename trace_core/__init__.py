"""TRACE and TRACE+: single-pass decoding-trace risk localization and calibrated confidence for LLM answers.

``import trace_core`` is light (numpy, pandas, scikit-learn): torch and transformers are imported only when a trace is
recorded (``trace_core.record``).
"""

from .baselines import BASELINES, Baseline, BaselineScores, compute_baselines
from .calibrate import IsotonicCalibrator, NotFittedError, PlattCalibrator, TracePlus, calibrator_from_json
from .evaluate import EvaluationConfig, EvaluationResult, evaluate, evaluate_arrays, method_names
from .features import FEATURE_SETS, feature_matrix, feature_matrix_from_arrays, feature_names
from .metrics import (
    UndefinedMetricWarning,
    auprc,
    aurc,
    auroc,
    bin_probabilities,
    bootstrap_ci,
    brier_score,
    expected_calibration_error,
    reliability_table,
    risk_at_coverage,
    risk_coverage_curve,
    roc_curve,
    tpr_at_fpr,
    wilson_interval,
)
from .operators import (
    Ragged,
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
from .record import (
    LoadedModel,
    ModelLoadError,
    ModelNotFoundError,
    UnsafeModelError,
    beam_logprobs,
    generate_trace,
    generate_traces,
    load_model,
    score_answer,
    score_answers,
)
from .score import TraceConfig, TraceExplanation, explain_trace, trace_confidence, trace_risk
from .synthetic import synthetic_traces
from .trace import DecodingConfig, Trace, TraceMetadata

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "auprc",
    "aurc",
    "auroc",
    "Baseline",
    "BASELINES",
    "BaselineScores",
    "beam_logprobs",
    "bin_probabilities",
    "bootstrap_ci",
    "brier_score",
    "calibrator_from_json",
    "compute_baselines",
    "decayed_mean",
    "DecodingConfig",
    "evaluate",
    "evaluate_arrays",
    "EvaluationConfig",
    "EvaluationResult",
    "expected_calibration_error",
    "explain_trace",
    "feature_matrix",
    "feature_matrix_from_arrays",
    "feature_names",
    "FEATURE_SETS",
    "first_k_mean",
    "generate_trace",
    "generate_traces",
    "IsotonicCalibrator",
    "last_k_mean",
    "length_normalized_sum",
    "load_model",
    "LoadedModel",
    "method_names",
    "ModelLoadError",
    "ModelNotFoundError",
    "NotFittedError",
    "PlattCalibrator",
    "Ragged",
    "reliability_table",
    "risk_at_coverage",
    "risk_coverage_curve",
    "roc_curve",
    "score_answer",
    "score_answers",
    "segment_max",
    "segment_mean",
    "segment_var",
    "slope",
    "synthetic_traces",
    "tpr_at_fpr",
    "Trace",
    "trace_confidence",
    "trace_risk",
    "TraceConfig",
    "TraceExplanation",
    "TraceMetadata",
    "TracePlus",
    "UndefinedMetricWarning",
    "UnsafeModelError",
    "wilson_interval",
    "window_max_mean",
]
