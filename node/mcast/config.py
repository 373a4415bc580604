"""MCAST settings, validated. Defaults are JGroups NAKACK4's (the shipped form of seed 004) where the
seed is silent: `capacity` 16384 messages (FixedBuffer; 2048 in the first release), `ack_threshold`
capacity / 4, `xmit_interval` 1 s (ReliableMulticast), one resend of the highest seqno.

An MCAST stack also runs UNICAST3 for unicasts (as NAKACK2's does), so one flat `config:` mapping
feeds both: MCAST takes its own keys below and hands every other key to UNICAST3 (which names any it
does not know). `xmit_interval` and `ack_threshold` are MCAST's; UNICAST3's are
`unicast3_xmit_interval` and `unicast3_ack_threshold`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from node.errors import SettingError

from ..unicast3.config import Unicast3Config, _coerce

U3_PREFIX = "unicast3_"

# Planted bugs (`mutation:`), to measure that the checkers and metrics catch what they must.
MUTATIONS = {
    "seqno_outside_lock": (
        "the seqno is incremented outside the send window's lock: concurrent senders put numbered "
        "messages on the wire out of order, and receivers ask for spurious retransmissions (seed 004, Misc)"
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
class McastConfig:
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

    @classmethod
    def own_keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name != "unicast3")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> McastConfig:
        """Build from a scenario's flat `config:` mapping; errors name the key."""
        defaults = cls(unicast3=Unicast3Config())
        own: dict[str, Any] = {}
        u3: dict[str, Any] = {}
        for key, value in values.items():
            key = str(key)
            if key == "mutation":
                if value is not None and not isinstance(value, str):
                    raise SettingError(key, f"expected a name, got {value!r}")
                own[key] = value
            elif key in cls.own_keys():
                own[key] = _coerce(key, value, getattr(defaults, key))
            elif key.startswith(U3_PREFIX):
                u3[key[len(U3_PREFIX) :]] = value
            else:
                u3[key] = value
        try:
            unicast3 = Unicast3Config.from_dict(u3)
        except SettingError as exc:
            known = ", ".join(sorted(cls(unicast3=Unicast3Config()).as_dict())) if "unknown" in exc.message else None
            key = U3_PREFIX + exc.key if exc.key in cls.own_keys() else exc.key
            raise SettingError(
                key, f"unknown MCAST/UNICAST3 setting (known: {known})" if known else exc.message
            ) from None
        return cls(unicast3=unicast3, **own)

    def updated(self, values: dict[str, Any]) -> McastConfig:
        """A copy with some settings changed (run-time reconfiguration), validated like from_dict."""
        return McastConfig.from_dict({**self.as_dict(), **values})

    @property
    def recovery_bound_s(self) -> float:
        """How long, with every member up and connected, a multicast may take to be delivered
        everywhere: a gap is asked for at the next retransmit run, a lost last message is
        announced after two runs without ack progress; eight runs leave room for lost requests."""
        return 8 * self.xmit_interval + 2.0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in self.own_keys()}
        if out.get("mutation") is None:
            out.pop("mutation", None)
        for key, value in self.unicast3.as_dict().items():
            if key == "mutation" and value is None:
                continue
            # UNICAST3's keys that MCAST also has (xmit_interval, ack_threshold) carry the prefix.
            out[U3_PREFIX + key if key in self.own_keys() else key] = value
        return out
