"""Lint rule: no module imports another module's private names.

A name that starts with one underscore belongs to the module that defines it. ``from .x import _helper`` in another
module is refused; a module itself may be private to its package (``from ._checks import check_int``,
``from . import _docs``), and any name may be bound to a private alias (``import numpy as _np``). Run by
``make lint`` over the library and the dashboard; prints one line per finding and exits 1 when there is any.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOTS = ("trace_core", "app", "pages")


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _target(path: Path, node: ast.ImportFrom) -> Path | None:
    """The folder or module file an import names, for a relative import or one of this project's packages."""
    if node.level:
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
    elif node.module and node.module.split(".")[0] in ROOTS:
        base = Path(".")
    else:
        return None
    for part in (node.module or "").split(".") if node.module else []:
        base = base / part
    return base


def _is_module(target: Path, name: str) -> bool:
    return (target / f"{name}.py").is_file() or (target / name / "__init__.py").is_file()


def findings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = []
    modules: dict[str, str] = {}  # local name -> the project module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ROOTS and alias.asname:
                    modules[alias.asname] = alias.name
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        target = _target(path, node)
        if target is None:
            continue
        for alias in node.names:
            name = alias.name
            if _is_module(target, name):
                modules[alias.asname or name] = f"{node.module or '.'}.{name}"
            if not _is_private(name) or _is_module(target, name):
                continue  # a public name, or a private module of the package
            module = target.with_suffix(".py")
            if module.resolve() == path.resolve():
                continue
            out.append(f"{path}:{node.lineno}: imports the private name {name!r} of "
                       f"{node.module or '.'} (make it public in its module, or use the public entry)")
    for node in ast.walk(tree):  # module.attribute: `from . import score as s` then `s._risk`
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and _is_private(node.attr)):
            out.append(f"{path}:{node.lineno}: uses the private name {node.attr!r} of {modules[node.value.id]} "
                       "(make it public in its module, or use the public entry)")
    return out


def main(argv: list[str]) -> int:
    roots = [Path(a) for a in argv] or [Path(r) for r in ROOTS]
    problems = [line for root in roots for path in sorted(root.rglob("*.py")) for line in findings(path)]
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
