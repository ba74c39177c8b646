"""Cell-level helpers shared by the data modules (private): what counts as missing or as a number, how a value is
quoted in a message, the exception one bad cell raises, and JSON decoding that reports keys given twice."""

from __future__ import annotations

import json
import math
import re
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from trace_core.checks import MAX_SHOWN, is_number, show

ABSENT = object()  # an empty cell: the row has no value in this column


class JsonValueError(ValueError):
    """JSON text that parses but holds a value Python cannot keep as data: an integer of more digits than Python
    converts (4,300 by default, ``sys.get_int_max_str_digits``), or an escaped lone surrogate (``"\\ud800"``, half
    of a UTF-16 pair: no character, and no UTF-8 writer or table takes it). ``path`` says where (surrogates only;
    () for the document itself or when unknown)."""

    def __init__(self, reason: str, path: JsonPath = ()) -> None:
        self.reason, self.path = reason, path
        self.message = self.message_in(path)
        super().__init__(self.message)

    def message_in(self, where: JsonPath) -> str:
        """The reason, said of ``where`` (the value's path as the message gives it; () for no path)."""
        return f"{shorten_path(where)} {self.reason}" if where else self.reason


class CellError(Exception):
    """A problem with one cell; carries the column name and the message that become a :class:`RowError`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


def is_missing(value: object) -> bool:
    """None, NaN or pandas NA (an empty string is not missing: callers decide what it means)."""
    if value is None or value is pd.NA:
        return True
    return isinstance(value, (float, np.floating)) and math.isnan(value)


def is_blank(value: object) -> bool:
    """Missing, or text that is empty or only whitespace: a cell that holds nothing."""
    return is_missing(value) or (isinstance(value, str) and not value.strip())


def json_cell(value: object, name: str) -> Any:
    """A cell that may hold JSON text: :data:`ABSENT` when blank, the decoded text for a str, else the value as is.

    An object in the text that holds a key twice is an error (JSON would keep only the last value, silently)."""
    if is_blank(value):
        return ABSENT
    if not isinstance(value, str):
        return value
    try:
        decoded, repeated = loads_checked(value)
    except json.JSONDecodeError as exc:
        raise CellError(name, f"not valid JSON ({exc.msg} at char {exc.pos}): {show(value)}") from None
    except RecursionError:  # e.g. 100,000 "[": a bad cell, not a crash of the whole file
        raise CellError(name, "JSON nested too deeply") from None
    except JsonValueError as exc:
        raise CellError(name, exc.message) from None
    if repeated:
        first = repeated[0]
        raise CellError(name, first.message(first.path))
    return decoded


# --------------------------------------------------------------------------------------------------
# JSON objects that hold a key twice
# --------------------------------------------------------------------------------------------------

JsonPath = tuple[str | int, ...]  # where a value is in a decoded document: object keys and list indexes


@dataclass(frozen=True)
class Repeated:
    """An object of a decoded JSON document that holds one or more keys more than once (``json`` keeps the last)."""

    path: JsonPath                     # where the object is: () for the document itself
    keys: tuple[tuple[str, int], ...]  # each key given more than once, with how often, in order of appearance

    def message(self, where: JsonPath) -> str:
        """The reason for a row error, e.g. ``"choices[0] holds the key 'x' twice; ..."``; ``where`` is the object's
        path as the message gives it (() for the value the error's column holds)."""
        key, times = self.keys[0]
        others = len(self.keys) - 1
        more = f" (and {others:,} other key{'s' if others > 1 else ''} more than once)" if others else ""
        inside = f"{shorten_path(where)} holds" if where else "holds"
        count = "twice" if times == 2 else f"{times:,} times"
        return (f"{inside} the key {show(key)} {count}{more}; JSON keeps only the last value, so the others "
                f"would be lost silently -- keep one")


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")
_DECODERS = threading.local()  # per thread: (decoder, the objects its last call found keys repeated in), by strict


def _decoder(strict: bool) -> tuple[json.JSONDecoder, list[tuple[dict[str, Any], list[tuple[str, Any]]]]]:
    cache = getattr(_DECODERS, "cache", None)
    if cache is None:
        cache = _DECODERS.cache = {}
    if strict not in cache:
        found: list[tuple[dict[str, Any], list[tuple[str, Any]]]] = []

        def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
            obj = dict(items)
            if len(obj) != len(items):  # a key given twice: dict() kept its first position and last value
                found.append((obj, items))
            return obj

        cache[strict] = (json.JSONDecoder(strict=strict, object_pairs_hook=pairs), found)
    return cache[strict]


def loads_checked(text: str, *, strict: bool = True, surrogates: bool = True) -> tuple[Any, list[Repeated]]:
    """``json.loads(text, strict=strict)``, and every object in it that holds a key more than once (in document
    order; empty almost always). Raises what ``json.loads`` raises, but :class:`JsonValueError` for a number of too
    many digits and, unless ``surrogates`` is False (the caller then uses :func:`check_surrogates` on the parts it
    wants checked), for a string holding a lone surrogate.

    The check costs one Python call per JSON object (``object_pairs_hook``); finding where a repeated key is walks
    the document only when one was found.
    """
    decoder, found = _decoder(strict)
    found.clear()  # a call that raised may have left some
    try:
        value = decoder.decode(text)
    except json.JSONDecodeError:
        raise
    except ValueError:  # int() refused a number's digits (the only other ValueError json raises)
        raise JsonValueError(_too_long_number()) from None
    if surrogates and has_surrogate_escape(text):  # rare: only then is every string looked at
        check_surrogates(value)
    if not found:
        return value, []
    repeated = {id(obj): tuple((k, n) for k, n in Counter(k for k, _ in items).items() if n > 1)
                for obj, items in found}
    found.clear()
    return value, _locate(value, repeated)


def _too_long_number() -> str:
    limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300  # the function: Python >= 3.10.7
    return f"holds a number with more than {limit:,} digits; no value in a dataset needs that many"


# An escape of a UTF-16 surrogate (\\ud800-\\udfff): a lone one decodes to a str that cannot be encoded.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogate_escape(text: str) -> bool:
    """Whether JSON ``text`` may hold a lone surrogate (an escape of one; a valid pair has two)."""
    return "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None


def check_surrogates(root: Any) -> None:
    """Raise :class:`JsonValueError` naming where the first string (or object key) holding a lone surrogate is, in
    document order (an iterative walk: no recursion limit)."""
    stack: list[tuple[Any, JsonPath]] = [(root, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            found = _SURROGATE.search(value)
            if found:
                raise JsonValueError(f"holds {found.group()!r}: half of a UTF-16 surrogate pair without its other "
                                     f"half, which is no character; remove it or give the whole character", path)
        elif isinstance(value, dict):
            for key in value:
                if _SURROGATE.search(key):
                    raise JsonValueError(f"holds the key {show(key)}, with half of a UTF-16 surrogate pair, which "
                                         f"is no character; rename it", path)
            stack.extend((child, (*path, key)) for key, child in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((child, (*path, i)) for i, child in reversed(list(enumerate(value))))


def _locate(root: Any, repeated: dict[int, tuple[tuple[str, int], ...]]) -> list[Repeated]:
    """Where in ``root`` the objects with these ids are, in document order (an iterative walk: no recursion limit)."""
    out: list[Repeated] = []
    stack: list[tuple[Any, JsonPath]] = [(root, ())]
    while stack and len(out) < len(repeated):
        value, path = stack.pop()
        if isinstance(value, dict):
            if id(value) in repeated:
                out.append(Repeated(path, repeated[id(value)]))
            children: Sequence[tuple[Any, Any]] = list(value.items())
        elif isinstance(value, list):
            children = list(enumerate(value))
        else:
            continue
        stack.extend((child, (*path, key)) for key, child in reversed(children)
                     if isinstance(child, (dict, list)))
    return out


def shorten_path(path: JsonPath) -> str:
    """A path for a message, e.g. ``choices[0].logprobs``, cut to about :data:`MAX_SHOWN` characters."""
    parts = []
    for i, p in enumerate(path):
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif _PLAIN_KEY.fullmatch(p):
            parts.append(f".{p}" if i else p)
        else:  # spaces, quotes, line breaks...: quoted, so the message stays one readable line
            parts.append(f"[{show(p)}]")
    text = "".join(parts)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


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
