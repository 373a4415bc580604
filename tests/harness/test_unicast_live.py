"""`protocol: unicast` (the original UNICAST) outside the scenario runner: the pytest plugin's
cluster on sim and on local processes (real UDP), judged by the same checkers."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import load_scenario

BUGS = Path(__file__).resolve().parents[2] / "scenarios" / "bugs"


@pytest.mark.timeout(180)
@pytest.mark.splitbrain_backend("sim", "local")
def test_unicast_survives_loss_and_duplication_in_the_plugin(splitbrain_cluster, faults):
    """A lossy, duplicating link both ways: the sender's resends deliver everything once, in order."""
    cluster = splitbrain_cluster(nodes=2, protocol="unicast", config={"xmit_interval": 0.2})
    faults.loss("A<->B", 0.2)
    faults.duplicate("A<->B", 0.2)
    cluster.send("A", "B", rate=100, duration=2)
    cluster.send("B", "A", rate=20, duration=2)
    cluster.sleep(2.5)
    faults.heal()
    cluster.wait_settled()
    results = cluster.assert_checks()
    assert {r.name: r.judged > 0 for r in results} == {r.name: True for r in results}


@pytest.mark.timeout(60)
@pytest.mark.splitbrain_backend("sim")
def test_unicast_asymmetric_split_loses_messages_in_the_plugin(splitbrain_cluster, faults):
    """The UNICAST2 design's motivation with the plugin: A->B cut, B alone drops A from its view; after the
    heal A's messages are stored at B and never delivered, and no_loss says so."""
    cluster = splitbrain_cluster(nodes=2, protocol="unicast", config={"xmit_interval": 0.2})
    cluster.send("A", "B", rate=100, duration=3)
    cluster.sleep(0.5)
    faults.partition("A", "B", one_way=True)
    cluster.sleep(0.3)
    faults.view("B", ["B"])
    cluster.sleep(1.0)
    faults.heal()
    cluster.sleep(6.0)  # virtual time: the recovery bound (8 x 0.2 s) and more after the last send
    [no_loss] = cluster.check("no_loss")
    assert not no_loss.passed and not no_loss.vacuous
    assert no_loss.details["lost"]["A->B"]["count"] > 100
    [window] = [
        e
        for e in cluster.events()
        if e["kind"] == "window" and e.get("final") and e["node"] == "B" and e.get("side") == "recv"
    ]
    assert window["peer"] == "A" and window["low"] == 0 and window["high"] > 100  # stored, never delivered


def test_unicast_runs_are_analyzed_by_the_pipeline_and_reported(spark, tmp_path):
    """The museum piece and its twin through `splitbrain analyze`'s pipeline: every event fits the
    schema, the verdicts are the simulator's, the summary counts the original UNICAST as a protocol
    of its own, and the report is written."""
    from splitbrain.pipeline import analysis as A

    runs = tmp_path / "runs"
    outcomes = {}
    for stem in ("unicast-asymmetric-split", "unicast3-asymmetric-split"):
        outcome = run_scenario(load_scenario(BUGS / f"{stem}.yaml"), backend="sim", out=runs)
        outcomes[outcome.run_dir.name] = outcome
    analysis = A.analyze(spark, [str(runs)], str(tmp_path / "warehouse"))
    for v in analysis.verdicts:
        outcome = outcomes[v.run_id]
        assert v.quarantined == 0 and v.checks == [c.to_dict() for c in outcome.verdict.checks]
        assert v.meta["protocol"] == outcome.result.scenario.protocol
    by_protocol = {row["protocol"]: row for row in analysis.summary["by_protocol"]}
    assert by_protocol["unicast"]["runs"] == 1
    page = A.build_report(spark, analysis, str(tmp_path / "report"), title="t")
    text = Path(page).read_text()
    assert "unicast-asymmetric-split" in text and "timeline-unicast-asymmetric-split" in text
