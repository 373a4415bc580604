"""Which deliveries may legitimately come twice: the state fifo and no_duplicates share.

A second delivery of an application id is excused only when the receiver's window for that sender
was discarded after the first delivery (timeline.discards_window, or a restart of the receiver)
AND the sender had not seen the message acked when it came again (a message the sender saw acked
is purged and can legitimately never come back). A multicast counts as acked once every member the
sender last multicast to acked it (a multicast protocol's ack_rx, or NAKACK2's STABLE digests,
stable_rx): only then may the sender purge it.
"""

from __future__ import annotations

from typing import Any

from splitbrain.node.events import expand_run

from .checker import Part
from .events import digest_entries
from .timeline import LIFECYCLE, Lives, discards_window

# Why a redelivery was excused (no_duplicates).
REDELIVERY_CAUSES = ("receiver_restarted", "window_closed")


class Redeliveries(Part):
    """Walks a log and says, for each delivery, whether it repeats an earlier one and whether the
    repeat is excused (see the module docstring). Shared by fifo and no_duplicates."""

    def __init__(self) -> None:
        self.lives = Lives()
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
            where = later_send(where, self._sent_runs, sender, receiver, app)
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
            for sender, seqno in digest_entries(ev["digest"]):
                if sender == node:
                    self._multicast_ack(node, ev["peer"], ev["t"], seqno)
        elif kind == "conn_state":
            self._observe_conn_state(ev)
        elif kind in LIFECYCLE:
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
        if discards_window(ev):
            self._closed[key] = self._closed.get(key, 0) + 1
        elif ev.get("side") == "send" and ev.get("reason") == "created":
            self._lifetime[key] = self._lifetime.get(key, 0) + 1

    @staticmethod
    def cause(before: tuple[int, int], now: tuple[int, int]) -> str:
        return "receiver_restarted" if now[0] != before[0] else "window_closed"


def later_send(
    where: tuple[int, int, int] | None,
    runs: dict[tuple[str, str, str], list[tuple[int, int, int, int, int]]],
    sender: str,
    receiver: str,
    app: str,
) -> tuple[int, int, int] | None:
    """The later of `where` (a single send of `app`) and the latest run line that sent it, as
    (lifetime, seqno, order): the send Redeliveries.acked asks about."""
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
