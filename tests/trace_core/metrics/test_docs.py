"""The metrics' shared docstring entries: every public metric's rendered docstring is whole and documents each
parameter, and the filling keeps the text readable with help()."""

from __future__ import annotations

import inspect
import pydoc
import re

import pytest

import trace_core.metrics as metrics
from trace_core.metrics._docs import DOCS, PLACEHOLDER, fill_doc

PUBLIC = [getattr(metrics, name) for name in metrics.__all__ if name != "UndefinedMetricWarning"]


def _documented(obj: object) -> list[object]:
    """The object, and for a class its public methods too."""
    if not inspect.isclass(obj):
        return [obj]
    return [obj, *(m for n, m in vars(obj).items() if callable(m) and not n.startswith("_"))]


def _parameters_section(doc: str) -> str:
    match = re.search(r"^Parameters\n-{10}\n(.*?)(?:\n\n[A-Z][a-z]+\n-+\n|\Z)", doc, re.MULTILINE | re.DOTALL)
    assert match, "no Parameters section"
    return match.group(1)


@pytest.mark.parametrize("obj", PUBLIC, ids=lambda o: o.__name__)
def test_no_placeholder_is_left(obj):
    for item in _documented(obj):
        doc = item.__doc__
        assert doc, f"{item.__qualname__} has no docstring"
        assert not PLACEHOLDER.search(doc), f"{item.__qualname__}: unfilled {PLACEHOLDER.search(doc).group(0)!r}"


@pytest.mark.parametrize("obj", PUBLIC, ids=lambda o: o.__name__)
def test_every_parameter_is_documented(obj):
    init = obj.__init__ if inspect.isclass(obj) else obj
    names = [p for p in inspect.signature(init).parameters if p != "self"]
    section = _parameters_section(inspect.getdoc(obj))
    for name in names:
        assert re.search(rf"^{name} : \S", section, re.MULTILINE), f"{obj.__name__}: `{name}` is not documented"


def test_filled_entries_read_as_written_out():
    text = pydoc.render_doc(metrics.expected_calibration_error, renderer=pydoc.plaintext)
    expected = inspect.cleandoc("""
        Parameters
        ----------
        y_true : array-like of shape (n_answers,)
            1 if the answer is correct, 0 otherwise (bool or 0/1 numbers).
        y_prob : array-like of shape (n_answers,)
            Predicted probability that the answer is correct, finite and in [0, 1].
        n_bins : int, default=10
    """)
    lines = [line[4:] if line.startswith("    ") else line for line in text.splitlines()]
    assert expected in "\n".join(lines)
    auroc = inspect.getdoc(metrics.auroc)
    assert "Raises\n------\nValueError\n    On empty input, length mismatch" in auroc
    assert "\n\nReturns\n-------\nfloat\n" in auroc  # the section after a filled one keeps its blank line


def test_braces_that_are_not_placeholders_stay():
    doc = inspect.getdoc(metrics.prr)
    assert "H_{n_correct}" in doc
    assert 'strategy : {"uniform", "quantile"}, default="uniform"' in inspect.getdoc(metrics.bin_probabilities)


def test_fill_doc_indents_each_line_like_the_placeholder():
    def f(y_true):
        """Summary.

        Parameters
        ----------
        {y_true}
        """

    assert inspect.getdoc(fill_doc(f)) == "Summary.\n\nParameters\n----------\n" + DOCS["y_true"]


def test_unknown_entry_fails_at_definition():
    def f():
        """Summary.

        {no_such_entry}
        """

    with pytest.raises(KeyError, match="no_such_entry"):
        fill_doc(f)


def test_stripped_docstring_is_left_alone():
    def f():
        pass

    assert fill_doc(f).__doc__ is None
