"""Real JGroups 2.12 nodes on the docker backend: one JGroups node image container per node on the
cluster's bridge, iptables for partitions and loss, the node's own fault protocol for typed drops,
docker kill/pause for the lifecycle. Every test needs a Docker engine (marker `docker`; skipped
with the reason when there is none) and the JGroups node image, which the fixture builds with
`ci/images jgroups` when it is missing. Nothing labelled with a test's run may be left behind:
no container, no network, also after a failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

docker = pytest.importorskip("docker")

from splitbrain.harness.backends import ClusterOptions, NodeStartError  # noqa: E402
from splitbrain.harness.backends.docker import DockerBackend, leftovers  # noqa: E402
from splitbrain.harness.run import run_scenario  # noqa: E402
from splitbrain.harness.scenario import ScenarioError, check_backend, load_scenario  # noqa: E402
from splitbrain.harness.testlib import cluster_scenario  # noqa: E402
from splitbrain.node.events import expand_runs  # noqa: E402

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios" / "jgroups"
# Three JVMs starting at once on two busy cores: each may take well over the default 30 s.
START_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def jgroups_docker():
    """A DockerBackend with the current JGroups node image (built by ci/images when missing)."""
    backend = DockerBackend()
    ok, why = backend.check_jgroups_image()
    if not ok:
        pytest.skip(f"docker backend unavailable: {why}")
    backend.ensure_image("jgroups")
    return backend


def _run(backend: DockerBackend, name: str, out: Path):
    outcome = run_scenario(
        load_scenario(SCENARIOS / name),
        backend="docker",
        out=out,
        backend_options={"client": backend.client},
        cluster_options=ClusterOptions(start_timeout_s=START_TIMEOUT_S),
    )
    assert not _left_by(backend, outcome.run_dir), _left_by(backend, outcome.run_dir)
    return outcome


def _left_by(backend: DockerBackend, run_dir: Path) -> list[str]:
    """Clusters (containers or networks labelled splitbrain) still on the engine for a run directory."""
    return [cid for cid, info in leftovers(backend.client).items() if info["run_dir"] == str(run_dir)]


def _events(run_dir: Path, node: str) -> list[dict]:
    lines = (run_dir / "nodes" / node / "events.jsonl").read_text().splitlines()
    return expand_runs([json.loads(line) for line in lines if line.strip()])


def _checks(outcome) -> dict:
    return {c.name: c for c in outcome.verdict.checks}


def _timeline(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines() if line.strip()]


def test_a_healthy_stack_under_loss_that_heals_passes_every_check(jgroups_docker, tmp_path):
    """10% loss both ways between A and B as iptables rules, unicasts and multicasts across the
    bridge: every check passes (no false alarm on the real JGroups), windows_synced not applicable."""
    outcome = _run(jgroups_docker, "healthy-loss.yaml", tmp_path)
    checks = _checks(outcome)
    assert outcome.verdict.outcome == "passed", outcome.verdict.summary()
    for name in ("fifo", "no_duplicates", "no_loss", "views_agree", "no_errors"):
        assert checks[name].passed and checks[name].judged > 0, (name, checks[name].explanation)
    assert not checks["windows_synced"].applicable
    # The loss was iptables' (at the receivers, by source address), not the node's fault protocol.
    loss_on = [e for e in _timeline(outcome.run_dir) if e["kind"] == "fault_on" and e.get("fault") == "loss"]
    assert loss_on and "iptables" in loss_on[0]["detail"], loss_on
    assert not [e for e in _events(outcome.run_dir, "B") if e["kind"] == "drop"]
    # C's multicasts crossed the bridge to both other containers.
    sent = {e["app"] for e in _events(outcome.run_dir, "C") if e["kind"] == "send"}
    for receiver in ("A", "B"):
        got = {e["app"] for e in _events(outcome.run_dir, receiver) if e["kind"] == "deliver" and e["peer"] == "C"}
        assert sent and got == sent, receiver
    where = json.loads((outcome.run_dir / "verdict.json").read_text())
    assert "splitbrain-jgroups" in json.dumps(where), "the run names the JGroups node image it ran"


def test_a_partition_museum_piece_reproduces_on_docker(jgroups_docker, tmp_path):
    """partition-unicast-lost: A cut off from B and C by iptables for 7 s, then healed: unicasts
    A sent to B while split are never delivered after the merge, so no_loss fails as on local."""
    outcome = _run(jgroups_docker, "museum/partition-unicast-lost.yaml", tmp_path)
    assert outcome.verdict.passed, outcome.verdict.summary()  # expect: {fail: no_loss}
    loss = _checks(outcome)["no_loss"]
    assert not loss.passed and "A->B" in loss.explanation, loss.explanation
    cut = [e for e in _timeline(outcome.run_dir) if e["kind"] == "fault_on" and e.get("fault") == "partition"]
    assert cut and "iptables" in cut[0]["detail"], cut


def test_kill_restart_pause_partition_and_typed_drops(jgroups_docker, tmp_path):
    """lifecycle.yaml on containers: typed drops in the node's fault protocol, a one-way cut by
    iptables, duplicates and delay in-process, docker kill and a new container for C (incarnation
    2, a new member joining with NAKACK's digest), docker pause and unpause for B."""
    outcome = _run(jgroups_docker, "lifecycle.yaml", tmp_path)
    assert outcome.verdict.outcome == "passed", outcome.verdict.summary()
    c = _events(outcome.run_dir, "C")
    assert [e["incarnation"] for e in c if e["kind"] == "node_start"] == [1, 2]
    assert [e["reason"] for e in c if e["kind"] == "node_stop"] == ["kill", "stop"]
    second = c[next(i for i, e in enumerate(c) if e["kind"] == "node_start" and e["incarnation"] == 2) :]
    first_view = next(e for e in second if e["kind"] == "view")
    assert first_view.get("reason") == "join", first_view
    b = _events(outcome.run_dir, "B")
    typed = [e for e in b if e["kind"] == "drop" and e["reason"].endswith("DATA count 3")]
    assert len(typed) == 3 and all(e["type"] == "DATA" for e in typed)
    log = (outcome.run_dir / "nodes" / "C" / "node.log").read_text()
    assert log.count("--- splitbrain: C incarnation") == 2, "one container per incarnation, both outputs kept"


def test_a_node_that_cannot_start_fails_clearly_and_leaves_nothing(jgroups_docker, tmp_path):
    """A stack JGroups refuses: NodeStartError quotes the JVM's output; no container, no network."""
    sc = cluster_scenario(
        2, name="jgroups-broken", protocol="jgroups", recovery_bound=5, jgroups={"stack": "UDP:NO_SUCH_PROTOCOL"}
    )
    cluster = jgroups_docker.create_cluster(sc, tmp_path, seed=1, options=ClusterOptions(start_timeout_s=60))
    with pytest.raises(NodeStartError) as info, cluster:
        cluster.start()
    assert "NO_SUCH_PROTOCOL" in str(info.value), info.value
    assert not _left_by(jgroups_docker, tmp_path)


def test_another_jar_is_refused_on_docker_naming_the_key():
    """The docker backend runs its image's jar: another jar is exit 2 naming jgroups.jar."""
    sc = cluster_scenario(
        2, name="jgroups-jar", protocol="jgroups", recovery_bound=5, jgroups={"jar": "/opt/jgroups-3.6.jar"}
    )
    with pytest.raises(ScenarioError) as info:
        check_backend(sc, "docker")
    assert info.value.path == "jgroups.jar" and "image" in str(info.value)


@pytest.mark.splitbrain_backend("docker")
def test_the_pytest_fixtures_drive_a_jgroups_cluster_on_docker(splitbrain_cluster, faults):
    """The plugin's fixtures with protocol jgroups on containers: a two-way cut that heals within
    failure detection, unicasts and multicasts, settled and judged."""
    cluster = splitbrain_cluster(nodes=3, protocol="jgroups", recovery_bound=8, start_timeout_s=START_TIMEOUT_S)
    cluster.send("A", "B", rate=100, duration=4)
    cluster.send("C", "*", rate=50, duration=4)
    faults.partition("A", "B")
    cluster.sleep(1)
    faults.heal()
    cluster.wait_settled()
    results = {r.name: r for r in cluster.assert_checks()}
    assert results["no_loss"].passed and results["no_loss"].judged > 0
    assert not results["windows_synced"].applicable
    assert results["views_agree"].passed
