"""TRACE and TRACE+: single-pass decoding-trace risk localization and calibrated confidence for LLM answers.

``import trace_core`` is light (numpy, pandas, scikit-learn): torch and transformers are imported only when a trace is
recorded (``trace_core.record``).
"""

from .calibrate import IsotonicCalibrator, NotFittedError, PlattCalibrator, TracePlus, calibrator_from_json
from .features import FEATURE_SETS, feature_matrix, feature_matrix_from_arrays, feature_names
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
    generate_trace,
    generate_traces,
    load_model,
    score_answer,
    score_answers,
)
from .score import TraceConfig, TraceExplanation, explain_trace, trace_confidence, trace_risk
from .trace import DecodingConfig, Trace, TraceMetadata

__version__ = "0.1.0"

__all__ = [
    "DecodingConfig",
    "FEATURE_SETS",
    "IsotonicCalibrator",
    "LoadedModel",
    "ModelLoadError",
    "ModelNotFoundError",
    "NotFittedError",
    "PlattCalibrator",
    "Ragged",
    "Trace",
    "TraceConfig",
    "TraceExplanation",
    "TraceMetadata",
    "TracePlus",
    "UnsafeModelError",
    "__version__",
    "calibrator_from_json",
    "decayed_mean",
    "explain_trace",
    "feature_matrix",
    "feature_matrix_from_arrays",
    "feature_names",
    "first_k_mean",
    "generate_trace",
    "generate_traces",
    "last_k_mean",
    "length_normalized_sum",
    "load_model",
    "score_answer",
    "score_answers",
    "segment_max",
    "segment_mean",
    "segment_var",
    "slope",
    "trace_confidence",
    "trace_risk",
    "window_max_mean",
]
