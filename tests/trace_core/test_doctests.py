"""Every example in the library's docstrings runs and prints what it says (those that need a model are skipped in
the docstring itself with ``# doctest: +SKIP``)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import trace_core

MODULES = sorted(m.name for m in pkgutil.walk_packages(trace_core.__path__, "trace_core.")
                 if not m.name.startswith("trace_core.record")  # recording examples need a model: all skipped
                 and m.name != "trace_core.__main__")  # importing it runs the command line


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
