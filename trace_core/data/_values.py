"""Cell-level helpers shared by the data modules (private): what counts as missing or as a number, how a value is
quoted in a message, and the exception one bad cell raises."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

MAX_SHOWN = 60  # characters of a cell quoted in a row error: enough to recognise it, short enough for one line
ABSENT = object()  # an empty cell: the row has no value in this column


class CellError(Exception):
    """A problem with one cell; carries the column name and the message that become a :class:`RowError`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


def show(value: object) -> str:
    """repr of a value for a message, truncated to about :data:`MAX_SHOWN` characters."""
    if isinstance(value, str) and len(value) > MAX_SHOWN - 10:
        return repr(value[:MAX_SHOWN - 10]) + "..."
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


def is_missing(value: object) -> bool:
    """None, NaN or pandas NA (an empty string is not missing: callers decide what it means)."""
    if value is None or value is pd.NA:
        return True
    return isinstance(value, (float, np.floating)) and math.isnan(value)


def is_blank(value: object) -> bool:
    """Missing, or text that is empty or only whitespace: a cell that holds nothing."""
    return is_missing(value) or (isinstance(value, str) and not value.strip())


def json_cell(value: object, name: str) -> Any:
    """A cell that may hold JSON text: :data:`ABSENT` when blank, the decoded text for a str, else the value as is."""
    if is_blank(value):
        return ABSENT
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise CellError(name, f"not valid JSON ({exc.msg} at char {exc.pos}): {show(value)}") from None
    except RecursionError:  # e.g. 100,000 "[": a bad cell, not a crash of the whole file
        raise CellError(name, "JSON nested too deeply") from None


def is_number(value: object) -> bool:
    """A Python or numpy int or float (bools are not numbers here)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def as_finite_float(value: object) -> float | None:
    """``float(value)`` for a finite number; None for anything else (an int too large for a float included)."""
    if not is_number(value):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:  # a JSON integer with hundreds of digits
        return None
    return number if math.isfinite(number) else None


def is_int64(value: object) -> bool:
    """An integral number (2 and 2.0, not 2.5) that fits in int64."""
    number = as_finite_float(value)
    return number is not None and number == int(value) and -2**63 <= int(value) < 2**63  # type: ignore[call-overload]
