"""The event log as an explicit, versioned Spark schema, and the rules a line must meet to be an event.

Theory of operation. node/events.py defines event schema v1: one flat JSON object per line with
required keys v, t, node, proto, kind and a closed set of optional keys. `EVENT_SCHEMA_V1` is built
from node/events.py's FIELD_TYPES and the event kinds from the protocol registry, so the two cannot
drift apart; Spark never infers a schema.

A line of an events.jsonl or timeline.jsonl file is one of three things:

- blank (only ASCII whitespace): no event, skipped, exactly as harness.eventlog.read_events does;
- an event: it fits the schema and goes to the events table;
- quarantined: anything else, with the first reason below, its source file and line number.

The rules, checked in this order (the first that fails names the reason):

1. ``not a single flat JSON object``: the line must parse as exactly one JSON object (no trailing
   data, no NaN/Infinity literals, no single quotes) whose values are numbers, strings, booleans,
   null or arrays, never nested objects, and whose keys contain no escape sequences.
2. ``duplicate field 'X'``.
3. ``t: missing or not a finite number`` (harness.eventlog.read_events refuses these too).
4. ``missing required field 'X'`` for v, node, proto, kind.
5. ``field 'v' should be int`` / ``unsupported event version N``.
6. ``field 'kind' should be str`` / ``unknown event kind 'X'``.
7. ``unknown event field 'X'`` (first such key in line order).
8. ``field 'X' should be T`` (first such field in schema order; null never fits, ints must fit in
   64 bits, ranges is a list of lists of ints, members a list of strings).
9. ``malformed app id 'X'``: a deliver event whose app id is not "sender:stream:n" (the harness
   checkers would raise on it).
10. ``bad run line: ...``: a run line ("v": 2, node/events.py) that contradicts itself (seqnos or
   app ids that are not `count` messages of one stream: node.events.run_problem's reason), or
   last_seqno / last_app on a line that is no run.

A run line is stored as it is, one row (seqno .. last_seqno, app .. last_app, count, bytes the
sum): ingest never expands it into rows. Whoever needs one row per message expands it then.

These are node.events.validate_event's rules made strict where Spark's types are: validate_event
accepts v=1.0, a non-string node, or members of any type, which a typed column cannot hold.
`classify_line` is the same rules in plain Python: the reference the tests hold Spark to, and the
filter a Python checker uses to judge exactly the events Spark judges.
"""

from __future__ import annotations

import json
import math
import re

from pyspark.sql import types as T

from splitbrain.node import events as node_events
from splitbrain.node import protocols

# Bump when the event schema changes; ingest refuses a warehouse written with another version.
# 2: fault links, error events, runs' recovery_bound; 3: runs' origin_t; 4: NAKACK2's origin, digest;
# 5: runs' resync_bound and xmit_bound
# 6: run lines (node/events.py RUN_VERSION): last_seqno, last_app
# 7: runs' variant (the protocol's variant setting, for every protocol; was `resync`)
EVENT_SCHEMA_VERSION = 7
EVENT_VERSION = 1  # the "v" of every event of this schema but a run line
RUN_VERSION = node_events.RUN_VERSION  # the "v" of a run line
EVENT_VERSIONS = node_events.EVENT_VERSIONS


def event_kinds() -> tuple[str, ...]:
    """Every kind node/ knows now: the core kinds and each registered protocol's (node/protocols.py),
    read at call time so a protocol registered after import (a test's toy) counts too."""
    return tuple(protocols.event_kinds())


def __getattr__(name: str):
    if name == "EVENT_KINDS":
        return event_kinds()
    raise AttributeError(name)


# Field name -> type class, in schema order (required first, then node/events.py's optional order),
# from node/events.py's FIELD_TYPES: one source for the Python validator and this Spark schema.
INT, FLOAT, STR, BOOL, RANGES, STRLIST = "int", "float", "str", "bool", "list of [int, ...]", "list of str"
_TYPE_NAMES = {"int": INT, "float": FLOAT, "str": STR, "bool": BOOL, "ranges": RANGES, "strlist": STRLIST}
FIELD_TYPES: dict[str, str] = {name: _TYPE_NAMES[kind] for name, kind in node_events.FIELD_TYPES.items()}
REQUIRED_FIELDS = ("v", "t", "node", "proto", "kind")
FIELDS = tuple(FIELD_TYPES)
STR_FIELDS = tuple(name for name, kind in FIELD_TYPES.items() if kind == STR)

_SPARK_TYPES = {
    INT: T.LongType(),
    FLOAT: T.DoubleType(),
    STR: T.StringType(),
    BOOL: T.BooleanType(),
    RANGES: T.ArrayType(T.ArrayType(T.LongType())),
    STRLIST: T.ArrayType(T.StringType()),
}

# The event as parsed from JSON: every field nullable, because optional fields are absent.
EVENT_SCHEMA_V1 = T.StructType([T.StructField(name, _SPARK_TYPES[kind], True) for name, kind in FIELD_TYPES.items()])

# Columns ingest adds to every event: which run, which file (relative to the run directory),
# the file's position in harness.eventlog.read_run's merge order, and the 1-based line number.
PROVENANCE_FIELDS = [
    T.StructField("src", T.StringType(), False),
    T.StructField("file_key", T.StringType(), False),
    T.StructField("line", T.LongType(), False),
]
# The event's position in its run, 1-based, in the order (t, file_key, line): the order the
# plain-Python checkers walk a run in. One long instead of a struct lets every aggregation hash
# and every window sort on a single number.
SEQ = T.StructField("seq", T.LongType(), False)
RUN_ID = T.StructField("run_id", T.StringType(), False)

# The Parquet events table: provenance, then the event (run_id is the partition column).
EVENTS_TABLE_SCHEMA = T.StructType(PROVENANCE_FIELDS + [SEQ] + list(EVENT_SCHEMA_V1.fields) + [RUN_ID])

RAW_MAX_CHARS = 2000
QUARANTINE_SCHEMA = T.StructType(
    PROVENANCE_FIELDS
    + [
        T.StructField("reason", T.StringType(), False),
        T.StructField("raw", T.StringType(), True),  # the line, cut at RAW_MAX_CHARS
        RUN_ID,
    ]
)

RUNS_SCHEMA = T.StructType(
    [
        T.StructField("run_id", T.StringType(), False),
        T.StructField("source", T.StringType(), False),  # the run directory's URI
        T.StructField("schema_version", T.IntegerType(), False),
        T.StructField("scenario", T.StringType(), True),
        T.StructField("protocol", T.StringType(), True),
        T.StructField("transport", T.StringType(), True),
        T.StructField("seed", T.LongType(), True),
        T.StructField("backend", T.StringType(), True),
        T.StructField("expect", T.StringType(), True),  # "pass" or "fail:<check>"
        T.StructField("checks", T.ArrayType(T.StringType()), True),
        T.StructField("variant", T.StringType(), True),  # the protocol's variant_key setting (its spec)
        T.StructField("nodes", T.ArrayType(T.StringType()), True),
        T.StructField("fault_types", T.ArrayType(T.StringType()), True),
        T.StructField("duration", T.DoubleType(), True),
        T.StructField("settle", T.DoubleType(), True),
        T.StructField("recovery_bound", T.DoubleType(), True),  # no_loss' bound (scenario.yaml)
        T.StructField("resync_bound", T.LongType(), True),  # resync_traffic's bound (scenario.yaml)
        T.StructField("xmit_bound", T.LongType(), True),  # xmit_traffic's bound (scenario.yaml)
        T.StructField("config_json", T.StringType(), True),
        T.StructField("harness_outcome", T.StringType(), True),  # verdict.json "outcome"
        T.StructField("harness_failed", T.ArrayType(T.StringType()), True),
        # The event clock's reading at scenario time 0 (verdict.json stats; 0 on the simulator, whose
        # clock is scenario time): events at t happened at scenario time t - origin_t.
        T.StructField("origin_t", T.DoubleType(), True),
        T.StructField("event_files", T.IntegerType(), False),
        T.StructField("metadata_error", T.StringType(), True),
        T.StructField("ingested_at", T.StringType(), False),
    ]
)

# ---- the line rules, shared by Spark (as SQL regexes) and the Python reference -----------------

# JSON whitespace plus \v and \f, i.e. Java's \s (Python's \s would also match Unicode spaces).
WS = r"[ \t\n\x0b\f\r]"
BLANK_RE = rf"^{WS}*$"
# Every JSON string literal, left to right, so that a match never starts inside another string:
# a value string (not followed by a colon) becomes S, a key string is kept with an S before it
# ("S$1"; group 1 is empty for values). Possessive quantifiers keep Java's regex engine from
# recursing once per character of a long string.
_JSON_STRING = r'"(?:[^"\\]++|\\.)*+"'
STRING_TOKEN_RE = rf"{_JSON_STRING}(?!{WS}*:)|({_JSON_STRING})"
FLAT_OBJECT_RE = rf"^{WS}*\{{[^{{}}]*\}}{WS}*$"
KEY_RE = rf'"((?:[^"\\]++|\\.)*+)"{WS}*:'
APP_RE = r"(?s)^(.*):([^:]*):([^:]*)$"
APP_INT_RE = rf"^{WS}*[+-]?[0-9]+(?:_[0-9]+)*{WS}*$"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

REASON_NOT_JSON = "not a single flat JSON object"
REASON_BAD_T = "t: missing or not a finite number"


def skeleton(line: str) -> str:
    """The line with every value string replaced by S and every key string prefixed with S:
    keys and structure stay visible, string contents (braces, colons, "null") do not."""
    return re.sub(STRING_TOKEN_RE, r"S\1", line)


def _q(text: str) -> str:
    """Quote a name in a reason the way the Spark side can (no repr escaping)."""
    return f"'{text}'"


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _app_ok(app: str) -> bool:
    m = re.match(APP_RE, app)
    if not m:
        return False
    for part in (m.group(2), m.group(3)):
        if not re.match(APP_INT_RE, part):
            return False
        if not INT64_MIN <= int(part) <= INT64_MAX:
            return False
    return True


def _fits(kind: str, value) -> bool:
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX
    if kind == FLOAT:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == STR:
        return isinstance(value, str)
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == RANGES:
        return isinstance(value, list) and all(isinstance(r, list) and all(_fits(INT, x) for x in r) for r in value)
    if kind == STRLIST:
        return isinstance(value, list) and all(isinstance(x, str) for x in value)
    raise AssertionError(kind)


def classify_line(line: str) -> tuple[dict | None, str | None]:
    """(event, None) for an event, (None, reason) for a quarantined line, (None, None) if blank.

    The plain-Python statement of the rules in the module docstring; pipeline.ingest implements
    the same rules as DataFrame expressions and the tests hold the two to the same answers.
    """
    if re.match(BLANK_RE, line):
        return None, None
    skel = skeleton(line)
    if not re.match(FLAT_OBJECT_RE, skel):
        return None, REASON_NOT_JSON
    keys = re.findall(KEY_RE, skel)
    if any("\\" in k for k in keys):
        return None, REASON_NOT_JSON
    try:
        pairs = json.loads(line, parse_constant=_reject_constant, object_pairs_hook=list)
    except ValueError:
        return None, REASON_NOT_JSON
    if not isinstance(pairs, list):  # a top-level array is caught by the skeleton already
        return None, REASON_NOT_JSON
    seen: set[str] = set()
    for key, _value in pairs:
        if key in seen:
            return None, f"duplicate field {_q(key)}"
        seen.add(key)
    ev = dict(pairs)
    if "t" not in ev or not _fits(FLOAT, ev["t"]):
        return None, REASON_BAD_T
    for key in ("v", "node", "proto", "kind"):
        if key not in ev:
            return None, f"missing required field {_q(key)}"
    if not _fits(INT, ev["v"]):
        return None, "field 'v' should be int"
    if ev["v"] not in EVENT_VERSIONS:
        return None, f"unsupported event version {ev['v']}"
    if not isinstance(ev["kind"], str):
        return None, "field 'kind' should be str"
    if ev["kind"] not in protocols.event_kinds():
        return None, f"unknown event kind {_q(ev['kind'])}"
    for key, _value in pairs:
        if key not in FIELD_TYPES:
            return None, f"unknown event field {_q(key)}"
    for key, kind in FIELD_TYPES.items():
        if key in ev and not _fits(kind, ev[key]):
            return None, f"field {_q(key)} should be {kind}"
    if ev["kind"] == "deliver" and "app" in ev and not _app_ok(ev["app"]):
        return None, f"malformed app id {_q(ev['app'])}"
    problem = run_line_problem(ev)
    if problem is not None:
        return None, f"bad run line: {problem}"
    return ev, None


def run_line_problem(ev: dict) -> str | None:
    """What makes an event a bad run line (rule 10), or None."""
    if ev["v"] == RUN_VERSION:
        return node_events.run_problem(ev)
    if "last_seqno" in ev or "last_app" in ev:
        return f"last_seqno and last_app belong to run lines (v {RUN_VERSION})"
    return None


def spark_type_summary() -> dict[str, str]:
    """Field name -> Spark simple type string, for docs and drift tests."""
    return {f.name: f.dataType.simpleString() for f in EVENT_SCHEMA_V1.fields}
