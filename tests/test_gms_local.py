"""GMS on local node processes (real UDP, wall-clock timers): three nodes started with
`membership: gms` form one view, read from GET /state's `membership` (generous bounds: two busy
cores)."""

from __future__ import annotations

import time

import pytest
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from harness.backends.local import LocalBackend
from harness.scenario import parse_scenario

pytestmark = pytest.mark.skipif(not LocalBackend().check()[0], reason="local backend unavailable here")


def _scenario(name: str):
    return parse_scenario(
        {
            "name": name,
            "protocol": "unicast3",
            "membership": "gms",
            "nodes": 3,
            "duration": 5,
            "workload": [],
        }
    )


@pytest.mark.timeout(120)
def test_three_local_nodes_form_one_view(tmp_path):
    """Three local processes with membership gms: one view [A, B, C] coordinated by A on each."""
    sc = _scenario("gms-local")
    cluster = LocalBackend().create_cluster(sc, tmp_path, seed=1)
    try:
        t0 = time.monotonic()
        cluster.start()
        states: dict[str, dict] = {}
        for attempt in Retrying(
            stop=stop_after_delay(30),
            wait=wait_fixed(0.05),
            retry=retry_if_exception_type(AssertionError),
            reraise=True,
        ):
            with attempt:
                states = {name: cluster.admin(name).state() for name in sc.nodes}
                views = {tuple(s["membership"]["members"]) for s in states.values()}
                assert views == {("A", "B", "C")}, {n: s["membership"] for n, s in states.items()}
        formed = time.monotonic() - t0
        ms = {n: s["membership"] for n, s in states.items()}
        assert [ms[n]["is_coord"] for n in sc.nodes] == [True, False, False]
        assert {m["coord"] for m in ms.values()} == {"A"}
        assert len({m["view_id"] for m in ms.values()}) == 1
        print(f"formation, launch to full view on 3 local nodes: {formed:.2f} s")
    finally:
        cluster.stop_all()
        cluster.teardown()


@pytest.mark.timeout(120)
def test_sigterm_leaves_and_the_others_install_a_view_without_it(tmp_path):
    """A node stopped with SIGTERM sends LEAVE: the others drop it well before fd_timeout."""
    sc = _scenario("gms-leave")
    cluster = LocalBackend().create_cluster(sc, tmp_path, seed=2)

    def wait_for(names, members, within):
        for attempt in Retrying(
            stop=stop_after_delay(within),
            wait=wait_fixed(0.05),
            retry=retry_if_exception_type(AssertionError),
            reraise=True,
        ):
            with attempt:
                got = {n: tuple(cluster.admin(n).state()["membership"]["members"]) for n in names}
                assert set(got.values()) == {members}, got

    try:
        cluster.start()
        wait_for(sc.nodes, ("A", "B", "C"), 30)
        t0 = time.monotonic()
        cluster.stop("B")
        wait_for(("A", "C"), ("A", "C"), 30)
        # Generous for two busy cores, but below the 2 s fd_timeout that a kill would need.
        assert time.monotonic() - t0 < 2.0
    finally:
        cluster.stop_all()
        cluster.teardown()
    events = (tmp_path / "nodes" / "B" / "events.jsonl").read_text()
    assert '"leave_tx"' in events
