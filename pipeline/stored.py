"""Judging runs of a local warehouse in tasks that read each run's Parquet files themselves.

Theory of operation. The events table is partitioned by run (`events/run_id=<run>/`), so a run's
events are the files of one directory: no shuffle is needed to bring them together. The driver
lists those directories (os.scandir, no Spark job), deals the runs to a few tasks by their bytes,
largest first, and each task reads its runs' files with pyarrow (the columns the judging reads,
in EVENTS_TABLE_SCHEMA's types, as Spark reads them with that schema), counts each run's
quarantined lines from its quarantine files' footers and returns the run's result document
(pipeline.tasks.stored_result_document: the columnar kernels, the exact path where they decline).
Only the small documents come back. The warehouse must be a local path the executors see as the
driver does (local[*], or a cluster on one machine or on a shared file system); a warehouse on
HDFS, S3 or another URI is judged by Spark's own read (pipeline.analysis.judge_stored).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from . import ingest as I
from . import schema as S
from . import tasks as TK

# The columns the kernels read (the event fields, as their rare-event dicts take every field, and
# the order); provenance is read too only where a run goes to the exact path or wants a timeline.
JUDGED_COLUMNS = ("seq", *S.FIELDS)
# The judged string columns read as Parquet dictionaries: their string work is then per distinct
# value (pipeline.columnar_apps), not per event.
CODED_COLUMNS = ("node", "peer", "kind", "proto", "app")
# A few tasks per core even out runs of different sizes; more only add per-task costs.
TASKS_PER_CORE = 4


@dataclass(frozen=True)
class StoredRun:
    """One run's files in the warehouse, as the driver listed them."""

    run_id: str
    events: tuple[str, ...]
    quarantine: tuple[str, ...]
    size: int  # bytes of its event files


def local_base(warehouse: str) -> str | None:
    """The warehouse's directory when it is a local path (normalize_uri keeps a scheme only for
    URIs), else None."""
    base = I.warehouse_paths(warehouse)["base"]
    return base if os.path.isabs(base) else None


def unescape_partition(name: str) -> str:
    """A partition directory's value as Spark reads it back: each %XX is the character XX."""
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), name)


def _data_files(directory: str) -> list[os.DirEntry]:
    """A partition's data files: Spark skips names starting with '_' or '.' (_SUCCESS, .crc)."""
    try:
        with os.scandir(directory) as entries:
            return sorted(
                (e for e in entries if e.is_file() and not e.name.startswith(("_", "."))), key=lambda e: e.name
            )
    except FileNotFoundError:
        return []


def _partitions(table_dir: str) -> dict[str, str]:
    """run id -> its partition directory in one table of the warehouse."""
    out: dict[str, str] = {}
    try:
        with os.scandir(table_dir) as entries:
            for e in entries:
                if e.is_dir() and e.name.startswith("run_id="):
                    out[unescape_partition(e.name[len("run_id=") :])] = e.path
    except FileNotFoundError:
        pass
    return out


def list_runs(base: str, run_ids: list[str]) -> list[StoredRun]:
    """The files of each of `run_ids` (a run without an events partition has no event files)."""
    events = _partitions(os.path.join(base, I.EVENTS_DIR))
    quarantine = _partitions(os.path.join(base, I.QUARANTINE_DIR))
    out = []
    for run_id in run_ids:
        files = _data_files(events[run_id]) if run_id in events else []
        bad = _data_files(quarantine[run_id]) if run_id in quarantine else []
        out.append(
            StoredRun(
                run_id,
                tuple(e.path for e in files),
                tuple(e.path for e in bad),
                sum(e.stat().st_size for e in files),
            )
        )
    return out


class _Sized(Protocol):
    @property
    def run_id(self) -> str: ...
    @property
    def size(self) -> int: ...


_Run = TypeVar("_Run", bound=_Sized)


def deal(runs: list[_Run], tasks: int) -> list[list[_Run]]:
    """Runs (anything with a run_id and a size in bytes) dealt to at most `tasks` tasks, largest
    first to the least loaded one."""
    bins: list[list[_Run]] = [[] for _ in range(max(1, min(tasks, len(runs))))]
    loads = [0] * len(bins)
    for run in sorted(runs, key=lambda r: (-r.size, r.run_id)):
        i = loads.index(min(loads))
        bins[i].append(run)
        loads[i] += run.size + 1
    return [b for b in bins if b]


def read_events(files: tuple[str, ...], columns: tuple[str, ...] | None = None, coded: tuple[str, ...] = ()):
    """A run's stored events (EVENTS_TABLE_SCHEMA's types, without run_id): `columns` or all; a
    column a file lacks is null, as in Spark's read with that schema. The `coded` string columns
    come as dictionary arrays of the same strings."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    schema = TK.arrow_schema(S.EVENTS_TABLE_SCHEMA)
    schema = schema.remove(schema.get_field_index("run_id"))
    names = list(columns) if columns is not None else schema.names
    if not files:
        return schema.empty_table().select(names)
    for name in coded:
        i = schema.get_field_index(name)
        schema = schema.set(i, schema.field(i).with_type(pa.dictionary(pa.int32(), schema.field(i).type)))
    parquet = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=list(coded)))
    return ds.dataset(list(files), schema=schema, format=parquet).to_table(columns=names, use_threads=False)


def quarantined_lines(files: tuple[str, ...]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(f).num_rows for f in files)


def judge_run(run: StoredRun, plan: TK.Plan) -> str:
    """A run's result document, from its files."""
    quarantined = quarantined_lines(run.quarantine)
    want_timeline = plan[2]
    table = read_events(run.events) if want_timeline else read_events(run.events, JUDGED_COLUMNS, CODED_COLUMNS)
    if table.num_rows == 0:  # as the Spark path: no group, so judged like a run without events
        return TK.result_document([], plan, quarantined)
    return TK.stored_result_document(table, plan, quarantined, lambda: read_events(run.events))


def judge_function(plans: dict[str, TK.Plan]) -> Callable[[Iterator[list[StoredRun]]], Iterator[tuple[str, str]]]:
    """The mapPartitions function: each task's runs -> (run id, result document)."""

    def run(batches: Iterator[list[StoredRun]]) -> Iterator[tuple[str, str]]:
        for batch in batches:
            for stored in batch:
                yield stored.run_id, judge_run(stored, plans[stored.run_id])

    return run


def judge_local(spark, base: str, plans: dict[str, TK.Plan]) -> dict[str, dict]:
    """run id -> result document of every planned run of the local warehouse at `base`."""
    runs = list_runs(base, list(plans))
    batches = deal(runs, spark.sparkContext.defaultParallelism * TASKS_PER_CORE)
    rdd = spark.sparkContext.parallelize(batches, len(batches)) if batches else None
    rows = rdd.mapPartitions(judge_function(plans)).collect() if rdd is not None else []
    return {run_id: json.loads(doc) for run_id, doc in rows}
