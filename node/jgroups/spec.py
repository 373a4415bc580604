"""JGroups' entry in the protocol registry (node/protocols.py): an external implementation.

The protocols run inside the JGroups jar, in the node process of java/; this spec only tells the
scenario parser and the checkers what such a node sends and reports. Its message types are the
names the node's fault protocol gives JGroups headers (java/splitbrain/jgroups/FaultProtocol.java).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import SettingError
from ..layer import Layer
from ..protocols import ProtocolSpec, Rng

# UNICAST2's header types, pbcast.NAKACK's, then the other protocols of a stack by protocol.
MESSAGE_TYPES = (
    "DATA",
    "XMIT_REQ",
    "SEND_FIRST_SEQNO",
    "STABLE",
    "NAKACK_MSG",
    "NAKACK_XMIT_REQ",
    "NAKACK_XMIT_RSP",
    "STABLE_GOSSIP",
    "GMS",
    "HEARTBEAT",
    "DISCOVERY",
    "VERIFY_SUSPECT",
)


@dataclass(frozen=True)
class JGroupsConfig:
    """A JGroups node has no splitbrain settings: its stack is its configuration (scenario key
    `jgroups.stack`), and its scenarios give their own recovery_bound."""

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> JGroupsConfig:
        for key in values:
            raise SettingError(key, "a JGroups node's settings are its stack (scenario key jgroups.stack)")
        return cls()

    def updated(self, values: dict[str, Any]) -> JGroupsConfig:
        return self.from_dict(values)

    def as_dict(self) -> dict[str, Any]:
        return {}

    @property
    def recovery_bound_s(self) -> float:
        # Never used: a JGroups scenario must state its recovery_bound (harness/scenario/document.py).
        return 0.0


def _layers(name: str, config: Any, rng: Rng, incarnation: int) -> list[Layer]:
    raise SettingError("protocol", "jgroups runs as real JGroups nodes only (--backend local or docker)")


SPEC = ProtocolSpec(
    name="jgroups",
    summary="JGroups 2.12 itself (the jar), one JVM per node: UNICAST2 unicasts, pbcast.NAKACK multicasts, GMS",
    config=JGroupsConfig.from_dict,
    layers=_layers,
    message_types=MESSAGE_TYPES,
    multicast=True,
    default_checks=("fifo", "no_duplicates", "no_loss", "views_agree"),
    external=True,
    reports_windows=False,
)
