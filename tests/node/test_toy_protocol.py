"""A protocol is its package plus one registry line: tests/toyproto, named in SPLITBRAIN_PROTOCOLS,
runs in scenarios on the simulator and on local processes, is judged by the checkers and analyzed
by the Spark pipeline, and nothing else in the tree was edited for it."""

from __future__ import annotations

from importlib import import_module

import pytest

from splitbrain.harness.backends.local import LocalBackend
from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import ScenarioError, parse_scenario
from splitbrain.node import protocols
from splitbrain.node.events import validate_event

TOY = "tests.toyproto"


@pytest.fixture
def toy(monkeypatch):
    """Register the toy the way a user does (SPLITBRAIN_PROTOCOLS, which node processes inherit);
    this process loaded the registry already, so it registers the named module itself."""
    monkeypatch.setenv(protocols.ENV_PROTOCOLS, TOY)
    spec = protocols.register(import_module(TOY).SPEC)
    yield spec
    protocols.unregister(spec.name)


def toy_scenario(**extra) -> dict:
    return {
        "name": "toy",
        "protocol": "toy",
        "nodes": 2,
        "duration": 2,
        "settle": 2,
        "workload": [
            {"from": "A", "to": "B", "rate": 50, "count": 40},
            {"from": "B", "to": "A", "rate": 50, "count": 40},
        ],
        "checks": ["fifo", "no_duplicates", "no_loss", "windows_synced"],
        **extra,
    }


# The toy never retransmits: what a one-way partition A->B cuts is lost for good.
LOSSY = [{"at": 0.3, "partition": {"from": "A", "to": "B"}}, {"at": 0.6, "heal": 0}]


def test_unregistered_protocol_is_a_clear_error():
    with pytest.raises(ScenarioError) as info:
        parse_scenario(toy_scenario())
    assert info.value.path == "protocol" and "toy" in str(info.value)


def test_toy_is_registered_with_its_kinds_and_types(toy):
    assert "toy" in protocols.names()
    assert "toy_note" in protocols.event_kinds() and "TOYDATA" in protocols.message_types("toy")
    validate_event({"v": 1, "t": 0.0, "node": "A", "proto": "toy", "kind": "toy_note"})


def _verdict(outcome) -> dict[str, bool]:
    return {c.name: c.passed for c in outcome.verdict.checks}


def test_toy_runs_on_the_simulator_and_is_judged(toy, tmp_path):
    clean = run_scenario(parse_scenario(toy_scenario()), backend="sim", out=tmp_path)
    assert clean.verdict.outcome == "passed", [c.explanation for c in clean.verdict.checks]
    judged = {c.name: c.judged for c in clean.verdict.checks}
    assert judged["fifo"] == 80 and judged["no_loss"] == 80  # the checks judged every message
    lossy = run_scenario(parse_scenario(toy_scenario(name="toy-lossy", schedule=LOSSY)), backend="sim", out=tmp_path)
    verdict = _verdict(lossy)
    assert verdict["no_loss"] is False and verdict["fifo"] is True and verdict["no_duplicates"] is True


@pytest.mark.skipif(not LocalBackend().check()[0], reason="local backend unavailable here")
@pytest.mark.timeout(180)
def test_toy_runs_on_local_processes_with_the_same_verdicts(toy, tmp_path):
    for data in (toy_scenario(), toy_scenario(name="toy-lossy", schedule=LOSSY)):
        scenario = parse_scenario(data)
        sim = run_scenario(scenario, backend="sim", out=tmp_path / "sim")
        local = run_scenario(scenario, backend="local", out=tmp_path / "local")
        assert _verdict(local) == _verdict(sim), [c.explanation for c in local.verdict.checks]


def test_toy_runs_are_analyzed_by_the_pipeline(toy, spark, tmp_path):
    from splitbrain.pipeline import analysis as A

    runs = tmp_path / "runs"
    outcomes = {}
    for data in (toy_scenario(), toy_scenario(name="toy-lossy", schedule=LOSSY)):
        outcome = run_scenario(parse_scenario(data), backend="sim", out=runs)
        outcomes[outcome.run_dir.name] = outcome
    analysis = A.analyze(spark, [str(runs)], str(tmp_path / "warehouse"))
    verdicts = {v.run_id: v for v in analysis.verdicts}
    assert set(verdicts) == set(outcomes)
    for run_id, outcome in outcomes.items():
        v = verdicts[run_id]
        assert v.quarantined == 0, run_id  # every toy event fits the schema
        assert v.checks == [c.to_dict() for c in outcome.verdict.checks]
        assert v.meta["protocol"] == "toy"
