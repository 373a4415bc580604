"""Scenarios on docker with real network faults, and the same verdicts on sim, local and docker.

- iptables (UDP): the one-way split and heal of the SYNC design, a two-way split, 20 % random loss for
  10 s, a receiver killed and restarted: every check passes, and the event logs show the faults
  were real packet drops (no in-process drop events, nothing crossed a partition while it held);
- Toxiproxy (TCP): latency plus slicer keep order; reset_peer and timeout toxics force
  reconnections (counted by the nodes) and UNICAST3 recovers every message;
- parity: steady and the one-way split give the same verdict, check by check, on all backends;
- after 20 runs of the shortest scenario (10 local, 10 docker) no container, network, iptables
  rule, network namespace or process is left (marked slow).

Runs are shared by module-scoped fixtures (a scenario runs once per backend per module). CI has
two busy cores: bounds are generous, and assertions name the run directory.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import time
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytest.importorskip("docker")

from splitbrain.harness.backends.docker import DockerBackend, leftovers, owner_label
from splitbrain.harness.eventlog import read_events
from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import load_scenario
from splitbrain.node.events import expand_runs
from tests.leaks import processes_naming

# The plugin is registered as a pytest11 entry point once installed; before that, ask for it here.
pytest_plugins = (
    []
    if any(ep.value == "splitbrain.harness.plugin" for ep in entry_points(group="pytest11"))
    else ["splitbrain.harness.plugin"]
)

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"


def scenario_path(name: str) -> Path:
    """scenarios/<name>.yaml, or scenarios/docker/<name>.yaml for those only docker can run."""
    path = SCENARIOS / f"{name}.yaml"
    return path if path.exists() else SCENARIOS / "docker" / f"{name}.yaml"


@pytest.fixture(scope="module")
def docker_backend():
    backend = DockerBackend()
    ok, why = backend.check()
    if not ok:
        pytest.skip(f"docker backend unavailable: {why}")
    backend.ensure_image()
    return backend


@pytest.fixture(scope="module")
def runs(docker_backend, tmp_path_factory):
    """run(name, backend) -> RunOutcome, each (scenario, backend) once per module."""
    out = tmp_path_factory.mktemp("runs")
    done: dict[tuple[str, str], object] = {}

    def run(name: str, backend: str):
        key = (name, backend)
        if key not in done:
            options = {"client": docker_backend.client} if backend == "docker" else None
            done[key] = run_scenario(
                load_scenario(scenario_path(name)), backend=backend, out=out, backend_options=options
            )
        return done[key]

    return run


def explain(outcome) -> str:
    v = outcome.verdict
    lines = [f"{v.summary()} on {v.backend}, run directory {outcome.run_dir}"]
    lines += [f"  {c.name}: {'ok' if c.passed else 'FAILED'}: {c.explanation}" for c in v.checks]
    settle = (v.stats or {}).get("settle") or {}
    if settle and not settle.get("ok"):
        lines.append(f"  live: {settle.get('message')}")
    timeline = outcome.run_dir / "timeline.jsonl"
    if timeline.exists():
        lines += [f"  t={e['t']:.2f} {e['kind']} {e.get('detail')}" for e in read_events(timeline)]
    return "\n".join(lines)


def events_of(outcome, node: str) -> list[dict]:
    # Run lines (node/events.py) expanded: the tests count one event per message.
    return expand_runs(read_events(outcome.run_dir / "nodes" / node / "events.jsonl"))


def fault_window(outcome, fault: str) -> tuple[float, float, str]:
    """(t on, t off, detail) of the first fault of a kind in the timeline."""
    timeline = read_events(outcome.run_dir / "timeline.jsonl")
    on = next(e for e in timeline if e["kind"] == "fault_on" and e.get("fault") == fault)
    off = next(e for e in timeline if e["kind"] == "fault_off" and e.get("fault") == fault)
    return on["t"], off["t"], on["detail"]


def deliveries(outcome, receiver: str, sender: str) -> list[float]:
    return [
        e["t"]
        for e in events_of(outcome, receiver)
        if e["kind"] == "deliver" and e.get("peer") == sender and "app" in e
    ]


def count(outcome, node: str, kind: str) -> int:
    return sum(1 for e in events_of(outcome, node) if e["kind"] == kind)


def nodes_of(outcome) -> tuple[str, ...]:
    return tuple(sorted(p.name for p in (outcome.run_dir / "nodes").iterdir()))


def no_fault_layer_drops(outcome) -> bool:
    return not any(
        e["kind"] == "drop"
        for n in nodes_of(outcome)
        for e in events_of(outcome, n)
        if "fault" in str(e.get("reason", ""))
    )


# ---- iptables over UDP ----------------------------------------------------------------------------


def test_one_way_split_and_heal_passes_with_iptables(runs):
    """The SYNC design's asymmetric split on docker: A->B cut by iptables at B, B drops A from its view
    and closes its window, the heal forces SYNC, and every check passes."""
    outcome = runs("one-way-split-resync", "docker")
    assert outcome.verdict.passed, explain(outcome)
    on, off, detail = fault_window(outcome, "partition")
    assert "[iptables: 1 DROP rule(s) at B]" in detail, explain(outcome)
    # The cut was real: nothing from A reached B while it held (a little slack for frames in flight).
    crossing = [t for t in deliveries(outcome, "B", "A") if on + 0.2 < t < off]
    assert not crossing, f"{len(crossing)} deliveries A->B during the partition\n{explain(outcome)}"
    assert deliveries(outcome, "B", "C"), "C->B kept flowing"
    assert no_fault_layer_drops(outcome), "the node fault layer dropped something: iptables was not used"
    assert any(e["kind"] in ("sync_tx", "sync_rx") and e["t"] > off for e in events_of(outcome, "B")), (
        f"no resync after the heal\n{explain(outcome)}"
    )


def test_two_way_split_and_heal_passes_with_iptables(runs):
    outcome = runs("two-way-split", "docker")
    assert outcome.verdict.passed, explain(outcome)
    on, off, detail = fault_window(outcome, "partition")
    assert "[iptables: 8 DROP rule(s) at A,B,C,D]" in detail, explain(outcome)
    for receiver, sender in (("A", "C"), ("C", "A"), ("B", "D"), ("D", "B")):
        crossing = [t for t in deliveries(outcome, receiver, sender) if on + 0.2 < t < off]
        assert not crossing, f"{sender}->{receiver} crossed the split\n{explain(outcome)}"
    assert no_fault_layer_drops(outcome)


def test_random_loss_of_20_percent_for_10_s_passes(runs):
    outcome = runs("loss-20", "docker")
    assert outcome.verdict.passed, explain(outcome)
    on, off, detail = fault_window(outcome, "loss")
    assert off - on >= 9.5 and "iptables" in detail
    retransmits = count(outcome, "A", "retransmit") + count(outcome, "B", "xmit_req_tx")
    assert retransmits > 20, f"20 % loss but only {retransmits} retransmissions/XMIT-REQs\n{explain(outcome)}"
    assert no_fault_layer_drops(outcome), "loss came from the fault layer, not iptables"


def test_kill_and_restart_of_a_receiver_passes(runs):
    outcome = runs("kill-restart-receiver", "docker")
    assert outcome.verdict.passed, explain(outcome)
    starts = [e.get("incarnation") for e in events_of(outcome, "B") if e["kind"] == "node_start"]
    stops = [e.get("reason") for e in events_of(outcome, "B") if e["kind"] == "node_stop"]
    assert starts == [1, 2] and stops == ["kill", "stop"], (starts, stops)
    assert outcome.verdict.stats["nodes"]["B"]["exit_codes"] == [137, 0]


# ---- Toxiproxy over TCP -----------------------------------------------------------------------------


def test_latency_and_slicer_toxics_keep_order_over_tcp(runs):
    outcome = runs("tcp-toxics-order", "docker")
    assert outcome.verdict.passed, explain(outcome)
    on, off, detail = fault_window(outcome, "toxic")
    assert "[toxiproxy: latency on 4 proxy stream(s)]" in detail
    sent = {e["app"]: e["t"] for e in events_of(outcome, "A") if e["kind"] == "send" and "app" in e}
    lat = [
        e["t"] - sent[e["app"]]
        for e in events_of(outcome, "B")
        if e["kind"] == "deliver" and e.get("app") in sent and on + 0.5 < sent[e["app"]] < off - 0.5
    ]
    assert lat and statistics.median(lat) > 0.03, (
        f"the latency toxic did not act (median {statistics.median(lat):.3f}s)"
    )


def test_nakack2_without_retransmission_through_latency_bandwidth_and_slicer_toxics(runs):
    """NAKACK2 with xmit_interval 0 over TCP through Toxiproxy (latency, bandwidth, slicer): every
    multicast delivered once, in order, at every member, and no XMIT-REQ or retransmission sent."""
    outcome = runs("nakack2-tcp-toxics", "docker")
    assert outcome.verdict.passed, explain(outcome)
    for node in nodes_of(outcome):
        assert count(outcome, node, "deliver") == 1800, explain(outcome)
        assert count(outcome, node, "xmit_req_tx") == count(outcome, node, "retransmit") == 0


def test_nakack2_with_retransmission_under_20_percent_loss_over_udp(runs):
    """NAKACK2 over UDP under 20 % iptables loss on every link: every multicast delivered, repaired by XMIT-REQs."""
    outcome = runs("nakack2-loss", "docker")
    assert outcome.verdict.passed, explain(outcome)
    assert sum(count(outcome, node, "xmit_req_tx") for node in nodes_of(outcome)) > 0


def test_reset_peer_and_timeout_toxics_recover_every_message_over_tcp(runs):
    outcome = runs("tcp-reset-peer", "docker")
    assert outcome.verdict.passed, explain(outcome)
    details = [e["detail"] for e in read_events(outcome.run_dir / "timeline.jsonl") if e["kind"] == "fault_on"]
    assert any("reset_peer" in d and "toxiproxy" in d for d in details)
    assert any("timeout" in d and "toxiproxy" in d for d in details)
    assert count(outcome, "A", "retransmit") > 0, explain(outcome)


@pytest.mark.splitbrain_backend("docker")
def test_reset_peer_forces_reconnection_counted_by_the_nodes(splitbrain_cluster, faults):
    """Through the plugin: a reset_peer toxic on A->B, the nodes count lost and new TCP
    connections, and once healed every message arrives once and in order."""
    cluster = splitbrain_cluster(2, transport="tcp", config={"xmit_interval": 0.2})
    cluster.send("A", "B", rate=100, duration=5)
    cluster.sleep(1.0)
    before = tcp_counters(cluster)
    faults.toxic("A->B", "reset_peer", timeout=200)
    cluster.sleep(2.0)
    faults.heal()
    cluster.wait_settled(timeout=60)
    after = tcp_counters(cluster)
    lost = after["lost"] - before["lost"]
    assert lost >= 2, f"expected repeated resets, the nodes counted {lost} lost connection(s): {before} -> {after}"
    assert after["connects"] > before["connects"], (before, after)
    cluster.assert_checks()


def tcp_counters(cluster) -> dict[str, float]:
    totals = {"connects": 0.0, "lost": 0.0}
    for name in cluster.names:
        for line in cluster.admin(name).metrics().splitlines():
            if line.startswith("#"):
                continue
            if "tcp_connects" in line and "failures" not in line:
                totals["connects"] += float(line.rsplit(" ", 1)[1])
            elif "tcp_connections_lost" in line:
                totals["lost"] += float(line.rsplit(" ", 1)[1])
    return totals


# ---- one scenario file, one verdict ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["steady", "one-way-split-resync"])
def test_same_verdict_on_sim_local_and_docker(runs, name):
    verdicts = {}
    for backend in ("sim", "local", "docker"):
        outcome = runs(name, backend)
        verdicts[backend] = (outcome.verdict.outcome, tuple((c.name, c.passed) for c in outcome.verdict.checks))
    assert verdicts["sim"] == verdicts["local"] == verdicts["docker"], "\n".join(
        f"{b}: {v}" for b, v in verdicts.items()
    )
    assert verdicts["docker"][0] == "passed"


# ---- no leftovers --------------------------------------------------------------------------------------


def iptables_tagged_rules() -> list[str]:
    try:
        out = subprocess.run(["iptables-save"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in out.splitlines() if "splitbrain:" in line]


def docker_netns() -> set[str]:
    try:
        return set(os.listdir("/var/run/docker/netns"))
    except OSError:
        return set()


@pytest.mark.slow
def test_twenty_runs_leave_nothing_behind(docker_backend, tmp_path):
    """10 local and 10 docker runs of the smoke scenario (a one-way cut and its heal): all pass,
    and afterwards no container, network, iptables rule, namespace or node process remains."""
    client = docker_backend.client
    mine = owner_label()
    netns_before = docker_netns()
    rules_before = iptables_tagged_rules()
    scenario = load_scenario(SCENARIOS / "smoke.yaml")
    walls: dict[str, list[float]] = {"local": [], "docker": []}
    for i in range(20):
        backend = "docker" if i % 2 else "local"
        options = {"client": client} if backend == "docker" else None
        started = time.monotonic()
        outcome = run_scenario(scenario, backend=backend, out=tmp_path, backend_options=options)
        walls[backend].append(time.monotonic() - started)
        assert outcome.verdict.passed, explain(outcome)
    ours = [cid for cid, info in leftovers(client).items() if info["owner"] == mine]
    assert not ours, f"clusters left: {ours}"
    assert iptables_tagged_rules() == rules_before, "splitbrain iptables rules left on the host"

    # The engine deletes a removed container's namespace file in a garbage-collection pass that
    # runs once a minute: wait for it (namespaces of containers that still exist, another
    # session's, do not count).
    def namespaces_left() -> set[str]:
        in_use = {
            os.path.basename((c.attrs.get("NetworkSettings") or {}).get("SandboxKey") or "")
            for c in client.containers.list(all=True, ignore_removed=True)
        }
        return docker_netns() - netns_before - in_use

    deadline = time.monotonic() + 150
    while namespaces_left() and time.monotonic() < deadline:
        time.sleep(2)
    assert not namespaces_left(), f"network namespaces left: {namespaces_left()}"
    assert not processes_naming(str(tmp_path)), "node processes left"
    print(
        f"20 runs: local {statistics.mean(walls['local']):.1f} s, docker {statistics.mean(walls['docker']):.1f} s "
        f"per run (mean wall)"
    )


def test_mcast_under_20_percent_loss_over_udp(runs):
    """MCAST over UDP under 20 % iptables loss on every link: every multicast delivered, repaired by XMIT-REQs."""
    outcome = runs("mcast-loss", "docker")
    assert outcome.verdict.passed, explain(outcome)
    assert sum(count(outcome, node, "xmit_req_tx") for node in nodes_of(outcome)) > 0


def test_mcast_senders_block_on_a_cut_off_member_and_unblock_at_the_heal(runs):
    """MCAST's flow control in containers: with C cut off (iptables), A and B block, and unblock at the heal."""
    outcome = runs("mcast-flow-control", "docker")
    assert outcome.verdict.passed, explain(outcome)
    for node in ("A", "B"):
        assert count(outcome, node, "block") >= 1, explain(outcome)
        assert count(outcome, node, "unblock") == count(outcome, node, "block"), explain(outcome)


def test_nakack2_over_ip_multicast_under_20_percent_loss(docker_backend, tmp_path):
    """NAKACK2 over IP multicast in containers: each multicast one datagram to the
    cluster's group across the bridge, 20 % iptables loss per source at every receiver; every
    multicast delivered once, in order, at every member. Skipped only when the bridge probe says
    the bridge cannot carry multicast (the run is then refused, naming ip_multicast)."""
    from splitbrain.harness.backends import BackendUnavailable

    try:
        outcome = run_scenario(
            load_scenario(SCENARIOS / "nakack2-ip-multicast.yaml"),
            backend="docker",
            out=tmp_path,
            backend_options={"client": docker_backend.client},
        )
    except BackendUnavailable as exc:
        if "ip_multicast" not in str(exc):
            raise
        pytest.skip(str(exc))
    assert outcome.verdict.passed, explain(outcome)
    assert sum(count(outcome, node, "xmit_req_tx") for node in nodes_of(outcome)) > 0, explain(outcome)
    for node in nodes_of(outcome):
        log = (outcome.run_dir / "nodes" / node / "node.log").read_text()
        sent = re.search(
            r"ip multicast \S+: 800 multicasts \(1600 copies\) sent as (\d+) datagrams; received (\d+)", log
        )
        assert sent and 0 < int(sent.group(1)) <= 800 and int(sent.group(2)) > 0, log[-2000:]


def test_ip_multicast_is_refused_where_the_bridge_probe_fails(docker_backend, tmp_path, monkeypatch, capsys):
    """Where the bridge probe gets nothing across, a scenario with ip_multicast is refused before
    any node starts: the CLI exits 2 naming ip_multicast and the probe's reason, and the
    cluster's network and containers are gone."""
    import splitbrain.harness.backends.docker.cluster as docker_cluster
    from splitbrain.harness.cli import main

    mine = owner_label()
    before = {cid for cid, info in leftovers(docker_backend.client).items() if info["owner"] == mine}
    monkeypatch.setattr(docker_cluster, "bridge_status", lambda cluster: (False, "nothing crossed (planted)"))
    code = main(["run", str(SCENARIOS / "nakack2-ip-multicast.yaml"), "--backend", "docker", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "ip_multicast: the docker bridge cannot carry IP multicast here: nothing crossed (planted)" in err
    after = {cid for cid, info in leftovers(docker_backend.client).items() if info["owner"] == mine}
    assert after <= before, f"clusters left: {after - before}"
