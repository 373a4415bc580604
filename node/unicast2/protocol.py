"""UNICAST2: receiver-driven reliable FIFO unicast with connection ids (the UNICAST2 design).

Theory of operation
-------------------
Sender A numbers its messages to B 1, 2, 3... under a send-conn-id and keeps each one until B
says it was delivered. There are no per-message acks: B drives everything.

- Connection table. A's SenderEntry for B holds the send-conn-id, the next seqno and the unpurged
  messages; B's ReceiverEntry for A holds the recv-conn-id and the receive window (recv_win).
  Conn-ids combine the node's incarnation with a counter (a restarted node never reuses one).
- Sending (seed: "A sends a message to B"): with no entry for B, A creates one with a new conn-id
  and seqno 1; every DATA message carries the conn-id (only the first one, with
  `conn_id_in_every_message: false`: the wire of the design's scenario #6), and the first one also
  first=true.
- Receiving (seed: "B receives a message from A"), message by message (a first=true message goes
  first in its batch):
  - first=true: no entry -> a new recv_win at msg.seqno, recv-conn-id = msg.conn-id; an entry
    with another recv-conn-id -> the old window is replaced the same way; the same conn-id -> NOP
    (the window stays; this prevents duplicate connection establishments) and the message is
    handled as any other;
  - otherwise: no entry, or another conn-id (0: none given, see conn_id_in_every_message, takes
    the window B has) -> the message is dropped and B sends
    SEND_FIRST_SEQNO(conn-id, seqno of that message) to A, at most once per batch.
- SEND_FIRST_SEQNO at A (seed: "A receives GET_FIRST_SEQNO"): dropped when its conn-id is not
  A's send-conn-id; otherwise A resends the lowest message of its send window with first=true.
- Timers (named deadlines, fired by `on_timer` in the order of TIMERS):
  - conn_expiry: an entry idle for `conn_expiry_timeout` is removed (a goal of the design; 0: never);
  - xmit, every `xmit_interval`: B sends an XMIT-REQ with the gaps of each window; A resends
    those of HA+1..HS (an XMIT-REQ with another conn-id is dropped);
  - stable, every `stable_interval`: B sends STABLE(highest delivered, highest received) for each
    window whose pair changed, and repeats an unchanged one at most `max_stable_msgs` times (as
    JGroups). A purges up to the highest delivered and resends what lies above the highest
    received: that is how a lost last message comes back (while the repeats last: a message
    lost after them is found when the next one opens a gap).
- A view without a peer removes both entries for it at once, with their messages (the design's scenario #3).

What the UNICAST2 design leaves open, taken as written: STABLE has no conn-id rule, so a STABLE of B's old
window purges A's new connection (`stable_checks_conn_id: false`, scenario #6's liveness bug);
JGroups later checked it (`true`). A resync by SEND_FIRST_SEQNO keeps the conn-id, so a STABLE
delayed past it purges messages B's new window has not seen either way (JGRP-1873/1875).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from operator import attrgetter
from typing import Any, ClassVar, Protocol

from ..events import EVENT_VERSION
from ..layer import Action, Command, CountingLayer, Down, Log, SetConfig, SyncPeer, Up, ViewChange
from ..message import Message
from ..rangeset import RangeSet
from ..timers import Deadlines, FiredTimers
from ..views import Window, table_windows
from ..xmit import MAX_XMIT_RANGES, serve_xmit_req
from .config import Unicast2Config
from .entries import ReceiverEntry, SenderEntry, next_state
from .header import PROTO_ID, MsgType, U2Header
from .header import encode as encode_header

PROTO = "unicast2"
# The named deadlines, in the order on_timer fires those due together: expiry first, so the
# retransmit and stable runs see only live windows.
TIMERS = ("conn_expiry", "xmit", "stable")


class RandomBits(Protocol):
    """What the layer needs of a seeded random.Random (which it must not import: no I/O here)."""

    def getrandbits(self, k: int, /) -> int: ...


class Unicast2(FiredTimers, CountingLayer):
    proto = PROTO

    def __init__(self, local: str, config: Unicast2Config, rng: RandomBits, incarnation: int = 0) -> None:
        self.local = local
        self.config = config
        self.incarnation = incarnation
        self._conn_counter = rng.getrandbits(16)
        self.send_table: dict[str, SenderEntry] = {}
        self.recv_table: dict[str, ReceiverEntry] = {}
        self.timers = Deadlines(*TIMERS)
        self.members: tuple[str, ...] | None = None
        self.counters: dict[str, int] = {}

    # ---- helpers ------------------------------------------------------------------------------

    def _mutant(self, name: str) -> bool:
        return self.config.mutation == name

    def _new_conn_id(self) -> int:
        self._conn_counter = (self._conn_counter + 1) & 0xFFFF
        conn_id = ((self.incarnation & 0xFFFF) << 16) | self._conn_counter
        return conn_id or 1  # 0 means "no connection" on the wire

    def _ctrl(self, kind: str, dest: str, now: float, hdr: U2Header, **fields: object) -> list[Action]:
        """A control message and its event; `bytes` is its header's size (it has no payload)."""
        self._count(f"tx_{hdr.type.name}")
        return [
            self._log(now, kind, peer=dest, bytes=len(encode_header(hdr)), **fields),
            Down(msg=Message(self.local, dest, b"", {PROTO_ID: hdr})),
        ]

    def _arm(self, now: float) -> None:
        if "xmit" not in self.timers.at:
            self.timers.set("xmit", now + self.config.xmit_interval)
        if "stable" not in self.timers.at:
            self.timers.set("stable", now + self.config.stable_interval)

    def _close(self, entry: SenderEntry | ReceiverEntry, side: str, cause: str, now: float, out: list[Action]) -> None:
        """Take an entry out of the connection table (its messages go with it)."""
        entry.state = next_state(entry.state, cause)
        table: dict[str, Any] = self.send_table if side == "send" else self.recv_table
        if table.get(entry.peer) is entry:
            del table[entry.peer]
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

    def _data_event(self, now: float, kind: str, peer: str, seqno: int, conn_id: int, msg: Message) -> dict[str, Any]:
        ev: dict[str, Any] = {
            "v": EVENT_VERSION,
            "t": now,
            "node": self.local,
            "proto": PROTO,
            "kind": kind,
            "peer": peer,
            "seqno": seqno,
            "conn_id": conn_id,
            "bytes": len(msg.payload),
        }
        app = msg.app
        if app is not None:
            ev["app"] = app
        return ev

    # ---- sending ------------------------------------------------------------------------------

    def down(self, msg: Message, now: float) -> list[Action]:
        self._arm(now)
        out: list[Action] = []
        dest = msg.dest
        entry = self.send_table.get(dest)
        if entry is None:
            # Seed: no entry for B -> a new entry, seqno 1, a new send-conn-id, first=true.
            entry = SenderEntry(dest, self._new_conn_id(), now)
            self.send_table[dest] = entry
            self._rearm_expiry()
            out.append(
                self._log(
                    now, "conn_state", peer=dest, side="send", state="OPEN", conn_id=entry.conn_id, reason="created"
                )
            )
        seqno = entry.next_seqno
        entry.next_seqno = seqno + 1
        entry.last_active = now
        first = seqno == 1
        conn_id = entry.conn_id if first or self.config.conn_id_in_every_message else 0
        msg.headers[PROTO_ID] = U2Header(MsgType.DATA, seqno, conn_id, first=first)
        entry.msgs[seqno] = msg
        self._count("tx_DATA")
        out.append(Log(event=self._data_event(now, "send", dest, seqno, entry.conn_id, msg)))
        out.append(Down(msg=msg))
        return out

    def _resend(self, entry: SenderEntry, seqno: int, now: float, reason: str, first: bool = False) -> list[Action]:
        stored = entry.msgs.get(seqno)
        if stored is None:
            return []
        hdr = stored.headers[PROTO_ID]
        if first and not hdr.first:
            # Seed: A adds its send-conn-id to the header and sets first=true.
            stored = stored.with_header(PROTO_ID, replace(hdr, conn_id=entry.conn_id, first=True))
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
            Down(msg=stored),
        ]

    # ---- receiving ----------------------------------------------------------------------------

    def up(self, msgs: list[Message], now: float) -> list[Action]:
        self._arm(now)
        out: list[Action] = []
        data: list[Message] = []
        for msg in msgs:
            hdr = msg.headers.get(PROTO_ID)
            if not isinstance(hdr, U2Header):
                self._count("rx_malformed")
                out.append(self._log(now, "drop", peer=msg.src, reason="no UNICAST2 header"))
                continue
            self._count(f"rx_{hdr.type.name}")
            if hdr.type is MsgType.DATA:
                # Seqnos start at 1; a first=true message must name its connection (conn-id 0
                # on any other message means "not given": see conn_id_in_every_message).
                if hdr.seqno and (hdr.conn_id or not hdr.first):
                    data.append(msg)
                else:
                    out.append(
                        self._log(
                            now,
                            "drop",
                            peer=msg.src,
                            seqno=hdr.seqno,
                            conn_id=hdr.conn_id,
                            type="DATA",
                            reason="seqno zero, or first without conn_id",
                        )
                    )
            else:
                out.extend(self._HANDLERS[hdr.type](self, msg.src, hdr, now))
        if data:
            out.extend(self._handle_data(data[0].src, data, now))
        return out

    def _handle_data(self, src: str, msgs: list[Message], now: float) -> list[Action]:
        out: list[Action] = []
        # A first=true message goes first in its batch, so the window it opens takes the rest.
        firsts = [m for m in msgs if m.headers[PROTO_ID].first]
        if firsts and firsts[0] is not msgs[0]:
            msgs = firsts + [m for m in msgs if not m.headers[PROTO_ID].first]
        delivered: list[Message] = []
        asked = False
        for msg in msgs:
            hdr = msg.headers[PROTO_ID]
            entry = self._receiver_entry(src, hdr, now, out)
            if entry is None:
                if not asked and not self._mutant("no_send_first_seqno"):
                    asked = True
                    out.extend(
                        self._ctrl(
                            "first_seqno_tx",
                            src,
                            now,
                            U2Header(MsgType.SEND_FIRST_SEQNO, hdr.seqno, hdr.conn_id),
                            seqno=hdr.seqno,
                            conn_id=hdr.conn_id,
                        )
                    )
                continue
            entry.last_active = now
            seqno = hdr.seqno
            if seqno <= entry.delivered or seqno in entry.msgs:
                self._count("rx_duplicate")
                out.append(
                    self._log(now, "drop", peer=src, seqno=seqno, conn_id=hdr.conn_id, type="DATA", reason="duplicate")
                )
                continue
            if seqno > entry.highest:
                entry.highest = seqno
            if seqno - entry.delivered > self.config.max_recv_window_seqnos:
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
                continue
            entry.msgs[seqno] = msg
            self._deliver(entry, now, out, delivered)
        if delivered:
            out.append(Up(msgs=delivered))
        return out

    def _receiver_entry(self, src: str, hdr: U2Header, now: float, out: list[Action]) -> ReceiverEntry | None:
        """The UNICAST2 design's receive rules: the window this DATA message belongs to, or None (dropped)."""
        entry = self.recv_table.get(src)
        if hdr.first:
            if entry is None:
                return self._open_recv(src, hdr, now, out, "first")
            if hdr.conn_id != entry.conn_id or self._mutant("first_always_new_window"):
                self._close(entry, "recv", "replaced", now, out)
                return self._open_recv(src, hdr, now, out, "first: new conn_id")
            # NOP: the first message again (resent for a SEND_FIRST_SEQNO, or duplicated) on the
            # connection it opened; opening a window again would trash what it holds.
            self._count("first_nop")
            return entry
        if entry is None or (hdr.conn_id and hdr.conn_id != entry.conn_id):
            reason = "no receive window" if entry is None else f"conn_id {hdr.conn_id} != recv-conn-id {entry.conn_id}"
            out.append(
                self._log(now, "drop", peer=src, seqno=hdr.seqno, conn_id=hdr.conn_id, type="DATA", reason=reason)
            )
            return None
        return entry

    def _open_recv(self, src: str, hdr: U2Header, now: float, out: list[Action], reason: str) -> ReceiverEntry:
        entry = ReceiverEntry(src, hdr.conn_id, hdr.seqno - 1, now)
        self.recv_table[src] = entry
        self._rearm_expiry()
        out.append(
            self._log(
                now,
                "conn_state",
                peer=src,
                side="recv",
                state="OPEN",
                conn_id=hdr.conn_id,
                low=entry.delivered,
                reason=reason,
            )
        )
        return entry

    def _deliver(self, entry: ReceiverEntry, now: float, out: list[Action], delivered: list[Message]) -> None:
        held = entry.msgs
        nxt = entry.delivered + 1
        while nxt in held:
            msg = held.pop(nxt)
            out.append(Log(event=self._data_event(now, "deliver", entry.peer, nxt, entry.conn_id, msg)))
            delivered.append(msg)
            nxt += 1
        entry.delivered = nxt - 1

    def _missing(self, entry: ReceiverEntry) -> RangeSet:
        gaps = RangeSet()
        prev = entry.delivered
        for seqno in sorted(entry.msgs):
            if seqno > prev + 1:
                gaps.add(prev + 1, seqno - 1)
            prev = seqno
        if entry.highest > prev:  # seen beyond the receive window, not kept
            gaps.add(prev + 1, entry.highest)
        return gaps

    # ---- control messages at the sender -------------------------------------------------------

    def _on_stable(self, src: str, hdr: U2Header, now: float) -> list[Action]:
        out: list[Action] = [self._log(now, "stable_rx", peer=src, seqno=hdr.seqno, high=hdr.high, conn_id=hdr.conn_id)]
        entry = self.send_table.get(src)
        reason = None
        if entry is None:
            reason = "no send window"
        elif self.config.stable_checks_conn_id and hdr.conn_id != entry.conn_id:
            reason = f"stale conn_id {hdr.conn_id} (current {entry.conn_id})"
        if entry is None or reason is not None:
            out.append(
                self._log(now, "drop", peer=src, seqno=hdr.seqno, conn_id=hdr.conn_id, type="STABLE", reason=reason)
            )
            return out
        entry.last_active = now
        purge_to = hdr.high if self._mutant("stable_purges_received") else hdr.seqno
        upto = min(purge_to, entry.hs)
        if upto > entry.ha:
            for seqno in range(entry.ha + 1, upto + 1):
                del entry.msgs[seqno]
            entry.ha = upto
            out.append(self._log(now, "ack_rx", peer=src, seqno=upto, conn_id=entry.conn_id))
        # What B has not even received (above its highest) is resent: a lost last message.
        start = max(entry.ha, hdr.high) + 1
        for seqno in range(start, min(entry.hs, start + self.config.max_xmit_req_seqnos - 1) + 1):
            out.extend(self._resend(entry, seqno, now, "stable"))
        return out

    def _on_xmit_req(self, src: str, hdr: U2Header, now: float) -> list[Action]:
        asked = sum(hi - lo + 1 for lo, hi in hdr.ranges)
        out: list[Action] = [
            self._log(
                now, "xmit_req_rx", peer=src, conn_id=hdr.conn_id, ranges=[list(r) for r in hdr.ranges], count=asked
            )
        ]
        entry = self.send_table.get(src)
        reason = None
        if entry is None:
            reason = "no send window"
        elif hdr.conn_id != entry.conn_id:
            reason = f"stale conn_id {hdr.conn_id} (current {entry.conn_id})"
        if entry is None or reason is not None:
            out.append(self._log(now, "drop", peer=src, conn_id=hdr.conn_id, type="XMIT_REQ", reason=reason))
            return out
        # Purged or never sent: scenario #6 and JGRP-1875 show up as the drops of this.
        serve_xmit_req(self._log, self._resend, src, entry, hdr.ranges, self.config.max_xmit_req_seqnos, now, out)
        return out

    def _on_send_first_seqno(self, src: str, hdr: U2Header, now: float) -> list[Action]:
        out: list[Action] = [self._log(now, "first_seqno_rx", peer=src, seqno=hdr.seqno, conn_id=hdr.conn_id)]
        entry = self.send_table.get(src)
        reason = None
        if entry is None:
            reason = "no send window"
        elif hdr.conn_id and hdr.conn_id != entry.conn_id:
            # Conn-id 0: the dropped message carried none, so the receiver cannot name one.
            reason = f"conn_id {hdr.conn_id} != send-conn-id {entry.conn_id}"
        elif entry.ha == entry.hs:
            reason = "nothing unacked"
        if entry is None or reason is not None:
            out.append(
                self._log(
                    now, "drop", peer=src, seqno=hdr.seqno, conn_id=hdr.conn_id, type="SEND_FIRST_SEQNO", reason=reason
                )
            )
            return out
        out.extend(self._resend(entry, entry.ha + 1, now, "first_seqno", first=True))
        return out

    _HANDLERS: ClassVar[dict[MsgType, Callable[[Unicast2, str, U2Header, float], list[Action]]]] = {
        MsgType.STABLE: _on_stable,
        MsgType.XMIT_REQ: _on_xmit_req,
        MsgType.SEND_FIRST_SEQNO: _on_send_first_seqno,
    }

    # ---- commands -----------------------------------------------------------------------------

    def command(self, cmd: Command, now: float) -> list[Action]:
        self._arm(now)
        if isinstance(cmd, ViewChange):
            return self._on_view(cmd, now)
        if isinstance(cmd, SetConfig):
            mine = {k: v for k, v in cmd.values.items() if k in self.config.as_dict()}
            if mine:
                self.config = self.config.updated(mine)
                self.timers.set("xmit", now + self.config.xmit_interval)
                self.timers.set("stable", now + self.config.stable_interval)
                self._rearm_expiry()
        return []

    def _on_view(self, view: ViewChange, now: float) -> list[Action]:
        out: list[Action] = [self._log(now, "view", members=list(view.members), view_id=view.view_id)]
        self.members = view.members
        # The design's scenario #3: a peer that left the view loses both its entries, pending retransmissions and all.
        for side, entry in self._entries():
            if entry.peer not in view.members:
                self._close(entry, side, "left_view", now, out)
        self._rearm_expiry()
        return out

    def refusal(self, cmd: Command) -> str | None:
        if isinstance(cmd, SyncPeer):
            return "UNICAST2 has no SYNC (its design resyncs only by SEND_FIRST_SEQNO)"
        return None

    # ---- timers -------------------------------------------------------------------------------

    def _expire(self, now: float, out: list[Action]) -> None:
        """conn_expiry: entries idle for conn_expiry_timeout leave the table (a goal of the design)."""
        timeout = self.config.conn_expiry_timeout
        if timeout > 0:
            for side, entry in self._entries():
                if now >= entry.last_active + timeout:
                    self._close(entry, side, "expired", now, out)
        self._rearm_expiry()

    def _entries(self) -> list[tuple[str, SenderEntry | ReceiverEntry]]:
        """Every entry with its side, senders first (a copy: callers remove entries)."""
        out: list[tuple[str, SenderEntry | ReceiverEntry]] = [("send", e) for e in self.send_table.values()]
        return out + [("recv", e) for e in self.recv_table.values()]

    def _rearm_expiry(self) -> None:
        timeout = self.config.conn_expiry_timeout
        entries: list[SenderEntry | ReceiverEntry] = [*self.send_table.values(), *self.recv_table.values()]
        due = [e.last_active + timeout for e in entries] if timeout > 0 else []
        self.timers.set("conn_expiry", min(due, default=None))

    def _xmit(self, now: float, out: list[Action]) -> None:
        """xmit: each receive window asks for its gaps."""
        self.timers.set("xmit", now + self.config.xmit_interval)
        cfg = self.config
        for peer, entry in self.recv_table.items():
            missing = self._missing(entry)
            if not missing:
                continue
            ask = missing.truncated(cfg.max_xmit_req_seqnos, MAX_XMIT_RANGES)
            ranges = ask.ranges()
            self._count("xmit_reqs")
            out.extend(
                self._ctrl(
                    "xmit_req_tx",
                    peer,
                    now,
                    U2Header(MsgType.XMIT_REQ, conn_id=entry.conn_id, ranges=ranges),
                    conn_id=entry.conn_id,
                    ranges=[list(r) for r in ranges],
                    count=ask.count(),
                )
            )

    def _stable(self, now: float, out: list[Action]) -> None:
        """stable: STABLE(highest delivered, highest received) per window, repeated for an
        unchanged window at most max_stable_msgs times."""
        self.timers.set("stable", now + self.config.stable_interval)
        for peer, entry in self.recv_table.items():
            mark = (entry.delivered, entry.highest)
            if mark == entry.stable_mark:
                if entry.stable_repeats >= self.config.max_stable_msgs:
                    continue
                entry.stable_repeats += 1
            else:
                entry.stable_mark = mark
                entry.stable_repeats = 1
            hdr = U2Header(MsgType.STABLE, entry.delivered, entry.conn_id, high=entry.highest)
            out.extend(
                self._ctrl(
                    "stable_tx", peer, now, hdr, seqno=entry.delivered, high=entry.highest, conn_id=entry.conn_id
                )
            )

    _FIRE = {
        "conn_expiry": _expire,
        "xmit": _xmit,
        "stable": _stable,
    }

    # ---- introspection ------------------------------------------------------------------------

    def windows(self) -> list[Window]:
        return table_windows(self.send_table, self.recv_table, self._missing, attrgetter("conn_id"))

    def unacked(self, peer: str) -> int:
        entry = self.send_table.get(peer)
        return 0 if entry is None else entry.hs - entry.ha

    def snapshot(self) -> dict[str, Any]:
        return {
            "send": {
                p: {"conn_id": e.conn_id, "ha": e.ha, "hs": e.hs, "unacked": len(e.msgs)}
                for p, e in self.send_table.items()
            },
            "recv": {
                p: {
                    "conn_id": e.conn_id,
                    "delivered": e.delivered,
                    "highest": e.highest,
                    "missing": self._missing(e).count(),
                    "held": len(e.msgs),
                }
                for p, e in self.recv_table.items()
            },
            "counters": dict(self.counters),
        }

    def check_invariants(self) -> None:
        for entry in self.send_table.values():
            entry.check()
        for recv_entry in self.recv_table.values():
            recv_entry.check()
            assert len(recv_entry.msgs) <= self.config.max_recv_window_seqnos, (
                f"recv window for {recv_entry.peer} holds {len(recv_entry.msgs)} messages"
            )
