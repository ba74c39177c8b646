"""Text for the page: one way to show control, bidi and zero-width characters (:func:`visible_token` for tokens,
:func:`control_safe` for whole texts), untrusted text made literal for Streamlit's Markdown (:func:`md_literal`), and
library messages as sentences. Pure functions: nothing here draws on the page.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence

# counted is the app's too: one rule for "1 row", "2 rows" in every sentence the tool prints
from trace_core.checks import counted as counted
from trace_core.methods.spans import completing_token_of

#: The longest message (characters, before escaping) an alert or caption shows; user input inside it is shortened
#: to about 200 characters where it is quoted, so only a message quoting many inputs reaches this.
MAX_MESSAGE = 2_000


# Characters that can hide, reorder or fake text: C0 and C1 controls and DEL, bidi embeddings, overrides, isolates
# and marks, zero-width characters, and the Unicode line and paragraph separators (they break lines in some viewers
# and vanish in others). Tab and the newlines are C0 controls too; callers decide how to show those first.
_BIDI_AND_INVISIBLE = frozenset([0x061C, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x2028, 0x2029, 0x2060, 0xFEFF]
                                + list(range(0x202A, 0x202F)) + list(range(0x2066, 0x206A)))
_NEWLINE = re.compile(r"\r\n|\r|\n")
NEWLINE_MARK, TAB_MARK, EMPTY_MARK = "↵", "⇥", "∅"
# Any character that token_units treats specially (newlines, tab, and every _hidden character): a token without one
# is a single text run.
_SPECIAL = re.compile("[\x00-\x1f\x7f-\x9f" + "".join(chr(c) for c in sorted(_BIDI_AND_INVISIBLE)) + "]")


def _hidden(ch: str) -> bool:
    """Whether ``ch`` is shown as a ``\\uXXXX`` escape (see ``_BIDI_AND_INVISIBLE``)."""
    code = ord(ch)
    return code < 0x20 or 0x7F <= code <= 0x9F or code in _BIDI_AND_INVISIBLE


def _escaped(ch: str) -> str:
    return f"\\u{ord(ch):04x}"


def token_units(token: str) -> list[tuple[str, str]]:
    """``token`` as ``(kind, text)`` units: ``"text"`` runs, and one unit per ``"newline"`` (``\\r\\n`` is one),
    ``"tab"`` and ``"escape"``; the texts joined are :func:`visible_token`'s answer (less the empty mark)."""
    if not _SPECIAL.search(token):
        return [("text", token)] if token else []
    units: list[tuple[str, str]] = []
    for number, line in enumerate(_NEWLINE.split(token)):
        if number:
            units.append(("newline", NEWLINE_MARK))
        run: list[str] = []
        for ch in line:
            if ch == "\t" or _hidden(ch):
                if run:
                    units.append(("text", "".join(run)))
                    run = []
                units.append(("tab", TAB_MARK) if ch == "\t" else ("escape", _escaped(ch)))
            else:
                run.append(ch)
        if run:
            units.append(("text", "".join(run)))
    return units


def visible_token(token: str) -> str:
    """A token as plain text with every invisible or layout-changing character made visible (not HTML-escaped).

    Newlines (``\\n``, ``\\r\\n``, ``\\r``) become ``↵``, a tab ``⇥``; every other C0/C1 control and DEL, the bidi
    embeddings, overrides, isolates and marks (U+202A–202E, U+2066–2069, U+200E, U+200F, U+061C), the zero-width
    characters (U+200B–200D, U+2060, U+FEFF) and the line/paragraph separators (U+2028, U+2029) become ``\\uXXXX``;
    the empty token (a byte-level piece completed by the next token) becomes ``∅``. Ordinary spaces are kept.

    Examples
    --------
    >>> visible_token("a\\n\\tb\\u202ec")
    'a↵⇥b\\\\u202ec'
    >>> visible_token("")
    '∅'
    """
    if not isinstance(token, str):
        raise TypeError(f"`token` must be a str, got {type(token).__name__}")
    if token == "":
        return EMPTY_MARK
    if not _SPECIAL.search(token):
        return token
    return "".join(text for _, text in token_units(token))


def text_direction(text: str) -> str | None:
    """``"rtl"`` when the first strongly directional character of ``text`` is right to left (Arabic, Hebrew, ...),
    ``"ltr"`` when it is left to right, None when there is none (digits, punctuation): the direction an element with
    ``dir="auto"`` holding that text takes, for layouts whose own labels would otherwise decide it.

    >>> text_direction("1. \u0645\u0631\u062d\u0628\u0627"), text_direction("Hello \u0645"), text_direction("42")
    ('rtl', 'ltr', None)
    """
    for ch in text:
        kind = unicodedata.bidirectional(ch)
        if kind == "L":
            return "ltr"
        if kind in ("R", "AL"):
            return "rtl"
    return None


def byte_piece_note(tokens: Sequence[str], i: int, quote: Callable[[str], str] | None = None) -> str | None:
    """What token ``i`` is when it has no text of its own (a byte-level piece that ends inside a multi-byte
    character, written on the token that completes it), in words with that token's text quoted (by ``quote``, which
    gets it made visible and shortened; default: in single quotes); None for a token with text.

    >>> byte_piece_note(["", "\u3053", "."], 0)
    "bytes of '\u3053', which token 2 completes"
    >>> byte_piece_note(["A", ""], 1)
    'bytes of a character the answer does not finish'
    """
    if tokens[i] != "":
        return None
    owner = completing_token_of(tokens, i)
    if owner < 0:
        return "bytes of a character the answer does not finish"
    shown = shortened(visible_token(tokens[owner]), 20)
    quoted = quote(shown) if quote else f"'{shown}'"
    return f"bytes of {quoted}, which token {owner + 1} completes"


def control_safe(text: str) -> str:
    """Whole texts (prompts, answers in tables): the characters :func:`visible_token` escapes are escaped the same
    way (``\\uXXXX``); newlines and tabs are kept as they are, so multi-line text stays multi-line (``\\r\\n`` and a
    lone ``\\r`` become ``\\n``)."""
    text = _NEWLINE.sub("\n", text)
    return "".join(_escaped(ch) if ch not in "\n\t" and _hidden(ch) else ch for ch in text)


def md_literal(text: str, limit: int = MAX_MESSAGE) -> str:
    """Untrusted text for a Streamlit Markdown string (``st.error``, ``st.warning``, ``st.caption``), shown literally.

    Backslash escapes are not enough (``:material/...:`` and ``:red[...]`` still render), so every ASCII punctuation
    character becomes a numeric character reference, which Markdown shows as that character and never parses.
    Text longer than ``limit`` characters is cut (the cut says how long it was): a message quoting a huge input never
    becomes a huge alert.
    """
    text = str(text)
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text):,} characters in all)"
    return "".join(f"&#{ord(ch)};" if ch.isascii() and not ch.isalnum() and not ch.isspace() else ch
                   for ch in control_safe(text))


def shortened(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how many more there were."""
    return text if len(text) <= limit else text[:limit] + f"… (+{len(text) - limit} chars)"


def sentence(message: str) -> str:
    """A library message (lower case, no full stop) as a sentence for the page."""
    return message[:1].upper() + message[1:] + ("" if message.endswith((".", "…")) else ".")
