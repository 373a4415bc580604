"""Campaigns run by Spark itself (pipeline.campaign): seeds simulated and judged in Spark tasks,
their logs written straight into the warehouse; the verdicts equal `splitbrain run --backend sim`
seed for seed."""

from __future__ import annotations

import dataclasses
import json

from splitbrain.harness.cli import main
from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import parse_scenario
from splitbrain.pipeline import tasks as TK
from splitbrain.pipeline.cli import EXIT_OK
from tests.pipeline.test_pipeline_cli import TINY

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
    from splitbrain.pipeline import analysis as A
    from splitbrain.pipeline import campaign as CP
    from splitbrain.pipeline.ingest import load_events

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


def test_campaign_command_with_a_master_runs_in_spark(spark, tmp_path, capsys, monkeypatch):
    """campaign --backend sim --master local[2]: no run directories, one warehouse and report,
    runs per minute in the report, exit 0; the session it asks for compiles with C1 only."""
    from splitbrain.pipeline import session as SS

    asked = []
    get_spark = SS.get_spark
    monkeypatch.setattr(SS, "get_spark", lambda master, **kw: asked.append(kw) or get_spark(master, **kw))
    scen = tmp_path / "tiny.yaml"
    scen.write_text(TINY)
    out = tmp_path / "camp"
    code = main(["campaign", str(scen), "--runs", "3", "--master", "local[2]", "--out", str(out), "--quiet"])
    assert asked == [{"jit": "c1"}]
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

    from splitbrain.pipeline import campaign as CP

    clean = CP._lines

    def torn(events):
        text = clean(events)
        return text[: text.index("\n") // 2] + text[text.index("\n") :] if events else text

    monkeypatch.setattr(CP, "_lines", torn)
    scenario_yaml = _scenario(TINY).to_yaml()
    seeds = [pa.record_batch([pa.array([11], pa.int64())], names=["seed"])]
    first = _Acc()
    rows = pa.Table.from_batches(list(CP.simulate_function(scenario_yaml, "S", {}, True, first)(iter(seeds))))
    (doc,) = [json.loads(v) for v in first.value.values()]
    files = doc["meta"]["event_files"] + 1  # every node log and the timeline lost half a line
    assert doc["quarantined"] == files
    assert set(rows.column("what").to_pylist()) == {TK.WHAT_EVENT}
    assert rows.num_rows == doc["events"]

    second = _Acc()
    fn = CP.simulate_function(scenario_yaml, "S", {}, True, second, TK.EMIT_QUARANTINE)
    bad = pa.Table.from_batches(list(fn(iter(seeds))))
    assert second.value == {}
    assert bad.column("what").to_pylist() == [TK.WHAT_QUARANTINE] * files
    assert bad.column("line").to_pylist() == [1] * files
    assert all(reason for reason in bad.column("q_reason").to_pylist())


def _stored_rows(spark, wh: str, stamp: str) -> dict:
    """A warehouse's rows (pipeline.ingest's readers), with the campaign's stamp and the runs'
    ingest times left out: two campaigns differ in nothing else."""
    from splitbrain.pipeline import ingest as I

    runs = [{k: v for k, v in r.asDict().items() if k != "ingested_at"} for r in I.load_runs(spark, wh).collect()]
    tables = {
        "events": I.load_events(spark, wh).collect(),
        "quarantine": I.load_quarantine(spark, wh).collect(),
        "runs": runs,
    }
    return {name: sorted(repr(r).replace(stamp, "STAMP") for r in rows) for name, rows in tables.items()}


def test_partitions_the_tasks_write_equal_sparks(spark, tmp_path, monkeypatch):
    """A local warehouse's partitions, written by the tasks with pyarrow, hold the rows Spark's
    writer stores (the same campaign with the tasks' rows written by Spark), and the runs judged
    again from the warehouse give the campaign's result documents. Of runs that pass, only the
    first (the one the report draws) gets a timeline from its task: the warehouse's."""
    from splitbrain.pipeline import analysis as A
    from splitbrain.pipeline import campaign as CP
    from splitbrain.pipeline.ingest import load_events
    from splitbrain.pipeline.timeline import timeline_data, timeline_from_doc

    scenario = _scenario(TINY)
    seeds = range(8, 12)  # run ids sort as 10, 11, 8, 9
    by_tasks = CP.run_campaign(spark, scenario, seeds, str(tmp_path / "tasks"), timelines=1, partitions=2)
    monkeypatch.setattr(CP.PW, "local_partition", lambda table_dir, run_id: None)
    by_spark = CP.run_campaign(spark, scenario, seeds, str(tmp_path / "spark"), timelines=1, partitions=2)
    stamps = [r.ingested[0].rsplit("-", 1)[1] for r in (by_tasks, by_spark)]
    assert _stamped(by_tasks.results, stamps[0]) == _stamped(by_spark.results, stamps[1])
    assert _stored_rows(spark, by_tasks.warehouse, stamps[0]) == _stored_rows(spark, by_spark.warehouse, stamps[1])
    assert list((tmp_path / "tasks" / "events").glob("run_id=*/part-*.parquet"))
    monkeypatch.undo()
    _metas, again = A.judge_stored(spark, by_tasks.warehouse, by_tasks.ingested, timelines=0)
    for run_id, doc in again.items():
        assert doc["results"] == by_tasks.results[run_id]["results"], run_id
        assert doc["parts"] == by_tasks.results[run_id]["parts"], run_id
    first = min(by_tasks.ingested)
    assert first.startswith("tiny-10-")
    assert [rid for rid, doc in by_tasks.results.items() if "timeline" in doc] == [first]
    from_doc = timeline_from_doc(first, by_tasks.results[first]["timeline"])
    drawn = timeline_data(load_events(spark, by_tasks.warehouse), [first])[first]
    # A rare event read back from the warehouse has every column (run_id, nulls) as keys.
    assert dataclasses.replace(from_doc, rare=_set_keys(from_doc.rare)) == dataclasses.replace(
        drawn, rare=_set_keys(drawn.rare)
    )


def _set_keys(rare: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if v is not None and k != "run_id"} for e in rare]


def _stamped(results: dict, stamp: str) -> str:
    """Result documents without the stamp and the ingest times (the runs rows' `meta`)."""
    docs = {
        run_id.replace(stamp, "STAMP"): {k: v for k, v in doc.items() if k != "meta"} for run_id, doc in results.items()
    }
    return json.dumps(docs, sort_keys=True)


def test_a_task_writes_a_seeds_quarantine_as_the_second_pass_emits_it(monkeypatch, tmp_path):
    """With local tables, a seed's task writes its events and quarantined lines itself: the rows
    the first pass emits (events) and the second pass emits (quarantine) for Spark to write, and
    the same result document. Run in process, with a log line torn on purpose."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from splitbrain.pipeline import campaign as CP
    from splitbrain.pipeline import ingest as I

    clean = CP._lines
    monkeypatch.setattr(CP, "_lines", lambda events: clean(events).replace("{", "{{", 1))
    scenario_yaml = _scenario(TINY).to_yaml()
    seeds = [pa.record_batch([pa.array([11], pa.int64())], names=["seed"])]

    def run(emit=TK.EMIT_EVENTS, tables=None):
        acc = _Acc()
        fn = CP.simulate_function(scenario_yaml, "S", {}, True, acc, emit, tables=tables)
        return pa.Table.from_batches(list(fn(iter(seeds))), schema=TK.arrow_schema(TK.OUT_SCHEMA)), acc.value

    tables = {"events": str(tmp_path / "events"), "quarantine": str(tmp_path / "quarantine")}
    events, first = run()
    quarantine, _ = run(TK.EMIT_QUARANTINE)
    written, by_task = run(tables=tables)
    assert written.num_rows == 0
    assert _without_ingest_time(by_task) == _without_ingest_time(first)
    (run_id,) = first
    assert json.loads(first[run_id])["quarantined"] > 0
    for name, rows in (("events", I._event_columns(events)), ("quarantine", I._quarantine_columns(quarantine))):
        (part,) = (tmp_path / name / f"run_id={run_id}").glob("part-*.parquet")
        assert pq.read_table(part).to_pylist() == rows.to_pylist(), name


class _Acc:
    """An accumulator's `add`, in process."""

    def __init__(self):
        self.value: dict = {}

    def add(self, item):
        self.value = TK.Results().addInPlace(self.value, item)


def _without_ingest_time(results: dict) -> dict:
    docs = {run_id: json.loads(doc) for run_id, doc in results.items()}
    for doc in docs.values():
        doc["meta"].pop("ingested_at")
    return docs
