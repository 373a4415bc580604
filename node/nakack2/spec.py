"""NAKACK2's entry in the protocol registry (node/protocols.py).

A NAKACK2 stack is [NAKACK2, UNICAST3], bottom first, as in JGroups: NAKACK2 multicasts and
UNICAST3 carries unicasts (the application's, and later GMS traffic). The two layers' events are
told apart by `proto`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..layer import Action, Layer, SetConfig
from ..protocols import ChaosSet, ProtocolSpec, Rng, retransmission_sent
from ..unicast3.config import U3_PREFIX
from ..unicast3.header import MsgType as U3MsgType
from ..unicast3.protocol import Unicast3
from .config import MUTATIONS, Nakack2Config
from .fuzz import fuzz_header
from .header import CODEC, MsgType
from .protocol import Nakack2


class StackedUnicast3(Unicast3):
    """UNICAST3 under a NAKACK2 stack's flat settings: run-time changes name NAKACK2's keys
    (xmit_interval is NAKACK2's) or UNICAST3's with the unicast3_ prefix."""

    def command(self, cmd: Any, now: float) -> list[Action]:
        if isinstance(cmd, SetConfig):
            own = set(Nakack2Config.own_keys())
            values = {
                (k[len(U3_PREFIX) :] if k.startswith(U3_PREFIX) else k): v
                for k, v in cmd.values.items()
                if k not in own
            }
            cmd = SetConfig(values=values)
        return super().command(cmd, now)


def _unsafe(config: Nakack2Config, transport: str, drops_below: bool) -> list[tuple[str, str]]:
    """The NAKACK2 design: without retransmission nothing below NAKACK2 may drop a message, so UDP (which
    loses datagrams) and in-process drops are refused, unless allow_unsafe says the run
    reproduces that failure on purpose."""
    if config.retransmission or config.allow_unsafe:
        return []
    out = []
    if transport == "udp":
        out.append(
            (
                "xmit_interval",
                f"{config.xmit_interval:g} (no retransmission) needs transport: tcp, which never drops; "
                "UDP loses datagrams and nothing would resend them (set allow_unsafe: true to reproduce that)",
            )
        )
    if drops_below:
        out.append(
            (
                "xmit_interval",
                f"{config.xmit_interval:g} (no retransmission) with in-process drops below NAKACK2: a dropped "
                "multicast is never resent (set allow_unsafe: true to reproduce that, as LastMessageDroppedTest)",
            )
        )
    return out


def _resync_traffic(ev: Mapping[str, Any]) -> bool:
    """What gets a member back in step with a sender: the multicasts a sender sends a joiner after
    the join digest (its catch-up). The digest itself rides on GMS's join and merge messages."""
    return ev.get("kind") == "retransmit" and ev.get("reason") == "catch_up"


def _ack_bound(config: Nakack2Config) -> tuple[str, float]:
    """A sender sees its multicasts acknowledged only by STABLE: every member's digest round comes
    within one stable_interval of the last delivery, and the sender's within another."""
    return (f"stable_interval {config.stable_interval:g}s (two STABLE rounds)", 2 * config.stable_interval)


def _layers(name: str, config: Nakack2Config, rng: Rng, incarnation: int) -> list[Layer]:
    return [Nakack2(name, config, rng), StackedUnicast3(name, config.unicast3, rng, incarnation)]


SPEC = ProtocolSpec(
    name="nakack2",
    summary="reliable multicast, FIFO per sender, NAK retransmission and STABLE, over UNICAST3",
    config=Nakack2Config.from_dict,
    layers=_layers,
    header=CODEC,
    message_types=tuple(t.name for t in MsgType) + tuple(t.name for t in U3MsgType),
    event_kinds={
        "stable_tx": "a STABLE digest multicast (digest = sender:highest delivered, members)",
        "stable_rx": "a STABLE digest received (peer, digest)",
        "highest_seqno_tx": "the last-seqno-sender multicast this member's highest seqno",
        "highest_seqno_rx": "a sender's HIGHEST_SEQNO received (peer, seqno)",
        "become_server": "a joiner became a server and replayed its become_server_queue (count)",
        "config_change": "a run-time setting changed (detail = key=value, ...)",
    },
    per_message_kinds=("stable_rx", "highest_seqno_rx"),
    overhead_kinds={"stables": "stable_tx", "highest_seqnos": "highest_seqno_tx"},
    multicast=True,
    fuzz=fuzz_header,
    mutations=MUTATIONS,
    chaos_drop_types=("MSG", "MSG", "NAK_XMIT_REQ", "XMIT_RSP", "STABLE", "HIGHEST_SEQNO", "DATA", "ACK"),
    variant_key="xmit_interval",
    unsafe=_unsafe,
    lossless_below=lambda config: not config.retransmission,
    xmit_traffic=retransmission_sent,
    resync_traffic=_resync_traffic,
    ack_bound=_ack_bound,
    # No restarts under static views: a restarted member rejoins without a join digest, and
    # NAKACK2 keeps no incarnation, so its new seqnos look like old ones (a restart needs GMS: the
    # membership seeds restart and split members under GMS).
    chaos=ChaosSet(
        draws={"xmit_interval": (0.2, 0.5), "stable_interval": (1.0, 2.0)},
        restarts=False,
        lossless_share=0.25,
        membership="gms",
        membership_share=0.3,
    ),
)
