"""The live runner's translation of scenarios into admin requests, against a fake cluster.

No process starts here: a FakeCluster keeps node states and a fake clock, and FakeAdmin records
every request, so each test can say exactly which rule went to which node and when it left.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from splitbrain.harness.backends.admin import AdminError
from splitbrain.harness.backends.base import NodeHandle, NodeState
from splitbrain.harness.runner import FaultBook, LiveRun, drop_rule, network_rules
from splitbrain.harness.scenario import load_scenario, parse_scenario
from splitbrain.harness.sim import Simulation
from splitbrain.harness.sim.simulator import _StreamState
from splitbrain.harness.slots import planned_count, slots_before

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


class FakeAdmin:
    def __init__(self, cluster, name):
        self.cluster = cluster
        self.name = name
        self.rules: dict[int, dict] = {}  # installed, in insertion order
        self.next_id = 1
        self.views: list[tuple[list[str], int]] = []
        self.sends: list[dict] = []
        self.syncs: list[str] = []
        self.configs: list[dict] = []

    def _check(self, what):
        state = self.cluster.nodes[self.name].state
        if state is not NodeState.RUNNING:
            raise AssertionError(f"{what} sent to {self.name} while it is {state.value}")
        self.cluster.calls.append((self.cluster.clock, self.name, what))

    def add_fault(self, rule):
        self._check("add_fault")
        rule_id = self.next_id
        self.next_id += 1
        self.rules[rule_id] = rule
        return rule_id

    def remove_fault(self, rule_id):
        self._check("remove_fault")
        if rule_id not in self.rules:
            raise AdminError(self.name, "DELETE", f"/faults/{rule_id}", "HTTP 404", 404)
        del self.rules[rule_id]

    def view(self, members, view_id=None):
        self._check("view")
        self.views.append((list(members), view_id))

    def sync(self, peer):
        self._check("sync")
        self.syncs.append(peer)

    def set_config(self, values):
        self._check("config")
        self.configs.append(dict(values))

    def send(self, to, **kw):
        self._check("send")
        self.sends.append({"to": to, **kw})
        return {"stream": kw.get("stream"), "to": [to]}

    def state(self):
        return {"unicast3": {"send": {}, "recv": {}, "syncing": []}}

    def streams(self):
        return []

    def delivered(self):
        return {"delivered": {}, "total": 0}


class FakeCluster:
    backend_name = "fake"

    def __init__(self, names):
        self.seed = 0
        self.clock = 100.0  # the run clock does not start at 0: the origin must be honoured
        self.nodes = {n: NodeHandle(name=n, address=f"{n}:1", admin_url=f"http://{n}") for n in names}
        self.admins = {n: FakeAdmin(self, n) for n in names}
        self.calls: list = []
        self.lifecycle: list = []

    def now(self):
        return self.clock

    def sleep(self, seconds):
        self.clock += seconds

    def node(self, name):
        return self.nodes[name]

    def admin(self, name):
        return self.admins[name]

    def start(self):
        for h in self.nodes.values():
            h.state, h.incarnation = NodeState.RUNNING, 1
        self.clock += 0.5  # starting takes a while

    def kill(self, name, reason="kill"):
        self.lifecycle.append((self.clock, "kill", name))
        self.nodes[name].state = NodeState.DEAD
        self.admins[name].rules.clear()

    def pause(self, name):
        self.lifecycle.append((self.clock, "pause", name))
        self.nodes[name].state = NodeState.PAUSED

    def resume(self, name):
        self.lifecycle.append((self.clock, "resume", name))
        self.nodes[name].state = NodeState.RUNNING

    def restart(self, name):
        self.lifecycle.append((self.clock, "restart", name))
        h = self.nodes[name]
        h.state = NodeState.RUNNING
        h.incarnation += 1
        self.admins[name].rules.clear()

    def check_alive(self):
        pass

    def stop_all(self):
        for h in self.nodes.values():
            h.state = NodeState.DEAD
        return []

    def teardown(self):
        pass


def _scenario(schedule, nodes=("A", "B", "C"), **extra):
    data = {
        "name": "t",
        "protocol": "unicast3",
        "nodes": list(nodes),
        "duration": 10,
        "settle": 1,
        "workload": [{"from": "A", "to": "B", "rate": 10, "count": 5}],
        "schedule": schedule,
    }
    data.update(extra)
    return parse_scenario(data)


def _run(scenario):
    cluster = FakeCluster(scenario.nodes)
    run = LiveRun(scenario, cluster, sleep=cluster.sleep, poll_s=0.05)
    run.run()
    return run, cluster


def _specs(rules):
    return sorted((r.node, r.spec.get("peer"), r.spec["action"]) for r in rules)


# ---- translation of single steps --------------------------------------------------------------


def test_one_way_partition_is_a_drop_at_each_receiver():
    """partition {from: A, to: [B, C]}: at B and at C, drop everything coming up from A."""
    sc = _scenario([{"at": 1, "partition": {"from": "A", "to": ["B", "C"]}}])
    rules = network_rules(sc.schedule[0])
    assert _specs(rules) == [("B", "A", "drop"), ("C", "A", "drop")]
    assert all(r.spec == {"direction": "up", "peer": "A", "action": "drop"} for r in rules)


def test_two_way_partition_cuts_every_link_between_groups():
    """partition [[A, B], [C]]: C drops from A and B; A and B drop from C; A<->B untouched."""
    sc = _scenario([{"at": 1, "partition": [["A", "B"], ["C"]]}])
    assert _specs(network_rules(sc.schedule[0])) == [
        ("A", "C", "drop"),
        ("B", "C", "drop"),
        ("C", "A", "drop"),
        ("C", "B", "drop"),
    ]


def test_loss_delay_duplicate_reorder_expand_links():
    """loss on "*" is a rule per directed link; delay +-jitter becomes [ms-j, ms+j]; reorder holds up to ms."""
    sc = _scenario(
        [
            {"at": 1, "loss": {"link": "*", "p": 0.25}},
            {"at": 1, "delay": {"link": "A<->B", "ms": 30, "jitter_ms": 10}},
            {"at": 1, "duplicate": {"link": "B->C", "p": 0.5}},
            {"at": 1, "reorder": {"link": "C->A", "p": 0.3, "ms": 20}},
        ]
    )
    loss, delay, dup, reorder = (network_rules(s) for s in sc.schedule)
    assert len(loss) == 6 and all(r.spec["p"] == 0.25 and r.spec["action"] == "drop" for r in loss)
    assert {(r.node, r.spec["peer"]) for r in loss} == {(b, a) for a in "ABC" for b in "ABC" if a != b}
    assert _specs(delay) == [("A", "B", "delay"), ("B", "A", "delay")]
    assert delay[0].spec["delay_s"] == pytest.approx(0.020) and delay[0].spec["jitter_s"] == pytest.approx(0.020)
    assert dup[0].node == "C" and dup[0].spec == {"direction": "up", "peer": "B", "action": "duplicate", "p": 0.5}
    assert reorder[0].spec == {
        "direction": "up",
        "peer": "C",
        "action": "delay",
        "p": 0.3,
        "delay_s": 0.0,
        "jitter_s": 0.02,
    }
    assert all(r.last for r in delay + dup + reorder) and not any(r.last for r in loss)


def test_drop_step_is_the_rule_as_written_with_until_on_the_run_clock():
    """drop with types, seqnos, count, after, until and action delay maps field by field."""
    sc = _scenario(
        [
            {
                "at": 1,
                "drop": {
                    "at": "A",
                    "from": "B",
                    "type": ["ACK"],
                    "seqnos": [3, 9],
                    "count": 2,
                    "after": 1,
                    "p": 0.5,
                    "until": 4.5,
                    "action": "delay",
                    "delay_ms": 250,
                },
            }
        ]
    )
    rule = drop_rule(sc.schedule[0], origin=100.0)
    assert rule.node == "A" and not rule.network
    assert rule.spec == {
        "direction": "up",
        "action": "delay",
        "peer": "B",
        "types": ["ACK"],
        "p": 0.5,
        "count": 2,
        "after": 1,
        "seqnos": [3, 9],
        "until": 104.5,
        "delay_s": 0.25,
        "jitter_s": 0.0,
    }


# ---- the fault book ---------------------------------------------------------------------------


def test_heal_removes_exactly_the_rules_of_its_step():
    """heal: 0 deletes the partition's rules and leaves the loss rule of step 1 in place."""
    sc = _scenario(
        [
            {"at": 1, "partition": {"from": "A", "to": "B"}},
            {"at": 2, "loss": {"link": "C->B", "p": 0.1}},
            {"at": 3, "heal": 0},
        ]
    )
    run, cluster = _run(sc)
    b = cluster.admins["B"]
    assert list(b.rules.values()) == [{"direction": "up", "peer": "C", "action": "drop", "p": 0.1}]
    offs = [e for e in run.timeline if e["kind"] == "fault_off"]
    assert [e["fault"] for e in offs] == ["partition"]


def test_heal_all_removes_everything_and_timeline_uses_the_run_clock():
    """heal: all leaves no rule anywhere; every timeline t is on the run clock (origin + at)."""
    sc = _scenario(
        [
            {"at": 1, "partition": [["A"], ["B", "C"]]},
            {"at": 2, "drop": {"at": "C", "type": "DATA", "count": 1}},
            {"at": 3, "heal": "all"},
        ]
    )
    run, cluster = _run(sc)
    assert all(not a.rules for a in cluster.admins.values())
    ons = [e for e in run.timeline if e["kind"] == "fault_on"]
    assert [round(e["t"] - run.origin, 2) for e in ons] == [1.0, 2.0]
    assert all(e["node"] == "harness" and e["proto"] == "harness" for e in run.timeline)
    assert run.origin == pytest.approx(100.5)


def test_holding_rules_stay_after_later_drop_rules():
    """A partition added after a delay at the same node is evaluated first (the delay is re-added)."""
    sc = _scenario(
        [
            {"at": 1, "delay": {"link": "A->B", "ms": 50}},
            {"at": 2, "partition": {"from": "C", "to": "B"}},
        ]
    )
    run, cluster = _run(sc)
    actions = [r["action"] for r in cluster.admins["B"].rules.values()]
    assert actions == ["drop", "delay"]


def test_paused_node_gets_its_requests_after_resume_in_order():
    """A view, a drop and a heal aimed at a paused node wait for its resume, then go in order."""
    sc = _scenario(
        [
            {"at": 1, "partition": {"from": "A", "to": "B"}},
            {"at": 2, "pause": "B"},
            {"at": 3, "view": {"at": "B", "members": ["B", "C"]}},
            {"at": 3.5, "drop": {"at": "B", "from": "C", "type": "ACK"}},
            {"at": 4, "heal": 0},
            {"at": 5, "resume": "B"},
        ]
    )
    run, cluster = _run(sc)
    b_calls = [(round(t - run.origin, 2), what) for t, node, what in cluster.calls if node == "B"]
    # initial view, the partition rule, then all of the deferred work at 5.0, in schedule order
    assert b_calls == [(-0.0, "view"), (1.0, "add_fault"), (5.0, "view"), (5.0, "add_fault"), (5.0, "remove_fault")]
    assert list(cluster.admins["B"].rules.values()) == [
        {"direction": "up", "action": "drop", "peer": "C", "types": ["ACK"]}
    ]
    assert cluster.admins["B"].views[-1] == (["B", "C"], 2)


def test_restart_reinstalls_network_faults_but_not_drop_rules():
    """After restart: B again drops from A (the partition is the network's), the drop step is gone."""
    sc = _scenario(
        [
            {"at": 1, "partition": {"from": "A", "to": "B"}},
            {"at": 1, "drop": {"at": "B", "from": "C", "type": "ACK"}},
            {"at": 2, "restart": "B"},
        ]
    )
    run, cluster = _run(sc)
    assert list(cluster.admins["B"].rules.values()) == [{"direction": "up", "peer": "A", "action": "drop"}]
    # The restarted node gets the initial view again, with the next view id (as in the simulator).
    assert cluster.admins["B"].views == [(["A", "B", "C"], 1), (["A", "B", "C"], 2)]


def test_kill_drops_pending_requests_and_restart_resumes_the_stream():
    """A stream whose sender is dead at its start is picked up, with what is left, on restart."""
    sc = _scenario(
        [{"at": 1, "kill": "A"}, {"at": 3, "restart": "A"}],
        workload=[{"from": "A", "to": "B", "rate": 10, "duration": 6, "start": 2}],
    )
    run, cluster = _run(sc)
    (send,) = cluster.admins["A"].sends
    # 60 slots from t=2; 10 were due before the restart at t=3, so app ids go on at n = 11.
    assert send == {"to": "B", "rate": 10.0, "count": 50, "size": 100, "stream": 0, "first_n": 11}


def test_sync_step_calls_the_admin_operation_and_waits_for_a_paused_node():
    """A sync step is B's POST /sync/A; at a paused node it waits for the resume, like a view."""
    sc = _scenario(
        [
            {"at": 1, "sync": {"at": "B", "peer": "A"}},
            {"at": 2, "pause": "C"},
            {"at": 3, "sync": {"at": "C", "peer": "A"}},
            {"at": 4, "resume": "C"},
        ]
    )
    run, cluster = _run(sc)
    assert cluster.admins["B"].syncs == ["A"] and cluster.admins["C"].syncs == ["A"]
    assert [e["detail"] for e in run.timeline if e["fault"] == "sync"] == ["#0 sync at B with A", "#2 sync at C with A"]


# ---- parity with the simulator ----------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_timeline_matches_the_simulator(path):
    """Every shipped scenario: the live runner logs the same fault_on/fault_off sequence as the sim."""
    sc = load_scenario(path)
    run, _cluster = _run(sc)
    sim = Simulation(sc, sc.seed).run()
    live = [(e["kind"], e["fault"], e["detail"], e.get("links")) for e in run.timeline]
    assert live == [(e["kind"], e["fault"], e["detail"], e.get("links")) for e in sim.timeline]
    for ev, step_t in zip(run.timeline, [e["t"] for e in sim.timeline]):
        assert ev["t"] - run.origin == pytest.approx(step_t, abs=0.06)


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_stream_counts_match_the_simulator(path):
    """Each stream asks its node for exactly the simulator's number of slots (so app ids agree)."""
    sc = load_scenario(path)
    for stream in sc.streams:
        assert planned_count(stream, sc.duration) == _StreamState(stream, None, sc.duration).limit


def test_slots_before():
    """Slots due strictly before t, counted from the stream's start."""
    sc = _scenario([], workload=[{"from": "A", "to": "B", "rate": 10, "duration": 5, "start": 1}])
    s = sc.streams[0]
    assert [slots_before(s, t) for t in (0.5, 1.0, 1.05, 1.1, 2.0)] == [0, 0, 1, 1, 10]


def test_fault_book_ignores_rules_already_gone():
    """Removing a rule the node no longer has (404) is what was wanted, not an error."""
    cluster = FakeCluster(("A", "B"))
    cluster.start()
    book = FaultBook(cluster)
    sc = _scenario([{"at": 1, "partition": {"from": "A", "to": "B"}}], nodes=("A", "B"))
    book.add(0, network_rules(sc.schedule[0]))
    cluster.admins["B"].rules.clear()
    assert book.remove(0) and not book.remove(0)


# ---- the drop step's action (scenario format) -------------------------------------------------


def test_drop_step_action_delay_parses_round_trips_and_validates():
    """drop with action: delay + delay_ms parses, describes itself, round-trips; bad combinations name the field."""
    sc = _scenario(
        [
            {
                "at": 1,
                "drop": {
                    "at": "A",
                    "from": "B",
                    "type": "ACK",
                    "action": "delay",
                    "delay_ms": 4000,
                    "jitter_ms": 5,
                    "until": 2,
                },
            }
        ]
    )
    drop = sc.schedule[0].params
    assert (drop.action, drop.delay_ms, drop.jitter_ms) == ("delay", 4000.0, 5.0)
    assert "action=delay 4000ms+5ms" in sc.schedule[0].describe()
    assert parse_scenario(sc.to_dict()) == sc
    for body, message in [
        ({"action": "delay"}, r"schedule\[0\]\.drop\.delay_ms: a delay needs delay_ms"),
        ({"delay_ms": 10}, r"schedule\[0\]\.drop\.delay_ms: only with action: delay"),
        ({"action": "hold"}, r"schedule\[0\]\.drop\.action: must be one of drop, delay, duplicate"),
        ({"action": "delay", "delay_ms": -1}, r"schedule\[0\]\.drop\.delay_ms: must not be negative"),
    ]:
        with pytest.raises(ValueError, match=message):
            _scenario([{"at": 1, "drop": {"at": "A", **body}}])
