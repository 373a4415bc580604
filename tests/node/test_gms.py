"""GMS on the simulator, exact and seeded: formation, joins, failure detection, one-way and two-way
partitions and their merges, leave and restart. Views are read from each node's `view`
events (who believed what, and when) and from the layers' membership()."""

from __future__ import annotations

import pytest

from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import parse_scenario
from splitbrain.harness.sim.simulator import Simulation
from splitbrain.node.gms.config import GmsConfig

CFG = GmsConfig()
# Bounds stated by this test suite (defaults: heartbeat 0.5 s, fd_timeout 2 s, merge_interval 1 s).
FORMATION_BOUND_S = 1.0  # sim: start to one full view on every node, 3-10 nodes
EXCLUSION_BOUND_S = CFG.fd_timeout + CFG.heartbeat_interval + 0.1  # kill -> view without it everywhere
MERGE_BOUND_S = 10.0  # heal -> one merged view on every node (the goal)


def gms_scenario(nodes, *, workload=(), schedule=(), duration=20.0, settle=8.0, checks=None, config=None, name="gms"):
    data = {
        "name": name,
        "protocol": "unicast3",
        "membership": "gms",
        "nodes": nodes,
        "duration": duration,
        "settle": settle,
        "workload": list(workload),
        "schedule": list(schedule),
        "config": config or {},
    }
    if checks is not None:
        data["checks"] = checks
    return parse_scenario(data)


def view_history(events: list[dict]) -> list[tuple[float, tuple[str, ...] | None, int]]:
    """(time, members or None when down, view_id) for each view a node installed or lost."""
    out: list[tuple[float, tuple[str, ...] | None, int]] = []
    for ev in events:
        if ev["kind"] == "view":
            out.append((ev["t"], tuple(ev["members"]), ev["view_id"]))
        elif ev["kind"] in ("node_stop", "node_start"):
            out.append((ev["t"], None, 0))
    return out


def view_at(events: list[dict], t: float) -> tuple[str, ...] | None:
    current = None
    for at, members, _vid in view_history(events):
        if at > t:
            break
        current = members
    return current


def agreed_at(result, names, t: float) -> tuple[str, ...] | None:
    """The view every node in `names` holds at t, if they all hold the same one listing all of them."""
    views = {view_at(result.events[n], t) for n in names}
    if len(views) == 1:
        (view,) = views
        if view is not None and set(view) == set(names):
            return view
    return None


def first_agreement(result, names, start: float, end: float) -> float | None:
    """The first moment at or after `start` from which every node in `names` holds one full view
    until `end` (from the view events, so exact)."""
    times = sorted({start} | {ev["t"] for n in names for ev in result.events[n] if start <= ev["t"] <= end})
    found = None
    for t in times:
        if agreed_at(result, names, t):
            found = t if found is None else found
        else:
            found = None
    return found


def assert_ids_grow(result) -> None:
    """View ids only grow at every member, within each incarnation."""
    for name, events in result.events.items():
        last = 0
        for ev in events:
            if ev["kind"] == "node_start":
                last = 0
            elif ev["kind"] == "view":
                assert ev["view_id"] > last, f"{name}: view {ev['view_id']} after {last} at t={ev['t']}"
                last = ev["view_id"]


def sim_run(scenario, seed=1):
    return Simulation(scenario, seed).run()


@pytest.mark.parametrize("n", [3, 5, 10])
def test_nodes_started_together_form_one_view(n):
    """3, 5 and 10 nodes started together: one view on every node, coordinated by the lowest."""
    sc = gms_scenario(n, duration=3, settle=0)
    result = sim_run(sc)
    names = sc.nodes
    t = first_agreement(result, names, 0.0, result.end_time)
    assert t is not None and t <= FORMATION_BOUND_S, t
    view = agreed_at(result, names, result.end_time)
    assert view is not None and view[0] == "A"
    # Concurrent start: exactly one singleton (A's), everybody else joined it.
    singletons = [ev["node"] for n_ in names for ev in result.events[n_] if ev.get("reason") == "singleton"]
    assert singletons == ["A"]
    assert_ids_grow(result)


def test_membership_is_readable_from_the_stacks():
    """membership() gives view id, coordinator, members, suspects and is_coord."""
    sc = gms_scenario(3, duration=2, settle=0)
    sim = Simulation(sc, 1)
    sim.start()
    sim.advance(1.0)
    ms = {n: sim.membership(n) for n in sc.nodes}
    assert {m.members for m in ms.values()} == {("A", "B", "C")}
    assert [m.is_coord for m in ms.values()] == [True, False, False]
    assert ms["B"].to_dict() == {
        "view_id": 3,
        "coord": "A",
        "members": ["A", "B", "C"],
        "suspects": [],
        "is_coord": False,
    }


def test_late_joiner_joins_while_traffic_flows_and_loses_nothing():
    """D starts at 3 s while A, B, C exchange traffic; it joins, and every message sent to it
    after it joined is delivered once, in order."""
    workload = [
        {"from": "A", "to": "B", "rate": 50, "duration": 10},
        {"from": "B", "to": "C", "rate": 50, "duration": 10},
        {"from": "A", "to": "D", "rate": 50, "start": 4, "duration": 6},
        {"from": "D", "to": "B", "rate": 50, "start": 4, "duration": 6},
    ]
    schedule = [{"at": 0, "kill": "D"}, {"at": 3, "restart": "D"}]
    sc = gms_scenario(4, workload=workload, schedule=schedule, duration=10, settle=5)
    outcome = run_scenario(sc, backend="sim", out="/tmp/splitbrain-test-gms")
    result = outcome.result
    joined = next(ev["t"] for ev in result.events["D"] if ev["kind"] == "view" and ev["t"] >= 3)
    assert joined - 3 <= FORMATION_BOUND_S
    assert agreed_at(result, sc.nodes, joined + 0.1) == ("A", "B", "C", "D")
    sent = [
        ev["app"] for ev in result.events["A"] if ev["kind"] == "send" and ev.get("peer") == "D" and ev["t"] >= joined
    ]
    got = [ev["app"] for ev in result.events["D"] if ev["kind"] == "deliver" and ev.get("app", "").startswith("A:")]
    assert sent and got[-len(sent) :] == sent and len(set(got)) == len(got)
    assert outcome.verdict.outcome == "passed", [c.explanation for c in outcome.verdict.checks if not c.passed]


def test_killed_member_is_excluded_and_its_restart_rejoins():
    """C killed at 3 s: A and B install a view without it within fd_timeout + one view round; C
    restarted at 8 s rejoins."""
    sc = gms_scenario(3, schedule=[{"at": 3, "kill": "C"}, {"at": 8, "restart": "C"}], duration=12, settle=0)
    result = sim_run(sc)
    t = first_agreement(result, ("A", "B"), 3.0, 8.0)
    assert t is not None and t - 3.0 <= EXCLUSION_BOUND_S, t
    assert view_at(result.events["A"], 7.9) == ("A", "B")
    back = first_agreement(result, sc.nodes, 8.0, result.end_time)
    assert back is not None and back - 8.0 <= FORMATION_BOUND_S, back
    assert view_at(result.events["C"], result.end_time) == ("A", "B", "C")
    assert_ids_grow(result)


def test_coordinator_crash_hands_coordination_to_the_next_member():
    """A (the coordinator) killed at 3 s: B coordinates [B, C] within fd_timeout + one view round."""
    sc = gms_scenario(3, schedule=[{"at": 3, "kill": "A"}], duration=8, settle=0)
    sim = Simulation(sc, 1)
    result = sim.run()
    t = first_agreement(result, ("B", "C"), 3.0, result.end_time)
    assert t is not None and t - 3.0 <= EXCLUSION_BOUND_S
    assert view_at(result.events["C"], result.end_time) == ("B", "C")
    assert sim.membership("B").is_coord and not sim.membership("C").is_coord


ONE_WAY_WORKLOAD = [
    {"from": "A", "to": "B", "rate": 100, "duration": 14},
    {"from": "B", "to": "A", "rate": 100, "duration": 14},
    {"from": "C", "to": "A", "rate": 50, "duration": 14},
    {"from": "A", "to": "C", "rate": 50, "duration": 14},
]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_way_partition_gives_asymmetric_views_then_merges(seed, tmp_path):
    """A->B cut from 3 s to 9 s, no view step: B's side drops A while A still lists B; after the
    heal one merged view on every node within MERGE_BOUND_S, windows in sync, every message once
    and in order."""
    schedule = [{"at": 3, "partition": {"from": "A", "to": "B"}}, {"at": 9, "heal": 0}]
    sc = gms_scenario(
        3,
        workload=ONE_WAY_WORKLOAD,
        schedule=schedule,
        duration=14,
        settle=8,
        checks=["fifo", "no_duplicates", "no_loss", "windows_synced"],
    )
    outcome = run_scenario(sc, seed=seed, backend="sim", out=tmp_path)
    result = outcome.result
    # Asymmetry: some moment in the partition when B's view lacks A and A's still has B.
    times = sorted(ev["t"] for ev in result.events["B"] if ev["kind"] == "view" and 3 <= ev["t"] <= 9)
    assert any("A" not in view_at(result.events["B"], t) and "B" in view_at(result.events["A"], t) for t in times)
    assert all(ev["kind"] != "view" or ev.get("reason") != "inject" for n in sc.nodes for ev in result.events[n])
    merged = first_agreement(result, sc.nodes, 9.0, result.end_time)
    assert merged is not None and merged - 9.0 <= MERGE_BOUND_S, merged
    assert any(ev["kind"] == "merge" and ev.get("phase") == "install" for ev in result.events["A"])
    assert outcome.verdict.outcome == "passed", [c.explanation for c in outcome.verdict.checks if not c.passed]
    assert_ids_grow(result)


def test_two_way_split_gives_two_views_then_merges(tmp_path):
    """[[A, B], [C, D, E]] from 3 s to 9 s: two views, coordinated by A and C; the heal merges them."""
    schedule = [{"at": 3, "partition": [["A", "B"], ["C", "D", "E"]]}, {"at": 9, "heal": 0}]
    sc = gms_scenario(5, schedule=schedule, duration=12, settle=8)
    result = sim_run(sc)
    assert agreed_at(result, ("A", "B"), 8.9) == ("A", "B")
    assert agreed_at(result, ("C", "D", "E"), 8.9) == ("C", "D", "E")
    merged = first_agreement(result, sc.nodes, 9.0, result.end_time)
    assert merged is not None and merged - 9.0 <= MERGE_BOUND_S
    assert view_at(result.events["E"], result.end_time)[0] == "A"
    assert_ids_grow(result)


def test_graceful_leave():
    """A member stopping gracefully (LEAVE) is excluded one heartbeat interval later, long before
    fd_timeout; a leaving coordinator hands over to the next member; nothing stays unacked."""
    sc = gms_scenario(4, duration=6, settle=0)
    sim = Simulation(sc, 1)
    sim.start()
    sim.advance(1.0)
    sim.leave("C")
    sim.advance(1.0 + CFG.heartbeat_interval + 0.05)
    assert {sim.membership(n).members for n in ("A", "B", "D")} == {("A", "B", "D")}
    sim.leave("A")
    sim.advance(sim.now + CFG.heartbeat_interval + 0.05)
    assert {sim.membership(n).members for n in ("B", "D")} == {("B", "D")}
    assert sim.membership("B").is_coord
    events = [ev["kind"] for ev in sim.nodes["C"].events]
    assert "leave_tx" in events


def test_injected_view_is_installed_and_gms_goes_on():
    """A `view:` step with gms (INJECT_VIEW): installed with a higher id; GMS later merges back."""
    schedule = [{"at": 2, "view": {"at": "C", "members": ["C"]}}]
    sc = gms_scenario(3, schedule=schedule, duration=10, settle=0)
    result = sim_run(sc)
    injected = [ev for ev in result.events["C"] if ev["kind"] == "view" and ev.get("reason") == "inject"]
    assert len(injected) == 1 and injected[0]["members"] == ["C"]
    assert agreed_at(result, sc.nodes, result.end_time) is not None
    assert_ids_grow(result)


def test_static_membership_is_unchanged():
    """Without `membership`, no GMS layer and views only from the simulator's initial view."""
    sc = parse_scenario({"name": "s", "protocol": "unicast3", "nodes": 2, "duration": 1, "workload": []})
    assert sc.membership == "static" and "membership" not in sc.to_dict()
    result = sim_run(sc)
    assert all(ev["proto"] != "gms" for n in sc.nodes for ev in result.events[n])


def test_sim_cluster_state_shows_membership(tmp_path):
    """The sim backend's GET /state (the pytest plugin on sim) has `membership`, as the runtime's."""
    from splitbrain.harness.sim.driver import SimBackend

    cluster = SimBackend().create_cluster(gms_scenario(3, duration=2, settle=0), tmp_path, seed=1)
    cluster.start()
    cluster.advance(1.0)
    state = cluster.admin("C").state()
    assert state["membership"] == {
        "view_id": 3,
        "coord": "A",
        "members": ["A", "B", "C"],
        "suspects": [],
        "is_coord": False,
    }
    static = SimBackend().create_cluster(
        parse_scenario({"name": "s", "protocol": "unicast3", "nodes": 2, "duration": 1, "workload": []}),
        tmp_path,
        seed=1,
    )
    static.start()
    assert static.admin("A").state()["membership"] is None
