"""NAKACK2 settings, validated. Defaults are JGroups' (NAKACK2 and STABLE, JGroups 5.x) where it
has one; tests scale the STABLE interval down and say so.

A NAKACK2 stack also runs UNICAST3 for unicasts (retransmission requests and membership traffic,
as in JGroups), so one flat `config:` mapping feeds both: NAKACK2 takes its own keys below and
hands every other key to UNICAST3 (which names any it does not know). `xmit_interval` is
NAKACK2's; UNICAST3's own retransmit period is `unicast3_xmit_interval`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from splitbrain.node.errors import SettingError

from ..unicast3.config import OverUnicast3, Unicast3Config

# Planted bugs (`mutation:`), to measure that the checkers catch what they must (`splitbrain
# mutants --protocol nakack2`). Each is one small change at one spot of protocol.py, found there as
# `_mutant("<name>")` on a control-message path, or (the one on the per-message path) a method
# swapped when the layer is built. Never in production.
MUTATIONS: dict[str, str] = {
    "stable_purges_above_min": "STABLE purges up to the highest digest of the view, not the lowest: a member "
    "missing a message can no longer get it retransmitted",
    "digest_reports_highest": "the STABLE digest carries the highest seqno received, not the highest delivered: "
    "the others purge what this member is still missing",
    "xmit_req_off_by_one": "XMIT-REQ ranges read as half-open: the last seqno of each range is never resent",
    "xmit_rsp_delivered_again": "no duplicate check on the retransmission path: an XMIT_RSP for a message "
    "already delivered is delivered again",
    "deliver_in_arrival_order": "a run of messages a gap held back is delivered in arrival order, not seqno order",
    "stable_ignores_highest": "a STABLE digest showing more than a table knows does not raise its highest: a lost "
    "last message is found only by the one HIGHEST_SEQNO",
    "skip_range": "every receiver silently skips seqnos 100-119 of each other sender while its window moves past "
    "them (they count as delivered, in the STABLE digest too)",
    "inflated_digest": "the join and merge digest reports 3 more than known for every sender: a joiner (or a merged "
    "member) starts 3 seqnos too high and never delivers the 3 multicasts that follow",
    "unsolicited_resend": "every retransmit run resends every held own multicast to every member, unasked",
}
# skip_range: the seqnos every receiver skips.
SKIPPED_SEQNOS = range(100, 120)
# inflated_digest: how far above the truth the digest reports each sender.
DIGEST_INFLATION = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Nakack2Config(OverUnicast3):
    OWNER: ClassVar[str] = "NAKACK2"
    # UNICAST3 keys this layer also has: a scenario names UNICAST3's with the unicast3_ prefix.
    PREFIXED: ClassVar[frozenset[str]] = frozenset({"xmit_interval"})

    # The retransmit task's period. <= 0 (meant for TCP, the NAKACK2 design): no retransmit task, STABLE
    # triggers no retransmission, no last-seqno-sender, become_server_queue unbounded.
    xmit_interval: float = 1.0
    # Most seqnos asked for in one XMIT-REQ (JGroups bounds it in bytes; the issue in seqnos).
    max_xmit_req_size: int = 1024
    # A joiner keeps at most this many multicasts received before it becomes a server (JGroups'
    # BoundedList: the oldest go first); unbounded when xmit_interval <= 0.
    become_server_queue_size: int = 50
    # The NAKACK2 design's fix: without retransmission the queue is unbounded. False keeps it bounded, which
    # reproduces the stuck window the design describes (a gap nothing fills).
    become_server_queue_unbounded_without_xmit: bool = True
    # STABLE: a digest round every stable_interval seconds, or sooner after stable_max_bytes of
    # multicast payload received (JGroups: desired_avg_gossip about 50 s, max_bytes 2 MB).
    stable_interval: float = 50.0
    stable_max_bytes: int = 2_000_000
    # The last-seqno-sender: a sender whose highest seqno did not move for a retransmit run
    # multicasts it (HIGHEST_SEQNO) up to this many times, so a lost last message is found.
    resend_last_seqno_max_times: int = 1
    # A receiver keeps a multicast at most this far above its highest delivered from that sender
    # (a hostile seqno must cost no memory); those beyond are asked for again later.
    max_recv_window_seqnos: int = 100_000
    # xmit_interval <= 0 needs a transport and layers below that never drop (TCP, no in-process
    # drops). The node refuses anything else unless this says the run reproduces that on purpose.
    allow_unsafe: bool = False
    # A planted bug (MUTATIONS), fixed when the layer is built.
    mutation: str | None = None
    # UNICAST3's settings (every key NAKACK2 does not know, and unicast3_xmit_interval).
    unicast3: Unicast3Config = field(default_factory=Unicast3Config)

    def __post_init__(self) -> None:
        for name in ("max_xmit_req_size", "become_server_queue_size", "stable_max_bytes", "max_recv_window_seqnos"):
            if getattr(self, name) < 1:
                raise SettingError(name, f"must be >= 1, got {getattr(self, name)!r}")
        if self.stable_interval <= 0:
            raise SettingError("stable_interval", f"must be > 0, got {self.stable_interval!r}")
        if self.resend_last_seqno_max_times < 0:
            raise SettingError("resend_last_seqno_max_times", f"must be >= 0, got {self.resend_last_seqno_max_times!r}")
        if self.mutation is not None and self.mutation not in MUTATIONS:
            raise SettingError("mutation", f"must be one of {', '.join(MUTATIONS)}, got {self.mutation!r}")

    @property
    def retransmission(self) -> bool:
        return self.xmit_interval > 0

    @property
    def queue_bounded(self) -> bool:
        return self.retransmission or not self.become_server_queue_unbounded_without_xmit

    @property
    def recovery_bound_s(self) -> float:
        """How long, with every member up and connected, a multicast may take to be delivered
        everywhere. With retransmission: a gap is asked for within two retransmit runs and a lost
        last message is announced by the last-seqno-sender or, at worst, by the next STABLE
        round: eight runs plus two STABLE intervals. Without: nothing repairs, so only the
        transport's own delay counts (a generous 2 s)."""
        if self.retransmission:
            return 8 * self.xmit_interval + 2 * self.stable_interval
        return 2.0
