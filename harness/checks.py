"""Plain-Python checkers over a merged event log (schema in node/events.py).

A checker never takes the protocol's word. It judges from what the applications sent and
delivered (application ids "sender:stream:n" embedded in payloads, never protocol seqnos), from
node lifecycles (node_start / node_stop) and from the harness's own fault timeline. The only
protocol events it reads are the sender's acks and the receiver's window closures, and only to
narrow an excuse (see no_duplicates), never to widen one.

- fifo: per (receiver, sender, stream) the app n of successive deliveries strictly increases.
  The sequence starts afresh only where the receiver really discarded its window for that sender
  (see "discards" below); a re-key by SYNC on a live window starts nothing.
- no_duplicates: an app id is delivered once per receiver. A second delivery is excused only when
  the receiver's window for that sender was discarded after the first delivery AND the sender had
  not seen the message acked when it came again (a message the sender saw acked is purged and can
  legitimately never come back). A multicast counts as acked once every member the sender last
  multicast to acked it (a multicast protocol's ack_rx, or NAKACK2's STABLE digests, stable_rx):
  only then may the sender purge it. Excused redeliveries are counted with their cause.
- no_loss: a message sent X->Y is owed once X (in the incarnation that sent it) and Y (in any one
  incarnation) have been up and connected for `recovery_bound_s` after it was sent, or are still
  connected at the end of the run: both alive, neither paused, and no fault cutting X->Y or Y->X
  (the `links` of the timeline's faults). What happens later (a kill, a restart) excuses nothing.
  Owed messages must be delivered at Y (any incarnation); the others are excused and counted by
  why, the explanation naming the first few of each multicast excuse. A multicast (a `send` with
  the sender's view in `members` and no `peer`) is one message to each other member of that view,
  owed by the same rule; the sender's own delivery (loopback) never crosses the network and is
  not owed (excuse loopback). A member is excused a multicast only when it was really out of
  reach for it (excuse left_view): the life of the member the sender's view listed was cut,
  paused or dead from less than the recovery bound after the send until the sender dropped it
  from its view, or the member dropped the sender (and on until it took the sender back); a view
  installed while the two were connected excuses nothing, however brief. A member that joined
  later is excused what its join digest starts it above (excuse join_digest: the first `view` of
  a member's life, reason join, says in `digest` "S:N" that its table for S starts after seqno N;
  a multicast of S numbered N or lower and sent before that view is not owed to it), but never a
  multicast S sent after installing a view with the joiner (the joiner's join view or a later
  one): that one S addressed to it, whatever a digest says. fifo and no_duplicates judge
  multicast deliveries as they judge unicast ones, per (receiver, sender); a check of deliveries
  that saw only loopback ones judged nothing (vacuous).
- windows_synced: every final send window at X for Y (both alive at the end) matches Y's final
  recv window for X: same conn_id, Y's highest delivered == X's highest sent == X's highest acked.
  A pair whose send window the protocol reaped (CLOSED) after use is judged in sync (send None).
  Multicast windows (per view member, no conn_id) after a restart: a receiver's window of a sender
  restarted without multicasting since is stale, and a restarted receiver's empty window is judged
  as no window (idle when the sender has nothing outstanding).
  A node alive at the end must report a final snapshot of each window its conn_state events left
  open (windows reaped by the protocol are not expected).
  A pair whose receiver delivered everything but whose sender has not seen it all acked is
  inconclusive, not out of sync, when the sender's final window came less than the protocol's ack
  bound after its last send (`ack_bounds`: NAKACK2 sees acks only through STABLE rounds; the
  explanation names the setting); a run with only such pairs judged nothing. A node paused at the
  end is judged like a cut: its pairs are skipped (and named), as a dead node's are.
- no_errors: no `error` event (an exception inside a protocol layer: a bug of ours).
- views_agree (membership): at the end of the run (its first graceful stop, or the end of the
  log), every live node has installed the same view since its last start (members, view_id and
  coordinator of its last `view` event; members and coordinator only under static membership,
  where no view names a reason and view ids are each node's own count) and that view lists
  exactly the live nodes. A node paused at the end is judged like a cut: it need not agree, and
  the view may list it or not. A node is live
  when its last lifecycle event is not a kill (a graceful stop ends a live run). The run's end is
  the settle time after the last heal, so this is "after the last heal and `settle`".
- xmit_traffic (bounded, only when listed): at most `xmit_bound` retransmissions over the run,
  requests and messages sent again for any cause, counted from the events the spec's
  `xmit_traffic` names (every built-in protocol: xmit_req_tx and retransmit); vacuous when no
  application message was sent.
- resync_traffic (bounded, only when listed): at most `resync_bound` resync messages per pair (the
  spec's `resync_traffic`; NAKACK2's is a sender's catch-up of a joiner); a protocol that declares
  none is named as not applicable.

Discards: the receiver R's window for sender S is discarded when R (re)starts, or when R logs its
receive window for S CLOSED with reason close_rx (a CLOSE received) or close_timeout (reaped after
leaving the view or idling). A window the protocol replaced by itself is no discard.

A check that judged nothing (no deliveries, no owed message, no window pair, no node event) is
*vacuous*: it does not pass (passed=False, vacuous=True) and says what it found nothing of, so a run
can never pass on an empty log. Every result carries `judged`, the number of things it judged.

Every check is a single pass over the log with dicts keyed by tuples, so it stays linear on logs of
millions of events. A run line (one line for a run of sends or deliveries, node/events.py) is read
as it is: its messages are made one at a time as the walk reaches it (_see_run), never kept.
"""

from __future__ import annotations

import gc
import operator
from bisect import bisect_left, bisect_right, insort
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from splitbrain.node.events import EVENT_VERSION, RUN_VERSION, run_problem
from splitbrain.node.message import parse_app_id
from splitbrain.node.views import pair_problem

# How many examples a failure keeps in its details (and names in its explanation).
FIRST_FEW = 5
LOST_IDS_SHOWN = 10
# no_loss: the default recovery bound when a caller gives none (UNICAST3's defaults: 8 x
# xmit_interval 0.5 s + ack_min_interval 0.5 s; scenarios resolve theirs from the protocol).
DEFAULT_RECOVERY_BOUND_S = 4.5

_LIFECYCLE = ("node_start", "node_stop")
# The node_stop reason of a node stopped gracefully at the end of a live run (node/runtime).
GRACEFUL_STOP = "stop"
# The keys of a run line (node/events.py) that its messages do not have.
_RUN_ONLY = frozenset(("last_seqno", "last_app", "count"))
# Data-plane events that prove a node held protocol state and so owed a final window snapshot.
_TRAFFIC = frozenset(("send", "deliver", "ack_tx", "ack_rx"))
_HARNESS = "harness"
_CLOSED = "CLOSED"
# The reasons of a receive window's move to CLOSED that discard it for real: the sender closed the
# connection (CLOSE received), the window was reaped (left the view or idle, then timed out), or
# a protocol without a CLOSING state removed it at once when the sender left the view or the
# connection expired (left_view, expired). A window the protocol itself "replaced" is not a
# discard: that is the resync the checks judge.
DISCARD_REASONS = frozenset(("close_rx", "close_timeout", "left_view", "expired"))
# Why a message was not owed (no_loss), in the order they are tested and reported.
EXCUSES = ("sender_lost_window", "receiver_dead", "cut_at_end", "too_little_time")
_EXCUSE_TEXT = {
    "sender_lost_window": "sender died or restarted before it could recover them",
    "receiver_dead": "receiver dead at the end",
    "cut_at_end": "link still cut at the end",
    "too_little_time": "sent less than the recovery bound before a cut or a death",
    "loopback": "the sender's own delivery of its multicast (never on the network, so never lost)",
    "left_view": "multicast to a member out of the sender's reach (cut, paused or dead) from (nearly) the "
    "send until one of the two dropped the other from its view",
    "join_digest": "multicast at or below a joiner's join digest, sent before the sender installed a view "
    "with the joiner",
}
# Why a multicast was not owed to a member, besides EXCUSES (only in runs with multicasts).
MULTICAST_EXCUSES = ("loopback", "left_view", "join_digest")
# Why a redelivery was excused (no_duplicates).
REDELIVERY_CAUSES = ("receiver_restarted", "window_closed")


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check: passed or not, one short sentence for a person, and details.

    `judged` counts what the check examined; `vacuous` is true when that is nothing, in which case
    `passed` is False: a check that saw nothing has proved nothing."""

    name: str
    passed: bool
    explanation: str
    details: dict = field(default_factory=dict)
    judged: int = 0
    vacuous: bool = False
    # False: the check cannot judge this run's nodes at all (windows_synced of nodes that report no
    # windows): neither passed nor failed, and left out of the outcome (harness.rundir.outcome_of).
    applicable: bool = True

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "passed": self.passed,
            "explanation": self.explanation,
            "details": self.details,
            "judged": self.judged,
            "vacuous": self.vacuous,
            **({} if self.applicable else {"applicable": False}),
        }


def not_applicable_result(name: str, why: str, details: dict) -> CheckResult:
    """The result of a check that cannot judge this kind of run (`why` says so)."""
    return CheckResult(name, False, f"not applicable: {why}", details, judged=0, applicable=False)


def vacuous_result(name: str, nothing: str, details: dict) -> CheckResult:
    """The result of a check that judged nothing (`nothing` says of what)."""
    return CheckResult(name, False, f"judged nothing: {nothing}", details, judged=0, vacuous=True)


# ---- shared helpers ---------------------------------------------------------------------------


class _SortedLog(list):
    """A log run_checks has put in time order: the checks take it as it is."""


def _ordered(events: list[dict]) -> list[dict]:
    """Events sorted by t with ties in original order; a sorted log is returned as is."""
    if isinstance(events, _SortedLog):
        return events
    # Logs from read_run are already sorted, and checking costs one pass instead of a sort.
    times = [ev["t"] for ev in events]
    if all(map(operator.le, times, islice(times, 1, None))):
        return events
    return sorted(events, key=lambda ev: ev["t"])


class _Lives:
    """Each node's incarnation, number of starts and last lifecycle event, as the log is walked."""

    def __init__(self) -> None:
        self.incarnation: dict[str, int] = {}
        self.starts: dict[str, int] = {}
        self.last: dict[str, str] = {}
        self.last_reason: dict[str, str | None] = {}

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


def _parse_app(ev: dict) -> tuple[str, int, int]:
    try:
        return parse_app_id(ev["app"])
    except ValueError:
        raise ValueError(f"{ev['kind']} at {ev['node']} t={ev['t']} has a malformed app id {ev['app']!r}") from None


def _sender_of(ev: dict) -> str:
    return ev.get("peer") or _parse_app(ev)[0]


def _fmt_t(t: float | None) -> str:
    return "never" if t is None else f"t={t:.3f}"


def _link(sender: str, receiver: str) -> str:
    return f"{sender}->{receiver}"


def _is_harness(ev: dict) -> bool:
    return ev["node"] == _HARNESS or ev["proto"] == _HARNESS


# ---- discards and acks: what may legitimately come twice --------------------------------------


class _Redeliveries:
    """Walks a log and says, for each delivery, whether it repeats an earlier one and whether the
    repeat is excused (see the module docstring). Shared by fifo and no_duplicates."""

    def __init__(self) -> None:
        self.lives = _Lives()
        # (receiver, sender) -> number of CLOSED receive windows; receiver -> number of starts.
        self._closed: dict[tuple[str, str], int] = {}
        # (sender, receiver) -> current send-window lifetime (a new one restarts seqnos at 1).
        self._lifetime: dict[tuple[str, str], int] = {}
        # (sender, receiver, app) -> (lifetime, seqno, order), from the sender's send events; a run
        # line's sends as one entry, (sender, receiver, "S:K:") -> [(n0, n1, lifetime, seqno of n0,
        # order)]: `order` counts sends, so the later of two sends of one app id is the one kept.
        self._sent: dict[tuple[str, str, str], tuple[Any, int, int]] = {}
        self._sent_runs: dict[tuple[str, str, str], list[tuple[int, int, int, int, int]]] = {}
        self._order = 0
        # (sender, receiver, lifetime) -> (t, highest seqno acked by then), one entry per rise. A
        # multicast's lifetime is ("multicast", the sender's starts) (see _multicast_life).
        self._acked: dict[tuple[str, str, Any], list[tuple[float, int]]] = {}
        self._multicast_protos: dict[str, bool] = {}
        # Multicast: (sender, its life) -> member -> highest ack; sender -> the members it multicast to.
        self._member_acks: dict[tuple[str, Any], dict[str, int]] = {}
        self._multicast_members: dict[str, list[str]] = {}
        # (sender, receiver, seqno) -> when the sender last sent its multicast again to the receiver.
        self._resent: dict[tuple[str, str, int], float] = {}
        self._highest_multicast: dict[str, int] = {}  # sender -> its highest seqno in this life

    def epoch(self, receiver: str, sender: str) -> tuple[int, int]:
        """Advances exactly when the receiver's window for the sender was discarded."""
        return (self.lives.starts.get(receiver, 0), self._closed.get((receiver, sender), 0))

    def acked(self, sender: str, receiver: str, app: str, t: float) -> bool:
        """Had the sender seen `app` acked before time t? An ACK at the very same time cannot be
        told from one the delivery itself caused (a zero-latency link), so it does not count."""
        where = self._sent.get((sender, receiver, app))
        if self._sent_runs:
            where = _later_send(where, self._sent_runs, sender, receiver, app)
        if where is None:
            return False
        # A multicast is purged only once every member acked it: its rises are the sender's stable
        # point, and what counts is whether it was stable when the sender sent it again.
        multicast = isinstance(where[0], tuple)
        if multicast:
            t = min(t, self._resent.get((sender, receiver, where[1]), t))
        rises = self._acked.get((sender, "*" if multicast else receiver, where[0]), ())
        for when, seqno in reversed(rises):
            if when < t:
                return seqno >= where[1]
        return False

    def see_send(self, ev: dict) -> None:
        peer, app = ev.get("peer"), ev.get("app")
        if app is None or "seqno" not in ev:
            return
        node = ev["node"]
        self._order += 1
        if peer is not None:
            key = (node, peer)
            self._sent[(node, peer, app)] = (self._lifetime.get(key, 0), ev["seqno"], self._order)
        elif "members" in ev:
            # A multicast is one message to each other member, numbered in the sender's life.
            life = self._multicast_life(node)
            self._multicast_members[node] = [m for m in ev["members"] if m != node]
            self._highest_multicast[node] = max(self._highest_multicast.get(node, 0), ev["seqno"])
            for member in ev["members"]:
                if member != node:
                    self._sent[(node, member, app)] = (life, ev["seqno"], self._order)

    def see_send_run(self, run: dict) -> None:
        """see_send for every message of a run line (node/events.py): one entry for a run on a
        connection; a multicast run, one message at a time (its members each get an entry)."""
        peer = run.get("peer")
        if peer is None:
            if "members" in run:
                from splitbrain.node.events import expand_run

                for ev in expand_run(run):
                    self.see_send(ev)
            return
        prefix, _, raw_n = run["app"].rpartition(":")
        n0 = int(raw_n)
        self._order += 1
        entry = (n0, n0 + run["count"] - 1, self._lifetime.get((run["node"], peer), 0), run["seqno"], self._order)
        self._sent_runs.setdefault((run["node"], peer, prefix), []).append(entry)

    def _multicast_life(self, node: str) -> tuple[str, int]:
        """A multicast sender's seqnos start again at each start of the node (no conn_state)."""
        return ("multicast", self.lives.starts.get(node, 0))

    def _is_multicast(self, proto: str) -> bool:
        known = self._multicast_protos.get(proto)
        if known is None:
            from splitbrain.node import protocols

            try:
                known = protocols.get(proto).multicast
            except ValueError:
                known = False
            self._multicast_protos[proto] = known
        return known

    def _ack_rise(self, key: tuple, t: float, seqno: int) -> None:
        rises = self._acked.setdefault(key, [])
        if not rises or seqno > rises[-1][1]:
            rises.append((t, seqno))

    def _multicast_ack(self, sender: str, member: str, t: float, seqno: int) -> None:
        """A member acked the sender's multicasts up to seqno: the sender's stable point (the lowest
        ack over the members it last multicast to) may rise."""
        if seqno > self._highest_multicast.get(sender, 0):
            return  # above anything this life of the sender multicast: a stale ack, of an earlier life
        life = self._multicast_life(sender)
        acks = self._member_acks.setdefault((sender, life), {})
        if seqno > acks.get(member, 0):
            acks[member] = seqno
        members = self._multicast_members.get(sender)
        if members:
            self._ack_rise((sender, "*", life), t, min(acks.get(m, 0) for m in members))

    def see_other(self, ev: dict) -> None:
        """Keep the state up to date with an event that is neither a send nor a delivery."""
        kind = ev["kind"]
        if kind == "ack_rx":
            peer = ev.get("peer")
            if peer is not None and "seqno" in ev:
                node = ev["node"]
                if self._is_multicast(ev["proto"]):
                    # A multicast protocol's ack: the member delivered the sender's multicasts up to it.
                    self._multicast_ack(node, peer, ev["t"], ev["seqno"])
                else:
                    self._ack_rise((node, peer, self._lifetime.get((node, peer), 0)), ev["t"], ev["seqno"])
        elif kind == "retransmit" and ev.get("peer") is not None and "seqno" in ev and self._is_multicast(ev["proto"]):
            if ev.get("origin", ev["node"]) == ev["node"]:  # its own multicast, sent again
                self._resent[(ev["node"], ev["peer"], ev["seqno"])] = ev["t"]
        elif kind == "stable_rx" and ev.get("peer") is not None and ev.get("digest"):
            # STABLE is a multicast protocol's ack: the member's digest says up to where it delivered
            # each sender's multicasts, this node's among them.
            node = ev["node"]
            for sender, seqno in _digest_entries(ev["digest"]):
                if sender == node:
                    self._multicast_ack(node, ev["peer"], ev["t"], seqno)
        elif kind == "conn_state":
            self._observe_conn_state(ev)
        elif kind in _LIFECYCLE:
            self.lives.observe(ev)
            if kind == "node_start":
                # A new process has new send windows: its seqnos start again at 1.
                node = ev["node"]
                for key in [k for k in self._lifetime if k[0] == node]:
                    self._lifetime[key] += 1
                for resent in [k for k in self._resent if k[0] == node]:
                    del self._resent[resent]
                self._highest_multicast.pop(node, None)

    def _observe_conn_state(self, ev: dict) -> None:
        peer = ev.get("peer")
        if peer is None:
            return
        key = (ev["node"], peer)
        if ev.get("side") == "recv" and ev.get("state") == _CLOSED and ev.get("reason") in DISCARD_REASONS:
            self._closed[key] = self._closed.get(key, 0) + 1
        elif ev.get("side") == "send" and ev.get("reason") == "created":
            self._lifetime[key] = self._lifetime.get(key, 0) + 1

    @staticmethod
    def cause(before: tuple[int, int], now: tuple[int, int]) -> str:
        return "receiver_restarted" if now[0] != before[0] else "window_closed"


def _later_send(
    where: tuple[int, int, int] | None,
    runs: dict[tuple[str, str, str], list[tuple[int, int, int, int, int]]],
    sender: str,
    receiver: str,
    app: str,
) -> tuple[int, int, int] | None:
    """The later of `where` (a single send of `app`) and the latest run line that sent it, as
    (lifetime, seqno, order): the send _Redeliveries.acked asks about."""
    prefix, _, raw_n = app.rpartition(":")
    entries = runs.get((sender, receiver, prefix))
    if not entries or not raw_n.isdigit():
        return where
    n = int(raw_n)
    for n0, n1, lifetime, seqno, order in reversed(entries):
        if n0 <= n <= n1:
            if where is None or order > where[2]:
                return (lifetime, seqno + n - n0, order)
            return where
    return where


# ---- fifo -------------------------------------------------------------------------------------


def check_fifo(events: list[dict]) -> CheckResult:
    """Successive deliveries of one stream carry strictly increasing app n, between discards."""
    return run_checks(events, ["fifo"])[0]


class _Fifo:
    """fifo's state as a walk goes (run_checks feeds fifo and no_duplicates from one walk)."""

    def __init__(self, walk: _Redeliveries) -> None:
        self.walk = walk
        # (receiver, sender, origin, stream) -> (epoch, highest n delivered in that epoch)
        self.highest: dict[tuple, tuple[tuple[int, int], int]] = {}
        self.violations: list[dict] = []
        self.count = self.delivered = self.loopback = 0

    def result(self) -> CheckResult:
        return fifo_result(self.delivered, self.count, self.violations, self.loopback)

    def see(self, ev: dict) -> None:
        walk, highest, violations = self.walk, self.highest, self.violations
        self.delivered += 1
        try:  # node.message.parse_app_id, inlined: once per delivery
            origin, raw_stream, raw_n = ev["app"].rsplit(":", 2)
            stream, n = int(raw_stream), int(raw_n)
        except ValueError:
            origin, stream, n = _parse_app(ev)  # raises, naming the event
        receiver, sender = ev["node"], ev.get("peer", origin)
        if receiver == sender:
            self.loopback += 1
        epoch = walk.epoch(receiver, sender)
        key = (receiver, sender, origin, stream)
        prev = highest.get(key)
        if prev is None or prev[0] != epoch or n > prev[1]:
            highest[key] = (epoch, n)
        elif n < prev[1]:
            # Compare with the highest n so far, so 5,3,4 reports both 3 and 4 as out of order.
            self.count += 1
            if len(violations) < FIRST_FEW:
                violations.append(
                    {
                        "receiver": receiver,
                        "incarnation": walk.lives.incarnation_of(receiver),
                        "sender": sender,
                        "conn_id": ev.get("conn_id"),
                        "stream": stream,
                        "app": ev["app"],
                        "after": f"{origin}:{stream}:{prev[1]}",
                        "t": ev["t"],
                    }
                )


def _only_loopback(delivered: int, loopback: int) -> str | None:
    """What a check of deliveries judged nothing of when every delivery was a sender's own
    multicast, handed up inside the sender and never on the network (None: some were not)."""
    if delivered and loopback == delivered:
        return f"only loopback deliveries ({loopback}: senders' own multicasts, which never cross the network)"
    return None


def fifo_result(delivered: int, count: int, violations: list[dict], loopback: int = 0) -> CheckResult:
    """fifo's verdict from its tallies (`loopback`: the deliveries of a sender's own multicasts)."""
    details = {"deliveries": delivered, "violations": count, "first": violations}
    if loopback:
        details["loopback"] = loopback
    if not delivered:
        return vacuous_result("fifo", "no delivery with an application id", details)
    if not count and _only_loopback(delivered, loopback):
        return vacuous_result("fifo", str(_only_loopback(delivered, loopback)), details)
    if not count:
        return CheckResult("fifo", True, f"{delivered} deliveries in FIFO order", details, judged=delivered)
    v = violations[0]
    explanation = (
        f"receiver {v['receiver']} (incarnation {v['incarnation']}) delivered {v['app']} after "
        f"{v['after']} from {v['sender']} (conn {v['conn_id']}, stream {v['stream']}) at "
        f"{_fmt_t(v['t'])} with no discard of its window in between; {count} FIFO violation(s) in total"
    )
    return CheckResult("fifo", False, explanation, details, judged=delivered)


# ---- no_duplicates ----------------------------------------------------------------------------


def check_no_duplicates(events: list[dict]) -> CheckResult:
    """Each app id is delivered once per receiver, unless excused by a discard of an unacked one."""
    return run_checks(events, ["no_duplicates"])[0]


class _NoDuplicates:
    """no_duplicates' state as a walk goes."""

    def __init__(self, walk: _Redeliveries) -> None:
        self.walk = walk
        # (receiver, sender, app) -> (epoch of the latest delivery, t of the first)
        self.seen: dict[tuple, tuple[tuple[int, int], float]] = {}
        # What deliver run lines delivered first: (receiver, sender, "S:K") -> sorted intervals
        # (n0, n1, epoch, t) that never overlap; `seen` holds what single lines did (and any later
        # epoch of a redelivered app id), for the pairs in _in_dict.
        self.seen_runs: dict[tuple[str, str, str], list[tuple[int, int, tuple[int, int], float]]] = {}
        self._in_dict: set[tuple[str, str]] = set()
        self.duplicates: list[dict] = []
        self.causes = dict.fromkeys(REDELIVERY_CAUSES, 0)
        self.count = self.delivered = self.loopback = 0

    def result(self) -> CheckResult:
        return no_duplicates_result(self.delivered, self.count, self.duplicates, self.causes, self.loopback)

    def see(self, ev: dict) -> None:
        self.delivered += 1
        receiver, app = ev["node"], ev["app"]
        sender = _sender_of(ev)
        if receiver == sender:
            self.loopback += 1
        epoch = self.walk.epoch(receiver, sender)
        key = (receiver, sender, app)
        prev = self.seen.get(key)
        if prev is None and self.seen_runs:
            prev = self._in_runs(key)
        if prev is None:
            self.seen[key] = (epoch, ev["t"])
            self._in_dict.add((receiver, sender))
            return
        self._again(key, prev, epoch, ev["t"], ev.get("conn_id"))

    def see_run(self, run: dict) -> None:
        """see() for each message of a deliver run line (node/events.py), in order: what was not
        delivered before is kept as one interval per run (seen_runs), not one entry per message."""
        count, receiver, t = run["count"], run["node"], run["t"]
        self.delivered += count
        prefix, _, raw_n = run["app"].rpartition(":")
        n0 = int(raw_n)
        n1 = n0 + count - 1
        sender = run.get("peer") or prefix.rpartition(":")[0]
        epoch = self.walk.epoch(receiver, sender)
        intervals = self.seen_runs.setdefault((receiver, sender, prefix), [])
        if (receiver, sender) not in self._in_dict and (not intervals or intervals[-1][1] < n0):
            intervals.append((n0, n1, epoch, t))  # nothing of it delivered before: the usual case
            return
        fresh: list[tuple[int, int, tuple[int, int], float]] = []
        start = None  # the first n of the current stretch never delivered before
        for n in range(n0, n1 + 1):
            key = (receiver, sender, f"{prefix}:{n}")
            prev = self.seen.get(key)
            if prev is None:
                prev = _interval_at(intervals, n)
            if prev is None:
                if start is None:
                    start = n
                continue
            if start is not None:
                fresh.append((start, n - 1, epoch, t))
                start = None
            self._again(key, prev, epoch, t, run.get("conn_id"))
        if start is not None:
            fresh.append((start, n1, epoch, t))
        for interval in fresh:
            insort(intervals, interval)

    def _in_runs(self, key: tuple[str, str, str]) -> tuple[tuple[int, int], float] | None:
        """(epoch, t) of the first delivery of an app id, if a run line delivered it."""
        receiver, sender, app = key
        prefix, _, raw_n = app.rpartition(":")
        intervals = self.seen_runs.get((receiver, sender, prefix))
        if not intervals or not raw_n.isdigit():
            return None
        return _interval_at(intervals, int(raw_n))

    def _again(
        self, key: tuple[str, str, str], prev: tuple[tuple[int, int], float], epoch: tuple[int, int], t: float, conn_id
    ) -> None:
        """An app id delivered before (`prev`: the epoch of its latest delivery, the time of its first)."""
        walk, duplicates = self.walk, self.duplicates
        receiver, sender, app = key
        discarded = prev[0] != epoch
        acked = walk.acked(sender, receiver, app, t)
        if discarded and not acked:
            self.causes[walk.cause(prev[0], epoch)] += 1
            self.seen[key] = (epoch, prev[1])  # read before seen_runs: the latest delivery's epoch
            self._in_dict.add((receiver, sender))
            return
        self.count += 1
        if len(duplicates) < FIRST_FEW:
            why = (
                "its window was discarded in between, but the sender had seen it acked"
                if discarded
                else "no discard of its window in between"
            )
            duplicates.append(
                {
                    "receiver": receiver,
                    "incarnation": walk.lives.incarnation_of(receiver),
                    "sender": sender,
                    "conn_id": conn_id,
                    "app": app,
                    "first_t": prev[1],
                    "t": t,
                    "why": why,
                }
            )


def _interval_at(
    intervals: list[tuple[int, int, tuple[int, int], float]], n: int
) -> tuple[tuple[int, int], float] | None:
    """(epoch, t) of the interval (n0, n1, epoch, t) holding n, in a list sorted by n0 of
    intervals that do not overlap; None when none holds it."""
    i = bisect_right(intervals, (n, _OPEN)) - 1
    if i >= 0 and intervals[i][1] >= n:
        return intervals[i][2], intervals[i][3]
    return None


def no_duplicates_result(
    delivered: int, count: int, duplicates: list[dict], causes: dict, loopback: int = 0
) -> CheckResult:
    """no_duplicates' verdict from its tallies (`loopback`: the deliveries of a sender's own multicasts)."""
    redelivered = sum(causes.values())
    details = {
        "deliveries": delivered,
        "duplicates": count,
        "first": duplicates,
        "redelivered_after_reset": redelivered,
        "redelivered_by_cause": causes,
    }
    if loopback:
        details["loopback"] = loopback
    if not delivered:
        return vacuous_result("no_duplicates", "no delivery with an application id", details)
    if not count and _only_loopback(delivered, loopback):
        return vacuous_result("no_duplicates", str(_only_loopback(delivered, loopback)), details)
    if not count:
        explanation = f"no duplicates among {delivered} deliveries"
        if redelivered:
            why = ", ".join(f"{n} {cause.replace('_', ' ')}" for cause, n in causes.items() if n)
            explanation += (
                f" ({redelivered} unacked app id(s) legitimately redelivered after the receiver "
                f"discarded its window: {why})"
            )
        return CheckResult("no_duplicates", True, explanation, details, judged=delivered)
    d = duplicates[0]
    explanation = (
        f"receiver {d['receiver']} (incarnation {d['incarnation']}) delivered {d['app']} from "
        f"{d['sender']} twice, at {_fmt_t(d['first_t'])} and {_fmt_t(d['t'])} ({d['why']}); "
        f"{count} duplicate delivery(ies) in total"
    )
    return CheckResult("no_duplicates", False, explanation, details, judged=delivered)


# ---- no_loss ----------------------------------------------------------------------------------


@dataclass
class _Life:
    start: float
    end: float | None = None
    graceful: bool = False


# The end of an interval that lasts to the end of the run.
_OPEN = float("inf")


class Connectivity:
    """When each pair of nodes was up and connected, from lifecycles and the fault timeline.

    An interval still open at the end of the run (or ended by the graceful stop that ends a live
    run) has no end: a message sent in it is owed however late, because what is sent before the end
    must be delivered by the end (that budget is the scenario's `settle`, not the recovery bound).

    A node's lives are numbered by its starts (0 for a node whose log shows no start). A pair
    (X, Y) is connected while both are alive and no fault cuts X->Y or Y->X: recovery needs both
    directions (acks, retransmission requests and resync travel back). Faults say which directed
    links they cut in their `links` field (a partition, a pause, total loss, an unbounded drop)."""

    def __init__(self) -> None:
        self.lives: dict[str, list[_Life]] = {}
        # The change points, in log order: (t, node or link, what).
        self._changes: list[tuple[float, object, str]] = []
        # Every node with an event (no_loss adds those of sends and deliveries itself: see observe).
        self.nodes: set[str] = set()
        self._intervals: dict[tuple[str, str], list[tuple[float, float, int, int]]] = {}
        self._excuses: dict[tuple[str, str, int], str] = {}

    def observe(self, ev: dict) -> None:
        """Take the next event of the sorted log; `close` after the last one."""
        kind, node = ev["kind"], ev["node"]
        if kind in _LIFECYCLE:
            graceful = kind == "node_stop" and ev.get("reason") == GRACEFUL_STOP
            self._changes.append((ev["t"], node, "graceful_stop" if graceful else kind))
            lives = self.lives.setdefault(node, [])
            if kind == "node_start":
                lives.append(_Life(ev["t"]))
            elif lives and lives[-1].end is None:
                lives[-1].end, lives[-1].graceful = ev["t"], ev.get("reason") == GRACEFUL_STOP
            elif not lives:
                # A stop before any start: the node was up from the beginning.
                lives.append(_Life(float("-inf"), ev["t"], ev.get("reason") == GRACEFUL_STOP))
        elif kind in ("fault_on", "fault_off") and _is_harness(ev):
            for link in ev.get("links") or ():
                src, _, dst = link.partition("->")
                self._changes.append((ev["t"], (src, dst), "cut" if kind == "fault_on" else "uncut"))
        elif node != _HARNESS:
            self.nodes.add(node)

    def close(self) -> None:
        """The log is over: a node whose log shows no start was up from the beginning."""
        for node in self.nodes:
            self.lives.setdefault(node, [_Life(float("-inf"))])

    def intervals(self, x: str, y: str) -> list[tuple[float, float, int, int]]:
        """Maximal intervals (start, end, life of x, life of y) during which x and y are connected."""
        cached = self._intervals.get((x, y))
        if cached is None:
            cached = self._sweep(x, y)
            self._intervals[(x, y)] = cached
            self._intervals[(y, x)] = [(a, b, ly, lx) for a, b, lx, ly in cached]
        return cached

    def _sweep(self, x: str, y: str) -> list[tuple[float, float, int, int]]:
        alive, life, cuts = {}, {}, {(x, y): 0, (y, x): 0}
        for n in (x, y):
            lives = self.lives.get(n, [])
            alive[n] = bool(lives) and lives[0].start == float("-inf")
            life[n] = 0
        out: list[tuple[float, float, int, int]] = []
        since: float | None = float("-inf") if alive[x] and alive[y] else None
        for t, who, what in self._changes:
            if what in ("cut", "uncut"):
                if who not in cuts:
                    continue
                cuts[who] = cuts[who] + 1 if what == "cut" else max(0, cuts[who] - 1)
            elif who in alive:
                if since is not None:
                    # Any start or stop of either ends the interval (a restart is a new life);
                    # a graceful stop is the end of the run, whose budget is the settle time.
                    out.append((since, _OPEN if what == "graceful_stop" else t, life[x], life[y]))
                    since = None
                if what == "node_start":
                    life[who] += 1
                alive[who] = what == "node_start"
            else:
                continue
            connected = alive[x] and alive[y] and not cuts[(x, y)] and not cuts[(y, x)]
            if connected and since is None:
                since = t
            elif not connected and since is not None:
                out.append((since, t, life[x], life[y]))
                since = None
        if since is not None:
            out.append((since, _OPEN, life[x], life[y]))
        return [iv for iv in out if iv[1] > iv[0]]

    def owed_until(self, sender: str, receiver: str, bound: float) -> dict[int, float]:
        """Per life of the sender, the latest send time of a message that is owed: one with at
        least `bound` of connection after it, within that life of the sender."""
        out: dict[int, float] = {}
        for a, b, life_s, _life_r in self.intervals(sender, receiver):
            if b - a >= bound:
                out[life_s] = max(out.get(life_s, float("-inf")), b - bound)
        return out

    def excuse(self, sender: str, receiver: str, life_s: int) -> str:
        """Why a message sent in the sender's life `life_s` was not owed (one of EXCUSES)."""
        key = (sender, receiver, life_s)
        why = self._excuses.get(key)
        if why is None:
            why = self._excuses[key] = self._excuse(sender, receiver, life_s)
        return why

    def _excuse(self, sender: str, receiver: str, life_s: int) -> str:
        lives = self.lives.get(sender, ())
        index = life_s - (0 if lives and lives[0].start == float("-inf") else 1)
        if 0 <= index < len(lives):
            life = lives[index]
            if life.end is not None and not life.graceful:
                return "sender_lost_window"
        rlives = self.lives.get(receiver, ())
        if rlives and rlives[-1].end is not None and not rlives[-1].graceful:
            return "receiver_dead"
        ivs = self.intervals(sender, receiver)
        if not ivs or ivs[-1][1] != _OPEN:
            return "cut_at_end"
        return "too_little_time"


def check_no_loss(events: list[dict], recovery_bound_s: float = DEFAULT_RECOVERY_BOUND_S) -> CheckResult:
    """Every message owed (see the module docstring) is delivered at its receiver."""
    return run_checks(events, ["no_loss"], recovery_bound_s=recovery_bound_s)[0]


class _NoLoss:
    """no_loss' state as the walk goes (see_send and see_deliver take the two hot kinds)."""

    def __init__(self, recovery_bound_s: float) -> None:
        self.bound = recovery_bound_s
        self.conn = Connectivity()
        # (sender, receiver) -> [(app, t_sent, sender's life)], in send order.
        self.sent: dict[tuple[str, str], list[tuple[str, float, int]]] = defaultdict(list)
        self.delivered: dict[tuple[str, str], set[str]] = {}  # (sender, receiver) -> app ids
        self.last_deliver_link: dict[tuple[str, str], float] = {}
        self.last_deliver: float | None = None
        self.starts: dict[str, int] = {}  # a node's life is the number of its starts so far
        self.start_times: dict[str, list[float]] = {}
        # Multicast: (sender, member) -> [(app, t_sent, when the sender installed the view it went
        # to)] and each node's views, [(t, members, view_id)].
        self.multicasts: dict[tuple[str, str], list[tuple[str, float, float]]] = defaultdict(list)
        self.views: dict[str, list[tuple[float, frozenset[str], int | None]]] = defaultdict(list)
        self.loopback = 0  # a sender's own multicasts: never on the network, never owed
        # Join digests: the multicasts (sender, member) -> [(t, seqno, app)], and each member's first
        # view after a start: (member, from when, view time, view id, digest), "from when" being the end
        # of its previous life (its start when it had none), so that a multicast sent at the instant of
        # a restart counts, and one its earlier life should have delivered does not.
        self.mseq: dict[tuple[str, str], list[tuple[float, int, str]]] = defaultdict(list)
        self.joins: list[tuple[str, float, float, int | None, list]] = []
        self.fresh: dict[str, float] = {}  # started, no view yet -> from when
        self.stopped: dict[str, float] = {}

    def see_send(self, ev: dict) -> None:
        node = ev["node"]
        if node != _HARNESS:  # what Connectivity.observe does with a send
            self.conn.nodes.add(node)
        if "app" not in ev:
            return
        if "peer" in ev:
            self.sent[(node, ev["peer"])].append((ev["app"], ev["t"], self.starts.get(node, 0)))
        elif "members" in ev:
            # A multicast: owed to each other member of the sender's view when it was sent, by the
            # same rule as a unicast to that member; the sender's own (loopback) delivery is not owed.
            life = self.starts.get(node, 0)
            for member in ev["members"]:
                if member == node:
                    self.loopback += 1
                    continue
                self.sent[(node, member)].append((ev["app"], ev["t"], life))
                self.multicasts[(node, member)].append((ev["app"], ev["t"], self._view_time(node, ev["t"])))
                if "seqno" in ev:
                    self.mseq[(node, member)].append((ev["t"], ev["seqno"], ev["app"]))

    def _view_time(self, sender: str, t: float) -> float:
        """When the sender installed the view a multicast it sends now goes to (`t` without one)."""
        views = self.views.get(sender)
        return views[-1][0] if views else t

    def see_deliver(self, ev: dict) -> None:
        node = ev["node"]
        if node != _HARNESS:  # what Connectivity.observe does with a delivery
            self.conn.nodes.add(node)
        if "app" in ev:
            link = (ev.get("peer") or _parse_app(ev)[0], node)
            delivered = self.delivered.get(link)
            if delivered is None:
                delivered = self.delivered[link] = set()
            delivered.add(ev["app"])
            self.last_deliver_link[link] = self.last_deliver = ev["t"]

    def see_other(self, ev: dict) -> None:
        self.conn.observe(ev)
        kind = ev["kind"]
        if kind == "node_start":
            self.starts[ev["node"]] = self.starts.get(ev["node"], 0) + 1
            self.start_times.setdefault(ev["node"], []).append(ev["t"])
            self.fresh[ev["node"]] = self.stopped.get(ev["node"], ev["t"])
        elif kind == "node_stop":
            self.stopped[ev["node"]] = ev["t"]
            self.fresh.pop(ev["node"], None)
        elif kind == "view" and "members" in ev:
            self.views[ev["node"]].append((ev["t"], frozenset(ev["members"]), ev.get("view_id")))
            since = self.fresh.pop(ev["node"], None)
            if since is not None and ev.get("reason") == "join" and ev.get("digest"):
                self.joins.append((ev["node"], since, ev["t"], ev.get("view_id"), ev["digest"]))

    def result(self) -> CheckResult:
        conn, sent, delivered, recovery_bound_s = self.conn, self.sent, self.delivered, self.bound
        conn.close()
        total = self.loopback
        excused = dict.fromkeys(EXCUSES, 0)
        # The first few messages each excuse covered, so that the explanation names them.
        excused_first: dict[str, list[str]] = defaultdict(list)
        left: set[tuple[str, str, str]] = set()
        before_join: set[tuple[str, str, str]] = set()
        if self.multicasts or self.loopback:
            excused.update(dict.fromkeys(MULTICAST_EXCUSES, 0))
            excused["loopback"] = self.loopback
            left = _left_view(self.multicasts, self.views, self.start_times, conn, recovery_bound_s)
            before_join = _before_join(self.joins, self.mseq, self.views, recovery_bound_s)
        # Per link: count and the first app ids, so a link losing millions stays cheap to report.
        lost_count: dict[tuple[str, str], int] = defaultdict(int)
        lost_first: dict[tuple[str, str], list[str]] = defaultdict(list)

        def excuse(why: str, sender: str, receiver: str, app: str) -> None:
            excused[why] += 1
            if why in MULTICAST_EXCUSES and len(excused_first[why]) < FIRST_FEW:
                excused_first[why].append(f"{_link(sender, receiver)} {app}")

        for (sender, receiver), msgs in sent.items():
            total += len(msgs)
            owed_until = conn.owed_until(sender, receiver, recovery_bound_s)
            arrived = delivered.get((sender, receiver), ())
            for app, t, life in msgs:
                if left and (sender, receiver, app) in left:
                    excuse("left_view", sender, receiver, app)
                elif before_join and (sender, receiver, app) in before_join:
                    excuse("join_digest", sender, receiver, app)
                elif t > owed_until.get(life, float("-inf")):
                    excused[conn.excuse(sender, receiver, life)] += 1
                elif app not in arrived:
                    lost_count[(sender, receiver)] += 1
                    if len(lost_first[(sender, receiver)]) < LOST_IDS_SHOWN:
                        lost_first[(sender, receiver)].append(app)

        lost = {
            _link(*link): {
                "count": count,
                "first": lost_first[link],
                "last_deliver_t": self.last_deliver_link.get(link),
            }
            for link, count in lost_count.items()
        }
        return no_loss_result(total, excused, self.last_deliver, lost, recovery_bound_s, dict(excused_first))


def _digest_entries(digest: list) -> Iterable[tuple[str, int]]:
    """(sender, seqno) of a logged digest's "S:N" items (malformed ones are skipped)."""
    for item in digest:
        sender, _, raw = str(item).rpartition(":")
        try:
            yield sender, int(raw)
        except ValueError:
            continue


def _addressed_joiner_at(views: list[tuple[float, frozenset[str], int | None]], joiner: str, since: float, join_id):
    """When the sender installed a view with the joiner in its new life: its first view, after the
    joiner's start, that lists it and is the joiner's join view or a later one (None: never)."""
    for t, members, view_id in views:
        if t < since or joiner not in members:
            continue
        if join_id is None or (view_id is not None and view_id >= join_id):
            return t
    return None


def _before_join(
    joins: list[tuple[str, float, float, int | None, list]],
    mseq: dict[tuple[str, str], list[tuple[float, int, str]]],
    views: dict[str, list[tuple[float, frozenset[str], int | None]]],
    bound: float,
) -> set[tuple[str, str, str]]:
    """(sender, member, app) of the multicasts a joiner's digest puts before it: numbered at or
    below the digest's entry for their sender, sent between the end of the member's previous life
    (or its start) and its join view, and before the sender itself installed a view with the joiner
    (what the sender addressed to a view with the joiner is owed, whatever a digest says). The
    window opens the recovery bound before the previous life ended: a multicast sent that close to
    its end was not owed to that life either (too little time)."""
    out: set[tuple[str, str, str]] = set()
    for member, since, joined, join_id, digest in joins:
        for sender, start in _digest_entries(digest):
            sends = mseq.get((sender, member), [])
            addressed = _addressed_joiner_at(views.get(sender, []), member, since, join_id)
            until = joined if addressed is None else min(joined, addressed)
            i = bisect_left(sends, (since - bound,))
            while i < len(sends) and sends[i][0] <= until:
                t, seqno, app = sends[i]
                if seqno <= start and (addressed is None or t < addressed):
                    out.add((sender, member, app))
                i += 1
    return out


def _unreachable_windows(
    sender: str,
    member: str,
    life: int,
    views: dict[str, list[tuple[float, frozenset[str], int | None]]],
    conn: Connectivity,
    bound: float,
) -> list[tuple[float, float]]:
    """The send times (lo, hi] at which a multicast of `sender` to `member` in its life `life` (the
    life the sender's view listed) is not owed because one of the two dropped the other from its
    view while that life of the member was out of the sender's reach (cut, paused, dead, gone):
    for each such view, installed at v, the sends from less than `bound` before they lost touch
    up to v, and, for the member's view, on until the member takes the sender back (it discards
    what a non-member sends). A view installed while the two were connected (a shrink that dropped
    a reachable member) excuses nothing."""
    ivs = [(a, b) for a, b, _ls, lr in conn.intervals(sender, member) if lr == life]
    out = []
    for viewer, other in ((sender, member), (member, sender)):
        mine = views.get(viewer, [])
        for k, (v, members, _view_id) in enumerate(mine):
            if other in members or (k and other not in mine[k - 1][1]):
                continue  # lists it, or dropped it earlier (that view's window covers this one)
            if any(a < v < b for a, b in ivs):
                continue  # reachable when it was dropped: the protocol's choice, not a loss it may have
            out_of_reach_since = max((b for _a, b in ivs if b <= v), default=float("-inf"))
            until = v
            if viewer == member:
                until = next((t for t, ms, _id in mine[k + 1 :] if other in ms), _OPEN)
            out.append((out_of_reach_since - bound, until))
    return sorted(out)


def _left_view(
    multicasts: dict[tuple[str, str], list[tuple[str, float, float]]],
    views: dict[str, list[tuple[float, frozenset[str], int | None]]],
    start_times: dict[str, list[float]],
    conn: Connectivity,
    bound: float,
) -> set[tuple[str, str, str]]:
    """(sender, member, app) of the multicasts excused as left_view (see _unreachable_windows):
    views are rare, so a few windows per pair and life of the member, looked up per multicast.
    A multicast goes to the life of the member the sender's view listed when the sender installed
    it (a member restarted since is a new process that view does not know)."""
    out: set[tuple[str, str, str]] = set()
    for (sender, member), msgs in multicasts.items():
        dropped = any(member not in ms for _t, ms, _id in views.get(sender, ())) or any(
            sender not in ms for _t, ms, _id in views.get(member, ())
        )
        if not dropped:
            continue
        by_life: dict[int, list[tuple[float, float]]] = {}
        starts = start_times.get(member, [])
        for app, t, view_t in msgs:
            life = bisect_right(starts, view_t)
            windows = by_life.get(life)
            if windows is None:
                windows = by_life[life] = _unreachable_windows(sender, member, life, views, conn, bound)
            if any(lo < t <= hi for lo, hi in windows):
                out.add((sender, member, app))
    return out


def no_loss_result(
    sent: int,
    excused: dict,
    last_deliver: float | None,
    lost: dict,
    recovery_bound_s: float,
    excused_first: dict | None = None,
) -> CheckResult:
    """no_loss' verdict from its tallies: `lost` maps a link "X->Y" to its count, first app ids and
    last delivery time, in the order to report them; `excused_first` the first few "X->Y app" each
    multicast excuse covered (named in the explanation)."""
    checked = sent - sum(excused.values())
    details: dict = {
        "sent": sent,
        "checked": checked,
        "excused": excused,
        "recovery_bound_s": recovery_bound_s,
        "last_deliver_t": last_deliver,
        "lost": lost,
    }
    if excused_first:
        details["excused_first"] = excused_first

    def named(why: str) -> str:
        first = (excused_first or {}).get(why)
        return f" (rule {why}: {', '.join(first)}{', ...' if len(first) < excused[why] else ''})" if first else ""

    not_owed = "; ".join(f"{n} {_EXCUSE_TEXT[why]}{named(why)}" for why, n in excused.items() if n)
    if not checked:
        nothing = (
            f"none of {sent} sent messages was owed ({not_owed})"
            if sent
            else "no message with an application id was sent"
        )
        return vacuous_result("no_loss", nothing, details)
    if not lost:
        explanation = f"all {checked} owed messages delivered (owed: {recovery_bound_s:g}s of connection after sending)"
        if not_owed:
            explanation += f"; {sent - checked} not owed: {not_owed}"
        return CheckResult("no_loss", True, explanation, details, judged=checked)
    total = sum(info["count"] for info in lost.values())
    parts = [
        f"{name}: {info['count']} never delivered (first {' '.join(info['first'])}; "
        f"last delivery on this link {_fmt_t(info['last_deliver_t'])})"
        for name, info in details["lost"].items()
    ]
    explanation = (
        f"{total} of {checked} owed message(s) lost: "
        + "; ".join(parts)
        + f"; last delivery anywhere {_fmt_t(last_deliver)}"
    )
    return CheckResult("no_loss", False, explanation, details, judged=checked)


# ---- windows_synced ---------------------------------------------------------------------------


def window_view(ev: dict | None) -> dict | None:
    if ev is None:
        return None
    return {"conn_id": ev.get("conn_id"), "low": ev.get("low"), "high": ev.get("high"), "state": ev.get("state")}


def check_windows_synced(events: list[dict]) -> CheckResult:
    """Final send and recv windows of every live pair agree, and nothing is left unacked."""
    return run_checks(events, ["windows_synced"])[0]


class _WindowsSynced:
    """windows_synced's state as the walk goes (see_send and see_deliver take the two hot kinds)."""

    def __init__(self, ack_bounds: dict[str, tuple[str, float]] | None = None) -> None:
        self.lives = _Lives()
        self.pauses = _Pauses()
        # proto -> (setting, seconds): how long after its last send a sender may wait for its acks.
        self.ack_bounds = dict(ack_bounds or {})
        # (sender, receiver) -> t of its last send; (sender, None) of its last multicast.
        self.last_send: dict[tuple[str, str | None], float] = {}
        self.send_windows: dict[tuple[str, str, str], dict] = {}  # (sender, receiver, proto) -> final window
        self.recv_windows: dict[tuple[str, str, str], dict] = {}  # (sender, receiver, proto) -> final window
        self.last_deliver: dict[tuple[str, str], float] = {}  # (sender, receiver) -> t
        self.last_ack_rx: dict[tuple[str, str], float] = {}  # (sender, receiver) -> t
        self.traffic_since_start: set[str] = set()
        self.sent_since_start: set[tuple[str, str]] = set()  # (sender, receiver)
        self.multicast_since_start: set[str] = set()  # senders of a multicast since their last start
        # node -> {(side, peer): open?} from conn_state since the node's last start.
        self.open_windows: dict[str, dict[tuple[str, str], bool]] = {}
        self.reported: dict[str, set[tuple[str | None, str]]] = defaultdict(set)
        self.last_heal: float | None = None
        self.data_protos: set[str] = set()  # the protos of sends and deliveries
        self.any_window_event = False  # a window or conn_state from any node

    def see_send(self, ev: dict) -> None:
        node = ev["node"]
        self.data_protos.add(ev["proto"])
        self.traffic_since_start.add(node)
        if "peer" in ev:
            self.sent_since_start.add((node, ev["peer"]))
            self.last_send[(node, ev["peer"])] = ev["t"]
        elif "members" in ev:
            self.multicast_since_start.add(node)
            self.last_send[(node, None)] = ev["t"]

    def see_deliver(self, ev: dict) -> None:
        node = ev["node"]
        self.data_protos.add(ev["proto"])
        self.traffic_since_start.add(node)
        if "peer" in ev:
            self.last_deliver[(ev["peer"], node)] = ev["t"]

    def see_other(self, ev: dict) -> None:
        kind, node = ev["kind"], ev["node"]
        self.pauses.observe(ev)
        if kind in _LIFECYCLE:
            self.lives.observe(ev)
            # A restarted node lost its windows, so only traffic after the last start counts. A
            # stop keeps it: a graceful stop ends every live run right after the final windows,
            # and a dead node is skipped below anyway.
            if kind == "node_start":
                self.traffic_since_start.discard(node)
                self.open_windows.pop(node, None)
                self.sent_since_start.difference_update([k for k in self.sent_since_start if k[0] == node])
                self.multicast_since_start.discard(node)
            return
        if kind in _TRAFFIC:
            self.traffic_since_start.add(node)
        if kind == "window" or kind == "conn_state":
            self.any_window_event = True
        if kind == "ack_rx" and "peer" in ev:
            self.last_ack_rx[(node, ev["peer"])] = ev["t"]
        elif kind == "conn_state" and "peer" in ev and ev.get("side") in ("send", "recv"):
            self.open_windows.setdefault(node, {})[(ev["side"], ev["peer"])] = ev.get("state") != _CLOSED
        if kind == "window" and ev.get("final") and "peer" in ev:
            self.reported[node].add((ev.get("side"), ev["peer"]))
            # Keyed by proto too: a NAKACK2 stack has NAKACK2's and UNICAST3's windows per pair.
            if ev.get("side") == "send":
                self.send_windows[(node, ev["peer"], ev["proto"])] = ev
            elif ev.get("side") == "recv":
                self.recv_windows[(ev["peer"], node, ev["proto"])] = ev
        elif _is_heal(ev):
            self.last_heal = ev["t"]

    def windowless(self) -> list[str]:
        """The protocols of this run's data when none of them reports windows and no node wrote
        one (a real implementation that exposes none, e.g. JGroups 2.12); else []."""
        if self.any_window_event or not self.data_protos:
            return []
        from splitbrain.node import protocols

        for proto in self.data_protos:
            try:
                if protocols.get(proto).reports_windows:
                    return []
            except ValueError:  # an unknown protocol: judged as one that reports windows
                return []
        return sorted(self.data_protos)

    def result(self) -> CheckResult:
        windowless = self.windowless()
        if windowless:
            return not_applicable_result(
                "windows_synced",
                f"the nodes ({', '.join(windowless)}) report no windows, so there are none to compare",
                {"protocols": windowless},
            )
        send_windows, recv_windows, last_heal = self.send_windows, self.recv_windows, self.last_heal
        last_deliver, last_ack_rx, open_windows = self.last_deliver, self.last_ack_rx, self.open_windows
        sent_since_start, traffic_since_start, reported = self.sent_since_start, self.traffic_since_start, self.reported
        pairs: dict[str, dict] = {}
        skipped_dead = 0
        # With one protocol's windows in the run a pair is named "X->Y" as it always was; with several
        # (NAKACK2 over UNICAST3), "X->Y (proto)".
        several = len({key[2] for key in send_windows}) > 1
        lives = self.lives
        paused = self.pauses.paused
        skipped_paused = 0
        inconclusive: dict[str, dict] = {}
        restarted_silent: set[tuple[str, str, str]] = set()
        for (sender, receiver, proto), send in send_windows.items():
            if lives.dead(sender) or lives.dead(receiver):
                skipped_dead += 1
                continue
            if sender in paused or receiver in paused:
                # A frozen process reports nothing new and answers nothing: judged like a cut.
                skipped_paused += 1
                continue
            recv = recv_windows.get((sender, receiver, proto))
            if (
                lives.starts.get(sender, 0) > 1
                and sender not in self.multicast_since_start
                and not send.get("high")
                and send.get("conn_id") is None
                and recv is not None
                and recv.get("high")
            ):
                # A multicast window exists per view member, so a sender restarted without multicasting
                # since reports an empty one while the receiver still holds its previous life's: stale,
                # like a unicast receive window of a restarted sender (below); its next multicast opens
                # a new window at the receiver.
                restarted_silent.add((sender, receiver, proto))
                continue
            if (
                lives.starts.get(receiver, 0) > 1
                and recv is not None
                and recv.get("conn_id") is None
                and not recv.get("high")
                and send.get("conn_id") is None
            ):
                # The mirror case: a restarted member holds an empty multicast window for a sender that
                # has not multicast since; like a unicast receiver without a window, the pair is idle if
                # nothing is outstanding (pair_problem), out of sync otherwise.
                recv = None
            problem = pair_problem(sender, receiver, send, recv)
            name = _link(sender, receiver) + (f" ({proto})" if several else "")
            waited = self._too_early_for_acks(sender, receiver, proto, send, recv) if problem else None
            if waited is not None:
                inconclusive[name] = {
                    "problem": problem,
                    "send": window_view(send),
                    "recv": window_view(recv),
                    **waited,
                }
                continue
            sync_time = None
            if problem is None and last_heal is not None:
                moved = max(last_deliver.get((sender, receiver), 0.0), last_ack_rx.get((sender, receiver), 0.0))
                sync_time = max(0.0, moved - last_heal)
            pairs[name] = {
                "synced": problem is None,
                "problem": problem,
                "send": window_view(send),
                "recv": window_view(recv),
                "sync_time": sync_time,
            }

        # A pair whose send window the protocol reaped (CLOSED) after sending is judged too: it is in
        # sync when the receiver kept no window either (a receiver window it still holds is stale).
        send_links = {key[:2] for key in send_windows}
        for sender, receiver in sorted(sent_since_start):
            if (sender, receiver) in send_links or self.lives.dead(sender) or self.lives.dead(receiver):
                continue
            if sender in paused or receiver in paused:
                continue
            if open_windows.get(sender, {}).get(("send", receiver)) is False:
                # Reaping is UNICAST3's (conn_state): its receive window, if any, is the stale one.
                recv = next((ev for key, ev in recv_windows.items() if key[:2] == (sender, receiver)), None)
                pairs[_link(sender, receiver)] = {
                    "synced": True,
                    "problem": None,
                    "send": None,
                    "recv": window_view(recv),
                    "sync_time": None,
                }

        # A recv window with no send window at a live sender is stale (the sender restarted and has
        # not sent since); the next send resyncs it, so it is reported but is no failure.
        stale_recv = sorted(
            _link(*key[:2])
            for key in recv_windows
            if (key not in send_windows or key in restarted_silent)
            and not self.lives.dead(key[0])
            and not self.lives.dead(key[1])
        )
        silent = []
        for node in sorted(traffic_since_start):
            if self.lives.dead(node) or node in paused:
                continue
            windows = open_windows.get(node)
            if windows is None:
                # No conn_state since its start: at least one final window is owed.
                missing = not reported.get(node)
            else:
                # Windows the protocol reaped (CLOSED) are not expected at the end.
                missing = any(is_open and key not in reported.get(node, ()) for key, is_open in windows.items())
            if missing:
                silent.append(node)
        return windows_synced_result(
            pairs,
            silent,
            skipped_dead,
            stale_recv,
            last_heal,
            inconclusive=inconclusive,
            paused=sorted(n for n in paused if not self.lives.dead(n)),
            skipped_paused=skipped_paused,
        )

    def _too_early_for_acks(self, sender: str, receiver: str, proto: str, send: dict, recv: dict | None) -> dict | None:
        """For a pair whose receiver delivered everything sent but whose sender has not seen it all
        acknowledged: when the sender's final window came less than the protocol's ack bound after
        its last send, the run was too short to tell (what waited, and the setting). None otherwise."""
        bound = self.ack_bounds.get(proto)
        if bound is None or recv is None or send.get("conn_id") != recv.get("conn_id"):
            return None
        if recv.get("low") != send.get("high"):
            return None  # something was not delivered: out of sync whatever the acks say
        last = self.last_send.get((sender, receiver), self.last_send.get((sender, None)))
        if last is None:
            return None
        waited = send["t"] - last
        setting, seconds = bound
        if waited >= seconds:
            return None
        return {"waited_s": round(waited, 3), "ack_bound_s": seconds, "setting": setting}


def windows_synced_result(
    pairs: dict,
    silent: list[str],
    skipped_dead: int,
    stale_recv: list[str],
    last_heal: float | None,
    *,
    inconclusive: dict | None = None,
    paused: list[str] | None = None,
    skipped_paused: int = 0,
) -> CheckResult:
    """windows_synced's verdict from the judged pairs: `pairs` maps "X->Y" to
    synced/problem/send/recv/sync_time, in the order to report them; `inconclusive` the pairs
    whose acks had less time than the protocol's ack bound (not judged), `paused` the nodes paused
    at the end (their pairs skipped like a dead node's)."""
    problems = [f"{link} {p['problem']}" for link, p in pairs.items() if p["problem"] is not None]
    if silent:
        problems.append(f"final windows not reported by {', '.join(silent)} (alive at end, with open windows)")
    out_of_sync = sum(1 for p in pairs.values() if not p["synced"])
    sync_times = [p["sync_time"] for p in pairs.values() if p["sync_time"] is not None]
    max_sync_time = max(sync_times, default=None)
    details = {
        "pairs": pairs,
        "out_of_sync": out_of_sync,
        "not_reported": silent,
        "skipped_dead": skipped_dead,
        "stale_recv": stale_recv,
        "last_heal_t": last_heal,
        "max_sync_time": max_sync_time,
    }
    if inconclusive:
        details["inconclusive"] = inconclusive
    if paused:
        details["paused"] = paused
        details["skipped_paused"] = skipped_paused
    early = ""
    if inconclusive:
        first = next(iter(inconclusive.values()))
        early = (
            f"{len(inconclusive)} pair(s) inconclusive: everything delivered, acks still pending "
            f"{first['waited_s']:g}s after the last send, less than the protocol's ack bound of "
            f"{first['ack_bound_s']:g}s ({first['setting']}): {', '.join(inconclusive)}"
        )
    if problems:
        return CheckResult("windows_synced", False, "; ".join(problems), details, judged=len(pairs))
    if not pairs:
        nothing = early or "no final send window of a pair alive at the end"
        skipped = [
            f"{n} pair(s) with a {what} end skipped"
            for n, what in ((skipped_dead, "dead"), (skipped_paused, "paused"))
            if n
        ]
        if skipped:
            nothing += f" ({'; '.join(skipped)})"
        return vacuous_result("windows_synced", nothing, details)
    explanation = f"{len(pairs)} pair(s) in sync"
    if max_sync_time is not None:
        explanation += f", max sync time {max_sync_time:.3f}s after last heal at {_fmt_t(last_heal)}"
    elif last_heal is None:
        explanation += " (no heal in this run)"
    if early:
        explanation += f"; {early}"
    if paused:
        explanation += f"; {skipped_paused} pair(s) of {', '.join(paused)} (paused at the end) skipped, like a cut"
    return CheckResult("windows_synced", True, explanation, details, judged=len(pairs))


def _is_heal(ev: dict) -> bool:
    """A heal in the harness timeline: any fault_off, or a fault_on of the "heal" fault."""
    if not _is_harness(ev):
        return False
    return ev["kind"] == "fault_off" or (ev["kind"] == "fault_on" and ev.get("fault") == "heal")


# ---- no_errors --------------------------------------------------------------------------------


def check_no_errors(events: list[dict]) -> CheckResult:
    """No exception was raised inside a protocol stack (`error` events)."""
    return run_checks(events, ["no_errors"])[0]


class _NoErrors:
    """no_errors' tallies as the walk goes."""

    def __init__(self) -> None:
        self.judged = self.count = 0
        self.errors: list[dict] = []

    def see_other(self, ev: dict) -> None:
        if _is_harness(ev):
            return
        self.judged += run_message_count(ev)
        if ev["kind"] == "error":
            self.count += 1
            if len(self.errors) < FIRST_FEW:
                self.errors.append(
                    {"node": ev["node"], "t": ev["t"], "reason": ev.get("reason"), "detail": ev.get("detail")}
                )

    def result(self) -> CheckResult:
        return no_errors_result(self.judged, self.count, self.errors)


def no_errors_result(judged: int, count: int, errors: list[dict]) -> CheckResult:
    """no_errors' verdict from its tallies."""
    details = {"events": judged, "errors": count, "first": errors}
    if not judged:
        return vacuous_result("no_errors", "no event from any node", details)
    if not count:
        return CheckResult("no_errors", True, f"no internal error in {judged} node events", details, judged=judged)
    e = errors[0]
    explanation = (
        f"{count} internal error(s) in the protocol stack; first at {e['node']} {_fmt_t(e['t'])}: {e['reason']}"
    )
    return CheckResult("no_errors", False, explanation, details, judged=judged)


# ---- resync_traffic ---------------------------------------------------------------------------


def check_resync_traffic(events: list[dict], bound: int | None = None) -> CheckResult:
    """Between any two nodes, at most `bound` resync messages (JGRP-1874): what each protocol's
    spec calls resync traffic (`ProtocolSpec.resync_traffic`), counted from the events of messages
    sent, both directions of a pair together. Judged: the pairs with any resync traffic."""
    from splitbrain.node import protocols

    predicates: dict[str, Callable | None] = {}
    pairs: dict[tuple[str, str], dict] = {}
    for ev in _ordered(events):
        if _is_harness(ev) or "peer" not in ev:
            continue
        proto = ev["proto"]
        if proto not in predicates:
            try:
                predicates[proto] = protocols.get(proto).resync_traffic
            except ValueError:
                predicates[proto] = None
        pred = predicates[proto]
        if pred is None or not pred(ev):
            continue
        a, b = sorted((ev["node"], ev["peer"]))
        info = pairs.setdefault((a, b), {"messages": 0, "bytes": 0, "by_kind": {}, "first_t": ev["t"]})
        messages = run_message_count(ev)
        info["messages"] += messages
        info["bytes"] += int(ev.get("bytes") or 0)
        what = ev["kind"] if ev["kind"] != "retransmit" else f"retransmit({ev.get('reason')})"
        if ev.get("phase"):
            what = f"{what}:{ev['phase']}"
        info["by_kind"][what] = info["by_kind"].get(what, 0) + messages
        info["last_t"] = ev["t"]
    return resync_traffic_result({f"{a}<->{b}": info for (a, b), info in sorted(pairs.items())}, bound, predicates)


def resync_traffic_result(pairs: dict, bound: int | None, predicates: dict | None = None) -> CheckResult:
    """resync_traffic's verdict from the counts per pair ("A<->B" -> messages, bytes, by_kind...)."""
    details = {"bound": bound, "pairs": pairs, "messages": sum(p["messages"] for p in pairs.values())}
    if bound is None:
        return vacuous_result("resync_traffic", "no resync_bound given (a scenario key)", details)
    if not pairs:
        declared = sorted(p for p, pred in (predicates or {}).items() if pred is not None)
        undeclared = sorted(p for p, pred in (predicates or {}).items() if pred is None)
        why = "no resync message was sent" + (
            f" ({', '.join(declared)} declare(s) resync traffic)"
            if declared
            else " (no protocol in the log declares resync traffic)"
        )
        if undeclared:
            why += f"; not applicable to {', '.join(undeclared)}, which declare(s) no resync"
        return vacuous_result("resync_traffic", why, details)

    def line(name: str, p: dict) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(p["by_kind"].items()))
        return (
            f"{name}: {p['messages']} resync messages ({p['bytes']} B; {kinds}) "
            f"from {_fmt_t(p['first_t'])} to {_fmt_t(p['last_t'])}"
        )

    over = {name: p for name, p in pairs.items() if p["messages"] > bound}
    if over:
        explanation = f"{len(over)} pair(s) over the bound of {bound} resync messages: " + "; ".join(
            line(n, p) for n, p in over.items()
        )
        return CheckResult("resync_traffic", False, explanation, details, judged=len(pairs))
    most = max(pairs.items(), key=lambda item: item[1]["messages"])
    explanation = f"{len(pairs)} pair(s) within {bound} resync messages; most: " + line(*most)
    return CheckResult("resync_traffic", True, explanation, details, judged=len(pairs))


# ---- xmit_traffic -----------------------------------------------------------------------------


def check_xmit_traffic(events: list[dict], bound: int | None = None) -> CheckResult:
    """Over the whole run, at most `bound` retransmissions: what each protocol's spec calls
    retransmission traffic (`ProtocolSpec.xmit_traffic`: requests sent, and messages sent again
    for any cause, asked for or not), counted from the events of messages sent. A scenario on a
    lossless network states 0: nothing there needs asking for or sending again (MCAST's
    spurious retransmission). Judged: the application messages sent, which are what a
    retransmission could repeat; a run that sent none judges nothing."""
    from splitbrain.node import protocols

    predicates: dict[str, Callable | None] = {}
    sent = 0
    links: dict[str, dict] = {}
    for ev in _ordered(events):
        if _is_harness(ev):
            continue
        if ev["kind"] == "send" and ev.get("app") is not None:
            sent += run_message_count(ev)
            continue
        proto = ev["proto"]
        if proto not in predicates:
            try:
                predicates[proto] = protocols.get(proto).xmit_traffic
            except ValueError:
                predicates[proto] = None
        pred = predicates[proto]
        if pred is None or "peer" not in ev or not pred(ev):
            continue
        # A request goes from the receiver (node) to the one asked (peer); a retransmission from the
        # one who sends again (node) to its receiver (peer).
        info = links.setdefault(
            _link(ev["node"], ev["peer"]), {"requests": 0, "seqnos": 0, "retransmissions": 0, "first_t": ev["t"]}
        )
        if ev["kind"] == "retransmit":
            info["retransmissions"] += 1
            reason = str(ev.get("reason") or "unknown")
            by = info.setdefault("by_reason", {})
            by[reason] = by.get(reason, 0) + 1
        else:
            info["requests"] += 1
            info["seqnos"] += int(ev.get("count") or 0)
        info["last_t"] = ev["t"]
    return xmit_traffic_result(links, bound, sent, predicates)


def xmit_traffic_result(links: dict, bound: int | None, sent: int, predicates: dict | None = None) -> CheckResult:
    """xmit_traffic's verdict from the traffic per link ("X->Y" -> requests, seqnos, retransmissions,
    by_reason, first_t, last_t) and the number of application messages sent."""
    requests = sum(p["requests"] for p in links.values())
    resent = sum(p.get("retransmissions", 0) for p in links.values())
    details = {"bound": bound, "sent": sent, "requests": requests, "retransmissions": resent, "links": links}
    if bound is None:
        return vacuous_result("xmit_traffic", "no xmit_bound given (a scenario key)", details)
    if not sent:
        return vacuous_result("xmit_traffic", "no application message was sent", details)
    declared = [p for p, pred in (predicates or {}).items() if pred is not None]
    if not declared:
        return vacuous_result("xmit_traffic", "no protocol in the log declares retransmission traffic", details)
    total = requests + resent

    def traffic(p: dict) -> int:
        return p["requests"] + p.get("retransmissions", 0)

    def line(name: str, p: dict) -> str:
        what = f"{p['requests']} requests ({p['seqnos']} seqnos)"
        if p.get("retransmissions"):
            reasons = ", ".join(f"{r} {n}" for r, n in sorted(p.get("by_reason", {}).items()))
            what += f", {p['retransmissions']} retransmissions ({reasons})"
        return f"{name}: {what} from {_fmt_t(p['first_t'])} to {_fmt_t(p['last_t'])}"

    busiest = sorted(links.items(), key=lambda item: -traffic(item[1]))[:FIRST_FEW]
    shown = "; ".join(line(name, p) for name, p in busiest)
    counted = f"{requests} retransmission requests and {resent} retransmissions"
    if total > bound:
        explanation = f"{counted} over the run, {total} against a bound of {bound}, for {sent} messages sent; {shown}"
        return CheckResult("xmit_traffic", False, explanation, details, judged=sent)
    explanation = f"{counted} (bound {bound}) for {sent} messages sent" + (f"; {shown}" if shown else "")
    return CheckResult("xmit_traffic", True, explanation, details, judged=sent)


# ---- pauses: a node frozen at the end is judged like a cut -----------------------------------


def _pause_target(ev: dict) -> str | None:
    """The node a harness `pause` fault_on / fault_off is about: the endpoint every link it names
    shares (a pause cuts every link to and from its node), the detail's "pause X" / "resume X"
    telling the two ends of a two-node cluster apart."""
    ends = None
    for link in ev.get("links") or ():
        src, _, dst = link.partition("->")
        ends = {src, dst} if ends is None else ends & {src, dst}
    if not ends:
        return None
    if len(ends) == 1:
        return next(iter(ends))
    words = str(ev.get("detail") or "").replace("(", " ").split()
    named = [w for before, w in zip(words, words[1:]) if before in ("pause", "resume") and w in ends]
    return named[0] if named else None


class _Pauses:
    """Which nodes are paused (frozen) as the log is walked: a pause's fault_on until its fault_off
    (a resume or a heal) or the node's next start or stop."""

    def __init__(self) -> None:
        self.paused: dict[str, float] = {}  # node -> paused since

    def observe(self, ev: dict) -> None:
        kind = ev["kind"]
        if kind in _LIFECYCLE:
            self.paused.pop(ev["node"], None)
        elif kind in ("fault_on", "fault_off") and ev.get("fault") == "pause" and _is_harness(ev):
            node = _pause_target(ev)
            if node is None:
                return
            if kind == "fault_on":
                self.paused.setdefault(node, ev["t"])
            else:
                self.paused.pop(node, None)


# ---- views_agree -----------------------------------------------------------------------------


def _view_of(ev: dict) -> dict:
    """The view a `view` event installs; coord "" or absent means the first member (the contract
    of node.layer.ViewChange)."""
    members = list(ev.get("members") or ())
    return {
        "view_id": ev.get("view_id"),
        "coord": ev.get("coord") or (members[0] if members else ""),
        "members": members,
        "t": ev["t"],
        "reason": ev.get("reason"),
    }


def _view_key(view: dict, static: bool = False) -> tuple:
    """What two nodes' views must share to agree. Under static membership (no view of the run came
    from a membership protocol) view ids are each node's own count of the views it was given, so
    only members and coordinator are compared."""
    if static:
        return (view["coord"], tuple(view["members"]))
    return (view["view_id"], view["coord"], tuple(view["members"]))


def _describe_view(view: dict | None) -> str:
    if view is None:
        return "no view installed since its last start"
    return f"view {view['view_id']} coord {view['coord']} [{', '.join(view['members'])}] (t={view['t']:.3f})"


def run_end(events: list[dict]) -> float | None:
    """When the run ended for the nodes: the first graceful stop that is some node's last lifecycle
    event (a live backend stops every node gracefully when the run is over), or None when no node
    stopped that way (the simulator: the log's end is the run's end). What nodes do after it (a
    leave on SIGTERM) belongs to the teardown."""
    last: dict[str, dict] = {}
    for ev in events:
        if ev["kind"] in _LIFECYCLE:
            last[ev["node"]] = ev
    ends = [ev["t"] for ev in last.values() if ev["kind"] == "node_stop" and ev.get("reason") == GRACEFUL_STOP]
    return min(ends, default=None)


def check_views_agree(events: list[dict]) -> CheckResult:
    """At the end of the run every live node holds one and the same view, listing exactly them
    (a node paused at the end is judged like a cut one: not required to agree, nor to be listed)."""
    events = _ordered(events)
    end = run_end(events)
    lives = _Lives()
    pauses = _Pauses()
    views: dict[str, dict | None] = {}  # node -> its last view since its last start
    seen: set[str] = set()
    any_view = 0
    membership = False  # a view installed by a membership protocol (it names a reason)
    last_heal: float | None = None
    for ev in events:
        node, kind = ev["node"], ev["kind"]
        in_run = end is None or ev["t"] <= end
        if _is_harness(ev):
            if in_run:
                pauses.observe(ev)
                if _is_heal(ev):
                    last_heal = ev["t"]
            continue
        seen.add(node)
        if kind in _LIFECYCLE:
            lives.observe(ev)
            if in_run:
                pauses.observe(ev)
            if kind == "node_start":
                views[node] = None
        elif kind == "view" and in_run:
            any_view += 1
            membership = membership or ev.get("reason") is not None
            views[node] = _view_of(ev)
    paused = sorted(n for n in pauses.paused if n in seen and not lives.dead(n))
    return views_agree_result(
        {n: views.get(n) for n in sorted(seen) if not lives.dead(n) and n not in pauses.paused},
        sorted(n for n in seen if lives.dead(n)),
        any_view,
        last_heal,
        paused=paused,
        static=not membership,
    )


def views_agree_result(
    final: dict[str, dict | None],
    dead: list[str],
    installed: int,
    last_heal: float | None,
    paused: list[str] | None = None,
    static: bool = False,
) -> CheckResult:
    """views_agree's verdict: `final` maps each live node to its last view (None: none since its
    last start), `dead` lists the nodes dead at the end, `installed` counts view events, `paused`
    the nodes paused at the end (neither judged nor required in the view), `static` says that no
    membership protocol installed a view (view ids are then not compared)."""
    paused = list(paused or ())
    live = list(final)
    details: dict = {
        "views": final,
        "live": live,
        "dead": dead,
        "views_installed": installed,
        "last_heal_t": last_heal,
        "agreed_t": None,
        "heal_to_agreement_s": None,
    }
    if paused:
        details["paused"] = paused
    if static:
        details["compared"] = "members and coordinator (static membership: view ids are per node)"
    if not installed:
        return vacuous_result("views_agree", "no view event from any node", details)
    if not live:
        nothing = f"no node alive at the end ({installed} view event(s))"
        if paused:
            nothing += f"; paused at the end: {', '.join(paused)}"
        return vacuous_result("views_agree", nothing, details)
    groups: dict[tuple, list[str]] = defaultdict(list)
    for node, view in final.items():
        groups[_view_key(view, static) if view is not None else ()].append(node)
    problems = []
    if len(groups) > 1:
        # Name each node and its view, largest group first, so the odd ones out read last.
        ordered = sorted(groups.values(), key=lambda nodes: (-len(nodes), nodes))
        parts = [f"{', '.join(nodes)}: {_describe_view(final[nodes[0]])}" for nodes in ordered]
        problems.append("live nodes disagree on the view: " + "; ".join(parts))
    else:
        view = final[live[0]]
        if view is None:
            problems.append(f"{', '.join(live)}: {_describe_view(None)}")
        else:
            missing = [n for n in live if n not in view["members"]]
            extra = [m for m in view["members"] if m not in final and m not in paused]
            if missing:
                problems.append(f"live node(s) {', '.join(missing)} missing from the view they hold")
            if extra:
                why = "dead at the end" if all(m in dead for m in extra) else "not live at the end"
                problems.append(f"the view lists {', '.join(extra)} ({why})")
            if problems:
                problems[0] = f"{', '.join(live)} hold {_describe_view(view)}: " + problems[0]
            else:
                agreed = max(v["t"] for v in final.values() if v is not None)
                details["agreed_t"] = agreed
                if last_heal is not None:
                    details["heal_to_agreement_s"] = max(0.0, agreed - last_heal)
    if problems:
        return CheckResult("views_agree", False, "; ".join(problems), details, judged=len(live))
    view = final[live[0]]
    assert view is not None
    shown = f"coord {view['coord']} [{', '.join(view['members'])}]"
    explanation = (
        f"{len(live)} live node(s) hold members and coordinator {shown} (static membership: view ids not compared)"
        if static
        else f"{len(live)} live node(s) hold view {view['view_id']} {shown}"
    )
    if details["heal_to_agreement_s"] is not None:
        explanation += f", agreed {details['heal_to_agreement_s']:.3f}s after the last heal"
    if paused:
        explanation += f"; {', '.join(paused)} paused at the end (judged like a cut: not required to agree)"
    return CheckResult("views_agree", True, explanation, details, judged=len(live))


# ---- registry ---------------------------------------------------------------------------------

CHECKS: dict[str, Callable[..., CheckResult]] = {
    "fifo": check_fifo,
    "no_duplicates": check_no_duplicates,
    "no_loss": check_no_loss,
    "windows_synced": check_windows_synced,
    "no_errors": check_no_errors,
    "views_agree": check_views_agree,
}
# Checks that need a bound from the scenario (check -> its scenario key). They are not in CHECKS,
# the checks every run may be judged by: without their bound they judge nothing.
BOUNDED_CHECKS: dict[str, Callable[..., CheckResult]] = {
    "resync_traffic": check_resync_traffic,
    "xmit_traffic": check_xmit_traffic,
}
# The scenario key each bounded check reads its bound from (the reference pages name it).
CHECK_BOUNDS = {"resync_traffic": "resync_bound", "xmit_traffic": "xmit_bound"}
KNOWN_CHECKS = (*CHECKS, *BOUNDED_CHECKS)

# Checks that only mean something for a stack with a membership protocol (scenario key
# `membership: gms`); they join a scenario's default checks there, and are left out where nothing
# names the checks (run_checks without names, a run directory without scenario.yaml).
MEMBERSHIP_CHECKS = ("views_agree",)
# The checks every run can be judged by: the default of run_checks and of runs without a scenario.
GENERAL_CHECKS = tuple(name for name in CHECKS if name not in MEMBERSHIP_CHECKS)


def run_checks(
    events: list[dict],
    names: Iterable[str] | None = None,
    *,
    recovery_bound_s: float | None = None,
    resync_bound: int | None = None,
    xmit_bound: int | None = None,
    ack_bounds: dict[str, tuple[str, float]] | None = None,
) -> list[CheckResult]:
    """Run the named checks (GENERAL_CHECKS by default) in the given order over one merged event log.

    `recovery_bound_s` is no_loss' bound (default DEFAULT_RECOVERY_BOUND_S); scenarios resolve
    theirs from the protocol's timers (Scenario.recovery_bound). `resync_bound` is
    resync_traffic's (the scenario's `resync_bound`; without it that check judges nothing), and
    `xmit_bound` xmit_traffic's (the scenario's `xmit_bound`, likewise). `ack_bounds` maps a
    protocol to the time its senders may wait for acks and the setting behind it
    (node.compose.ack_bounds): windows_synced calls a pair that had less inconclusive."""
    names = list(GENERAL_CHECKS) if names is None else list(names)
    unknown = [n for n in names if n not in KNOWN_CHECKS]
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(map(repr, unknown))}; known: {', '.join(KNOWN_CHECKS)}")
    # Sort once here; the checks take the sorted log as it is.
    ordered = _SortedLog(_ordered(events))
    bound = DEFAULT_RECOVERY_BOUND_S if recovery_bound_s is None else recovery_bound_s
    # The walk makes a tuple or two per event and no reference cycles: the collector's passes over
    # a big log (every event dict is tracked) would cost a fifth of the walk.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        walked = _walk(ordered, names, bound, ack_bounds)
    finally:
        if gc_was_enabled:
            gc.enable()

    def one(name: str) -> CheckResult:
        if name in walked:
            return walked[name]
        if name == "resync_traffic":
            return check_resync_traffic(ordered, resync_bound)
        if name == "xmit_traffic":
            return check_xmit_traffic(ordered, xmit_bound)
        return CHECKS[name](ordered)

    return [one(name) for name in names]


def run_scenario_checks(events: list[dict], scenario: Any, names: Iterable[str] | None = None) -> list[CheckResult]:
    """run_checks with a scenario's bounds: its checks (or `names` of them) over one merged log."""
    return run_checks(
        events,
        list(scenario.checks) if names is None else list(names),
        recovery_bound_s=scenario.recovery_bound,
        resync_bound=scenario.resync_bound,
        xmit_bound=scenario.xmit_bound,
        ack_bounds=scenario_ack_bounds(scenario),
    )


def scenario_ack_bounds(scenario: Any) -> dict[str, tuple[str, float]]:
    """The ack bound of a scenario's protocol with its settings (node.compose.ack_bounds)."""
    from splitbrain.node.compose import ack_bounds

    return ack_bounds(scenario.protocol, dict(scenario.config or {}))


def _walk(
    ordered: list[dict], names: list[str], bound: float, ack_bounds: dict[str, tuple[str, float]] | None = None
) -> dict[str, CheckResult]:
    """The results of the named checks among fifo, no_duplicates, no_loss, windows_synced and
    no_errors, from one pass over the sorted log (the other checks walk it on their own).

    Sends and deliveries are nearly every event: they go straight to the checks that read them,
    the few other events to every check."""
    walk = _Redeliveries()
    fifo = _Fifo(walk) if "fifo" in names else None
    dups = _NoDuplicates(walk) if "no_duplicates" in names else None
    loss = _NoLoss(bound) if "no_loss" in names else None
    synced = _WindowsSynced(ack_bounds) if "windows_synced" in names else None
    errors = _NoErrors() if "no_errors" in names else None
    if not (fifo or dups or loss or synced or errors):
        return {}
    on_send: list[Callable[[dict], None]] = []
    on_deliver: list[Callable[[dict], None]] = []  # deliveries with an app id
    on_other_deliver: list[Callable[[dict], None]] = []  # deliveries without one
    on_other: list[Callable[[dict], None]] = []
    if fifo or dups:
        on_send.append(walk.see_send)
        on_other.append(walk.see_other)
        on_deliver.extend(check.see for check in (fifo, dups) if check is not None)
    for check in (loss, synced):
        if check is not None:
            on_send.append(check.see_send)
            on_deliver.append(check.see_deliver)
            on_other_deliver.append(check.see_deliver)
            on_other.append(check.see_other)
    if errors is not None:
        on_other.append(errors.see_other)
    whole = _whole_run_handlers(walk if (fifo or dups) else None, synced, dups)
    hot_judged = 0  # sends and deliveries that no_errors judges (node events, never errors)
    for ev in ordered:
        kind = ev["kind"]
        if kind == "deliver":
            hot = on_deliver if "app" in ev else on_other_deliver
        elif kind == "send":
            hot = on_send
        else:
            for see in on_other:
                see(ev)
            continue
        if ev.get("v") == RUN_VERSION:
            hot_judged += _see_run(ev, hot, whole, errors is not None)
            continue
        if errors is not None and ev["node"] != _HARNESS and ev["proto"] != _HARNESS:
            hot_judged += 1
        for see in hot:
            see(ev)
    if errors is not None:
        errors.judged += hot_judged
    found = {"fifo": fifo, "no_duplicates": dups, "no_loss": loss, "windows_synced": synced, "no_errors": errors}
    return {name: check.result() for name, check in found.items() if check is not None}


def _whole_run_handlers(
    walk: _Redeliveries | None, synced: _WindowsSynced | None, dups: _NoDuplicates | None
) -> dict[Callable, Callable]:
    """The handlers of sends or deliveries that take a run line (node/events.py) as it is, by
    the per-message handler they stand in for: what they keep of a run is one entry (the sends
    a redelivery is judged against) or nothing per message (who had traffic)."""
    whole: dict[Callable, Callable] = {}
    if walk is not None:
        whole[walk.see_send] = walk.see_send_run
    if dups is not None:
        whole[dups.see] = dups.see_run
    if synced is not None:
        whole[synced.see_send] = synced.see_send
        whole[synced.see_deliver] = synced.see_deliver
    return whole


def _see_run(run: dict, hot: list[Callable[[dict], None]], whole: dict[Callable, Callable], judge_errors: bool) -> int:
    """Feed a run line (node/events.py) to the checks that read sends or deliveries: whole to
    those that take it so, its messages one at a time to the others, each made only for that
    moment, so the log never holds one per message. Returns how many no_errors judges (the
    messages of a node's run)."""
    problem = run_problem(run)
    if problem is not None:
        raise ValueError(f"{run['kind']} run at {run['node']} t={run['t']}: {problem}")
    each = [see for see in hot if see not in whole]
    for see in hot:
        if see in whole:
            whole[see](run)
    if each:
        for one in _run_messages(run):
            for see in each:
                see(one)
    return run["count"] if judge_errors and run["node"] != _HARNESS and run["proto"] != _HARNESS else 0


def _run_messages(run: dict) -> Iterable[dict]:
    """A run line's messages as the one-per-message events a version-1 log has (their bytes an
    even share of the run's), made one by one; a run line that contradicts itself raises."""
    problem = run_problem(run)
    if problem is not None:
        raise ValueError(f"{run['kind']} run at {run['node']} t={run['t']}: {problem}")
    prefix, _, raw_n = run["app"].rpartition(":")
    n0, seqno, count = int(raw_n), run["seqno"], run["count"]
    share, extra = divmod(run["bytes"], count)
    base = {key: value for key, value in run.items() if key not in _RUN_ONLY}
    base["v"] = EVENT_VERSION
    for i in range(count):
        one = base.copy()
        one["seqno"] = seqno + i
        one["bytes"] = share + 1 if i < extra else share
        one["app"] = f"{prefix}:{n0 + i}"
        yield one


def run_message_count(ev: dict) -> int:
    """How many messages an event stands for: a run line's count, else 1."""
    return ev["count"] if ev.get("v") == RUN_VERSION else 1


def judged_summary(results: Iterable[CheckResult]) -> str:
    """One line saying how much each check judged, e.g. "fifo 1800, no_loss 1790 owed"."""
    unit = {
        "no_loss": " owed",
        "windows_synced": " pairs",
        "no_errors": " events",
        "resync_traffic": " pairs",
        "xmit_traffic": " sent",
        "views_agree": " nodes",
    }

    def judged(r: CheckResult) -> str:
        if not r.applicable:
            return "not applicable"
        return "nothing" if r.vacuous else str(r.judged) + unit.get(r.name, "")

    return ", ".join(f"{r.name} {judged(r)}" for r in results)
