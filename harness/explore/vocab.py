"""What the nemesis may use against one protocol: read from the protocol registry, nothing more.

The nemesis (harness.explore.nemesis) is pure and knows no protocol; this module asks the registry
(node.protocols) the few facts it needs: the message types a typed drop may name, whether streams
multicast, and whether the protocol's nodes take the admin SYNC operation with these settings.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MIN_SETTLE_S = 8.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Vocabulary:
    """The fault vocabulary for one explored configuration."""

    nodes: tuple[str, ...]
    message_types: tuple[str, ...]  # the protocol's own, as its spec lists them
    multicast: bool
    views: bool = True  # views may be injected at one node (membership is static, unicast)
    restarts: bool = True  # kills and restarts are within the protocol's contract
    admin_sync: bool = False  # the admin SYNC operation is accepted with these settings
    # How long a run goes on after the final heal: at least the protocol's recovery bound for these
    # settings, so that whatever no_loss owes at the end had the time the protocol may take.
    settle_s: float = 8.0
    # The fault kinds a user restricted the nemesis to (`--faults`); None: every kind above allows.
    only: frozenset[str] | None = None
    # Streams between two nodes may be drawn beside multicast ones (a multicast protocol whose
    # nodes also send point-to-point, as an external implementation's stack does).
    pairs: bool = False
    # Run lengths to draw from (None: the nemesis's own); live runs take wall time, so shorter.
    durations: tuple[float, ...] | None = None


def node_names(n: int) -> tuple[str, ...]:
    """A, B, ... Z, AA, AB, ... as scenario files number nodes."""
    return tuple(chr(65 + i) if i < 26 else chr(65 + i // 26 - 1) + chr(65 + i % 26) for i in range(n))


# Live runs (real processes, wall time) draw from these run lengths.
LIVE_DURATIONS_S = (4.0, 6.0, 8.0)


def vocabulary(
    protocol: str,
    config: Mapping[str, Any],
    nodes: int,
    *,
    live: bool = False,
    recovery_bound_s: float | None = None,
) -> Vocabulary:
    """The vocabulary of `protocol` with `config` over `nodes` nodes (ValueError: unknown protocol,
    node.errors.SettingError: a bad setting, its key named). `live`: runs go to real processes.
    An external implementation (a real JGroups stack) has no settings of splitbrain's: its
    `recovery_bound_s` is the user's, and its message types and multicast come from its spec."""
    from splitbrain.node import protocols

    spec = protocols.get(protocol)
    if spec.membership:
        raise ValueError(f"protocol: {protocol!r} is a membership protocol, not a reliable-delivery one")
    durations = LIVE_DURATIONS_S if live else None
    if spec.external:
        bound = recovery_bound_s if recovery_bound_s is not None else 8.0
        return Vocabulary(
            nodes=node_names(nodes),
            message_types=tuple(spec.message_types),
            multicast=spec.multicast,
            views=False,  # its own GMS makes the views
            restarts=True,  # a restarted JVM is a new member, which its GMS admits
            admin_sync=False,  # it takes no admin SYNC
            settle_s=max(MIN_SETTLE_S, bound + 1.0),
            pairs=True,  # its stack carries unicasts beside multicasts
            durations=durations,
        )
    spec.config(config)
    from splitbrain.node.compose import recovery_bound_s as bound_of

    return Vocabulary(
        nodes=node_names(nodes),
        message_types=tuple(spec.message_types),
        multicast=spec.multicast,
        # A multicast protocol's view is the group's: one node's injected view is outside its
        # contract (views come agreed from a membership protocol).
        views=not spec.multicast,
        # A protocol whose spec says restarts need a membership protocol is not restarted.
        restarts=spec.chaos.restarts if spec.chaos is not None else True,
        admin_sync=_sync_accepted(protocol, config),
        settle_s=max(MIN_SETTLE_S, round(bound_of(protocol, dict(config), "static") + 1.0, 2)),
        durations=durations,
    )


def _sync_accepted(protocol: str, config: Mapping[str, Any]) -> bool:
    from splitbrain.node.compose import refusal
    from splitbrain.node.layer import SyncPeer

    return refusal(protocol, dict(config), SyncPeer(peer="B"), random.Random(0)) is None
