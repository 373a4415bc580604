"""The event-log schema (version 2) shared by every driver and every checker.

Event kinds: CORE_EVENT_KINDS here, plus those each protocol registers (node/protocols.py).

One event is a flat dict, written as one JSON line. Required keys: v, t (float seconds, one clock
per run), node, proto, kind. Optional keys are listed in OPTIONAL_FIELDS; a producer may add
nothing else, so that the Spark schema stays explicit.

`bytes`, on the events of messages a node sends or delivers: the payload for DATA (send, deliver,
retransmit), the protocol header for a control message (ack_tx, xmit_req_tx, first_seqno_tx,
sync_tx, close_tx), which has no payload. Frame and transport headers are not included.

Multicast (NAKACK2): a `send` has no `peer` but `members`, the sender's view when it sent; its
`deliver` events (one per member, the sender's own loopback delivery included) have `peer` = the
sender. A STABLE round's `stable_tx` / `stable_rx` carry `digest`.

`links`, on the harness timeline's fault_on / fault_off: the directed links ("A->B") the fault cuts
(a partition, a pause, total loss, an unbounded in-process drop), so that no_loss knows when two
nodes could talk without reading the scenario.

Runs (schema version 2, docs/event-log.md): the sends of one batch on one connection, or the
deliveries of one batch from one sender, may be one *run line* instead of one line per message.
A run line is a `send` or `deliver` with "v": 2 and, besides the fields of its first message's
line: `last_seqno` and `last_app` (the last message's seqno and app id), `count` (the number of
messages) and `bytes` (the sum of their payloads). Its messages have the seqnos seqno..last_seqno
and the app ids "S:K:n" .. "S:K:last_n" of one stream, both consecutive, so
last_seqno - seqno + 1 == count == last_n - n + 1; a line breaking that is rejected (validate_run).
A batch's retransmissions and drops may be run lines too ("retransmit", "drop": the first line's
fields with last_seqno and count; bytes and app/last_app only where the messages have them).
Every other line keeps "v": 1, so a version-1 log is a version-2 log without runs, and a reader
of version 1 refuses a run line instead of misreading it. A writer may write either form.
"""

from __future__ import annotations

from typing import Any, cast

from .message import app_id_of

EVENT_VERSION = 1
# The version of a run line (one line for a run of sends or deliveries); every other line is 1.
RUN_VERSION = 2
EVENT_VERSIONS = (EVENT_VERSION, RUN_VERSION)
# The kinds a run line may have; those of the first group always carry app ids (and bytes).
APP_RUN_KINDS = ("send", "deliver")
RUN_KINDS = (*APP_RUN_KINDS, "retransmit", "drop")

# kind -> what it records: the kinds any stack may write (the application boundary, the fault
# layer, the drivers, and the flow events every reliable protocol shares and the checkers read).
# A protocol's own kinds are in its spec (node/protocols.py); EVENT_KINDS is the union of both.
CORE_EVENT_KINDS = {
    "send": "a DATA message handed to the network for the first time (seqno, conn_id, app)",
    "deliver": "a message delivered to the application, in order (seqno, conn_id, app)",
    "ack_tx": "cumulative ACK sent (seqno = highest delivered, conn_id)",
    "ack_rx": "ACK received and applied (seqno, conn_id)",
    "retransmit": "a DATA message sent again (seqno, conn_id, reason)",
    "xmit_req_tx": "a retransmission request (XMIT-REQ) sent (ranges, count = number of seqnos asked for)",
    "xmit_req_rx": "a retransmission request (XMIT-REQ) received (ranges, count)",
    "conn_state": "a connection entry changed state (side = send | recv, state, reason)",
    "window": "a snapshot of one window (side, conn_id, low, high, state); final=true at end of run",
    "view": "a view was installed (members, view_id; coord and reason when a membership protocol installed it)",
    "drop": "a message was dropped (reason, type)",
    "fault_on": "a fault was applied (fault, detail; links = the directed links it cuts, if any)",
    "fault_off": "a fault was removed (fault, detail; links = the directed links it no longer cuts)",
    "block": "a sender blocked (MCAST window full)",
    "unblock": "a sender unblocked",
    "node_start": "a node (re)started (incarnation)",
    "node_stop": "a node stopped or was killed (reason)",
    "error": "an exception inside a protocol layer, a bug (reason = type and message, detail = traceback tail)",
}

# Kinds written once per message (many per second); every other kind is rare, and reports may
# show each one. A protocol lists its own in its spec (per_message_kinds).
PER_MESSAGE_KINDS = ("send", "deliver", "ack_tx", "ack_rx", "retransmit", "xmit_req_tx", "xmit_req_rx")
# Control traffic every reliable protocol has, for overhead metrics: metric name -> the kind
# logged when it is sent. A protocol adds its own in its spec (overhead_kinds).
OVERHEAD_KINDS = {"acks": "ack_tx", "xmit_reqs": "xmit_req_tx", "retransmits": "retransmit"}

REQUIRED_FIELDS = ("v", "t", "node", "proto", "kind")

# Field -> type, in schema order: the single source of the Spark schema (pipeline/schema.py).
# "ranges" is a list of [low, high] int pairs; "strlist" a list of strings.
OPTIONAL_FIELD_TYPES = {
    "peer": "str",
    "seqno": "int",
    "conn_id": "int",
    "bytes": "int",
    "app": "str",
    "type": "str",
    "reason": "str",
    "phase": "str",
    "side": "str",
    "state": "str",
    "low": "int",
    "high": "int",
    "count": "int",
    "ranges": "ranges",
    "first": "bool",
    "final": "bool",
    "members": "strlist",
    "view_id": "int",
    "fault": "str",
    "detail": "str",
    "incarnation": "int",
    "timestamp": "int",
    "links": "strlist",
    "coord": "str",
    # NAKACK2: the original sender of a multicast asked for or resent by another member.
    "origin": "str",
    # A STABLE digest: one "sender:seqno" item per sender (highest delivered), split on the last ':'.
    "digest": "strlist",
    # A run line (RUN_VERSION): its last message's seqno and app id ("count" is its messages).
    "last_seqno": "int",
    "last_app": "str",
}
FIELD_TYPES = {"v": "int", "t": "float", "node": "str", "proto": "str", "kind": "str", **OPTIONAL_FIELD_TYPES}
_PY_TYPES = {"str": str, "int": int, "float": float, "bool": bool, "ranges": list, "strlist": list}
OPTIONAL_FIELDS = {name: _PY_TYPES[kind] for name, kind in OPTIONAL_FIELD_TYPES.items()}


def __getattr__(name: str) -> Any:
    # EVENT_KINDS depends on the registered protocols, which load on first use (node/protocols.py).
    if name == "EVENT_KINDS":
        from .protocols import event_kinds

        return event_kinds()
    raise AttributeError(name)


class DataEvents:
    """The send or deliver events of a run of consecutive seqnos of one connection at one time,
    as one record: `first_seqno` is the seqno of msgs[0], each next message the next seqno.

    A layer returns one of these (in a Log action) for a batch instead of one dict per message,
    which a batch of a thousand messages would spend most of its time building. Stack.take()
    turns it into exactly the dicts `dicts()` gives; the daemon's event log formats its lines
    straight from the record (node/runtime/eventlog.py), byte for byte what those dicts give.

    `members` set (peer None, kind "send", no conn_id): the record of a multicast sender's own
    messages (NAKACK2), two events per message in this order: its `send`, which carries `members`
    (the sender's view) instead of a peer, then its loopback `deliver` (peer = the sender)."""

    __slots__ = ("t", "node", "proto", "kind", "peer", "conn_id", "first_seqno", "msgs", "members")

    def __init__(
        self,
        t: float,
        node: str,
        proto: str,
        kind: str,
        peer: str | None,
        conn_id: int | None,
        first_seqno: int,
        msgs: list[Any],
        members: list[str] | None = None,
    ) -> None:
        self.t = t
        self.node = node
        self.proto = proto
        self.kind = kind
        self.peer = peer
        self.conn_id = conn_id  # None: the events have no conn_id (NAKACK2's multicasts)
        self.first_seqno = first_seqno
        self.msgs = msgs  # node.message.Message objects (their payloads give bytes and app)
        # Shared by every send event of the record, as the layer shared it (nothing mutates it).
        self.members = members

    def dicts(self) -> list[dict[str, Any]]:
        if self.members is not None:
            return self._mcast_dicts(self.members)
        out = []
        t, node, proto, kind, peer, conn_id = self.t, self.node, self.proto, self.kind, self.peer, self.conn_id
        seqno = self.first_seqno
        if conn_id is not None:
            # The simulator's hot path (a deliver record per delivery): each dict one literal, built
            # at its full size, where adding the last keys one by one resized it.
            for msg in self.msgs:
                payload = msg.payload
                app = msg.known_app or app_id_of(payload)
                if app is None:
                    out.append({
                        "v": EVENT_VERSION, "t": t, "node": node, "proto": proto, "kind": kind, "peer": peer,
                        "seqno": seqno, "conn_id": conn_id, "bytes": len(payload),
                    })  # fmt: skip
                else:
                    out.append({
                        "v": EVENT_VERSION, "t": t, "node": node, "proto": proto, "kind": kind, "peer": peer,
                        "seqno": seqno, "conn_id": conn_id, "bytes": len(payload), "app": app,
                    })  # fmt: skip
                seqno += 1
            return out
        for msg in self.msgs:  # no conn_id: NAKACK2's multicasts, each dict one literal as above
            payload = msg.payload
            app = msg.known_app or app_id_of(payload)
            if app is None:
                out.append({
                    "v": EVENT_VERSION, "t": t, "node": node, "proto": proto, "kind": kind, "peer": peer,
                    "seqno": seqno, "bytes": len(payload),
                })  # fmt: skip
            else:
                out.append({
                    "v": EVENT_VERSION, "t": t, "node": node, "proto": proto, "kind": kind, "peer": peer,
                    "seqno": seqno, "bytes": len(payload), "app": app,
                })  # fmt: skip
            seqno += 1
        return out

    def _mcast_dicts(self, members: list[str]) -> list[dict[str, Any]]:
        out = []
        t, node, proto = self.t, self.node, self.proto
        seqno = self.first_seqno
        for msg in self.msgs:
            payload = msg.payload
            size = len(payload)
            app = msg.known_app or app_id_of(payload)
            # Each dict one literal at its full size (adding keys one by one resizes it).
            if app is None:
                out.append({
                    "v": EVENT_VERSION, "t": t, "node": node, "proto": proto, "kind": "send", "members": members,
                    "seqno": seqno, "bytes": size,
                })  # fmt: skip
                out.append({
                    "v": EVENT_VERSION, "t": t, "node": node, "proto": proto, "kind": "deliver", "peer": node,
                    "seqno": seqno, "bytes": size,
                })  # fmt: skip
            else:
                out.append({
                    "v": EVENT_VERSION, "t": t, "node": node, "proto": proto, "kind": "send", "members": members,
                    "seqno": seqno, "bytes": size, "app": app,
                })  # fmt: skip
                out.append({
                    "v": EVENT_VERSION, "t": t, "node": node, "proto": proto, "kind": "deliver", "peer": node,
                    "seqno": seqno, "bytes": size, "app": app,
                })  # fmt: skip
            seqno += 1
        return out

    def __len__(self) -> int:
        return len(self.msgs) if self.members is None else 2 * len(self.msgs)

    def run_dicts(self) -> list[dict[str, Any]]:
        """The record's events in the run form: each maximal piece of two or more messages whose
        app ids are consecutive in one stream one run line, every other message its v1 dict, in
        the order of dicts(). A multicast sender's own record gives its send run, then its
        loopback deliver run, per piece."""
        apps = [msg.known_app or app_id_of(msg.payload) for msg in self.msgs]
        sizes = [len(msg.payload) for msg in self.msgs]
        pieces = app_pieces(apps)
        if len(pieces) == len(apps):  # no two consecutive app ids: nothing to gain
            return self.dicts()
        out: list[dict[str, Any]] = []
        t, node, proto, members = self.t, self.node, self.proto, self.members
        for start, end in pieces:
            seqno = self.first_seqno + start
            if end - start == 1:
                one = DataEvents(
                    t, node, proto, self.kind, self.peer, self.conn_id, seqno, self.msgs[start:end], members
                )
                out.extend(one.dicts())
                continue
            count, total = end - start, sum(sizes[start:end])
            first_app, last_app = cast(str, apps[start]), cast(str, apps[end - 1])  # a piece's have ids
            if members is not None:
                out.append(
                    run_event(t, node, proto, "send", None, None, seqno, count, total, first_app, last_app, members)
                )
                out.append(run_event(t, node, proto, "deliver", node, None, seqno, count, total, first_app, last_app))
            else:
                out.append(
                    run_event(
                        t, node, proto, self.kind, self.peer, self.conn_id, seqno, count, total, first_app, last_app
                    )
                )
        return out


def run_event(
    t: float,
    node: str,
    proto: str,
    kind: str,
    peer: str | None,
    conn_id: int | None,
    seqno: int,
    count: int,
    total_bytes: int,
    app: str,
    last_app: str,
    members: list[str] | None = None,
) -> dict[str, Any]:
    """One run line (RUN_VERSION) in its key order: a multicast send has `members` and no peer;
    an event without a conn_id (a multicast's) leaves it out."""
    ev: dict[str, Any] = {"v": RUN_VERSION, "t": t, "node": node, "proto": proto, "kind": kind}
    if members is not None:
        ev["members"] = members
    if peer is not None:
        ev["peer"] = peer
    ev["seqno"] = seqno
    ev["last_seqno"] = seqno + count - 1
    if conn_id is not None:
        ev["conn_id"] = conn_id
    ev["count"] = count
    ev["bytes"] = total_bytes
    ev["app"] = app
    ev["last_app"] = last_app
    return ev


def split_app(app: str | None) -> tuple[str, int] | None:
    """("S:K:", n) of an app id "S:K:n" (n a plain decimal), or None for any other id."""
    if app is None:
        return None
    head, sep, tail = app.rpartition(":")
    if not sep or not tail.isdigit() or not tail.isascii() or (tail[0] == "0" and len(tail) > 1):
        return None
    return head + sep, int(tail)


def app_pieces(apps: list[str | None]) -> list[tuple[int, int]]:
    """[start, end) index ranges covering `apps`: maximal pieces whose app ids are "S:K:n",
    "S:K:n+1", ... (a message without an app id, or not of that form, is a piece of its own)."""
    out: list[tuple[int, int]] = []
    start, prev = 0, None
    for i, app in enumerate(apps):
        cur = split_app(app)
        if prev is None or cur is None or cur[0] != prev[0] or cur[1] != prev[1] + 1:
            if i:
                out.append((start, i))
            start = i
        prev = cur
    if apps:
        out.append((start, len(apps)))
    return out


def is_run(ev: dict[str, Any]) -> bool:
    """Whether an event is a run line (it stands for `count` messages)."""
    return ev.get("v") == RUN_VERSION and "last_seqno" in ev


def run_problem(ev: dict[str, Any]) -> str | None:
    """What is wrong with a run line (a gap or an excess inside it), or None when it is sound."""
    kind = ev.get("kind")
    if kind not in RUN_KINDS:
        return f"a run line must be one of {', '.join(RUN_KINDS)}, not {kind!r}"
    needed = ("seqno", "last_seqno", "count", "bytes", "app", "last_app") if kind in APP_RUN_KINDS else _RUN_NEEDS
    for key in needed:
        if key not in ev:
            return f"run line lacks {key!r}"
    count, seqno, last_seqno = ev["count"], ev["seqno"], ev["last_seqno"]
    if not all(type(x) is int for x in (count, seqno, last_seqno)) or count < 1:
        return "a run line's seqno, last_seqno and count must be integers, count at least 1"
    if last_seqno - seqno + 1 != count:
        return f"seqnos {seqno}..{last_seqno} are not {count} messages"
    if ("app" in ev) != ("last_app" in ev):
        return "a run line has both app and last_app or neither"
    if "app" not in ev:
        return None
    first, last = split_app(ev["app"]), split_app(ev["last_app"])
    if first is None or last is None or first[0] != last[0]:
        return f"app ids {ev['app']!r}..{ev['last_app']!r} are not one stream's"
    if last[1] - first[1] + 1 != count:
        return f"app ids {ev['app']!r}..{ev['last_app']!r} are not {count} messages"
    return None


_RUN_NEEDS = ("seqno", "last_seqno", "count")


def expand_run(ev: dict[str, Any]) -> list[dict[str, Any]]:
    """A run line's messages as v1 events (an event that is no run: itself alone). A message's
    `bytes` is an even share of the run's (the run keeps only the sum), the first ones taking
    the remainder, so the sum is the run's."""
    if not is_run(ev):
        return [ev]
    problem = run_problem(ev)
    if problem is not None:
        raise ValueError(f"{ev.get('kind')} run at {ev.get('node')} t={ev.get('t')}: {problem}")
    split = split_app(ev["app"]) if "app" in ev else None
    count, seqno = ev["count"], ev["seqno"]
    share, extra = divmod(ev["bytes"], count) if "bytes" in ev else (None, 0)
    base = {k: v for k, v in ev.items() if k not in ("last_seqno", "last_app", "count")}
    base["v"] = EVENT_VERSION
    out = []
    for i in range(count):
        one = dict(base)
        one["seqno"] = seqno + i
        if share is not None:
            one["bytes"] = share + (1 if i < extra else 0)
        if split is not None:
            one["app"] = f"{split[0]}{split[1] + i}"
        out.append(one)
    return out


def expand_runs(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events with every run line replaced by its messages (expand_run), in place."""
    if not any(is_run(ev) for ev in events):
        return events
    out: list[dict[str, Any]] = []
    for ev in events:
        if is_run(ev):
            out.extend(expand_run(ev))
        else:
            out.append(ev)
    return out


# The keys of a per-message data event that are the same along a run (the others: seqno, bytes, app).
_RUN_SAME = ("t", "node", "proto", "kind", "peer", "conn_id", "members")


def compact_runs(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events with every sequence of two or more consecutive v1 events of one run kind that agree
    in everything but seqno, bytes and app id, with consecutive seqnos (and app ids of one stream,
    where they have them), replaced by its run line: what a writer that logged them one by one
    would have written as runs. Other events are left as they are, in order."""
    out: list[dict[str, Any]] = []
    group: list[dict[str, Any]] = []
    last: tuple[Any, ...] | None = None

    def close() -> None:
        if len(group) > 1:
            out.append(_run_of(group))
        else:
            out.extend(group)
        group.clear()

    for ev in events:
        key = _run_key(ev)
        if key is None:
            if group:
                close()
            last = None
            out.append(ev)
            continue
        if group and not (
            key[0] == last[0]  # type: ignore[index]
            and key[1] == last[1] + 1  # type: ignore[index]
            and key[2] == last[2]  # type: ignore[index]
            and (key[3] is None or key[3] == last[3] + 1)  # type: ignore[index]
        ):
            close()
        group.append(ev)
        last = key
    if group:
        close()
    return out


def _run_of(group: list[dict[str, Any]]) -> dict[str, Any]:
    """The run line of v1 events that _run_key says form one run."""
    first = group[0]
    count = len(group)
    if first["kind"] in APP_RUN_KINDS:
        total = sum(ev["bytes"] for ev in group)
        return run_event(
            first["t"], first["node"], first["proto"], first["kind"], first.get("peer"),
            first.get("conn_id"), first["seqno"], count, total, first["app"], group[-1]["app"], first.get("members"),
        )  # fmt: skip
    # Another run kind: the first event's fields in its order, with the run's next to them.
    run: dict[str, Any] = {}
    for key, value in first.items():
        if key == "v":
            run["v"] = RUN_VERSION
        elif key == "seqno":
            run["seqno"] = value
            run["last_seqno"] = value + count - 1
            run["count"] = count
        elif key == "bytes":
            run["bytes"] = sum(ev["bytes"] for ev in group)
        elif key == "app":
            run["app"] = value
            run["last_app"] = group[-1]["app"]
        else:
            run[key] = value
    return run


def _run_key(ev: dict[str, Any]) -> tuple[Any, ...] | None:
    """(what a run shares, seqno, app prefix, app n or None) of a v1 event that may join a run,
    else None (not a run kind, an app id of another form, a field a run cannot carry)."""
    kind = ev.get("kind")
    if kind not in RUN_KINDS or ev.get("v") != EVENT_VERSION or type(ev.get("seqno")) is not int:
        return None
    if "bytes" in ev and type(ev["bytes"]) is not int:
        return None
    app = ev.get("app")
    split = split_app(app) if app is not None else None
    if kind in APP_RUN_KINDS:
        if not set(ev) <= _DATA_EVENT_KEYS or split is None or "bytes" not in ev:
            return None
        members = ev.get("members")
        same = tuple(ev.get(k) for k in _RUN_SAME[:-1]) + ((tuple(members),) if members is not None else (None,))
        return same, ev["seqno"], split[0], split[1]
    if app is not None and split is None or "count" in ev or "last_seqno" in ev or "last_app" in ev:
        return None  # a drop with a count aggregates drops already (node/dropagg.py)
    same = tuple(
        (key, tuple(map(_frozen, value)) if type(value) is list else value)
        for key, value in ev.items()
        if key not in ("seqno", "bytes", "app")
    ) + (("bytes" in ev, app is not None),)
    return same, ev["seqno"], split[0] if split else None, split[1] if split else None


_DATA_EVENT_KEYS = frozenset(("v", "t", "node", "proto", "kind", "peer", "seqno", "conn_id", "bytes", "app", "members"))


def _frozen(value: Any) -> Any:
    return tuple(value) if type(value) is list else value


def unpack_events(events: list[Any]) -> list[dict[str, Any]]:
    """Events as dicts: every DataEvents record replaced by its dicts, in place of the record."""
    if not any(type(ev) is DataEvents for ev in events):
        return events
    out: list[dict[str, Any]] = []
    for ev in events:
        if type(ev) is DataEvents:
            out.extend(ev.dicts())
        else:
            out.append(ev)
    return out


def make_event(t: float, node: str, proto: str, kind: str, **fields: Any) -> dict[str, Any]:
    """Build one event; None-valued optional fields are left out."""
    ev = {"v": EVENT_VERSION, "t": t, "node": node, "proto": proto, "kind": kind}
    ev.update({key: value for key, value in fields.items() if value is not None})
    return ev


def validate_event(ev: dict[str, Any]) -> None:
    """Raise ValueError naming the first field that breaks the schema (used by tests and ingest)."""
    for key in REQUIRED_FIELDS:
        if key not in ev:
            raise ValueError(f"event lacks required field {key!r}")
    if ev["v"] not in EVENT_VERSIONS:
        raise ValueError(f"unsupported event version {ev['v']!r}")
    if ev["v"] == RUN_VERSION:
        problem = run_problem(ev)
        if problem is not None:
            raise ValueError(problem)
    elif "last_seqno" in ev or "last_app" in ev:
        raise ValueError(f"last_seqno and last_app belong to run lines (v {RUN_VERSION})")
    from .protocols import event_kinds

    if ev["kind"] not in event_kinds():
        raise ValueError(f"unknown event kind {ev['kind']!r}")
    for key, value in ev.items():
        if key in REQUIRED_FIELDS:
            continue
        expected = OPTIONAL_FIELDS.get(key)
        if expected is None:
            raise ValueError(f"unknown event field {key!r}")
        if expected is int and isinstance(value, bool) or not isinstance(value, expected):
            raise ValueError(f"event field {key!r} should be {expected.__name__}, got {value!r}")
