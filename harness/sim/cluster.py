"""The simulator's view of one node: its current stack, lifecycle state, timer and event log.

A node is RUNNING (inputs and timers processed), PAUSED (nothing processed; arriving frames and
injected commands wait in a bounded buffer until resume, like a SIGSTOPped process whose socket
buffer fills) or DEAD (no stack; frames to it are dropped). A restart builds a new stack with
incarnation + 1. The event log of a node spans all its incarnations.

The node's single timer is a heap entry tagged with `timer_gen`: re-arming bumps the generation,
so older entries still in the heap are recognised as stale and skipped when they come up.
"""

from __future__ import annotations

import enum
import random
from collections import deque

from splitbrain.node.dropagg import DropAggregator
from splitbrain.node.stack import Stack


class NodeState(enum.Enum):
    RUNNING = "running"
    PAUSED = "paused"
    DEAD = "dead"


RUNNING = NodeState.RUNNING
PAUSED = NodeState.PAUSED
DEAD = NodeState.DEAD


class SimNode:
    __slots__ = (
        "name",
        "state",
        "stack",
        "incarnation",
        "timer_at",
        "timer_gen",
        "timer_t",
        "timer_repeats",
        "pending",
        "pending_frames",
        "events",
        "view_id",
        "seed_rng",
        "links",
        "drops",
        "drops_queued",
    )

    def __init__(self, name: str, seed_rng: random.Random):
        self.name = name
        self.state = DEAD
        self.stack: Stack | None = None  # None while dead
        self.incarnation = -1
        self.timer_at: float | None = None  # the deadline of the live heap entry, if any
        self.timer_gen = 0
        # Livelock detection: the time of the last timer firing and how often it fired at it.
        self.timer_t = -1.0
        self.timer_repeats = 0
        # Inputs held while PAUSED: ("frame", data) or ("command", cmd), in arrival order.
        self.pending: deque = deque()
        self.pending_frames = 0
        self.events: list[dict] = []
        self.view_id = 0
        # Each incarnation's stack RNG is drawn from this, so restarts replay exactly.
        self.seed_rng = seed_rng
        # dest name -> harness.sim.network.Link for this node's outgoing links (loopback included).
        self.links: dict = {}
        # Drop events of frames it could not decode, aggregated; True while a DROPS entry is queued.
        self.drops = DropAggregator(name)
        self.drops_queued = False

    @property
    def alive(self) -> bool:
        return self.state is not DEAD

    @property
    def live_stack(self) -> Stack:
        """The stack of a running or paused node; the simulator never feeds a dead one."""
        assert self.stack is not None, f"node {self.name} is dead"
        return self.stack

    def cancel_timer(self) -> None:
        self.timer_gen += 1
        self.timer_at = None

    def __repr__(self) -> str:
        return f"SimNode({self.name} {self.state.value} inc={self.incarnation})"
