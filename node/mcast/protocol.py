"""MCAST: reliable multicast over fixed-capacity windows, with blocking senders (the MCAST design, JGRP-2780).

Theory of operation
-------------------
A multicast is a message to MCAST_DEST ("*"), meaning the sender's current view. Every member
keeps a ring buffer of `capacity` slots (FixedBuffer, indexed by seqno % capacity) per sender:

- its own send window: low = highest seqno acked by every member (purged up to), high = highest
  seqno sent; it holds low+1..high for retransmission;
- a receive window per other member: low = highest delivered, high = highest received (or
  announced); it holds what arrived above low and is not deliverable yet.

Invariants (check_invariants): low <= high, high - low < capacity, the held count matches the
slots in use; on the sender low <= every member's ack <= high.

Sending (one atomic step, the design's send-window lock): S = seqno + 1; if S - low >= capacity the
sender blocks: the message waits in this layer, a `block` event is logged and `blocked("*")` says
so (the simulator's workload stops sending for that sender, the runtime's streams wait); otherwise
M is added, high = S, M is delivered to the sender itself (loopback) and one copy goes to every
other member, in the same call, so concurrent senders never put seqnos out of order on the wire.
Nothing below may block it (MCAST needs no MFC flow-control layer: the window is the flow control).

Receiving MSG S from P: dropped when S <= low (already delivered) or S >= low + capacity (outside
the window, asked for again later), or held already (a duplicate); else added and everything from
low+1 up to the first gap is delivered in order. After `ack_threshold` deliveries from P (default
capacity / 4, NAKACK4's) an MCAST_ACK(low) goes to P; the rest is acked at the next retransmit run.

Acks: ack-map[P] = max(ack-map[P], ack) for members only (an ack from a non-member is dropped,
JGRP-2904); when min(ack-map over the other members) passes low the send window is purged up to
it, which unblocks the waiting sends, in order, as space allows (`unblock` when none is left).

Every `xmit_interval` (the retransmit task, fixed order; it ends with a `window_fill` event when
the send window changed since the last one): for each receive window an
MCAST_XMIT_REQ for its missing seqnos (low+1..high not held) to the sender, which resends them
(unicast, as MSG); an ack for each window whose low moved since its last ack; and, when this
member has unacked multicasts and no ack moved since the previous run, an MCAST_HIGHEST_SEQNO to
the members behind (JGroups' resend_last_seqno): a receiver that lost the last message raises its
high and asks for it, and one that has it all acks again (so a lost last ack cannot leave a sender
blocked).

Views: receive windows and ack-map entries of members that left are removed; a member's last ack
still holds back purging for DEPARTED_GRACE_RUNS retransmit runs (a sender blocked on a dead member
unblocks when that grace is over), so a member dropped and re-added soon (a brief shrink) finds
what it missed and keeps its ack; new members get a receive window at the view's
digest offset and an ack-map entry at this member's digest entry, or its current seqno (a joiner is
owed what is sent after it joined), never below its send-window low. Without a digest entry a
window of the first view starts at 0 (static membership: everyone starts together) and one of a
later view (a member a merge brought, or every member after this node restarted) where the first
MSG or HIGHEST_SEQNO from that sender says (its send-window low).

Joining (membership gms: Bootstrap, then the join view with GMS's digest): until its first view a
joiner holds what the application multicasts and drops what arrives, making no window (one made
then would start at 0, not at the digest, and never fill); its senders hold those messages for it,
as their ack-map entry for it starts at the digest. A member that installs the join view after it
purged past the digest's entry for itself (it kept multicasting to the old view meanwhile) starts
that entry at its low, and the joiner skips what the sender purged when a MSG or HIGHEST_SEQNO
shows a send-window low above what it delivered (only messages sent to a view without it can be
purged before it acked them).

Mutation `seqno_outside_lock` (the MCAST design, Misc): the seqno is taken outside the lock, so a sender
"thread" may be preempted between numbering a message and sending it; the layer models that with
its seeded rng: a numbered message is sometimes held back for SCHEDULING_DELAY_S while later ones
overtake it on the wire, and receivers then ask for messages that were never lost.

Unicasts (any other dest) pass through untouched to UNICAST3, stacked above.

One module, one state machine: sending (numbering, blocking on the full window), receiving,
acks, purging and XMIT-REQ serving share the send window, the ack map and the receive windows, and
the planted bugs sit in those same branches; no part of it holds state the others do not touch.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ..events import EVENT_VERSION
from ..layer import (
    Action,
    Bootstrap,
    Command,
    CountingLayer,
    Digest,
    Down,
    GetDigest,
    Log,
    Query,
    SetConfig,
    Up,
    ViewChange,
)
from ..message import MCAST_DEST, Message
from ..protocols import Rng
from ..rangeset import RangeSet
from ..timers import Deadlines, FiredTimers
from ..views import Window
from .config import DIGEST_INFLATION, SKIPPED_SEQNOS, McastConfig
from .header import MAX_XMIT_RANGES, PROTO_ID, McastHeader, MsgType
from .header import encode as encode_header

PROTO = "mcast"
TIMERS = ("xmit", "scheduling")
# The mutant's preempted sender thread runs again after at most this long.
SCHEDULING_DELAY_S = 0.005
# A member that left the view holds back purging for this many retransmit runs: back within them
# (a brief shrink), it asks for what it missed at its next run and must still find it.
DEPARTED_GRACE_RUNS = 4
# Windows up to this capacity are checked slot by slot after every step (the simulator's check).
FULL_CHECK_CAPACITY = 256
_ACK_SIZE = len(encode_header(McastHeader(MsgType.MCAST_ACK, 0)))


class FixedBuffer:
    """A ring buffer of `capacity` slots keyed by seqno (JGroups' FixedBuffer / RingBufferSeqno).
    Seqnos low+1 .. low+capacity-1 fit; slot = seqno % capacity."""

    __slots__ = ("capacity", "low", "high", "buf", "size", "bytes")

    def __init__(self, capacity: int, offset: int = 0) -> None:
        self.capacity = capacity
        self.low = offset
        self.high = offset
        self.buf: list[Message | None] = [None] * capacity
        self.size = 0
        self.bytes = 0

    def fits(self, seqno: int) -> bool:
        return self.low < seqno < self.low + self.capacity

    def get(self, seqno: int) -> Message | None:
        return self.buf[seqno % self.capacity] if self.fits(seqno) else None

    def add(self, seqno: int, msg: Message) -> bool:
        """Add M: False when outside the window or already held (the design's added=false)."""
        if not self.fits(seqno):
            return False
        idx = seqno % self.capacity
        if self.buf[idx] is not None:
            return False
        self.buf[idx] = msg
        self.size += 1
        self.bytes += len(msg.payload)
        if seqno > self.high:
            self.high = seqno
        return True

    def remove_next(self) -> Message | None:
        """Remove low+1 if held (a receiver delivering in order), advancing low."""
        idx = (self.low + 1) % self.capacity
        msg = self.buf[idx]
        if msg is None or self.low + 1 > self.high:
            return None
        self.buf[idx] = None
        self.size -= 1
        self.bytes -= len(msg.payload)
        self.low += 1
        return msg

    def purge(self, upto: int) -> int:
        """Drop everything up to `upto` (at most high); low = upto. Returns how many went."""
        upto = min(upto, self.high)
        gone = 0
        for seqno in range(self.low + 1, upto + 1):
            idx = seqno % self.capacity
            msg = self.buf[idx]
            if msg is not None:
                self.buf[idx] = None
                self.size -= 1
                self.bytes -= len(msg.payload)
                gone += 1
        if upto > self.low:
            self.low = upto
        return gone

    def raise_high(self, seqno: int) -> None:
        """A seqno known to exist (HIGHEST_SEQNO): high goes up to it, within the window."""
        self.high = max(self.high, min(seqno, self.low + self.capacity - 1))

    def missing(self) -> RangeSet:
        gaps = RangeSet()
        buf, cap = self.buf, self.capacity
        start = None
        for seqno in range(self.low + 1, self.high + 1):
            if buf[seqno % cap] is None:
                if start is None:
                    start = seqno
            elif start is not None:
                gaps.add(start, seqno - 1)
                start = None
        if start is not None:
            gaps.add(start, self.high)
        return gaps

    def check_invariants(self, who: str) -> None:
        assert self.low <= self.high, f"{who}: low {self.low} > high {self.high}"
        assert self.high - self.low < self.capacity, f"{who}: high {self.high} - low {self.low} >= {self.capacity}"
        assert 0 <= self.size <= self.high - self.low, f"{who}: {self.size} held in low+1..high"
        if self.capacity <= FULL_CHECK_CAPACITY:
            # Small windows (the tests') are checked slot by slot; large ones only in O(1).
            held = [s for s in range(self.low + 1, self.high + 1) if self.buf[s % self.capacity] is not None]
            assert len(held) == self.size, f"{who}: {self.size} counted, {len(held)} held"
            assert sum(1 for m in self.buf if m is not None) == self.size, f"{who}: a message held outside low+1..high"


class Mcast(FiredTimers, CountingLayer):
    proto = PROTO

    def __init__(self, local: str, config: McastConfig, rng: Rng, incarnation: int = 0) -> None:
        self.local = local
        self.incarnation = incarnation
        self._incarnations: dict[str, int] = {}  # sender -> the life its multicasts come from
        self.config = config
        self._rng = rng
        self.members: tuple[str, ...] = ()
        self._members_list: list[str] = [local]
        self.view_id = 0
        self.send_window = FixedBuffer(config.capacity)
        self.recv: dict[str, FixedBuffer] = {}
        self.ack_map: dict[str, int] = {}
        # Members that left the view: their last ack and until when it holds back purging.
        self._departed: dict[str, tuple[int, float]] = {}
        self._acked_sent: dict[str, int] = {}  # receiver side: sender -> last ack sent
        self._since_ack: dict[str, int] = {}  # receiver side: deliveries since the last ack
        # Senders whose window came from a view without a digest entry (not the first view): the
        # first message from them sets the offset (see _on_view).
        self._unsynced: set[str] = set()
        self._left_low: dict[str, int] = {}  # sender -> delivered up to when it left the view
        self._waiting: deque[Message] = deque()  # sends blocked on a full window
        # A joiner (Bootstrap, no view yet) holds what the application multicasts until its first
        # view, and keeps no window for what arrives meanwhile (see _on_view).
        self._joining = False
        self._held: list[Message] = []
        self._blocked_since: float | None = None
        self.blocked_s = 0.0  # total time blocked
        self._prev_min_ack = 0
        self._gauged: tuple[int, int, int] = (0, 0, 0)  # the send window's last window_fill
        self._held_back: Message | None = None  # the mutant's preempted send
        self.timers = Deadlines(*TIMERS)
        self.counters: dict[str, int] = {}
        self.peak_held = 0
        self.peak_bytes = 0
        self._armed = False

    # ---- helpers ------------------------------------------------------------------------------

    @property
    def seqno(self) -> int:
        return self.send_window.high

    def _others(self) -> list[str]:
        return [m for m in self.members if m != self.local]

    def _arm(self, now: float) -> None:
        if not self._armed:
            self._armed = True
            self.timers.set("xmit", now + self.config.xmit_interval)

    def _event(self, now: float, kind: str, seqno: int, msg: Message, peer: str | None) -> dict[str, Any]:
        ev: dict[str, Any] = {"v": EVENT_VERSION, "t": now, "node": self.local, "proto": PROTO, "kind": kind}
        if peer is not None:
            ev["peer"] = peer
        else:
            ev["members"] = self._members_list
        ev["seqno"] = seqno
        ev["bytes"] = len(msg.payload)
        if msg.app is not None:
            ev["app"] = msg.app
        return ev

    def _ctrl(self, dest: str, hdr: McastHeader) -> Down:
        self._count(f"tx_{hdr.type.name}")
        return Down(msg=Message(self.local, dest, b"", {PROTO_ID: hdr}))

    def _note_memory(self) -> None:
        held = self.held()
        if held > self.peak_held:
            self.peak_held = held
        held_bytes = self.held_bytes()
        if held_bytes > self.peak_bytes:
            self.peak_bytes = held_bytes

    # ---- sending ------------------------------------------------------------------------------

    def _full(self) -> bool:
        # The seed: S = seqno + 1 does not fit when S - low >= capacity.
        return self.seqno + 1 - self.send_window.low >= self.config.capacity

    def down(self, msg: Message, now: float) -> list[Action]:
        if msg.dest != MCAST_DEST:
            return [Down(msg=msg)]
        if self._joining:
            # JGroups: a channel multicasts once connected; numbered and sent at the first view.
            self._held.append(msg)
            return []
        self._arm(now)
        out: list[Action] = []
        if self._waiting or self._full():
            # The application's send blocks until acks make room; its message waits here.
            if not self._waiting:
                self._blocked_since = now
                self._count("blocks")
                out.append(self._log(now, "block", seqno=self.seqno + 1, low=self.send_window.low, high=self.seqno))
            self._waiting.append(msg)
            return out
        self._send(msg, now, out)
        return out

    def _send(self, msg: Message, now: float, out: list[Action]) -> None:
        """The atomic step: number M, add it to the send window, deliver it locally, send it."""
        seqno = self.seqno + 1
        hdr = McastHeader(MsgType.MSG, seqno, incarnation=self.incarnation, low=self.send_window.low)
        msg.headers[PROTO_ID] = hdr
        self.send_window.add(seqno, msg)
        self._count("tx_MSG")
        self._note_memory()
        if self.config.mutation == "seqno_outside_lock":
            self._send_unlocked(msg, seqno, now, out)
            return
        out.append(Log(event=self._event(now, "send", seqno, msg, None)))
        self._loopback(msg, seqno, now, out)
        self._wire(msg, out)

    def _loopback(self, msg: Message, seqno: int, now: float, out: list[Action]) -> None:
        # The sender delivers its own multicast at once, as JGroups does.
        out.append(Log(event=self._event(now, "deliver", seqno, msg, self.local)))
        out.append(Up(msgs=[Message(self.local, MCAST_DEST, msg.payload, msg.headers)]))

    def _wire(self, msg: Message, out: list[Action]) -> None:
        for member in self.members:
            if member != self.local:
                out.append(Down(msg=Message(self.local, member, msg.payload, msg.headers)))

    def _send_unlocked(self, msg: Message, seqno: int, now: float, out: list[Action]) -> None:
        """The mutant: the numbered message may be preempted before it reaches the wire."""
        out.append(Log(event=self._event(now, "send", seqno, msg, None)))
        self._loopback(msg, seqno, now, out)
        if self._held_back is None and self._rng.random() < 0.5:
            # This "thread" was preempted after numbering M: later sends overtake it on the wire.
            self._held_back = msg
            self.timers.set("scheduling", now + SCHEDULING_DELAY_S)
            return
        self._wire(msg, out)

    def _unblock(self, now: float, out: list[Action]) -> None:
        """Room in the send window: the waiting sends go, in order, as space allows."""
        sent = 0
        while self._waiting and not self._full():
            self._send(self._waiting.popleft(), now, out)
            sent += 1
        if not self._waiting and self._blocked_since is not None:
            waited = now - self._blocked_since
            self.blocked_s += waited
            self._blocked_since = None
            out.append(
                self._log(
                    now,
                    "unblock",
                    seqno=self.seqno,
                    low=self.send_window.low,
                    high=self.seqno,
                    detail=f"blocked {waited:.6f} s",
                )
            )

    # ---- receiving ----------------------------------------------------------------------------

    def up(self, msgs: list[Message], now: float) -> list[Action]:
        out: list[Action] = []
        passed: list[Message] = []
        for msg in msgs:
            hdr = msg.headers.get(PROTO_ID)
            if hdr is None:
                passed.append(msg)  # a unicast for the layers above (UNICAST3)
                continue
            self._arm(now)
            t = hdr.type
            self._count(f"rx_{t.name}")
            if t is MsgType.MSG:
                if self._new_life(msg.src, hdr.incarnation, now, out):
                    self._sync(msg.src, hdr.low)
                    self._skip_purged(msg.src, hdr.low, now, out)
                    self._receive(msg.src, hdr.seqno, msg, now, out)
            elif t is MsgType.MCAST_ACK:
                self._on_ack(msg.src, hdr.seqno, now, out)
            elif t is MsgType.MCAST_XMIT_REQ:
                self._on_xmit_req(msg.src, hdr, now, out)
            else:
                self._on_highest(msg.src, hdr.seqno, hdr.low, now, out)
        if passed:
            out.append(Up(msgs=passed))
        return out

    def _new_life(self, sender: str, incarnation: int, now: float, out: list[Action]) -> bool:
        """A MSG from a restarted sender (a higher incarnation) starts its window afresh at 0 (it
        numbers from 1 again); one from an older life is dropped. True: go on with the message."""
        known = self._incarnations.get(sender)
        if known is None or incarnation > known:
            self._incarnations[sender] = incarnation
            if known is not None:
                self._left_low.pop(sender, None)
            if known is not None and sender in self.recv:
                self.recv[sender] = FixedBuffer(self.config.capacity)
                self._acked_sent[sender] = 0
                self._since_ack.pop(sender, None)
                self._unsynced.discard(sender)
                out.append(
                    self._log(
                        now, "conn_state", peer=sender, side="recv", state="OPEN", low=0, reason="new_window:restarted"
                    )
                )
            return True
        if incarnation < known:
            out.append(self._log(now, "drop", peer=sender, type="MSG", reason="from an older incarnation"))
            return False
        return True

    def _sync(self, sender: str, low: int) -> None:
        """A window not synced yet (this node restarted, or a later view added the sender without a
        digest entry) starts where the sender still holds messages (its send-window low, carried by
        MSG and HIGHEST_SEQNO), or where this member had delivered to before the sender left its
        view, whichever is higher; missing ones are then asked for."""
        if sender not in self._unsynced:
            return
        self._unsynced.discard(sender)
        win = self._window_for(sender)
        start = max(low, self._left_low.pop(sender, 0))
        if win.size == 0 and start > win.low:
            self.recv[sender] = FixedBuffer(self.config.capacity, start)
            self._acked_sent[sender] = start

    def _skip_purged(self, sender: str, low: int, now: float, out: list[Action]) -> None:
        """The sender's send-window low (carried by MSG and HIGHEST_SEQNO) is above what this
        member delivered: the sender purged messages this member never got. Its purge waits for
        every member's ack, so those went to a view without this member (the coordinator took the
        join digest while the sender still multicast to its old view): start the window after
        them, keeping what it holds above, or it would ask for them forever."""
        win = self.recv.get(sender)
        if win is None or low <= win.low or sender in self._unsynced:
            return
        out.append(
            self._log(
                now, "drop", peer=sender, seqno=low, type="MSG", reason="skipped: purged before this member joined"
            )
        )
        fresh = FixedBuffer(self.config.capacity, low)
        for seqno in range(low + 1, win.high + 1):
            held = win.get(seqno)
            if held is not None:
                fresh.add(seqno, held)
        fresh.raise_high(win.high)
        self.recv[sender] = fresh
        self._deliver(sender, fresh, now, out)

    def _window_for(self, sender: str) -> FixedBuffer:
        win = self.recv.get(sender)
        if win is None:
            win = self.recv[sender] = FixedBuffer(self.config.capacity)
        return win

    def _receive(self, sender: str, seqno: int, msg: Message, now: float, out: list[Action]) -> None:
        if self._joining:
            # A window made now would start at 0, not at the join digest, and never fill: the
            # sender holds this message for us (its ack-map starts at the digest) and resends it
            # when the window, made at the first view, asks.
            out.append(self._log(now, "drop", peer=sender, seqno=seqno, type="MSG", reason="joining: no view yet"))
            return
        if sender == self.local or (self.members and sender not in self.members) or seqno < 1:
            why = "own multicast" if sender == self.local else "seqno 0" if seqno < 1 else "sender not in view"
            out.append(self._log(now, "drop", peer=sender, seqno=seqno, type="MSG", reason=why))
            return
        win = self._window_for(sender)
        if seqno <= win.low or (win.fits(seqno) and win.get(seqno) is not None):
            self._count("rx_duplicate")
            out.append(self._log(now, "drop", peer=sender, seqno=seqno, type="MSG", reason="duplicate"))
            return
        msg.dest = MCAST_DEST
        if not win.add(seqno, msg):
            out.append(self._log(now, "drop", peer=sender, seqno=seqno, type="MSG", reason="outside the window"))
            return
        self._note_memory()
        self._deliver(sender, win, now, out)

    def _deliver(self, sender: str, win: FixedBuffer, now: float, out: list[Action]) -> None:
        """Deliver from low+1 up to the first gap; ack every `ack_threshold` deliveries."""
        delivered: list[Message] = []
        skipping = self.config.mutation == "skip_range"
        while (nxt := win.remove_next()) is not None:
            if skipping and win.low in SKIPPED_SEQNOS:
                continue  # the planted bug skip_range: the window moves past it, nothing goes up
            out.append(Log(event=self._event(now, "deliver", win.low, nxt, sender)))
            delivered.append(nxt)
        if delivered:
            out.append(Up(msgs=delivered))
            n = self._since_ack.get(sender, 0) + len(delivered)
            if n >= self.config.acks_every:
                self._ack(sender, win, now, out)
            else:
                self._since_ack[sender] = n

    def _ack(self, sender: str, win: FixedBuffer, now: float, out: list[Action]) -> None:
        self._since_ack[sender] = 0
        self._acked_sent[sender] = win.low
        out.append(self._log(now, "ack_tx", peer=sender, seqno=win.low, bytes=_ACK_SIZE))
        out.append(self._ctrl(sender, McastHeader(MsgType.MCAST_ACK, win.low)))

    def _on_ack(self, src: str, seqno: int, now: float, out: list[Action]) -> None:
        if src not in self.members or src == self.local:
            # JGRP-2904: an ack from a non-member would hold back (or fake) the minimum.
            out.append(self._log(now, "drop", peer=src, seqno=seqno, type="MCAST_ACK", reason="ack from a non-member"))
            return
        out.append(self._log(now, "ack_rx", peer=src, seqno=seqno))
        if seqno > self.seqno:
            out.append(self._log(now, "drop", peer=src, seqno=seqno, type="MCAST_ACK", reason="ack above highest sent"))
            self._tell_incarnation(src, now, out)
            return
        if seqno > self.ack_map.get(src, 0):
            self.ack_map[src] = seqno
            self._purge(now, out)

    def _tell_incarnation(self, member: str, now: float, out: list[Action]) -> None:
        """A member acking more than this node sent holds the window of an earlier life of it: only
        a MSG carries the incarnation, and a restarted sender whose first MSGs to it were lost (a
        partition) would otherwise send it only HIGHEST_SEQNOs it takes as old news, and block on
        it for good. The first message it misses goes to it again, so that it starts a new window."""
        win = self.send_window
        for seqno in range(max(win.low, self.ack_map.get(member, 0)) + 1, win.high + 1):
            stored = win.get(seqno)
            if stored is not None:
                self._count("retransmit")
                out.append(
                    self._log(
                        now, "retransmit", peer=member, seqno=seqno, bytes=len(stored.payload), reason="incarnation"
                    )
                )
                out.append(Down(msg=Message(self.local, member, stored.payload, dict(stored.headers))))
                return

    def _purge(self, now: float, out: list[Action]) -> None:
        """Purge the send window at the minimum ack over the other members and the members that
        left within the grace period; unblock senders."""
        others = self._others()
        lowest = min((self.ack_map.get(m, 0) for m in others), default=self.seqno)
        for member, (ack, until) in list(self._departed.items()):
            if until <= now:
                del self._departed[member]
            else:
                lowest = min(lowest, ack)
        if lowest > self.send_window.low:
            self._count("purged", self.send_window.purge(lowest))
        if self._waiting and not self._full():
            self._unblock(now, out)

    # ---- retransmission -----------------------------------------------------------------------

    def _on_xmit_req(self, src: str, hdr: McastHeader, now: float, out: list[Action]) -> None:
        asked = sum(hi - lo + 1 for lo, hi in hdr.ranges)
        out.append(
            self._log(
                now, "xmit_req_rx", peer=src, ranges=[list(r) for r in hdr.ranges], count=asked, origin=self.local
            )
        )
        win = self.send_window
        budget = self.config.max_xmit_req_size
        for lo, hi in hdr.ranges:
            # Only what this member still holds: a peer may ask for anything (0..2^64-1).
            for seqno in range(max(lo, win.low + 1), min(hi, win.high, lo + budget - 1) + 1):
                stored = win.get(seqno)
                if stored is None:
                    continue
                self._count("retransmit")
                out.append(
                    self._log(now, "retransmit", peer=src, seqno=seqno, bytes=len(stored.payload), reason="xmit_req")
                )
                # A headers dict of its own: copies sharing one are a multicast to the IP-multicast
                # runtime, and a retransmission stays a unicast to the member that asked.
                out.append(Down(msg=Message(self.local, src, stored.payload, dict(stored.headers))))
            budget -= hi - lo + 1
            if budget <= 0:
                break

    def _on_highest(self, src: str, seqno: int, low: int, now: float, out: list[Action]) -> None:
        out.append(self._log(now, "highest_seqno_rx", peer=src, seqno=seqno))
        if src not in self.members or src == self.local:
            return
        self._sync(src, low)
        self._skip_purged(src, low, now, out)
        win = self._window_for(src)
        if seqno > win.low:
            win.raise_high(seqno)  # the next retransmit run asks for what is missing
        else:
            self._ack(src, win, now, out)  # all delivered: the sender may have lost our ack

    def _xmit(self, now: float, out: list[Action]) -> None:
        """The retransmit task: XMIT-REQs for gaps, acks not sent yet, HIGHEST_SEQNO."""
        cfg = self.config
        if self._departed:
            self._purge(now, out)  # a departed member's grace may be over
        for sender, win in self.recv.items():
            missing = win.missing()
            if missing:
                ask = missing.truncated(cfg.max_xmit_req_size, MAX_XMIT_RANGES)
                ranges = ask.ranges()
                hdr = McastHeader(MsgType.MCAST_XMIT_REQ, ranges=ranges)
                out.append(
                    self._log(
                        now,
                        "xmit_req_tx",
                        peer=sender,
                        origin=sender,
                        ranges=[list(r) for r in ranges],
                        count=ask.count(),
                        bytes=len(encode_header(hdr)),
                    )
                )
                out.append(self._ctrl(sender, hdr))
            if win.low > self._acked_sent.get(sender, 0):
                self._ack(sender, win, now, out)
        others = self._others()
        if cfg.mutation == "unsolicited_resend":
            self._resend_every_unacked(others, now, out)
        lowest = min((self.ack_map.get(m, 0) for m in others), default=self.seqno)
        if lowest < self.seqno and lowest == self._prev_min_ack and cfg.resend_last_seqno_max_times:
            hdr = McastHeader(MsgType.MCAST_HIGHEST_SEQNO, self.seqno, low=self.send_window.low)
            behind = [m for m in others if self.ack_map.get(m, 0) < self.seqno]
            out.append(self._log(now, "highest_seqno_tx", seqno=self.seqno, members=behind))
            for member in behind:
                out.append(self._ctrl(member, hdr))
        self._prev_min_ack = lowest
        self._gauge(now, out)

    def _resend_every_unacked(self, others: list[str], now: float, out: list[Action]) -> None:
        """The planted bug unsolicited_resend: every message of the send window to every other member."""
        win = self.send_window
        for member in others:
            for seqno in range(win.low + 1, win.high + 1):
                stored = win.get(seqno)
                if stored is None:
                    continue
                self._count("retransmit")
                out.append(
                    self._log(
                        now, "retransmit", peer=member, seqno=seqno, bytes=len(stored.payload), reason="unsolicited"
                    )
                )
                out.append(Down(msg=Message(self.local, member, stored.payload, dict(stored.headers))))

    def _gauge(self, now: float, out: list[Action]) -> None:
        """window_fill: the send window (low = acked by all, high = sent, count = sends waiting)
        once per retransmit run when it changed, so a report can draw the fill over time at one
        event per node and xmit_interval at most."""
        state = (self.send_window.low, self.seqno, len(self._waiting))
        if state != self._gauged:
            self._gauged = state
            out.append(self._log(now, "window_fill", low=state[0], high=state[1], count=state[2]))

    # ---- commands -----------------------------------------------------------------------------

    def command(self, cmd: Command, now: float) -> list[Action]:
        if isinstance(cmd, ViewChange):
            return self._on_view(cmd, now)
        if isinstance(cmd, Bootstrap):
            # A node joining through a membership protocol: no view until its join completes.
            self._joining = not self.members
            return []
        if isinstance(cmd, SetConfig):
            return self._set_config(cmd.values, now)
        return []

    def _on_view(self, view: ViewChange, now: float) -> list[Action]:
        self._arm(now)
        old = set(self.members)
        self.members = tuple(view.members)
        self._members_list = list(self.members) or [self.local]
        self.view_id = view.view_id
        out: list[Action] = [self._log(now, "view", members=list(view.members), view_id=view.view_id)]
        digest = dict(view.digest)
        for sender in [s for s in self.recv if s not in self.members]:
            # Remembered: should the sender come back (a merge), nothing delivered is delivered again.
            self._left_low[sender] = self.recv[sender].low
            del self.recv[sender]
            self._acked_sent.pop(sender, None)
            self._since_ack.pop(sender, None)
        for member in [m for m in self.ack_map if m not in self.members]:
            # Its ack still holds back purging for a grace period: a member dropped from the view
            # and back soon (a brief shrink) asks for what it missed, and must still find it.
            self._departed[member] = (self.ack_map.pop(member), now + DEPARTED_GRACE_RUNS * self.config.xmit_interval)
        self._unsynced &= set(self.members)
        for member in self._others():
            if member not in self.recv:
                self.recv[member] = FixedBuffer(self.config.capacity, digest.get(member, 0))
                self._acked_sent[member] = digest.get(member, 0)
                if (old or self.incarnation > 0) and member not in digest:
                    # No digest entry (GMS sends none yet): a member added later (a join or a
                    # merge), or every member after this node restarted, starts where its first
                    # MSG or HIGHEST_SEQNO says; in the first view of a first life everyone starts
                    # at 0 (static membership: all members start together).
                    self._unsynced.add(member)
            departed = self._departed.pop(member, None)
            if member not in self.ack_map and member not in old and departed is not None and departed[1] > now:
                # Back within the grace period, with no new digest: what it acked before it left
                # still stands, and this member still holds everything above it.
                if member not in digest:
                    self.ack_map[member] = max(departed[0], self.send_window.low)
            if member not in self.ack_map and member not in old:
                # A joiner is owed what is sent after it joined (its digest says where it starts).
                # Never below low: what this member purged before the view went to the old
                # view only, and the joiner skips it (_skip_purged).
                self.ack_map[member] = max(min(digest.get(self.local, self.seqno), self.seqno), self.send_window.low)
        self._purge(now, out)
        if self._joining:
            self._joining = False
            held, self._held = self._held, []
            for msg in held:
                out.extend(self.down(msg, now))
        return out

    def _set_config(self, values: dict[str, Any], now: float) -> list[Action]:
        mine = {k: v for k, v in values.items() if k in McastConfig.own_keys()}
        if not mine:
            return []
        if "capacity" in mine and mine["capacity"] != self.config.capacity:
            raise ValueError("capacity cannot change at run time (the windows are fixed buffers)")
        self.config = self.config.updated(mine)
        self.timers.set("xmit", now + self.config.xmit_interval)
        return [self._log(now, "config_change", detail=", ".join(f"{k}={v}" for k, v in sorted(mine.items())))]

    # ---- timers -------------------------------------------------------------------------------

    def _fire_xmit(self, now: float, out: list[Action]) -> None:
        self._xmit(now, out)
        self.timers.set("xmit", now + self.config.xmit_interval)

    def _fire_scheduling(self, now: float, out: list[Action]) -> None:
        self.timers.set("scheduling", None)
        held, self._held_back = self._held_back, None
        if held is not None:
            self._wire(held, out)

    _FIRE = {"xmit": _fire_xmit, "scheduling": _fire_scheduling}

    # ---- views of the state -------------------------------------------------------------------

    def blocked(self, dest: str) -> bool:
        """Is the application's sender to `dest` blocked (a send of its waits for room)? The send
        that finds the window full is taken and waits here, as a blocked thread would; further
        sends are the driver's to hold back until this says False again."""
        return dest == MCAST_DEST and bool(self._waiting)

    def held(self) -> int:
        """Messages this member keeps: its send window, its receive windows, blocked sends and
        (a joiner) sends held until its first view."""
        return self.send_window.size + sum(w.size for w in self.recv.values()) + len(self._waiting) + len(self._held)

    def held_bytes(self) -> int:
        return self.send_window.bytes + sum(w.bytes for w in self.recv.values())

    def digest(self) -> tuple[tuple[str, int], ...]:
        """Highest seqno per sender as this member knows it (for a joiner's window offsets)."""
        if self.config.mutation == "inflated_digest":
            extra = DIGEST_INFLATION
            return ((self.local, self.seqno + extra), *sorted((s, w.high + extra) for s, w in self.recv.items()))
        return ((self.local, self.seqno), *sorted((s, w.high) for s, w in self.recv.items()))

    def answer(self, query: Query) -> Digest | None:
        """GetDigest (GMS, for a join or a merge): digest()."""
        return self.digest() if isinstance(query, GetDigest) else None

    def check_invariants(self) -> None:
        sw = self.send_window
        sw.check_invariants(f"{self.local} send window")
        for member in self._others():
            ack = self.ack_map.get(member, 0)
            assert ack <= sw.high, f"{self.local}: ack of {member} {ack} above highest sent {sw.high}"
            assert sw.low <= ack or member not in self.ack_map, f"{self.local}: purged past {member}'s ack {ack}"
        if self._waiting:
            assert self._full(), f"{self.local}: sends waiting while the window has room"
        for sender, win in self.recv.items():
            win.check_invariants(f"{self.local} recv window of {sender}")

    def windows(self) -> list[Window]:
        out: list[Window] = []
        for sender, w in sorted(self.recv.items()):
            out.append(
                Window(
                    peer=sender,
                    side="recv",
                    conn_id=None,
                    low=w.low,
                    high=w.high,
                    state="OPEN",
                    pending=w.size,
                    missing=w.high - w.low - w.size,
                )
            )
        for member in self._others():
            out.append(
                Window(
                    peer=member,
                    side="send",
                    conn_id=None,
                    low=min(self.ack_map.get(member, 0), self.seqno),
                    high=self.seqno,
                    state="BLOCKED" if self._waiting else "OPEN",
                    pending=self.seqno - self.send_window.low,
                )
            )
        return out

    def unacked(self, peer: str) -> int:
        """Own multicasts not acked by every member (MCAST_DEST) or by `peer`."""
        if peer == MCAST_DEST:
            return self.seqno - self.send_window.low + len(self._waiting)
        if peer in self.ack_map:
            return self.seqno - self.ack_map[peer]
        return 0

    def busy(self) -> list[str]:
        out = []
        if self._waiting:
            out.append(f"blocked: {len(self._waiting)} send(s) waiting for acks (low {self.send_window.low})")
        if self._held_back is not None:
            out.append("a numbered multicast not sent yet (mutant)")
        if self._joining:
            out.append(f"joining: no view yet, {len(self._held)} multicast(s) held")
        for sender, w in sorted(self.recv.items()):
            if w.high > w.low:
                out.append(f"gap from {sender}: delivered {w.low}, highest {w.high}")
        return out

    def snapshot(self) -> dict[str, Any]:
        return {
            "members": list(self.members),
            "view_id": self.view_id,
            "seqno": self.seqno,
            "capacity": self.config.capacity,
            "send_window": {"low": self.send_window.low, "high": self.seqno, "held": self.send_window.size},
            "ack_map": dict(sorted(self.ack_map.items())),
            "blocked": len(self._waiting),
            "blocked_s": self.blocked_s,
            "recv": {s: {"low": w.low, "high": w.high, "held": w.size} for s, w in sorted(self.recv.items())},
            "held": self.held(),
            "peak_held": self.peak_held,
            "peak_bytes": self.peak_bytes,
            "counters": dict(self.counters),
        }
