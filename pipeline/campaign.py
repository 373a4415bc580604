"""A simulator campaign run by Spark itself: seeds are Spark tasks, their logs go straight into
the warehouse, and the analysis follows in the same session.

Theory of operation. `splitbrain campaign SCENARIO --runs N --backend sim --master URL` hands the
seeds S..S+N-1 to Spark (`spark.range` in a few partitions per core) and `mapInArrow` runs, for
each seed of a partition, what `splitbrain run --backend sim` runs: harness.sim's Simulation on
the scenario with that seed, the harness's own verdict (harness.verdict.judge), the node logs and
the timeline serialized exactly as harness.eventlog writes them. The task then treats those texts
as the files of a run directory (pipeline.runwise: classify, order, judge, metric rows). The
result documents come to the driver through an accumulator (pipeline.tasks.Results), and the
driver writes one runs row per seed (the runs table's row of a run directory with that
scenario.yaml and verdict.json) once every seed's rows are stored. There are no small files and
no second read. Where the warehouse is a local directory, each task writes its runs' events (and
quarantined lines, if any) partitions itself with pyarrow, as pipeline.partition_write writes a
run the driver judged: Spark's writer sorted and encoded every event in the JVM while the task's
Python waited (a 1,000-seed campaign: 72 s of JVM CPU, now 14 s). Elsewhere the task yields the
run's events as Arrow rows (pipeline.tasks.OUT_SCHEMA) and Spark writes them in one job.

A run's id is the run directory name `splitbrain run` would give it (`<scenario>-<seed>-<stamp>`).
The verdicts are the pipeline's (the harness's checks over the logs as written); the harness's own
verdict of the same seed is kept in the runs row (harness_outcome), and they agree, seed for seed,
like `splitbrain run` and `splitbrain analyze` do.

Executors need this package (installed, or shipped: pipeline.session.ship_code) and pyarrow.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from splitbrain.harness.eventlog import encode_lines
from splitbrain.node.events import compact_runs

from . import ingest as I
from . import partition_write as PW
from . import tasks as TK

SOURCE_PREFIX = "spark-task:"
# The driver JVM of a campaign whose tasks write its (local) warehouse only schedules the seeds,
# writes the runs rows and answers the report's few queries: compiling with C1 only halves its
# CPU, which the tasks share the cores with (300 seeds on busy cores: 8.0 s instead of 14.4 s).
DRIVER_JIT = "c1"


def _lines(events: list[dict]) -> str:
    """A log's text exactly as harness.eventlog.write_events writes it (its own encoder: orjson
    where the bytes are json.dumps's, a third of json.dumps's cost per event)."""
    return encode_lines(events).decode()


def run_id_of(scenario_name: str, seed: int, stamp: str) -> str:
    return f"{scenario_name}-{seed}-{stamp}"


def first_run_seed(scenario_name: str, seeds: range, stamp: str) -> int:
    """The seed whose run comes first in run id order: the run the report draws a timeline of
    when none needs explaining (pipeline.report.timeline_runs), so its task computes it."""
    return min(seeds, key=lambda seed: run_id_of(scenario_name, seed, stamp))


def simulate_one(scenario, seed: int, stamp: str, sim_options: dict, timeline_every: bool, results, emit: str):
    """One seed, as `splitbrain run --backend sim` runs it, as OUT_SCHEMA rows of `emit` (pyarrow
    Table); the result document (with the runs row as `meta`) goes to the accumulator `results`."""
    run_id, events, bad, result = judged_seed(scenario, seed, stamp, sim_options, timeline_every)
    return TK.emitted(run_id, events, bad, result, results, emit)


def judged_seed(scenario, seed: int, stamp: str, sim_options: dict, want_timeline: bool):
    """One seed simulated and judged: its run id, runwise events, quarantined lines and result
    document (JSON, with the runs row as `meta`). The timeline is computed when `want_timeline`
    or the run did not pass."""
    from splitbrain.harness.rundir import _json_default
    from splitbrain.harness.sim import Simulation
    from splitbrain.harness.verdict import error_verdict, judge

    from . import runwise as R

    scenario = dataclasses.replace(scenario, seed=seed)
    run_id = run_id_of(scenario.name, seed, stamp)
    sim = None
    result: Any = None
    try:
        sim = Simulation(scenario, seed, **sim_options)
        result = sim.run()
        verdict = judge(scenario, result.all_events(), seed=seed, backend="sim", stats=result.stats)
    except Exception as exc:  # the run counts as an error, with what the simulator produced
        result = sim.result(exc) if sim is not None else None
        verdict = error_verdict(scenario, exc, backend="sim", stats=result.stats if result is not None else {})
    node_events = result.events if result is not None else {}
    timeline = result.timeline if result is not None else []
    # Run lines as a run directory has them (harness.rundir writes node logs through compact_runs).
    files = [(f"nodes/{name}/events.jsonl", _lines(compact_runs(evs))) for name, evs in sorted(node_events.items())]
    if result is not None:
        files.append(("timeline.jsonl", _lines(timeline)))
    verdict_text = json.dumps(verdict.to_dict(), indent=2, sort_keys=False, default=_json_default) + "\n"
    source = I.RunSource(
        run_id=run_id,
        uri=f"{SOURCE_PREFIX}{run_id}",
        event_files=tuple((src, src.split("/")[1]) for src, _ in files if src.startswith("nodes/")),
        timeline="timeline.jsonl" if result is not None else None,
        scenario="scenario.yaml",
        verdict="verdict.json",
    )
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    meta = I.run_metadata(source, scenario.to_yaml(), verdict_text, now)
    from splitbrain.harness.checks import KNOWN_CHECKS

    from . import judging as J

    names, bound = J.plan(meta, KNOWN_CHECKS)
    events, bad = R.classify_files(files)
    R.order(events)
    want = want_timeline or verdict.outcome != "passed"
    doc = json.loads(TK.result_document(events, (names, bound, want), len(bad)))
    doc["meta"] = meta
    return run_id, events, bad, json.dumps(doc, separators=(",", ":"))


def stored_seed(scenario, seed: int, stamp: str, sim_options: dict, want_timeline: bool, results, tables: dict):
    """One seed as simulate_one runs it, its rows written by the task itself into the local
    warehouse tables `tables` ("events", "quarantine": directories), as pipeline.partition_write
    writes a run the driver judged; the result document goes to the accumulator `results`."""
    run_id, events, bad, result = judged_seed(scenario, seed, stamp, sim_options, want_timeline)
    rows = TK.out_table(run_id, events, bad, None)
    _write_partition(tables["events"], run_id, I._event_columns(rows))
    if bad:
        _write_partition(tables["quarantine"], run_id, I._quarantine_columns(rows))
    results.add({run_id: result})


def _write_partition(table_dir: str, run_id: str, rows) -> None:
    partition = PW.local_partition(table_dir, run_id)
    if partition is None:  # run_campaign gives tasks `tables` only for run ids the driver may write
        raise ValueError(f"{run_id!r}: not a run id the driver writes")
    PW.replace_partition(partition, rows)


def simulate_function(
    scenario_yaml: str,
    stamp: str,
    sim_options: dict,
    timeline_every: bool,
    results,
    emit: str = TK.EMIT_EVENTS,
    *,
    timeline_seed: int | None = None,
    tables: dict | None = None,
) -> Callable:
    """mapInArrow function: batches of seeds -> OUT_SCHEMA batches, one run per seed; with
    `tables` (local table directories) each run's partitions are written by the task and it
    yields no rows. `timeline_seed`'s run gets its timeline computed like the runs of
    `timeline_every`."""

    def run(batches: Iterator) -> Iterator:
        import yaml

        from splitbrain.harness.scenario import parse_scenario

        scenario = parse_scenario(yaml.safe_load(scenario_yaml))
        for batch in batches:
            for seed in batch.column(0).to_pylist():
                want = timeline_every or seed == timeline_seed
                if tables is not None:
                    stored_seed(scenario, int(seed), stamp, sim_options, want, results, tables)
                    continue
                table = simulate_one(scenario, int(seed), stamp, sim_options, want, results, emit)
                yield from table.to_batches()

    return run


def local_tables(wh: dict, scenario_name: str, seeds: range, stamp: str) -> dict | None:
    """The events and quarantine directories of a local warehouse, where the tasks write the runs'
    partitions themselves (pyarrow: the JVM's sort and Parquet writer cost a 1,000-seed campaign
    about as much CPU as a third of the simulations, and kept the tasks' Python waiting); None
    where Spark writes them. Run ids differ only in the seed (digits and a sign), which never
    decides whether Spark would escape one, so the first seed's run id stands for all."""
    tables = {name: I._local_path(wh[name]) for name in ("events", "quarantine")}
    run_id = run_id_of(scenario_name, seeds.start, stamp)
    if any(PW.local_partition(path, run_id) is None for path in tables.values()):
        return None
    return tables


def run_campaign(
    spark: SparkSession,
    scenario,
    seeds: range,
    warehouse: str,
    *,
    sim_options: dict | None = None,
    timelines: int = 24,
    partitions: int | None = None,
) -> I.IngestResult:
    """Simulate, judge and store every seed in Spark tasks; an IngestResult like ingest's (with
    every run's result document), ready for pipeline.analysis.analyze_ingested."""
    wh = I.warehouse_paths(warehouse)
    I._check_marker(I._FS(spark), wh)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    parallelism = spark.sparkContext.defaultParallelism
    n_parts = partitions or max(1, min(len(seeds), parallelism * 4))
    acc = TK.results_accumulator(spark)
    args = (scenario.to_yaml(), stamp, dict(sim_options or {}), len(seeds) <= timelines, acc)
    first = first_run_seed(scenario.name, seeds, stamp) if seeds else None
    tables = local_tables(wh, scenario.name, seeds, stamp)
    seeds_df = spark.range(seeds.start, seeds.stop, 1, n_parts).select(F.col("id").alias("seed"))
    runs = seeds_df.mapInArrow(simulate_function(*args, timeline_seed=first, tables=tables), TK.OUT_SCHEMA)
    if tables is not None:
        runs.count()  # the tasks wrote the partitions; count only runs them
    else:
        I.write_events(runs, wh)
    results = TK.parse_results({"run_id": k, "result": v} for k, v in acc.value.items())
    # A simulated run's logs are the harness's own serialization, so this is for a defect only:
    # the seeds with quarantined lines run again, emitting those lines (a seed replays exactly);
    # tasks that write local tables wrote them already.
    again = sorted(doc["meta"]["seed"] for doc in results.values() if doc["quarantined"])
    if again and tables is None:
        seeds_df = spark.createDataFrame([(s,) for s in again], "seed long")
        I.write_quarantine(seeds_df.mapInArrow(simulate_function(*args, TK.EMIT_QUARANTINE), TK.OUT_SCHEMA), wh)
    metas = {run_id: doc.pop("meta") for run_id, doc in results.items()}
    rows = [metas[run_id] for run_id in sorted(metas)]
    I.runs_frame(spark, rows).coalesce(1).write.mode("append").parquet(wh["runs"])
    res = I.IngestResult(warehouse=wh["base"])
    res.ingested = sorted(metas)
    res.events = {rid: results[rid]["events"] for rid in res.ingested}
    res.quarantined = {rid: results[rid]["quarantined"] for rid in res.ingested if results[rid]["quarantined"]}
    res.results = results
    res.metas = metas
    return res
