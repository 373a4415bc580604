"""The pipeline on logs with run lines (node/events.py): a run is one warehouse row, and the
verdicts are the harness's, on the run form and on the one-line-per-message form alike."""

from __future__ import annotations

import dataclasses
import json

import pytest

from splitbrain.harness.checks import GENERAL_CHECKS, run_checks
from splitbrain.harness.eventlog import read_run, write_events
from splitbrain.harness.rundir import write_events as write_run_events
from splitbrain.harness.scenario import load_scenario
from splitbrain.harness.sim import Simulation
from splitbrain.node.events import expand_runs, make_event, run_event
from splitbrain.pipeline.schema import classify_line

pytestmark = pytest.mark.slow  # one Spark ingest and analysis

CHECKS = list(GENERAL_CHECKS)
END = 10.0


def _run(t: float, kind: str, first: int, count: int) -> dict:
    node, peer = ("A", "B") if kind == "send" else ("B", "A")
    return run_event(
        t, node, "unicast3", kind, peer, 1, first + 1, count, 100 * count, f"A:0:{first}", f"A:0:{first + count - 1}"
    )


def _log(deliveries: list[dict]) -> list[dict]:
    def window(node: str, peer: str, side: str) -> dict:
        return make_event(
            END,
            node,
            "unicast3",
            "window",
            peer=peer,
            side=side,
            conn_id=1,
            low=300,
            high=300,
            state="OPEN",
            final=True,
        )

    return [
        make_event(0.0, "A", "node", "node_start", incarnation=0),
        make_event(0.0, "B", "node", "node_start", incarnation=0),
        _run(1.0, "send", 0, 100),
        _run(1.1, "send", 100, 200),
        *deliveries,
        make_event(1.5, "A", "unicast3", "ack_rx", peer="B", seqno=300, conn_id=1),
        window("A", "B", "send"),
        window("B", "A", "recv"),
    ]


PLANTED = {
    "runs-clean": _log([_run(1.01, "deliver", 0, 150), _run(1.21, "deliver", 150, 150)]),
    "runs-gap": _log([_run(1.01, "deliver", 0, 150), _run(1.21, "deliver", 160, 140)]),
    "runs-overlap": _log([_run(1.01, "deliver", 0, 160), _run(1.21, "deliver", 150, 150)]),
}


def _write(root, name: str, events: list[dict]) -> None:
    by_node: dict[str, list] = {}
    for ev in events:
        by_node.setdefault(ev["node"], []).append(ev)
    for node, evs in by_node.items():
        path = root / name / ("timeline.jsonl" if node == "harness" else f"nodes/{node}/events.jsonl")
        write_events(path, evs)


@pytest.fixture(scope="module")
def judged(spark, tmp_path_factory):
    from splitbrain.pipeline import analysis as A

    root = tmp_path_factory.mktemp("run-lines")
    for name, events in PLANTED.items():
        _write(root, name, events)
        _write(root, f"{name}-v1", expand_runs(events))
    scenario = dataclasses.replace(load_scenario("scenarios/pause-receiver.yaml"), seed=1)
    result = Simulation(scenario, 1).run()
    write_run_events(root / "sim-runs", result.events, result.timeline)
    _write(root, "sim-v1", result.all_events())
    bad = _run(1.21, "deliver", 150, 150)
    bad["last_seqno"] += 1  # a gap inside the run line
    _write(root, "bad-run", PLANTED["runs-clean"][:-4] + [bad] + PLANTED["runs-clean"][-3:])
    analysis = A.analyze(spark, [str(root)], str(tmp_path_factory.mktemp("warehouse")))
    return root, {v.run_id: v for v in analysis.verdicts}, analysis


def test_verdicts_are_the_harness_verdicts_on_both_forms(judged):
    root, verdicts, _ = judged
    for name in [*PLANTED, "sim-runs"]:
        twin = "sim-v1" if name == "sim-runs" else f"{name}-v1"
        expected = [c.to_dict() for c in run_checks(read_run(root / name), CHECKS)]
        assert verdicts[name].checks == expected, name
        assert [c.to_dict() for c in run_checks(read_run(root / twin), CHECKS)] == expected, name
        assert verdicts[twin].checks == expected, twin
    failed = {name: sorted(c["name"] for c in verdicts[name].checks if not c["passed"]) for name in PLANTED}
    assert failed == {"runs-clean": [], "runs-gap": ["no_loss"], "runs-overlap": ["fifo", "no_duplicates"]}


def test_a_run_is_one_row_of_the_warehouse(judged, spark):
    from splitbrain.pipeline.ingest import load_events

    root, _, analysis = judged
    rows = load_events(spark, analysis.warehouse, ["runs-clean", "runs-clean-v1"]).groupBy("run_id").count().collect()
    assert {r["run_id"]: r["count"] for r in rows} == {"runs-clean": 9, "runs-clean-v1": 605}
    run_rows = (
        load_events(spark, analysis.warehouse, ["runs-clean"])
        .where("v = 2")
        .select("kind", "seqno", "last_seqno", "count", "bytes", "app", "last_app")
        .orderBy("kind", "seqno")
        .collect()
    )
    assert [tuple(r) for r in run_rows][:1] == [("deliver", 1, 150, 150, 15000, "A:0:0", "A:0:149")]


def test_a_run_line_with_a_gap_inside_is_quarantined(judged, spark):
    from splitbrain.pipeline.ingest import load_quarantine

    root, verdicts, analysis = judged
    rows = load_quarantine(spark, analysis.warehouse, ["bad-run"]).collect()
    assert [r["reason"] for r in rows] == ["bad run line: seqnos 151..301 are not 150 messages"]
    assert verdicts["bad-run"].quarantined == 1
    line = json.dumps(PLANTED["runs-clean"][3], separators=(",", ":"))
    assert classify_line(line)[1] is None


def test_timelines_count_a_run_as_its_messages(judged):
    """The report's timeline of a run with run lines is that of its one-line-per-message twin."""
    _, _, analysis = judged
    for name in PLANTED:
        if name in analysis.timelines and f"{name}-v1" in analysis.timelines:
            assert analysis.timelines[name] == analysis.timelines[f"{name}-v1"], name
    assert {"runs-gap", "runs-gap-v1"} <= set(analysis.timelines)
