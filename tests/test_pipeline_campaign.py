"""Campaigns run by Spark itself (pipeline.campaign): seeds simulated and judged in Spark tasks,
their logs written straight into the warehouse; the verdicts equal `splitbrain run --backend sim`
seed for seed."""

from __future__ import annotations

import json

from harness.cli import main
from harness.rundir import run_scenario
from harness.scenario import parse_scenario
from pipeline.cli import EXIT_OK
from tests.test_pipeline_cli import TINY

# A bug reproduced (expect: fail) next to runs that pass: UNICAST2's scenario #6 is too long for a
# unit test, so a planted mutant of the tiny scenario stands in: no_loss must fail on every seed.
LOSSY = TINY.replace("name: tiny", "name: lossy").replace("  - {at: 0.5, heal: 0}\n", "")


def _scenario(text: str):
    import yaml

    return parse_scenario(yaml.safe_load(text))


def test_campaign_in_spark_tasks_equals_splitbrain_run_seed_for_seed(spark, tmp_path):
    """Seeds 11..14 of the tiny scenario and of a never-healed variant, simulated in Spark tasks:
    each run's check results and outcome are those of `splitbrain run --backend sim` with the same
    seed (the harness's own verdict, kept in the runs row, too), and the warehouse holds as many
    events as the run directory has lines."""
    from pipeline import analysis as A
    from pipeline import campaign as CP
    from pipeline.ingest import load_events

    for text in (TINY, LOSSY):
        scenario = _scenario(text)
        seeds = range(11, 15)
        wh = str(tmp_path / f"wh-{scenario.name}")
        result = CP.run_campaign(spark, scenario, seeds, wh, partitions=2)
        analysis = A.analyze_ingested(spark, result)
        by_seed = {v.meta["seed"]: v for v in analysis.verdicts}
        assert sorted(by_seed) == list(seeds)
        counts = {
            r["run_id"]: r["n"]
            for r in load_events(spark, wh).groupBy("run_id").count().withColumnRenamed("count", "n").collect()
        }
        for seed in seeds:
            o = run_scenario(scenario, seed=seed, backend="sim", out=tmp_path / "runs")
            v = by_seed[seed]
            assert v.run_id.startswith(f"{scenario.name}-{seed}-")
            assert v.checks == json.loads(json.dumps([c.to_dict() for c in o.verdict.checks])), seed
            assert v.outcome == o.verdict.outcome, seed
            assert v.harness_outcome == o.verdict.outcome and v.quarantined == 0
            lines = sum(
                len(p.read_text().splitlines())
                for p in [*o.run_dir.glob("nodes/*/events.jsonl"), o.run_dir / "timeline.jsonl"]
            )
            assert counts[v.run_id] == lines == v.metrics["events"]
        if scenario.name == "lossy":
            assert all("no_loss" in v.failed_checks for v in analysis.verdicts)
        else:
            assert all(v.outcome == "passed" for v in analysis.verdicts)


def test_campaign_command_with_a_master_runs_in_spark(spark, tmp_path, capsys):
    """campaign --backend sim --master local[2]: no run directories, one warehouse and report,
    runs per minute in the report, exit 0."""
    scen = tmp_path / "tiny.yaml"
    scen.write_text(TINY)
    out = tmp_path / "camp"
    code = main(["campaign", str(scen), "--runs", "3", "--master", "local[2]", "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert code == EXIT_OK, printed
    assert not (out / "runs").exists()
    verdicts = json.loads((out / "report" / "verdicts.json").read_text())
    assert sorted(v["meta"]["seed"] for v in verdicts) == [11, 12, 13]
    assert [v["outcome"] for v in verdicts] == ["passed"] * 3
    assert "runs per minute" in (out / "report" / "index.html").read_text()
    assert "simulated and judged in Spark tasks" in printed and "3/3 run(s) passed" in printed


def test_a_seeds_quarantined_lines_come_from_its_second_pass(monkeypatch):
    """The campaign's tasks emit events and hand results over (first pass); a seed whose logs had
    a line that is no event replays and emits exactly that line (second pass). Run in process,
    with a log line torn on purpose, since the simulator's own logs are always clean."""
    import pyarrow as pa

    from pipeline import campaign as CP
    from pipeline import tasks as TK

    clean = CP._lines

    def torn(events):
        text = clean(events)
        return text[: text.index("\n") // 2] + text[text.index("\n") :] if events else text

    monkeypatch.setattr(CP, "_lines", torn)

    class Acc:
        def __init__(self):
            self.value = {}

        def add(self, item):
            self.value = TK.Results().addInPlace(self.value, item)

    scenario_yaml = _scenario(TINY).to_yaml()
    seeds = [pa.record_batch([pa.array([11], pa.int64())], names=["seed"])]
    first = Acc()
    rows = pa.Table.from_batches(list(CP.simulate_function(scenario_yaml, "S", {}, True, first)(iter(seeds))))
    (doc,) = [json.loads(v) for v in first.value.values()]
    files = doc["meta"]["event_files"] + 1  # every node log and the timeline lost half a line
    assert doc["quarantined"] == files
    assert set(rows.column("what").to_pylist()) == {TK.WHAT_EVENT}
    assert rows.num_rows == doc["events"]

    second = Acc()
    fn = CP.simulate_function(scenario_yaml, "S", {}, True, second, TK.EMIT_QUARANTINE)
    bad = pa.Table.from_batches(list(fn(iter(seeds))))
    assert second.value == {}
    assert bad.column("what").to_pylist() == [TK.WHAT_QUARANTINE] * files
    assert bad.column("line").to_pylist() == [1] * files
    assert all(reason for reason in bad.column("q_reason").to_pylist())
