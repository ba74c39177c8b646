"""The project's own lint rules (tools/, run by `make lint`) find what they are meant to find and nothing else."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import lint_private_imports  # noqa: E402
import lint_sizes  # noqa: E402


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A throwaway package laid out like the project's, with the working directory at its root."""
    pkg = tmp_path / "trace_core"
    (pkg / "sub").mkdir(parents=True)
    for init in (pkg / "__init__.py", pkg / "sub" / "__init__.py"):
        init.write_text("")
    (pkg / "helpers.py").write_text("def _private():\n    pass\n\n\ndef public():\n    pass\n")
    (pkg / "_support.py").write_text("VALUE = 1\n")
    monkeypatch.chdir(tmp_path)
    return pkg


def test_a_private_name_imported_from_another_module_is_found(package):
    user = package / "sub" / "user.py"
    user.write_text("from ..helpers import _private, public\nfrom .. import _support\nfrom .._support import VALUE\n"
                    "from ..helpers import public as _alias\nfrom . import sibling as s\n\nx = s._hidden\n")
    (package / "sub" / "sibling.py").write_text("_hidden = 1\n")
    found = lint_private_imports.findings(user)
    assert len(found) == 2
    assert "'_private' of helpers" in found[0] and "'_hidden'" in found[1]


def test_a_module_may_use_its_own_private_names(package):
    own = package / "helpers.py"
    own.write_text(own.read_text() + "\n\ndef caller():\n    return _private()\n")
    assert lint_private_imports.findings(own) == []
    assert lint_private_imports.main([str(package)]) == 0


def test_sizes_count_code_lines_only(package):
    body = "\n".join(f"    x{i} = {i}  # a comment" for i in range(59))
    docstring = '    """' + "\n".join(["doc"] * 40) + '"""\n'
    ok = package / "ok.py"
    ok.write_text(f"def f():\n{docstring}\n    # a comment line\n\n{body}\n")
    assert lint_sizes.findings(ok, module_limit=True) == []  # the def line and 59 statements: 60 code lines
    long = package / "long.py"
    long.write_text(f"def g():\n{body}\n    return 1\n")
    (found,) = lint_sizes.findings(long, module_limit=True)
    assert "g has 61 code lines (at most 60)" in found
    big = package / "big.py"
    big.write_text("\n".join(f"V{i} = {i}" for i in range(401)) + "\n")
    assert lint_sizes.findings(big, module_limit=True) == [f"{big}: 401 code lines (at most 400): split it by concern"]
    assert lint_sizes.findings(big, module_limit=False) == []


def test_the_import_graph_rule_finds_cycles_and_function_local_imports(package):
    import lint_import_graph

    (package / "a.py").write_text("from trace_core.b import B\n\nA = 1\n")
    (package / "b.py").write_text("from trace_core.sub.c import C\n\nB = 2\n")
    (package / "sub" / "c.py").write_text("from trace_core import a\n\nC = 3\n")  # a -> b -> sub.c -> a
    (package / "d.py").write_text("import numpy\n\n\ndef f():\n    from trace_core.a import A\n\n    return A\n")
    (package / "plots.py").write_text("import plotly\n")  # needs an optional dependency at its top
    (package / "e.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from trace_core.f import F\n"
                                  "\n\ndef g():\n    from trace_core import plots\n\n    return plots\n")
    (package / "f.py").write_text("from trace_core.e import g\n\nF = 4\n")  # e -> f only for type checkers
    found = lint_import_graph.findings(package.parent)
    assert len(found) == 2, found
    assert found[0].startswith("import cycle: trace_core.a -> trace_core.b -> trace_core.sub.c -> trace_core.a")
    assert found[1].startswith(f"{Path('trace_core') / 'd.py'}:5: imports trace_core.a inside a function")
    assert lint_import_graph.main([str(package.parent)]) == 1
    (package / "sub" / "c.py").write_text("C = 3\n")
    (package / "d.py").write_text("from trace_core.a import A\n")
    assert lint_import_graph.main([str(package.parent)]) == 0


def test_the_import_graph_rule_names_every_module_of_a_larger_cycle(package):
    import lint_import_graph

    (package / "a.py").write_text("from trace_core import b, c\n")
    (package / "b.py").write_text("from trace_core import a\n")
    (package / "c.py").write_text("from trace_core import a\n")
    (found,) = lint_import_graph.findings(package.parent)
    assert "trace_core.a -> trace_core.b -> trace_core.a" in found
    assert "one of 3 modules that import each other: trace_core.a, trace_core.b, trace_core.c" in found
