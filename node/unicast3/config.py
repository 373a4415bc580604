"""UNICAST3 settings, validated. Defaults are JGroups' where JGroups has one (JGroups 5.x)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self

from splitbrain.node.errors import SettingError

from ..settings import Settings, coerce

RESYNC_MODES = ("sync", "timestamp", "first_seqno")
# Planted bugs (`mutation:`), to measure that the checkers catch what they must (`splitbrain
# mutants`). Each is one small change at one spot of protocol.py or resync.py, found there as
# `_mutant("<name>")`. Never in production.
MUTATIONS: dict[str, str] = {
    "ack_purges_one_more": "an ACK(n) purges n+1 too: the sender drops a message the receiver never acked",
    "xmit_req_off_by_one": "XMIT-REQ ranges read as half-open: the last seqno of each range is never resent",
    "deliver_in_arrival_order": "a run of deliverable messages is delivered in arrival order, not seqno order",
    "ack_ignores_conn_id": "no conn-id check on ACK: a stale ACK from before a resync purges (JGRP-1875)",
    "no_resend_highest": "the retransmit task never resends the highest-sent message when HA<HS is stuck",
    "ack_highest_received": "ACK carries the highest seqno received, not the highest delivered (gaps acked)",
    "conn_id_ignores_incarnation": "conn-ids from a per-process counter without the incarnation: a restart reuses them",
    "ack_ignores_timestamp": "resync timestamp: an ACK with a stale timestamp still purges (JGRP-1875)",
    "sync_ok_sends_ha": "SYNC-OK carries HA instead of HA+1: the new window expects a purged message",
    "resend_keeps_old_conn_id": "retransmissions keep the conn-id they were first sent with, not the current one",
    "data_ignores_conn_id": "no conn-id check on DATA: a restarted sender's messages land in its old window",
    "first_window_skips_first": "a window created by a first=true message starts after it (its seqno, not seqno-1)",
    "timestamp_ignores_incarnation": "resync timestamp: timestamps restart at 1 after a restart and look stale",
    "first_seqno_resends_highest": "SEND_FIRST_SEQNO answered with HS instead of the lowest unacked message",
}
# Old code of fixed bugs, kept selectable by `mutation:` so the bug museum (scenarios/bugs/) can replay
# them: the SYNC bugs this project found in itself and JGroups' close-without-flush. They
# are not in the mutant hunt (`splitbrain mutants`): each needs an interleaving the chaos set rarely makes.
REGRESSIONS: dict[str, str] = {
    "sync_ok_rekeys_by_prev_only": "bug A: a SYNC-OK naming the window's own conn-id rebuilds it at the sender's HA",
    "sync_first_opens_window": "bug B: resync sync opens a window from a first=true DATA instead of a SYNC",
    "sync_ok_ignores_nonce": "bug C: any SYNC-OK answers the running sync, and only prev conn-id re-keys",
    "closing_skips_flush": "JGRP-1586: a CLOSING send entry is not flushed: its unacked messages are never resent",
}
# Mutants whose bug sits on one resync path, and the `resync:` mode that path needs.
MUTATION_RESYNC: dict[str, str] = {
    "ack_ignores_conn_id": "sync",
    "ack_ignores_timestamp": "timestamp",
    "sync_ok_sends_ha": "sync",
    "resend_keeps_old_conn_id": "sync",
    "timestamp_ignores_incarnation": "timestamp",
    "first_seqno_resends_highest": "timestamp",
    # Since bug B was fixed, resync sync makes every window by SYNC: only the older designs open one
    # from a first=true message.
    "first_window_skips_first": "timestamp",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Unicast3Config(Settings):
    OWNER: ClassVar[str] = "UNICAST3"

    # The retransmit task period: resend of highest-sent, XMIT-REQ, SYNC resends, reaping.
    xmit_interval: float = 0.5
    # Minimum time between two ACKs to one peer; acks in between are merged into the next one.
    # JGroups sends delayed acks from its retransmit task, so its effective interval is
    # xmit_interval; 0 sends an ack at the end of every message or batch.
    ack_min_interval: float = 0.5
    # A batch of at least this many messages is acked at once, interval or not (JGroups: 100).
    ack_threshold: int = 100
    # Most seqnos asked for in one XMIT-REQ (JGroups bounds it in bytes: max_xmit_req_size).
    max_xmit_req_seqnos: int = 8192
    # A receiver keeps messages at most this far above the last one delivered; those beyond are
    # dropped and asked for again later, so a hostile seqno (2^62) costs no memory. JGroups'
    # receive table starts with room for 100 000 (xmit_table_num_rows x xmit_table_msgs_per_row).
    max_recv_window_seqnos: int = 100_000
    # OPEN -> CLOSING after this long idle; 0 disables reaping (JGroups: 2 min).
    conn_expiry_timeout: float = 120.0
    # CLOSING -> CLOSED (entry removed, CLOSE sent) after this long; 0 never removes (JGroups: 4 min).
    conn_close_timeout: float = 240.0
    # How a receiver without a usable window gets back in step with a sender.
    resync: str = "sync"
    # sync: a SYNC / SYNC-OK / SYNC-ACK exchange not finished by then is abandoned.
    sync_timeout: float = 5.0
    # timestamp: at most one SEND_FIRST_SEQNO per sender per this interval (JGroups: 2 s).
    sync_min_interval: float = 2.0
    # Deliberately broken variants, to prove that the checkers catch real bugs. Never in production.
    mutation: str | None = None

    def __post_init__(self) -> None:
        for name in ("xmit_interval",):
            if getattr(self, name) <= 0:
                raise SettingError(name, f"must be > 0, got {getattr(self, name)!r}")
        for name in ("ack_min_interval", "conn_expiry_timeout", "conn_close_timeout", "sync_min_interval"):
            if getattr(self, name) < 0:
                raise SettingError(name, f"must be >= 0, got {getattr(self, name)!r}")
        if self.sync_timeout <= 0:
            raise SettingError("sync_timeout", f"must be > 0, got {self.sync_timeout!r}")
        for name in ("ack_threshold", "max_xmit_req_seqnos", "max_recv_window_seqnos"):
            if getattr(self, name) < 1:
                raise SettingError(name, f"must be >= 1, got {getattr(self, name)!r}")
        if self.resync not in RESYNC_MODES:
            raise SettingError("resync", f"must be one of {', '.join(RESYNC_MODES)}, got {self.resync!r}")
        if self.mutation is not None and self.mutation not in MUTATIONS and self.mutation not in REGRESSIONS:
            known = ", ".join((*MUTATIONS, *REGRESSIONS))
            raise SettingError("mutation", f"must be one of {known}, got {self.mutation!r}")

    @property
    def recovery_bound_s(self) -> float:
        """How long, with both ends up and connected, this protocol may need to deliver a message
        sent before (the checkers' no_loss owes a message only after this long). The worst path
        without loss: the sender resends its highest message after two retransmit runs, a SYNC
        round trip rebuilds the receiver's window, the receiver asks for the gap after two more
        runs: four runs; twice that for margin and loss, plus one ack interval. `timestamp` may
        wait `sync_min_interval` before its SEND_FIRST_SEQNO."""
        bound = 8 * self.xmit_interval + self.ack_min_interval
        if self.resync == "timestamp":
            bound += self.sync_min_interval
        return bound


U3_PREFIX = "unicast3_"


class OverUnicast3:
    """The settings of a layer that runs over UNICAST3 (NAKACK2, MCAST), mixed into its frozen
    dataclass, whose field `unicast3` holds UNICAST3's: one flat `config:` mapping holds both.
    A key the layer does not know is UNICAST3's; the UNICAST3 keys in `PREFIXED` (names the layer
    also has) carry `unicast3_`. `mutation` is the layer's own (the UNICAST3 under it runs
    unmutated). Errors name the key as the scenario spells it."""

    __slots__ = ()
    OWNER: ClassVar[str]  # "NAKACK2" in "unknown NAKACK2/UNICAST3 setting"
    PREFIXED: ClassVar[frozenset[str]]
    unicast3: Unicast3Config

    @classmethod
    def own_keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name != "unicast3")  # type: ignore[arg-type]  # a dataclass

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Self:
        """Build from a scenario's flat `config:` mapping; errors name the key."""
        defaults = cls(unicast3=Unicast3Config())  # type: ignore[call-arg]  # a dataclass
        own: dict[str, Any] = {}
        u3: dict[str, Any] = {}
        for key, value in values.items():
            key = str(key)
            if key == "mutation":
                if value is not None and not isinstance(value, str):
                    raise SettingError(key, f"expected a name, got {value!r}")
                own[key] = value
            elif key in cls.own_keys():
                own[key] = coerce(key, value, getattr(defaults, key))
            elif key.startswith(U3_PREFIX):
                u3[key[len(U3_PREFIX) :]] = value
            else:
                u3[key] = value
        try:
            unicast3 = Unicast3Config.from_dict(u3)
        except SettingError as exc:
            key = U3_PREFIX + exc.key if exc.key in cls.PREFIXED else exc.key
            known = ", ".join(sorted(defaults.as_dict())) if "unknown" in exc.message else None
            raise SettingError(
                key, f"unknown {cls.OWNER}/UNICAST3 setting (known: {known})" if known else exc.message
            ) from None
        return cls(unicast3=unicast3, **own)  # type: ignore[call-arg]  # a dataclass

    def updated(self, values: dict[str, Any]) -> Self:
        """A copy with some settings changed (run-time reconfiguration), validated like from_dict."""
        return type(self).from_dict({**self.as_dict(), **values})

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in self.own_keys()}
        if out.get("mutation") is None:
            out.pop("mutation", None)
        for key, value in self.unicast3.as_dict().items():
            if key == "mutation" and value is None:
                continue
            out[U3_PREFIX + key if key in self.PREFIXED else key] = value
        return out
