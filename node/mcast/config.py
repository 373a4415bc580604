"""MCAST settings, validated. Defaults are JGroups NAKACK4's (the shipped form of the MCAST design) where the
seed is silent: `capacity` 16384 messages (FixedBuffer; 2048 in the first release), `ack_threshold`
capacity / 4, `xmit_interval` 1 s (ReliableMulticast), one resend of the highest seqno.

An MCAST stack also runs UNICAST3 for unicasts (as NAKACK2's does), so one flat `config:` mapping
feeds both: MCAST takes its own keys below and hands every other key to UNICAST3 (which names any it
does not know). `xmit_interval` and `ack_threshold` are MCAST's; UNICAST3's are
`unicast3_xmit_interval` and `unicast3_ack_threshold`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from splitbrain.node.errors import SettingError

from ..unicast3.config import OverUnicast3, Unicast3Config

# Planted bugs (`mutation:`), to measure that the checkers and metrics catch what they must.
MUTATIONS = {
    "seqno_outside_lock": (
        "the seqno is incremented outside the send window's lock: concurrent senders put numbered "
        "messages on the wire out of order, and receivers ask for spurious retransmissions"
    ),
    "skip_range": "every receiver silently skips seqnos 100-119 of each other sender while its window moves past "
    "them (they count as delivered, and are acked)",
    "inflated_digest": "the join and merge digest reports 3 more than known for every sender: a joiner's windows "
    "start 3 seqnos too high and never deliver the 3 multicasts that follow",
    "unsolicited_resend": "every retransmit run resends every unacked message of the send window to every member, "
    "unasked",
}
# skip_range: the seqnos every receiver skips.
SKIPPED_SEQNOS = range(100, 120)
# inflated_digest: how far above the truth the digest reports each sender.
DIGEST_INFLATION = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class McastConfig(OverUnicast3):
    OWNER: ClassVar[str] = "MCAST"
    # UNICAST3 keys this layer also has: a scenario names UNICAST3's with the unicast3_ prefix.
    PREFIXED: ClassVar[frozenset[str]] = frozenset({"xmit_interval", "ack_threshold"})

    # Messages in each window (the ring buffer's size). A sender blocks when S - low >= capacity.
    capacity: int = 16384
    # A receiver acks after this many deliveries from one sender (0: capacity // 4, NAKACK4's).
    ack_threshold: int = 0
    # The retransmit task's period: XMIT-REQs for gaps, acks not sent yet, HIGHEST_SEQNO.
    xmit_interval: float = 1.0
    # A sender whose acks did not move for a retransmit run while it has unacked messages
    # multicasts its highest seqno to the members behind, at most this many times per seqno
    # (JGroups' resend_last_seqno), so a receiver that lost the last message asks for it.
    resend_last_seqno_max_times: int = 1
    # Most seqnos asked for in one XMIT-REQ.
    max_xmit_req_size: int = 8192
    mutation: str | None = None
    unicast3: Unicast3Config = field(default_factory=Unicast3Config)

    def __post_init__(self) -> None:
        if self.capacity < 2:
            raise SettingError("capacity", f"must be >= 2, got {self.capacity!r}")
        if not 0 <= self.ack_threshold <= self.capacity:
            raise SettingError("ack_threshold", f"must be between 0 and capacity, got {self.ack_threshold!r}")
        if self.xmit_interval <= 0:
            raise SettingError("xmit_interval", f"must be > 0 (MCAST always retransmits), got {self.xmit_interval!r}")
        if self.resend_last_seqno_max_times < 0:
            raise SettingError("resend_last_seqno_max_times", f"must be >= 0, got {self.resend_last_seqno_max_times!r}")
        if self.max_xmit_req_size < 1:
            raise SettingError("max_xmit_req_size", f"must be >= 1, got {self.max_xmit_req_size!r}")
        if self.mutation is not None and self.mutation not in MUTATIONS:
            raise SettingError("mutation", f"must be one of {', '.join(MUTATIONS)}, got {self.mutation!r}")

    @property
    def acks_every(self) -> int:
        return self.ack_threshold or max(1, self.capacity // 4)

    @property
    def recovery_bound_s(self) -> float:
        """How long, with every member up and connected, a multicast may take to be delivered
        everywhere: a gap is asked for at the next retransmit run, a lost last message is
        announced after two runs without ack progress; eight runs leave room for lost requests."""
        return 8 * self.xmit_interval + 2.0
