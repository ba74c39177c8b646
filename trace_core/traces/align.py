"""Aligning two answers to the same prompt token by token, and where they part ways.

Two answers (two models, or greedy and sampled decoding) are laid out as columns: each column holds one token of
answer ``a``, one token of answer ``b``, or one of each; a missing side is a gap. Every token of either answer appears
in exactly one column, in its answer's order, so nothing is dropped or duplicated whatever the tokenizers.

The approach, in two steps:

1. **Tokens.** :class:`difflib.SequenceMatcher` (``autojunk=False``) on the two token-text sequences. Its equal
   blocks become columns of identical tokens. With one tokenizer (the common case: greedy vs sampled decoding of one
   model) this is nearly the whole answer.
2. **Characters.** Each region between equal blocks is split at character offsets measured from the region's start:
   a token of ``a`` and a token of ``b`` share a column when they start at the same offset, and any other token gets
   a gap. With one tokenizer a replaced token faces its replacement (``" 76"`` against ``" 75"``); with two
   tokenizers the columns fall at the word boundaries both share (``" 7", "6"`` against ``" 76"`` gives
   ``" 7"/" 76"`` and a gap under ``"6"``).

When the two texts are equal (one text tokenized two ways), step 2 alone lays out the whole answer, so columns
fall exactly where both tokenizations cut the text.

Where the answers diverge is decided on *text*, not on tokens: the first divergence is the column that holds the
first character at which the concatenated answers differ. Two answers with the same text tokenized differently have
no divergence.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trace_core.checks import check_strings, shorten

__all__ = ["Alignment", "align_tokens", "divergence_summary"]

Column = tuple[int | None, int | None]


def _check_tokens(tokens: Sequence[str], name: str) -> tuple[str, ...]:
    if isinstance(tokens, str):
        raise TypeError(f"`{name}` must be a sequence of token strings, not one str")
    return tuple(check_strings(tokens, name))


def _starts(tokens: Sequence[str]) -> np.ndarray:
    """Character offset at which each token starts in the concatenated text, shape (T,)."""
    lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    return np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(tokens) else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Alignment:
    """Two token sequences laid out in columns.

    Attributes
    ----------
    a, b : tuple of str
        The two answers' tokens.
    columns : tuple of (int or None, int or None)
        One ``(i, j)`` per column: ``i`` indexes ``a``, ``j`` indexes ``b``, None is a gap (never both). Every index
        of ``a`` and of ``b`` appears exactly once, in increasing order.
    first_divergence : int or None
        The column holding the first character where ``"".join(a)`` and ``"".join(b)`` differ (or where the shorter
        one ends); None when the texts are equal.
    common_chars : int
        Length of the common prefix of the two texts, in characters.

    Raises
    ------
    ValueError
        When ``columns`` breaks the rules above (checked on construction).
    """

    a: tuple[str, ...]
    b: tuple[str, ...]
    columns: tuple[Column, ...]
    first_divergence: int | None
    common_chars: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple((i, j) for i, j in self.columns))
        for side, tokens, position in (("a", self.a, 0), ("b", self.b, 1)):
            seen = [c[position] for c in self.columns if c[position] is not None]
            if seen != list(range(len(tokens))):
                raise ValueError(f"the columns must hold every token of `{side}` once, in order "
                                 f"(0 .. {len(tokens) - 1}); got {shorten(seen)}")
        if any(i is None and j is None for i, j in self.columns):
            raise ValueError("a column must hold at least one token")
        if self.first_divergence is not None and not 0 <= self.first_divergence < len(self.columns):
            raise ValueError(f"`first_divergence` must index a column (0 .. {len(self.columns) - 1}) or be None, "
                             f"got {self.first_divergence!r}")

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def same_text(self) -> bool:
        """Whether the two answers are the same text (perhaps tokenized differently)."""
        return self.first_divergence is None

    def tokens_at(self, column: int) -> tuple[str | None, str | None]:
        """The tokens of column ``column``: ``(a's token or None, b's token or None)``."""
        i, j = self.columns[column]
        return (None if i is None else self.a[i]), (None if j is None else self.b[j])

    def agrees(self, column: int) -> bool:
        """Whether column ``column`` holds the same token text on both sides."""
        left, right = self.tokens_at(column)
        return left is not None and left == right

    def columns_of(self, side: str) -> np.ndarray:
        """The column of each token of side ``"a"`` or ``"b"``, shape (T,)."""
        if side not in ("a", "b"):
            raise ValueError(f"`side` must be 'a' or 'b', got {shorten(side)}")
        position = 0 if side == "a" else 1
        return np.array([k for k, c in enumerate(self.columns) if c[position] is not None], dtype=np.int64)


def _split_region(a: Sequence[str], b: Sequence[str], i0: int, j0: int) -> list[Column]:
    """Columns for a region that is not equal token by token: tokens that start at the same character offset
    (from the region's start) share a column, every other token gets a gap."""
    sa, sb = _starts(a), _starts(b)
    out: list[Column] = []
    i = j = 0
    while i < len(a) or j < len(b):
        if j == len(b) or (i < len(a) and sa[i] < sb[j]):
            out.append((i0 + i, None))
            i += 1
        elif i == len(a) or sb[j] < sa[i]:
            out.append((None, j0 + j))
            j += 1
        elif (a[i] == "") != (b[j] == ""):
            # An empty piece (a byte that the next token completes) starts where the next token does: give it its
            # own column so that the next token can face the other side's token.
            if a[i] == "":
                out.append((i0 + i, None))
                i += 1
            else:
                out.append((None, j0 + j))
                j += 1
        else:
            out.append((i0 + i, j0 + j))
            i += 1
            j += 1
    return out


def _common_prefix(x: str, y: str) -> int:
    n = min(len(x), len(y))
    for k in range(n):
        if x[k] != y[k]:
            return k
    return n


def _column_holding(starts: np.ndarray, tokens: Sequence[str], char: int, columns: np.ndarray) -> int | None:
    """The column of the token that holds character ``char``, or None past the end of the text."""
    ends = starts + np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    hits = np.flatnonzero((starts <= char) & (char < ends))
    return int(columns[hits[0]]) if hits.size else None


def align_tokens(a: Sequence[str], b: Sequence[str]) -> Alignment:
    """Align the tokens of two answers in columns (see the module docstring for the method).

    Parameters
    ----------
    a, b : sequence of str
        Each answer's token texts, whose concatenation is the answer (``Trace.tokens``).

    Returns
    -------
    Alignment
        Every token of ``a`` and of ``b`` in exactly one column, in order; the first divergence by text.

    Examples
    --------
    >>> al = align_tokens(["The", " answer", " is", " 76", "."], ["The", " answer", " is", " 75", "."])
    >>> al.first_divergence, al.tokens_at(3)
    (3, (' 76', ' 75'))
    >>> align_tokens([" 7", "6"], [" 76"]).columns
    ((0, 0), (1, None))
    """
    a, b = _check_tokens(a, "a"), _check_tokens(b, "b")
    text_a, text_b = "".join(a), "".join(b)
    columns: list[Column] = []
    if text_a == text_b:
        # One text cut two ways: equal tokens could face each other at different places (["a", "ba"] and
        # ["ab", "a"]), so the character offsets alone decide.
        columns = _split_region(a, b, 0, 0)
    else:
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                columns.extend(zip(range(i1, i2), range(j1, j2), strict=True))
            else:
                columns.extend(_split_region(a[i1:i2], b[j1:j2], i1, j1))

    common = _common_prefix(text_a, text_b)
    first = None
    if text_a != text_b:
        draft = Alignment(a, b, tuple(columns), None, common)  # checks the columns before they are used
        found = [_column_holding(_starts(tokens), tokens, common, draft.columns_of(side))
                 for side, tokens in (("a", a), ("b", b))]
        first = min(k for k in found if k is not None)  # the longer text holds the character, so one side does
    return Alignment(a, b, tuple(columns), first, common)


def _quoted(token: str | None) -> str:
    return "nothing" if token is None else shorten(token, 40)


def divergence_summary(alignment: Alignment, *, labels: tuple[str, str] = ("A", "B")) -> str:
    """One plain sentence saying how long the answers agree and where they part.

    Parameters
    ----------
    alignment : Alignment
    labels : tuple of str, default ("A", "B")
        How the two answers are called in the sentence.

    Returns
    -------
    str
        Token texts are quoted with :func:`repr` (control and bidi characters show as escapes) and shortened.

    Examples
    --------
    >>> divergence_summary(align_tokens(["The", " answer", " is", " 76"], ["The", " answer", " is", " 75"]))
    "The answers agree for 3 tokens, then diverge at token 4: ' 76' vs ' 75'."
    """
    if not isinstance(alignment, Alignment):
        raise TypeError(f"`alignment` must be an Alignment, got {type(alignment).__name__}")
    if len(labels) != 2 or not all(isinstance(x, str) for x in labels):
        raise ValueError(f"`labels` must be two strings, got {shorten(labels)}")
    n_a, n_b = len(alignment.a), len(alignment.b)
    if alignment.first_divergence is None:
        if alignment.a == alignment.b:
            return f"The answers are identical ({n_a} token{'s' * (n_a != 1)})."
        return (f"The answers are the same text, tokenized differently ({labels[0]}: {n_a} tokens, "
                f"{labels[1]}: {n_b} tokens).")
    k = alignment.first_divergence
    left, right = alignment.tokens_at(k)
    where = f"{_quoted(left)} vs {_quoted(right)}"
    if k == 0:
        return f"The answers differ from the first token: {where}."
    if all(alignment.agrees(c) for c in range(k)):
        return f"The answers agree for {k} token{'s' * (k != 1)}, then diverge at token {k + 1}: {where}."
    before = alignment.columns[:k]
    tokens_a = sum(i is not None for i, _ in before)
    tokens_b = sum(j is not None for _, j in before)
    return (f"The answers agree for their first {alignment.common_chars} characters ({labels[0]}: {tokens_a} tokens, "
            f"{labels[1]}: {tokens_b} tokens), then diverge at column {k + 1}: {where}.")
