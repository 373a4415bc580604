"""How UNICAST3's connections end (mixed into node/unicast3/protocol.py's Unicast3): a peer's
CLOSE, and reaping as JGroups does it: an entry idle for conn_expiry_timeout goes OPEN -> CLOSING,
a CLOSING one goes after conn_close_timeout more (a sender's with a CLOSE to its peer). A timeout
of 0 disables its step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..layer import Action, Log
from .entries import ConnState, ReceiverEntry, SenderEntry
from .header import MsgType, U3Header

if TYPE_CHECKING:
    from ..timers import Deadlines
    from .config import Unicast3Config


class Unicast3Connections:
    # Unicast3's, set in its __init__ (and its Layer base's).
    config: Unicast3Config
    timers: Deadlines
    send_table: dict[str, SenderEntry]
    recv_table: dict[str, ReceiverEntry]
    _log: Callable[..., Log]
    _ctrl: Callable[..., list[Action]]
    _set_state: Callable[[SenderEntry | ReceiverEntry, str, str, float, list[Action]], None]
    _drop_ack_deadline: Callable[[str], None]

    def _on_close(self, src: str, hdr: U3Header, now: float) -> list[Action]:
        out: list[Action] = [self._log(now, "close_rx", peer=src, conn_id=hdr.conn_id)]
        entry = self.recv_table.get(src)
        if entry is None or entry.conn_id != hdr.conn_id:
            out.append(
                self._log(
                    now,
                    "drop",
                    peer=src,
                    type="CLOSE",
                    conn_id=hdr.conn_id,
                    reason="no receive window with that conn_id",
                )
            )
            return out
        self._set_state(entry, "recv", "close_rx", now, out)
        self._remove_recv(src)
        return out

    def _remove_recv(self, peer: str) -> None:
        self.recv_table.pop(peer, None)
        self._drop_ack_deadline(peer)

    def _expire_conns(self, now: float, out: list[Action]) -> None:
        """conn_expiry: OPEN -> CLOSING after conn_expiry_timeout without activity."""
        timeout = self.config.conn_expiry_timeout
        for side, entry in self._entries():
            if entry.state is ConnState.OPEN and now >= entry.last_active + timeout:
                self._set_state(entry, side, "expired", now, out)
        self._rearm_reaping()

    def _close_conns(self, now: float, out: list[Action]) -> None:
        """conn_close: CLOSING -> CLOSED after conn_close_timeout; a closed sender sends CLOSE."""
        timeout = self.config.conn_close_timeout
        for peer, rentry in list(self.recv_table.items()):
            if rentry.state is ConnState.CLOSING and now >= rentry.last_active + timeout:
                self._set_state(rentry, "recv", "close_timeout", now, out)
                self._remove_recv(peer)
        for peer, sentry in list(self.send_table.items()):
            if sentry.state is ConnState.CLOSING and now >= sentry.last_active + timeout:
                self._set_state(sentry, "send", "close_timeout", now, out)
                del self.send_table[peer]
                out.extend(
                    self._ctrl(
                        "close_tx", peer, now, U3Header(MsgType.CLOSE, conn_id=sentry.conn_id), conn_id=sentry.conn_id
                    )
                )
        self._rearm_reaping()

    def _reaping_from(self, entry: SenderEntry | ReceiverEntry) -> None:
        """Arm the reaping deadline an entry's state calls for. Later activity only postpones it,
        so the deadlines are left early and the handlers set them again from all entries."""
        cfg = self.config
        # As in JGroups, a timeout of 0 disables its step: conn_close_timeout 0 keeps CLOSING
        # entries (and their unacked messages).
        if entry.state is ConnState.OPEN and cfg.conn_expiry_timeout > 0:
            self.timers.lower("conn_expiry", entry.last_active + cfg.conn_expiry_timeout)
        elif entry.state is ConnState.CLOSING and cfg.conn_close_timeout > 0:
            self.timers.lower("conn_close", entry.last_active + cfg.conn_close_timeout)

    def _rearm_reaping(self) -> None:
        cfg = self.config
        entries = self._entries()
        for name, state, timeout in (
            ("conn_expiry", ConnState.OPEN, cfg.conn_expiry_timeout),
            ("conn_close", ConnState.CLOSING, cfg.conn_close_timeout),
        ):
            due = [e.last_active + timeout for _, e in entries if e.state is state] if timeout > 0 else []
            self.timers.set(name, min(due, default=None))

    def _entries(self) -> list[tuple[str, SenderEntry | ReceiverEntry]]:
        """Every connection entry with its side, receivers first (the order reaping goes in)."""
        recv: list[tuple[str, SenderEntry | ReceiverEntry]] = [("recv", e) for e in self.recv_table.values()]
        return recv + [("send", e) for e in self.send_table.values()]
