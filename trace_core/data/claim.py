"""The part of an answer that makes its claim, and where a reference was found in an answer.

The ``claim`` matcher (:func:`~trace_core.data.labels.label_from_reference`) is ``contains`` over the answer's claim
instead of the whole answer. Measured on 400 short-fact answers of SmolLM2-135M-Instruct labeled by hand
(``assets/datasets/real_hand_labels.csv``, ``python -m bench.matchers``), ``contains`` called right an answer that
names the reference only beside its claim: "The official language is Bahamiskat, which is a mix of English", "French,
with English being the primary language", "nestled between Africa and Europe". The claim is:

1. the text after the last "Answer:" (or "Final answer:") up to the end of its line, when the answer has one;
2. else the answer's first sentence (it ends at ". ", "! ", "? " before a capital letter, digit or quote, not after
   "St.", "Dr.", "Mr.", "Mrs.", "No.", "e.g.", "i.e." or a single capital letter, or at a line break);
3. without its asides: from ", which", ", who", ", where", ", with", ", while", ", whereas", ", although",
   ", making" or "a mix of", "a blend of", "a combination of" to the end, and every "between X and Y" (two
   candidates are not a claim of either).

A hyphen joins words for both matchers, as SQuAD's normalisation has it ("English-speaking" does not hold
"English"). Splitting words at hyphens was measured on the same hand labels: of the three answers it turns right, two
are wrong by hand ("a relatively English-speaking population" for an official language; "Guinea-Bissau" for its
capital Bissau), so it is not done.
"""

from __future__ import annotations

import re

__all__ = ["claim_region", "claim_text", "find_span", "hedged_spans"]

_ANSWER_LINE = re.compile(r"\b(?:final\s+)?answer\s*:\s*(?P<rest>[^\n]*)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'“‘(]?[A-Z0-9])|\n")
_NOT_AN_END = re.compile(r"(?:\b(?:St|Dr|Mr|Mrs|Ms|No|e\.g|i\.e|vs|etc)|\b[A-Z])\.$")
_ASIDE = re.compile(r",\s*(?:which|who|whom|where|with|while|whereas|although|making)\b|\b(?:a|an)\s+(?:mix|blend|"
                    r"combination|mixture)\s+of\b", re.IGNORECASE)
_BETWEEN = re.compile(r"\bbetween\b[^,.;:!?\n]*?\band\b(?:\s+(?:the\s+)?[\w'’-]+){1,3}", re.IGNORECASE)


def _first_sentence_end(text: str) -> int:
    """Where the first sentence of ``text`` ends (its length when it has one sentence)."""
    start = 0
    for match in _SENTENCE_END.finditer(text):
        head = text[:match.start()].rstrip()
        if match.group() != "\n" and _NOT_AN_END.search(head):
            continue
        if head[start:].strip():
            return len(head)
        start = match.end()
    return len(text)


def claim_region(answer: str) -> tuple[int, int]:
    """Where the claim is in ``answer``: (start, end) of its "Answer:" line's text or its first sentence, cut before
    the first aside (see the module docstring)."""
    lines = list(_ANSWER_LINE.finditer(answer))
    if lines and lines[-1].group("rest").strip():
        start, end = lines[-1].start("rest"), lines[-1].end("rest")
    else:
        start, end = 0, _first_sentence_end(answer)
    aside = _ASIDE.search(answer, start, end)
    return start, (aside.start() if aside else end)


def hedged_spans(text: str) -> list[tuple[int, int]]:
    """The "between X and Y" stretches of ``text``: two candidates, a claim of neither."""
    return [(m.start(), m.end()) for m in _BETWEEN.finditer(text)]


def claim_text(answer: str) -> str:
    """The part of ``answer`` that makes its claim (see the module docstring for the rule).

    Examples
    --------
    >>> claim_text("The official language is Bahamiskat, which is a mix of English and Bahamicos.")
    'The official language is Bahamiskat'
    >>> claim_text("Let me think. 2 + 3 = 5.\\nAnswer: 5")
    '5'
    >>> claim_text("Morocco is a desert nation nestled between Africa and Europe.")
    'Morocco is a desert nation nestled  .'
    >>> claim_text("St. John's is the capital. It is small.")
    "St. John's is the capital."
    """
    start, end = claim_region(answer)
    return _BETWEEN.sub(" ", answer[start:end])


def find_span(answer: str, forms: list[str], skip: list[tuple[int, int]] | None = None) -> tuple[int, int] | None:
    """Where the first of ``forms`` occurs in ``answer`` as whole words, case-insensitively, with any run of spaces,
    hyphens or punctuation matching any other, outside the ``skip`` stretches (for showing what a text matcher
    found); None when none occurs as written (a match that needed accents folded or articles dropped is not shown)."""
    best: tuple[int, int] | None = None
    for form in forms:
        words = re.findall(r"\w+", form)
        if not words:
            continue
        pattern = r"(?<!\w)" + r"[\W_]+".join(map(re.escape, words)) + r"(?!\w)"
        for found in re.finditer(pattern, answer, re.IGNORECASE):
            if any(found.start() < end and start < found.end() for start, end in skip or ()):
                continue
            if best is None or found.start() < best[0]:
                best = (found.start(), found.end())
            break
    return best
