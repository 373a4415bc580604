"""Settings of the original UNICAST, validated. JGroups 2.x retransmitted each unacked message on
its own backoff schedule (the `timeout` property, a list of growing intervals); here one task resends
every message unacked for `xmit_interval`, which keeps the design (the sender resends until the
ACK comes) with one named deadline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from splitbrain.node.errors import SettingError

from ..settings import Settings


@dataclass(frozen=True, slots=True, kw_only=True)
class UnicastConfig(Settings):
    OWNER: ClassVar[str] = "UNICAST"

    # The retransmit task period: a message unacked this long is sent again.
    xmit_interval: float = 0.5
    # A receiver keeps messages at most this far above the last delivered; beyond is dropped
    # unacked (JGroups had no bound; a hostile seqno must not fill memory).
    max_recv_window_seqnos: int = 100_000

    def __post_init__(self) -> None:
        if self.xmit_interval <= 0:
            raise SettingError("xmit_interval", f"must be > 0, got {self.xmit_interval!r}")
        if self.max_recv_window_seqnos < 1:
            raise SettingError("max_recv_window_seqnos", f"must be >= 1, got {self.max_recv_window_seqnos!r}")

    @property
    def recovery_bound_s(self) -> float:
        """How long, both ends up and connected, a message may take to be delivered: a resend
        every xmit_interval (one run late at most), with room for several losses in a row."""
        return 8 * self.xmit_interval
