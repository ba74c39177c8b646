"""The numpydoc entries the metrics share (parameters, a kind's Parameters section, the Raises section of a
label/score pair), written once, as scikit-learn and MNE do.

A metric's docstring names an entry by a line holding only ``{name}``; :func:`fill_doc` replaces that line with the
entry, indented like the line, so the rendered docstring (``help()``, Sphinx) reads as if written out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

__all__ = ["DOCS", "PLACEHOLDER", "fill_doc"]

_T = TypeVar("_T", bound=Callable[..., object])

_SCORE = "Confidence score, any finite real, higher = more likely correct."

#: The shared entries, first line unindented and the description under it indented by four spaces.
DOCS: dict[str, str] = {
    "y_true": "y_true : array-like of shape (n_answers,)\n"
              "    1 if the answer is correct, 0 otherwise (bool or 0/1 numbers).",
    "score": f"score : array-like of shape (n_answers,)\n    {_SCORE}",
    "confidence": f"confidence : array-like of shape (n_answers,)\n    {_SCORE}",
    "y_prob": "y_prob : array-like of shape (n_answers,)\n"
              "    Predicted probability that the answer is correct, finite and in [0, 1].",
    "n_bins": "n_bins : int, default=10\n"
              "    Number of bins, >= 1; ECE, the reliability table and the plot share the default, so the number and\n"
              "    the picture agree.",
    "strategy": 'strategy : {"uniform", "quantile"}, default="uniform"\n'
                "    Bin edges, see :func:`bin_probabilities`.",
    "validate": "validate : bool, default=True\n"
                "    Check the inputs first. False skips the checks, for arrays checked once already: ``y_true``\n"
                "    an int64 array of 0/1 and the scores a finite float64 array of the same length; anything else\n"
                "    gives an undefined result.",
    "pair_raises": "Raises\n------\nValueError\n"
                   "    On empty input, length mismatch, bad labels or non-finite scores.",
}

# Whole sections, header included (``pair_raises`` above too), so a docstring holds its own text and one line per
# section it shares. The Parameters sections of the metrics of one kind: a ranking metric takes (y_true, score), a
# selective one (y_true, confidence), a binned calibration metric (y_true, y_prob, n_bins, strategy).
_HEADER = "Parameters\n----------\n"
DOCS["ranking_parameters"] = _HEADER + "\n".join([DOCS["y_true"], DOCS["score"]])
DOCS["selective_parameters"] = _HEADER + "\n".join([DOCS["y_true"], DOCS["confidence"]])
DOCS["binned_parameters"] = _HEADER + "\n".join([DOCS["y_true"], DOCS["y_prob"], DOCS["n_bins"], DOCS["strategy"]])

#: A line that names a shared entry: only ``{name}`` on it, indented.
PLACEHOLDER = re.compile(r"^(?P<indent>[ \t]*)\{(?P<name>\w+)\}[ \t]*$", re.MULTILINE)


def _entry(match: re.Match[str]) -> str:
    name, indent = match["name"], match["indent"]
    if name not in DOCS:
        raise KeyError(f"no shared docstring entry {name!r}; known: {', '.join(sorted(DOCS))}")
    return "\n".join(indent + line for line in DOCS[name].split("\n"))


def fill_doc(obj: _T) -> _T:
    """Decorator: replace each ``{name}`` line of ``obj``'s docstring with the shared entry ``DOCS[name]``.

    Only lines holding a placeholder alone change, so braces elsewhere (``{"uniform", "quantile"}``, ``H_{n}``) stay.
    An unknown name raises KeyError at import. A docstring stripped by ``python -OO`` (None) is left as it is.
    """
    if obj.__doc__ is not None:
        obj.__doc__ = PLACEHOLDER.sub(_entry, obj.__doc__)
    return obj
