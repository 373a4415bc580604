"""What UNICAST3 shows of itself (mixed into node/unicast3/protocol.py's Unicast3): its windows
for the checkers and the admin API, what it is busy with, unacked messages per peer, the commands
it refuses, a snapshot of its tables, and the invariants the simulator checks after every input.
Nothing here changes the protocol's state, except the memo of entries touched since the last
invariant check.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from ..layer import Command, SyncPeer
from ..views import Window, table_windows

if TYPE_CHECKING:
    from ..rangeset import RangeSet
    from .entries import ReceiverEntry, SenderEntry
    from .resync import RecvSync, Resync


class Unicast3Views:
    # Unicast3's, set in its __init__.
    send_table: dict[str, SenderEntry]
    recv_table: dict[str, ReceiverEntry]
    _syncs: dict[str, RecvSync]
    resync: Resync
    counters: dict[str, int]
    _touched: tuple[list[str], list[str]] | None
    _missing: Callable[[ReceiverEntry], RangeSet]

    def windows(self) -> list[Window]:
        return table_windows(self.send_table, self.recv_table, self._missing, attrgetter("conn_id"))

    def busy(self) -> list[str]:
        out = [f"resyncing with {peer}" for peer in sorted(self._syncs)]
        out.extend(
            f"awaiting SYNC-ACK from {peer}" for peer, e in sorted(self.send_table.items()) if e.awaiting_sync_ack
        )
        return out

    def unacked(self, peer: str) -> int:
        entry = self.send_table.get(peer)
        return 0 if entry is None else entry.next_seqno - 1 - entry.ha

    def refusal(self, cmd: Command) -> str | None:
        if isinstance(cmd, SyncPeer) and not self.resync.admin_sync:
            return f"sync needs config.resync: sync (this node uses {self.resync.mode})"
        return None

    def snapshot(self) -> dict[str, Any]:
        return {
            "send": {
                p: {
                    "conn_id": e.conn_id,
                    "ha": e.ha,
                    "hs": e.hs,
                    "state": e.state.name,
                    "unacked": len(e.msgs),
                    "awaiting_sync_ack": e.awaiting_sync_ack,
                }
                for p, e in self.send_table.items()
            },
            "recv": {
                p: {
                    "conn_id": e.conn_id,
                    "delivered": e.delivered,
                    "highest": e.highest,
                    "state": e.state.name,
                    "missing": self._missing(e).count(),
                    "held": len(e.msgs),
                }
                for p, e in self.recv_table.items()
            },
            "syncing": sorted(self._syncs),
            "counters": dict(self.counters),
        }

    def check_invariants(self) -> None:
        # The simulator calls this after every input: only the entries touched since the last call
        # are checked (all of them after inputs other than DATA, ACK and XMIT-REQ), and the
        # entries' checks are inlined here and only called (to raise with their message) when one
        # fails. Exact as long as entries change only through the layer's inputs.
        # An input touches one entry, mostly: empty lists are neither walked nor cleared.
        touched = self._touched
        if touched is None:
            self._touched = (list(self.send_table), list(self.recv_table))
            touched = self._touched
        sends, recvs = touched
        if sends:
            send_table = self.send_table
            for peer in sends:
                entry = send_table.get(peer)
                if entry is not None:
                    ha = entry.ha
                    hs = entry.next_seqno - 1
                    if ha < 0 or ha > hs or len(entry.msgs) != hs - ha:
                        entry.check()
            sends.clear()
        if recvs:
            recv_table = self.recv_table
            for peer in recvs:
                recv_entry = recv_table.get(peer)
                if recv_entry is not None:
                    low, held = recv_entry.delivered, recv_entry.msgs
                    if low < 0 or low > recv_entry.highest or low + 1 in held or len(held) > recv_entry.highest - low:
                        recv_entry.check()
            recvs.clear()
