"""Build a node's protocol stack from a protocol name and its settings.

The same function serves the simulator and the asyncio runtime, so both run the same objects.
Layer order, bottom to top: in-process fault layer, reliability protocol (UNICAST3 now; UNICAST2,
NAKACK2, MCAST and GMS slot in here as they arrive).
"""

from __future__ import annotations

from .faultlayer import FaultLayer
from .stack import Stack
from .unicast3 import Unicast3, Unicast3Config

PROTOCOLS = ("unicast3",)


def build_stack(name: str, protocol: str, config: dict, rng, incarnation: int = 0, faults: bool = True) -> Stack:
    """A stack for node `name`. `config` is validated by the protocol; errors name the key.

    `rng` is the node's seeded random.Random; each layer gets its own stream derived from it so
    adding a fault rule does not change the protocol's random choices.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol: {protocol!r} is not implemented (available: {', '.join(PROTOCOLS)})")
    layers = []
    if faults:
        layers.append(FaultLayer(name, _child(rng)))
    layers.append(Unicast3(name, Unicast3Config.from_dict(config or {}), _child(rng), incarnation))
    return Stack(name, layers)


def recovery_bound_s(protocol: str, config: dict) -> float:
    """How long a protocol needs, with both ends up and connected, to deliver what was sent before
    (see Unicast3Config.recovery_bound_s). `config` is validated; errors name the key."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol: {protocol!r} is not implemented (available: {', '.join(PROTOCOLS)})")
    return Unicast3Config.from_dict(config or {}).recovery_bound_s


def _child(rng):
    return type(rng)(rng.getrandbits(64))
