"""The original UNICAST (JGroups 2.x, before UNICAST2): sender-driven reliable FIFO unicast.

Theory of operation
-------------------
The UNICAST2 design ("UNICAST has issues when one end of the connection unilaterally closes the connection")
and the UNICAST3 design ("UNICAST has the sender resend messages until they're acked by the receiver") describe
it; JGroups 2.x is the rest.

- Connection table, keyed by the peer's address only: A's SenderEntry for B holds the next seqno and
  every message not acked yet; B's ReceiverEntry for A holds the receive window. There is no
  connection id, no `first` flag and no way to ask a sender where its stream starts.
- Sending: with no entry for B, A creates one at seqno 1. Each DATA message carries its seqno.
- Receiving (the first-message rule): with no entry for A, B creates one that expects seqno 1,
  whatever the message's seqno is. A message below the window is a duplicate and dropped, one
  above the next expected is held, and everything in order is delivered. Every DATA message in
  the window or below it is acked at once with an ACK naming that one seqno, a duplicate too:
  its first ACK may have been lost (JGroups 2.x acked whatever its window took or already had).
- ACK at the sender: the message it names leaves the send window (the UNICAST3 design: "a message gets
  removed by the sender as soon as an ack for it has been received").
- Retransmission (timer `xmit`, every `xmit_interval`): every message unacked for
  `xmit_interval` is sent again. No message is lost for good, first or last (the UNICAST3 design), since
  the sender resends until the ACK comes.
- A view without a peer removes both entries for it at once, with their messages.

The UNICAST2 design's motivation follows: B drops A from its view (A keeps B) and clears its entries; A's next
message, #25, opens a new window at B that expects #1, so #25 and everything after it is stored,
acked (A purges it) and never delivered; B's new stream starts at #1 while A's window for B
expects #7, so B's first six messages are dropped as duplicates, and acked.
"""

from __future__ import annotations

from typing import Any

from ..events import EVENT_VERSION
from ..layer import Action, Command, CountingLayer, Down, Log, SetConfig, SyncPeer, Up, ViewChange
from ..message import Message
from ..rangeset import RangeSet
from ..timers import Deadlines, FiredTimers
from ..views import Window, table_windows
from .config import UnicastConfig
from .entries import ReceiverEntry, SenderEntry, next_state
from .header import PROTO_ID, MsgType, U1Header
from .header import encode as encode_header

PROTO = "unicast"
TIMERS = ("xmit",)
_ACK_BYTES = len(encode_header(U1Header(MsgType.ACK, 0)))


class Unicast(FiredTimers, CountingLayer):
    proto = PROTO

    def __init__(self, local: str, config: UnicastConfig) -> None:
        self.local = local
        self.config = config
        self.send_table: dict[str, SenderEntry] = {}
        self.recv_table: dict[str, ReceiverEntry] = {}
        self.timers = Deadlines(*TIMERS)
        self.counters: dict[str, int] = {}

    # ---- helpers ------------------------------------------------------------------------------

    def _data_event(self, now: float, kind: str, peer: str, seqno: int, msg: Message) -> dict[str, Any]:
        ev: dict[str, Any] = {
            "v": EVENT_VERSION,
            "t": now,
            "node": self.local,
            "proto": PROTO,
            "kind": kind,
            "peer": peer,
            "seqno": seqno,
            "bytes": len(msg.payload),
        }
        app = msg.app
        if app is not None:
            ev["app"] = app
        return ev

    def _arm(self, now: float) -> None:
        if "xmit" not in self.timers.at:
            self.timers.set("xmit", now + self.config.xmit_interval)

    # ---- sending ------------------------------------------------------------------------------

    def down(self, msg: Message, now: float) -> list[Action]:
        self._arm(now)
        out: list[Action] = []
        dest = msg.dest
        entry = self.send_table.get(dest)
        if entry is None:
            entry = self.send_table[dest] = SenderEntry(dest)
            out.append(self._log(now, "conn_state", peer=dest, side="send", state="OPEN", reason="created"))
        seqno = entry.next_seqno
        entry.next_seqno = seqno + 1
        msg.headers[PROTO_ID] = U1Header(MsgType.DATA, seqno)
        entry.msgs[seqno] = msg
        entry.sent_at[seqno] = now
        self._count("tx_DATA")
        out.append(Log(event=self._data_event(now, "send", dest, seqno, msg)))
        out.append(Down(msg=msg))
        return out

    # ---- receiving ----------------------------------------------------------------------------

    def up(self, msgs: list[Message], now: float) -> list[Action]:
        self._arm(now)
        out: list[Action] = []
        delivered: list[Message] = []
        for msg in msgs:
            hdr = msg.headers.get(PROTO_ID)
            if not isinstance(hdr, U1Header):
                self._count("rx_malformed")
                out.append(self._log(now, "drop", peer=msg.src, reason="no UNICAST header"))
                continue
            self._count(f"rx_{hdr.type.name}")
            if hdr.type is MsgType.ACK:
                self._on_ack(msg.src, hdr.seqno, now, out)
            elif hdr.seqno == 0:
                out.append(self._log(now, "drop", peer=msg.src, seqno=0, type="DATA", reason="seqno zero"))
            else:
                self._on_data(msg, hdr.seqno, now, out, delivered)
        if delivered:
            out.append(Up(msgs=delivered))
        return out

    def _on_data(self, msg: Message, seqno: int, now: float, out: list[Action], delivered: list[Message]) -> None:
        src = msg.src
        entry = self.recv_table.get(src)
        if entry is None:
            # The first-message rule: a new window expects #1, whatever this message's seqno is.
            entry = self.recv_table[src] = ReceiverEntry(src)
            out.append(self._log(now, "conn_state", peer=src, side="recv", state="OPEN", low=0, reason="first"))
        if seqno - entry.delivered > self.config.max_recv_window_seqnos:
            # Not kept, so not acked: the sender resends it once the window has moved.
            out.append(self._log(now, "drop", peer=src, seqno=seqno, type="DATA", reason="beyond the receive window"))
            return
        if seqno <= entry.delivered or seqno in entry.msgs:
            self._count("rx_duplicate")
            out.append(self._log(now, "drop", peer=src, seqno=seqno, type="DATA", reason="duplicate"))
        else:
            entry.msgs[seqno] = msg
            if seqno > entry.highest:
                entry.highest = seqno
        # Duplicates are acked too: the sender may have lost the first ACK.
        self._ack(src, seqno, now, out)
        held = entry.msgs
        nxt = entry.delivered + 1
        while nxt in held:
            ready = held.pop(nxt)
            out.append(Log(event=self._data_event(now, "deliver", src, nxt, ready)))
            delivered.append(ready)
            nxt += 1
        entry.delivered = nxt - 1

    def _ack(self, dest: str, seqno: int, now: float, out: list[Action]) -> None:
        self._count("tx_ACK")
        # ack_tx's seqno is the one message this ACK names (the original acks one at a time).
        out.append(self._log(now, "ack_tx", peer=dest, seqno=seqno, bytes=_ACK_BYTES))
        out.append(Down(msg=Message(self.local, dest, b"", {PROTO_ID: U1Header(MsgType.ACK, seqno)})))

    def _on_ack(self, src: str, seqno: int, now: float, out: list[Action]) -> None:
        entry = self.send_table.get(src)
        if entry is None or seqno not in entry.msgs:
            # Acked already (a duplicate ACK), or for a window this node no longer has.
            self._count("ack_unknown")
            return
        del entry.msgs[seqno]
        del entry.sent_at[seqno]
        # ack_rx carries the cumulative mark (everything up to it acked), as every protocol's does.
        out.append(self._log(now, "ack_rx", peer=src, seqno=entry.ha))

    # ---- commands -----------------------------------------------------------------------------

    def command(self, cmd: Command, now: float) -> list[Action]:
        self._arm(now)
        if isinstance(cmd, ViewChange):
            out: list[Action] = [self._log(now, "view", members=list(cmd.members), view_id=cmd.view_id)]
            # A peer that left the view loses both its entries, pending retransmissions and all.
            tables: tuple[tuple[str, dict[str, Any]], ...] = (("send", self.send_table), ("recv", self.recv_table))
            for side, table in tables:
                for peer in [p for p in table if p not in cmd.members]:
                    entry = table.pop(peer)
                    entry.state = next_state(entry.state, "left_view")
                    out.append(
                        self._log(now, "conn_state", peer=peer, side=side, state=entry.state.name, reason="left_view")
                    )
            return out
        if isinstance(cmd, SetConfig):
            mine = {k: v for k, v in cmd.values.items() if k in self.config.as_dict()}
            if mine:
                self.config = self.config.updated(mine)
                self.timers.set("xmit", now + self.config.xmit_interval)
        return []

    def refusal(self, cmd: Command) -> str | None:
        if isinstance(cmd, SyncPeer):
            return "the original UNICAST has no resync (a new receive window simply expects seqno 1)"
        return None

    # ---- timers -------------------------------------------------------------------------------

    def _xmit(self, now: float, out: list[Action]) -> None:
        """xmit: every message unacked for xmit_interval is sent again."""
        interval = self.config.xmit_interval
        self.timers.set("xmit", now + interval)
        for peer, entry in self.send_table.items():
            for seqno, sent in entry.sent_at.items():
                if now - sent < interval:
                    continue
                entry.sent_at[seqno] = now
                stored = entry.msgs[seqno]
                self._count("retransmit")
                out.append(
                    self._log(now, "retransmit", peer=peer, seqno=seqno, bytes=len(stored.payload), reason="unacked")
                )
                out.append(Down(msg=stored))

    _FIRE = {"xmit": _xmit}

    # ---- introspection ------------------------------------------------------------------------

    def windows(self) -> list[Window]:
        # The original UNICAST has no connection ids.
        return table_windows(self.send_table, self.recv_table, self._missing, lambda _entry: None)

    @staticmethod
    def _missing(entry: ReceiverEntry) -> RangeSet:
        gaps = RangeSet()
        prev = entry.delivered
        for seqno in sorted(entry.msgs):
            if seqno > prev + 1:
                gaps.add(prev + 1, seqno - 1)
            prev = seqno
        return gaps

    def unacked(self, peer: str) -> int:
        entry = self.send_table.get(peer)
        return 0 if entry is None else len(entry.msgs)

    def snapshot(self) -> dict[str, Any]:
        return {
            "send": {p: {"ha": e.ha, "hs": e.hs, "unacked": len(e.msgs)} for p, e in self.send_table.items()},
            "recv": {
                p: {"delivered": e.delivered, "highest": e.highest, "held": len(e.msgs)}
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
