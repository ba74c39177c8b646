"""The one set of input checks: scalars (ints, reals, choices, flags), labels and score arrays.

Every public function validates its arguments once, at the boundary, with these helpers. A value of the wrong type
raises TypeError, a value of the right type outside its range raises ValueError; messages name the argument, the
expectation and the value, shortened so that user input is never echoed at more than ~200 characters.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["MAX_ECHO", "AnswerValueError", "as_1d", "clip", "check_bool", "check_choice", "check_int", "check_strings",
           "check_labels", "check_real", "check_scores", "counted", "is_number", "set_checked", "shorten", "show"]

MAX_ECHO = 200  # characters of user input an error message may quote
MAX_SHOWN = 60  # characters of a cell quoted in a row error: enough to recognise it, short enough for one line


class AnswerValueError(ValueError):
    """One answer's values make a score or feature non-finite. ``index`` is its 0-based position in the inputs, so a
    caller that knows the answers' file rows can name the row (the command line and the dashboard do)."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"answer {index} (0-based position in the input) {reason}")
        self.index, self.reason = index, reason


def shorten(value: object, limit: int = MAX_ECHO) -> str:
    """``repr(value)`` cut to about ``limit`` characters (the cut says how much was left out)."""
    size = len(value) if isinstance(value, str) else None
    if isinstance(value, str) and len(value) > 4 * limit:
        value = value[: 4 * limit]  # never build the repr of a huge string
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({size if size is not None else len(text):,} characters in all)"


def show(value: object) -> str:
    """repr of a value for a message, truncated to about :data:`MAX_SHOWN` characters."""
    if isinstance(value, str) and len(value) > MAX_SHOWN - 10:
        return repr(value[:MAX_SHOWN - 10]) + "..."
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


def is_number(value: object) -> bool:
    """A Python or numpy int or float (bools are not numbers here)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def clip(text: str, limit: int = MAX_ECHO) -> str:
    """User text for a message, as typed (not quoted) but at most ``limit`` characters; the cut says how long it was.

    >>> clip("a" * 5, 3)
    'aaa… (5 characters in all)'
    """
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters in all)"


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """A count with its noun in the right number, for the sentences the command line and the dashboard print.

    >>> counted(1, "row"), counted(2_000, "row"), counted(1, "entry", "entries"), counted(3, "row has", "rows have")
    ('1 row', '2,000 rows', '1 entry', '3 rows have')
    """
    return f"{n:,} {singular if n == 1 else (plural or singular + 's')}"


def _number(x: float) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


def _range_text(minimum: float | None, maximum: float | None, low_open: bool, high_open: bool) -> str:
    """``">= 1"``, ``"<= 5"`` or, with both bounds, an interval: ``"in (0, 1]"``."""
    if minimum is not None and maximum is not None:
        return f"in {'(' if low_open else '['}{_number(minimum)}, {_number(maximum)}{')' if high_open else ']'}"
    if minimum is not None:
        return f"{'>' if low_open else '>='} {_number(minimum)}"
    if maximum is not None:
        return f"{'<' if high_open else '<='} {_number(maximum)}"
    return ""


def _is_integer(value: object) -> bool:
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as a Python int (numpy integers accepted; bools and floats such as 2.0 refused).

    >>> check_int(np.int64(5), "n_splits", minimum=1)
    5
    """
    bounds = _range_text(minimum, maximum, False, False)
    expected = "an int" + (f" {bounds}" if bounds else "")
    if not _is_integer(value):
        raise TypeError(f"`{name}` must be {expected}, got {shorten(value)}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"`{name}` must be {expected}, got {value!r}")
    return value


def check_real(value: Any, name: str, *, minimum: float | None = None, maximum: float | None = None,
               low_open: bool = False, high_open: bool = False, finite: bool = True) -> float:
    """``value`` as a Python float (ints and numpy numbers accepted; bools, strings and NaN refused).

    ``low_open``/``high_open`` make the bounds strict; ``finite=False`` admits ±inf (never NaN).

    >>> check_real(0.35, "calibration_fraction", minimum=0, maximum=1, low_open=True, high_open=True)
    0.35
    """
    bounds = _range_text(minimum, maximum, low_open, high_open)
    expected = ("a finite real number" if finite else "a real number") + (f" {bounds}" if bounds else "")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.integer, np.floating)):
        raise TypeError(f"`{name}` must be {expected}, got {shorten(value)}")
    value = float(value)
    if math.isnan(value) or (finite and math.isinf(value)):
        raise ValueError(f"`{name}` must be {expected}, got {value!r}")
    too_low = minimum is not None and (value <= minimum if low_open else value < minimum)
    too_high = maximum is not None and (value >= maximum if high_open else value > maximum)
    if too_low or too_high:
        raise ValueError(f"`{name}` must be {expected}, got {value!r}")
    return value


def check_choice(value: Any, name: str, choices: Iterable[Any]) -> Any:
    """``value`` if it is one of ``choices`` (compared by equality; unhashable values are refused, not crashed on)."""
    choices = tuple(choices)
    try:
        ok = any(type(value) is type(c) and value == c for c in choices) or (
            isinstance(value, str) and value in [c for c in choices if isinstance(c, str)])
    except Exception:  # an exotic __eq__ is a bad value, not a crash
        ok = False
    if not ok:
        shown = ", ".join(repr(c) for c in choices)
        raise ValueError(f"`{name}` must be one of {shown}; got {shorten(value)}")
    return value


def check_bool(value: Any, name: str) -> bool:
    """``value`` as a bool (Python or numpy bools only: 0/1 and strings are refused)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"`{name}` must be True or False, got {shorten(value)}")
    return bool(value)


def check_strings(items: Iterable[Any], name: str) -> list[str]:
    """``items`` as a list after checking that each is a str (TypeError naming the first that is not). A bare str
    is the caller's to refuse first, with its own wording: it would be read as one item per character."""
    out = list(items)
    for i, item in enumerate(out):
        if not isinstance(item, str):
            raise TypeError(f"`{name}[{i}]` must be a str, got {type(item).__name__}")
    return out


def set_checked(obj: Any, values: Mapping[str, Any]) -> None:
    """Store checked values on a frozen dataclass from its ``__post_init__``.

    The checks return plain Python numbers (numpy scalars converted), so configs compare equal and serialise to JSON.
    """
    for name, value in values.items():
        object.__setattr__(obj, name, value)


def as_1d(x: ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D, got an array of shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"`{name}` is empty")
    return arr


def check_labels(y_true: ArrayLike, name: str = "y_true", *, n: int | None = None,
                 purpose: str | None = None) -> NDArray[np.int64]:
    """``y_true`` as an int64 array of 0/1 correctness labels, or ValueError naming the first bad entry.

    Parameters
    ----------
    y_true : array-like of shape (n_answers,)
        Bools, or numbers equal to 0 or 1 (the string ``"1"`` is refused, not guessed).
    name : str
        The argument's name, for messages.
    n : int, optional
        The number of answers the labels belong to; a different length is a ValueError.
    purpose : str, optional
        What needs the labels (``"fitting"``, ``"evaluation"``): when given, both classes must be present.

    Examples
    --------
    >>> check_labels([True, False, 1], n=3, purpose="fitting").tolist()
    [1, 0, 1]
    """
    arr = as_1d(y_true, name)
    if arr.dtype.kind == "b":
        ok = np.ones(arr.shape, dtype=bool)
    elif arr.dtype.kind in "iuf":
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
            f"`{name}` must contain only 0/1 labels (bool or 0/1 numbers); index {i} is {shorten(value)}"
        )
    labels = arr.astype(np.int64)
    if n is not None and labels.shape[0] != n:
        raise ValueError(f"`{name}` has {labels.shape[0]:,} labels but there are {n:,} answers")
    if purpose is not None and labels.min() == labels.max():
        raise ValueError(f"{purpose} needs both correct (1) and incorrect (0) answers; all {labels.shape[0]:,} "
                         f"labels are {labels[0]}")
    return labels


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
