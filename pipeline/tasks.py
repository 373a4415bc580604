"""Spark's side of judging run by run: the Arrow tables that go in and out of the per-run tasks.

Theory of operation. Spark lists, distributes and writes; pipeline.runwise does the per-run work
in plain Python. Three task shapes, each `groupBy(...).applyInArrow` (one call per run) or
`mapInArrow`:

- `ingest_runs`: the whole texts of a run's files (one row per file, from Spark's text source
  with wholetext) -> the run's events (numbered, with provenance), its quarantined lines and one
  result row (check results, metric rows, a timeline if asked for);
- `judge_stored`: a run's events as stored in the warehouse -> its result row;
- `simulate_seeds` (pipeline.campaign): seeds -> the same rows as `ingest_runs`, the logs made by
  the simulator inside the task instead of read from files.

All of them return OUT_SCHEMA: `what` says which kind a row is ("e" event, "q" quarantined line,
"r" result); the other columns are null where a kind does not set them. Ingest and campaigns run
one Spark job, the write of the events: their tasks emit only event rows and hand each run's result
document (small: one JSON document per run) to the driver through an accumulator (`Results`).
Caching the tasks' output to write events, quarantine and results from it cost about a third of
the CPU of a one-run analysis (measured: 15 s vs 10.7 s of JVM and worker CPU for 258 k events).
Quarantined lines are rare (a torn last line after a kill): the runs that have any are processed
a second time, emitting only those lines (`EMIT_QUARANTINE`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from itertools import chain

from pyspark.accumulators import AccumulatorParam
from pyspark.sql import types as T

from . import runwise as R
from . import schema as S

WHAT_EVENT, WHAT_QUARANTINE, WHAT_RESULT = "e", "q", "r"

OUT_SCHEMA = T.StructType(
    [
        T.StructField("what", T.StringType(), False),
        T.StructField("run_id", T.StringType(), False),
        T.StructField("src", T.StringType(), True),
        T.StructField("file_key", T.StringType(), True),
        T.StructField("line", T.LongType(), True),
        T.StructField("seq", T.LongType(), True),
        *S.EVENT_SCHEMA_V1.fields,
        # A quarantined line's reason and text (events have a `reason` field of their own).
        T.StructField("q_reason", T.StringType(), True),
        T.StructField("q_raw", T.StringType(), True),
        T.StructField("result", T.StringType(), True),
    ]
)

RESULT_SCHEMA = T.StructType([T.StructField("run_id", T.StringType(), False), T.StructField("result", T.StringType())])

# plan: run id -> (check names, bounds (pipeline.judging.bounds), whether the report wants its timeline)
Plan = tuple[list[str], dict, bool]

# What a task emits: the events (and its result through the accumulator), or only the quarantine.
EMIT_EVENTS, EMIT_QUARANTINE = "events", "quarantine"


class Results(AccumulatorParam):
    """run id -> result document (JSON text), gathered from the tasks. A task that runs again
    (retried, speculative) adds the same document for the same run: merging by run id keeps one."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, value1: dict, value2: dict) -> dict:
        value1.update(value2)
        return value1


def results_accumulator(spark):
    return spark.sparkContext.accumulator({}, Results())


def emitted(run_id: str, events: list[dict], bad: list[dict], result: str, results, emit: str):
    """A run's OUT_SCHEMA rows for `emit`; with EMIT_EVENTS its result goes to `results`."""
    if emit == EMIT_QUARANTINE:
        return out_table(run_id, [], bad, None)
    results.add({run_id: result})
    return out_table(run_id, events, [], None)


def _arrow_type(dt):
    import pyarrow as pa

    if isinstance(dt, T.StringType):
        return pa.string()
    if isinstance(dt, T.LongType):
        return pa.int64()
    if isinstance(dt, T.IntegerType):
        return pa.int32()
    if isinstance(dt, T.DoubleType):
        return pa.float64()
    if isinstance(dt, T.BooleanType):
        return pa.bool_()
    if isinstance(dt, T.ArrayType):
        return pa.list_(_arrow_type(dt.elementType))
    raise TypeError(dt)


def arrow_schema(schema: T.StructType):
    import pyarrow as pa

    return pa.schema([pa.field(f.name, _arrow_type(f.dataType), f.nullable) for f in schema.fields])


def result_document(events: list[dict], plan: Plan, quarantined: int) -> str:
    """The result row's JSON: check results, result parts, counts and (if planned) the timeline."""
    names, bound, want_timeline = plan
    doc = R.analyze_events(events, names, bound)
    doc["events"] = len(events)
    doc["quarantined"] = quarantined
    if want_timeline:
        from .timeline import timeline_of

        doc["timeline"] = timeline_of(events)
    return json.dumps(doc, separators=(",", ":"))


def _array(values: list, typ):
    """pa.array, except that a string no UTF-8 can hold (a lone surrogate, from a \\ud800 escape)
    is stored with U+FFFD in its place, as Spark's own JSON reader stored it, and an int too big
    for 64 bits in a float field as the float it stands for."""
    import pyarrow as pa

    try:
        return pa.array(values, type=typ)
    except UnicodeEncodeError:
        return pa.array([_clean(v) for v in values], type=typ)
    except (pa.ArrowInvalid, OverflowError):
        if typ != pa.float64():
            raise
        # A float field may hold an int beyond 64 bits (2**70 is a finite number of seconds).
        return pa.array([None if v is None else float(v) for v in values], type=typ)


def _clean(value):
    if isinstance(value, str):
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in value)
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def out_table(run_id: str, events: list[dict], bad: list[dict], result: str | None):
    """OUT_SCHEMA rows of one run as an Arrow table, built column by column (a column no event
    of the run has is one block of nulls)."""
    import pyarrow as pa

    n_e, n_q = len(events), len(bad)
    n_r = 0 if result is None else 1
    total = n_e + n_q + n_r
    schema = arrow_schema(OUT_SCHEMA)
    heads = _event_columns(events, schema)

    def col(name: str, values: list):
        return pa.array(values, type=schema.field(name).type)

    def events_then(name: str, key: str, from_bad: list | None):
        typ = schema.field(name).type
        head = heads[key]
        tail = pa.array((from_bad if from_bad is not None else [None] * n_q) + [None] * n_r, type=typ)
        return pa.concat_arrays([head, tail])

    arrays = {
        "what": col("what", [WHAT_EVENT] * n_e + [WHAT_QUARANTINE] * n_q + [WHAT_RESULT] * n_r),
        "run_id": col("run_id", [run_id] * total),
        "src": events_then("src", "_src", [q["src"] for q in bad]),
        "file_key": events_then("file_key", "_fk", [q["file_key"] for q in bad]),
        "line": events_then("line", "_line", [q["line"] for q in bad]),
        "seq": events_then("seq", "_seq", None),
        "q_reason": col("q_reason", [None] * n_e + [q["reason"] for q in bad] + [None] * n_r),
        "q_raw": col("q_raw", [None] * n_e + [q["raw"] for q in bad] + [None] * n_r),
        "result": col("result", [None] * (n_e + n_q) + ([result] if result is not None else [])),
    }
    for f in S.EVENT_SCHEMA_V1.fields:
        arrays[f.name] = events_then(f.name, f.name, None)
    return pa.Table.from_arrays([arrays[f.name] for f in schema], schema=schema)


# The keys of a runwise event and the OUT_SCHEMA column each goes to.
_EVENT_KEYS = {"_src": "src", "_fk": "file_key", "_line": "line", "_seq": "seq", **{n: n for n in S.FIELDS}}


def _event_columns(events: list[dict], schema) -> dict:
    """event key -> Arrow column of the events. One pass of Arrow's converter over the dicts (a
    struct array; measured 0.5 s instead of 2.2 s of CPU for 258 k events); when it refuses a
    value (a lone surrogate, an int beyond 64 bits in a float field), column by column with
    _array's repairs."""
    import pyarrow as pa

    fields = [pa.field(key, schema.field(name).type) for key, name in _EVENT_KEYS.items()]
    try:
        struct = pa.array(events, type=pa.struct(fields))
        return {f.name: struct.field(i) for i, f in enumerate(fields)}
    except (UnicodeEncodeError, pa.ArrowException, OverflowError, TypeError, ValueError):
        present = set(chain.from_iterable(map(dict.keys, events)))
        return {
            f.name: _array([e.get(f.name) for e in events], f.type)
            if f.name in present
            else pa.nulls(len(events), f.type)
            for f in fields
        }


def events_table(events: list[dict]):
    """Ordered runwise events as the columns of their events-table partition (EVENTS_TABLE_SCHEMA
    but run_id, in OUT_SCHEMA's types: what ingest writes)."""
    import pyarrow as pa

    schema = arrow_schema(OUT_SCHEMA)
    columns = _event_columns(events, schema)
    fields = [schema.field(name) for name in _EVENT_KEYS.values()]
    return pa.Table.from_arrays([columns[key] for key in _EVENT_KEYS], schema=pa.schema(fields))


def event_rows(run_id: str, table):
    """OUT_SCHEMA rows of a run's events given as their events_table columns."""
    import pyarrow as pa

    n = table.num_rows
    columns = {name: table.column(name) for name in table.column_names}
    columns["what"] = pa.array([WHAT_EVENT] * n, pa.string())
    columns["run_id"] = pa.array([run_id] * n, pa.string())
    schema = arrow_schema(OUT_SCHEMA)
    return pa.Table.from_arrays([columns.get(f.name, pa.nulls(n, f.type)) for f in schema], schema=schema)


def run_document(events: list[dict], table, plain: bool, plan: Plan, quarantined: int) -> str:
    """result_document of ordered events. Plain events (runwise.classify_run: every line taken by
    the fast path, no int in a float field; strings from the parser are UTF-8, ints in 64 bits)
    are taken by Arrow as they are, so their columns (`table`, events_table) read back as these
    very dicts: they are judged on the columns (stored_result_document, the same text, tested);
    other runs on the dicts."""
    if events and plain:
        return stored_result_document(table, plan, quarantined)
    return result_document(events, plan, quarantined)


def file_texts(column) -> list[str | None]:
    """The files' texts. Spark's text source passes a file's bytes on unchecked: one that is not
    UTF-8 is decoded as the harness reads node logs, each bad byte a U+FFFD."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        import pyarrow as pa

        raw = column.cast(pa.binary()).to_pylist()
        return [None if data is None else data.decode("utf-8", errors="replace") for data in raw]


def ingest_function(plans: dict[str, Plan], default: Plan, results, emit: str = EMIT_EVENTS) -> Callable:
    """The applyInArrow function of ingest: one run's files (path, value) -> OUT_SCHEMA rows of
    `emit`, the result document into the accumulator `results`."""

    def run(table):
        from .ingest import _run_and_src

        paths = table.column("path").to_pylist()
        texts = file_texts(table.column("value"))
        files = []
        run_id = ""
        for path, text in zip(paths, texts):
            run_id, src = _run_and_src(path)
            files.append((src, text or ""))
        files.sort()
        if emit == EMIT_QUARANTINE:  # the run's result is known from the first pass
            return out_table(run_id, [], R.classify_run(files)[1], None)
        table, _bad, result = judge_texts(files, plans.get(run_id, default))
        results.add({run_id: result})
        return event_rows(run_id, table)

    return run


def judge_texts(files: list[tuple[str, str]], plan: Plan) -> tuple[object, list[dict], str]:
    """The per-run judge of every ingest path (Spark's tasks, pipeline.local_ingest's, the
    driver's in pipeline.overlap): a run's files (src, text), sorted by src -> its events
    partition's columns (events_table), its quarantined lines and its result document."""
    events, bad, plain = R.classify_run(files)
    R.order(events)
    table = events_table(events)
    return table, bad, run_document(events, table, plain, plan, len(bad))


def stored_events(table) -> list[dict]:
    """Events as the warehouse stores them (EVENTS_TABLE_SCHEMA rows) -> ordered runwise events."""
    cols = {name: table.column(name).to_pylist() for name in S.FIELDS}
    seq = table.column("seq").to_pylist()
    fk = table.column("file_key").to_pylist()
    line = table.column("line").to_pylist()
    src = table.column("src").to_pylist()
    names = S.FIELDS
    columns = [cols[n] for n in names]
    events = []
    for i in range(len(seq)):
        ev = {n: c[i] for n, c in zip(names, columns) if c[i] is not None}
        ev["_seq"] = seq[i]
        ev["_fk"] = fk[i]
        ev["_line"] = line[i]
        ev["_src"] = src[i]
        events.append(ev)
    events.sort(key=lambda e: e["_seq"])
    return events


def judge_function(plans: dict[str, Plan], quarantined: dict[str, int]) -> Callable:
    """The applyInArrow function judging a run from the warehouse -> one RESULT_SCHEMA row."""

    def run(table):
        import pyarrow as pa

        run_id = table.column("run_id")[0].as_py()
        doc = stored_result_document(table, plans[run_id], quarantined.get(run_id, 0))
        return pa.table({"run_id": [run_id], "result": [doc]}, schema=arrow_schema(RESULT_SCHEMA))

    return run


def stored_result_document(table, plan: Plan, quarantined: int, full: Callable | None = None) -> str:
    """result_document of a run's stored events, from its columns where pipeline.columnar and
    pipeline.columnar_parts handle the run (the same text, tested); the events become dicts only
    for what they leave to the exact path (a run they cannot prove they handle, a timeline).
    `full()` gives the run's table with every column when `table` has only the judged ones."""
    from .columnar import judge_table
    from .columnar_apps import AppIds
    from .columnar_parts import parts_of_table

    names, bound, want_timeline = plan
    apps = AppIds(table.column("app"))  # split and coded once for both kernels
    results, _why = judge_table(table, names, bound, apps)
    parts = parts_of_table(table, apps)
    exact = results is None or parts is None or want_timeline
    events = stored_events(full() if full is not None else table) if exact else []
    if results is None:
        results = R.judge(events, names, bound)
    if parts is None:
        parts = R.result_parts(events)
    doc = {"results": results, "parts": parts, "events": table.num_rows, "quarantined": quarantined}
    if want_timeline:
        from .timeline import timeline_of

        doc["timeline"] = timeline_of(events)
    return json.dumps(doc, separators=(",", ":"))


def empty_result(plan: Plan, quarantined: int = 0) -> dict:
    """The result of a run without a single event (judged on the driver)."""
    return json.loads(result_document([], plan, quarantined))


def parse_results(rows: Iterable) -> dict[str, dict]:
    return {r["run_id"]: json.loads(r["result"]) for r in rows}
