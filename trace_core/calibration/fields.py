"""Checking a calibrator's fields one by one, as they are converted: numbers are JSON numbers (never strings or
booleans), finite and in range, lists have their lengths, names are known; the ``params``, ``provenance`` and
``drift_summary`` blocks and each calibrator type's own fields. Every problem becomes one line naming the field
(:class:`FieldChecker`), and all are reported together by :func:`trace_core.calibration.reading.parse_calibrator`, which
checks the file and its top-level keys first.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import numpy as np

from trace_core.calibration.drift import EXTRA_FEATURES, DriftSummary, FeatureBins
from trace_core.checks import shorten
from trace_core.methods.features import FEATURE_SETS
from trace_core.methods.registry import METHODS, flaggable_methods
from trace_core.traces.trace import ENTROPY_SOURCES

__all__ = ["INNER_FIELDS", "MAX_ABS", "MAX_CENTRE", "MIN_SAMPLES", "MIN_SCALE", "FieldChecker", "converted_fields",
           "kind_of"]

MIN_SCALE = 1e-12  # fit writes std if std > 1e-12 else 1.0: a smaller scale would blow up (x - mean) / scale
MAX_ABS = 1e150  # a larger coefficient or intercept cannot come from a fit, and its products overflow
#: The largest feature or score mean and scale a fit can write: features are nats, log-lengths and shares, and scores
#: sums of them; beyond this every standardised value is ~0 or huge, so every probability is the same or 0 or 1.
MAX_CENTRE = 1e9
#: A fit writes at least two answers (both classes); a file saying fewer was not written by one.
MIN_SAMPLES = 2

_PROVENANCE_LISTS = ("model_id", "tokenizer", "entropy_source")
_PROVENANCE_KEYS = (*_PROVENANCE_LISTS, "feature_set", "n_rows", "date", "version")
_PROVENANCE_OPTIONAL = ("model_digest", "source")  # absent in files of earlier versions
_TRACE_SOURCES = ("generate", "teacher_forced", "imported")
_MAX_ITEMS, _MAX_TEXT = 1_000, 1_000  # names in a provenance list, characters of one name

_KNOWN_NAMES = frozenset(name for names in FEATURE_SETS.values() for name in names)
_SUMMARY_KEYS = ("n", "bins", "features")
_BIN_KEYS = ("name", "edges", "counts")
_MAX_BINS = 100  # a summary asks for 10 equal-frequency bins; more than 100 is not one
#: A ScoreCalibrator's inner calibrator (``params.calibrator``) -> the fields it adds.
INNER_FIELDS = {"platt": ("mean", "scale", "coef", "intercept"), "isotonic": ("x_thresholds", "y_thresholds")}


def kind_of(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return {str: "a string", list: "a list", dict: "an object", int: "an integer", float: "a number"}.get(
        type(value), type(value).__name__)


class FieldChecker:
    """Collects one line per problem while the fields are converted."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, field: str, message: str) -> None:
        self.problems.append(f"calibrator field {field!r} {message}")

    def number(self, value: Any, field: str, *, minimum: float | None = None, maximum: float | None = None,
               bound: float = MAX_ABS) -> float | None:
        if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.integer, np.floating)):
            self.fail(field, f"must be a number, got {shorten(value)} ({kind_of(value)})")
            return None
        try:
            x = float(value)
        except OverflowError:  # an int beyond the float range
            x = -math.inf if value < 0 else math.inf
        if not math.isfinite(x):
            self.fail(field, f"must be a finite number, got {x!r}")
            return None
        if x != 0.0 and abs(x) < sys.float_info.min:  # subnormal: no fit writes one, and it loses precision
            self.fail(field, f"must be 0 or a normal number (at least {sys.float_info.min:.3g} in size), got {x!r}")
            return None
        if abs(x) > bound:
            self.fail(field, f"must be at most {bound:g} in size, got {x!r}")
            return None
        if minimum is not None and not x > minimum:
            self.fail(field, f"must be > {minimum:g}, got {x!r}")
            return None
        if maximum is not None and x > maximum:
            self.fail(field, f"must be <= {maximum:g}, got {x!r}")
            return None
        return x

    def numbers(self, value: Any, field: str, *, length: int | None = None, **bounds: Any) -> np.ndarray | None:
        if not isinstance(value, (list, tuple)):
            self.fail(field, f"must be a list of numbers, got {shorten(value)} ({kind_of(value)})")
            return None
        if length is not None and len(value) != length:
            self.fail(field, f"must hold {length} numbers (one per feature), got {len(value):,}")
            return None
        if not value:
            self.fail(field, "must not be empty")
            return None
        before = len(self.problems)
        out = [self.number(v, f"{field}[{i}]", **bounds) for i, v in enumerate(value)]
        if len(self.problems) > before:  # one line per field: the first bad value, and how many more
            extra = len(self.problems) - before - 1
            del self.problems[before + 1:]
            if extra:
                self.problems[-1] += f" ({extra:,} more bad values in {field!r})"
            return None
        return np.asarray(out, dtype=np.float64)

    def integer(self, value: Any, field: str, *, minimum: int, maximum: int) -> int | None:
        if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
            self.fail(field, f"must be a whole number, got {shorten(value)} ({kind_of(value)})")
            return None
        whole = int(value)
        if not minimum <= whole <= maximum:
            self.fail(field, f"must be in [{minimum:,}, {maximum:,}], got {shorten(value)}")
            return None
        return whole


def _params(c: FieldChecker, kind: str, params: Any) -> dict[str, Any]:
    allowed = {"TracePlus": ("feature_set", "C", "max_iter"), "PlattCalibrator": ("C",),
               "IsotonicCalibrator": (), "ScoreCalibrator": ("method", "calibrator", "C")}[kind]
    if not isinstance(params, Mapping):
        c.fail("params", f"must be an object, got {shorten(params)} ({kind_of(params)})")
        return {}
    out: dict[str, Any] = {}
    for key in params:
        if key not in allowed:
            c.fail("params", f"has an unknown key {shorten(key)}; a {kind} has {list(allowed)}")
    if "C" in allowed and "C" in params:
        C = c.number(params["C"], "params.C", minimum=0.0, bound=math.inf)
        if C is not None:
            out["C"] = C
    if "max_iter" in allowed and "max_iter" in params:
        max_iter = c.integer(params["max_iter"], "params.max_iter", minimum=1, maximum=10**9)
        if max_iter is not None:
            out["max_iter"] = max_iter
    if "method" in allowed:

        for key, choices in (("method", flaggable_methods()), ("calibrator", list(INNER_FIELDS))):
            value = params.get(key)
            if not isinstance(value, str) or value not in choices:
                c.fail(f"params.{key}", f"must be one of {choices}, got {shorten(value)}")
            else:
                out[key] = value
    if "feature_set" in allowed and "feature_set" in params:
        fs = params["feature_set"]
        if not isinstance(fs, str) or fs not in FEATURE_SETS:
            c.fail("params.feature_set", f"must be one of {list(FEATURE_SETS)}, got {shorten(fs)}")
        else:
            out["feature_set"] = fs
    return out


def _provenance(c: FieldChecker, value: Any, kind: str = "TracePlus") -> dict[str, Any] | None:
    """Where a TracePlus or ScoreCalibrator came from (written by ``fit``): model ids, tokenizers and entropy sources
    of its traces (lists of names, empty when unknown), its feature set (TracePlus only), number of rows, date (ISO
    8601) and trace_core version."""
    required = _PROVENANCE_KEYS if kind == "TracePlus" else tuple(k for k in _PROVENANCE_KEYS if k != "feature_set")
    if not isinstance(value, Mapping):
        c.fail("provenance", f"must be an object, got {shorten(value)} ({kind_of(value)})")
        return None
    before = len(c.problems)
    for key in value:
        if key not in required and key not in _PROVENANCE_OPTIONAL:
            c.fail("provenance", f"has an unknown key {shorten(key)}; it has {list(required + _PROVENANCE_OPTIONAL)}")
    missing = [key for key in required if key not in value]
    if missing:
        c.fail("provenance", f"lacks {missing}")
        return None
    out: dict[str, Any] = {}
    # in the order fit writes them, so that a file round-trips to the same text
    for key in (k for k in ("model_id", "model_digest", "tokenizer", "entropy_source", "source")
                if k in _PROVENANCE_LISTS or k in value):
        names = value[key]
        field = f"provenance.{key}"
        if not isinstance(names, list) or len(names) > _MAX_ITEMS or not all(
                isinstance(n, str) and len(n) <= _MAX_TEXT for n in names):
            c.fail(field, f"must be a list of at most {_MAX_ITEMS:,} names of at most {_MAX_TEXT:,} characters, "
                          f"got {shorten(names)}")
        elif key == "entropy_source" and not set(names) <= set(ENTROPY_SOURCES):
            c.fail(field, f"must hold names from {list(ENTROPY_SOURCES)}, got {shorten(names)}")
        elif key == "source" and not set(names) <= set(_TRACE_SOURCES):
            c.fail(field, f"must hold names from {list(_TRACE_SOURCES)}, got {shorten(names)}")
        else:
            out[key] = list(names)
    if "feature_set" in required:
        if not isinstance(value["feature_set"], str) or value["feature_set"] not in FEATURE_SETS:
            c.fail("provenance.feature_set",
                   f"must be one of {list(FEATURE_SETS)}, got {shorten(value['feature_set'])}")
        out["feature_set"] = value["feature_set"]
    out["n_rows"] = c.integer(value["n_rows"], "provenance.n_rows", minimum=0, maximum=10**15)
    for key in ("date", "version"):
        text = value[key]
        if not isinstance(text, str) or len(text) > 64:
            c.fail(f"provenance.{key}", f"must be text of at most 64 characters, got {shorten(text)}")
        out[key] = text
    if isinstance(value["date"], str) and len(value["date"]) <= 64:
        try:
            datetime.fromisoformat(value["date"])
        except ValueError:
            c.fail("provenance.date", f"must be an ISO 8601 date, got {shorten(value['date'])}")
    return out if len(c.problems) == before else None


def _drift_summary(c: FieldChecker, value: Any, allowed: tuple[str, ...]) -> DriftSummary | None:
    """The summary of the calibration answers' features that the drift check reads (``fit`` writes it, see
    :mod:`trace_core.calibration.drift`): ``n`` answers, the ``bins`` asked for, and per feature (each named once, from
    ``allowed``) at most ``bins - 1`` increasing finite ``edges`` and ``len(edges) + 1`` positive whole ``counts``
    summing to ``n``. Its size is bounded: ``len(allowed)`` features of at most ``2 * bins - 1`` numbers."""
    field = "drift_summary"
    if not isinstance(value, Mapping):
        c.fail(field, f"must be an object, got {shorten(value)} ({kind_of(value)})")
        return None
    before = len(c.problems)
    for key in value:
        if key not in _SUMMARY_KEYS:
            c.fail(field, f"has an unknown key {shorten(key)}; it has {list(_SUMMARY_KEYS)}")
    missing = [key for key in _SUMMARY_KEYS if key not in value]
    if missing:
        c.fail(field, f"lacks {missing}")
        return None
    n = c.integer(value["n"], f"{field}.n", minimum=1, maximum=10**15)
    bins = c.integer(value["bins"], f"{field}.bins", minimum=2, maximum=_MAX_BINS)
    features = value["features"]
    if not isinstance(features, list) or not 1 <= len(features) <= len(allowed):
        c.fail(f"{field}.features", f"must be a list of 1 to {len(allowed)} features, got {shorten(features)}")
        return None
    out: list[FeatureBins] = []
    seen: set[str] = set()
    for i, feature in enumerate(features):
        bins_of = _feature_bins(c, f"{field}.features[{i}]", feature, allowed, seen, n=n, bins=bins)
        if bins_of is not None:
            out.append(bins_of)
    if len(c.problems) > before or n is None or bins is None:
        return None
    return DriftSummary(n=n, features=tuple(out), bins=bins)


def _feature_bins(c: FieldChecker, where: str, feature: Any, allowed: tuple[str, ...], seen: set[str], *,
                  n: int | None, bins: int | None) -> FeatureBins | None:
    """One feature of the drift summary: its name (from ``allowed``, once), at most ``bins - 1`` strictly increasing
    finite edges and one more positive whole count than edges, summing to ``n``; None when a field is refused (the
    problems are with ``c``)."""
    if not isinstance(feature, Mapping) or set(feature) != set(_BIN_KEYS):
        c.fail(where, f"must be an object with keys {list(_BIN_KEYS)}, got {shorten(feature)}")
        return None
    name, edges, counts = feature["name"], feature["edges"], feature["counts"]
    if not isinstance(name, str) or name not in allowed:
        c.fail(f"{where}.name", f"must be one of {list(allowed)}, got {shorten(name)}")
    elif name in seen:
        c.fail(f"{where}.name", f"names {name!r} a second time")
    seen.add(name)
    if not isinstance(edges, list) or (bins is not None and len(edges) > bins - 1):
        c.fail(f"{where}.edges", f"must be a list of at most {(bins or _MAX_BINS) - 1} numbers, got "
                                 f"{shorten(edges)}")
        return None
    checked = [c.number(e, f"{where}.edges[{j}]", bound=math.inf) for j, e in enumerate(edges)]
    cut = [e for e in checked if e is not None]
    if len(cut) != len(checked):
        return None
    if any(b <= a for a, b in zip(cut, cut[1:], strict=False)):
        c.fail(f"{where}.edges", "must be strictly increasing")
    if not isinstance(counts, list) or len(counts) != len(edges) + 1:
        c.fail(f"{where}.counts", f"must be a list of {len(edges) + 1} counts (one more than the edges), got "
                                  f"{shorten(counts)}")
        return None
    checked_counts = [c.integer(k, f"{where}.counts[{j}]", minimum=1, maximum=10**15) for j, k in enumerate(counts)]
    whole = [k for k in checked_counts if k is not None]
    if len(whole) != len(checked_counts):
        return None
    if n is not None and sum(whole) != n:
        c.fail(f"{where}.counts", f"must sum to n ({n:,}), got {sum(whole):,}")
    return FeatureBins(name=name, edges=tuple(cut), counts=tuple(whole))


def _platt_fields(c: FieldChecker, obj: Mapping[str, Any], out: dict[str, Any]) -> None:
    for key in ("coef", "intercept"):
        if key in obj:
            out[key] = c.number(obj[key], key)
    if "mean" in obj:
        out["mean"] = c.number(obj["mean"], "mean", bound=MAX_CENTRE)
    if "scale" in obj:
        out["scale"] = c.number(obj["scale"], "scale", minimum=MIN_SCALE, bound=MAX_CENTRE)


def _isotonic_fields(c: FieldChecker, obj: Mapping[str, Any], out: dict[str, Any]) -> None:
    x = c.numbers(obj["x_thresholds"], "x_thresholds", bound=math.inf) if "x_thresholds" in obj else None
    y = c.numbers(obj["y_thresholds"], "y_thresholds") if "y_thresholds" in obj else None
    if x is not None and y is not None:
        if x.shape != y.shape:
            c.fail("y_thresholds", f"must hold as many numbers as 'x_thresholds' ({x.size:,}), got {y.size:,}")
        if (np.diff(x) < 0).any():
            c.fail("x_thresholds", "must be non-decreasing")
        if (np.diff(y) < 0).any() or y.min() < 0 or y.max() > 1:
            c.fail("y_thresholds", "must be non-decreasing and in [0, 1]")
    out["x_thresholds"], out["y_thresholds"] = x, y


def _score_fields(c: FieldChecker, obj: Mapping[str, Any], out: dict[str, Any]) -> None:
    """A ScoreCalibrator's own fields and those of its Platt or isotonic calibrator (``params.calibrator``)."""
    method, calibrator = out["params"].get("method"), out["params"].get("calibrator")
    transform = obj.get("transform")
    if method is not None and "transform" in obj and transform != METHODS[method].transform:
        c.fail("transform", f"must be {METHODS[method].transform!r}, the transform {method} is calibrated on in this "
                            f"version, got {shorten(transform)}")
    out["transform"] = transform
    if calibrator is not None:
        other = next(k for k in INNER_FIELDS if k != calibrator)
        for key in INNER_FIELDS[calibrator]:
            if key not in obj:
                c.problems.append(f"calibrator field {key!r} is missing (a {calibrator} ScoreCalibrator has "
                                  f"{list(INNER_FIELDS[calibrator])})")
        for key in INNER_FIELDS[other]:
            if key in obj:
                c.problems.append(f"calibrator field {key!r} is not a field of a {calibrator} ScoreCalibrator (it "
                                  f"has {list(INNER_FIELDS[calibrator])})")
        (_platt_fields if calibrator == "platt" else _isotonic_fields)(c, obj, out)
    if "provenance" in obj:
        out["provenance"] = _provenance(c, obj["provenance"], "ScoreCalibrator")
    if "drift_summary" in obj:
        out["drift_summary"] = _drift_summary(c, obj["drift_summary"], ("score", *EXTRA_FEATURES))
    out["n_samples"] = (c.integer(obj["n_samples"], "n_samples", minimum=MIN_SAMPLES, maximum=10**15)
                        if "n_samples" in obj else 0)


def _traceplus_fields(c: FieldChecker, obj: Mapping[str, Any], out: dict[str, Any]) -> None:
    """A TracePlus's fields: its feature names (those of its feature set in this version), one number per feature in
    ``mean``, ``coef`` and ``scale``, and its provenance and drift summary."""
    params = obj.get("params")
    known_set = not (isinstance(params, Mapping) and "feature_set" in params) or "feature_set" in out["params"]
    expected = FEATURE_SETS[out["params"].get("feature_set", "paper")] if known_set else None
    names = obj.get("feature_names")
    if "feature_names" in obj:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            c.fail("feature_names", f"must be a list of feature names, got {shorten(names)}")
        else:
            unknown = [n for n in names if n not in _KNOWN_NAMES]
            if unknown:
                c.fail("feature_names", f"holds unknown feature {shorten(unknown[0])} ({len(unknown):,} "
                                        "unknown in all)")
            elif expected is not None and tuple(names) != expected:
                c.fail("feature_names", f"{shorten(names)} do not match feature set "
                                        f"{out['params'].get('feature_set', 'paper')!r} of this version "
                                        f"({list(expected)})")
            else:
                out["feature_names"] = tuple(names)
    d = len(expected) if expected is not None else None
    if "mean" in obj:
        out["mean"] = c.numbers(obj["mean"], "mean", length=d, bound=MAX_CENTRE)
    if "coef" in obj:
        out["coef"] = c.numbers(obj["coef"], "coef", length=d)
    if "scale" in obj:
        out["scale"] = c.numbers(obj["scale"], "scale", length=d, minimum=MIN_SCALE, bound=MAX_CENTRE)
    if "intercept" in obj:
        out["intercept"] = c.number(obj["intercept"], "intercept")
    if "provenance" in obj:
        out["provenance"] = _provenance(c, obj["provenance"])
    if "drift_summary" in obj and expected is not None:  # an unknown feature set is reported already
        out["drift_summary"] = _drift_summary(c, obj["drift_summary"], tuple(expected) + tuple(
            n for n in EXTRA_FEATURES if n not in expected))
    out["n_samples"] = (c.integer(obj["n_samples"], "n_samples", minimum=MIN_SAMPLES, maximum=10**15)
                        if "n_samples" in obj else 0)


def converted_fields(c: FieldChecker, kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a calibrator of type ``kind`` (its top-level keys checked already), converted: ``type``,
    ``params`` and the type's own (see :func:`trace_core.calibration.reading.parse_calibrator`). A bad field is left out
    or None and its problem is added to ``c``."""
    out: dict[str, Any] = {"type": kind, "params": _params(c, kind, obj.get("params", {}))}
    if kind == "TracePlus":
        _traceplus_fields(c, obj, out)
    elif kind == "ScoreCalibrator":
        _score_fields(c, obj, out)
    elif kind == "PlattCalibrator":
        _platt_fields(c, obj, out)
    else:
        _isotonic_fields(c, obj, out)
    return out
