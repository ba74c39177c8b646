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

__all__ = ["claim_text", "find_span"]

_ANSWER_LINE = re.compile(r"(?:final\s+)?answer\s*:\s*(?P<rest>[^\n]*)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'“‘(]?[A-Z0-9])|\n")
_NOT_AN_END = re.compile(r"(?:\b(?:St|Dr|Mr|Mrs|Ms|No|e\.g|i\.e|vs|etc)|\b[A-Z])\.$")
_ASIDE = re.compile(r",\s*(?:which|who|whom|where|with|while|whereas|although|making)\b|\b(?:a|an)\s+(?:mix|blend|"
                    r"combination|mixture)\s+of\b", re.IGNORECASE)
_BETWEEN = re.compile(r"\bbetween\b[^,.;:!?\n]*?\band\b(?:\s+(?:the\s+)?[\w'’-]+){1,3}", re.IGNORECASE)


def _first_sentence(text: str) -> str:
    start = 0
    for match in _SENTENCE_END.finditer(text):
        head = text[:match.start()].rstrip()
        if match.group() != "\n" and _NOT_AN_END.search(head):
            continue
        if head[start:].strip():
            return head
        start = match.end()
    return text


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
    lines = list(_ANSWER_LINE.finditer(answer))
    text = lines[-1].group("rest") if lines and lines[-1].group("rest").strip() else _first_sentence(answer)
    aside = _ASIDE.search(text)
    if aside:
        text = text[:aside.start()]
    return _BETWEEN.sub(" ", text)


def find_span(answer: str, forms: list[str]) -> tuple[int, int] | None:
    """Where the first of ``forms`` occurs in ``answer`` as whole words, case-insensitively, with any run of spaces,
    hyphens or punctuation matching any other (for showing what a text matcher found); None when none occurs as
    written (a match that needed accents folded or articles dropped is not shown)."""
    best: tuple[int, int] | None = None
    for form in forms:
        words = re.findall(r"\w+", form)
        if not words:
            continue
        pattern = r"(?<!\w)" + r"[\W_]+".join(map(re.escape, words)) + r"(?!\w)"
        found = re.search(pattern, answer, re.IGNORECASE)
        if found and (best is None or found.start() < best[0]):
            best = (found.start(), found.end())
    return best
