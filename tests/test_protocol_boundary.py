"""node/ is the only package that speaks protocol: harness/, faults/ and pipeline/ see layers
through the registry (node/protocols.py) and the protocol-neutral views (node/views.py).

This test reads their code (not comments or docstrings) and fails on anything that names a
protocol: an import from a protocol's package, an identifier or a string naming a registered
protocol, or a string naming a message type only one protocol has (DATA and ACK are everyone's).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from splitbrain.node import protocols

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = ("harness", "faults", "pipeline")
# Message types every protocol may have, and CLOSE, which is also a plain word (a TCP close).
SHARED_TYPES = {"DATA", "ACK", "APP", "CLOSE"}
# Protocol names that are also plain networking words ("one unicast per member", the node key
# mcast_group): flagged only where a string or an identifier is exactly the name.
PLAIN_WORDS = {"unicast", "mcast"}


def _protocol_words() -> tuple[set[str], set[str]]:
    names = set(protocols.names())
    types = set()
    for name in names:
        types |= set(protocols.get(name).message_types)
    return names, types - SHARED_TYPES


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def protocol_mentions(source: str, names: set[str], types: set[str]) -> list[str]:
    """Every place in `source` that names a protocol or one protocol's message type."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    exact = {n for n in names if n in PLAIN_WORDS}
    names = names - exact
    name_re = re.compile(r"(?i)\b(?:%s)\b" % "|".join(map(re.escape, sorted(names)))) if names else None
    type_re = re.compile(r"\b(?:%s)\b" % "|".join(map(re.escape, sorted(types)))) if types else None
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            modules += [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else []
            for module in modules:
                parts = module.split(".")
                if parts[0] == "splitbrain":
                    parts = parts[1:]
                if parts[:1] == ["node"] and len(parts) > 1 and parts[1] in names:
                    found.append(f"line {line}: imports {module}")
        elif isinstance(node, ast.Name) or isinstance(node, ast.Attribute) or isinstance(node, ast.arg):
            ident = (
                node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else node.arg
            )
            if ident.lower() in exact or (name_re and name_re.search(ident.replace("_", " "))):
                found.append(f"line {line}: identifier {ident}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if node.value.lower() in exact or (name_re and name_re.search(node.value)):
                found.append(f"line {line}: string {node.value!r}")
            elif type_re and type_re.search(node.value):
                found.append(f"line {line}: message type in {node.value!r}")
    return found


def test_no_module_outside_node_names_a_protocol():
    names, types = _protocol_words()
    assert "unicast3" in names and "SYNC_OK" in types  # the test judges something
    files = [p for pkg in OUTSIDE for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(files) > 30
    offenders = {}
    for path in files:
        found = protocol_mentions(path.read_text(encoding="utf-8"), names, types)
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert not offenders, "protocol names outside node/ (use node.protocols or node.views):\n" + "\n".join(
        f"{path}: {'; '.join(items)}" for path, items in offenders.items()
    )


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from splitbrain.node.unicast3 import Unicast3\n", "imports splitbrain.node.unicast3"),
        ("import splitbrain.node.unicast3.config\n", "imports splitbrain.node.unicast3.config"),
        ("from splitbrain.node import unicast3\n", "imports splitbrain.node.unicast3"),
        ("x = state['unicast3']\n", "string 'unicast3'"),
        ("def f(u):\n    return u.unicast3_table\n", "identifier unicast3_table"),
        ("types = ['DATA', 'SYNC_OK']\n", "message type in 'SYNC_OK'"),
        ("msg = f'awaiting {peer} SEND_FIRST_SEQNO'\n", "message type in"),
        ("if spec == 'mcast':\n    pass\n", "string 'mcast'"),
        ("mcast = 1\n", "identifier mcast"),
    ],
)
def test_the_boundary_check_catches(source, expected):
    names, types = _protocol_words()
    found = protocol_mentions(source, names, types)
    assert any(expected in item for item in found), found


def test_docstrings_data_and_ack_are_allowed():
    names, types = _protocol_words()
    source = '"""UNICAST3 is described here."""\nkinds = ["DATA", "ACK"]\n'
    assert protocol_mentions(source, names, types) == []


def test_plain_networking_words_are_allowed_in_prose_and_compound_names():
    names, types = _protocol_words()
    source = 'msg = "one unicast per member"\nmcast_group = "239.1.2.3:7600"\n'
    assert protocol_mentions(source, names, types) == []


def protocol_event_kinds() -> set[str]:
    """The event kinds only a protocol logs (its spec's event_kinds), not the core schema's."""
    from splitbrain.node.events import CORE_EVENT_KINDS

    kinds: set[str] = set()
    for name in (*protocols.names(), *protocols.membership_names()):
        kinds |= set(protocols.get(name).event_kinds)
    return kinds - set(CORE_EVENT_KINDS)


def kind_mentions(source: str, kinds: set[str]) -> list[str]:
    """Every string in `source` (docstrings aside) that is exactly a protocol's own event kind."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [
        f"line {node.lineno}: event kind {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        if node.value in kinds
    ]


def test_the_pipeline_names_no_protocols_event_kind():
    """The pipeline learns which kinds mark a resync, a blocked sender or a membership change from
    the specs (resync_marks, block_kinds, membership_marks), never by naming them."""
    kinds = protocol_event_kinds()
    assert {"sync_tx", "first_seqno_tx", "suspect", "window_fill"} <= kinds  # the test judges something
    assert kind_mentions('x = e["kind"] == "sync_tx"\n', kinds) == ["line 1: event kind 'sync_tx'"]
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "pipeline").rglob("*.py"))
        if (found := kind_mentions(path.read_text(encoding="utf-8"), kinds))
    }
    assert not offenders, offenders
