"""docs/architecture.md stays true to the code, and the import rules it states hold."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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


def _imports(path: Path) -> set[str]:
    """Top-level package names imported anywhere in a file (also inside functions); relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                names.add(".".join([*base, node.module] if node.module else base))
            elif node.module:
                names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted((ROOT / "trace_core").rglob("*.py")), ids=lambda p: p.name)
def test_only_record_touches_torch_and_nothing_in_the_library_imports_streamlit_or_the_app(path: Path) -> None:
    inside_record = "record" in path.relative_to(ROOT / "trace_core").parts[:-1]
    for name in _imports(path):
        top = name.split(".")[0]
        assert top not in ("streamlit", "app", "pages"), f"{path.name} imports {name}"
        if not inside_record:
            assert top not in ("torch", "transformers"), f"{path.name} imports {name}: only record/ may"


@pytest.mark.parametrize("path", sorted((ROOT / "app").rglob("*.py")), ids=lambda p: p.name)
def test_app_never_imports_pages(path: Path) -> None:
    assert not any(name.split(".")[0] == "pages" for name in _imports(path))
