"""How a UNICAST3 receiver without a usable window gets back in step with a sender.

One class per `config.resync` mode, chosen once when the layer is built (`make_resync`). The
modes differ only at these points, each a method here:

- `unusable_data`: DATA came from a sender this node has no window for, or one with another
  conn-id. `sync` (the SYNC design) starts a SYNC and caches the message; `timestamp` and `first_seqno`
  open a window from a first=true message and otherwise ask for the first seqno;
- `request_first_seqno` / `on_xmit`: `first_seqno` (the UNICAST3 design) defers SEND_FIRST_SEQNO to the
  retransmit task, `timestamp` (JGroups 3.5) sends it at once, at most once per
  `sync_min_interval`; under `sync` the retransmit task resends the SYNCs in progress;
- `stamp`, `ack_drop_reason`, `first_seqno_drop_reason`: only `timestamp` puts a per-receiver
  clock on ACK and SEND_FIRST_SEQNO, and its senders drop any older than the newest seen;
- `on_sync_ok`, `admin_sync`: only `sync` takes SYNC-OK answers and lets an admin start a sync.

The sender's side of SYNC (SYNC -> new conn-id, SYNC-OK, SYNC-ACK) stays in the layer: a node
answers a peer's SYNC whatever its own mode. Strategies are the layer's friends: they work on its
tables and use its helpers, and keep only what their mode alone needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ..layer import Action, Up
from ..message import Message
from .entries import ReceiverEntry, SenderEntry
from .header import PROTO_ID, MsgType, U3Header

if TYPE_CHECKING:
    from .protocol import Unicast3

_RETIRED_CONN_IDS = 16  # conn-ids remembered per sender as "replaced by a sync"
# DATA kept per sender while a SYNC with it runs (JGroups' msg_cache), replayed into the window
# SYNC-OK makes; beyond this many, messages are dropped and come back by retransmission.
SYNC_CACHE_MAX = 1024


class RecvSync:
    """A SYNC this node (as receiver) has started and not yet seen answered."""

    __slots__ = ("cache", "conn_seen", "nonce", "started")

    def __init__(self, now: float, conn_seen: int, nonce: int) -> None:
        self.started = now
        self.conn_seen = conn_seen
        self.nonce = nonce
        self.cache: list[Message] = []


class Resync:
    """The defaults: no timestamps, no SYNC of our own."""

    mode: ClassVar[str]
    admin_sync: ClassVar[bool] = False  # may `sync(peer)` start a resync on demand

    def __init__(self, u3: Unicast3) -> None:
        self.u3 = u3

    def unusable_data(
        self, src: str, msg: Message, hdr: U3Header, entry: ReceiverEntry | None, now: float, out: list[Action]
    ) -> ReceiverEntry | None:
        """DATA from `src` with no window for it, or `entry` under another conn-id: the window to
        put it in, or None when it is kept or dropped here."""
        raise NotImplementedError

    def window_created(self, src: str) -> None:
        """A receive window for `src` was just made."""

    def on_xmit(self, now: float, out: list[Action]) -> None:
        """This mode's share of a retransmit run (after XMIT-REQs, before the senders' resends)."""

    def stamp(self) -> int:
        """The timestamp of the next ACK or SEND_FIRST_SEQNO (0: none on the wire)."""
        return 0

    def ack_drop_reason(self, entry: SenderEntry, hdr: U3Header) -> str | None:
        """Why a sender drops this ACK on top of the conn-id and SYNC checks, if it does."""
        return None

    def first_seqno_drop_reason(self, entry: SenderEntry, hdr: U3Header) -> str | None:
        """Why a sender with unacked messages ignores this SEND_FIRST_SEQNO, if it does."""
        return None

    def on_sync_ok(self, src: str, hdr: U3Header, now: float) -> list[Action]:
        u3 = self.u3
        u3._count("rx_stale_sync_ok")
        return [
            u3._log(now, "sync_rx", peer=src, phase="sync_ok", seqno=hdr.seqno, conn_id=hdr.conn_id),
            u3._log(now, "drop", peer=src, type="SYNC_OK", conn_id=hdr.conn_id, reason="no sync in progress"),
        ]

    def sync(self, peer: str, now: float) -> list[Action]:
        """The admin operation `sync(peer)`; a local error where this mode has no SYNC."""
        raise ValueError(f"sync({peer}) needs resync: sync (this node uses {self.mode})")


class SyncResync(Resync):
    """The SYNC design: no usable window means SYNC, first=true or not."""

    mode = "sync"
    admin_sync = True

    def __init__(self, u3: Unicast3) -> None:
        super().__init__(u3)
        self._nonce = 0  # numbers this node's SYNCs (see _next_nonce)
        self._synced_nonce: dict[str, int] = {}  # peer -> nonce of our last completed SYNC
        self._retired: dict[str, list[int]] = {}  # peer -> conn-ids replaced by a sync

    def unusable_data(
        self, src: str, msg: Message, hdr: U3Header, entry: ReceiverEntry | None, now: float, out: list[Action]
    ) -> ReceiverEntry | None:
        u3 = self.u3
        if hdr.first and u3._mutant("sync_first_opens_window"):
            # The code (bug B): first=true opened a window, SYNC or not.
            if entry is not None:
                u3._set_state(entry, "recv", "replaced", now, out)
            return u3._create_recv(src, hdr.conn_id, hdr.seqno - 1, now, out, reason="new_window:first")
        # A delayed first message of a connection the sender has left must not open a window at
        # its old conn-id, where the receiver would ask forever for seqnos long purged (JGRP-1873).
        if hdr.conn_id in self._retired.get(src, ()):
            out.append(
                u3._log(
                    now,
                    "drop",
                    peer=src,
                    seqno=hdr.seqno,
                    conn_id=hdr.conn_id,
                    type="DATA",
                    reason="stale conn_id (replaced by sync)",
                )
            )
            return None
        sync = u3._syncs.get(src)
        if sync is None:
            out.extend(self._start(src, hdr.conn_id, now))
            sync = u3._syncs[src]
        if len(sync.cache) < SYNC_CACHE_MAX:
            # Kept for the window SYNC-OK makes, instead of waiting for retransmission.
            sync.cache.append(msg)
            u3._count("rx_cached_for_sync")
        else:
            reason = "no receive window" if entry is None else f"conn_id {entry.conn_id} != {hdr.conn_id}"
            out.append(
                u3._log(
                    now,
                    "drop",
                    peer=src,
                    seqno=hdr.seqno,
                    conn_id=hdr.conn_id,
                    type="DATA",
                    reason=f"{reason}, syncing, sync cache full",
                )
            )
        return None

    def sync(self, peer: str, now: float) -> list[Action]:
        u3 = self.u3
        if peer == u3.local:
            raise ValueError("cannot sync with ourselves")
        if peer in u3._syncs:
            return []
        entry = u3.recv_table.get(peer)
        return self._start(peer, entry.conn_id if entry else 0, now)

    def on_xmit(self, now: float, out: list[Action]) -> None:
        # SYNCs are unreliable: resent until SYNC-OK comes or the sync_timeout deadline ends them.
        for peer, sync in self.u3._syncs.items():
            out.extend(self._send(peer, sync, now))

    def _next_nonce(self) -> int:
        # Grows across restarts too (incarnation in the high bits): a sender drops any SYNC older
        # than the newest it answered, so a delayed SYNC never re-keys a healthy connection.
        self._nonce += 1
        return (self.u3.incarnation << 40) | self._nonce

    def _start(self, peer: str, conn_seen: int, now: float) -> list[Action]:
        sync = self.u3._syncs[peer] = RecvSync(now, conn_seen, self._next_nonce())
        self.u3._count("syncs_started")
        self.u3._sync_started(now)
        return self._send(peer, sync, now)

    def _send(self, peer: str, sync: RecvSync, now: float) -> list[Action]:
        return self.u3._ctrl(
            "sync_tx",
            peer,
            now,
            U3Header(MsgType.SYNC, conn_id=sync.conn_seen, nonce=sync.nonce),
            phase="sync",
            conn_id=sync.conn_seen,
        )

    def on_sync_ok(self, src: str, hdr: U3Header, now: float) -> list[Action]:
        u3 = self.u3
        low, conn_id = hdr.seqno, hdr.conn_id
        out: list[Action] = [u3._log(now, "sync_rx", peer=src, phase="sync_ok", seqno=low, conn_id=conn_id)]
        sync = u3._syncs.get(src)
        entry = u3.recv_table.get(src)
        if conn_id != 0 and low == 0:
            # Low is the first seqno to deliver, at least 1: a window at -1 could not be acked.
            out.append(u3._log(now, "drop", peer=src, type="SYNC_OK", conn_id=conn_id, reason="low is zero"))
            return out
        unbound = u3._mutant("sync_ok_ignores_nonce")  # bug C: before the nonce
        if sync is None or (hdr.nonce != sync.nonce and not unbound):
            if entry is not None and entry.conn_id == conn_id and hdr.nonce == self._synced_nonce.get(src):
                out.extend(self._send_sync_ack(src, conn_id, hdr.nonce, now))  # our SYNC-ACK was lost
            else:
                # An answer to another sync than ours (delayed, or to a SYNC we gave up on): taking
                # it would set the window back to that sync's low and deliver again.
                u3._count("rx_stale_sync_ok")
                out.append(
                    u3._log(
                        now,
                        "drop",
                        peer=src,
                        type="SYNC_OK",
                        conn_id=conn_id,
                        reason="no sync in progress"
                        if sync is None
                        else f"stale SYNC-OK (nonce {hdr.nonce}, ours {sync.nonce})",
                    )
                )
            return out
        del u3._syncs[src]
        if conn_id == 0:
            out.append(u3._log(now, "sync_timeout", peer=src, phase="sync_ok", reason="sender has no connection to us"))
            return out
        if sync.conn_seen and sync.conn_seen not in (conn_id, hdr.prev_conn_id):
            self._retire(src, sync.conn_seen)
        if unbound or u3._mutant("sync_ok_rekeys_by_prev_only"):
            # Before the SYNC fixes (bugs A and C, tests/test_sync_bugs.py) only the previous conn-id
            # re-keyed a live window; a window already keyed by this conn-id was rebuilt at the
            # answer's low.
            keyed = bool(hdr.prev_conn_id) and entry is not None and entry.conn_id == hdr.prev_conn_id
        else:
            keyed = entry is not None and entry.conn_id in (conn_id, hdr.prev_conn_id or None)
        if entry is not None and keyed:
            # Same stream, re-keyed (e.g. sync(peer) on a live window), or already keyed by an
            # earlier answer of this sender: keep what was delivered.
            if entry.conn_id != conn_id:
                self._retire(src, entry.conn_id)
                entry.conn_id = conn_id
            if entry.delivered < low - 1:
                entry.delivered = low - 1
                entry.highest = max(entry.highest, entry.delivered)
                for seqno in [s for s in entry.msgs if s <= entry.delivered]:
                    del entry.msgs[seqno]
            out.append(
                u3._log(
                    now,
                    "conn_state",
                    peer=src,
                    side="recv",
                    state=entry.state.name,
                    conn_id=conn_id,
                    low=entry.delivered,
                    reason="sync: re-keyed",
                )
            )
        else:
            if entry is not None:
                self._retire(src, entry.conn_id)
                u3._set_state(entry, "recv", "replaced", now, out)
            entry = u3._create_recv(src, conn_id, low - 1, now, out, reason="new_window:sync")
        self._synced_nonce[src] = hdr.nonce
        u3._count("syncs_completed")
        out.extend(self._send_sync_ack(src, conn_id, hdr.nonce, now))
        # What came while syncing belongs to this window if it carries its conn-id or the one it
        # replaced (the sender re-keys without renumbering); then deliver and ack as usual.
        self._replay(entry, sync.cache, (conn_id, hdr.prev_conn_id), now, out)
        delivered: list[Message] = []
        u3._deliver(entry, now, out, delivered)
        if delivered:
            out.append(Up(msgs=delivered))
            entry.ack_pending = True
            u3._maybe_ack(entry, now, len(delivered), out)
        return out

    def _replay(
        self, entry: ReceiverEntry, cache: list[Message], conn_ids: tuple[int, int], now: float, out: list[Action]
    ) -> None:
        for msg in cache:
            hdr = msg.headers[PROTO_ID]
            if (
                hdr.conn_id in conn_ids
                and hdr.seqno > entry.delivered
                and hdr.seqno not in entry.msgs
                and not self.u3._hold(entry, hdr.seqno, msg)
            ):
                out.append(
                    self.u3._log(
                        now,
                        "drop",
                        peer=entry.peer,
                        seqno=hdr.seqno,
                        conn_id=hdr.conn_id,
                        type="DATA",
                        reason="beyond the receive window",
                    )
                )

    def _send_sync_ack(self, peer: str, conn_id: int, nonce: int, now: float) -> list[Action]:
        return self.u3._ctrl(
            "sync_tx",
            peer,
            now,
            U3Header(MsgType.SYNC_ACK, conn_id=conn_id, nonce=nonce),
            phase="sync_ack",
            conn_id=conn_id,
        )

    def _retire(self, src: str, conn_id: int) -> None:
        retired = self._retired.setdefault(src, [])
        if conn_id not in retired:
            retired.append(conn_id)
            del retired[:-_RETIRED_CONN_IDS]


class _FirstTrue(Resync):
    """The older designs: a first=true message opens a window; otherwise ask for the first seqno."""

    def unusable_data(
        self, src: str, msg: Message, hdr: U3Header, entry: ReceiverEntry | None, now: float, out: list[Action]
    ) -> ReceiverEntry | None:
        u3 = self.u3
        if hdr.first:
            # A new connection from src starts here.
            if entry is not None:
                u3._set_state(entry, "recv", "replaced", now, out)
            low = hdr.seqno if u3._mutant("first_window_skips_first") else hdr.seqno - 1
            return u3._create_recv(src, hdr.conn_id, low, now, out, reason="new_window:first")
        out.append(
            u3._log(
                now,
                "drop",
                peer=src,
                seqno=hdr.seqno,
                conn_id=hdr.conn_id,
                type="DATA",
                reason="no receive window" if entry is None else "conn_id mismatch",
            )
        )
        self.request_first_seqno(src, now, out)
        return None

    def request_first_seqno(self, src: str, now: float, out: list[Action]) -> None:
        raise NotImplementedError

    def _send_first_seqno(self, src: str, now: float) -> list[Action]:
        ts = self.stamp()
        return self.u3._ctrl(
            "first_seqno_tx", src, now, U3Header(MsgType.SEND_FIRST_SEQNO, timestamp=ts), timestamp=ts or None
        )


class FirstSeqnoResync(_FirstTrue):
    """The UNICAST3 design as written: the retransmit task sends a deferred SEND_FIRST_SEQNO; a stale ACK
    with the same conn-id still purges, so JGRP-1873/1875 reproduce."""

    mode = "first_seqno"

    def __init__(self, u3: Unicast3) -> None:
        super().__init__(u3)
        self._pending: set[str] = set()  # senders to ask at the next retransmit run

    def request_first_seqno(self, src: str, now: float, out: list[Action]) -> None:
        self._pending.add(src)

    def window_created(self, src: str) -> None:
        self._pending.discard(src)

    def on_xmit(self, now: float, out: list[Action]) -> None:
        for peer in sorted(self._pending):
            out.extend(self._send_first_seqno(peer, now))
        self._pending.clear()


class TimestampResync(_FirstTrue):
    """What JGroups shipped in 3.5: SEND_FIRST_SEQNO at once but rate-limited, and a timestamp
    on every ACK and SEND_FIRST_SEQNO so that a sender ignores those older than the newest."""

    mode = "timestamp"

    def __init__(self, u3: Unicast3) -> None:
        super().__init__(u3)
        self._clock = 0  # this node's ACK/SEND_FIRST_SEQNO clock
        self._last_tx: dict[str, float] = {}  # sender -> when we last asked it

    def request_first_seqno(self, src: str, now: float, out: list[Action]) -> None:
        last = self._last_tx.get(src)
        if last is not None and now - last < self.u3.config.sync_min_interval:
            return
        self._last_tx[src] = now
        out.extend(self._send_first_seqno(src, now))

    def stamp(self) -> int:
        # The incarnation in the high bits keeps a restarted receiver's timestamps above its old ones.
        self._clock += 1
        if self.u3._mutant("timestamp_ignores_incarnation"):
            return self._clock
        return (self.u3.incarnation << 40) | self._clock

    def ack_drop_reason(self, entry: SenderEntry, hdr: U3Header) -> str | None:
        if hdr.timestamp <= entry.last_timestamp and not self.u3._mutant("ack_ignores_timestamp"):
            return f"stale timestamp {hdr.timestamp} <= {entry.last_timestamp}"
        entry.last_timestamp = hdr.timestamp
        return None

    def first_seqno_drop_reason(self, entry: SenderEntry, hdr: U3Header) -> str | None:
        if hdr.timestamp <= entry.last_timestamp:
            return f"stale timestamp {hdr.timestamp} <= {entry.last_timestamp}"
        entry.last_timestamp = hdr.timestamp
        return None


RESYNCS: dict[str, type[Resync]] = {cls.mode: cls for cls in (SyncResync, TimestampResync, FirstSeqnoResync)}


def make_resync(u3: Unicast3) -> Resync:
    """The strategy of the layer's `config.resync` (validated by Unicast3Config)."""
    return RESYNCS[u3.config.resync](u3)
