"""UNICAST3: reliable, FIFO, exactly-once unicast per connection (the UNICAST3 design) with SYNC (the SYNC design).

Theory of operation
-------------------
Sender A numbers its messages to B 1, 2, 3... under a connection id (conn-id) and keeps every
message until B acks it. B delivers in seqno order and sends cumulative ACKs: at the end of a
message or batch, at once when a batch has `ack_threshold` messages, otherwise no sooner than
`ack_min_interval` after its previous ACK (acks in between merge into the next one, never lost).
A removes messages up to the acked seqno (HA = highest acked, HS = highest sent). B holds a
message that came early only if it is at most `max_recv_window_seqnos` above the last delivered,
and A serves an XMIT-REQ only from HA+1..HS: what a peer sends costs memory and work bounded by
the settings, whatever its seqnos (a hostile 2^62 included). Every drop is counted by type.

Timers are named deadlines (timers.py), fired by `on_timer` in the order of TIMERS:
- ack_flush: a delayed ACK whose `ack_min_interval` has passed;
- sync_timeout: a SYNC exchange not answered within `sync_timeout` of its start (SYNC-OK for
  the receiver, SYNC-ACK for the sender) is given up;
- conn_expiry / conn_close: reaping, OPEN -> CLOSING after `conn_expiry_timeout` idle, CLOSING
  -> CLOSED after `conn_close_timeout` (a CLOSED sender entry sends CLOSE to its peer), each at
  its own time. Sending on, or receiving on, a CLOSING connection reopens it. A view without a
  peer closes its entries;
- xmit, the retransmit task, every `xmit_interval`:
  - sender: if HA < HS and both are unchanged since the last run, resend message HS (the last
    message or its ack was lost); retransmit unacked messages of CLOSING connections the same
    way; resend SYNC-OK until SYNC-ACK;
  - receiver: send an XMIT-REQ for the gaps that were already gaps at the previous run (JGroups'
    refinement: a gap seen once is usually a message still in flight), at most
    `max_xmit_req_seqnos`; then the resync mode's share: resend SYNC until SYNC-OK (sync) or
    send a deferred SEND_FIRST_SEQNO (first_seqno).

Resync, when B gets DATA from A but has no receive window for A or one with another conn-id,
is one strategy object per mode (resync.py), chosen from `config.resync` when the layer is built:
- `sync` (the SYNC design): B sends SYNC (first=true or not: no window means SYNC) and keeps what A sends
  meanwhile (JGroups' msg_cache, at most SYNC_CACHE_MAX); A takes a new conn-id, ignores ACKs from
  B until SYNC-ACK and answers SYNC-OK(low, conn-id, previous conn-id); B creates (or re-keys) its
  window at low, replays the cache into it and sends SYNC-ACK; A then resends its lowest and
  highest unacked messages. A delayed ACK from before the sync carries the old conn-id and is
  discarded, which is what fixes JGRP-1875. Each SYNC carries B's nonce, echoed by SYNC-OK and
  SYNC-ACK: an answer to another sync is never taken, A drops a SYNC older than the newest it
  answered, and a SYNC that comes while A still waits for a SYNC-ACK keeps A's new conn-id.
  `sync(peer)` starts it on demand.
- `timestamp` (what JGroups shipped in 3.5): B sends SEND_FIRST_SEQNO at most once per
  `sync_min_interval`; every ACK and SEND_FIRST_SEQNO carries a timestamp that increases per
  receiver, and A ignores any older than the newest it has seen; A resends its lowest unacked
  message with first=true, and B creates a window there.
- `first_seqno` (the UNICAST3 design as written): B sets a flag, the retransmit task sends SEND_FIRST_SEQNO,
  A resends its lowest unacked message with first=true on every request. A stale ACK with the
  same conn-id still purges: JGRP-1873/1875 reproduce.

Under `timestamp` and `first_seqno`, a DATA message with first=true from a sender B has no window
for creates the window (a new connection); under `sync` only SYNC-OK does. Conn-ids combine the
node's incarnation with a counter, so a restarted node never reuses the conn-ids of its previous
life on the same address.

What has a seam of its own already lives beside this module (connections.py, entries.py,
resync.py, introspection.py); what remains is the one state machine of the sender and receiver
tables (send, receive, ACK, XMIT-REQ, the retransmit task, reaping), whose handlers change the same
entries and stay together so that each transition reads in one place.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from ..events import EVENT_VERSION, DataEvents
from ..layer import Action, Command, CountingLayer, Down, DownBatch, Log, SetConfig, SyncPeer, Up, ViewChange
from ..message import MCAST_DEST, Message, app_id_of
from ..rangeset import RangeSet
from ..timers import Deadlines, FiredTimers
from ..xmit import MAX_XMIT_RANGES, serve_xmit_req
from .config import Unicast3Config
from .connections import Unicast3Connections
from .entries import ConnState, ReceiverEntry, SenderEntry, next_state
from .header import PROTO_ID, MsgType, U3Header
from .header import encode as encode_header
from .introspection import Unicast3Views
from .resync import RecvSync, Resync, make_resync

PROTO = "unicast3"
# The layer's named deadlines, in the order on_timer fires those due at the same time: acks
# first, then what ends syncs and connections, so the retransmit run sees what is left.
TIMERS = ("ack_flush", "sync_timeout", "conn_expiry", "conn_close", "xmit")
# Counter names per message type, built once: an Enum's .name is a property, slow on a hot path.
_RX_COUNTER = {t: f"rx_{t.name}" for t in MsgType}
_TX_COUNTER = {t: f"tx_{t.name}" for t in MsgType}
# Control messages whose handlers change only their sender's send entry (check_invariants).
_ONE_PEER_TYPES = frozenset({MsgType.ACK, MsgType.XMIT_REQ})
# The members read on every message, as globals: in CPython 3.11 reading an Enum member as a class
# attribute (ConnState.OPEN) costs about ten times a global's read.
_DATA = MsgType.DATA
_OPEN = ConnState.OPEN
_CLOSING = ConnState.CLOSING


class RandomBits(Protocol):
    """What the layer needs of a seeded random.Random (which it must not import: no I/O here)."""

    def getrandbits(self, k: int, /) -> int: ...


class Unicast3(Unicast3Connections, Unicast3Views, FiredTimers, CountingLayer):
    proto = PROTO
    passes_multicasts = True  # down() hands a multicast to the multicast layer below, untouched

    def __init__(self, local: str, config: Unicast3Config, rng: RandomBits, incarnation: int = 0) -> None:
        """`rng` is a seeded random.Random (only its getrandbits is used); `incarnation` must
        grow across restarts of a node on the same address."""
        self.local = local
        self.config = config
        self.incarnation = incarnation
        self._conn_counter = rng.getrandbits(16)
        if self._mutant("conn_id_ignores_incarnation"):
            self._conn_counter = 0  # a per-process counter from 0: a restart reuses conn-ids
        self.send_table: dict[str, SenderEntry] = {}
        self.recv_table: dict[str, ReceiverEntry] = {}
        self._syncs: dict[str, RecvSync] = {}  # receiver side: SYNCs started, not yet answered
        self._ack_deadlines: dict[str, float] = {}  # peer -> when its delayed ACK is due
        self.timers = Deadlines(*TIMERS)
        self.resync: Resync = make_resync(self)
        self.members: tuple[str, ...] | None = None
        self.counters: dict[str, int] = {}
        # The peers whose send and receive entries an input may have changed since check_invariants
        # last ran (None: any entry). DATA sent, an ACK or an XMIT-REQ changes its peer's send
        # entry alone, DATA received its peer's receive entry; every other input marks all. Stays
        # None (and costs nothing) where nobody checks: the daemon. Lists, not sets: a peer listed
        # twice is checked twice, and list code stays in the CPU's instruction cache anyway.
        self._touched: tuple[list[str], list[str]] | None = None

    # ---- helpers ------------------------------------------------------------------------------

    def _mutant(self, name: str) -> bool:
        """True when this planted bug (config `mutation`: config.MUTATIONS, or the old code of a
        fixed bug, config.REGRESSIONS) is switched on."""
        return self.config.mutation == name

    def _new_conn_id(self) -> int:
        self._conn_counter = (self._conn_counter + 1) & 0xFFFF
        if self._mutant("conn_id_ignores_incarnation"):
            return self._conn_counter or 1
        conn_id = ((self.incarnation & 0xFFFF) << 16) | self._conn_counter
        return conn_id or 1  # 0 means "no connection" on the wire

    def _ctrl(self, kind: str, dest: str, now: float, hdr: U3Header, **fields: object) -> list[Action]:
        """A control message to `dest` and its event; `bytes` is its UNICAST3 header's size on the
        wire (control messages have no payload), so overhead can be measured in bytes."""
        self._count(_TX_COUNTER[hdr.type])
        return [
            self._log(now, kind, peer=dest, bytes=len(encode_header(hdr)), **fields),
            Down(Message(self.local, dest, b"", {PROTO_ID: hdr})),
        ]

    def _arm(self, now: float) -> None:
        if "xmit" not in self.timers.at:
            self.timers.set("xmit", now + self.config.xmit_interval)

    def _set_state(
        self, entry: SenderEntry | ReceiverEntry, side: str, cause: str, now: float, out: list[Action]
    ) -> None:
        entry.state = next_state(entry.state, cause)
        entry.last_active = now
        self._reaping_from(entry)
        out.append(
            self._log(
                now,
                "conn_state",
                peer=entry.peer,
                side=side,
                state=entry.state.name,
                conn_id=entry.conn_id,
                reason=cause,
            )
        )

    # ---- sending (from the application) -------------------------------------------------------

    def down(self, msg: Message, now: float) -> list[Action]:
        if msg.dest == MCAST_DEST:
            return [Down(msg=msg)]  # a multicast, for the multicast layer below (NAKACK2)
        if "xmit" not in self.timers.at:  # self._arm(now), inlined on the send path
            self.timers.set("xmit", now + self.config.xmit_interval)
        out: list[Action] = []
        dest = msg.dest
        touched = self._touched
        if touched is not None:
            touched[0].append(dest)
        entry = self.send_table.get(dest)
        if entry is None:
            entry = SenderEntry(dest, self._new_conn_id(), now)
            self.send_table[dest] = entry
            self._reaping_from(entry)
            out.append(
                self._log(
                    now, "conn_state", peer=dest, side="send", state="OPEN", conn_id=entry.conn_id, reason="created"
                )
            )
        elif entry.state is _CLOSING:
            self._set_state(entry, "send", "send", now, out)
        seqno = entry.next_seqno
        entry.next_seqno = seqno + 1
        entry.last_active = now
        # A message handed down belongs to the stack (node/stack.py), so the header goes in place.
        conn_id = entry.conn_id
        msg.headers[PROTO_ID] = U3Header(_DATA, seqno, conn_id, seqno == 1)
        entry.msgs[seqno] = msg
        counters = self.counters
        counters["tx_DATA"] = counters.get("tx_DATA", 0) + 1
        if self.data_events:
            # The hot path of the event log, one per message sent: built here, as one literal (the
            # app id is there for every workload message); deliveries come as DataEvents records.
            payload = msg.payload
            app = msg.known_app or app_id_of(payload)
            if app is None:
                event = {
                    "v": EVENT_VERSION, "t": now, "node": self.local, "proto": PROTO, "kind": "send", "peer": dest,
                    "seqno": seqno, "conn_id": conn_id, "bytes": len(payload),
                }  # fmt: skip
            else:
                event = {
                    "v": EVENT_VERSION, "t": now, "node": self.local, "proto": PROTO, "kind": "send", "peer": dest,
                    "seqno": seqno, "conn_id": conn_id, "bytes": len(payload), "app": app,
                }  # fmt: skip
            out.append(Log(event))
        out.append(Down(msg))
        return out

    def down_batch(self, msgs: list[Message], now: float) -> list[Action]:
        """down() for each message, with the same result: a run of messages to one open
        connection is numbered in one loop and leaves as one DownBatch with one send record."""
        out: list[Action] = []
        i, n = 0, len(msgs)
        while i < n:
            dest = msgs[i].dest
            j = i + 1
            while j < n and msgs[j].dest == dest:
                j += 1
            if dest == MCAST_DEST:
                out.append(DownBatch(msgs=msgs[i:j]))  # multicasts, for the layer below (NAKACK2)
                i = j
                continue
            entry = self.send_table.get(dest)
            if entry is None or entry.state is _CLOSING:
                # Opening or reopening the connection: that first message the one-by-one way.
                out.extend(self.down(msgs[i], now))
                i += 1
                continue
            if "xmit" not in self.timers.at:
                self.timers.set("xmit", now + self.config.xmit_interval)
            if self._touched is not None:
                self._touched[0].append(dest)
            run = msgs[i:j]
            conn_id, store = entry.conn_id, entry.msgs
            first = seqno = entry.next_seqno
            for msg in run:
                msg.headers[PROTO_ID] = U3Header(_DATA, seqno, conn_id, seqno == 1)
                store[seqno] = msg
                seqno += 1
            entry.next_seqno = seqno
            entry.last_active = now
            self.counters["tx_DATA"] = self.counters.get("tx_DATA", 0) + len(run)
            if self.data_events:
                out.append(Log(event=DataEvents(now, self.local, PROTO, "send", dest, conn_id, first, run)))
            out.append(DownBatch(msgs=run))
            i = j
        return out

    def _resend(self, entry: SenderEntry, seqno: int, now: float, reason: str, first: bool = False) -> list[Action]:
        """Send a stored message again, under the entry's current conn-id."""
        stored = entry.msgs.get(seqno)
        if stored is None:
            return []
        hdr = stored.headers[PROTO_ID]
        if hdr.conn_id != entry.conn_id or (first and not hdr.first):
            conn_id = hdr.conn_id if self._mutant("resend_keeps_old_conn_id") else entry.conn_id
            stored = stored.with_header(PROTO_ID, replace(hdr, conn_id=conn_id, first=hdr.first or first))
        self._count("retransmit")
        return [
            self._log(
                now,
                "retransmit",
                peer=entry.peer,
                seqno=seqno,
                conn_id=entry.conn_id,
                bytes=len(stored.payload),
                reason=reason,
                first=first or None,
            ),
            Down(stored),
        ]

    # ---- receiving (from the transport) -------------------------------------------------------

    def up_multicasts(self, msgs: list[Message], now: float) -> list[Action]:
        """What up() does with multicasts the multicast layer below delivers: arm the timer and
        hand them on (not ours to order), without looking at each one."""
        if "xmit" not in self.timers.at:
            self.timers.set("xmit", now + self.config.xmit_interval)
        return [Up(msgs=msgs, multicasts=True)]

    def up(self, msgs: list[Message], now: float) -> list[Action]:
        if "xmit" not in self.timers.at:  # self._arm(now), inlined on the receive path
            self.timers.set("xmit", now + self.config.xmit_interval)
        out: list[Action] = []
        data: list[Message] = []
        mcasts: list[Message] = []
        n_data = 0  # well-formed DATA, counted once per batch
        for msg in msgs:
            hdr = msg.headers.get(PROTO_ID)
            if type(hdr) is U3Header and hdr.type is _DATA and hdr.seqno and hdr.conn_id:
                data.append(msg)  # nearly every message: the checks below, in the order they pass
                n_data += 1
                continue
            if msg.dest == MCAST_DEST and hdr is None:
                # A multicast delivered by the multicast layer below: not ours to order.
                mcasts.append(msg)
                continue
            touched = self._touched
            if touched is not None:
                if type(hdr) is U3Header and hdr.type in _ONE_PEER_TYPES:
                    touched[0].append(msg.src)
                else:
                    self._touched = None  # other control traffic may change any entry
            if not isinstance(hdr, U3Header):
                self._count("rx_malformed")
                out.append(self._log(now, "drop", peer=msg.src, reason="no UNICAST3 header"))
                continue
            self._count(_RX_COUNTER[hdr.type])
            if hdr.type is _DATA:
                if hdr.seqno and hdr.conn_id:
                    data.append(msg)
                else:
                    # Seqnos start at 1 and conn-id 0 means "no connection": a window opened
                    # at seqno 0 would start at -1, which no ACK can carry.
                    out.append(
                        self._log(
                            now,
                            "drop",
                            peer=msg.src,
                            seqno=hdr.seqno,
                            conn_id=hdr.conn_id,
                            type="DATA",
                            reason="seqno or conn_id is zero",
                        )
                    )
            else:
                out.extend(self._HANDLERS[hdr.type](self, msg.src, hdr, now))
        if n_data:
            self.counters["rx_DATA"] = self.counters.get("rx_DATA", 0) + n_data
        if data:
            src = data[0].src
            if self._touched is not None:
                self._touched[1].append(src)
            self._handle_data(src, data, now, out)
        if mcasts:
            out.append(Up(msgs=mcasts))
        return out

    def _handle_data(self, src: str, msgs: list[Message], now: float, out: list[Action]) -> None:
        # The UNICAST3 design: in a batch, a message with first=true is inserted before the others (a batch
        # of one, nearly every batch in the simulator, is in that order already).
        if len(msgs) > 1:
            firsts = [m for m in msgs if m.headers[PROTO_ID].first]
            if firsts and firsts[0] is not msgs[0]:
                msgs = firsts + [m for m in msgs if not m.headers[PROTO_ID].first]
        delivered: list[Message] = []
        # The common case, a new message inside the window of an open connection, is held or
        # delivered inline: what the general path below does for it, without the calls. Under
        # loss a window nearly always holds something, so this covers holding a message that came
        # early and delivering the run a message completes. Its deliveries are logged (one record)
        # before anything else is and at the end. The planted bug that delivers held messages in
        # arrival order takes the general path.
        cfg = self.config
        window = cfg.max_recv_window_seqnos
        inline_holds = cfg.mutation != "deliver_in_arrival_order"  # not self._mutant(...): no call
        run_start = -1  # >= 0: delivered[run_start:] went the fast way and is not logged yet
        entry = self.recv_table.get(src)
        for msg in msgs:
            hdr = msg.headers[PROTO_ID]
            if entry is not None and hdr.conn_id == entry.conn_id and entry.state is _OPEN:
                seqno = hdr.seqno
                low = entry.delivered
                held = entry.msgs
                if low < seqno <= low + window and seqno not in held and (inline_holds or not held):
                    if seqno > entry.highest:
                        entry.highest = seqno
                    entry.last_active = now
                    entry.ack_pending = True
                    if seqno == low + 1:
                        # Next in order: it and the held messages it completes a run with.
                        if run_start < 0:
                            run_start = len(delivered)
                        delivered.append(msg)
                        seqno += 1
                        while seqno in held:
                            delivered.append(held.pop(seqno))
                            seqno += 1
                        entry.delivered = seqno - 1
                    else:
                        held[seqno] = msg  # came early (a window never holds low + 1)
                    continue
            if run_start >= 0 and entry is not None:
                self._log_delivered(entry, now, out, delivered, run_start)
            run_start = -1
            entry = self._usable_entry(src, msg, hdr, now, out)
            if entry is None:
                continue
            if entry.state is _CLOSING:
                self._set_state(entry, "recv", "receive", now, out)
            entry.last_active = now
            entry.ack_pending = True
            seqno = hdr.seqno
            if seqno <= entry.delivered or seqno in entry.msgs:
                self._count("rx_duplicate")
                out.append(
                    self._log(now, "drop", peer=src, seqno=seqno, conn_id=hdr.conn_id, type="DATA", reason="duplicate")
                )
                continue
            if self._hold(entry, seqno, msg):
                self._deliver(entry, now, out, delivered)
            else:
                out.append(
                    self._log(
                        now,
                        "drop",
                        peer=src,
                        seqno=seqno,
                        conn_id=hdr.conn_id,
                        type="DATA",
                        reason="beyond the receive window",
                    )
                )
        if run_start >= 0 and entry is not None:
            self._log_delivered(entry, now, out, delivered, run_start)
        if delivered:
            out.append(Up(delivered))
        entry = self.recv_table.get(src)
        # _maybe_ack only when it has something to do: nearly every batch finds its delayed ACK
        # already due at ack_flush.
        if (
            entry is not None
            and entry.ack_pending
            and (
                src not in self._ack_deadlines
                or len(msgs) >= cfg.ack_threshold
                or now - entry.last_ack_tx >= cfg.ack_min_interval
            )
        ):
            self._maybe_ack(entry, now, len(msgs), out)

    def _hold(self, entry: ReceiverEntry, seqno: int, msg: Message) -> bool:
        """Keep a message until it can be delivered, unless it lies more than
        max_recv_window_seqnos above the delivered one: a seqno of 2^62 must cost nothing. Its
        seqno still raises `highest`, so the gap below it is asked for (XMIT-REQ) and a sender
        far ahead is caught up with, max_xmit_req_seqnos at a time."""
        if seqno > entry.highest:
            entry.highest = seqno
        if seqno - entry.delivered > self.config.max_recv_window_seqnos:
            return False
        entry.msgs[seqno] = msg
        return True

    def _deliver(self, entry: ReceiverEntry, now: float, out: list[Action], delivered: list[Message]) -> None:
        held = entry.msgs
        nxt = entry.delivered + 1
        if self._mutant("deliver_in_arrival_order"):
            # The deliverable run taken from the dict of held messages in its (arrival) order.
            end = nxt
            while end in held:
                end += 1
            for seqno in [s for s in held if nxt <= s < end]:
                msg = held.pop(seqno)
                out.append(Log(DataEvents(now, self.local, PROTO, "deliver", entry.peer, entry.conn_id, seqno, [msg])))
                delivered.append(msg)
            nxt = end
        first = nxt
        start = len(delivered)
        while nxt in held:
            delivered.append(held.pop(nxt))
            nxt += 1
        entry.delivered = nxt - 1
        if nxt > first:
            self._log_delivered(entry, now, out, delivered, start)

    def _log_delivered(
        self, entry: ReceiverEntry, now: float, out: list[Action], delivered: list[Message], start: int
    ) -> None:
        """The deliver events of delivered[start:], the run of entry's seqnos up to
        entry.delivered, as one record, not a dict per message (node/events.py): a run that goes
        on from the record logged last is added to it."""
        if not self.data_events:
            return
        run = delivered[start:]
        first = entry.delivered - len(run) + 1
        last = out[-1].event if out and type(out[-1]) is Log else None
        if (
            type(last) is DataEvents
            and last.kind == "deliver"
            and last.first_seqno + len(last.msgs) == first
            and last.peer == entry.peer
            and last.conn_id == entry.conn_id
        ):
            last.msgs.extend(run)
        else:
            out.append(Log(DataEvents(now, self.local, PROTO, "deliver", entry.peer, entry.conn_id, first, run)))

    def _usable_entry(
        self, src: str, msg: Message, hdr: U3Header, now: float, out: list[Action]
    ) -> ReceiverEntry | None:
        """The receive window this DATA message belongs to, creating it or starting a resync."""
        entry = self.recv_table.get(src)
        if entry is not None and (entry.conn_id == hdr.conn_id or self._mutant("data_ignores_conn_id")):
            return entry
        return self.resync.unusable_data(src, msg, hdr, entry, now, out)

    def _create_recv(
        self, src: str, conn_id: int, delivered: int, now: float, out: list[Action], reason: str
    ) -> ReceiverEntry:
        entry = ReceiverEntry(src, conn_id, delivered, now)
        self.recv_table[src] = entry
        self.resync.window_created(src)
        self._reaping_from(entry)
        out.append(
            self._log(
                now, "conn_state", peer=src, side="recv", state="OPEN", conn_id=conn_id, low=delivered, reason=reason
            )
        )
        return entry

    # ---- acks ---------------------------------------------------------------------------------

    def _maybe_ack(self, entry: ReceiverEntry, now: float, batch_size: int, out: list[Action]) -> None:
        """After a batch of DATA: an ACK now (into `out`), or one at the ack_flush deadline."""
        cfg = self.config
        if batch_size >= cfg.ack_threshold or now - entry.last_ack_tx >= cfg.ack_min_interval:
            out.extend(self._send_ack(entry, now))
        elif entry.peer not in self._ack_deadlines:
            due = entry.last_ack_tx + cfg.ack_min_interval
            self._ack_deadlines[entry.peer] = due
            self.timers.lower("ack_flush", due)

    def _send_ack(self, entry: ReceiverEntry, now: float) -> list[Action]:
        entry.ack_pending = False
        entry.last_ack_tx = now
        self._drop_ack_deadline(entry.peer)
        ts = self.resync.stamp()
        acked = entry.highest if self._mutant("ack_highest_received") else entry.delivered
        hdr = U3Header(MsgType.ACK, acked, entry.conn_id, timestamp=ts)
        return self._ctrl("ack_tx", entry.peer, now, hdr, seqno=acked, conn_id=entry.conn_id, timestamp=ts or None)

    def _on_ack(self, src: str, hdr: U3Header, now: float) -> list[Action]:
        entry = self.send_table.get(src)
        if entry is None:
            reason: str | None = "no send window"
        elif hdr.conn_id != entry.conn_id and not self._mutant("ack_ignores_conn_id"):
            reason = f"stale conn_id {hdr.conn_id} (current {entry.conn_id})"
        elif entry.awaiting_sync_ack:
            reason = "awaiting SYNC-ACK"
        else:
            reason = self.resync.ack_drop_reason(entry, hdr)
        if entry is None or reason is not None:
            return [self._log(now, "drop", peer=src, seqno=hdr.seqno, conn_id=hdr.conn_id, type="ACK", reason=reason)]
        out: list[Action] = [self._log(now, "ack_rx", peer=src, seqno=hdr.seqno, conn_id=hdr.conn_id)]
        upto = hdr.seqno + 1 if self._mutant("ack_purges_one_more") else hdr.seqno
        upto = min(upto, entry.hs)
        if upto > entry.ha:
            for seqno in range(entry.ha + 1, upto + 1):
                del entry.msgs[seqno]
            entry.ha = upto
        return out

    # ---- retransmission requests --------------------------------------------------------------

    def _on_xmit_req(self, src: str, hdr: U3Header, now: float) -> list[Action]:
        asked = sum(hi - lo + 1 for lo, hi in hdr.ranges)
        out: list[Action] = [
            self._log(
                now, "xmit_req_rx", peer=src, conn_id=hdr.conn_id, ranges=[list(r) for r in hdr.ranges], count=asked
            )
        ]
        entry = self.send_table.get(src)
        if entry is None:
            out.append(self._log(now, "drop", peer=src, type="XMIT_REQ", reason="no send window"))
            return out
        # Purged (acked) or never sent: this is how JGRP-1873 shows up, as the drops of this.
        serve_xmit_req(
            self._log,
            self._resend,
            src,
            entry,
            hdr.ranges,
            self.config.max_xmit_req_seqnos,
            now,
            out,
            half_open=self._mutant("xmit_req_off_by_one"),
        )
        return out

    def _missing(self, entry: ReceiverEntry) -> RangeSet:
        gaps = RangeSet()
        if entry.highest <= entry.delivered and not entry.msgs:
            return gaps
        prev = entry.delivered
        for seqno in sorted(entry.msgs):
            if seqno > prev + 1:
                gaps.add(prev + 1, seqno - 1)
            prev = seqno
        if entry.highest > prev:  # seen beyond the receive window, not kept (see _hold)
            gaps.add(prev + 1, entry.highest)
        return gaps

    # ---- resync -------------------------------------------------------------------------------

    def _on_send_first_seqno(self, src: str, hdr: U3Header, now: float) -> list[Action]:
        out: list[Action] = [self._log(now, "first_seqno_rx", peer=src, timestamp=hdr.timestamp or None)]
        entry = self.send_table.get(src)
        if entry is None or entry.ha == entry.hs:
            out.append(self._log(now, "drop", peer=src, type="SEND_FIRST_SEQNO", reason="nothing unacked"))
            return out
        reason = self.resync.first_seqno_drop_reason(entry, hdr)
        if reason is not None:
            out.append(self._log(now, "drop", peer=src, type="SEND_FIRST_SEQNO", reason=reason))
            return out
        low = entry.hs if self._mutant("first_seqno_resends_highest") else entry.ha + 1
        out.extend(self._resend(entry, low, now, "first_seqno", first=True))
        return out

    def _on_sync(self, src: str, hdr: U3Header, now: float) -> list[Action]:
        out: list[Action] = [self._log(now, "sync_rx", peer=src, phase="sync", conn_id=hdr.conn_id)]
        entry = self.send_table.get(src)
        if entry is None:
            # Nothing to sync: conn-id 0 tells the receiver to wait for a first=true message.
            out.extend(self._send_sync_ok(src, 0, 0, 0, hdr.nonce, now))
            return out
        if hdr.nonce < entry.sync_nonce or (hdr.nonce == entry.sync_nonce and not entry.awaiting_sync_ack):
            # A delayed or repeated SYNC of a sync already done (or superseded): answering it would
            # re-key a healthy connection for nothing.
            self._count("rx_stale_sync")
            out.append(
                self._log(
                    now,
                    "drop",
                    peer=src,
                    type="SYNC",
                    conn_id=hdr.conn_id,
                    reason=f"stale SYNC (nonce {hdr.nonce}, newest answered {entry.sync_nonce})",
                )
            )
            return out
        if not entry.awaiting_sync_ack:
            entry.prev_conn_id = entry.conn_id
            entry.conn_id = self._new_conn_id()
            entry.awaiting_sync_ack = True
            entry.prev_xmit = None
            out.append(
                self._log(
                    now,
                    "conn_state",
                    peer=src,
                    side="send",
                    state=entry.state.name,
                    conn_id=entry.conn_id,
                    reason="sync: new conn_id",
                )
            )
        # A repeated SYNC (ours got lost), or a newer one while the last is unacknowledged, gets
        # the same conn-id: taking another would retire the one the receiver may already use.
        entry.sync_nonce = hdr.nonce
        entry.sync_started = now
        self._sync_started(now)
        out.extend(self._send_sync_ok(src, entry.ha + 1, entry.conn_id, entry.prev_conn_id, hdr.nonce, now))
        return out

    def _send_sync_ok(
        self, peer: str, low: int, conn_id: int, prev_conn_id: int, nonce: int, now: float
    ) -> list[Action]:
        if self._mutant("sync_ok_sends_ha") and low > 1:
            low -= 1  # HA, the last acked seqno, where the receiver expects the first to deliver
        hdr = U3Header(MsgType.SYNC_OK, low, conn_id, prev_conn_id=prev_conn_id, nonce=nonce)
        return self._ctrl("sync_tx", peer, now, hdr, phase="sync_ok", seqno=low, conn_id=conn_id)

    def _on_sync_ok(self, src: str, hdr: U3Header, now: float) -> list[Action]:
        return self.resync.on_sync_ok(src, hdr, now)

    def _on_sync_ack(self, src: str, hdr: U3Header, now: float) -> list[Action]:
        out: list[Action] = [self._log(now, "sync_rx", peer=src, phase="sync_ack", conn_id=hdr.conn_id)]
        entry = self.send_table.get(src)
        if (
            entry is None
            or not entry.awaiting_sync_ack
            or entry.conn_id != hdr.conn_id
            or hdr.nonce != entry.sync_nonce
        ):
            out.append(
                self._log(now, "drop", peer=src, type="SYNC_ACK", conn_id=hdr.conn_id, reason="no matching sync")
            )
            return out
        entry.awaiting_sync_ack = False
        # Get the receiver going at once: its window starts at HA+1 and it learns HS from the
        # last message, so the gap between is asked for by its retransmit task.
        if entry.hs > entry.ha:
            out.extend(self._resend(entry, entry.ha + 1, now, "sync"))
            if entry.hs > entry.ha + 1:
                out.extend(self._resend(entry, entry.hs, now, "sync"))
        return out

    _HANDLERS = {
        MsgType.ACK: _on_ack,
        MsgType.XMIT_REQ: _on_xmit_req,
        MsgType.SEND_FIRST_SEQNO: _on_send_first_seqno,
        MsgType.SYNC: _on_sync,
        MsgType.SYNC_OK: _on_sync_ok,
        MsgType.SYNC_ACK: _on_sync_ack,
        MsgType.CLOSE: Unicast3Connections._on_close,
    }

    # ---- commands -----------------------------------------------------------------------------

    def command(self, cmd: Command, now: float) -> list[Action]:
        self._touched = None
        self._arm(now)
        if isinstance(cmd, ViewChange):
            return self._on_view(cmd, now)
        if isinstance(cmd, SyncPeer):
            return self.resync.sync(cmd.peer, now)
        if isinstance(cmd, SetConfig):
            mine = {k: v for k, v in cmd.values.items() if k in self.config.as_dict()}
            if mine:
                self.config = self.config.updated(mine)
                if self.resync.mode != self.config.resync:
                    # A new mode starts without the old one's bookkeeping; SYNCs in progress
                    # are left to their sync_timeout.
                    self.resync = make_resync(self)
                self.timers.set("xmit", now + self.config.xmit_interval)
                self._rearm_syncs()
                self._rearm_reaping()
        return []

    def _on_view(self, view: ViewChange, now: float) -> list[Action]:
        out: list[Action] = []
        if not view.logged:
            out.append(
                self._log(
                    now,
                    "view",
                    members=list(view.members),
                    view_id=view.view_id,
                    coord=view.coord or None,
                    reason=view.reason or None,
                )
            )
        self.members = view.members
        for side, table in (("send", self.send_table), ("recv", self.recv_table)):
            for peer, entry in table.items():
                if peer not in view.members and entry.state is ConnState.OPEN:
                    self._set_state(entry, side, "left_view", now, out)
                elif peer in view.members and entry.state is ConnState.CLOSING:
                    self._set_state(entry, side, "joined_view", now, out)
        return out

    # ---- timers -------------------------------------------------------------------------------

    def on_timer(self, now: float) -> list[Action]:
        self._touched = None  # a timer may change any entry
        return FiredTimers.on_timer(self, now)

    def _flush_acks(self, now: float, out: list[Action]) -> None:
        """ack_flush: the delayed ACKs whose ack_min_interval has passed."""
        for peer, due in list(self._ack_deadlines.items()):
            if due <= now:
                entry = self.recv_table.get(peer)
                if entry is not None and entry.ack_pending:
                    out.extend(self._send_ack(entry, now))
                else:
                    self._drop_ack_deadline(peer)

    def _drop_ack_deadline(self, peer: str) -> None:
        if self._ack_deadlines.pop(peer, None) is not None:
            self.timers.set("ack_flush", min(self._ack_deadlines.values(), default=None))

    def _end_syncs(self, now: float, out: list[Action]) -> None:
        """sync_timeout: the SYNC design bounds the wait for SYNC-OK and for SYNC-ACK; past it, give up."""
        timeout = self.config.sync_timeout
        for peer, sync in list(self._syncs.items()):
            if now >= sync.started + timeout:
                del self._syncs[peer]
                self._count("syncs_timed_out")
                out.append(
                    self._log(now, "sync_timeout", peer=peer, phase="sync_ok", reason=f"no SYNC-OK within {timeout}s")
                )
        for peer, entry in self.send_table.items():
            if entry.awaiting_sync_ack and now >= entry.sync_started + timeout:
                entry.awaiting_sync_ack = False
                self._count("syncs_timed_out")
                out.append(
                    self._log(now, "sync_timeout", peer=peer, phase="sync_ack", reason=f"no SYNC-ACK within {timeout}s")
                )
        self._rearm_syncs()

    def _sync_started(self, now: float) -> None:
        """A SYNC exchange (either side) started or restarted at `now`."""
        self.timers.lower("sync_timeout", now + self.config.sync_timeout)

    def _rearm_syncs(self) -> None:
        # Exchanges that ended early leave the deadline behind; it is set again from those left.
        starts = [sync.started for sync in self._syncs.values()]
        starts += [e.sync_started for e in self.send_table.values() if e.awaiting_sync_ack]
        self.timers.set("sync_timeout", min(starts) + self.config.sync_timeout if starts else None)

    def _retransmit_task(self, now: float, out: list[Action]) -> None:
        """xmit: the retransmit run of the UNICAST3 design, every xmit_interval."""
        self.timers.set("xmit", now + self.config.xmit_interval)
        self._xmit_receivers(now, out)
        self.resync.on_xmit(now, out)
        self._xmit_senders(now, out)

    _FIRE = {
        "ack_flush": _flush_acks,
        "sync_timeout": _end_syncs,
        "conn_expiry": Unicast3Connections._expire_conns,
        "conn_close": Unicast3Connections._close_conns,
        "xmit": _retransmit_task,
    }

    def _xmit_receivers(self, now: float, out: list[Action]) -> None:
        cfg = self.config
        for peer, entry in self.recv_table.items():
            missing = self._missing(entry)
            ask = missing.intersection(entry.prev_missing) if entry.prev_missing else RangeSet()
            entry.prev_missing = missing or None
            if ask:
                ask = ask.truncated(cfg.max_xmit_req_seqnos, MAX_XMIT_RANGES)
                ranges = ask.ranges()
                self._count("xmit_reqs")
                out.extend(
                    self._ctrl(
                        "xmit_req_tx",
                        peer,
                        now,
                        U3Header(MsgType.XMIT_REQ, conn_id=entry.conn_id, ranges=ranges),
                        conn_id=entry.conn_id,
                        ranges=[list(r) for r in ranges],
                        count=ask.count(),
                    )
                )

    def _xmit_senders(self, now: float, out: list[Action]) -> None:
        for peer, entry in self.send_table.items():
            if entry.awaiting_sync_ack:
                # The SYNC design: SYNC-OK is resent until SYNC-ACK comes or sync_timeout ends the wait.
                out.extend(
                    self._send_sync_ok(peer, entry.ha + 1, entry.conn_id, entry.prev_conn_id, entry.sync_nonce, now)
                )
            if entry.state is ConnState.CLOSING and self._mutant("closing_skips_flush"):
                continue  # JGRP-1586: pending messages of a closing connection are not flushed
            if entry.ha < entry.hs:
                marks = (entry.ha, entry.hs)
                if entry.prev_xmit == marks and not self._mutant("no_resend_highest"):
                    out.extend(self._resend(entry, entry.hs, now, "highest_sent"))
                entry.prev_xmit = marks
            else:
                entry.prev_xmit = None
