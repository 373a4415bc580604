"""The local backend's lifecycle: real `python -m splitbrain.node` processes on 127.X.Y.Z, and no leftovers.

Every test checks, after teardown, that no process whose command line names its run directory
is left (read from /proc, psutil is not a dependency) and that no part file or temporary file
remains. Waiting is always a poll against a deadline, never a bare sleep.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path

import pytest
import yaml

from splitbrain.harness.backends import NodeStartError, NodeState, get_backend
from splitbrain.harness.backends.admin import AdminClient, AdminError
from splitbrain.harness.backends.local import LocalBackend, node_ip
from splitbrain.harness.scenario import parse_scenario
from splitbrain.harness.testlib import eventually
from tests.leaks import processes_naming

pytestmark = pytest.mark.skipif(not LocalBackend().check()[0], reason="local backend unavailable here")

DEADLINE_S = 30.0


def scenario(nodes=3, **extra):
    data = {
        "name": "life",
        "protocol": "unicast3",
        "nodes": nodes,
        "duration": 2,
        "settle": 1,
        "config": {"xmit_interval": 0.2},
        "workload": [{"from": "A", "to": "B", "rate": 50, "count": 20}],
    }
    data.update(extra)
    return parse_scenario(data)


def process_state(pid: int) -> str:
    return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]


def lifecycle_events(path: Path) -> list[tuple]:
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [
        (e["kind"], e.get("incarnation"), e.get("reason")) for e in events if e["kind"] in ("node_start", "node_stop")
    ]


def test_lifecycle_kill_restart_pause_resume(tmp_path):
    """3 nodes: C killed -9 and restarted (incarnation 2), B paused and resumed; teardown leaves nothing."""
    run_dir = tmp_path / "run"
    temp_before = set(os.listdir(tempfile.gettempdir()))
    cluster = get_backend("local").create_cluster(scenario(), run_dir, seed=7)
    with cluster:
        cluster.start()
        addresses = [h.address for h in cluster.nodes.values()]
        x, y = cluster.subnet
        assert addresses == [f"{node_ip(x, y, i)}:7800" for i in range(3)]
        assert all(cluster.admin(n).health()["incarnation"] == 1 for n in cluster.nodes)
        assert len(processes_naming(str(run_dir))) == 3
        # Each cluster has its own random admin token; the nodes refuse a mutation without it.
        config = yaml.safe_load((run_dir / "nodes" / "A" / "node.yaml").read_text())
        assert config["admin_token"] == cluster.token and len(cluster.token) == 32
        with get_backend("local").create_cluster(scenario(), tmp_path / "other", seed=7) as other:
            assert other.token != cluster.token
        stranger = AdminClient(cluster.node("A").admin_url, None, node="A")
        with pytest.raises(AdminError) as refused:
            stranger.request("POST", "/view", {"members": ["A"], "view_id": 9})
        stranger.close()
        assert refused.value.status == 401

        old_c = cluster.pids()["C"]
        cluster.kill("C")
        assert cluster.node("C").state is NodeState.DEAD
        assert old_c not in processes_naming(str(run_dir))
        cluster.restart("C")
        assert cluster.admin("C").health()["incarnation"] == 2
        assert cluster.pids()["C"] != old_c

        b = cluster.pids()["B"]
        cluster.pause("B")
        eventually(lambda: process_state(b) == "T", timeout=DEADLINE_S, interval=0.05, what="B to be stopped (SIGSTOP)")
        cluster.resume("B")
        eventually(lambda: process_state(b) != "T", timeout=DEADLINE_S, interval=0.05, what="B to run again (SIGCONT)")
        assert cluster.admin("B").health()["status"] == "ok"
        assert len(processes_naming(str(run_dir))) == 3

    assert processes_naming(str(run_dir)) == []
    assert all(n.state is NodeState.DEAD for n in cluster.nodes.values())
    assert cluster.exit_codes["A"] == [0] and cluster.exit_codes["C"][-1] == 0
    # The killed incarnation's node_stop was written by the harness; the others by the nodes.
    assert lifecycle_events(run_dir / "nodes" / "C" / "events.jsonl") == [
        ("node_start", 1, None),
        ("node_stop", 1, "kill"),
        ("node_start", 2, None),
        ("node_stop", 2, "stop"),
    ]
    assert lifecycle_events(run_dir / "nodes" / "B" / "events.jsonl") == [
        ("node_start", 1, None),
        ("node_stop", 1, "stop"),
    ]
    for name in "ABC":
        files = sorted(p.name for p in (run_dir / "nodes" / name).iterdir())
        assert files == ["events.jsonl", "node.log", "node.yaml"], files
    new_temp = {f for f in set(os.listdir(tempfile.gettempdir())) - temp_before if "splitbrain" in f}
    assert not new_temp


def test_teardown_after_an_error_leaves_no_process(tmp_path):
    """An exception inside `with cluster` (with a node paused) still stops every node."""
    run_dir = tmp_path / "run"
    cluster = get_backend("local").create_cluster(scenario(nodes=2), run_dir, seed=1)
    with pytest.raises(RuntimeError, match="boom"):
        with cluster:
            cluster.start()
            cluster.pause("B")
            raise RuntimeError("boom")
    assert processes_naming(str(run_dir)) == []
    # The paused node was woken up and stopped gracefully: its final windows are in its log.
    assert lifecycle_events(run_dir / "nodes" / "B" / "events.jsonl")[-1] == ("node_stop", 1, "stop")


def test_parallel_clusters_get_different_addresses(tmp_path):
    """Two clusters at once (like two xdist workers) pick different 127.X.Y subnets and both run."""
    one = get_backend("local").create_cluster(scenario(nodes=2), tmp_path / "one", seed=1)
    two = get_backend("local").create_cluster(scenario(nodes=2), tmp_path / "two", seed=1)
    with one, two:
        one.start()
        two.start()
        assert one.subnet != two.subnet
        assert one.admin("A").health()["status"] == two.admin("A").health()["status"] == "ok"
    assert processes_naming(str(tmp_path)) == []


def test_start_failure_names_the_node_and_quotes_its_log(tmp_path):
    """A node that cannot start (bad protocol setting) fails start() with its log tail; nothing stays."""
    run_dir = tmp_path / "run"
    # The scenario loader refuses this setting itself; the node's own validation is what is tested.
    sc = dataclasses.replace(scenario(nodes=2), config={"xmit_interval": -1})
    cluster = get_backend("local").create_cluster(sc, run_dir, seed=1)
    with pytest.raises(NodeStartError) as info, cluster:
        cluster.start()
    text = str(info.value)
    assert "node A (incarnation 1) exited with code 2" in text and "xmit_interval" in text
    assert processes_naming(str(run_dir)) == []


def test_address_in_use_retries_on_another_subnet(tmp_path):
    """Someone takes node A's admin address after the probe: start() moves the cluster to another 127.X.Y."""
    import socket

    run_dir = tmp_path / "run"
    cluster = get_backend("local").create_cluster(scenario(nodes=2), run_dir, seed=1)
    first = cluster.subnet
    squatter = socket.socket()
    squatter.bind((cluster.nodes["A"].address.split(":")[0], 8800))
    squatter.listen()
    try:
        with cluster:
            cluster.start()
            assert cluster.subnet != first
            assert cluster.admin("A").health()["status"] == "ok"
    finally:
        squatter.close()
    assert processes_naming(str(run_dir)) == []
    assert "Address already in use" in (run_dir / "nodes" / "A" / "node.log").read_text()
    # Only the successful attempt's incarnation is in the log.
    assert lifecycle_events(run_dir / "nodes" / "A" / "events.jsonl") == [
        ("node_start", 1, None),
        ("node_stop", 1, "stop"),
    ]
