"""One analysis with the driver JVM's start overlapped: the `analyze` command's path.

Theory of operation. Starting the driver JVM takes seconds during which the driver's Python would
wait, and a small analysis is then mostly one Spark task doing Python work (pipeline.tasks). Here
the session starts in a thread while the driver judges local runs itself, on the second core, with
the ingest task's own function (`tasks.ingest_function`) over the same input, the files' texts: a
file is taken only if it decodes as strict UTF-8 (then Python's text is Spark's), else its run is
left to Spark. So a run's result document and rows are the task's by construction. The driver
takes runs one by one until the session is up (at least one), then ingest writes the rows it
made (into a local warehouse the driver writes them itself, pipeline.partition_write; elsewhere
Spark, from the Arrow tables) and has Spark's tasks judge the runs it did not take
(pipeline.ingest, `Prejudged`). When it took every run, the writes run while the report is drawn.

A short analysis also starts its JVM compiling with C1 only (`SMALL_INPUT_BYTES`): C2's compiler
threads otherwise take half of the JVM's CPU there, while big inputs need C2's code (see
pipeline.session). Only local runs and local masters take this path; anything else is ingested
exactly as before.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from . import ingest as I
from . import tasks

# Inputs up to this size (the run's JSONL files; the 258 k-event 5-node run is 35 MB) start the
# driver JVM with C1 only. 10 M events (1.4 GB) with C1 only were JVM-bound for 15 min.
SMALL_INPUT_BYTES = 64 << 20
# Runs bigger than this are left to Spark's tasks: the driver's memory also holds the JVM's.
DRIVER_MAX_RUN_BYTES = 256 << 20


class SessionStart:
    """get_spark(...) in a thread: `ready` is set when the session is up (or failed)."""

    def __init__(self, master: str | None, **options):
        self.ready = threading.Event()
        self._spark = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._start, args=(master, options), daemon=True)
        self._thread.start()

    def _start(self, master, options) -> None:
        from .session import get_spark

        try:
            self._spark = get_spark(master, **options)
        except BaseException as exc:  # handed to the caller of get()
            self._error = exc
        finally:
            self.ready.set()

    def get(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._spark


def local_runs(paths: list[str], master: str | None, only: list[str] | None) -> list[I.RunSource] | None:
    """The runs of `paths` when every path is local and the master is local (None otherwise, or
    when listing fails: ingest then says why, as before)."""
    from .session import launched_by_spark_submit

    if launched_by_spark_submit() or not (master or "local").startswith("local"):
        return None
    if any(I._local_path(I.normalize_uri(p)) is None for p in paths):
        return None
    try:
        return I.select_runs(None, paths, only)
    except (I.InputError, OSError):
        return None


def _local(uri: str) -> str:
    """The local path of a file discover_runs listed (a glob-escaped "file:" path)."""
    return I._unescape_glob(uri)[len("file:") :]


def _file_paths(run: I.RunSource) -> list[str]:
    return [_local(u) for u in [f[0] for f in run.event_files] + ([run.timeline] if run.timeline else [])]


def input_bytes(runs: list[I.RunSource]) -> int:
    return sum(os.path.getsize(p) for r in runs for p in _file_paths(r))


def jit_for(runs: list[I.RunSource] | None) -> str | None:
    """ "c1" for a small local input, else None (the JVM's default, tiered with C2)."""
    return "c1" if runs is not None and input_bytes(runs) <= SMALL_INPUT_BYTES else None


def _read_table(run: I.RunSource):
    """The run's files as the ingest task gets them (path, whole text), or None when a file is
    not strict UTF-8 (Spark's text of such bytes is left to Spark)."""
    import pyarrow as pa

    paths, texts = [], []
    for path in _file_paths(run):
        with open(path, "rb") as f:
            data = f.read()
        try:
            texts.append(data.decode("utf-8"))
        except UnicodeDecodeError:
            return None
        paths.append(I._file_uri(path))
    return pa.table({"path": paths, "value": texts})


class _Collect:
    """Stands in for the tasks' accumulator: what `add` receives."""

    def __init__(self):
        self.value: dict[str, str] = {}

    def add(self, update: dict[str, str]) -> None:
        self.value.update(update)


def judge_on_driver(runs: list[I.RunSource], plans: dict[str, tasks.Plan], stop: threading.Event) -> I.Prejudged:
    """Judge `runs` in order with the ingest task's function until `stop` is set (at least one
    run is judged when there is one it can take)."""
    out = I.Prejudged()
    for run in runs:
        if out.results and stop.is_set():
            break
        if run.run_id not in plans or not _file_paths(run):
            continue
        if sum(os.path.getsize(p) for p in _file_paths(run)) > DRIVER_MAX_RUN_BYTES:
            continue
        table = _read_table(run)
        if table is None:
            continue
        acc = _Collect()
        plan = plans[run.run_id]
        out.events[run.run_id] = tasks.ingest_function({run.run_id: plan}, plan, acc)(table)
        out.results[run.run_id] = acc.value[run.run_id]
        out.plans[run.run_id] = plan
        if tasks.parse_results([{"run_id": run.run_id, "result": out.results[run.run_id]}])[run.run_id]["quarantined"]:
            fn = tasks.ingest_function({run.run_id: plan}, plan, acc, tasks.EMIT_QUARANTINE)
            out.quarantine[run.run_id] = fn(table)
    return out


@dataclass
class Started:
    """A session starting, and what the driver judged meanwhile."""

    session: SessionStart
    prejudged: I.Prejudged
    now: str


def start(paths: list[str], master: str | None, only: list[str] | None, timelines: int) -> Started:
    """Start the session (C1 only for a small local input) and judge local runs on the driver
    until it is up. The plans are those ingest gives runs not yet in the warehouse; ingest uses a
    driver result only where its own plan for the run is the same."""
    runs = local_runs(paths, master, only)
    session = SessionStart(master, jit=jit_for(runs))
    now = I.stamp()
    prejudged = I.Prejudged()
    if runs:
        metas = I.metadata_rows(None, runs, now)
        plans = I.timeline_plans(metas, runs, timelines)
        prejudged = judge_on_driver(runs, plans, session.ready)
    return Started(session=session, prejudged=prejudged, now=now)
