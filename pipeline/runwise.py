"""One run, judged whole in plain Python: lines -> events -> order -> the harness's checks, the
advisory check's and the metrics' rows. Spark calls these in its tasks (pipeline.ingest,
pipeline.analysis); nothing here imports pyspark.

Theory of operation. The costs of the DataFrame pipeline were per line (quarantine rules as SQL
regexes), per job (a dozen small Spark jobs per analysis) and per plan (thousands of py4j calls to
build them). Here every run is one task: its files' texts come in whole, are cut into lines the way
Hadoop's text reader and Python's universal newlines cut them (\\n, \\r\\n, \\r), each line is
classified, the events are put in the order harness.eventlog.read_run merges them (t, file, line;
stable), numbered (`seq`), judged by harness.checks.run_checks, and the rows the metrics and the
advisory check need are computed in one walk (`result_parts`, the same rows pipeline.checks and
pipeline.metrics compute as DataFrame operations).

Exactness of the quarantine. `classify_line` (pipeline.schema) is the statement of the rules.
`fast_event` is a cheaper test in front of it that only ever *accepts*: a line that is exactly the
compact serialization of the dict it parses to (so one object, no duplicate keys, whitespace or
trailing data), with known keys and values of exactly their types (no null, no nested object, ints
in 64 bits), a finite t, version 1, a known kind and a well formed app id on a deliver. Every such
line is an event for classify_line too, with the same dict; every other line, and so every
quarantined one, goes through classify_line itself. `classify_run` parses a chunk of lines in one
call where that provably gives each line's own parse (`parse_lines`), then applies the same test.

The module stays one piece (a little over 600 lines): classifying lines, ordering them and the one
walk that makes the metrics' rows share the run's line positions (`seq`), which the quarantine and
the rows both carry.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from splitbrain.harness.checks import GRACEFUL_STOP, is_heal, run_checks
from splitbrain.node import events as node_events
from splitbrain.node import protocols

from . import schema as S

# ---- lines ------------------------------------------------------------------------------------

_NEWLINE = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """The lines of a file as Hadoop's text reader (and Python's universal newlines) cut them: on
    \\n, \\r\\n and \\r, a final terminator ending the last line rather than opening an empty one."""
    # Without a \r the only terminator is \n: str.split cuts there alike, several times faster.
    lines = text.split("\n") if "\r" not in text else _NEWLINE.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


# ---- the fast, exact line classifier ----------------------------------------------------------

try:  # orjson parses and writes a line in about a fifth of the standard library's time
    import orjson

    def _loads(line: str | bytes) -> Any:
        return orjson.loads(line)

    def _canonical(ev: Any) -> bytes | str:
        return orjson.dumps(ev)

    def _as_written(line: str) -> bytes | str:
        return line.encode("utf-8", "surrogatepass")

except ImportError:  # pragma: no cover - the pipeline extra installs orjson
    _ENCODER = json.JSONEncoder(separators=(",", ":"))

    def _loads(line: str | bytes) -> Any:
        return json.loads(line)

    def _canonical(ev: Any) -> bytes | str:
        return _ENCODER.encode(ev)

    def _as_written(line: str) -> bytes | str:
        return line


_FIELD_TYPES = S.FIELD_TYPES


def _fits(kind: str, value) -> bool:
    cls = type(value)
    if kind == S.STR:
        return cls is str
    if kind == S.INT:
        return cls is int and S.INT64_MIN <= value <= S.INT64_MAX
    if kind == S.FLOAT:
        return (cls is float and math.isfinite(value)) or cls is int
    if kind == S.BOOL:
        return cls is bool
    return S._fits(kind, value)


# (keys, value types) -> (whether a line of that signature may be clean: known keys, values of
# their types, the required fields present; whether it is also plain: no int in a float field, so
# its values read back from Arrow as they were parsed; the keys of its int fields, whose values
# must be in 64 bits; whether it holds a list, whose items are checked one by one).
_SIGNATURES: dict[tuple, tuple[bool, bool, tuple[str, ...], bool]] = {}
_REQUIRED = frozenset(("t", "v", "node", "proto", "kind"))


def _signature(keys: tuple, types: tuple) -> tuple[bool, bool, tuple[str, ...], bool]:
    plain = True
    ints = []
    for key, cls in zip(keys, types):
        kind = _FIELD_TYPES.get(key)
        if kind is None or cls not in _TYPES_OF[kind]:
            return False, False, (), False
        if kind == S.FLOAT and cls is int:
            plain = False
        elif kind == S.INT:
            ints.append(key)
    return _REQUIRED.issubset(keys), plain, tuple(ints), list in types


_TYPES_OF = {
    S.STR: (str,),
    S.INT: (int,),
    S.FLOAT: (int, float),  # a float from the parser is finite (it refuses NaN and infinity)
    S.BOOL: (bool,),
    S.RANGES: (list,),
    S.STRLIST: (list,),
}


def _parse_canonical(line: str) -> Any:
    """What the line parses to when it is exactly the compact serialization of that, else None."""
    try:
        ev = _loads(line)
        if _canonical(ev) != _as_written(line):
            return None
    except (TypeError, ValueError, OverflowError):  # orjson's JSONDecodeError is a ValueError
        return None
    return ev


def _accepts(ev: Any, kinds: frozenset[str]) -> bool | None:
    """None unless `ev`, parsed from a line that is exactly its compact serialization, is a clean
    event; else whether it is plain (no int in a float field)."""
    if type(ev) is not dict:
        return None
    # Whether the keys are known and the values of their types depends, but for lists and the
    # range of ints, only on the keys and the value types: decided once per such signature.
    sig = (tuple(ev), tuple(map(type, ev.values())))
    verdict = _SIGNATURES.get(sig)
    if verdict is None:
        verdict = _SIGNATURES[sig] = _signature(*sig)
    ok, plain, ints, lists = verdict
    if not ok:
        return None
    if lists:
        if not all(_fits(_FIELD_TYPES[k], v) for k, v in ev.items()):
            return None
    else:
        for key in ints:
            if not S.INT64_MIN <= ev[key] <= S.INT64_MAX:
                return None
    kind = ev["kind"]
    if kind not in kinds:
        return None
    if ev["v"] not in S.EVENT_VERSIONS or S.run_line_problem(ev) is not None:
        return None
    if kind == "deliver" and "app" in ev and not _app_ok(ev["app"]):
        return None
    return plain


def fast_event(line: str, kinds: frozenset[str]) -> dict | None:
    """The event of a line that is provably clean, else None (the caller asks classify_line).

    Clean: the line is exactly the compact serialization of what it parses to (so it is one
    object, without duplicate keys, whitespace or trailing data, and each number reads back as
    written), every key is a known field with a value of exactly its type (no null, no nested
    object), and the required fields, version, kind and app id are right."""
    ev = _parse_canonical(line)
    return ev if _accepts(ev, kinds) is not None else None


# Lines parsed per call of the parser by parse_lines.
CHUNK_LINES = 1024
_BOUNDARY = "},{"


def parse_lines(lines: list[str]) -> list:
    """What each line parses to where it is exactly the compact serialization of that (else None),
    as `_parse_canonical` per line, but with one parse of the whole list where that is provably the
    same: the lines joined as one array read back exactly as written, with one dict per line.
    Then each line is its dict's serialization: an array of dicts is written "[d1,d2,...]", and
    no line contains "},{", so no dict can end (or start) inside a line, and the n line
    boundaries are the n dicts' boundaries. Anything else is parsed line by line."""
    text = "\n".join(lines)  # no line holds a newline: split_lines cut at every one
    if lines and _BOUNDARY not in text:
        data = _as_written("[" + text.replace("\n", ",") + "]")
        try:
            evs = _loads(data)
            if (
                type(evs) is list
                and len(evs) == len(lines)
                and all(type(ev) is dict for ev in evs)
                and _canonical(evs) == data
            ):
                return evs
        except (TypeError, ValueError, OverflowError):
            pass
    return [_parse_canonical(line) for line in lines]


_APP_FAST = re.compile(r"[^:]*:(?:0|[1-9][0-9]{0,17}):(?:0|[1-9][0-9]{0,17})")


def _app_ok(app: str) -> bool:
    """schema._app_ok, with a shortcut for the ids nodes write ("A:0:17")."""
    return _APP_FAST.fullmatch(app) is not None or S._app_ok(app)


def classify(line: str, kinds: frozenset[str]) -> tuple[dict | None, str | None]:
    """classify_line(line), cheaper for clean lines."""
    ev = fast_event(line, kinds)
    if ev is not None:
        return ev, None
    return S.classify_line(line)


def known_kinds() -> frozenset[str]:
    return frozenset(protocols.event_kinds())


# ---- files -> events --------------------------------------------------------------------------


def file_key(src: str) -> str:
    """pipeline.ingest.file_key of a file given by its path inside the run directory."""
    if src == "timeline.jsonl":
        return "1"
    return "0" + src.split("/")[1]


def classify_files(files: Iterable[tuple[str, str]]) -> tuple[list[dict], list[dict]]:
    """(events, quarantine) of a run's files given as (src, text). An event is its dict plus
    `_src`, `_fk`, `_line`; a quarantined line a dict of src, file_key, line, reason, raw."""
    events, bad, _plain = classify_run(files)
    return events, bad


def classify_run(files: Iterable[tuple[str, str]]) -> tuple[list[dict], list[dict], bool]:
    """classify_files, and whether the events are plain: every one accepted by the fast path,
    without an int in a float field, so that Arrow columns of them read back as the same dicts."""
    kinds = known_kinds()
    events: list[dict] = []
    bad: list[dict] = []
    plain = True
    for src, text in files:
        fk = file_key(src)
        lines = split_lines(text)
        for start in range(0, len(lines), CHUNK_LINES):
            chunk = lines[start : start + CHUNK_LINES]
            for i, line, ev in zip(range(start + 1, start + len(chunk) + 1), chunk, parse_lines(chunk)):
                clean = None if ev is None else _accepts(ev, kinds)
                if clean is None:
                    ev, reason = S.classify_line(line)
                    if ev is None:
                        if reason is not None:
                            bad.append(
                                {
                                    "src": src,
                                    "file_key": fk,
                                    "line": i,
                                    "reason": reason,
                                    "raw": line[: S.RAW_MAX_CHARS],
                                }
                            )
                        continue
                    clean = False
                plain = plain and clean
                ev["_src"] = src
                ev["_fk"] = fk
                ev["_line"] = i
                events.append(ev)
    return events, bad, plain


def order(events: list[dict]) -> list[dict]:
    """The events in harness.eventlog.read_run's order, (t, file_key, line), numbered 1.. as `_seq`."""
    events.sort(key=lambda e: (e["t"], e["_fk"], e["_line"]))
    for i, ev in enumerate(events, start=1):
        ev["_seq"] = i
    return events


def plain(ev: dict) -> dict:
    """The event without the provenance keys this module adds."""
    return {k: v for k, v in ev.items() if k[0] != "_"}


# ---- judging ----------------------------------------------------------------------------------


def judge(events: list[dict], names: list[str], bound: dict) -> list[dict]:
    """harness.checks.run_checks over ordered events (provenance keys removed), with the run's
    bounds (pipeline.judging.bounds: recovery_bound_s, resync_bound, xmit_bound)."""
    return [c.to_dict() for c in run_checks([plain(e) for e in events], names, **bound)]


# ---- the advisory check's and the metrics' rows (pipeline.checks + pipeline.metrics) -----------

STUCK_MIN_RETRANSMITS = 10
STUCK_MIN_SECONDS = 2.0
PERCENTILES = (0.5, 0.9, 0.99)
LAT_BINS_PER_DECADE = 10
LAT_MIN_S = 1e-5


def _origin(app: str) -> str:
    return app.rsplit(":", 2)[0]


def percentile(sorted_values: list[float], q: float):
    """Spark's percentile_approx for fewer values than its accuracy: the smallest value with at
    least q of the values at or below it."""
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def _lat_row(lats: list[float], **key) -> dict:
    ordered = sorted(lats)
    return {
        **key,
        "lat_n": len(lats),
        "lat_mean": math.fsum(lats) / len(lats),
        "lat_max": ordered[-1],
        "lat_p": [percentile(ordered, q) for q in PERCENTILES],
    }


def blocked_rows(by_node: dict[str, list]) -> list[dict]:
    """Time blocked per node from its (position, kind, t) block and unblock items: a block lasts
    until the node's next item; one without a next is still open."""
    out = []
    for node, items in by_node.items():
        items.sort()
        spans = [
            (x[2], items[i + 1][2] if i + 1 < len(items) else None) for i, x in enumerate(items) if x[1] == "block"
        ]
        opens = [t for t, nt in spans if nt is None]
        out.append(
            {
                "node": node,
                "blocks": len(spans),
                "blocked_s": sum((nt - t for t, nt in spans if nt is not None), 0.0),
                "open_since": max(opens) if opens else None,
            }
        )
    return out


def add_episode(
    d: dict,
    src: str,
    dst: str,
    open_at_end: bool,
    episode: Sequence,
    last_heal: float | None,
    last_deliver_t: float | None,
    excused: bool,
) -> None:
    """Count one retransmission episode of link src->dst into dst's stuck row `d`; `episode` is
    (retransmits, xmit_reqs, first_t, last_t, min_seqno, max_seqno). An episode still open at the
    run's end (no delivery after it), long and busy enough, on a link of live nodes, is stuck."""
    rt, xr, first_t, last_t, min_s, max_s = episode
    span = last_t - first_t
    d["longest_episode_s"] = span if d["longest_episode_s"] is None else max(d["longest_episode_s"], span)
    d["retransmits"] += rt
    d["xmit_reqs"] += xr
    since = max(first_t, last_heal if last_heal is not None else 0.0)
    if open_at_end and rt + xr >= STUCK_MIN_RETRANSMITS and last_t - since >= STUCK_MIN_SECONDS and not excused:
        d["stuck"].append(
            {
                "src": src,
                "dst": dst,
                "retransmits": rt,
                "xmit_reqs": xr,
                "first_t": first_t,
                "last_t": last_t,
                "min_seqno": min_s,
                "max_seqno": max_s,
                "last_deliver_t": last_deliver_t,
            }
        )


def _messages(events: list[dict]) -> Iterator[dict]:
    """The events with each run line (node/events.py) as its messages, each with the run's
    position: the metrics (counts per kind, latency per message) are per message."""
    for ev in events:
        if ev.get("v") == S.RUN_VERSION:
            extra = {key: ev[key] for key in ("_seq", "_fk", "_line", "_src") if key in ev}
            for i, one in enumerate(node_events.expand_run({k: v for k, v in ev.items() if k not in extra})):
                one.update(extra)
                if i:
                    one["_same_line"] = True  # the run's line is counted once, at its first message
                yield one
        else:
            yield ev


def result_parts(events: list[dict]) -> dict[str, list[dict]]:
    """part -> rows for pipeline.verdicts / pipeline.metrics.run_metrics, from ordered events:
    kinds, latency, lat_hist, lat_dst, heal, heal_sync, blocked, stuck (as pipeline.analysis.result_rows).
    A multicast `send` (no peer, `members`) is a message to each other member: latency counts it
    per receiver; heal-to-sync stays with unicast links."""
    kinds: dict[str, dict] = {}
    lifecycle: dict[str, list] = {}
    heal_ts: list[float] = []
    bu: dict[str, list] = {}
    flows: list[tuple] = []  # (kind, dst, src, app, seqno, t, o)
    multicast: set[tuple] = set()  # (dst, src, app) of multicasts: latency only, not heal-to-sync
    for ev in _messages(events):
        kind = ev["kind"]
        node = ev["node"]
        o = ev["_seq"]
        t = ev["t"]
        k = kinds.get(kind)
        if k is None:
            k = kinds[kind] = {"kind": kind, "n": 0, "lines": 0, "apps": 0, "bytes_sum": None, "max_t": t, "min_t": t}
        count = ev.get("count")
        k["n"] += count if kind == "drop" and count is not None else 1
        k["lines"] += 0 if ev.get("_same_line") else 1
        if ev.get("app") is not None:
            k["apps"] += 1  # application messages, not a membership protocol's own (run_metrics)
        b = ev.get("bytes")
        if b is not None:
            k["bytes_sum"] = b if k["bytes_sum"] is None else k["bytes_sum"] + b
        if t > k["max_t"]:
            k["max_t"] = t
        if t < k["min_t"]:
            k["min_t"] = t
        if kind in ("send", "deliver", "retransmit", "xmit_req_tx"):
            peer = ev.get("peer")
            app = ev.get("app")
            if kind == "send":
                if app is not None and peer is not None:
                    flows.append((kind, peer, node, app, ev.get("seqno"), t, o))
                elif app is not None and ev.get("members"):
                    # A multicast: a flow to every other member of the sender's view (its own
                    # loopback delivery is not a network latency).
                    for member in ev["members"]:
                        if member != node:
                            flows.append((kind, member, node, app, ev.get("seqno"), t, o))
                            multicast.add((member, node, app))
            elif kind == "deliver":
                if app is not None:
                    src = peer if peer else _origin(app)
                    flows.append((kind, node, src, app, ev.get("seqno"), t, o))
            elif peer is not None:
                if kind == "xmit_req_tx":
                    flows.append((kind, node, peer, None, ev.get("seqno"), t, o))
                else:
                    flows.append((kind, peer, node, None, ev.get("seqno"), t, o))
        elif kind in ("node_start", "node_stop"):
            lifecycle.setdefault(node, []).append((o, kind, ev.get("incarnation"), ev.get("reason")))
        elif kind in ("block", "unblock"):
            bu.setdefault(node, []).append((o, kind, t))
        if kind in ("fault_on", "fault_off") and is_heal(ev):
            heal_ts.append(t)

    # Lives: starts per node (incarnation fold), dead at the end.
    starts: dict[str, list[int]] = {}
    dead: dict[str, bool] = {}
    for node, lc in lifecycle.items():
        lc.sort()
        starts[node] = [x[0] for x in lc if x[1] == "node_start"]
        last = lc[-1]
        dead[node] = last[1] == "node_stop" and last[3] != GRACEFUL_STOP

    def starts_before(node: str, o: int) -> int:
        s = starts.get(node)
        if not s:
            return 0
        n = 0
        for x in s:
            if x < o:
                n += 1
        return n

    # Messages per (dst, src, app).
    msgs: dict[tuple, list] = {}  # key -> [first_o, send_t, last_send_o, starts_at, deliver_t]
    links: dict[tuple, list] = {}  # (dst, src) -> [(o, kind, t, seqno)] for stuck
    for kind, dst, src, app, seqno, t, o in flows:
        if kind == "send" or kind == "deliver":
            m = msgs.get((dst, src, app))
            if m is None:
                m = msgs[(dst, src, app)] = [None, None, None, None, None]
            if kind == "send":
                if m[0] is None or o < m[0]:
                    m[0] = o
                if m[1] is None or t < m[1]:
                    m[1] = t
                if m[2] is None or o > m[2]:
                    m[2] = o
                    m[3] = starts_before(src, o)
            elif m[4] is None or t < m[4]:
                m[4] = t
        if kind != "send":
            links.setdefault((dst, src), []).append((o, kind, t, seqno))

    def is_dead(node: str) -> bool:
        return dead.get(node, False)

    statuses = []  # (dst, src, send_t, deliver_t, status)
    for (dst, src, app), (first_o, send_t, _lo, starts_at, deliver_t) in msgs.items():
        if first_o is None:
            status = None
        elif (dst, src, app) in multicast:
            # Owed by the view rules of harness.checks (left the view, joined later), which a
            # heal's backlog does not know: judged by the checks, timed by latency only.
            status = "multicast"
        elif is_dead(src) or is_dead(dst):
            status = "dead_at_end"
        elif len(starts.get(src, ())) > starts_at:
            status = "sender_restarted"
        elif deliver_t is None:
            status = "lost"
        else:
            status = "ok"
        statuses.append((dst, src, send_t, deliver_t, status))

    parts: dict[str, list[dict]] = {"kinds": list(kinds.values())}

    # Latency, over all links and per receiver.
    lats = []
    by_dst: dict[str, list[float]] = {}
    hist: dict[tuple, int] = {}
    for dst, _src, send_t, deliver_t, _status in statuses:
        if send_t is not None and deliver_t is not None:
            lat = deliver_t - send_t
            lats.append(lat)
            by_dst.setdefault(dst, []).append(lat)
            b = math.floor(math.log10(max(lat, LAT_MIN_S)) * LAT_BINS_PER_DECADE)
            hist[(dst, b)] = hist.get((dst, b), 0) + 1
    if lats:
        parts["latency"] = [_lat_row(lats)]
    parts["lat_hist"] = [{"dst": d, "bin": b, "n": n} for (d, b), n in hist.items()]
    parts["lat_dst"] = [_lat_row(values, dst=dst) for dst, values in by_dst.items()]

    # Heal to sync.
    heals = sorted(set(heal_ts))
    parts["heal"] = [{"heal_t": h} for h in heals]
    per_link: dict[tuple, list] = {}
    judged = [s for s in statuses if s[4] in ("ok", "lost") and s[2] is not None]
    for h in heals:
        for dst, src, send_t, deliver_t, _status in judged:
            if send_t < h and (deliver_t is None or deliver_t >= h):
                r = per_link.get((dst, src, h))
                if r is None:
                    r = per_link[(dst, src, h)] = [0, 0, None]
                r[0] += 1
                if deliver_t is None:
                    r[1] += 1
                elif r[2] is None or deliver_t > r[2]:
                    r[2] = deliver_t
    parts["heal_sync"] = [
        {
            "heal_t": h,
            "src": src,
            "dst": dst,
            "backlog": r[0],
            "undelivered": r[1],
            "catch_up_s": None if r[2] is None else r[2] - h,
        }
        for (dst, src, h), r in per_link.items()
    ]

    # Time blocked (MCAST).
    blocked = blocked_rows(bu)
    parts["blocked"] = blocked

    # Stuck retransmission, per link X->Y between deliveries at Y from X.
    last_heal = max(heal_ts) if heal_ts else None
    per_dst: dict[str, dict] = {}
    for (dst, src), rows in links.items():
        rows.sort()
        delivered = sum(1 for r in rows if r[1] == "deliver")
        last_deliver_t = max((r[2] for r in rows if r[1] == "deliver"), default=None)
        episodes: dict[int, list] = {}
        episode = 0
        for _o, kind, t, seqno in rows:
            if kind == "deliver":
                episode += 1
                continue
            e = episodes.get(episode)
            if e is None:
                e = episodes[episode] = [0, 0, t, t, None, None]
            if kind == "retransmit":
                e[0] += 1
                if seqno is not None:
                    e[4] = seqno if e[4] is None or seqno < e[4] else e[4]
                    e[5] = seqno if e[5] is None or seqno > e[5] else e[5]
            else:
                e[1] += 1
            e[2] = min(e[2], t)
            e[3] = max(e[3], t)
        if not episodes:
            continue
        d = per_dst.setdefault(
            dst, {"dst": dst, "longest_episode_s": None, "retransmits": 0, "xmit_reqs": 0, "stuck": []}
        )
        excused = is_dead(src) or is_dead(dst)
        for ep, counts in sorted(episodes.items()):
            add_episode(d, src, dst, ep == delivered, counts, last_heal, last_deliver_t, excused)
    parts["stuck"] = list(per_dst.values())
    return parts


def analyze_events(events: list[dict], names: list[str], bound: dict) -> dict:
    """What the driver needs of one ordered run: the check results and the result parts."""
    return {"results": judge(events, names, bound), "parts": result_parts(events)}
