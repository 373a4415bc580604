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
STATIC = "static"  # membership: views only from injections (ViewChange commands), no protocol
R = TypeVar("R", bound=protocols.Rng)


def build_stack(
    name: str,
    protocol: str,
    config: Mapping[str, Any] | None,
    rng: protocols.Rng,
    incarnation: int = 0,
    faults: bool = True,
    membership: str = STATIC,
) -> Stack:
    """A stack for node `name` running one protocol over the fault layer (unless faults=False),
    with a membership protocol around it unless membership is "static" (["faults", "unicast3",
    "gms"] puts GMS's discovery, failure detection and merge layers between the fault layer and
    UNICAST3, and GMS on top). `config` is one flat mapping, split among the protocols by the keys
    each knows (split_config); errors name the key.

    `rng` is the node's seeded random.Random; each layer gets its own stream derived from it so
    adding a fault rule does not change the protocol's random choices.
    """
    names = [FAULTS, protocol] if faults else [protocol]
    if membership != STATIC:
        names.append(membership)
    return compose(name, names, split_config(protocol, config, membership), rng, incarnation)


def split_config(
    protocol: str, config: Mapping[str, Any] | None, membership: str = STATIC
) -> dict[str, dict[str, Any]]:
    """A scenario's flat `config:` split among the stack's protocols: each key goes to the
    membership protocol if its settings know it, else to the reliable protocol, which rejects a
    key it does not know (SettingError naming it)."""
    config = dict(config or {})
    if membership == STATIC:
        return {protocol: config}
    known = set(protocols.get(membership).config({}).as_dict())
    return {
        protocol: {k: v for k, v in config.items() if k not in known},
        membership: {k: v for k, v in config.items() if k in known},
    }


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
        settings = spec.config(configs.get(entry) or {})
        if spec.below is not None:
            # Right above the fault layer(s), under every reliable protocol.
            at = sum(1 for layer in layers if isinstance(layer, FaultLayer))
            layers[at:at] = spec.below(name, settings, _child(rng), incarnation)
        layers.extend(spec.layers(name, settings, _child(rng), incarnation))
    return Stack(name, layers)


def protocol_layers(stack: Stack) -> list[Layer]:
    """The layers of a stack that belong to registered protocols (not the fault layer)."""
    return [layer for layer in stack.layers if not isinstance(layer, FaultLayer)]


def recovery_bound_s(protocol: str, config: Mapping[str, Any] | None, membership: str = STATIC) -> float:
    """How long a protocol needs, with both ends up and connected, to deliver what was sent before
    (see Unicast3Config.recovery_bound_s). `config` is validated (a membership protocol's keys by
    it); errors name the key."""
    split = split_config(protocol, config, membership)
    if membership != STATIC:
        protocols.get(membership).config(split[membership])
    return protocols.get(protocol).config(split[protocol]).recovery_bound_s


def ack_bounds(protocol: str, config: Mapping[str, Any] | None) -> dict[str, tuple[str, float]]:
    """The protocol's ack bound for windows_synced (ProtocolSpec.ack_bound), by the `proto` its
    windows are logged with: {} when it declares none. Only the protocol's own keys of `config`
    are read (a membership protocol's are not its business), so a stored run's flat settings do."""
    spec = protocols.get(protocol)
    if spec.ack_bound is None:
        return {}
    known = spec.config({}).as_dict()
    return {protocol: spec.ack_bound(spec.config({k: v for k, v in (config or {}).items() if k in known}))}


def refusal(
    protocol: str, config: Mapping[str, Any] | None, cmd: Command, rng: protocols.Rng, membership: str = STATIC
) -> str | None:
    """Why a node of `protocol` with these settings would refuse an admin command (the layers'
    own answer, asked of a throwaway stack built with `rng`), or None; lets a scenario be
    rejected before it runs."""
    stack = build_stack("check", protocol, config, rng, faults=False, membership=membership)
    reasons = [why for why in (layer.refusal(cmd) for layer in stack.layers) if why]
    return "; ".join(reasons) or None


def _child(rng: R) -> R:
    return type(rng)(rng.getrandbits(64))
