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


def node_names(n: int) -> tuple[str, ...]:
    """A, B, ... Z, AA, AB, ... as scenario files number nodes."""
    return tuple(chr(65 + i) if i < 26 else chr(65 + i // 26 - 1) + chr(65 + i % 26) for i in range(n))


def vocabulary(protocol: str, config: Mapping[str, Any], nodes: int) -> Vocabulary:
    """The vocabulary of `protocol` with `config` over `nodes` nodes (ValueError: unknown protocol,
    node.errors.SettingError: a bad setting, its key named)."""
    from splitbrain.node import protocols

    spec = protocols.get(protocol)
    if spec.membership:
        raise ValueError(f"protocol: {protocol!r} is a membership protocol, not a reliable-delivery one")
    spec.config(config)
    from splitbrain.node.compose import recovery_bound_s

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
        settle_s=max(MIN_SETTLE_S, round(recovery_bound_s(protocol, dict(config), "static") + 1.0, 2)),
    )


def _sync_accepted(protocol: str, config: Mapping[str, Any]) -> bool:
    from splitbrain.node.compose import refusal
    from splitbrain.node.layer import SyncPeer

    return refusal(protocol, dict(config), SyncPeer(peer="B"), random.Random(0)) is None
