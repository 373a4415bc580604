"""The docker backend's lifecycle: containers, names, labels, addresses, files, and no leftovers.

Every test needs a Docker engine (marker `docker`; skipped with the reason when there is none) and
the node image, which the `docker_backend` fixture builds with ci/images when it is missing or
stale (once per session). After each test, nothing labelled with the test's cluster ids may be
left: no container, no network. Waiting is a poll against a deadline, never a bare sleep.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

docker = pytest.importorskip("docker")

from splitbrain.harness.backends import BackendError, ClusterOptions, NodeStartError, NodeState  # noqa: E402
from splitbrain.harness.backends.admin import AdminClient, AdminError  # noqa: E402
from splitbrain.harness.backends.docker import (  # noqa: E402
    LABEL_CLUSTER,
    LABEL_OWNER,
    DockerBackend,
    DockerCluster,
    clean_leftovers,
    leftovers,
    owner_label,
    remove_cluster,
)
from splitbrain.harness.scenario import load_scenario  # noqa: E402
from splitbrain.harness.testlib import cluster_scenario, eventually  # noqa: E402
from splitbrain.node.events import expand_runs  # noqa: E402

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0
PRIVATE = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]


@pytest.fixture(scope="session")
def docker_backend():
    """A DockerBackend with the current node image (built by ci/images when missing)."""
    backend = DockerBackend()
    ok, why = backend.check()
    if not ok:
        pytest.skip(f"docker backend unavailable: {why}")
    backend.ensure_image()
    return backend


def nothing_left(client, cluster_id: str) -> None:
    label = f"{LABEL_CLUSTER}={cluster_id}"
    containers = client.containers.list(all=True, filters={"label": label})
    networks = client.networks.list(filters={"label": label})
    assert not containers and not networks, (
        f"left behind by {cluster_id}: containers {[c.name for c in containers]}, networks {[n.name for n in networks]}"
    )


def dead_owners_cluster() -> tuple[str, dict[str, str]]:
    """A new cluster id and the labels of a node of it whose harness process is gone."""
    cluster_id = "sb" + os.urandom(4).hex()
    return cluster_id, {
        "splitbrain": "1",
        LABEL_CLUSTER: cluster_id,
        LABEL_OWNER: f"{socket.gethostname()}:999999999:1",
        "splitbrain.role": "node",
    }


def read_events(path: Path) -> list[dict]:
    # Run lines (node/events.py) expanded: the tests count one event per message.
    return expand_runs([json.loads(line) for line in path.read_text().splitlines() if line.strip()])


def test_cluster_lifecycle_names_labels_addresses_and_files(docker_backend, tmp_path):
    """Two clusters side by side: own networks in 198.18.0.0/15, unique names, labels; pause,
    stop, restart (same address, incarnation + 1, new container), kill; teardown leaves nothing."""
    client = docker_backend.client
    sc = cluster_scenario(3, config={"xmit_interval": 0.2}, name="life")
    other_sc = cluster_scenario(2, name="other")
    cluster = docker_backend.create_cluster(sc, tmp_path / "a", seed=1)
    other = docker_backend.create_cluster(other_sc, tmp_path / "b", seed=2)
    assert isinstance(cluster, DockerCluster) and cluster.cluster_id != other.cluster_id
    try:
        cluster.start()
        other.start()
        # Addresses: a /24 of 198.18.0.0/15 each, never overlapping, never a private range.
        assert cluster.subnet.subnet_of(ipaddress.ip_network("198.18.0.0/15"))
        assert other.subnet.subnet_of(ipaddress.ip_network("198.18.0.0/15"))
        assert not cluster.subnet.overlaps(other.subnet)
        for net in (cluster.subnet, other.subnet):
            assert not any(net.overlaps(p) for p in PRIVATE)
        containers = client.containers.list(filters={"label": f"{LABEL_CLUSTER}={cluster.cluster_id}"})
        assert sorted(c.name for c in containers) == sorted(f"{cluster.cluster_id}-{n}-1" for n in "ABC")
        for c in containers:
            assert c.labels["splitbrain"] == "1" and c.labels["splitbrain.role"] == "node"
            assert c.labels[LABEL_OWNER] == owner_label()
            assert "NET_ADMIN" in (c.attrs["HostConfig"].get("CapAdd") or [])
        network = client.networks.get(cluster.network_name)
        assert network.attrs["Labels"][LABEL_CLUSTER] == cluster.cluster_id
        for name, handle in cluster.nodes.items():
            assert handle.address.startswith(str(cluster.subnet.network_address)[:-1])
            assert cluster.admin(name).health()["node"] == name
        # The admin APIs listen on 0.0.0.0: the nodes started only because the harness gave them
        # the cluster's token, and a client without it may read but not mutate.
        assert other.token != cluster.token
        stranger = AdminClient(cluster.node("A").admin_url, None, node="A")
        assert stranger.health()["node"] == "A"
        with pytest.raises(AdminError) as refused:
            stranger.request("POST", "/view", {"members": ["A"], "view_id": 9})
        stranger.close()
        assert refused.value.status == 401

        # Traffic, then pause and resume B: it catches up.
        cluster.admin("A").view(["A", "B", "C"], 1)
        cluster.admin("B").view(["A", "B", "C"], 1)
        cluster.admin("A").send("B", rate=200, count=200, stream=0)
        cluster.pause("B")
        assert client.containers.get(f"{cluster.cluster_id}-B-1").status == "paused"
        cluster.resume("B")
        eventually(
            lambda: cluster.admin("B").delivered()["total"] >= 200, timeout=DEADLINE_S, what="B to deliver 200 messages"
        )

        # Graceful stop writes final windows and node_stop itself; restart gets a new container.
        cluster.stop("B")
        assert cluster.node("B").state is NodeState.DEAD and cluster.exit_codes["B"] == [0]
        cluster.restart("B")
        handle = cluster.node("B")
        assert handle.incarnation == 2 and handle.state is NodeState.RUNNING
        assert handle.address == f"{cluster.node_ip('B')}:7800"
        assert cluster.admin("B").health()["incarnation"] == 2
        label = f"{LABEL_CLUSTER}={cluster.cluster_id}"
        names = [c.name for c in client.containers.list(all=True, filters={"label": label})]
        assert f"{cluster.cluster_id}-B-2" in names and f"{cluster.cluster_id}-B-1" not in names

        cluster.kill("C")
        assert cluster.exit_codes["C"] == [137]
    finally:
        cluster.teardown()
        other.teardown()
    nothing_left(client, cluster.cluster_id)
    nothing_left(client, other.cluster_id)

    events_b = read_events(tmp_path / "a" / "nodes" / "B" / "events.jsonl")
    stops = [e for e in events_b if e["kind"] == "node_stop"]
    assert [(e.get("incarnation"), e.get("reason")) for e in stops][:1] == [(1, "stop")]
    assert len([e for e in events_b if e["kind"] == "node_start"]) == 2
    assert sum(1 for e in events_b if e["kind"] == "deliver") >= 200
    events_c = read_events(tmp_path / "a" / "nodes" / "C" / "events.jsonl")
    assert events_c[-1]["kind"] == "node_stop" and events_c[-1]["reason"] == "kill"
    log_b = (tmp_path / "a" / "nodes" / "B" / "node.log").read_text()
    assert log_b.count("--- splitbrain: B incarnation") == 2 and "node B (incarnation 2) up" in log_b
    assert not list((tmp_path / "a").glob("nodes/*/events-inc*.jsonl")), "part files must be merged"
    assert oct((tmp_path / "a" / "nodes" / "A").stat().st_mode & 0o777) == oct(0o755)


def test_remote_style_options_archive_published_exec(docker_backend, tmp_path):
    """No host-path assumption: config in and events out by put/get_archive, admin API through
    published ports, iptables through `docker exec -u root`; the smoke scenario passes."""
    from splitbrain.harness.run import run_scenario

    outcome = run_scenario(
        load_scenario(ROOT / "scenarios" / "smoke.yaml"),
        backend="docker",
        out=tmp_path,
        backend_options={
            "client": docker_backend.client,
            "events": "archive",
            "admin": "published",
            "iptables_runner": "exec",
        },
    )
    assert outcome.verdict.passed, outcome.verdict.to_dict()
    timeline = read_events(outcome.run_dir / "timeline.jsonl")
    assert "[iptables: 1 DROP rule(s) at B]" in timeline[0]["detail"]
    for name in ("A", "B"):
        events = read_events(outcome.run_dir / "nodes" / name / "events.jsonl")
        assert events[0]["kind"] == "node_start" and events[-1]["kind"] == "node_stop"
    assert "admin http://0.0.0.0:7900" in (outcome.run_dir / "nodes" / "A" / "node.log").read_text()
    assert not leftovers_of_run(docker_backend.client, outcome.run_dir)


def leftovers_of_run(client, run_dir: Path) -> list[str]:
    found = []
    for cid, info in leftovers(client).items():
        if info["run_dir"] == str(run_dir):
            found.append(cid)
    return found


def test_node_that_cannot_start_fails_clearly_and_leaves_nothing(docker_backend, tmp_path):
    """A node whose configuration it refuses: NodeStartError names it and quotes its output."""
    # The scenario loader refuses this setting itself; the node's own validation is what is tested.
    sc = dataclasses.replace(cluster_scenario(2, name="broken"), config={"xmit_interval": "soon"})
    cluster = docker_backend.create_cluster(sc, tmp_path, seed=1, options=ClusterOptions(start_timeout_s=60))
    with pytest.raises(NodeStartError) as info, cluster:
        cluster.start()
    message = str(info.value)
    assert "node A" in message and "exited with code 2" in message and "xmit_interval" in message
    nothing_left(docker_backend.client, cluster.cluster_id)
    assert "xmit_interval" in (tmp_path / "nodes" / "A" / "node.log").read_text()


def test_iptables_rules_are_exact_and_follow_a_restart(docker_backend, tmp_path):
    """Rules tagged per step at the receiver; a heal removes exactly its own; a restarted node
    (new container, new namespace) gets back the rules in force at it; close removes the rest."""
    from splitbrain.harness.backends.injectors import IptablesInjector
    from splitbrain.harness.scenario import parse_scenario

    sc = parse_scenario(
        {
            "name": "rules",
            "protocol": "unicast3",
            "nodes": 3,
            "duration": 1,
            "workload": [],
            "schedule": [
                {"at": 0, "partition": {"from": "A", "to": "B"}},
                {"at": 0, "loss": {"link": "C->B", "p": 0.3}},
                {"at": 0, "partition": [["A"], ["C"]]},
            ],
        }
    )
    cluster = docker_backend.create_cluster(sc, tmp_path, seed=1)
    with cluster:
        cluster.start()
        (injector,) = cluster.fault_injectors()
        assert isinstance(injector, IptablesInjector)
        for step in sc.schedule:
            injector.apply(step)
        tag = f"splitbrain:{cluster.cluster_id}:"
        assert sorted(injector.rules_at("B")) == [tag + "s0", tag + "s1"]
        assert injector.rules_at("A") == [tag + "s2"] and injector.rules_at("C") == [tag + "s2"]
        injector.remove(0)
        assert injector.rules_at("B") == [tag + "s1"]
        cluster.restart("B")
        assert injector.rules_at("B") == []  # a fresh namespace
        injector.node_restarted("B")
        assert injector.rules_at("B") == [tag + "s1"]
        assert sorted(injector.close()) == [1, 2]
        assert injector.rules_at("A") == injector.rules_at("B") == injector.rules_at("C") == []
    nothing_left(docker_backend.client, cluster.cluster_id)


def test_ctrl_c_during_a_docker_run_removes_every_container(docker_backend, tmp_path):
    """SIGINT to `splitbrain run --backend docker` once its nodes are up: exit 130, the run
    directory holds what exists, and no container or network of that process is left."""
    client = docker_backend.client
    cmd = [
        sys.executable,
        "-m",
        "splitbrain.harness.cli",
        "run",
        str(ROOT / "scenarios" / "steady.yaml"),
        "--backend",
        "docker",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, stdin=subprocess.DEVNULL
    )
    mine = f"{LABEL_OWNER}"

    def up() -> bool:
        if proc.poll() is not None:
            out, err = proc.communicate()
            # Not AssertionError: eventually() would retry that; this has to fail at once.
            raise RuntimeError(f"splitbrain exited ({proc.returncode}) early:\n{out}\n{err}")
        found = [
            c
            for c in client.containers.list(filters={"label": "splitbrain.role=node"}, ignore_removed=True)
            if c.labels.get(mine, "").split(":")[1:2] == [str(proc.pid)]
        ]
        return len(found) == 3

    try:
        eventually(up, timeout=DEADLINE_S, interval=0.2, what="the three node containers of the run")
        time.sleep(1.0)  # let the workload start
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, f"{out}\n{err}"
    assert "interrupted" in err
    left = [cid for cid, info in leftovers(client).items() if info["owner"].split(":")[1:2] == [str(proc.pid)]]
    assert not left, left
    (run_dir,) = list(tmp_path.glob("steady-*"))
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["outcome"] == "error" and "interrupted" in verdict["error"]
    assert all((run_dir / "nodes" / n / "events.jsonl").stat().st_size > 0 for n in "ABC")


def test_keep_and_clean(docker_backend, tmp_path):
    """keep=True leaves the stopped containers and the network; `splitbrain clean` spares a
    cluster whose owner runs, removes it with --cluster, and removes a dead owner's leftovers."""
    client = docker_backend.client
    sc = cluster_scenario(2, name="kept")
    cluster = docker_backend.create_cluster(sc, tmp_path, seed=1, options=ClusterOptions(keep=True))
    with cluster:
        cluster.start()
        cluster.stop_all()
    kept = client.containers.list(all=True, filters={"label": f"{LABEL_CLUSTER}={cluster.cluster_id}"})
    assert len(kept) == 2 and client.networks.list(filters={"label": f"{LABEL_CLUSTER}={cluster.cluster_id}"})

    # A leftover of a harness that died: a network and a (never started) container, owner pid gone.
    dead_id, labels = dead_owners_cluster()
    net = client.networks.create(dead_id, driver="bridge", labels=labels)
    client.containers.create(docker_backend.ensure_image(), name=f"{dead_id}-A-1", labels=labels, network=net.name)
    try:
        lines: list[str] = []
        removed, problems = clean_leftovers(client, out=lines.append)
        assert not problems and removed >= 1
        assert any(line.startswith(f"removed {dead_id}") for line in lines), lines
        assert any(line.startswith(f"kept {cluster.cluster_id}: its owner still runs") for line in lines), lines
        nothing_left(client, dead_id)
        # The CLI, for one cluster.
        cli = subprocess.run(
            [sys.executable, "-m", "splitbrain.harness.cli", "clean", "--cluster", cluster.cluster_id],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert cli.returncode == 0 and "removed 1 cluster(s)" in cli.stdout, cli.stdout + cli.stderr
    finally:
        for cid in (dead_id, cluster.cluster_id):
            remove_cluster(client, cid)
    nothing_left(client, cluster.cluster_id)


def test_a_container_removed_while_cleaning_is_skipped(docker_backend, monkeypatch):
    """`splitbrain clean` lists leftovers while other harnesses tear their clusters down: a
    container that disappears between the listing and its inspection is skipped, not an error."""
    client = docker_backend.client
    gone_id, labels = dead_owners_cluster()
    container = client.containers.create(docker_backend.ensure_image(), name=f"{gone_id}-A-1", labels=labels)
    inspect = client.api.inspect_container

    def removed_first(resource_id, *args, **kwargs):
        if resource_id == container.id:
            client.api.remove_container(resource_id, force=True)  # another harness got there first
        return inspect(resource_id, *args, **kwargs)

    monkeypatch.setattr(client.api, "inspect_container", removed_first)
    try:
        assert gone_id not in leftovers(client)
        removed, problems = clean_leftovers(client, out=lambda line: None)
        assert not problems, problems
    finally:
        monkeypatch.undo()
        remove_cluster(client, gone_id)
    nothing_left(client, gone_id)


@pytest.mark.skipif(os.geteuid() != 0, reason="nsenter into a container's namespace needs root on the host")
def test_iptables_runner_nsenter_when_root(docker_backend):
    """As root on the engine's host the iptables injector enters namespaces with nsenter (fast);
    otherwise it uses `docker exec -u root` (NET_ADMIN by capability)."""
    assert docker_backend.iptables_runner == "nsenter"
    assert DockerBackend(client=docker_backend.client, iptables_runner="exec").iptables_runner == "exec"


def test_bad_backend_options_and_toxiproxy_on_udp_are_refused(docker_backend, tmp_path):
    with pytest.raises(ValueError, match="events: must be one of"):
        DockerBackend(events="nfs")
    sc = cluster_scenario(2, name="udp")
    with pytest.raises(BackendError, match="toxiproxy needs transport tcp"):
        docker_backend.create_cluster(sc, tmp_path, seed=1, options=ClusterOptions(injector="toxiproxy"))
