"""The node contract's conformance suite (harness/conformance.py) against both implementations,
and against nodes with a planted violation, which must fail naming what is wrong."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from splitbrain.harness.cli import main
from splitbrain.harness.conformance import Implementation, jgroups_node, python_node, run_suite
from splitbrain.node.contract import EVENTS_SCHEMA, events_schema
from splitbrain.node.jgroups.launch import runtime_problem

PLANTED = Path(__file__).resolve().parent / "contract_planted.py"


def _planted(violation: str) -> Implementation:
    base = python_node()
    return Implementation(
        f"planted {violation}", (sys.executable, str(PLANTED), violation, "--config", "{config}"), base.extra
    )


def test_the_committed_event_schema_is_the_generated_one():
    """node/contract/events.schema.json is what `python -m splitbrain.node.contract` writes from node/events.py."""
    import json

    assert json.loads(EVENTS_SCHEMA.read_text()) == events_schema()


def test_the_python_node_keeps_the_contract():
    report = run_suite(python_node())
    assert report.ok, report.text()
    assert report.measured["kill -9 gap (s)"] <= 0.25


@pytest.mark.slow
def test_the_jgroups_node_keeps_the_contract():
    assert runtime_problem() is None, runtime_problem()
    report = run_suite(jgroups_node())
    assert report.ok, report.text()
    assert report.measured["kill -9 gap (s)"] <= 0.25


def test_a_missing_endpoint_fails_naming_it():
    report = run_suite(_planted("missing-endpoint"))
    failed = {r.name: r.detail for r in report.failures}
    assert "GET /streams" in failed and "expected HTTP 200, got 404" in failed["GET /streams"]
    assert len(failed) <= 3, report.text()  # the rest of the contract still holds


def test_a_malformed_event_fails_naming_the_line_and_field():
    report = run_suite(_planted("malformed-event"))
    failed = {r.name: r.detail for r in report.failures}
    detail = failed["A's event log matches events.schema.json"]
    assert "line 1:" in detail and "'1' is not of type 'integer'" in detail and "incarnation" in detail


def test_cli_conformance_runs_a_user_command(capsys):
    """`splitbrain conformance --node-command ...` is how a Go or Rust implementer runs the suite."""
    code = main(
        [
            "conformance",
            "--node-command",
            f"{sys.executable} {PLANTED} missing-endpoint --config {{config}}",
            "--extra",
            '{"protocol": "unicast3"}',
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL GET /streams" in out
