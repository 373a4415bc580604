"""Analysis: events table -> verdicts and metrics per run, summaries across runs.

A verdict's checks are the harness's own, run per run by pipeline.judging. `result_rows` is the
one Spark query behind the rest: the advisory check's and every metric's rows, unioned, so the
events are scanned and the flows shuffled once, then collected (they are small: a few rows per
run and link). `analyze_runs` assembles them per run; `campaign_summary` computes pass rates per
scenario, protocol, protocol variant and fault type from the verdicts on the driver.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import checks as C
from . import ingest as I
from . import metrics as M
from . import stored as ST
from . import tasks as TK
from .verdicts import RunVerdict, judge


def result_rows(events: DataFrame, cached: list | None = None) -> DataFrame:
    """The advisory check's and every metric's result rows for all runs in `events`, as one DataFrame.

    The intermediate tables several results share (summary, lives, flows, messages) are cached:
    otherwise each consumer would prune them to its own columns and Spark could not reuse one
    scan or one shuffle between them. Cached DataFrames are appended to `cached` so the caller can
    unpersist them once the rows are collected (see collect_rows)."""
    keep = cached if cached is not None else []

    def cache(df: DataFrame) -> DataFrame:
        df = df.cache()
        keep.append(df)
        return df

    events = C.per_message(events)  # the metrics are per message: run lines as their messages
    summ = cache(C.summary(events))
    life = cache(C.lives(summ))
    heal = cache(C.heals(summ))
    fl = cache(C.flows(events, life))
    msgs = cache(C.messages(fl, life))
    return C.union_rows(
        [
            C.stuck_rows(fl, life, heal),
            M.metric_rows(summ, heal, fl, msgs),
        ]
    )


def collect_rows(events: DataFrame) -> list:
    """result_rows(events), collected; the intermediate caches are dropped afterwards."""
    cached: list = []
    try:
        return result_rows(events, cached).collect()
    finally:
        for df in cached:
            df.unpersist()


@dataclass
class Analysis:
    """What one analyze call produced."""

    warehouse: str
    verdicts: list[RunVerdict]
    summary: dict = field(default_factory=dict)
    ingest: I.IngestResult | None = None
    timelines: dict = field(default_factory=dict)  # run id -> pipeline.timeline.timeline_of document

    @property
    def passed(self) -> bool:
        return all(v.outcome == "passed" for v in self.verdicts)


def analyze_runs(spark: SparkSession, warehouse: str, run_ids: list[str], *, timelines: int = 24) -> list[RunVerdict]:
    """Verdicts and metrics of the given (ingested) runs, judged from the warehouse."""
    return verdicts_from_results(*judge_stored(spark, warehouse, run_ids, timelines=timelines))


def judge_stored(
    spark: SparkSession, warehouse: str, run_ids: list[str], *, timelines: int = 24
) -> tuple[dict[str, dict], dict[str, dict]]:
    """(metas, result documents) of runs already in the warehouse. A local warehouse: tasks that
    read each run's files themselves (pipeline.stored, no shuffle); any other: one task per run
    (pipeline.tasks.judge_function) over its events as Spark reads and groups them."""
    if not run_ids:
        return {}, {}
    metas = I.run_rows(spark, warehouse, run_ids)
    base = ST.local_base(warehouse)
    if base is not None:
        return metas, ST.judge_local(spark, base, I.timeline_plans(metas, run_ids, timelines))
    quarantined = {
        r["run_id"]: r["n"]
        for r in I.load_quarantine(spark, warehouse, run_ids).groupBy("run_id").agg(F.count("*").alias("n")).collect()
    }
    plans = I.timeline_plans(metas, run_ids, timelines)
    events = I.load_events(spark, warehouse, run_ids)
    fn = TK.judge_function(plans, quarantined)
    results = TK.parse_results(events.groupBy("run_id").applyInArrow(fn, TK.RESULT_SCHEMA).collect())
    for run_id, plan in plans.items():
        if run_id not in results:
            results[run_id] = TK.empty_result(plan, quarantined.get(run_id, 0))
    return metas, results


def verdicts_from_results(metas: dict[str, dict], results: dict[str, dict]) -> list[RunVerdict]:
    """RunVerdicts (outcome, advisory check, metrics) from the per-run result documents."""
    out = []
    for run_id in sorted(metas):
        doc = results[run_id]
        v = judge(run_id, metas[run_id], doc["parts"], doc["results"], doc["quarantined"])
        v.metrics = M.run_metrics(doc["parts"])
        out.append(v)
    return out


def variant_label(protocol: str | None, value: str | None) -> str:
    """A run's protocol variant as the pass rates show it: "unicast3 resync=sync", "nakack2
    xmit_interval=0", "mcast capacity=512" (the registry's variant_key), the protocol alone when
    it has none."""
    from splitbrain.node import protocols

    name = protocol or "(unknown)"
    try:
        key = protocols.get(name).variant_key
    except ValueError:
        key = None
    if value is None:
        return name
    return f"{name} {key or 'variant'}={value}"


def campaign_summary(verdicts: list[RunVerdict]) -> dict:
    """Pass rates per scenario, protocol, protocol variant (UNICAST3's resync mode, NAKACK2's
    xmit_interval, MCAST's capacity) and fault type, and failing checks per scenario. Plain
    Python on the driver: the verdicts are already there, one small record per run, and a Spark
    query for them cost a job (~1-2 s) per analysis."""
    if not verdicts:
        return {}
    rates: dict[str, dict[str, list[int]]] = {"scenario": {}, "protocol": {}, "variant": {}, "fault_type": {}}
    failures: dict[tuple[str, str], int] = {}
    for v in verdicts:
        scenario = v.meta.get("scenario") or "(none)"
        values = {
            "scenario": [scenario],
            "protocol": [v.meta.get("protocol") or "(unknown)"],
            "variant": [variant_label(v.meta.get("protocol"), v.meta.get("variant"))],
            "fault_type": list(v.meta.get("fault_types") or ["(unknown)"]),
        }
        for dim, keys in values.items():
            for key in keys:
                tally = rates[dim].setdefault(key, [0, 0])
                tally[0] += 1
                tally[1] += v.outcome == "passed"
        for check in v.failed_checks:
            failures[(scenario, check)] = failures.get((scenario, check), 0) + 1
    out: dict = {"runs": len(verdicts), "passed": sum(1 for v in verdicts if v.outcome == "passed")}
    for dim, tallies in rates.items():
        out[f"by_{dim}"] = [
            {dim: key, "runs": runs, "passed": passed, "pass_rate": passed / runs}
            for key, (runs, passed) in sorted(tallies.items())
        ]
    out["check_failures"] = [
        {"scenario": scenario, "check": check, "runs": runs} for (scenario, check), runs in sorted(failures.items())
    ]
    return out


def build_report(
    spark: SparkSession,
    analysis: Analysis,
    out_dir: str,
    *,
    title: str,
    extra: dict | None = None,
    max_timelines: int | None = None,
):
    """The HTML report of an analysis (local directory): plots, timelines of the runs that need
    explaining, the first quarantined lines. While the ingest's writes still run (a background
    ingest), the report is drawn meanwhile and published once they succeeded."""
    from . import report as R
    from .timeline import timeline_data, timeline_from_doc

    ingest = analysis.ingest
    run_ids = [v.run_id for v in analysis.verdicts]
    chosen = R.timeline_runs(analysis.verdicts, max_timelines or R.MAX_TIMELINES)
    ends = {v.run_id: v.metrics.get("end_t") for v in analysis.verdicts}
    timelines = {
        rid: timeline_from_doc(rid, analysis.timelines[rid], ends.get(rid))
        for rid in chosen
        if rid in analysis.timelines
    }
    missing = [rid for rid in chosen if rid not in timelines]
    # The verdicts count each run's quarantined lines: without any, the query is a job saved.
    quarantined = any(v.quarantined for v in analysis.verdicts)
    if ingest is not None and (missing or quarantined):
        ingest.wait()  # the queries below read what the ingest writes
    if missing:  # runs the tasks did not draw a timeline for: one query over the warehouse
        timelines.update(timeline_data(I.load_events(spark, analysis.warehouse, missing), missing, ends))
    quarantine = []
    if quarantined:
        rows = I.load_quarantine(spark, analysis.warehouse, run_ids).orderBy("run_id", "file_key", "line").limit(200)
        quarantine = [r.asDict() for r in rows.collect()]

    def write(directory):
        return R.write_report(
            directory, analysis.verdicts, analysis.summary, timelines, title=title, quarantine=quarantine, extra=extra
        )

    if ingest is None or ingest.writing is None:
        return write(out_dir)
    return _publish_after(ingest, write, Path(out_dir))


def _publish_after(ingest: I.IngestResult, write, out: Path) -> Path:
    """Draw the report into a hidden directory next to `out` while the ingest writes, then move
    its files into `out` once the writes succeeded: a failed ingest leaves no report, as when
    the report came after it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".report-", dir=out.parent))
    try:
        page = write(staging)
        ingest.wait()
        for path in sorted(staging.rglob("*")):
            if path.is_file():
                target = out / path.relative_to(staging)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)
        return out / page.relative_to(staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def ingest_only(
    spark: SparkSession,
    paths: list[str],
    warehouse: str,
    only: list[str] | None = None,
    *,
    timelines: int = 24,
    prejudged: I.Prejudged | None = None,
    now: str | None = None,
    background: bool = False,
) -> I.IngestResult:
    return I.ingest(
        spark, paths, warehouse, only=only, timelines=timelines, prejudged=prejudged, now=now, background=background
    )


def analyze_ingested(spark: SparkSession, result: I.IngestResult, *, timelines: int = 24) -> Analysis:
    """Judge the runs of an ingest (new ones were judged by the ingest itself, runs already in the
    warehouse are judged from it) and summarize them."""
    if result.skipped:
        result.wait()  # judge_stored reads the warehouse the ingest may still be writing
    metas, results = judge_stored(spark, result.warehouse, result.skipped, timelines=timelines)
    metas.update(result.metas)
    results.update(result.results)
    verdicts = verdicts_from_results(metas, results)
    found = {rid: doc["timeline"] for rid, doc in results.items() if doc.get("timeline") is not None}
    return Analysis(
        warehouse=result.warehouse,
        verdicts=verdicts,
        summary=campaign_summary(verdicts),
        ingest=result,
        timelines=found,
    )


def analyze(spark: SparkSession, paths: list[str], warehouse: str, only: list[str] | None = None) -> Analysis:
    """Ingest `paths` (run directories or their parents) into `warehouse` and judge those runs."""
    return analyze_ingested(spark, ingest_only(spark, paths, warehouse, only))
