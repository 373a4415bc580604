"""Plain-Python checkers over a merged event log (schema in node/events.py).

Four checks, each a function from a list of events to a CheckResult:

A connection is (receive-window lifetime, conn_id): a receive window created anew (a
`conn_state` event with reason "new_window:...") starts a new one, as a re-keying sync changes
only the conn_id.

- fifo: per (receiver, receiver incarnation, sender, connection, stream) the app n of successive
  deliveries strictly increases. Gaps are loss and equal n is a duplicate; neither is reported here.
- no_duplicates: per (receiver, receiver incarnation, sender, connection) each app id is delivered
  at most once. An app id delivered again by the same incarnation on another connection is what a
  resync legitimately does after the receiver discarded its window: counted, never a failure.
- no_loss: every app message sent X->Y is delivered at Y (any incarnation of Y), unless X or Y is
  dead at the end of the run or X restarted after sending it (its send window was lost).
- windows_synced: every final send window at X for Y (both alive at the end) matches Y's final
  recv window for X: same conn_id, Y's highest delivered == X's highest sent == X's highest acked.

Application ids ("sender:stream:n", see node.message) are used rather than protocol seqnos, so the
checks do not trust the protocol they judge. Every check is a single pass over the log with dicts
keyed by tuples, so it stays linear on logs of millions of events.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable

from node.message import parse_app_id

# How many examples a failure keeps in its details (and names in its explanation).
FIRST_FEW = 5
LOST_IDS_SHOWN = 10

_LIFECYCLE = ("node_start", "node_stop")
# The node_stop reason of a node stopped gracefully at the end of a live run (node/runtime).
GRACEFUL_STOP = "stop"
# Data-plane events that prove a node held protocol state and so owed a final window snapshot.
_TRAFFIC = frozenset(("send", "deliver", "ack_tx", "ack_rx"))
_HARNESS = "harness"


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check: passed or not, one short sentence for a person, and details."""

    name: str
    passed: bool
    explanation: str
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "passed": self.passed,
            "explanation": self.explanation,
            "details": self.details,
        }


# ---- shared helpers ---------------------------------------------------------------------------


def _ordered(events: list[dict]) -> list[dict]:
    """Events sorted by t with ties in original order; a sorted log is returned as is."""
    # Logs from read_run are already sorted, and checking costs one pass instead of a sort.
    if all(events[i]["t"] <= events[i + 1]["t"] for i in range(len(events) - 1)):
        return events
    return sorted(events, key=lambda ev: ev["t"])


class _Lives:
    """Each node's incarnation, number of starts and last lifecycle event, as the log is walked."""

    def __init__(self) -> None:
        self.incarnation: dict[str, int] = {}
        self.starts: dict[str, int] = {}
        self.last: dict[str, str] = {}
        self.last_reason: dict[str, str | None] = {}
        self.windows: dict[tuple[str, str], int] = {}

    def observe_window(self, ev: dict) -> None:
        """A receive window created anew (reason "new_window:...") starts a new connection: a
        protocol promises exactly-once and FIFO per connection, and a receiver that discarded its
        window (view change, close, restart of the sender) legitimately receives messages again."""
        if ev.get("side") == "recv" and str(ev.get("reason", "")).startswith("new_window"):
            key = (ev["node"], ev.get("peer"))
            self.windows[key] = self.windows.get(key, 0) + 1

    def connection(self, receiver: str, sender: str, conn_id) -> tuple:
        return (self.windows.get((receiver, sender), 0), conn_id)

    def observe(self, ev: dict) -> None:
        node, kind = ev["node"], ev["kind"]
        if kind == "node_start":
            # A start without an incarnation field still has to open a new epoch.
            self.incarnation[node] = ev.get("incarnation", self.incarnation.get(node, -1) + 1)
            self.starts[node] = self.starts.get(node, 0) + 1
        self.last[node] = kind
        self.last_reason[node] = ev.get("reason")

    def incarnation_of(self, node: str) -> int:
        return self.incarnation.get(node, 0)

    def dead(self, node: str) -> bool:
        """True when the node's last lifecycle event is a stop (a node never seen is not dead).

        A graceful stop (reason "stop": a live backend stopping its nodes when the run is over,
        after their final window snapshots) is the end of the run, not a death."""
        return self.last.get(node) == "node_stop" and self.last_reason.get(node) != GRACEFUL_STOP


def _deliveries(events: list[dict], lives: _Lives):
    """The deliver events with an app id, in time order, keeping `lives` up to date on the way."""
    for ev in _ordered(events):
        kind = ev["kind"]
        if kind in _LIFECYCLE:
            lives.observe(ev)
        elif kind == "conn_state":
            lives.observe_window(ev)
        elif kind == "deliver" and "app" in ev:
            yield ev


def _parse_app(ev: dict) -> tuple[str, int, int]:
    try:
        return parse_app_id(ev["app"])
    except ValueError:
        raise ValueError(
            f"{ev['kind']} at {ev['node']} t={ev['t']} has a malformed app id {ev['app']!r}"
        ) from None


def _fmt_t(t: float | None) -> str:
    return "never" if t is None else f"t={t:.3f}"


def _link(sender: str, receiver: str) -> str:
    return f"{sender}->{receiver}"


# ---- fifo -------------------------------------------------------------------------------------


def check_fifo(events: list[dict]) -> CheckResult:
    """Successive deliveries of one stream on one connection carry strictly increasing app n."""
    lives = _Lives()
    highest: dict[tuple, int] = {}
    violations: list[dict] = []
    count = delivered = 0
    for ev in _deliveries(events, lives):
        delivered += 1
        origin, stream, n = _parse_app(ev)
        receiver, sender, conn_id = ev["node"], ev.get("peer", origin), ev.get("conn_id")
        incarnation = lives.incarnation_of(receiver)
        key = (receiver, incarnation, sender, lives.connection(receiver, sender, conn_id), origin, stream)
        prev = highest.get(key)
        if prev is None or n > prev:
            highest[key] = n
        elif n < prev:
            # Compare with the highest n so far, so 5,3,4 reports both 3 and 4 as out of order.
            count += 1
            if len(violations) < FIRST_FEW:
                violations.append(
                    {"receiver": receiver, "incarnation": incarnation, "sender": sender,
                     "conn_id": conn_id, "stream": stream, "app": ev["app"],
                     "after": f"{origin}:{stream}:{prev}", "t": ev["t"]}
                )
    return fifo_result(delivered, count, violations)


def fifo_result(delivered: int, count: int, violations: list[dict]) -> CheckResult:
    """fifo's verdict from its tallies (shared with the Spark pipeline, so both read alike)."""
    details = {"deliveries": delivered, "violations": count, "first": violations}
    if not count:
        return CheckResult("fifo", True, f"{delivered} deliveries in FIFO order", details)
    v = violations[0]
    explanation = (
        f"receiver {v['receiver']} (incarnation {v['incarnation']}) delivered {v['app']} after "
        f"{v['after']} from {v['sender']} (conn {v['conn_id']}, stream {v['stream']}) at "
        f"{_fmt_t(v['t'])}; {count} FIFO violation(s) in total"
    )
    return CheckResult("fifo", False, explanation, details)


# ---- no_duplicates ----------------------------------------------------------------------------


def check_no_duplicates(events: list[dict]) -> CheckResult:
    """Each app id is delivered at most once per receiver incarnation, sender and connection."""
    lives = _Lives()
    # (receiver, incarnation, sender, app) -> ((conn_id, first delivery t), ...): nearly always
    # one pair, a second one only after a resync under a new conn_id.
    seen: dict[tuple, tuple[tuple, ...]] = {}
    duplicates: list[dict] = []
    count = redelivered = delivered = 0
    for ev in _deliveries(events, lives):
        delivered += 1
        receiver, app = ev["node"], ev["app"]
        sender = ev.get("peer") or _parse_app(ev)[0]
        conn_id = lives.connection(receiver, sender, ev.get("conn_id"))
        incarnation = lives.incarnation_of(receiver)
        key = (receiver, incarnation, sender, app)
        pairs = seen.get(key)
        if pairs is None:
            seen[key] = ((conn_id, ev["t"]),)
            continue
        first_t = next((t for c, t in pairs if c == conn_id), None)
        if first_t is None:
            seen[key] = pairs + ((conn_id, ev["t"]),)
            # Count app ids, not deliveries: the second conn_id is the one that makes it a reset.
            if len(pairs) == 1:
                redelivered += 1
            continue
        count += 1
        if len(duplicates) < FIRST_FEW:
            duplicates.append(
                {"receiver": receiver, "incarnation": incarnation, "sender": sender,
                 "conn_id": conn_id[1], "window": conn_id[0], "app": app, "first_t": first_t, "t": ev["t"]}
            )
    return no_duplicates_result(delivered, count, duplicates, redelivered)


def no_duplicates_result(delivered: int, count: int, duplicates: list[dict], redelivered: int) -> CheckResult:
    """no_duplicates' verdict from its tallies (shared with the Spark pipeline)."""
    details = {"deliveries": delivered, "duplicates": count, "first": duplicates,
               "redelivered_after_reset": redelivered}
    if not count:
        explanation = f"no duplicates among {delivered} deliveries"
        if redelivered:
            explanation += f" ({redelivered} app id(s) redelivered under a new conn_id after a reset)"
        return CheckResult("no_duplicates", True, explanation, details)
    d = duplicates[0]
    explanation = (
        f"receiver {d['receiver']} (incarnation {d['incarnation']}) delivered {d['app']} from "
        f"{d['sender']} twice on conn {d['conn_id']}, at {_fmt_t(d['first_t'])} and "
        f"{_fmt_t(d['t'])}; {count} duplicate delivery(ies) in total"
    )
    return CheckResult("no_duplicates", False, explanation, details)


# ---- no_loss ----------------------------------------------------------------------------------


def check_no_loss(events: list[dict]) -> CheckResult:
    """Every app message sent X->Y is delivered at Y, unless excused by a death or a restart."""
    lives = _Lives()
    # (sender, receiver, app) -> sender's start count when it sent; a later start lost the window.
    sent: dict[tuple[str, str, str], int] = {}
    delivered: set[tuple[str, str, str]] = set()
    last_deliver_link: dict[tuple[str, str], float] = {}
    last_deliver: float | None = None
    for ev in _ordered(events):
        kind = ev["kind"]
        if kind in _LIFECYCLE:
            lives.observe(ev)
        elif kind == "send" and "app" in ev and "peer" in ev:
            sent[(ev["node"], ev["peer"], ev["app"])] = lives.starts.get(ev["node"], 0)
        elif kind == "deliver" and "app" in ev:
            sender = ev.get("peer") or _parse_app(ev)[0]
            delivered.add((sender, ev["node"], ev["app"]))
            last_deliver_link[(sender, ev["node"])] = last_deliver = ev["t"]

    excused = {"dead_at_end": 0, "sender_restarted": 0}
    # Per link: count and the first app ids, so a link losing millions stays cheap to report.
    lost_count: dict[tuple[str, str], int] = defaultdict(int)
    lost_first: dict[tuple[str, str], list[str]] = defaultdict(list)
    for (sender, receiver, app), starts in sent.items():
        if lives.dead(sender) or lives.dead(receiver):
            excused["dead_at_end"] += 1
        elif lives.starts.get(sender, 0) > starts:
            excused["sender_restarted"] += 1
        elif (sender, receiver, app) not in delivered:
            lost_count[(sender, receiver)] += 1
            if len(lost_first[(sender, receiver)]) < LOST_IDS_SHOWN:
                lost_first[(sender, receiver)].append(app)

    lost = {_link(*link): {"count": count, "first": lost_first[link],
                           "last_deliver_t": last_deliver_link.get(link)}
            for link, count in lost_count.items()}
    return no_loss_result(len(sent), excused, last_deliver, lost)


def no_loss_result(sent: int, excused: dict, last_deliver: float | None, lost: dict) -> CheckResult:
    """no_loss' verdict from its tallies (shared with the Spark pipeline): `lost` maps a link
    "X->Y" to its count, first app ids and last delivery time, in the order to report them."""
    checked = sent - sum(excused.values())
    details: dict = {"sent": sent, "checked": checked, "excused": excused,
                     "last_deliver_t": last_deliver, "lost": lost}
    if not lost:
        explanation = f"all {checked} checked messages delivered"
        if checked != sent:
            explanation += (f" (not checked: {excused['dead_at_end']} to or from a node dead at "
                            f"end, {excused['sender_restarted']} sent before a sender restart)")
        return CheckResult("no_loss", True, explanation, details)
    total = sum(info["count"] for info in lost.values())
    parts = [
        f"{name}: {info['count']} never delivered (first {' '.join(info['first'])}; "
        f"last delivery on this link {_fmt_t(info['last_deliver_t'])})"
        for name, info in details["lost"].items()
    ]
    explanation = (f"{total} message(s) lost: " + "; ".join(parts)
                   + f"; last delivery anywhere {_fmt_t(last_deliver)}")
    return CheckResult("no_loss", False, explanation, details)


# ---- windows_synced ---------------------------------------------------------------------------


def window_view(ev: dict | None) -> dict | None:
    if ev is None:
        return None
    return {"conn_id": ev.get("conn_id"), "low": ev.get("low"), "high": ev.get("high"),
            "state": ev.get("state")}


def pair_problem(sender: str, receiver: str, send: dict, recv: dict | None) -> str | None:
    """Why one send window and its matching recv window are out of sync, or None if in sync."""
    ha, hs = send.get("low"), send.get("high")
    sent_part = f"{sender} send conn {send.get('conn_id')} HA={ha} HS={hs}"
    if recv is None:
        # No receive window and nothing outstanding is an idle pair, not a divergence.
        return None if ha == hs else f"{sent_part}, {receiver} has no recv window"
    recv_part = (f"{receiver} recv conn {recv.get('conn_id')} delivered={recv.get('low')} "
                 f"received={recv.get('high')}")
    if send.get("conn_id") != recv.get("conn_id"):
        return f"conn_id mismatch: {sent_part}, {recv_part}"
    if ha != hs or recv.get("low") != hs:
        return f"{sent_part}, {recv_part}"
    return None


def check_windows_synced(events: list[dict]) -> CheckResult:
    """Final send and recv windows of every live pair agree, and nothing is left unacked."""
    lives = _Lives()
    send_windows: dict[tuple[str, str], dict] = {}  # (sender, receiver) -> final window event
    recv_windows: dict[tuple[str, str], dict] = {}  # (sender, receiver) -> final window event
    last_deliver: dict[tuple[str, str], float] = {}  # (sender, receiver) -> t
    last_ack_rx: dict[tuple[str, str], float] = {}  # (sender, receiver) -> t
    traffic_since_start: set[str] = set()
    reported: set[str] = set()
    last_heal = 0.0
    for ev in _ordered(events):
        kind, node = ev["kind"], ev["node"]
        if kind in _LIFECYCLE:
            lives.observe(ev)
            # A restarted node lost its windows, so only traffic after the last start counts.
            traffic_since_start.discard(node)
            continue
        if kind in _TRAFFIC:
            traffic_since_start.add(node)
        if kind == "deliver" and "peer" in ev:
            last_deliver[(ev["peer"], node)] = ev["t"]
        elif kind == "ack_rx" and "peer" in ev:
            last_ack_rx[(node, ev["peer"])] = ev["t"]
        elif kind == "window" and ev.get("final") and "peer" in ev:
            reported.add(node)
            if ev.get("side") == "send":
                send_windows[(node, ev["peer"])] = ev
            elif ev.get("side") == "recv":
                recv_windows[(ev["peer"], node)] = ev
        elif _is_heal(ev):
            last_heal = ev["t"]

    pairs: dict[str, dict] = {}
    skipped_dead = 0
    for (sender, receiver), send in send_windows.items():
        if lives.dead(sender) or lives.dead(receiver):
            skipped_dead += 1
            continue
        recv = recv_windows.get((sender, receiver))
        problem = pair_problem(sender, receiver, send, recv)
        sync_time = None
        if problem is None:
            moved = max(last_deliver.get((sender, receiver), 0.0),
                        last_ack_rx.get((sender, receiver), 0.0))
            sync_time = max(0.0, moved - last_heal)
        pairs[_link(sender, receiver)] = {"synced": problem is None, "problem": problem,
                                          "send": window_view(send), "recv": window_view(recv),
                                          "sync_time": sync_time}

    # A recv window with no send window at a live sender is stale (the sender restarted and has
    # not sent since); the next send resyncs it, so it is reported but is no failure.
    stale_recv = sorted(
        _link(*link) for link in recv_windows
        if link not in send_windows and not lives.dead(link[0]) and not lives.dead(link[1])
    )
    silent = sorted(n for n in traffic_since_start if not lives.dead(n) and n not in reported)
    return windows_synced_result(pairs, silent, skipped_dead, stale_recv, last_heal)


def windows_synced_result(pairs: dict, silent: list[str], skipped_dead: int, stale_recv: list[str],
                          last_heal: float) -> CheckResult:
    """windows_synced's verdict from the judged pairs (shared with the Spark pipeline): `pairs`
    maps "X->Y" to synced/problem/send/recv/sync_time, in the order to report them."""
    problems = [f"{link} {p['problem']}" for link, p in pairs.items() if p["problem"] is not None]
    if silent:
        problems.append(f"final windows not reported by {', '.join(silent)} (alive at end, with traffic)")
    sync_times = [p["sync_time"] for p in pairs.values() if p["sync_time"] is not None]
    max_sync_time = max(sync_times, default=None)
    details = {"pairs": pairs, "out_of_sync": len(pairs) - len(sync_times),
               "not_reported": silent, "skipped_dead": skipped_dead, "stale_recv": stale_recv,
               "last_heal_t": last_heal, "max_sync_time": max_sync_time}
    if problems:
        return CheckResult("windows_synced", False, "; ".join(problems), details)
    explanation = f"{len(pairs)} pair(s) in sync"
    if max_sync_time is not None:
        explanation += f", max sync time {max_sync_time:.3f}s after last heal at {_fmt_t(last_heal)}"
    return CheckResult("windows_synced", True, explanation, details)


def _is_heal(ev: dict) -> bool:
    """A heal in the harness timeline: any fault_off, or a fault_on of the "heal" fault."""
    if ev["node"] != _HARNESS and ev["proto"] != _HARNESS:
        return False
    return ev["kind"] == "fault_off" or (ev["kind"] == "fault_on" and ev.get("fault") == "heal")


# ---- registry ---------------------------------------------------------------------------------

CHECKS: dict[str, Callable[[list[dict]], CheckResult]] = {
    "fifo": check_fifo,
    "no_duplicates": check_no_duplicates,
    "no_loss": check_no_loss,
    "windows_synced": check_windows_synced,
}


def run_checks(events: list[dict], names: Iterable[str] | None = None) -> list[CheckResult]:
    """Run the named checks (all by default) in the given order over one merged event log."""
    names = list(CHECKS) if names is None else list(names)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(map(repr, unknown))}; known: {', '.join(CHECKS)}")
    # Sort once here so that each check's own ordering pass is a cheap linear confirmation.
    ordered = _ordered(events)
    return [CHECKS[name](ordered) for name in names]
