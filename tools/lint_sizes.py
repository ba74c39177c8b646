"""Lint rule: modules and functions small enough to read.

A module of the library holds at most :data:`MODULE_LINES` code lines, and a function (library or dashboard) at most
:data:`FUNCTION_LINES`; code lines are those that are not blank, not comments and not docstrings, so documentation
never pushes code over. Run by ``make lint``; prints one line per finding and exits 1 when there is any.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MODULE_LINES = 400
FUNCTION_LINES = 60
MODULE_ROOTS = ("trace_core",)
FUNCTION_ROOTS = ("trace_core", "app", "pages")

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, *_DEFS)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def findings(path: Path, *, module_limit: bool) -> list[str]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    text = source.splitlines()
    docs = _docstring_lines(tree)

    def code(first: int, last: int) -> int:
        return sum(1 for i in range(first, last + 1)
                   if i not in docs and text[i - 1].strip() and not text[i - 1].strip().startswith("#"))

    out = []
    total = code(1, len(text))
    if module_limit and total > MODULE_LINES:
        out.append(f"{path}: {total} code lines (at most {MODULE_LINES}): split it by concern")
    for node in ast.walk(tree):
        if isinstance(node, _DEFS):
            size = code(node.lineno, node.end_lineno or node.lineno)
            if size > FUNCTION_LINES:
                out.append(f"{path}:{node.lineno}: {node.name} has {size} code lines (at most {FUNCTION_LINES})")
    return out


def main() -> int:
    problems = []
    for root in FUNCTION_ROOTS:
        for path in sorted(Path(root).rglob("*.py")):
            problems += findings(path, module_limit=root in MODULE_ROOTS)
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
