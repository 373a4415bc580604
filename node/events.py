"""The event-log schema (version 1) shared by every driver and every checker.

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
"""

from __future__ import annotations

from typing import Any

from .message import app_id_of

EVENT_VERSION = 1

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
    if ev["v"] != EVENT_VERSION:
        raise ValueError(f"unsupported event version {ev['v']!r}")
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
