"""Reading one field of a response: its type, a token's text or bytes, a probability, a token id.

Every reader raises ValueError naming the field (``where``) and the value found, so each layout's messages read alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from trace_core.checks import is_number, show
from trace_core.server_shapes.agreement import bytes_agree
from trace_core.traces.trace import LOGPROB_TOLERANCE

__all__ = ["MAX_TOKEN_ID", "byte_list", "check_prob", "field_of", "is_int", "is_list", "object_at", "list_at",
           "streamed", "string_at", "token_bytes", "token_id_at", "token_raw"]

_BYTES_TOKEN = re.compile(r"bytes:((?:\\x[0-9a-fA-F]{2})+)")
#: The largest token id read (int64).
MAX_TOKEN_ID = 2**63 - 1


def token_bytes(token: str) -> bytes:
    """A token's bytes from its text; the legacy OpenAI API writes a token that is part of a UTF-8 character as
    ``"bytes:\\xe6\\x97"``."""
    match = _BYTES_TOKEN.fullmatch(token)
    if match:
        return bytes(int(h, 16) for h in match.group(1).split("\\x")[1:])
    return token.encode("utf-8")


def byte_list(value: object, where: str) -> bytes | None:
    """A token's ``bytes`` field (a list of ints 0..255) as bytes; None when it is null."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and set(map(type, value)) <= {int}:  # what JSON gives, checked in C
        try:
            return bytes(value)
        except ValueError:  # an int outside 0..255
            pass
    if (isinstance(value, Sequence) and not isinstance(value, (str, bytes))
            and all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in value)):
        return bytes(value)
    raise ValueError(f"{where} must be a list of ints 0..255 or null, got {show(value)}")


def token_raw(text: str, value: object, where: str) -> bytes:
    """A token's bytes: its ``bytes`` field ``value`` (named ``where``) when it has one, which must be the bytes of its
    text ``text`` (:func:`~.agreement.bytes_agree`: the bytes are taken as the truth where the text shows them
    lossily); else read from the text (:func:`token_bytes`)."""
    raw = byte_list(value, where)
    if raw is None:
        return token_bytes(text)
    if raw != text.encode("utf-8", "replace") and not bytes_agree(text, raw):
        raise ValueError(f"{where} is {show(list(raw))} ({show(raw.decode('utf-8', 'replace'))}) but the token is "
                         f"{show(text)}; expected the token's own bytes (its UTF-8, or the bytes it shows only in "
                         "part when it is part of a character)")
    return raw


def check_prob(value: object, where: str, *, chosen: bool = False) -> float:
    """A probability (0 to 1, within the slack Trace allows log-probs) as its log-probability; 0 gives -inf, which
    an alternative may have (it is dropped) and the chosen token may not."""
    if (not is_number(value) or math.isnan(float(value)) or float(value) < 0  # type: ignore[arg-type]
            or float(value) > math.exp(LOGPROB_TOLERANCE)):  # type: ignore[arg-type]
        raise ValueError(f"{where} is {show(value)}; expected a probability (a number from 0 to 1)")
    p = float(value)  # type: ignore[arg-type]
    if chosen and p == 0:
        raise ValueError(f"{where} is 0; the chosen token needs a probability above 0")
    return math.log(p) if p > 0 else -math.inf


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_list(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def field_of(entry: Mapping[str, Any], key: str, where: str, expected: str) -> Any:
    """``entry[key]``; ValueError naming the field when it is missing."""
    if key not in entry:
        raise ValueError(f"{where} has no `{key}`; expected {expected}")
    return entry[key]


def object_at(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be an object, got {show(value)}")
    return value


def list_at(value: object, where: str) -> Sequence[Any]:
    if not is_list(value):
        raise ValueError(f"{where} must be a list, got {show(value)}")
    return value  # type: ignore[return-value]


def string_at(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {show(value)}")
    return value


def token_id_at(value: object, where: str) -> int:
    if not is_int(value) or not 0 <= value <= MAX_TOKEN_ID:  # type: ignore[operator]
        raise ValueError(f"{where} must be a token id (an int >= 0), got {show(value)}")
    return int(value)  # type: ignore[call-overload]


def streamed(what: str, how: str) -> ValueError:
    """The error for one message of a stream, which holds a few of the answer's tokens, not the answer."""
    return ValueError(f"response is {what}, a few tokens of the answer, not the whole response: {how}")
