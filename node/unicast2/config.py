"""UNICAST2 settings, validated. Defaults follow JGroups 3.x where it had one, shortened where a
JGroups default (a 60 s stable_interval) would make a lab run wait for a minute."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from splitbrain.node.errors import SettingError

from ..settings import Settings

# Planted bugs (`mutation:`), each one small change at one spot of protocol.py, found there as
# `_mutant("<name>")`. Never in production.
MUTATIONS: dict[str, str] = {
    "stable_purges_received": "STABLE purges up to the highest received, not delivered: gaps are purged unseen",
    "first_always_new_window": "every first=true message opens a new window, even on its own conn-id (no NOP)",
    "no_send_first_seqno": "a receiver without a usable window drops DATA silently, never asks for the first seqno",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Unicast2Config(Settings):
    OWNER: ClassVar[str] = "UNICAST2"

    # The retransmit task period: a receiver asks for the gaps of its windows (XMIT-REQ).
    xmit_interval: float = 0.5
    # The stable task period: a receiver sends STABLE(highest delivered, highest received) for
    # each window, so the sender purges and resends what lies above the highest received.
    stable_interval: float = 1.0
    # A STABLE for an unchanged window is sent at most this many times in a row (JGroups: 5).
    max_stable_msgs: int = 5
    # Most seqnos asked for in one XMIT-REQ, and most messages resent for one STABLE.
    max_xmit_req_seqnos: int = 8192
    # A receiver keeps messages at most this far above the last delivered; beyond is dropped.
    max_recv_window_seqnos: int = 100_000
    # A connection idle this long is removed on both sides (a goal of the UNICAST2 design, JGRP-942); 0 never.
    conn_expiry_timeout: float = 0.0
    # The UNICAST2 design gives STABLE no conn-id rule: a STABLE of an old window purges the new connection
    # (scenario #6). True checks it, as JGroups did later; a resync by SEND_FIRST_SEQNO keeps the
    # conn-id, so a stale STABLE after one still purges (JGRP-1873/1875) either way.
    stable_checks_conn_id: bool = False
    # The UNICAST2 design's send rule puts the conn-id on every DATA message. False is the wire its scenario
    # #6 was written for: only a first=true message carries it ("#2(conn-id=0)"), and a receiver
    # takes a message without one into whatever window it has for the sender.
    conn_id_in_every_message: bool = True
    # A planted bug by name (one of MUTATIONS), to prove that the checks catch it; None: as designed.
    mutation: str | None = None

    def __post_init__(self) -> None:
        for name in ("xmit_interval", "stable_interval"):
            if getattr(self, name) <= 0:
                raise SettingError(name, f"must be > 0, got {getattr(self, name)!r}")
        if self.conn_expiry_timeout < 0:
            raise SettingError("conn_expiry_timeout", f"must be >= 0, got {self.conn_expiry_timeout!r}")
        for name in ("max_stable_msgs", "max_xmit_req_seqnos", "max_recv_window_seqnos"):
            if getattr(self, name) < 1:
                raise SettingError(name, f"must be >= 1, got {getattr(self, name)!r}")
        if self.mutation is not None and self.mutation not in MUTATIONS:
            raise SettingError("mutation", f"must be one of {', '.join(MUTATIONS)}, got {self.mutation!r}")

    @property
    def recovery_bound_s(self) -> float:
        """How long, both ends up and connected, UNICAST2 may need to deliver what was sent
        before. The worst path without loss: SEND_FIRST_SEQNO and the resent first message (a
        round trip), then the next STABLE gets what came after it resent, then an XMIT-REQ for a
        gap: two stable runs and two retransmit runs; twice that for loss."""
        return 2 * (2 * self.stable_interval + 2 * self.xmit_interval)
