"""The event-log schema (version 1) shared by every driver and every checker.

One event is a flat dict, written as one JSON line. Required keys: v, t (float seconds, one clock
per run), node, proto, kind. Optional keys are listed in OPTIONAL_FIELDS; a producer may add
nothing else, so that the Spark schema stays explicit.

`bytes`, on the events of messages a node sends or delivers: the payload for DATA (send, deliver,
retransmit), the protocol header for a control message (ack_tx, xmit_req_tx, first_seqno_tx,
sync_tx, close_tx), which has no payload. Frame and transport headers are not included.

`links`, on the harness timeline's fault_on / fault_off: the directed links ("A->B") the fault cuts
(a partition, a pause, total loss, an unbounded in-process drop), so that no_loss knows when two
nodes could talk without reading the scenario.
"""

from __future__ import annotations

EVENT_VERSION = 1

# kind -> what it records. Protocol layers, the fault layer, the application boundary and the
# drivers all write into the same vocabulary.
EVENT_KINDS = {
    "send": "a DATA message handed to the network for the first time (seqno, conn_id, app)",
    "deliver": "a message delivered to the application, in order (seqno, conn_id, app)",
    "ack_tx": "cumulative ACK sent (seqno = highest delivered, conn_id)",
    "ack_rx": "ACK received and applied (seqno, conn_id)",
    "xmit_req_tx": "XMIT-REQ sent (ranges, count = number of seqnos asked for)",
    "xmit_req_rx": "XMIT-REQ received (ranges, count)",
    "retransmit": "a DATA message sent again (seqno, conn_id, reason)",
    "first_seqno_tx": "SEND_FIRST_SEQNO sent by a receiver without a usable window",
    "first_seqno_rx": "SEND_FIRST_SEQNO received by the sender",
    "sync_tx": "a resync message sent (phase = sync | sync_ok | sync_ack, seqno = low for sync_ok)",
    "sync_rx": "a resync message received (phase, seqno, conn_id)",
    "sync_timeout": "a resync gave up (phase, peer)",
    "close_tx": "CLOSE sent to a peer when a sender entry is reaped",
    "close_rx": "CLOSE received; the receive window is removed",
    "conn_state": "a connection entry changed state (side = send | recv, state, reason)",
    "window": "a snapshot of one window (side, conn_id, low, high, state); final=true at end of run",
    "view": "a view was installed (members, view_id)",
    "drop": "a message was dropped (reason, type)",
    "fault_on": "a fault was applied (fault, detail; links = the directed links it cuts, if any)",
    "fault_off": "a fault was removed (fault, detail; links = the directed links it no longer cuts)",
    "block": "a sender blocked (MCAST window full)",
    "unblock": "a sender unblocked",
    "node_start": "a node (re)started (incarnation)",
    "node_stop": "a node stopped or was killed (reason)",
    "error": "an exception inside a protocol layer, a bug (reason = type and message, detail = traceback tail)",
}

REQUIRED_FIELDS = ("v", "t", "node", "proto", "kind")

OPTIONAL_FIELDS = {
    "peer": str,
    "seqno": int,
    "conn_id": int,
    "bytes": int,
    "app": str,
    "type": str,
    "reason": str,
    "phase": str,
    "side": str,
    "state": str,
    "low": int,
    "high": int,
    "count": int,
    "ranges": list,
    "first": bool,
    "final": bool,
    "members": list,
    "view_id": int,
    "fault": str,
    "detail": str,
    "incarnation": int,
    "timestamp": int,
    "links": list,
}


def make_event(t: float, node: str, proto: str, kind: str, **fields) -> dict:
    """Build one event; None-valued optional fields are left out."""
    ev = {"v": EVENT_VERSION, "t": t, "node": node, "proto": proto, "kind": kind}
    ev.update({key: value for key, value in fields.items() if value is not None})
    return ev


def validate_event(ev: dict) -> None:
    """Raise ValueError naming the first field that breaks the schema (used by tests and ingest)."""
    for key in REQUIRED_FIELDS:
        if key not in ev:
            raise ValueError(f"event lacks required field {key!r}")
    if ev["v"] != EVENT_VERSION:
        raise ValueError(f"unsupported event version {ev['v']!r}")
    if ev["kind"] not in EVENT_KINDS:
        raise ValueError(f"unknown event kind {ev['kind']!r}")
    for key, value in ev.items():
        if key in REQUIRED_FIELDS:
            continue
        expected = OPTIONAL_FIELDS.get(key)
        if expected is None:
            raise ValueError(f"unknown event field {key!r}")
        if expected is int and isinstance(value, bool) or not isinstance(value, expected):
            raise ValueError(f"event field {key!r} should be {expected.__name__}, got {value!r}")
