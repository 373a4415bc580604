"""Adding a check (docs/extending.md): a check kept outside the tree (tests/toycheck) joins with
one `register` call, and then a scenario may name it, a simulated run is judged by it, the
one-line summary words its count in its unit, and it fails where it must."""

from __future__ import annotations

import pytest

from splitbrain.harness import checks
from splitbrain.harness.scenario import ScenarioError, parse_scenario
from splitbrain.harness.sim import Simulation
from splitbrain.harness.verdict import judge
from splitbrain.node.events import make_event
from tests.toycheck import PayloadBytes

SCENARIO = {
    "name": "toy-check",
    "protocol": "unicast3",
    "nodes": ["A", "B"],
    "workload": [{"from": "A", "to": "B", "rate": 50, "duration": 2}],
    "schedule": [{"at": 0.5, "partition": {"from": "A", "to": "B"}}, {"at": 1.0, "heal": 0}],
    "duration": 4,
    "checks": ["fifo", "no_loss", "payload_bytes"],
}


@pytest.fixture
def registered():
    checks.register(PayloadBytes)
    try:
        yield PayloadBytes
    finally:
        checks.unregister("payload_bytes")


def test_a_scenario_names_a_registered_check_and_a_run_is_judged_by_it(registered):
    """A partition healed: the registered check judges every delivery of the simulated run."""
    assert "payload_bytes" in checks.KNOWN_CHECKS and "payload_bytes" in checks.GENERAL_CHECKS
    scenario = parse_scenario({**SCENARIO, "seed": 3})
    result = Simulation(scenario, 3).run()
    verdict = judge(scenario, result.all_events(), seed=3, backend="sim", stats={})
    by_name = {c.name: c for c in verdict.checks}
    assert by_name["payload_bytes"].passed, by_name["payload_bytes"].explanation
    delivered = sum(1 for ev in result.all_events() if ev["kind"] == "deliver" and "app" in ev)
    assert by_name["payload_bytes"].judged == delivered > 0
    assert f"payload_bytes {delivered} delivered" in checks.judged_summary(verdict.checks)


def test_the_registered_check_fails_an_empty_delivery_single_or_in_a_run(registered):
    """A hand-made log: one empty delivery, then a run line of three messages carrying 2 bytes."""
    log = [
        make_event(0.0, "B", "node", "node_start"),
        make_event(1.0, "B", "unicast3", "deliver", peer="A", seqno=1, app="A:0:0", bytes=0),
    ]
    (result,) = checks.run_checks(log, ["payload_bytes"])
    assert not result.passed and result.details["first"] == ["B A:0:0"]
    run = {**make_event(2.0, "B", "unicast3", "deliver", peer="A", seqno=2, app="A:0:1", bytes=2)}
    run.update(v=2, last_seqno=4, last_app="A:0:3", count=3)
    (result,) = checks.run_checks([log[0], run], ["payload_bytes"])
    assert not result.passed and result.details["empty"] == 1


def test_an_unregistered_check_is_bad_input():
    """Once removed, a scenario naming it is refused."""
    assert "payload_bytes" not in checks.KNOWN_CHECKS
    with pytest.raises(ScenarioError, match="payload_bytes"):
        parse_scenario({**SCENARIO, "seed": 3})
    with pytest.raises(ValueError, match="unknown check"):
        checks.run_checks([], ["payload_bytes"])
