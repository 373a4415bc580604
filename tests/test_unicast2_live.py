"""`protocol: unicast2` outside the simulator's scenario runner: the pytest plugin's cluster on
sim and on local processes (real UDP), judged by the same checkers."""

from __future__ import annotations

import pytest


@pytest.mark.timeout(180)
@pytest.mark.splitbrain_backend("sim", "local")
def test_unicast2_asymmetric_split_heals_in_the_plugin(splitbrain_cluster, faults):
    """Seed 001's motivation with the plugin: A->B cut, B drops A from its view (its entries go),
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
