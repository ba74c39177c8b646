"""docs/architecture.md stays true to the code, and the import rules it states hold."""

from __future__ import annotations

import re
from pathlib import Path

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
