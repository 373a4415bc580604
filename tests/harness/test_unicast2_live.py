"""`protocol: unicast2` outside the simulator's scenario runner: the pytest plugin's cluster on
sim and on local processes (real UDP), and museum pieces on docker, judged by the same checkers."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import load_scenario

BUGS = Path(__file__).resolve().parents[2] / "scenarios" / "bugs"


@pytest.mark.timeout(180)
@pytest.mark.splitbrain_backend("sim", "local")
def test_unicast2_asymmetric_split_heals_in_the_plugin(splitbrain_cluster, faults):
    """The UNICAST2 design's motivation with the plugin: A->B cut, B drops A from its view (its entries go),
    then the heal and B takes A back; B resyncs by SEND_FIRST_SEQNO and the checks pass."""
    cluster = splitbrain_cluster(nodes=2, protocol="unicast2", config={"xmit_interval": 0.2, "stable_interval": 0.5})
    cluster.send("A", "B", rate=100, duration=4)
    cluster.send("B", "A", rate=20, duration=4)
    cluster.sleep(0.5)
    faults.partition("A", "B", one_way=True)
    cluster.sleep(0.3)
    faults.view("B", ["B"])
    cluster.sleep(1.0)
    faults.heal()
    faults.view("B", ["A", "B"])
    cluster.wait_settled()
    cluster.assert_checks()


@pytest.mark.docker
@pytest.mark.timeout(600)
def test_unicast2_museum_pieces_on_docker_get_the_simulator_verdict(tmp_path):
    """One container per node, the one-way cut as an iptables DROP: the UNICAST2 design's asymmetric split
    passes and JGRP-1873/1875's stale STABLE fails no_loss, check by check as on the simulator."""
    pytest.importorskip("docker")
    from splitbrain.harness.backends.docker import DockerBackend

    backend = DockerBackend()
    ok, why = backend.check()
    if not ok:
        pytest.skip(f"docker backend unavailable: {why}")
    for stem in ("unicast2-asymmetric-split", "unicast2-stale-stable"):
        scenario = load_scenario(BUGS / f"{stem}.yaml")
        sim = run_scenario(scenario, backend="sim", out=tmp_path / "sim")
        real = run_scenario(scenario, backend="docker", out=tmp_path / "docker")
        assert real.verdict.outcome == sim.verdict.outcome == "passed", (stem, real.run_dir)
        assert {c.name: c.passed for c in real.verdict.checks} == {c.name: c.passed for c in sim.verdict.checks}
