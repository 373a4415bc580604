"""No import cycles among the project's packages (node, harness, faults, pipeline).

The graph has an edge A -> B when module A imports module B while it is being imported: a
statement at module level, in a class body or under a module-level if/try/with. Imports inside
functions are how lazy imports are done and do not count, nor do `if TYPE_CHECKING:` and
`if __name__ == "__main__":` blocks, which never run on import. `from P import x` is an edge to
P.x when that is a module of the project, else to P.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("node", "harness", "faults", "pipeline")


def project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the project's packages."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(["splitbrain", *parts])] = path
    return modules


def _never_runs_on_import(test: ast.expr) -> bool:
    """`if TYPE_CHECKING:` (or typing.TYPE_CHECKING) and `if __name__ == "__main__":`."""
    if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
        return True
    if isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING":
        return True
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def import_time_imports(body: list[ast.stmt]):
    """The Import and ImportFrom statements that run when the module is imported."""
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            yield stmt
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        elif isinstance(stmt, ast.If):
            if not _never_runs_on_import(stmt.test):
                yield from import_time_imports(stmt.body)
            yield from import_time_imports(stmt.orelse)
        elif isinstance(stmt, ast.ClassDef):
            yield from import_time_imports(stmt.body)
        else:
            # try/except/else/finally, with, for, while: every nested statement list runs (or may).
            for field in ("body", "handlers", "orelse", "finalbody"):
                for child in getattr(stmt, field, None) or []:
                    yield from import_time_imports(child.body if isinstance(child, ast.ExceptHandler) else [child])


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `name` imports at import time."""
    is_package = path.name == "__init__.py"
    found = set()
    for stmt in import_time_imports(ast.parse(path.read_text(encoding="utf-8")).body):
        if isinstance(stmt, ast.Import):
            targets = [alias.name for alias in stmt.names]
        else:
            if stmt.level:
                # A relative import counts from the package holding this module.
                base = name.split(".")
                drop = stmt.level - 1 if is_package else stmt.level
                base = base[: len(base) - drop] if drop else base
                package = ".".join(base + ([stmt.module] if stmt.module else []))
            else:
                package = stmt.module or ""
            targets = [
                f"{package}.{alias.name}" if f"{package}.{alias.name}" in modules else package for alias in stmt.names
            ]
        found.update(t for t in targets if t in modules and t != name)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None when it is acyclic (iterative DFS)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        colour[start] = GREY
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = BLACK
                stack.pop()
            elif colour[child] == GREY:
                path = [n for n, _ in stack]
                return path[path.index(child) :] + [child]
            elif colour[child] == WHITE:
                colour[child] = GREY
                stack.append((child, iter(sorted(graph[child]))))
    return None


def test_no_import_cycles():
    """The module import graph of node, harness, faults and pipeline is acyclic."""
    modules = project_modules()
    graph = {name: imported_modules(name, path, modules) for name, path in modules.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_sees_cycles():
    """A cycle, including one through a relative import and a class body, is reported with its path."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "import x\n"
        "if TYPE_CHECKING:\n    import y\n"
        "try:\n    import z\nexcept ImportError:\n    import w\n"
        "class C:\n    import v\n"
        "def f():\n    import u\n"
        "if __name__ == '__main__':\n    import t\n"
    )
    names = {a.name for s in import_time_imports(tree.body) if isinstance(s, ast.Import) for a in s.names}
    assert names == {"x", "z", "w", "v"}


def test_the_graph_covers_the_packages():
    """The walk finds the modules of every package and the known edges between them."""
    modules = project_modules()
    assert {name.split(".")[1] for name in modules} == set(PACKAGES)
    assert "splitbrain.node.runtime.config" in imported_modules(
        "splitbrain.node.runtime.node", modules["splitbrain.node.runtime.node"], modules
    )
