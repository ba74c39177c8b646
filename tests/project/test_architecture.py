"""docs/architecture.md stays true to the code, and the import rules it states hold."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
LAYERS = ("trace_core", "app", "pages")
HEAVY = ("torch", "transformers", "streamlit")


def _documented() -> set[str]:
    """Module paths named in the doc's tables, as paths relative to the repository root."""
    out: set[str] = set()
    section = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^#+ .*?`([\w/]+/)`", line)
        if heading:
            section = heading.group(1)
            continue
        cell = re.match(r"^\| `([\w/.]+\.py)` \|", line)
        if cell and section:
            out.add(section + cell.group(1))
    return out


def _modules() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for layer in LAYERS for p in (ROOT / layer).rglob("*.py")
            if "__pycache__" not in p.parts}


def test_every_module_is_in_the_architecture_doc_and_nothing_else() -> None:
    documented, modules = _documented(), _modules()
    assert modules - documented == set(), "modules missing from docs/architecture.md"
    assert documented - modules == set(), "docs/architecture.md names modules that do not exist"


def test_the_layer_table_is_the_import_contract():
    """The doc's table of layers lists, top to bottom, the packages of the `lint-imports` contract that `make lint`
    checks (pyproject.toml)."""
    tomllib = pytest.importorskip("tomllib")
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c.get("containers") == ["trace_core"]]
    contract = [sorted(name.strip() for name in line.split("|")) for line in layers]
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("| layer | packages |"):text.index("## Data flow")]
    documented = [sorted(re.findall(r"`(\w+)`", row.split("|")[2])) for row in table.splitlines()[2:] if row.startswith("|")]
    merged = [sorted(contract[0] + contract[1]), *contract[2:]]  # the doc puts __main__ and cli on one row
    assert documented == merged


def test_no_import_cycle_and_no_function_importing_the_package():
    sys.path.insert(0, str(ROOT / "tools"))
    import lint_import_graph

    assert lint_import_graph.findings(ROOT) == []
