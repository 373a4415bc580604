"""NAKACK2: reliable multicast, FIFO per sender, with NAK retransmission and STABLE (the NAKACK2 design).

Theory of operation
-------------------
A multicast is a message to MCAST_DEST ("*"), meaning the sender's current view. The sender
numbers its multicasts 1, 2, 3... (one seqno space per sender, no connections), keeps each one in
its own table, delivers it to itself at once (JGroups' loopback) and sends one copy to every other
member (N unicasts: what JGroups' TCP transport does, and UDP without IP multicast).

Every member keeps a receive table per sender: `low` (purged up to, by STABLE), `delivered`
(highest delivered in order) and `highest` (highest seqno known to exist), with the messages
low+1..highest it has. A message is delivered when every lower one was; delivered messages stay in
the table until STABLE says everyone has them, because any member may be asked to resend them.
Invariant: low <= delivered <= highest, every kept seqno in low+1..delivered+max_recv_window_seqnos,
and every seqno low+1..delivered kept (so len(msgs) == delivered - low when none above is held).

Timers (fired in the order of TIMERS):
- xmit, every `xmit_interval` when it is > 0 (the retransmit task):
  - for each sender, an XMIT-REQ (NAK) for the gaps below `highest` that were gaps at the previous
    run too (a gap seen once is usually a message in flight), at most `max_xmit_req_size` seqnos,
    sent unicast to the original sender; a gap that persists is asked of another member every
    third run (any member that has a message answers, as XMIT_RSP naming the original sender);
  - the last-seqno-sender: when this member's own highest seqno did not move since the previous
    run it multicasts HIGHEST_SEQNO (at most `resend_last_seqno_max_times` times per seqno), so a
    receiver that lost the last message learns that it exists and asks for it;
- stable, every `stable_interval` (and at once after `stable_max_bytes` of multicast payload was
  received): this member multicasts its digest (highest delivered per sender). Each member keeps
  the latest digest of every member; per sender the minimum over the view is stable, and the
  messages up to it are purged. With retransmission on, a digest that shows a seqno above what this
  member knows raises `highest`, so the next xmit run asks for it (STABLE's retransmission).

`xmit_interval <= 0` (the NAKACK2 design, meant for TCP): no retransmit task, STABLE raises nothing, no
last-seqno-sender, and the become_server_queue is unbounded: the table only orders messages. A gap
then never closes, which is why nothing below this layer may drop a message in that mode (the node
refuses UDP and in-process drops with it, unless `allow_unsafe`). `xmit_interval` may change at run
time (SetConfig): the task starts or stops and the queue becomes bounded or unbounded.

become_server_queue: a joiner (a node whose first view carries a join digest) starts its tables at
the digest's seqnos and queues the multicasts that arrive before BecomeServer; bounded to
`become_server_queue_size` with the oldest dropped first (JGroups' BoundedList) while retransmission
is on, unbounded otherwise. BecomeServer replays the queue in arrival order. With static membership
every member is a server from the start.

Unicasts (any other dest) pass through untouched; this layer sits below UNICAST3, which carries
them. Messages from a sender outside the installed view are dropped and counted.

Planted bugs (config `mutation`, config.MUTATIONS; `splitbrain mutants --protocol nakack2`) sit on
control-message paths as `_mutant("<name>")` branches (STABLE, XMIT-REQ, a duplicate XMIT_RSP, the
digest, the retransmit run), so the per-message path never asks for one; `deliver_in_arrival_order`
and `skip_range`, which are on that path, are methods swapped for _deliver when the layer is built.

One module, one state machine: the send path, the receive path, STABLE and digests, XMIT-REQ
serving and the retransmit run all read and write the same per-sender tables, and the per-message
path builds its events inline for the simulator's speed; a split along those paths would spread one
table's invariants over several files without removing any shared state.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from itertools import takewhile
from typing import Any

from ..events import DataEvents
from ..layer import (
    Action,
    BecomeServer,
    Bootstrap,
    Command,
    CountingLayer,
    Digest,
    Down,
    DownBatch,
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
from .config import DIGEST_INFLATION, SKIPPED_SEQNOS, Nakack2Config
from .header import MAX_DIGEST_ENTRIES, MAX_XMIT_RANGES, PROTO_ID, MsgType, N2Header
from .header import encode as encode_header

PROTO = "nakack2"
TIMERS = ("xmit", "stable")
# Counter names per message type, built once: an Enum's .name is a property, slow on a hot path.
_RX_COUNTER = {t: f"rx_{t.name}" for t in MsgType}
# The members read per message, as globals: in CPython 3.11 an Enum member read as a class
# attribute costs about ten times a global's read.
_MSG = MsgType.MSG
_XMIT_RSP = MsgType.XMIT_RSP
_NAK_XMIT_REQ = MsgType.NAK_XMIT_REQ
_HIGHEST_SEQNO = MsgType.HIGHEST_SEQNO
# A persisting gap is asked of a member other than the original sender every this many runs.
ASK_OTHER_EVERY = 3


class RecvTable:
    """One sender's messages at one member (JGroups' Table): see the module docstring."""

    __slots__ = (
        "sender",
        "low",
        "delivered",
        "highest",
        "msgs",
        "prev_missing",
        "asks",
        "checked_low",
        "checked_top",
        "checked_held",
        "checked_last",
    )

    def __init__(self, sender: str, start: int = 0) -> None:
        self.sender = sender
        self.low = start
        self.delivered = start
        self.highest = start
        self.msgs: dict[int, Message] = {}
        self.prev_missing = RangeSet()
        self.asks = 0
        # Nakack2.check_invariants' memo of its last pass over this table: low, the window's top
        # (delivered + limit), how many seqnos were held and the last one (None: none, or never
        # checked, with checked_held -1).
        self.checked_low = 0
        self.checked_top = 0
        self.checked_held = -1
        self.checked_last: int | None = None

    def missing(self) -> RangeSet:
        gaps = RangeSet()
        if self.highest <= self.delivered:
            return gaps
        prev = self.delivered
        for seqno in sorted(filter(prev.__lt__, self.msgs)):  # filter: no bytecode per seqno
            if seqno > prev + 1:
                gaps.add(prev + 1, seqno - 1)
            prev = seqno
        if self.highest > prev:
            gaps.add(prev + 1, self.highest)
        return gaps


class Nakack2(FiredTimers, CountingLayer):
    proto = PROTO

    def __init__(self, local: str, config: Nakack2Config, rng: Rng) -> None:
        self.local = local
        self.config = config
        self._rng = rng
        self.members: tuple[str, ...] = ()
        self._members_list: list[str] = [local]
        self.view_id = 0
        self.seqno = 0
        self.tables: dict[str, RecvTable] = {local: RecvTable(local)}
        # member -> its latest digest (sender -> highest delivered); our own is read live.
        self.digests: dict[str, dict[str, int]] = {}
        self.is_server = True
        self.queue: deque[Message] = deque()
        # Multicasts the application sent while joining: numbered and sent at BecomeServer, in the
        # first view (JGroups: a channel sends only once connect() returned).
        self.held: list[Message] = []
        self.timers = Deadlines(*TIMERS)
        self.counters: dict[str, int] = {}
        self._armed = False
        self._bytes_since_stable = 0
        self._last_seqno_seen = 0
        self._last_seqno_resends = 0
        # The Up returned last for in-order deliveries, its table and the next seqno (_deliver).
        self._run: tuple[Up, RecvTable, int] | None = None
        # A planted bug is fixed when the layer is built (a run-time change of it is ignored).
        self._mutation = config.mutation
        if self._mutation == "deliver_in_arrival_order":
            # Swapped, not tested in _deliver: the correct layer pays nothing per delivery for it.
            self._deliver = self._deliver_in_arrival_order  # type: ignore[method-assign]
        elif self._mutation == "skip_range":
            # Every delivery goes through the swapped _deliver (no run taken at once).
            self._deliver = self._deliver_skipping_range  # type: ignore[method-assign]
            self._take_run = self._take_no_run  # type: ignore[method-assign]

    # ---- helpers ------------------------------------------------------------------------------

    def _mutant(self, name: str) -> bool:
        """True when this planted bug (config.MUTATIONS) is switched on; never asked per message."""
        return self._mutation == name

    def _others(self) -> list[str]:
        return [m for m in self.members if m != self.local]

    def _arm(self, now: float) -> None:
        if self._armed:
            return
        self._armed = True
        self.timers.set("stable", now + self.config.stable_interval)
        if self.config.retransmission:
            self.timers.set("xmit", now + self.config.xmit_interval)

    def _mcast_ctrl(self, kind: str, hdr: N2Header, now: float, **fields: Any) -> list[Action]:
        """A control multicast (HIGHEST_SEQNO, STABLE) to every other member, one event."""
        size = len(encode_header(hdr))
        self._count(f"tx_{hdr.type.name}")
        out: list[Action] = [self._log(now, kind, members=list(self.members), bytes=size, **fields)]
        for member in self._others():
            out.append(Down(msg=Message(self.local, member, b"", {PROTO_ID: hdr})))
        return out

    def _own_events(self, now: float, first: int, msgs: list[Message]) -> DataEvents:
        """The send event (with `members`) and the loopback deliver of each of our multicasts
        first, first + 1, ...: one record (node/events.py), two events per message."""
        # One list per view, shared by the send events of that view (nothing mutates it).
        return DataEvents(now, self.local, PROTO, "send", None, None, first, msgs, self._members_list)

    # ---- sending ------------------------------------------------------------------------------

    def down(self, msg: Message, now: float) -> list[Action]:
        if msg.dest != MCAST_DEST:
            return [Down(msg=msg)]
        if not self.is_server:
            # Joining: the multicast has no view to go to yet, and a seqno spent now would be a
            # gap at every member whose table for us starts later.
            self.held.append(msg)
            return []
        if not self._armed:
            self._arm(now)
        seqno = self.seqno = self.seqno + 1
        headers = msg.headers
        # A message handed down belongs to the stack (node/stack.py), so the header goes in place.
        headers[PROTO_ID] = N2Header(_MSG, seqno)
        local = self.local
        own = self.tables[local]
        own.msgs[seqno] = msg
        own.highest = own.delivered = seqno
        counters = self.counters
        counters["tx_MSG"] = counters.get("tx_MSG", 0) + 1
        payload = msg.payload
        # Loopback: the sender delivers its own multicast at once, as JGroups does.
        loopback = Up(msgs=[Message(local, MCAST_DEST, payload, headers)], multicasts=True)
        if self.data_events:
            # _own_events, inline: one call fewer per multicast sent.
            record = DataEvents(now, local, PROTO, "send", None, None, seqno, [msg], self._members_list)
            out: list[Action] = [Log(event=record), loopback]
        else:
            out = [loopback]
        for member in self.members:
            if member != local:
                out.append(Down(msg=Message(local, member, payload, headers)))
        return out

    def down_batch(self, msgs: list[Message], now: float) -> list[Action]:
        """down() for each message, with the same events, deliveries and frames in the same order:
        a batch of multicasts is numbered in one loop, its loopback deliveries go up as one Up and
        its copies down as one DownBatch (nothing routes them in between)."""
        if not self.is_server or any(msg.dest != MCAST_DEST for msg in msgs):
            return super().down_batch(msgs, now)
        self._arm(now)
        local = self.local
        others = self._others()
        own = self.tables[local]
        held = own.msgs
        out: list[Action] = []
        if self.data_events and msgs:
            out.append(Log(event=self._own_events(now, self.seqno + 1, msgs)))
        loopback: list[Message] = []
        copies: list[Message] = []
        seqno = self.seqno
        for msg in msgs:
            seqno += 1
            headers = msg.headers
            headers[PROTO_ID] = N2Header(_MSG, seqno)
            held[seqno] = msg
            payload = msg.payload
            loopback.append(Message(local, MCAST_DEST, payload, headers))
            for member in others:
                copies.append(Message(local, member, payload, headers))
        self.seqno = own.highest = own.delivered = seqno
        self.counters["tx_MSG"] = self.counters.get("tx_MSG", 0) + len(msgs)
        if loopback:
            out.append(Up(msgs=loopback, multicasts=True))
        if copies:
            out.append(DownBatch(msgs=copies))
        return out

    # ---- receiving ----------------------------------------------------------------------------

    def up(self, msgs: list[Message], now: float) -> list[Action]:
        out: list[Action] = []
        passed: list[Message] = []
        tables = self.tables
        counters = self.counters
        local = self.local
        members = self.members
        limit = self.config.max_recv_window_seqnos
        n = len(msgs)
        start = 0
        # A run of a sender's next MSGs is taken at once (_take_run): at the start of the batch,
        # and again after each control message (a sender's STABLE comes between its multicasts).
        while start < n:
            # _take_run's first test, inline: under loss a sender's table often holds messages
            # above a gap.
            first = tables.get(msgs[start].src)
            if first is not None and len(first.msgs) == first.delivered - first.low:
                start = self._take_run(msgs, start, now, out)
            rest, start = start, n
            for i in range(rest, n):
                msg = msgs[i]
                hdr = msg.headers.get(PROTO_ID)
                if hdr is None:
                    passed.append(msg)  # a unicast for the layers above (UNICAST3)
                    continue
                if not self._armed:
                    self._arm(now)
                t = hdr.type
                if t is _MSG:
                    counters["rx_MSG"] = counters.get("rx_MSG", 0) + 1
                    sender = msg.src
                    seqno = hdr.seqno
                    table = tables.get(sender)
                    # _receive's common case, inline: a new MSG of a sender in the view, inside the
                    # window, from a server; anything else takes _receive's checks from the start.
                    if (
                        table is None
                        or not self.is_server
                        or sender == local
                        or (members and sender not in members)
                        or len(msg.headers) != 1
                    ):
                        self._receive(sender, seqno, msg, now, out)
                        continue
                    delivered = table.delivered
                    held = table.msgs
                    if not 0 <= delivered < seqno <= delivered + limit or seqno in held:
                        self._receive(sender, seqno, msg, now, out)
                        continue
                    self._bytes_since_stable += len(msg.payload)
                    if seqno > table.highest:
                        table.highest = seqno
                    msg.dest = MCAST_DEST
                    held[seqno] = msg
                    # Only the next seqno can make anything deliverable: _deliver leaves no
                    # delivered + 1 in the table.
                    if seqno == delivered + 1:
                        self._deliver(table, now, out)
                    continue
                self._count(_RX_COUNTER[t])
                if t is _XMIT_RSP:
                    self._receive(hdr.orig, hdr.seqno, msg, now, out)
                elif t is _NAK_XMIT_REQ:
                    self._on_xmit_req(msg.src, hdr, now, out)
                elif t is _HIGHEST_SEQNO:
                    self._on_highest(msg.src, hdr.seqno, now, out)
                else:
                    self._on_stable(msg.src, hdr, now, out)
                if i + 1 < n:
                    start = i + 1
                    break
        if passed:
            out.append(Up(msgs=passed))
        if self._bytes_since_stable >= self.config.stable_max_bytes:
            self._stable_round(now, out)
        return out

    def _take_run(self, msgs: list[Message], start: int, now: float, out: list[Action]) -> int:
        """Deliver the run of `msgs` from `start` that are the next MSGs of their sender in order,
        as _receive and _deliver would one by one (the same table, counters, record and Up, or
        the Up returned last joined as _deliver joins it), and return the index after the run.
        Nearly every batch is one: frames of a sender's next multicasts.
        It takes none unless the table holds nothing above `delivered` (its `highest` may be above:
        a STABLE digest raises it), so nothing else becomes deliverable, and the checks of
        _receive pass for the whole run."""
        if not self.is_server or not self._armed:
            return start
        sender = msgs[start].src
        table = self.tables.get(sender)
        if table is None or len(table.msgs) != table.delivered - table.low or sender == self.local:
            return start
        if self.members and sender not in self.members:
            return start
        first = nxt = table.delivered + 1
        held = table.msgs
        delivered: list[Message] = []
        size = 0
        for msg in msgs[start:] if start else msgs:
            headers = msg.headers
            hdr = headers.get(PROTO_ID)
            if hdr is None or hdr.type is not _MSG or hdr.seqno != nxt or msg.src != sender or len(headers) != 1:
                break
            msg.dest = MCAST_DEST
            held[nxt] = msg
            delivered.append(msg)
            size += len(msg.payload)
            nxt += 1
        taken = len(delivered)
        if not taken:
            return start
        table.delivered = nxt - 1
        if nxt - 1 > table.highest:
            table.highest = nxt - 1
        self._count("rx_MSG", taken)
        self._bytes_since_stable += size
        run = self._run
        if run is not None and out and out[-1] is run[0] and run[1] is table and run[2] == first:
            up = run[0]  # goes on from the Up returned last: _deliver's join (its record shares the list)
            up.msgs.extend(delivered)
        else:
            if self.data_events:
                out.append(Log(event=DataEvents(now, self.local, PROTO, "deliver", sender, None, first, delivered)))
            up = Up(msgs=delivered, multicasts=True)
            out.append(up)
        self._run = (up, table, nxt)
        return start + taken

    def _receive(self, sender: str, seqno: int, msg: Message, now: float, out: list[Action]) -> None:
        if not self.is_server:
            self._enqueue(msg, now, out)
            return
        if sender == self.local or (self.members and sender not in self.members) or seqno < 1:
            why = "own multicast" if sender == self.local else "seqno 0" if seqno < 1 else "sender not in view"
            out.append(self._log(now, "drop", peer=sender, seqno=seqno, type="MSG", reason=why))
            return
        table = self.tables.get(sender)
        if table is None:
            table = self.tables[sender] = RecvTable(sender)
        self._bytes_since_stable += len(msg.payload)
        if seqno <= table.delivered or seqno in table.msgs:
            if (
                self._mutant("xmit_rsp_delivered_again")
                and seqno <= table.delivered
                and msg.headers[PROTO_ID].type is _XMIT_RSP
            ):
                self._redeliver(sender, seqno, msg, now, out)
                return
            self._count("rx_duplicate")
            out.append(self._log(now, "drop", peer=sender, seqno=seqno, type="MSG", reason="duplicate"))
            return
        if seqno > table.highest:
            table.highest = seqno
        if seqno - table.delivered > self.config.max_recv_window_seqnos:
            out.append(self._log(now, "drop", peer=sender, seqno=seqno, type="MSG", reason="beyond the receive window"))
            return
        # Kept as the original sender's MSG, so that this member can answer an XMIT-REQ for it (a
        # MSG as received is that already: only its dest changes, to say "multicast" upwards).
        if msg.src == sender and len(msg.headers) == 1:
            msg.dest = MCAST_DEST
            table.msgs[seqno] = msg
        else:
            table.msgs[seqno] = Message(sender, MCAST_DEST, msg.payload, {PROTO_ID: N2Header(_MSG, seqno)})
        self._deliver(table, now, out)

    def _deliver(self, table: RecvTable, now: float, out: list[Action]) -> None:
        held = table.msgs
        nxt = table.delivered + 1
        if nxt not in held:
            return
        first = nxt
        run = self._run
        # A run that goes on from the Up returned last (nothing logged since) joins it and its
        # deliver record: a batch of in-order multicasts goes up as one Up with one record. The
        # two share one list (no layer changes a list it is handed: they read it, or copy it).
        joined = run is not None and bool(out) and out[-1] is run[0] and run[1] is table and run[2] == nxt
        delivered: list[Message] = run[0].msgs if joined and run is not None else []
        while nxt in held:
            delivered.append(held[nxt])
            nxt += 1
        table.delivered = nxt - 1
        if joined and run is not None:
            up = run[0]
        else:
            if self.data_events:
                out.append(
                    Log(event=DataEvents(now, self.local, PROTO, "deliver", table.sender, None, first, delivered))
                )
            up = Up(msgs=delivered, multicasts=True)
            out.append(up)
        self._run = (up, table, nxt)

    def _deliver_in_arrival_order(self, table: RecvTable, now: float, out: list[Action]) -> None:
        """The planted bug deliver_in_arrival_order, in _deliver's place: the run a gap held back
        goes up in the order its messages arrived (the table's insertion order), the message that
        filled the gap last."""
        held = table.msgs
        first = nxt = table.delivered + 1
        while nxt in held:
            nxt += 1
        if nxt == first:
            return
        table.delivered = nxt - 1
        delivered = [m for s, m in held.items() if first <= s < nxt]
        if self.data_events:
            # The record numbers its messages from `first` on: each carries its own seqno instead.
            for msg in delivered:
                seqno = msg.headers[PROTO_ID].seqno
                out.append(Log(event=DataEvents(now, self.local, PROTO, "deliver", table.sender, None, seqno, [msg])))
        out.append(Up(msgs=delivered, multicasts=True))
        self._run = None

    def _take_no_run(self, msgs: list[Message], start: int, now: float, out: list[Action]) -> int:
        """The planted bug skip_range's _take_run: none, so that _deliver sees every message."""
        return start

    def _deliver_skipping_range(self, table: RecvTable, now: float, out: list[Action]) -> None:
        """The planted bug skip_range, in _deliver's place: the run from delivered + 1 goes up without
        the seqnos of SKIPPED_SEQNOS, which the window (and the STABLE digest) counts as delivered."""
        held = table.msgs
        first = nxt = table.delivered + 1
        while nxt in held:
            nxt += 1
        if nxt == first:
            return
        table.delivered = nxt - 1
        delivered = [held[s] for s in range(first, nxt) if s not in SKIPPED_SEQNOS]
        if self.data_events:
            for msg in delivered:
                seqno = msg.headers[PROTO_ID].seqno
                out.append(Log(event=DataEvents(now, self.local, PROTO, "deliver", table.sender, None, seqno, [msg])))
        if delivered:
            out.append(Up(msgs=delivered, multicasts=True))
        self._run = None

    def _resend_every_held(self, now: float, out: list[Action]) -> None:
        """The planted bug unsolicited_resend: every held own multicast to every other member, unasked."""
        own = self.tables[self.local]
        for member in self._others():
            for seqno, stored in sorted(own.msgs.items()):
                self._count("retransmit")
                self._send_again(member, seqno, self.local, stored, "unsolicited", now, out)

    def _redeliver(self, sender: str, seqno: int, msg: Message, now: float, out: list[Action]) -> None:
        """The planted bug xmit_rsp_delivered_again: a retransmission of a delivered message goes up again."""
        again = Message(sender, MCAST_DEST, msg.payload, {PROTO_ID: N2Header(_MSG, seqno)})
        if self.data_events:
            out.append(Log(event=DataEvents(now, self.local, PROTO, "deliver", sender, None, seqno, [again])))
        out.append(Up(msgs=[again], multicasts=True))
        self._run = None

    def _enqueue(self, msg: Message, now: float, out: list[Action]) -> None:
        if self.config.queue_bounded and len(self.queue) >= self.config.become_server_queue_size:
            old = self.queue.popleft()
            hdr = old.headers[PROTO_ID]
            origin = hdr.orig or old.src
            self._count("become_server_queue_dropped")
            out.append(
                self._log(
                    now,
                    "drop",
                    peer=origin,
                    seqno=hdr.seqno,
                    type=hdr.type.name,
                    reason="become_server_queue full: oldest dropped",
                )
            )
        self.queue.append(msg)

    def _become_server(self, now: float) -> list[Action]:
        out: list[Action] = [
            self._log(
                now,
                "become_server",
                count=len(self.queue),
                detail=f"{len(self.held)} held send(s)" if self.held else None,
            )
        ]
        self.is_server = True
        queued, self.queue = list(self.queue), deque()
        for msg in queued:
            hdr = msg.headers[PROTO_ID]
            self._receive(hdr.orig if hdr.type is _XMIT_RSP else msg.src, hdr.seqno, msg, now, out)
        held, self.held = self.held, []
        for msg in held:
            out.extend(self.down(msg, now))
        return out

    # ---- retransmission -----------------------------------------------------------------------

    def _on_xmit_req(self, src: str, hdr: N2Header, now: float, out: list[Action]) -> None:
        asked = sum(hi - lo + 1 for lo, hi in hdr.ranges)
        out.append(
            self._log(
                now,
                "xmit_req_rx",
                peer=src,
                origin=hdr.orig,
                ranges=[list(r) for r in hdr.ranges],
                count=asked,
            )
        )
        table = self.tables.get(hdr.orig)
        if table is None:
            out.append(self._log(now, "drop", peer=src, type="NAK_XMIT_REQ", reason=f"no table for {hdr.orig}"))
            return
        budget = self.config.max_xmit_req_size
        missing = 0
        for lo, hi in hdr.ranges:
            # Only what this member still holds: a peer may ask for anything (0..2^64-1).
            top = min(hi, table.highest, lo + budget - 1)
            if self._mutant("xmit_req_off_by_one"):
                top = min(hi - 1, table.highest, lo + budget - 1)  # [lo, hi) instead of [lo, hi]
            for seqno in range(max(lo, table.low + 1), top + 1):
                stored = table.msgs.get(seqno)
                if stored is None:
                    missing += 1
                    continue
                self._count("retransmit")
                self._send_again(src, seqno, hdr.orig, stored, "xmit_req", now, out)
            budget -= hi - lo + 1
            if budget <= 0:
                break
        if missing:
            self._count("xmit_req_unanswered", missing)

    def _send_again(
        self, peer: str, seqno: int, orig: str, stored: Message, reason: str, now: float, out: list[Action]
    ) -> None:
        """A held multicast of `orig` sent to one peer as an XMIT_RSP, with its retransmit event."""
        out.append(
            self._log(now, "retransmit", peer=peer, seqno=seqno, origin=orig, bytes=len(stored.payload), reason=reason)
        )
        rsp = N2Header(_XMIT_RSP, seqno, orig=orig)
        out.append(Down(msg=Message(self.local, peer, stored.payload, {PROTO_ID: rsp})))

    def _on_highest(self, src: str, seqno: int, now: float, out: list[Action]) -> None:
        out.append(self._log(now, "highest_seqno_rx", peer=src, seqno=seqno))
        if not self.config.retransmission or not self.is_server:
            return
        if self.members and src not in self.members:
            return
        table = self.tables.get(src)
        if table is None:
            table = self.tables[src] = RecvTable(src)
        if seqno > table.highest:
            table.highest = seqno

    def _xmit(self, now: float, out: list[Action]) -> None:
        """The retransmit task: XMIT-REQs for old gaps, then the last-seqno-sender."""
        cfg = self.config
        others = self._others()
        if self._mutant("unsolicited_resend"):
            self._resend_every_held(now, out)
        for sender, table in self.tables.items():
            if sender == self.local:
                continue
            missing = table.missing()
            ask = missing.intersection(table.prev_missing)
            table.prev_missing = missing
            if not ask:
                table.asks = 0
                continue
            ask = ask.truncated(cfg.max_xmit_req_size, MAX_XMIT_RANGES)
            table.asks += 1
            helpers = [m for m in others if m != sender]
            target = sender
            if helpers and (table.asks % ASK_OTHER_EVERY == 0 or (self.members and sender not in self.members)):
                target = helpers[(table.asks // ASK_OTHER_EVERY) % len(helpers)]
            ranges = ask.ranges()
            hdr = N2Header(_NAK_XMIT_REQ, orig=sender, ranges=ranges)
            self._count("tx_NAK_XMIT_REQ")
            out.append(
                self._log(
                    now,
                    "xmit_req_tx",
                    peer=target,
                    origin=sender,
                    ranges=[list(r) for r in ranges],
                    count=sum(hi - lo + 1 for lo, hi in ranges),
                    bytes=len(encode_header(hdr)),
                )
            )
            out.append(Down(msg=Message(self.local, target, b"", {PROTO_ID: hdr})))
        if self.seqno:
            if self.seqno != self._last_seqno_seen:
                self._last_seqno_seen = self.seqno
                self._last_seqno_resends = 0
            elif self._last_seqno_resends < cfg.resend_last_seqno_max_times and others:
                self._last_seqno_resends += 1
                hdr = N2Header(_HIGHEST_SEQNO, self.seqno)
                out.extend(self._mcast_ctrl("highest_seqno_tx", hdr, now, seqno=self.seqno))

    # ---- STABLE -------------------------------------------------------------------------------

    def _digest(self) -> dict[str, int]:
        if self._mutant("digest_reports_highest"):
            return {sender: table.highest for sender, table in self.tables.items()}
        return {sender: table.delivered for sender, table in self.tables.items()}

    def answer(self, query: Query) -> Digest | None:
        """GetDigest (a join or a merge): the highest seqno known per sender, ours the last sent.
        A joiner starts its table for each sender there: what it did not get so far was sent to
        views without it."""
        if isinstance(query, GetDigest):
            extra = DIGEST_INFLATION if self._mutant("inflated_digest") else 0
            return tuple(
                sorted((s, (self.seqno if s == self.local else t.highest) + extra) for s, t in self.tables.items())
            )
        return None

    def _stable_round(self, now: float, out: list[Action]) -> None:
        self._bytes_since_stable = 0
        self.timers.set("stable", now + self.config.stable_interval)
        digest = self._digest()
        self.digests[self.local] = digest
        items = tuple(sorted(digest.items()))[:MAX_DIGEST_ENTRIES]
        hdr = N2Header(MsgType.STABLE, digest=items)
        out.extend(self._mcast_ctrl("stable_tx", hdr, now, digest=[f"{s}:{n}" for s, n in items]))
        self._purge(now, out)

    def _on_stable(self, src: str, hdr: N2Header, now: float, out: list[Action]) -> None:
        out.append(self._log(now, "stable_rx", peer=src, digest=[f"{s}:{n}" for s, n in hdr.digest]))
        if not self.members or src not in self.members:
            # A joiner (no view yet) takes no digest: it was gossiped in a view without it, and its
            # own entry may count an earlier incarnation's multicasts (purging the new ones).
            return
        known = self.digests.setdefault(src, {})
        for sender, seqno in hdr.digest:
            if seqno > known.get(sender, 0):
                known[sender] = seqno
            # STABLE triggers retransmission only when retransmission is on (the NAKACK2 design).
            if self.config.retransmission and self.is_server and sender != self.local:
                table = self.tables.get(sender)
                if table is not None and seqno > table.highest and not self._mutant("stable_ignores_highest"):
                    table.highest = seqno
        self._purge(now, out)

    def _purge(self, now: float, out: list[Action]) -> None:
        """Remove from each table what every member of the view has delivered."""
        if not self.members:
            return
        self.digests[self.local] = self._digest()
        pick = max if self._mutant("stable_purges_above_min") else min  # the view's lowest, unmutated
        for sender, table in self.tables.items():
            stable = pick(self.digests.get(m, {}).get(sender, 0) for m in self.members)
            stable = min(stable, table.delivered)
            if stable > table.low:
                for seqno in range(table.low + 1, stable + 1):
                    table.msgs.pop(seqno, None)
                self._count("purged", stable - table.low)
                table.low = stable

    # ---- commands -----------------------------------------------------------------------------

    def command(self, cmd: Command, now: float) -> list[Action]:
        if isinstance(cmd, ViewChange):
            return self._on_view(cmd, now)
        if isinstance(cmd, BecomeServer):
            return self._become_server(now) if not self.is_server else []
        if isinstance(cmd, Bootstrap):
            if not self.members:
                # A node that joins through a membership protocol is a client until its join
                # is complete: it queues what arrives and holds what it sends (BecomeServer).
                self.is_server = False
            return []
        if isinstance(cmd, SetConfig):
            return self._set_config(cmd.values, now)
        return []

    def _on_view(self, view: ViewChange, now: float) -> list[Action]:
        self._arm(now)
        first = not self.members
        before = set(self.members)
        self.members = tuple(view.members)
        self._members_list = list(self.members) or [self.local]
        self.view_id = view.view_id
        out: list[Action] = [self._log(now, "view", members=list(view.members), view_id=view.view_id)]
        # The tables of senders that left go (JGroups: retainAll on the view): a sender that comes
        # back, restarted or merged, starts from the digest of the view that brings it back.
        for sender in [s for s in self.tables if s != self.local and s not in self.members]:
            del self.tables[sender]
        if view.digest:
            if first and self.local in view.members:
                # A joiner: its tables start at the join digest, and it queues until BecomeServer.
                self.is_server = False
            for sender, seqno in view.digest:
                if sender == self.local or sender not in self.members:
                    continue
                table = self.tables.get(sender)
                if table is None:
                    self.tables[sender] = RecvTable(sender, seqno)
                elif view.reason == "merge" and seqno > table.delivered:
                    # A merge: what the sender multicast up to the digest went to a view without
                    # this member; waiting for it would stop this table for good (JGRP-1141).
                    self._skip_to(table, seqno, now, out)
            # A joiner's table for a sender the digest does not name starts at 0.
            mine = dict(view.digest).get(self.local, 0)
            if not first and mine < self.seqno:
                self._catch_up(mine, [m for m in self.members if m != self.local and m not in before], now, out)
        # Digests of members that left no longer hold back purging.
        for member in [m for m in self.digests if m not in self.members]:
            del self.digests[member]
        return out

    def _skip_to(self, table: RecvTable, seqno: int, now: float, out: list[Action]) -> None:
        """Start `table` over after `seqno`, keeping what it holds above it."""
        out.append(
            self._log(now, "drop", peer=table.sender, seqno=seqno, type="MSG", reason="skipped by the merge digest")
        )
        fresh = RecvTable(table.sender, seqno)
        fresh.msgs = {s: m for s, m in table.msgs.items() if s > seqno}
        fresh.highest = max(seqno, table.highest)
        self.tables[table.sender] = fresh
        self._deliver(fresh, now, out)

    def _catch_up(self, start: int, joiners: list[str], now: float, out: list[Action]) -> None:
        """Our multicasts above the digest's entry for us and up to our view with the joiners went
        to the old view only (the coordinator took the digest before this member installed the
        view): send them to each joiner now, as retransmissions, or its table would wait forever
        for them (for good without retransmission)."""
        own = self.tables[self.local]
        for joiner in joiners:
            for seqno in range(max(start, own.low) + 1, self.seqno + 1):
                stored = own.msgs.get(seqno)
                if stored is None:
                    continue
                self._count("catch_up")
                self._send_again(joiner, seqno, self.local, stored, "catch_up", now, out)

    def _set_config(self, values: dict[str, Any], now: float) -> list[Action]:
        mine = {k: v for k, v in values.items() if k in Nakack2Config.own_keys() and k != "mutation"}
        if not mine:
            return []
        was = self.config.retransmission
        self.config = self.config.updated(mine)
        out: list[Action] = [
            self._log(now, "config_change", detail=", ".join(f"{k}={v}" for k, v in sorted(mine.items())))
        ]
        if self.config.retransmission:
            self.timers.set("xmit", now + self.config.xmit_interval)
            if not was:
                # Gaps from the time without retransmission count as old gaps at once.
                for table in self.tables.values():
                    table.prev_missing = table.missing()
        else:
            self.timers.set("xmit", None)
        self.timers.set("stable", now + self.config.stable_interval)
        return out

    # ---- timers -------------------------------------------------------------------------------

    def _fire_xmit(self, now: float, out: list[Action]) -> None:
        if self.config.retransmission:
            self._xmit(now, out)
            self.timers.set("xmit", now + self.config.xmit_interval)
        else:
            self.timers.set("xmit", None)

    def _fire_stable(self, now: float, out: list[Action]) -> None:
        self._stable_round(now, out)

    _FIRE = {"xmit": _fire_xmit, "stable": _fire_stable}

    # ---- views of the state -------------------------------------------------------------------

    def retransmit_table_size(self) -> int:
        """Messages held in all tables (delivered and waiting for STABLE, or waiting for a gap)."""
        return sum(len(t.msgs) for t in self.tables.values()) + len(self.queue)

    def check_invariants(self) -> None:
        # The simulator calls this after every input, and a table holds everything since the last
        # STABLE: only the seqnos added since the table's last check are checked (its memo, in
        # RecvTable). That is exact while low stays and the window's top does not fall: the older
        # seqnos were in the window then and still are, and a dict keeps insertion order, so the
        # new ones are those after the last seqno checked (a removal moves nothing; when that
        # seqno itself is gone, or low moved, every seqno is checked again). Most inputs add to
        # one table at most: one whose size and last seqno did not move holds no new seqno (only
        # purging removes, and it moves low), and its memo stays, older but still exact.
        # An empty table is never walked: a dict emptied by purging keeps its deleted slots until
        # it grows again, and reversed() or a loop over it would step through every one of them.
        limit = self.config.max_recv_window_seqnos
        for t in self.tables.values():
            low = t.low
            delivered = t.delivered
            assert low <= delivered <= t.highest, f"{t.sender}: low {low} delivered {delivered} high {t.highest}"
            msgs = t.msgs
            held = len(msgs)
            # The seqnos low+1..delivered are all kept, the others inside the window (below).
            assert held >= delivered - low, f"{t.sender}: {held} kept, {delivered - low} delivered since low {low}"
            top = delivered + limit
            if t.checked_low == low and t.checked_top <= top:
                last = t.checked_last
                if t.checked_held == held and (not held or next(reversed(msgs)) == last):
                    continue
                todo: Iterable[int] = msgs
                if last is not None and last in msgs:
                    todo = takewhile(last.__ne__, reversed(msgs))
            else:
                todo = msgs
            if held:
                for seqno in todo:
                    assert low < seqno <= top, f"{t.sender}: seqno {seqno} kept outside the window"
                t.checked_last = next(reversed(msgs))
            else:
                t.checked_last = None
            t.checked_low = low
            t.checked_top = top
            t.checked_held = held
        # An empty queue is within any bound (the size is >= 1): the bound's properties are read
        # only when something is queued.
        if self.queue and self.config.queue_bounded:
            assert len(self.queue) <= self.config.become_server_queue_size, "become_server_queue over its bound"

    def windows(self) -> list[Window]:
        """A recv window per sender (delivered / highest); a send window per other member whose
        `low` is what that member's latest STABLE digest says it delivered of ours."""
        out: list[Window] = []
        for sender, t in sorted(self.tables.items()):
            if sender == self.local:
                continue
            pending = sum(1 for s in t.msgs if s > t.delivered)
            missing = t.highest - t.delivered - pending
            out.append(
                Window(
                    peer=sender,
                    side="recv",
                    conn_id=None,
                    low=t.delivered,
                    high=t.highest,
                    state="OPEN",
                    pending=pending,
                    missing=missing,
                )
            )
        for member in self._others():
            acked = self.digests.get(member, {}).get(self.local, 0)
            out.append(
                Window(
                    peer=member,
                    side="send",
                    conn_id=None,
                    low=min(acked, self.seqno),
                    high=self.seqno,
                    state="OPEN",
                    pending=self.seqno - self.tables[self.local].low,
                )
            )
        return out

    def unacked(self, peer: str) -> int:
        """Own multicasts not yet known to be delivered: at `peer` per its latest STABLE digest,
        or (for MCAST_DEST) anywhere, i.e. not yet purged (the runtime's back-pressure)."""
        if peer == MCAST_DEST:
            return self.seqno - self.tables[self.local].low
        digest = self.digests.get(peer)
        return 0 if digest is None else self.seqno - min(self.seqno, digest.get(self.local, 0))

    def busy(self) -> list[str]:
        out = []
        if not self.is_server:
            out.append(f"joining: {len(self.queue)} multicast(s) queued until BecomeServer")
        for sender, t in sorted(self.tables.items()):
            if t.highest > t.delivered:
                out.append(f"gap from {sender}: delivered {t.delivered}, highest {t.highest}")
        return out

    def snapshot(self) -> dict[str, Any]:
        return {
            "members": list(self.members),
            "view_id": self.view_id,
            "seqno": self.seqno,
            "is_server": self.is_server,
            "become_server_queue": len(self.queue),
            "retransmit_table": self.retransmit_table_size(),
            "tables": {
                s: {"low": t.low, "delivered": t.delivered, "highest": t.highest, "held": len(t.msgs)}
                for s, t in sorted(self.tables.items())
            },
            "xmit_interval": self.config.xmit_interval,
            "counters": dict(self.counters),
        }
