"""Input checks shared by the metrics and the calibrators: labels and scores, validated once at the boundary."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["as_1d", "check_labels", "check_scores"]


def as_1d(x: ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D, got an array of shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"`{name}` is empty")
    return arr


def check_labels(y_true: ArrayLike, name: str = "y_true") -> NDArray[np.int64]:
    """Return ``y_true`` as an int64 array of 0/1, or raise naming the first bad entry."""
    arr = as_1d(y_true, name)
    if arr.dtype.kind == "b":
        return arr.astype(np.int64)
    if arr.dtype.kind in "iuf":
        ok = (arr == 0) | (arr == 1)  # NaN compares False, so it is reported as a bad label
    else:
        # Object/string arrays: only genuine numbers (or bools) equal to 0 or 1 are labels;
        # the string "1" is not silently accepted.
        ok = np.array(
            [
                isinstance(v, (bool, np.bool_, int, np.integer, float, np.floating))
                and v in (0, 1)
                for v in arr.tolist()
            ],
            dtype=bool,
        )
    if not ok.all():
        i = int(np.argmin(ok))
        value = arr[i].item() if hasattr(arr[i], "item") else arr[i]
        raise ValueError(
            f"`{name}` must contain only 0/1 labels (bool or 0/1 numbers); index {i} is {value!r}"
        )
    return arr.astype(np.int64)


def check_scores(x: ArrayLike, name: str, *, probability: bool) -> NDArray[np.float64]:
    """Return ``x`` as a finite float64 1-D array (in [0, 1] when ``probability``)."""
    arr = as_1d(x, name)
    if arr.dtype.kind not in "biuf":
        if arr.dtype.kind == "O" and not any(isinstance(v, (str, bytes)) for v in arr.tolist()):
            try:
                arr = arr.astype(np.float64)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"`{name}` must be numeric, got values that are not numbers") from exc
        else:
            raise TypeError(f"`{name}` must be numeric, got an array of dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    finite = np.isfinite(arr)
    if not finite.all():
        i = int(np.argmin(finite))
        raise ValueError(f"`{name}` must be finite; index {i} is {float(arr[i])!r}")
    if probability:
        inside = (arr >= 0.0) & (arr <= 1.0)
        if not inside.all():
            i = int(np.argmin(inside))
            raise ValueError(
                f"`{name}` must be probabilities in [0, 1]; index {i} is {float(arr[i])!r}"
            )
    return arr
