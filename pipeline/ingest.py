"""Ingest: run directories (any Hadoop-compatible URI) into one Parquet warehouse, append-only and
idempotent.

Theory of operation. A run directory holds nodes/<name>/events.jsonl, timeline.jsonl,
scenario.yaml and verdict.json. Ingest lists them (local directories with os.scandir on the
driver; any other URI - hdfs:, s3a: ... - with Hadoop's FileSystem), has Spark read each log file
whole (its text source with wholetext, one row per file, packed into few tasks), groups the files
by run and hands each run to one Python task (pipeline.tasks, pipeline.runwise), which cuts the
lines, classifies them (pipeline.schema.classify_line, behind an exact fast path), orders and
numbers the events and judges the run with the harness's checks. Spark then writes

    <warehouse>/events/run_id=<run>/       one row per event, with src, file_key, line and seq
    <warehouse>/quarantine/run_id=<run>/   lines that are not events, with the reason
    <warehouse>/runs/                      one row per run: scenario, protocol, seed, backend,
                                           expect, resync mode, fault types, harness outcome

and the driver collects one small result document per run (checks, metric rows, a timeline).

The run id is the run directory's name. A run already in the runs table is skipped, so ingesting
the same directory twice adds nothing; the runs row is written last, so a run whose ingest died
half way is not in the table and is ingested again, its partitions overwritten in place (dynamic
partition overwrite), never duplicated. One writer per warehouse at a time.

Local run directories ingested into a local warehouse skip Spark's read and write: tasks read
the files and write the partitions themselves (pipeline.local_ingest); the rest is the same.

Line numbers are counted in the task, over the file's whole text, exactly as harness.eventlog
reads a file (lines end at \\n, \\r\\n or \\r). `file_key` sorts files the way
harness.eventlog.read_run merges them (node logs by node directory name, then the timeline), so
(t, file_key, line) is exactly the order the plain-Python checkers walk. The limit: one run's
files are read by one task, so the largest run must fit in one Python worker's memory.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

import yaml
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from splitbrain.harness.checks import GENERAL_CHECKS, KNOWN_CHECKS
from splitbrain.harness.scenario import FaultStep, Partition, ScenarioError, parse_scenario
from splitbrain.node import protocols
from splitbrain.node.errors import BadInput

from . import partition_write as PW
from . import schema as S
from . import tasks

EVENTS_DIR = "events"
QUARANTINE_DIR = "quarantine"
RUNS_DIR = "runs"
SCHEMA_MARKER = "_SPLITBRAIN_SCHEMA"

# Checks a run without scenario.yaml is judged by (every check the harness knows).
ALL_CHECKS = GENERAL_CHECKS


def _variant(protocol, config: dict) -> str | None:
    """The protocol variant a run used (UNICAST3: its resync mode), for pass rates per variant."""
    try:
        return protocols.get(protocol).variant(config)
    except ValueError:
        return None


# Schedule steps that are not faults of their own for pass rates by fault type.
_NOT_FAULTS = frozenset({"heal", "resume"})


class InputError(BadInput, ValueError):
    """Bad input for ingest (a path that is no run directory, clashing run ids); exit code 2."""


@dataclass(frozen=True)
class RunSource:
    """One run directory as found on its file system."""

    run_id: str
    uri: str
    event_files: tuple[tuple[str, str], ...]  # (file URI, node directory name)
    timeline: str | None = None
    scenario: str | None = None
    verdict: str | None = None


@dataclass
class IngestResult:
    warehouse: str
    ingested: list[str] = field(default_factory=list)  # run ids written by this call
    skipped: list[str] = field(default_factory=list)  # run ids already in the warehouse
    events: dict[str, int] = field(default_factory=dict)  # run id -> events written
    quarantined: dict[str, int] = field(default_factory=dict)  # run id -> lines quarantined
    results: dict[str, dict] = field(default_factory=dict)  # run id -> result document (pipeline.tasks)
    metas: dict[str, dict] = field(default_factory=dict)  # run id -> runs-table row, for the runs ingested
    writing: Writing | None = None  # the writes, when they run in a thread (ingest's `background`)

    def wait(self) -> None:
        """Wait for the writes of a background ingest (a no-op otherwise); raises what they raised."""
        if self.writing is not None:
            self.writing.wait()

    @property
    def run_ids(self) -> list[str]:
        return self.ingested + self.skipped


# ---- file system ------------------------------------------------------------------------------


def normalize_uri(path: str) -> str:
    """A local path becomes an absolute path; anything with a scheme (s3a://, hdfs://) is kept."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", path) and not re.match(r"^[A-Za-z]:[\\/]", path):
        return path.rstrip("/") or path
    return os.path.abspath(path)


class _FS:
    """Hadoop FileSystem calls through py4j (the driver only)."""

    def __init__(self, spark: SparkSession):
        sc = spark.sparkContext
        self.jvm: Any = sc._jvm  # py4j's view of the JVM: attributes are Java packages
        self.conf = sc._jsc.hadoopConfiguration()

    def path(self, uri: str):
        return self.jvm.org.apache.hadoop.fs.Path(uri)

    def fs(self, uri: str):
        return self.path(uri).getFileSystem(self.conf)

    def exists(self, uri: str) -> bool:
        return bool(self.fs(uri).exists(self.path(uri)))

    def glob(self, pattern: str) -> list:
        statuses = self.fs(pattern).globStatus(self.path(pattern))
        return list(statuses) if statuses is not None else []

    def read_text(self, uri: str) -> str | None:
        if not self.exists(uri):
            return None
        stream = self.fs(uri).open(self.path(uri))
        try:
            reader = self.jvm.java.io.BufferedReader(self.jvm.java.io.InputStreamReader(stream, "UTF-8"))
            return "\n".join(iter(reader.readLine, None))
        finally:
            stream.close()

    def write_text(self, uri: str, text: str) -> None:
        out = self.fs(uri).create(self.path(uri), True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()


def _readable(path) -> str:
    """A Hadoop Path as a string Spark's readers take literally (they glob, and decode nothing)."""
    return _escape_glob(path.toString())


def _escape_glob(text: str) -> str:
    return re.sub(r"([\\*?\[\]{}])", r"\\\1", text)


def discover_runs(spark: SparkSession | None, paths: list[str]) -> list[RunSource]:
    """Run directories named by `paths`: each is a run directory (it has nodes/) or a directory
    whose children are run directories (a campaign's output). Raises InputError naming the path.

    Local paths are listed by Python on the driver (no JVM call per file, and no session needed:
    `spark` may be None when every path is local); any other URI through Hadoop's FileSystem with
    four glob calls."""
    if not paths:
        raise InputError("no run directories given")
    fs: _FS | None = None
    runs: dict[str, RunSource] = {}
    for raw in paths:
        uri = normalize_uri(raw)
        local = _local_path(uri)
        if local is not None:
            if not os.path.exists(local):
                raise InputError(f"{raw}: no such file or directory")
            if os.path.isdir(os.path.join(local, "nodes")):
                found = [_local_run(local)]
            else:
                found = [
                    _local_run(os.path.join(local, name))
                    for name in sorted(os.listdir(local))
                    if os.path.isdir(os.path.join(local, name, "nodes"))
                ]
                if not found:
                    raise InputError(f"{raw}: not a run directory (no nodes/ in it) and no run directories under it")
        else:
            if spark is None:
                raise InputError(f"{raw}: not a local path")
            fs = fs or _FS(spark)
            if not fs.exists(uri):
                raise InputError(f"{raw}: no such file or directory")
            base = _escape_glob(uri)
            if fs.exists(f"{uri}/nodes"):
                found = _runs_under(fs, base, one=True)
            else:
                found = _runs_under(fs, f"{base}/*", one=False)
                if not found:
                    raise InputError(f"{raw}: not a run directory (no nodes/ in it) and no run directories under it")
        for run in found:
            other = runs.get(run.run_id)
            if other is not None and other.uri != run.uri:
                raise InputError(f"run id {run.run_id} names two run directories: {other.uri} and {run.uri}")
            runs[run.run_id] = run
    return [runs[k] for k in sorted(runs)]


def _local_path(uri: str) -> str | None:
    """The local file system path of a normalized URI (a plain absolute path or file:...), else None."""
    if uri.startswith("/"):
        return uri
    if uri.startswith("file:"):
        return unquote(re.sub(r"^file:(//)?", "", uri)) or "/"
    return None


def _file_uri(path: str) -> str:
    """A local path as Hadoop's Path.toUri().toString() writes it (file:/a/b, special characters
    escaped)."""
    return "file:" + quote(path, safe="/:@!$&'()*+,;=-._~")


def _spark_path(path: str) -> str:
    """A local file as Spark's readers take it literally: a file: path string (Hadoop's Path
    parses it; it is no URI, so nothing is percent-decoded), glob characters escaped."""
    return _escape_glob("file:" + path)


def _local_run(run_dir: str) -> RunSource:
    """A local run directory, listed with os.scandir."""
    nodes = os.path.join(run_dir, "nodes")
    events = []
    with os.scandir(nodes) as entries:
        for entry in entries:
            path = os.path.join(entry.path, "events.jsonl")
            if entry.is_dir() and os.path.isfile(path):
                events.append((_spark_path(path), entry.name))

    def opt(name: str) -> str | None:
        path = os.path.join(run_dir, name)
        return _spark_path(path) if os.path.isfile(path) else None

    return RunSource(
        run_id=os.path.basename(run_dir.rstrip("/")),
        uri=_file_uri(run_dir),
        event_files=tuple(sorted(events, key=lambda x: x[1])),
        timeline=opt("timeline.jsonl"),
        scenario=opt("scenario.yaml"),
        verdict=opt("verdict.json"),
    )


def _runs_under(fs: _FS, pattern: str, one: bool) -> list[RunSource]:
    """All runs matched by `pattern` (a run directory, or parent/* for many), with 4 glob calls."""
    by_dir: dict[str, dict] = {}

    def entry(run_path) -> dict:
        key = run_path.toUri().toString()
        return by_dir.setdefault(
            key, {"name": run_path.getName(), "events": [], "timeline": None, "scenario": None, "verdict": None}
        )

    for st in fs.glob(f"{pattern}/nodes"):
        entry(st.getPath().getParent())
    for st in fs.glob(f"{pattern}/nodes/*/events.jsonl"):
        p = st.getPath()
        if st.isFile():
            node_dir = p.getParent()
            entry(node_dir.getParent().getParent())["events"].append((_readable(p), node_dir.getName()))
    for name in ("timeline.jsonl", "scenario.yaml", "verdict.json"):
        for st in fs.glob(f"{pattern}/{name}"):
            if st.isFile():
                p = st.getPath()
                run = by_dir.get(p.getParent().toUri().toString())
                if run is not None:
                    run[name.split(".")[0]] = _readable(p)
    runs = []
    for uri, info in sorted(by_dir.items()):
        runs.append(
            RunSource(
                run_id=info["name"],
                uri=uri,
                event_files=tuple(sorted(info["events"], key=lambda x: x[1])),
                timeline=info["timeline"],
                scenario=info["scenario"],
                verdict=info["verdict"],
            )
        )
    return runs


# ---- lines -> events --------------------------------------------------------------------------


def file_key(node_dir: str | None) -> str:
    """Sort key of a log file in harness.eventlog.read_run's merge order: node logs sorted by their
    directory name, then the timeline (binary UTF-8 order is code point order, like Python's)."""
    return "1" if node_dir is None else "0" + node_dir


_FILE_RE = re.compile(r"/([^/]+)/(nodes/([^/]+)/events\.jsonl|timeline\.jsonl|scenario\.yaml|verdict\.json)$")


def _run_and_src(path: str) -> tuple[str, str]:
    """(run id, path inside the run) of a file URI as Spark reports it (URL-encoded)."""
    m = _FILE_RE.search(path)
    if m is None:
        raise RuntimeError(f"not a run directory file: {path}")
    return unquote(m.group(1)), unquote(m.group(2))


# ---- run metadata -----------------------------------------------------------------------------


def run_metadata(run: RunSource, scenario_text: str | None, verdict_text: str | None, now: str) -> dict:
    """The runs-table row of one run, from its scenario.yaml and verdict.json (either may be absent)."""
    row: dict[str, Any] = {f.name: None for f in S.RUNS_SCHEMA.fields}
    row.update(
        run_id=run.run_id,
        source=run.uri,
        schema_version=S.EVENT_SCHEMA_VERSION,
        event_files=len(run.event_files),
        ingested_at=now,
    )
    problems = []
    checks = list(ALL_CHECKS)
    expect = "pass"
    if scenario_text is not None:
        try:
            # The harness's own loader: the row says what the run ran, resolved as the run resolved it.
            scen = parse_scenario(yaml.safe_load(scenario_text))
            checks = list(scen.checks)
            expect = "pass" if scen.expect_fail is None else f"fail:{scen.expect_fail}"
            row.update(
                scenario=scen.name,
                protocol=scen.protocol,
                transport=scen.transport,
                seed=scen.seed,
                resync=_variant(scen.protocol, scen.config),
                nodes=list(scen.nodes),
                fault_types=fault_types(scen.schedule),
                duration=scen.duration,
                settle=scen.settle,
                recovery_bound=scen.recovery_bound,
                resync_bound=scen.resync_bound,
                xmit_bound=scen.xmit_bound,
                config_json=json.dumps(scen.config, sort_keys=True),
            )
        except (ScenarioError, yaml.YAMLError) as exc:  # a broken scenario.yaml is reported, the events still count
            why = str(exc).replace("\n", "; ")
            problems.append(f"scenario.yaml: {type(exc).__name__}: {why}")
    else:
        problems.append("no scenario.yaml (judged by every check, expect pass)")
    if verdict_text is not None:
        try:
            verdict = json.loads(verdict_text)
            stats = verdict.get("stats") if isinstance(verdict.get("stats"), dict) else {}
            row.update(
                harness_outcome=_str(verdict.get("outcome")),
                harness_failed=[str(x) for x in verdict.get("failed") or []],
                backend=_str(verdict.get("backend")),
                origin_t=0.0 if verdict.get("backend") == "sim" else _float(stats.get("origin_t")),
            )
            if row["seed"] is None and isinstance(verdict.get("seed"), int):
                row["seed"] = verdict["seed"]
        except Exception as exc:
            problems.append(f"verdict.json: {type(exc).__name__}: {exc}")
    if not run.event_files:
        problems.append("no nodes/*/events.jsonl")
    row.update(checks=checks, expect=expect, metadata_error="; ".join(problems) or None)
    return row


def fault_types(schedule: tuple[FaultStep, ...]) -> list[str]:
    """The kinds of fault a schedule applies ("partition-one-way", "loss", "kill", ...), or ["none"]."""
    kinds = []
    for step in schedule:
        key = step.kind
        if key in _NOT_FAULTS:
            continue
        if isinstance(step.params, Partition):
            key = "partition-one-way" if step.params.one_way else "partition-two-way"
        if key not in kinds:
            kinds.append(key)
    return kinds or ["none"]


def _str(value) -> str | None:
    return None if value is None else str(value)


def _float(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _read_small_files(spark: SparkSession | None, uris: list[str]) -> dict[tuple[str, str], str]:
    """(run id, file name) -> text of scenario.yaml / verdict.json files: local ones read here,
    the others in one Spark job."""
    out: dict[tuple[str, str], str] = {}
    remote = []
    for uri in uris:
        # What discover_runs listed locally is a "file:" path (_spark_path), never percent-encoded.
        local = (
            _unescape_glob(uri)[len("file:") :] if uri.startswith("file:/") and not uri.startswith("file://") else None
        )
        if local is None:
            remote.append(uri)
            continue
        with open(local, encoding="utf-8", errors="replace") as f:
            out[_run_and_src(local)] = f.read()
    if remote:
        assert spark is not None, "remote files need a session"
        rows = (
            spark.read.text(remote, wholetext=True)
            .select(F.col("_metadata.file_path").alias("path"), "value")
            .collect()
        )
        out.update({_run_and_src(r["path"]): r["value"] for r in rows})
    return out


def _unescape_glob(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


# ---- the warehouse ----------------------------------------------------------------------------


def warehouse_paths(warehouse: str) -> dict[str, str]:
    base = normalize_uri(warehouse)
    return {
        "events": f"{base}/{EVENTS_DIR}",
        "quarantine": f"{base}/{QUARANTINE_DIR}",
        "runs": f"{base}/{RUNS_DIR}",
        "marker": f"{base}/{SCHEMA_MARKER}",
        "base": base,
    }


def _check_marker(fs: _FS, paths: dict) -> None:
    expected = f"splitbrain event schema v{S.EVENT_SCHEMA_VERSION}"
    found = fs.read_text(paths["marker"])
    if found is None:
        fs.write_text(paths["marker"], expected + "\n")
    elif found.strip() != expected:
        raise InputError(
            f"{paths['base']}: warehouse holds {found.strip()!r}, this pipeline writes {expected!r}; use another --out"
        )


def ingested_run_ids(spark: SparkSession, warehouse: str) -> set[str]:
    paths = warehouse_paths(warehouse)
    if not _FS(spark).exists(paths["runs"]):
        return set()
    return {r[0] for r in load_runs(spark, warehouse).select("run_id").distinct().collect()}


def load_events(spark: SparkSession, warehouse: str, run_ids: list[str] | None = None) -> DataFrame:
    df = spark.read.schema(S.EVENTS_TABLE_SCHEMA).parquet(warehouse_paths(warehouse)["events"])
    return df if run_ids is None else df.where(F.col("run_id").isin(*run_ids))


def load_quarantine(spark: SparkSession, warehouse: str, run_ids: list[str] | None = None) -> DataFrame:
    path = warehouse_paths(warehouse)["quarantine"]
    if not _FS(spark).exists(path):
        return spark.createDataFrame([], S.QUARANTINE_SCHEMA)
    df = spark.read.schema(S.QUARANTINE_SCHEMA).parquet(path)
    return df if run_ids is None else df.where(F.col("run_id").isin(*run_ids))


def load_runs(spark: SparkSession, warehouse: str, run_ids: list[str] | None = None) -> DataFrame:
    df = spark.read.schema(S.RUNS_SCHEMA).parquet(warehouse_paths(warehouse)["runs"])
    return df if run_ids is None else df.where(F.col("run_id").isin(*run_ids))


def run_rows(spark: SparkSession, warehouse: str, run_ids: list[str]) -> dict[str, dict]:
    """run id -> its runs-table row as a dict (if two ingests raced on a run, the first wins)."""
    out: dict[str, dict] = {}
    for r in sorted(load_runs(spark, warehouse, run_ids).collect(), key=lambda r: r["ingested_at"]):
        out.setdefault(r["run_id"], r.asDict(recursive=True))
    return out


def select_runs(spark: SparkSession | None, paths: list[str], only: list[str] | None = None) -> list[RunSource]:
    """discover_runs(paths), with `only` just the runs with those ids (InputError if one is missing)."""
    runs = discover_runs(spark, paths)
    if only is not None:
        wanted = set(only)
        runs = [r for r in runs if r.run_id in wanted]
        missing = wanted - {r.run_id for r in runs}
        if missing:
            raise InputError(f"run directories not found: {', '.join(sorted(missing)[:5])}")
    return runs


def metadata_rows(spark: SparkSession | None, runs: list[RunSource], now: str) -> dict[str, dict]:
    """run id -> runs-table row of each run (its scenario.yaml and verdict.json read)."""
    texts = _read_small_files(spark, [u for r in runs for u in (r.scenario, r.verdict) if u])
    return {
        r.run_id: run_metadata(r, texts.get((r.run_id, "scenario.yaml")), texts.get((r.run_id, "verdict.json")), now)
        for r in runs
    }


def stamp() -> str:
    """An ingest's time, as the runs table stores it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Prejudged:
    """Runs the driver judged itself, with the ingest task's own function, while the session
    started (pipeline.overlap): per run the plan it was judged with, its result document and
    its OUT_SCHEMA rows as Arrow tables (events; quarantined lines, for runs that have any).
    Ingest takes a run from here only if its plan is the one it would give the task."""

    plans: dict[str, tasks.Plan] = field(default_factory=dict)
    results: dict[str, str] = field(default_factory=dict)
    events: dict[str, Any] = field(default_factory=dict)
    quarantine: dict[str, Any] = field(default_factory=dict)


def ingest(
    spark: SparkSession,
    paths: list[str],
    warehouse: str,
    only: list[str] | None = None,
    *,
    timelines: int = 24,
    prejudged: Prejudged | None = None,
    now: str | None = None,
    background: bool = False,
) -> IngestResult:
    """Ingest the run directories named by `paths` (see discover_runs) into `warehouse`; with
    `only`, just the runs with those ids (a campaign's own runs in a shared directory).

    The runs ingested now are judged in the same pass (pipeline.tasks): their results are in
    `IngestResult.results`; `timelines` is how many timelines the report will show (runs that need
    explaining always get theirs computed, and with that few runs or fewer, every run). Runs in
    `prejudged` were already judged on the driver: only their rows are written. `now` is the
    ingest's time in the runs table (default: the time of the call). With `background`, when the
    driver judged every run that has files (so every result is known before the writes), the
    writes run in a thread and the call returns at once: `IngestResult.wait()` waits for them
    (and raises what they raised)."""
    runs = select_runs(spark, paths, only)
    wh = warehouse_paths(warehouse)
    fs = _FS(spark)
    _check_marker(fs, wh)
    result = IngestResult(warehouse=wh["base"])
    done = ingested_run_ids(spark, warehouse)
    new = [r for r in runs if r.run_id not in done]
    result.skipped = [r.run_id for r in runs if r.run_id in done]
    if not new:
        return result

    metas = metadata_rows(spark, new, now or stamp())
    rows = [metas[r.run_id] for r in new]
    plans = timeline_plans(metas, runs, timelines)
    pre = prejudged or Prejudged()
    taken = [r.run_id for r in new if r.run_id in pre.results and pre.plans[r.run_id] == plans[r.run_id]]
    rest = [r for r in new if r.run_id not in taken]
    results: dict[str, dict] = {}
    if _files(rest):
        results.update(_ingest_files(spark, rest, plans, wh))
    results.update(tasks.parse_results({"run_id": rid, "result": pre.results[rid]} for rid in taken))
    for run_id, plan in plans.items():
        if run_id not in results:  # no log file at all: judged on the driver, every check vacuous
            results[run_id] = tasks.empty_result(plan)
    result.ingested = [r.run_id for r in new]
    result.events = {rid: results[rid]["events"] for rid in result.ingested}
    result.quarantined = {rid: results[rid]["quarantined"] for rid in result.ingested if results[rid]["quarantined"]}
    result.results = results
    result.metas = metas

    def commit() -> None:
        _write_prejudged(spark, taken, pre, wh)
        # The runs row is the commit: written last, in one file per ingest call.
        runs_frame(spark, rows).coalesce(1).write.mode("append").parquet(wh["runs"])

    if background and not _files(rest):
        result.writing = Writing(commit)
    else:
        commit()
    return result


def runs_frame(spark: SparkSession, rows: list[dict]) -> DataFrame:
    """Runs-table rows as a DataFrame made from an Arrow table: from a list of dicts Spark
    converts them in a Python worker, whose start cost a one-run analysis 1-2 s of CPU."""
    import pyarrow as pa

    table = pa.Table.from_pylist(rows, schema=tasks.arrow_schema(S.RUNS_SCHEMA))
    return spark.createDataFrame(table, schema=S.RUNS_SCHEMA)


class Writing:
    """An ingest's writes running in a thread: `wait()` joins it and raises what it raised."""

    def __init__(self, write):
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(write,), name="ingest-writes", daemon=True)
        self._thread.start()

    def _run(self, write) -> None:
        try:
            write()
        except BaseException as exc:  # handed to wait()'s caller
            self._error = exc

    def wait(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


def write_events(rows: DataFrame, wh: dict) -> None:
    """Event rows of pipeline.tasks.OUT_SCHEMA into the warehouse's events table."""
    (
        rows.where(F.col("what") == tasks.WHAT_EVENT)
        .select(*[f.name for f in S.EVENTS_TABLE_SCHEMA.fields])
        .write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy("run_id")
        .parquet(wh["events"])
    )


def write_quarantine(rows: DataFrame, wh: dict) -> None:
    """Quarantine rows of pipeline.tasks.OUT_SCHEMA into the warehouse's quarantine table."""
    (
        rows.where(F.col("what") == tasks.WHAT_QUARANTINE)
        .select("src", "file_key", "line", F.col("q_reason").alias("reason"), F.col("q_raw").alias("raw"), "run_id")
        .write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy("run_id")
        .parquet(wh["quarantine"])
    )


def timeline_plans(metas: dict[str, dict], runs: list, timelines: int) -> dict[str, tasks.Plan]:
    """run id -> (checks, bounds, timeline always): a run gets its timeline computed when
    it needs explaining (decided in its task) or when the report shows it anyway: with few runs,
    every run; otherwise the first run of each scenario."""
    from . import judging as J

    every = len(runs) <= timelines
    first: set[str] = set()
    seen: set = set()
    for run_id in sorted(metas):
        scen = metas[run_id].get("scenario")
        if scen not in seen:
            seen.add(scen)
            first.add(run_id)
    out = {}
    for run_id, meta in metas.items():
        names, bound = J.plan(meta, KNOWN_CHECKS)
        out[run_id] = (names, bound, every or run_id in first)
    return out


def _ingest_files(spark: SparkSession, runs: list[RunSource], plans: dict, wh: dict) -> dict[str, dict]:
    """Read, classify, judge and write `runs`: local runs into a local warehouse in tasks that read
    and write the files themselves (pipeline.local_ingest), the others in one Spark job
    (pipeline.tasks); their result documents. Runs with quarantined lines are read again by Spark
    for those lines alone."""
    from . import judging as J
    from . import local_ingest as LI

    default = (list(ALL_CHECKS), J.bounds({}), True)
    results, runs = LI.ingest_local(spark, runs, plans, default, wh)
    if not _files(runs):
        return results
    acc = tasks.results_accumulator(spark)
    write_events(_run_tasks(spark, _files(runs), tasks.ingest_function(plans, default, acc)), wh)
    results.update(tasks.parse_results({"run_id": k, "result": v} for k, v in acc.value.items()))
    again = [r for r in runs if results.get(r.run_id, {}).get("quarantined")]
    if again:
        fn = tasks.ingest_function(plans, default, acc, tasks.EMIT_QUARANTINE)
        write_quarantine(_run_tasks(spark, _files(again), fn), wh)
    return results


def _write_prejudged(spark: SparkSession, run_ids: list[str], pre: Prejudged, wh: dict) -> None:
    """The rows of runs the driver judged: into a local warehouse by the driver itself
    (pipeline.partition_write), elsewhere by Spark from the driver's Arrow tables."""
    left = []
    for rid in run_ids:
        events_dir = PW.local_partition(_local_path(wh["events"]), rid)
        quarantine_dir = PW.local_partition(_local_path(wh["quarantine"]), rid)
        if events_dir is None or quarantine_dir is None:
            left.append(rid)
            continue
        PW.replace_partition(events_dir, _event_columns(pre.events[rid]))
        if rid in pre.quarantine:
            PW.replace_partition(quarantine_dir, _quarantine_columns(pre.quarantine[rid]))
    if left:
        write_events(_driver_rows(spark, [pre.events[rid] for rid in left]), wh)
    bad = [pre.quarantine[rid] for rid in left if rid in pre.quarantine]
    if bad:
        write_quarantine(_driver_rows(spark, bad), wh)


def _event_columns(table):
    """OUT_SCHEMA rows' events as a partition of the events table holds them (write_events)."""
    import pyarrow.compute as pc

    names = [f.name for f in S.EVENTS_TABLE_SCHEMA.fields if f.name != "run_id"]
    return table.filter(pc.equal(table["what"], tasks.WHAT_EVENT)).select(names)


def _quarantine_columns(table):
    """OUT_SCHEMA rows' quarantined lines as a partition of the quarantine table holds them."""
    import pyarrow.compute as pc

    rows = table.filter(pc.equal(table["what"], tasks.WHAT_QUARANTINE))
    return rows.select(["src", "file_key", "line", "q_reason", "q_raw"]).rename_columns(
        ["src", "file_key", "line", "reason", "raw"]
    )


def _driver_rows(spark: SparkSession, tables: list) -> DataFrame:
    """OUT_SCHEMA rows made on the driver, as one partition (one file per run, as a task writes).
    Tables without rows are left out: the JVM's Arrow stream reader takes an empty batch for the
    end of the stream and would drop every batch after it."""
    import pyarrow as pa

    rows = [t for t in tables if t.num_rows]
    table = pa.concat_tables(rows) if rows else tasks.arrow_schema(tasks.OUT_SCHEMA).empty_table()
    return spark.createDataFrame(table, schema=tasks.OUT_SCHEMA).coalesce(1)


def _files(runs: list[RunSource]) -> list[str]:
    return [u for r in runs for u in [f[0] for f in r.event_files] + ([r.timeline] if r.timeline else [])]


def _run_tasks(spark: SparkSession, files: list[str], fn) -> DataFrame:
    """One task per run over its files' whole texts (Spark's text source, wholetext)."""
    texts = spark.read.text(files, wholetext=True).select(F.col("_metadata.file_path").alias("path"), "value")
    run_key = F.regexp_extract("path", r"/([^/]+)/(?:nodes/[^/]+/events\.jsonl|timeline\.jsonl)$", 1)
    return texts.groupBy(run_key.alias("rk")).applyInArrow(fn, tasks.OUT_SCHEMA)
