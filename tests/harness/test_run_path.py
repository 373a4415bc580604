"""A run is one straight path: prepare (rundir) -> execute (harness.sim, harness.runner) -> collect
(harness.collect) -> judge (harness.verdict) -> write (rundir), put in order by harness.run; no step
imports a later one or the module that orders them, not even inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "harness"

# Each step and the harness modules it must never import (its later steps and harness.run).
NEVER = {
    "rundir.py": {"run", "collect", "verdict", "runner", "sim", "checks", "afterrun"},
    "verdict.py": {"run", "collect", "rundir", "runner", "sim", "afterrun"},
    "collect.py": {"run", "verdict", "runner", "sim", "checks", "afterrun"},
    "runner.py": {"run", "collect", "verdict", "rundir", "checks", "afterrun"},
    "sim/simulator.py": {"run", "collect", "verdict", "rundir", "runner", "afterrun"},
}


def harness_imports(path: Path) -> set[str]:
    """The first component under splitbrain.harness of every module `path` imports, anywhere but in
    an `if TYPE_CHECKING:` block (annotations only, never run)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:  # relative: .x inside harness/sim is harness.sim.x
                continue
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["splitbrain", "harness"] and len(parts) > 2:
                found.add(parts[2])
    return found


@pytest.mark.parametrize("module", sorted(NEVER))
def test_no_step_calls_back(module):
    """Each step of a run imports none of the steps after it."""
    bad = harness_imports(HARNESS / module) & NEVER[module]
    assert not bad, f"harness/{module} imports {sorted(bad)}"


def test_the_order_is_harness_run():
    """harness.run is where prepare, execute, collect, judge and write meet."""
    uses = harness_imports(HARNESS / "run.py")
    assert {"rundir", "verdict", "collect", "runner", "sim", "afterrun"} <= uses
