"""What every metric shares: the label/score pair check, the one-class warning and the confidence-level check."""

from __future__ import annotations

import warnings

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trace_core.checks import as_1d, check_labels, check_real, check_scores

__all__ = ["STRATEGIES", "UndefinedMetricWarning", "check_level", "check_pair", "checked_pair", "has_both_classes",
           "number_text"]

STRATEGIES = ("uniform", "quantile")  # how probability bins are placed (see bin_probabilities)


class UndefinedMetricWarning(UserWarning):
    """Warning emitted when a metric is undefined for the given labels (e.g. one class only)."""


def number_text(x: float) -> str:
    """A number for an error message: integral values without a trailing '.0'."""
    x = float(x)
    return str(int(x)) if x.is_integer() else repr(x)


def check_pair(
    y_true: ArrayLike, scores: ArrayLike, name: str, *, probability: bool
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Validate labels and scores together (emptiness, then lengths, then values)."""
    y_arr = as_1d(y_true, "y_true")
    s_arr = as_1d(scores, name)
    if y_arr.shape[0] != s_arr.shape[0]:
        raise ValueError(
            f"`y_true` and `{name}` must have the same length, "
            f"got {y_arr.shape[0]} and {s_arr.shape[0]}"
        )
    return check_labels(y_arr), check_scores(s_arr, name, probability=probability)


def checked_pair(
    y_true: ArrayLike, scores: ArrayLike, name: str, *, probability: bool, validate: bool
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """:func:`check_pair` when ``validate``; else the arrays as they are (``y_true`` int64 0/1 and ``scores`` finite
    float64 of the same length, as the caller promises)."""
    if validate:
        return check_pair(y_true, scores, name, probability=probability)
    return np.asarray(y_true), np.asarray(scores, dtype=np.float64)


def check_level(confidence: float) -> float:
    """A two-sided confidence level in (0, 1)."""
    return check_real(confidence, "confidence", minimum=0, maximum=1, low_open=True, high_open=True)


def has_both_classes(y: NDArray[np.int64], metric: str, *, depth: int = 0) -> bool:
    """True when ``y`` holds both classes; otherwise warn that ``metric`` is undefined (the caller returns nan).
    ``depth``: how many helper frames lie between the public metric and this call (the warning names its caller)."""
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == y.shape[0]:
        only = "positive (1)" if n_pos else "negative (0)"
        warnings.warn(
            f"{metric} is undefined when `y_true` holds a single class "
            f"(all {y.shape[0]} labels are {only}); returning nan",
            UndefinedMetricWarning,
            stacklevel=3 + depth,  # the caller of the public metric
        )
        return False
    return True
