"""Real JGroups 2.12 nodes on the local backend: the scenarios of scenarios/jgroups/ end to end,
and the node's own fault protocol. Needs the JGroups jar and a JDK (ci/setup installs both where
it runs as root); without them these tests fail with the apt command, they are not skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import load_scenario, parse_scenario
from splitbrain.node.jgroups.launch import runtime_problem

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios" / "jgroups"


def _run(name: str, tmp_path: Path):
    assert runtime_problem() is None, runtime_problem()
    return run_scenario(load_scenario(SCENARIOS / name), backend="local", out=tmp_path)


def _events(run_dir: Path, node: str) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "nodes" / node / "events.jsonl").read_text().splitlines()]


def _checks(outcome) -> dict:
    return {c.name: c for c in outcome.verdict.checks}


@pytest.mark.slow
def test_a_healthy_stack_under_loss_that_heals_passes_every_check(tmp_path):
    """10% loss both ways between A and B, unicasts and multicasts: no false alarm on JGroups."""
    outcome = _run("healthy-loss.yaml", tmp_path)
    checks = _checks(outcome)
    assert outcome.verdict.outcome == "passed", outcome.verdict.summary()
    for name in ("fifo", "no_duplicates", "no_loss", "views_agree", "no_errors"):
        assert checks[name].passed and checks[name].judged > 0, (name, checks[name].explanation)
    assert not checks["windows_synced"].applicable
    assert "not applicable: windows_synced" in outcome.verdict.summary()
    # The loss really happened, in the node's fault protocol, and the stack recovered from it.
    drops = [e for e in _events(outcome.run_dir, "B") if e["kind"] == "drop"]
    assert len(drops) > 10 and {e["peer"] for e in drops} == {"A"}
    sends = [e for e in _events(outcome.run_dir, "C") if e["kind"] == "send"]
    assert sends and all("members" in e and "seqno" in e for e in sends)  # C multicasts (NAKACK)


@pytest.mark.slow
def test_kill_restart_pause_partition_and_typed_drops(tmp_path):
    """Every lifecycle step and in-process fault on JGroups nodes; a restarted node is a new
    member (incarnation 2, a join view with NAKACK's digest) and the group ends whole."""
    outcome = _run("lifecycle.yaml", tmp_path)
    assert outcome.verdict.outcome == "passed", outcome.verdict.summary()
    c = _events(outcome.run_dir, "C")
    starts = [e["incarnation"] for e in c if e["kind"] == "node_start"]
    assert starts == [1, 2]
    assert [e["reason"] for e in c if e["kind"] == "node_stop"] == ["kill", "stop"]
    # The second life joins the running group. (The first may have founded it: whichever node's
    # JVM came up first installs a view of itself alone, which is no join.)
    second = c[next(i for i, e in enumerate(c) if e["kind"] == "node_start" and e["incarnation"] == 2) :]
    first_view = next(e for e in second if e["kind"] == "view")
    assert first_view.get("reason") == "join", first_view
    assert any(item.startswith("A:") for item in first_view["digest"]), first_view
    b = _events(outcome.run_dir, "B")
    typed = [e for e in b if e["kind"] == "drop" and e["reason"].endswith("DATA count 3")]
    assert len(typed) == 3 and all(e["type"] == "DATA" and isinstance(e["seqno"], int) for e in typed)
    nak = [e for e in c if e["kind"] == "drop" and e["reason"].endswith("NAKACK_MSG count 3")]
    assert len(nak) == 3


@pytest.mark.slow
@pytest.mark.splitbrain_backend("local")
def test_the_pytest_fixtures_drive_a_jgroups_cluster(splitbrain_cluster, faults):
    """The plugin's fixtures with protocol jgroups: a one-way cut that heals within failure
    detection, unicasts and multicasts, settled and judged (windows_synced not applicable)."""
    cluster = splitbrain_cluster(nodes=3, protocol="jgroups", recovery_bound=8)
    cluster.send("A", "B", rate=100, duration=4)
    cluster.send("C", "*", rate=50, duration=4)
    faults.partition("A", "B", one_way=True)
    cluster.sleep(1)
    faults.heal()
    cluster.wait_settled()
    results = {r.name: r for r in cluster.assert_checks()}
    assert results["no_loss"].passed and results["no_loss"].judged > 0
    assert not results["windows_synced"].applicable
    assert results["views_agree"].passed


@pytest.mark.slow
def test_a_museum_piece_reproduces_and_its_twin_passes(tmp_path):
    """The last multicast lost on the real pbcast.NAKACK fails no_loss naming A:0:20 at B; its
    twin on splitbrain's NAKACK2 passes the same schedule on the simulator."""
    # The piece reproduces in 9 or 10 of 10 runs (benchmarks/bench_museum_jgroups.py): a later
    # multicast of A (a view when A coordinates a slow start) can reveal the gap to B. One more
    # run where the first missed keeps this test to what the museum claims.
    piece = _run("museum/last-multicast-lost.yaml", tmp_path / "1")
    if not piece.verdict.passed:
        piece = _run("museum/last-multicast-lost.yaml", tmp_path / "2")
    assert piece.verdict.passed, piece.verdict.summary()  # expect: {fail: no_loss}
    loss = _checks(piece)["no_loss"]
    assert not loss.passed and "A->B" in loss.explanation and "A:0:20" in loss.explanation
    twin = run_scenario(load_scenario(SCENARIOS / "museum" / "last-multicast-lost-twin.yaml"), out=tmp_path)
    assert twin.verdict.passed, twin.verdict.summary()


@pytest.mark.slow
def test_the_stale_stable_piece_fails_only_because_of_the_late_stable(tmp_path):
    """UNICAST2 of 2.12.2 applies a STABLE of the old connection to the new one: no_loss fails
    naming A:1:2; the same schedule without the late STABLE delivers everything, and the twin on
    UNICAST3 + SYNC passes on the simulator."""
    piece = _run("museum/stale-stable.yaml", tmp_path / "piece")
    assert piece.verdict.passed, piece.verdict.summary()  # expect: {fail: no_loss}
    loss = _checks(piece)["no_loss"]
    assert not loss.passed and "A:1:2" in loss.explanation
    data = yaml.safe_load((SCENARIOS / "museum" / "stale-stable.yaml").read_text())
    data["schedule"] = [step for step in data["schedule"] if step.get("drop", {}).get("type") != "STABLE"]
    assert len(data["schedule"]) == 3
    control = run_scenario(parse_scenario({**data, "expect": "pass"}), backend="local", out=tmp_path / "control")
    assert control.verdict.passed, control.verdict.summary()
    twin = run_scenario(load_scenario(SCENARIOS / "museum" / "stale-stable-twin.yaml"), out=tmp_path / "twin")
    assert twin.verdict.passed, twin.verdict.summary()
