"""Ingesting local run directories into a local warehouse in tasks that read and write the files
themselves.

Theory of operation. Spark's path (pipeline.ingest, pipeline.tasks) has the JVM read each file's
text, hand it to a Python task through Arrow, take the task's rows back and encode them as
Parquet; at 10 M events most of the CPU went there and to per-event dicts. Where the run
directories and the warehouse are local paths the executors see as the driver does (local[*], a
cluster on one machine or a shared file system), the driver instead deals the runs to a few tasks
per core by size (as pipeline.stored does for judging from Parquet) and each task, run by run:

- reads the run's files (`read_files`; a file that is not strict UTF-8 leaves its run to Spark's
  path, whose text of such bytes Python does not reproduce),
- judges it with the per-run judge of every ingest path (pipeline.tasks.judge_texts: the lines
  classified by pipeline.runwise.classify_run, the events ordered, their columns built once and
  judged by the columnar kernels when the events are plain, else on the dicts),
- writes the run's events (and quarantine) partition with pyarrow (pipeline.partition_write, as
  the driver writes the runs it judged itself) and returns the result document.

The runs row is still written last by the driver, so the commit rule of ingest is unchanged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from . import ingest as I
from . import partition_write as PW
from . import stored as ST
from . import tasks as TK


@dataclass(frozen=True)
class LocalRun:
    """A run this path can take: its files' local paths by src, its partitions, its bytes."""

    run_id: str
    files: tuple[tuple[str, str], ...]  # (src, local path)
    events_dir: str
    quarantine_dir: str
    size: int


def local_runs(runs: list[I.RunSource], wh: dict) -> tuple[list[LocalRun], list[I.RunSource]]:
    """(the runs with files this path takes, the others): it takes a run whose files are local
    and whose partitions the driver would write (a local warehouse, a plain run id)."""
    taken, left = [], []
    for run in runs:
        files = _local_files(run)
        events_dir = PW.local_partition(I._local_path(wh["events"]), run.run_id)
        quarantine_dir = PW.local_partition(I._local_path(wh["quarantine"]), run.run_id)
        if files is None or events_dir is None or quarantine_dir is None:
            left.append(run)
        elif files:
            size = sum(os.path.getsize(path) for _src, path in files)
            taken.append(LocalRun(run.run_id, files, events_dir, quarantine_dir, size))
    return taken, left


def _local_files(run: I.RunSource) -> tuple[tuple[str, str], ...] | None:
    """(src, local path) of the run's logs, sorted by src as the ingest task sorts them; None
    when one is not a local file as discover_runs lists those ("file:" and a path)."""
    named = [(f"nodes/{node}/events.jsonl", uri) for uri, node in run.event_files]
    if run.timeline:
        named.append(("timeline.jsonl", run.timeline))
    out = []
    for src, uri in named:
        if not uri.startswith("file:/") or uri.startswith("file://"):
            return None
        out.append((src, I._unescape_glob(uri)[len("file:") :]))
    return tuple(sorted(out))


def read_files(run: LocalRun) -> list[tuple[str, str]] | None:
    """(src, text) of the run's files, or None when one is not strict UTF-8."""
    out = []
    for src, path in run.files:
        with open(path, "rb") as f:
            data = f.read()
        try:
            out.append((src, data.decode("utf-8")))
        except UnicodeDecodeError:
            return None
    return out


@dataclass
class RunRows:
    """One run judged: its events partition's columns, its quarantine's (None without one), its
    result document."""

    events: object  # pyarrow.Table
    quarantine: object | None
    result: str


def judge_files(run_id: str, files: list[tuple[str, str]], plan: TK.Plan) -> RunRows:
    """The rows and result document of a run's files (src, text), sorted by src, as the ingest
    task of Spark's path makes them (pipeline.tasks.ingest_function)."""
    table, bad, result = TK.judge_texts(files, plan)
    quarantine = I._quarantine_columns(TK.out_table(run_id, [], bad, None)) if bad else None
    return RunRows(table, quarantine, result)


def ingest_function(plans: dict[str, TK.Plan], default: TK.Plan) -> Callable:
    """The mapPartitions function: each task's runs -> (run id, result document, or None for a
    run left to Spark's path), the partitions written."""

    def run(batches: Iterator[list[LocalRun]]) -> Iterator[tuple[str, str | None]]:
        for batch in batches:
            for local in batch:
                files = read_files(local)
                if files is None:
                    yield local.run_id, None
                    continue
                rows = judge_files(local.run_id, files, plans.get(local.run_id, default))
                PW.replace_partition(local.events_dir, rows.events)
                if rows.quarantine is not None:
                    PW.replace_partition(local.quarantine_dir, rows.quarantine)
                yield local.run_id, rows.result

    return run


def ingest_local(
    spark, runs: list[I.RunSource], plans: dict[str, TK.Plan], default: TK.Plan, wh: dict
) -> tuple[dict[str, dict], list[I.RunSource]]:
    """(run id -> result document of the runs ingested here, the runs left to Spark's path)."""
    taken, left = local_runs(runs, wh)
    if not taken:
        return {}, left
    batches = ST.deal(taken, spark.sparkContext.defaultParallelism * ST.TASKS_PER_CORE)
    rows = (
        spark.sparkContext.parallelize(batches, len(batches)).mapPartitions(ingest_function(plans, default)).collect()
    )
    docs = {run_id: json.loads(doc) for run_id, doc in rows if doc is not None}
    refused = {run_id for run_id, doc in rows if doc is None}
    return docs, left + [r for r in runs if r.run_id in refused]
