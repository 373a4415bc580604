"""The simulator's network: one model per directed link, changed by faults, restored by heal.

Each directed link X->Y has a loss probability, a base delay with a uniform jitter (plus or minus,
like netem and Toxiproxy, floored at zero), a duplication probability, a reordering probability
with the largest extra hold-back delay, and a blocked flag (a partition). Frames on a link are
delivered in FIFO order unless reordering picks them: a frame's arrival is never earlier than the
previous frame's on the same link, so jitter alone does not reorder. A reordered frame is held back
by an extra random delay and neither waits for nor delays the frames around it.

Faults are kept as a list of active changes keyed by the schedule step that made them. A link's
model is always recomputed from the defaults plus the active changes that name it, in the order
they were applied (a later loss on the same link overrides an earlier one), so removing one fault
(`heal: N`) or all of them (`heal: all`) is exact.

Every link owns its own `random.Random`, derived from the simulation's master RNG in a fixed
order, so traffic on one link never shifts the random draws of another.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace

DEFAULT_DELAY_S = 0.0005


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkModel:
    """The behaviour of one directed link."""

    delay_s: float = DEFAULT_DELAY_S
    jitter_s: float = 0.0
    loss_p: float = 0.0
    dup_p: float = 0.0
    reorder_p: float = 0.0
    reorder_s: float = 0.010
    blocked: bool = False

    def __post_init__(self) -> None:
        for name in ("loss_p", "dup_p", "reorder_p"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"LinkModel.{name} must be between 0 and 1")
        for name in ("delay_s", "jitter_s", "reorder_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"LinkModel.{name} must not be negative")


_MODEL_FIELDS = tuple(f.name for f in fields(LinkModel))


class Link:
    """A directed link's current model plus its hot state (RNG, FIFO horizon, target node)."""

    __slots__ = _MODEL_FIELDS + ("src", "dst", "rng", "last_arrival", "target")

    def __init__(self, src: str, dst: str, rng: random.Random, model: LinkModel, target=None):
        self.src = src
        self.dst = dst
        self.rng = rng
        # Arrival time of the last FIFO frame on this link; later frames never arrive before it.
        self.last_arrival = 0.0
        # The simulator's node object at the far end (set by the simulator, opaque here).
        self.target = target
        self.set_model(model)

    def set_model(self, model: LinkModel) -> None:
        for name in _MODEL_FIELDS:
            setattr(self, name, getattr(model, name))

    @property
    def model(self) -> LinkModel:
        return LinkModel(**{name: getattr(self, name) for name in _MODEL_FIELDS})

    def __repr__(self) -> str:
        return f"Link({self.src}->{self.dst} {self.model})"


class Network:
    """All directed links between `nodes` (plus a loopback link per node that faults never touch)."""

    def __init__(self, nodes: Iterable[str], master: random.Random, defaults: LinkModel | None = None):
        self.nodes = tuple(nodes)
        self.defaults = defaults if defaults is not None else LinkModel()
        self.links: dict[tuple[str, str], Link] = {}
        # The order of derivation is part of the replay contract: pairs in node order, then loopbacks.
        for a in self.nodes:
            for b in self.nodes:
                if a != b:
                    self.links[(a, b)] = Link(a, b, random.Random(master.getrandbits(64)), self.defaults)
        for a in self.nodes:
            self.links[(a, a)] = Link(a, a, random.Random(master.getrandbits(64)), self.defaults)
        # key -> (links it names, field changes); insertion order is application order.
        self._active: dict[object, tuple[frozenset[tuple[str, str]], dict]] = {}

    def link(self, src: str, dst: str) -> Link:
        return self.links[(src, dst)]

    @property
    def active(self) -> list:
        """Keys of the faults in force, in the order they were applied."""
        return list(self._active)

    def apply(self, key: object, links: Iterable[tuple[str, str]], **changes) -> None:
        """Apply a fault (LinkModel field changes) to some links; `key` names it for `remove`."""
        unknown = set(changes) - set(_MODEL_FIELDS)
        if unknown:
            raise ValueError(f"unknown link model field(s): {', '.join(sorted(unknown))}")
        named = frozenset(links)
        for src, dst in named:
            if src == dst or (src, dst) not in self.links:
                raise ValueError(f"no link {src}->{dst}")
        if key in self._active:
            raise ValueError(f"fault {key!r} is already active")
        self._active[key] = (named, changes)
        self._recompute(named)

    def remove(self, key: object) -> bool:
        """Remove one fault; False if it was not active."""
        entry = self._active.pop(key, None)
        if entry is None:
            return False
        self._recompute(entry[0])
        return True

    def heal_all(self) -> list:
        """Remove every fault; returns their keys in application order."""
        keys = list(self._active)
        touched: set[tuple[str, str]] = set()
        for named, _ in self._active.values():
            touched |= named
        self._active.clear()
        self._recompute(touched)
        return keys

    def _recompute(self, named: Iterable[tuple[str, str]]) -> None:
        for pair in named:
            model = self.defaults
            for links, changes in self._active.values():
                if pair in links:
                    model = replace(model, **changes)
            self.links[pair].set_model(model)
