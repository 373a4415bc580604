"""The sim backend: a seeded network model and a discrete-event simulator in virtual time."""

from .cluster import NodeState, SimNode
from .network import DEFAULT_DELAY_S, Link, LinkModel, Network
from .simulator import (
    MAX_FRAME_BYTES,
    IdentityCodec,
    InvariantViolation,
    SimResult,
    Simulation,
    SimulationError,
    StepLimitExceeded,
    simulate,
)

__all__ = [
    "DEFAULT_DELAY_S",
    "IdentityCodec",
    "InvariantViolation",
    "Link",
    "LinkModel",
    "MAX_FRAME_BYTES",
    "Network",
    "NodeState",
    "SimNode",
    "SimResult",
    "Simulation",
    "SimulationError",
    "StepLimitExceeded",
    "simulate",
]
