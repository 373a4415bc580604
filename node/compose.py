"""Build a node's protocol stack from protocol names and their settings, through the registry.

The same function serves the simulator and the asyncio runtime, so both run the same objects.
A stack is a list of names, bottom to top, such as ["faults", "unicast3"] (later
["faults", "nakack2", "unicast3", "gms"]): "faults" is the in-process fault layer, every other
name a registered protocol (node/protocols.py) contributing its layers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from . import protocols
from .faultlayer import FaultLayer
from .layer import Command, Layer
from .stack import Stack

FAULTS = "faults"
R = TypeVar("R", bound=protocols.Rng)


def build_stack(
    name: str,
    protocol: str,
    config: Mapping[str, Any] | None,
    rng: protocols.Rng,
    incarnation: int = 0,
    faults: bool = True,
) -> Stack:
    """A stack for node `name` running one protocol over the fault layer (unless faults=False).
    `config` is validated by the protocol; errors name the key.

    `rng` is the node's seeded random.Random; each layer gets its own stream derived from it so
    adding a fault rule does not change the protocol's random choices.
    """
    names = [FAULTS, protocol] if faults else [protocol]
    return compose(name, names, {protocol: config or {}}, rng, incarnation)


def compose(
    name: str, names: Sequence[str], configs: Mapping[str, Mapping[str, Any]], rng: protocols.Rng, incarnation: int = 0
) -> Stack:
    """A stack of the named layers, bottom first; `configs` maps a protocol name to its settings."""
    layers: list[Layer] = []
    for entry in names:
        if entry == FAULTS:
            layers.append(FaultLayer(name, _child(rng)))
            continue
        spec = protocols.get(entry)
        layers.extend(spec.layers(name, spec.config(configs.get(entry) or {}), _child(rng), incarnation))
    return Stack(name, layers)


def protocol_layers(stack: Stack) -> list[Layer]:
    """The layers of a stack that belong to registered protocols (not the fault layer)."""
    return [layer for layer in stack.layers if not isinstance(layer, FaultLayer)]


def recovery_bound_s(protocol: str, config: Mapping[str, Any] | None) -> float:
    """How long a protocol needs, with both ends up and connected, to deliver what was sent before
    (see Unicast3Config.recovery_bound_s). `config` is validated; errors name the key."""
    spec = protocols.get(protocol)
    return spec.config(config or {}).recovery_bound_s


def refusal(protocol: str, config: Mapping[str, Any] | None, cmd: Command, rng: protocols.Rng) -> str | None:
    """Why a node of `protocol` with these settings would refuse an admin command (the layers'
    own answer, asked of a throwaway stack built with `rng`), or None; lets a scenario be
    rejected before it runs."""
    stack = build_stack("check", protocol, config, rng, faults=False)
    reasons = [why for why in (layer.refusal(cmd) for layer in stack.layers) if why]
    return "; ".join(reasons) or None


def _child(rng: R) -> R:
    return type(rng)(rng.getrandbits(64))
