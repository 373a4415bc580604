"""Ingest: run directories (any Hadoop-compatible URI) into one Parquet warehouse, append-only and
idempotent.

Theory of operation. A run directory (DESIGN.md) holds nodes/<name>/events.jsonl, timeline.jsonl,
scenario.yaml and verdict.json. Ingest lists them with Hadoop's FileSystem (so file:, hdfs:,
s3a: ... all work), reads every log line as text with its file and block offset, numbers the
lines, parses them against the explicit schema (pipeline.schema) and writes

    <warehouse>/events/run_id=<run>/       one row per event, with src, file_key and line
    <warehouse>/quarantine/run_id=<run>/   lines that are not events, with the reason
    <warehouse>/runs/                      one row per run: scenario, protocol, seed, backend,
                                           expect, resync mode, fault types, harness outcome

The run id is the run directory's name. A run already in the runs table is skipped, so ingesting
the same directory twice adds nothing; the runs row is written last, so a run whose ingest died
half way is not in the table and is ingested again, its partitions overwritten in place (dynamic
partition overwrite), never duplicated. One writer per warehouse at a time.

Line numbers: Spark reads a file in blocks; monotonically_increasing_id() increases along the rows
of one block, so (block start, id) orders a file's lines and a small per-block count turns that
into the 1-based line number harness.eventlog reports. `file_key` sorts files the way
harness.eventlog.read_run merges them (node logs by node directory name, then the timeline), so
(t, file_key, line) is exactly the order the plain-Python checkers walk.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

import yaml
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from harness.checks import GENERAL_CHECKS
from harness.scenario import ALWAYS_CHECKS, DEFAULT_CHECKS, default_checks
from node import protocols

from . import schema as S

EVENTS_DIR = "events"
QUARANTINE_DIR = "quarantine"
RUNS_DIR = "runs"
SCHEMA_MARKER = "_SPLITBRAIN_SCHEMA"

# Checks a run without scenario.yaml is judged by (every check the harness knows).
ALL_CHECKS = GENERAL_CHECKS
# What a scenario file without `checks:` is judged by when its protocol is unknown here.
SCENARIO_DEFAULT_CHECKS = DEFAULT_CHECKS


def _default_checks(protocol, membership: str = "static") -> tuple[str, ...]:
    try:
        return default_checks(protocol, membership)
    except ValueError:
        return SCENARIO_DEFAULT_CHECKS


def _variant(protocol, config: dict) -> str | None:
    """The protocol variant a run used (UNICAST3: its resync mode), for pass rates per variant."""
    try:
        return protocols.get(protocol).variant(config)
    except ValueError:
        return None


# Schedule steps that are not faults of their own for pass rates by fault type.
_NOT_FAULTS = frozenset({"heal", "resume"})

_JSON_OPTIONS = {
    "mode": "PERMISSIVE",
    "columnNameOfCorruptRecord": "_corrupt",
    "allowSingleQuotes": "false",
    "allowNonNumericNumbers": "false",
    "allowNumericLeadingZeros": "false",
    "allowUnquotedControlChars": "false",
    "allowBackslashEscapingAnyCharacter": "false",
    "allowComments": "false",
}


_SYNTAX_ONLY = T.StructType([T.StructField("_corrupt", T.StringType())])


class InputError(ValueError):
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


def discover_runs(spark: SparkSession, paths: list[str]) -> list[RunSource]:
    """Run directories named by `paths`: each is a run directory (it has nodes/) or a directory
    whose children are run directories (a campaign's output). Raises InputError naming the path."""
    if not paths:
        raise InputError("no run directories given")
    fs = _FS(spark)
    runs: dict[str, RunSource] = {}
    for raw in paths:
        uri = normalize_uri(raw)
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


def read_lines(spark: SparkSession, runs: list[RunSource]) -> DataFrame:
    """Every line of every log file of `runs`: value, run_id, src, file_key, line (1-based)."""
    files = []
    for run in runs:
        for uri, node_dir in run.event_files:
            files.append((uri, run.run_id, f"nodes/{node_dir}/events.jsonl", file_key(node_dir)))
        if run.timeline is not None:
            files.append((run.timeline, run.run_id, "timeline.jsonl", file_key(None)))
    if not files:
        return spark.createDataFrame([], "value string, run_id string, src string, file_key string, line long")
    raw = spark.read.text([f[0] for f in files]).select(
        "value",
        F.col("_metadata.file_path").alias("path"),
        F.col("_metadata.file_block_start").alias("block"),
        F.monotonically_increasing_id().alias("mid"),
    )
    # One small job: rows per block, so each row's line number is its block's offset in the file
    # plus its position in the block. The same file list gives the same splits and ids again.
    blocks = raw.groupBy("path", "block").agg(F.min("mid").alias("mid0"), F.count("*").alias("n")).collect()
    known = {(f[1], f[2]): f[3] for f in files}
    offsets = []
    done: dict[str, int] = {}
    for row in sorted(blocks, key=lambda r: (r["path"], r["block"])):
        run_id, src = _run_and_src(row["path"])
        if (run_id, src) not in known:
            raise RuntimeError(f"Spark read a file ingest did not list: {row['path']}")
        start = done.get(row["path"], 0)
        offsets.append((row["path"], row["block"], row["mid0"], start, run_id, src, known[(run_id, src)]))
        done[row["path"]] = start + row["n"]
    meta = spark.createDataFrame(
        offsets, "path string, block long, mid0 long, offset long, run_id string, src string, file_key string"
    )
    return raw.join(F.broadcast(meta), ["path", "block"]).select(
        "value", "run_id", "src", "file_key", (F.col("offset") + F.col("mid") - F.col("mid0") + 1).alias("line")
    )


_FILE_RE = re.compile(r"/([^/]+)/(nodes/([^/]+)/events\.jsonl|timeline\.jsonl|scenario\.yaml|verdict\.json)$")


def _run_and_src(path: str) -> tuple[str, str]:
    """(run id, path inside the run) of a file URI as Spark reports it (URL-encoded)."""
    m = _FILE_RE.search(path)
    if m is None:
        raise RuntimeError(f"not a run directory file: {path}")
    return unquote(m.group(1)), unquote(m.group(2))


def parse_events(lines: DataFrame) -> DataFrame:
    """lines (value + provenance) -> provenance, every event field, `bad` (why the line is
    quarantined; null for an event) and `blank`. A pure transform: the rules of pipeline.schema
    as column expressions.

    Cost: every line pays one JSON parse, one regex that lists its keys and a few cheap matches;
    a line with a backslash or more than one pair of braces also one regex pass that blanks out
    its string values (the skeleton); the per-field type checks run only for the rare line that
    a cheap flag marks as suspicious."""
    value = F.col("value")
    parsed_schema = T.StructType(S.EVENT_SCHEMA_V1.fields + [T.StructField("_corrupt", T.StringType())])
    # The skeleton (string values blanked out) is what the structural rules look at. A line with
    # no backslash and exactly one '{' and one '}' needs none: no string in it can hold a quote,
    # a brace or a key, so the patterns of pipeline.schema read the line itself the same way.
    braces = (
        F.length(value) - F.length(F.replace(value, F.lit("{"), F.lit(""))),
        F.length(value) - F.length(F.replace(value, F.lit("}"), F.lit(""))),
    )
    plain = (F.instr(value, "\\") == 0) & (braces[0] == 1) & (braces[1] == 1)
    df = lines.select(
        "*",
        value.rlike(S.BLANK_RE).alias("blank"),
        F.from_json(value, parsed_schema, _JSON_OPTIONS).alias("e"),
        F.when(plain, value)
        .otherwise(F.regexp_replace(value, S.STRING_TOKEN_RE, S.SKELETON_REPLACEMENT))
        .alias("_skel"),
    )
    skel = F.col("_skel")
    df = df.select("*", F.regexp_extract_all(skel, F.lit(S.KEY_RE), 1).alias("_keys"))
    keys, e = F.col("_keys"), F.col("e")

    def has(name: str) -> F.Column:
        return F.array_contains(keys, name)

    def q(col: F.Column) -> F.Column:
        return F.concat(F.lit("'"), col, F.lit("'"))

    def str_valued(name: str) -> F.Column:
        return skel.rlike(rf'"{name}"{S.WS}*:{S.WS}*(?:S|")')

    # Cheap flags, computed once per line: Spark could not type some field, a top-level null, a
    # string field holding something else, or a list field (whose elements need a look). Only a
    # flagged line pays for the per-field checks.
    corrupt = e["_corrupt"].isNotNull()
    suspicious = (
        corrupt
        | skel.rlike(S.NULL_VALUE_RE)
        | skel.rlike(S.STR_FIELD_NOT_STRING_RE)
        | e["ranges"].isNotNull()
        | e["members"].isNotNull()
    )
    field_bad = None
    for name, kind in S.FIELD_TYPES.items():
        if name in ("v", "t"):
            continue  # checked below
        col = e[name]
        if kind == S.STR:
            wrong = has(name) & ~str_valued(name)
        elif kind == S.RANGES:
            wrong = has(name) & (col.isNull() | F.exists(col, lambda r: r.isNull() | F.exists(r, lambda x: x.isNull())))
        elif kind == S.STRLIST:
            wrong = has(name) & (col.isNull() | ~skel.rlike(S.MEMBERS_OK_RE))
        else:  # int, bool: JSON null, another type or an int beyond 64 bits leave the column null
            wrong = col.isNull() & has(name)
        text = F.lit(f"field '{name}' should be {kind}")
        field_bad = F.when(wrong, text) if field_bad is None else field_bad.when(wrong, text)
    df = df.select("*", corrupt.alias("_corrupt_flag"), F.when(suspicious, field_bad).alias("_field_bad"))
    corrupt = F.col("_corrupt_flag")
    str_not_str = F.col("_field_bad").isNotNull()

    t = e["t"]
    # A t that is missing, null, a string (even "NaN") or a boolean leaves the column null.
    bad_t = t.isNull() | F.isnan(t) | (F.abs(t) == float("inf"))
    dup_key = F.filter(keys, lambda k, i: F.array_position(keys, k) < i + 1)[0]
    unknown = F.array_except(keys, F.array(*[F.lit(f) for f in S.FIELDS]))
    reason = (
        F.when(F.col("blank"), F.lit(None))
        .when(~skel.rlike(S.FLAT_OBJECT_RE), F.lit(S.REASON_NOT_JSON))
        .when((F.instr(value, "\\") > 0) & skel.rlike(S.ESCAPED_KEY_RE), F.lit(S.REASON_NOT_JSON))
        # A record Spark could not fully type is either not JSON or has a field of another type:
        # parsing it again with no fields at all tells the two apart (only such records pay).
        .when(
            corrupt & F.from_json(value, _SYNTAX_ONLY, _JSON_OPTIONS)["_corrupt"].isNotNull(), F.lit(S.REASON_NOT_JSON)
        )
        .when(F.size(keys) != F.size(F.array_distinct(keys)), F.concat(F.lit("duplicate field "), q(dup_key)))
        .when(bad_t, F.lit(S.REASON_BAD_T))
    )
    for name in ("v", "node", "proto", "kind"):
        reason = reason.when(e[name].isNull() & ~has(name), F.lit(f"missing required field '{name}'"))
    reason = (
        reason.when(e["v"].isNull(), F.lit("field 'v' should be int"))
        .when(e["v"] != S.EVENT_VERSION, F.concat(F.lit("unsupported event version "), e["v"].cast("string")))
        .when(str_not_str & ~str_valued("kind"), F.lit("field 'kind' should be str"))
        .when(~e["kind"].isin(*S.event_kinds()), F.concat(F.lit("unknown event kind "), q(e["kind"])))
        .when(F.size(unknown) > 0, F.concat(F.lit("unknown event field "), q(unknown[0])))
        .when(F.col("_field_bad").isNotNull(), F.col("_field_bad"))
    )
    app = e["app"]
    app_ok = (
        app.rlike(S.APP_OK_RE)
        & app_int(F.substring_index(app, ":", -1)).isNotNull()
        & app_int(F.substring_index(F.substring_index(app, ":", -2), ":", 1)).isNotNull()
    )
    reason = reason.when(
        (e["kind"] == "deliver") & app.isNotNull() & ~app_ok, F.concat(F.lit("malformed app id "), q(app))
    )
    out = df.select(
        "run_id",
        "src",
        "file_key",
        "line",
        *[e[f.name].alias(f.name) for f in S.EVENT_SCHEMA_V1.fields],
        reason.alias("bad"),
        "blank",
        value,
    )
    # The raw line is kept for the quarantine only (a cached parse stays small).
    return out.withColumn("raw", F.when(F.col("bad").isNotNull(), F.col("value"))).drop("value")


def app_int(text: F.Column) -> F.Column:
    """Python int() of an app id part: optional whitespace and sign, digits with single '_'."""
    return F.replace(F.trim(text, F.lit(" \t\n\u000b\f\r")), F.lit("_"), F.lit("")).try_cast("long")


def with_seq(events: DataFrame) -> DataFrame:
    """Number each run's events in the order (t, file_key, line): the one sort by time a run
    needs; every check then orders by this long (schema.SEQ)."""
    w = Window.partitionBy("run_id").orderBy("t", "file_key", "line")
    return events.withColumn("seq", F.row_number().over(w).cast("long"))


def events_of(parsed: DataFrame) -> DataFrame:
    """The rows of parse_events that are events, numbered (with_seq), in the events table's
    column order."""
    events = parsed.where(~F.col("blank") & F.col("bad").isNull())
    return with_seq(events).select(*[f.name for f in S.EVENTS_TABLE_SCHEMA.fields])


def quarantine_of(parsed: DataFrame) -> DataFrame:
    """The rows of parse_events that are not events, with their reason and (cut) raw line."""
    return parsed.where(F.col("bad").isNotNull()).select(
        "src",
        "file_key",
        "line",
        F.col("bad").alias("reason"),
        F.substring("raw", 1, S.RAW_MAX_CHARS).alias("raw"),
        "run_id",
    )


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
            scen = yaml.safe_load(scenario_text)
            if not isinstance(scen, dict):
                raise ValueError("not a mapping")
            config = scen.get("config") or {}
            protocol = scen.get("protocol")
            checks = list(scen.get("checks") or _default_checks(protocol, scen.get("membership") or "static"))
            checks += [c for c in ALWAYS_CHECKS if c not in checks]
            raw_expect = scen.get("expect", "pass")
            expect = f"fail:{raw_expect['fail']}" if isinstance(raw_expect, dict) else str(raw_expect)
            nodes = scen.get("nodes")
            if isinstance(nodes, int):
                nodes = [_letters(i) for i in range(nodes)]
            row.update(
                scenario=_str(scen.get("name")),
                protocol=_str(protocol),
                transport=_str(scen.get("transport")),
                seed=scen.get("seed") if isinstance(scen.get("seed"), int) else None,
                resync=_variant(protocol, config),
                nodes=[str(n) for n in nodes] if isinstance(nodes, list) else None,
                fault_types=fault_types(scen.get("schedule") or []),
                duration=_float(scen.get("duration")),
                settle=_float(scen.get("settle")),
                recovery_bound=_float(scen.get("recovery_bound")),
                config_json=json.dumps(config, sort_keys=True),
            )
        except Exception as exc:  # a broken scenario.yaml is reported, the events still count
            problems.append(f"scenario.yaml: {type(exc).__name__}: {exc}")
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


def fault_types(schedule: list) -> list[str]:
    """The kinds of fault a schedule applies ("partition-one-way", "loss", "kill", ...), or ["none"]."""
    kinds = []
    for step in schedule:
        if not isinstance(step, dict):
            continue
        for key, body in step.items():
            if key == "at" or key in _NOT_FAULTS:
                continue
            if key == "partition":
                key = "partition-two-way" if isinstance(body, list) else "partition-one-way"
            if key not in kinds:
                kinds.append(key)
    return kinds or ["none"]


def _letters(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else chr(ord("A") + i // 26 - 1) + chr(ord("A") + i % 26)


def _str(value) -> str | None:
    return None if value is None else str(value)


def _float(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _read_small_files(spark: SparkSession, uris: list[str]) -> dict[tuple[str, str], str]:
    """(run id, file name) -> text of scenario.yaml / verdict.json files, in one Spark job."""
    if not uris:
        return {}
    rows = spark.read.text(uris, wholetext=True).select(F.col("_metadata.file_path").alias("path"), "value").collect()
    return {_run_and_src(r["path"]): r["value"] for r in rows}


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


def ingest(spark: SparkSession, paths: list[str], warehouse: str, only: list[str] | None = None) -> IngestResult:
    """Ingest the run directories named by `paths` (see discover_runs) into `warehouse`; with
    `only`, just the runs with those ids (a campaign's own runs in a shared directory)."""
    runs = discover_runs(spark, paths)
    if only is not None:
        wanted = set(only)
        runs = [r for r in runs if r.run_id in wanted]
        missing = wanted - {r.run_id for r in runs}
        if missing:
            raise InputError(f"run directories not found: {', '.join(sorted(missing)[:5])}")
    wh = warehouse_paths(warehouse)
    fs = _FS(spark)
    _check_marker(fs, wh)
    result = IngestResult(warehouse=wh["base"])
    done = ingested_run_ids(spark, warehouse)
    new = [r for r in runs if r.run_id not in done]
    result.skipped = [r.run_id for r in runs if r.run_id in done]
    if not new:
        return result

    parsed = parse_events(read_lines(spark, new)).persist()
    try:
        counts = {
            r["run_id"]: (r["events"], r["quarantined"])
            for r in parsed.groupBy("run_id")
            .agg(
                F.sum(F.when(~F.col("blank") & F.col("bad").isNull(), 1).otherwise(0)).alias("events"),
                F.sum(F.when(F.col("bad").isNotNull(), 1).otherwise(0)).alias("quarantined"),
            )
            .collect()
        }
        (
            events_of(parsed)
            .write.mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .partitionBy("run_id")
            .parquet(wh["events"])
        )
        if any(q for _, q in counts.values()):
            (
                quarantine_of(parsed)
                .write.mode("overwrite")
                .option("partitionOverwriteMode", "dynamic")
                .partitionBy("run_id")
                .parquet(wh["quarantine"])
            )
    finally:
        parsed.unpersist()

    texts = _read_small_files(spark, [u for r in new for u in (r.scenario, r.verdict) if u])
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    rows = [
        run_metadata(r, texts.get((r.run_id, "scenario.yaml")), texts.get((r.run_id, "verdict.json")), now) for r in new
    ]
    # The runs row is the commit: written last, in one file per ingest call.
    spark.createDataFrame(rows, S.RUNS_SCHEMA).coalesce(1).write.mode("append").parquet(wh["runs"])
    result.ingested = [r.run_id for r in new]
    result.events = {rid: c[0] for rid, c in counts.items()}
    result.quarantined = {rid: c[1] for rid, c in counts.items() if c[1]}
    for rid in result.ingested:
        result.events.setdefault(rid, 0)
    return result
