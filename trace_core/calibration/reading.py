"""Reading a calibrator's JSON: size cap, parsing, nesting depth and every field checked before anything is built.

A calibrator file comes from a user (an upload, a ``--calibrator`` path), so nothing in it is trusted: the text is at
most :data:`MAX_CALIBRATOR_BYTES`, a leading UTF-8 byte-order mark is dropped (as for datasets), duplicate keys,
unknown keys and nesting deeper than :data:`MAX_DEPTH` are refused, and each field is checked for its type, length
and range (numbers are JSON numbers, never strings or booleans; finite; a ``scale`` that divides is > 1e-12, as
``fit`` writes it). Every problem found becomes one line of the :class:`CalibratorFormatError` naming the field;
values are echoed at most ~200 characters (:func:`trace_core.checks.shorten`).

:func:`parse_calibrator` checks the file and its top-level keys here, and each field's value in
:mod:`trace_core.calibration.fields`; it returns the checked fields (numbers as floats and float64 arrays), from which
``trace_core.calibration.calibrators`` builds the calibrators.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from trace_core.calibration.fields import FieldChecker, converted_fields, kind_of
from trace_core.checks import shorten

__all__ = ["CALIBRATOR_TYPES", "FORMAT_VERSION", "MAX_CALIBRATOR_BYTES", "MAX_DEPTH", "CalibratorFormatError",
           "decode_calibrator", "dumps_calibrator", "parse_calibrator"]

FORMAT_VERSION = 1
MAX_CALIBRATOR_BYTES = 10_000_000  # 10 MB: a fitted calibrator is a few kilobytes
MAX_DEPTH = 8  # a calibrator nests 3 levels (object -> params / list -> value); anything deeper is not one

# type -> (required keys, optional keys); "format_version" and "type" are required for every type.
_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "TracePlus": (("params", "feature_names", "mean", "scale", "coef", "intercept"),
                  ("n_samples", "provenance", "drift_summary")),
    "PlattCalibrator": (("params", "mean", "scale", "coef", "intercept"), ()),
    "IsotonicCalibrator": (("x_thresholds", "y_thresholds"), ("params",)),
    # the fields of its Platt or isotonic calibrator sit beside its own (which depends on params.calibrator)
    "ScoreCalibrator": (("params", "transform"), ("mean", "scale", "coef", "intercept", "x_thresholds",
                                                  "y_thresholds", "n_samples", "provenance", "drift_summary")),
}
CALIBRATOR_TYPES = tuple(_FIELDS)


class CalibratorFormatError(ValueError):
    """A calibrator JSON that cannot be loaded; ``problems`` holds one line per problem (the message joins them)."""

    def __init__(self, problems: list[str] | tuple[str, ...]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise CalibratorFormatError([f"calibrator: the key {shorten(key)} appears twice in one object"])
        obj[key] = value
    return obj


def decode_calibrator(data: bytes) -> str:
    """The text of a calibrator file's bytes: size cap before decoding, UTF-8 (a leading BOM dropped)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"calibrator data must be bytes, got {type(data).__name__}")
    size = len(data)
    if size > MAX_CALIBRATOR_BYTES:
        raise CalibratorFormatError([f"calibrator: the file is {size:,} bytes; a calibrator is at most "
                                     f"{MAX_CALIBRATOR_BYTES:,} bytes"])
    try:
        return bytes(data).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CalibratorFormatError([f"calibrator: not UTF-8 text (byte {exc.start:,} is "
                                     f"{bytes(data)[exc.start:exc.start + 1]!r})"]) from None


def _load_text(text: str) -> Any:
    if len(text) > MAX_CALIBRATOR_BYTES:  # before parsing: never build a huge object from user text
        raise CalibratorFormatError([f"calibrator: the text is {len(text):,} characters; a calibrator is at most "
                                     f"{MAX_CALIBRATOR_BYTES:,}"])
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicates)
    except RecursionError:
        raise CalibratorFormatError([f"calibrator: JSON nested too deeply (a calibrator nests at most {MAX_DEPTH} "
                                     "levels)"]) from None
    except json.JSONDecodeError as exc:
        raise CalibratorFormatError([f"calibrator: not valid JSON ({exc.msg} at line {exc.lineno}, column "
                                     f"{exc.colno})"]) from None
    except CalibratorFormatError:
        raise
    except ValueError as exc:  # an integer of more digits than int() converts (Python's advice is not the user's)
        if "digits" in str(exc):
            limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300
            raise CalibratorFormatError([f"calibrator: a number in the file is too long (more than {limit:,} "
                                         "digits); a calibrator's numbers have at most a few dozen"]) from None
        raise CalibratorFormatError([f"calibrator: not valid JSON ({shorten(str(exc))[1:-1]})"]) from None


def _depth(obj: Any) -> int:
    """Nesting depth of lists/objects (a scalar is 0), found without recursion and stopping past MAX_DEPTH."""
    deepest, stack = 0, [(obj, 0)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, (list, tuple, Mapping)):
            level += 1
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            stack.extend((v, level) for v in (value.values() if isinstance(value, Mapping) else value))
    return deepest


def parse_calibrator(data: str | Mapping[str, Any], expected_type: str | None = None) -> dict[str, Any]:
    """Check a calibrator's JSON text (or its parsed object) and return its fields, converted.

    Returns a dict with ``type`` and, per type: ``params`` (constructor keywords), and ``feature_names`` (tuple),
    ``mean``/``scale``/``coef`` (float64 arrays for TracePlus, floats for PlattCalibrator), ``intercept`` (float),
    ``n_samples`` (int, 0 when absent), ``provenance`` (a dict, absent in files of earlier versions) and
    ``drift_summary`` (a :class:`trace_core.calibration.drift.DriftSummary`, absent in files of earlier versions); or
    ``x_thresholds``/``y_thresholds`` (float64 arrays); a ScoreCalibrator has ``params`` (method, calibrator, C),
    ``transform``, the fields of its Platt or isotonic calibrator, ``n_samples``, ``provenance`` and
    ``drift_summary``.

    Raises
    ------
    CalibratorFormatError (a ValueError)
        One line per problem, each naming the field.
    TypeError
        ``data`` is neither a str nor a mapping.
    """
    if isinstance(data, str):
        obj = _load_text(data)
    elif isinstance(data, Mapping):
        obj = data
    else:
        raise TypeError(f"a calibrator is JSON text (str) or its parsed object, got {type(data).__name__}")
    kind = _calibrator_type(obj, expected_type)
    c = FieldChecker()
    required, optional = _FIELDS[kind]
    for key in obj:
        if key not in ("type", "format_version", *required, *optional):
            c.problems.append(f"calibrator field {shorten(key)} is not a field of a {kind} calibrator (fields: "
                              f"{list(required + optional)})")
    for key in required:
        if key not in obj:
            c.problems.append(f"calibrator field {key!r} is missing")
    out = converted_fields(c, kind, obj)
    if c.problems:
        raise CalibratorFormatError(c.problems)
    return out


def _calibrator_type(obj: Any, expected_type: str | None) -> str:
    """The calibrator type of a parsed file, once it is known to be a calibrator's object of this format version
    (and of ``expected_type`` when given)."""
    if not isinstance(obj, Mapping):
        raise CalibratorFormatError([f"not a calibrator JSON: expected an object, got {kind_of(obj)}"])
    depth = _depth(obj)
    if depth > MAX_DEPTH:
        raise CalibratorFormatError([f"calibrator: JSON nested too deeply (a calibrator nests at most {MAX_DEPTH} "
                                     "levels)"])
    if "type" not in obj:
        raise CalibratorFormatError(["not a calibrator JSON: expected an object with a 'type' field"])
    kind = obj["type"]
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise CalibratorFormatError([f"unknown calibrator type {shorten(kind)}; expected one of "
                                     f"{sorted(_FIELDS)}"])
    if expected_type is not None and kind != expected_type:
        raise CalibratorFormatError([f"expected a {expected_type} calibrator, got {shorten(kind)}"])
    version = obj.get("format_version")
    if isinstance(version, bool) or version != FORMAT_VERSION:
        raise CalibratorFormatError([f"unsupported calibrator format_version {shorten(version)}; this version "
                                     f"reads {FORMAT_VERSION}"])
    return kind


def dumps_calibrator(obj: Mapping[str, Any]) -> str:
    """The JSON text of a calibrator's fields (strict JSON: NaN and infinity are refused)."""
    return json.dumps({"format_version": FORMAT_VERSION, **obj}, indent=2, allow_nan=False)
