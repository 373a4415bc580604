"""GMS on local node processes (real UDP, wall-clock timers): three nodes started with
`membership: gms` form one view, read from GET /state's `membership`, and a node stopped with
SIGTERM leaves. Every real-time wait is a bounded `eventually` with a generous bound (two busy
cores shared with other work); what is asserted exactly (who coordinates, why a view changed) is
read from the nodes' own state and events, never from how fast they were. The exact timings are
the simulator's (tests/node/test_gms.py)."""

from __future__ import annotations

import time

import pytest

from splitbrain.harness.backends.local import LocalBackend
from splitbrain.harness.eventlog import read_run
from splitbrain.harness.scenario import parse_scenario
from splitbrain.harness.testlib import eventually

pytestmark = pytest.mark.skipif(not LocalBackend().check()[0], reason="local backend unavailable here")

BOUND_S = 60.0  # any real-time wait here: generous for two busy cores


def _scenario(name: str, config: dict | None = None):
    return parse_scenario(
        {
            "name": name,
            "protocol": "unicast3",
            "membership": "gms",
            "nodes": 3,
            "duration": 5,
            "workload": [],
            "config": config or {},
        }
    )


def _one_view(cluster, names, members) -> dict[str, dict]:
    """Wait until every node of `names` holds one and the same view whose members are `members`
    (in any order: the order is the order the JOINs reached the coordinator)."""

    def same_view():
        states = {n: cluster.admin(n).state()["membership"] for n in names}
        got = {n: (s["view_id"], tuple(s["members"])) for n, s in states.items()}
        assert len(set(got.values())) == 1 and sorted(next(iter(got.values()))[1]) == sorted(members), got
        return states

    return eventually(
        same_view,
        timeout=BOUND_S,
        interval=0.05,
        what=f"one view of {sorted(members)} on {', '.join(names)}",
        context=lambda: "\n".join(f"--- {n}\n{cluster.log_tail(n)}" for n in names),
    )


@pytest.mark.timeout(240)
def test_three_local_nodes_form_one_view(tmp_path):
    """Three local processes with membership gms: one view of [A, B, C], the same id and the same
    coordinator on each, the first member, and only it says it coordinates."""
    sc = _scenario("gms-local")
    cluster = LocalBackend().create_cluster(sc, tmp_path, seed=1)
    try:
        t0 = time.monotonic()
        cluster.start()
        ms = _one_view(cluster, sc.nodes, sc.nodes)
        formed = time.monotonic() - t0
        members = ms["A"]["members"]
        assert {m["coord"] for m in ms.values()} == {members[0]}
        assert {n for n, m in ms.items() if m["is_coord"]} == {members[0]}
        print(f"formation, launch to full view on 3 local nodes: {formed:.2f} s")
    finally:
        cluster.stop_all()
        cluster.teardown()


@pytest.mark.timeout(240)
def test_sigterm_leaves_and_the_others_install_a_view_without_it(tmp_path):
    """A node stopped with SIGTERM sends LEAVE and the others install a view without it for that
    reason. fd_timeout is set far beyond the wait, so only the LEAVE can have excluded it: no
    timing assertion is needed to tell a leave from a failure detection."""
    sc = _scenario("gms-leave", {"fd_timeout": 600.0})
    cluster = LocalBackend().create_cluster(sc, tmp_path, seed=2)
    try:
        cluster.start()
        _one_view(cluster, sc.nodes, sc.nodes)
        t_stop = cluster.now()  # the run clock every event is stamped with
        cluster.stop("B")
        _one_view(cluster, ("A", "C"), ("A", "C"))
    finally:
        cluster.stop_all()
        cluster.teardown()
    events = read_run(tmp_path)
    assert any(e["kind"] == "leave_tx" and e["node"] == "B" for e in events)
    exclusions = [e for e in events if e["kind"] == "view" and e["node"] in ("A", "C") and e["t"] >= t_stop]
    assert exclusions and all("B" not in e["members"] and e.get("reason") == "leave" for e in exclusions), exclusions
    assert {e["node"] for e in exclusions} == {"A", "C"}
    assert not any(e["kind"] == "suspect" and e.get("peer") == "B" for e in events)
