"""The protocol core does no I/O: no clocks, sockets, threads, randomness or OS access inside."""

import ast
import pathlib

import pytest

FORBIDDEN = {"asyncio", "socket", "time", "random", "threading", "os", "select", "selectors", "subprocess"}
# Everything in node/ except the asyncio shell (node/runtime/), the daemon entry point and the
# protocol registry (which reads SPLITBRAIN_PROTOCOLS from the environment; it runs no protocol).
CORE = [
    p
    for p in (pathlib.Path(__file__).parents[2] / "node").rglob("*.py")
    # node/jgroups/ starts JVMs: the JGroups node is a process of its own, not a protocol layer.
    if "runtime" not in p.parts and "jgroups" not in p.parts and p.name not in ("__main__.py", "protocols.py")
]


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.name)
def test_protocol_module_imports_no_io(path):
    """Each sans-I/O module imports none of asyncio, socket, time, random, threading, os."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"


def test_core_modules_were_found():
    """The guard above really looks at the protocol modules."""
    assert {"protocol.py", "header.py", "entries.py", "wire.py", "stack.py", "faultlayer.py"} <= {p.name for p in CORE}
