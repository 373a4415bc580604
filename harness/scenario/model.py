"""The resolved scenario the runners execute: frozen objects, each written back to the file's
form by `to_dict` (a run directory's scenario.yaml parses back to an equal Scenario)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from splitbrain.harness.scenario.vocabulary import (
    DEFAULT_CHECKS,
    DEFAULT_REORDER_MS,
    DEFAULT_SETTLE_S,
    DEFAULT_SIZE,
)
from splitbrain.node.message import MCAST_DEST as GROUP_DEST

# ---- the model --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Stream:
    """One stream: `src` sends `rate` msgs/s to `dest` from `start` until count or duration. `dest`
    is a node, or node.message.MCAST_DEST for a multicast stream (`to: all` under a multicast
    protocol): each message one multicast to the sender's current view.

    `index` is the stream's position in the expanded workload and goes into every payload's app
    id ("src:index:n"), so app ids are unique across the whole run.
    """

    src: str
    dest: str
    rate: float
    count: int | None = None
    duration: float | None = None
    size: int = DEFAULT_SIZE
    start: float = 0.0
    index: int = 0

    @property
    def interval_s(self) -> float:
        return 1.0 / self.rate

    def to_dict(self) -> dict:
        # A multicast stream (dest MCAST_DEST) is written back as `to: all`, which parses back to it.
        out: dict[str, Any] = {
            "from": self.src,
            "to": "all" if self.dest == GROUP_DEST else self.dest,
            "rate": self.rate,
        }
        if self.count is not None:
            out["count"] = self.count
        if self.duration is not None:
            out["duration"] = self.duration
        out["size"] = self.size
        if self.start:
            out["start"] = self.start
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Partition:
    """Block links. One-way: every link from a node in groups[0] to a node in groups[1]. Two-way:
    every link between nodes of different groups, both ways (nodes in no group keep all links)."""

    one_way: bool
    groups: tuple[tuple[str, ...], ...]
    links: tuple[tuple[str, str], ...]

    def to_dict(self) -> Any:
        if self.one_way:
            src, dst = self.groups
            return {"from": _one_or_list(src), "to": _one_or_list(dst)}
        return [list(g) for g in self.groups]

    def describe(self) -> str:
        if self.one_way:
            return f"{','.join(self.groups[0])} -> {','.join(self.groups[1])} (one-way)"
        return " | ".join(",".join(g) for g in self.groups)


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkProbability:
    """loss, duplicate: probability p per frame on the links named by `link`."""

    link: str
    links: tuple[tuple[str, str], ...]
    p: float

    def to_dict(self) -> dict:
        return {"link": self.link, "p": self.p}

    def describe(self) -> str:
        return f"{self.link} p={self.p:g}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Delay:
    """Latency `ms` plus or minus a uniform `jitter_ms` on the links named by `link`."""

    link: str
    links: tuple[tuple[str, str], ...]
    ms: float
    jitter_ms: float = 0.0

    def to_dict(self) -> dict:
        return {"link": self.link, "ms": self.ms, "jitter_ms": self.jitter_ms}

    def describe(self) -> str:
        return f"{self.link} {self.ms:g}ms +-{self.jitter_ms:g}ms"


@dataclass(frozen=True, slots=True, kw_only=True)
class Reorder:
    """With probability p a frame is held back by an extra uniform delay of up to `ms`."""

    link: str
    links: tuple[tuple[str, str], ...]
    p: float
    ms: float = DEFAULT_REORDER_MS

    def to_dict(self) -> dict:
        return {"link": self.link, "p": self.p, "ms": self.ms}

    def describe(self) -> str:
        return f"{self.link} p={self.p:g} up to {self.ms:g}ms"


@dataclass(frozen=True, slots=True, kw_only=True)
class Drop:
    """An in-process rule of the fault layer at `node`: drop messages by type (and more).

    direction "up" matches messages received by `node` from `peer`; "down" matches messages
    `node` sends to `peer`. peer None and types None match everything. `action` is what happens to
    a matching message: "drop" (the default), "delay" (held back `delay_ms` plus a uniform extra
    in [0, `jitter_ms`), JGroups' DELAY) or "duplicate" (passed on twice, JGroups' DUPL).
    """

    node: str
    direction: str = "up"
    peer: str | None = None
    types: tuple[str, ...] | None = None
    p: float = 1.0
    count: int | None = None
    after: int = 0
    seqnos: tuple[int, int] | None = None
    until: float | None = None
    action: str = "drop"
    delay_ms: float = 0.0
    jitter_ms: float = 0.0

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"at": self.node}
        if self.peer is not None:
            out["from" if self.direction == "up" else "to"] = self.peer
        if self.types is not None:
            out["type"] = _one_or_list(self.types)
        out["direction"] = self.direction
        if self.p != 1.0:
            out["p"] = self.p
        if self.count is not None:
            out["count"] = self.count
        if self.after:
            out["after"] = self.after
        if self.seqnos is not None:
            out["seqnos"] = list(self.seqnos)
        if self.until is not None:
            out["until"] = self.until
        if self.action != "drop":
            out["action"] = self.action
        if self.delay_ms:
            out["delay_ms"] = self.delay_ms
        if self.jitter_ms:
            out["jitter_ms"] = self.jitter_ms
        return out

    def describe(self) -> str:
        peer = self.peer or "*"
        arrow = f"{peer}->{self.node}" if self.direction == "up" else f"{self.node}->{peer}"
        parts = [f"at {self.node} {self.direction} {arrow}", f"type={','.join(self.types or ('*',))}"]
        if self.p != 1.0:
            parts.append(f"p={self.p:g}")
        if self.count is not None:
            parts.append(f"count={self.count}")
        if self.after:
            parts.append(f"after={self.after}")
        if self.seqnos is not None:
            parts.append(f"seqnos={self.seqnos[0]}-{self.seqnos[1]}")
        if self.until is not None:
            parts.append(f"until={self.until:g}")
        if self.action != "drop":
            delay = f" {self.delay_ms:g}ms" if self.action == "delay" else ""
            jitter = f"+{self.jitter_ms:g}ms" if self.jitter_ms else ""
            parts.append(f"action={self.action}{delay}{jitter}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """Inject a membership view at `node`."""

    node: str
    members: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"at": self.node, "members": list(self.members)}

    def describe(self) -> str:
        return f"at {self.node} [{','.join(self.members)}]"


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncStep:
    """The SYNC admin operation of the SYNC design: `node`, as receiver, resyncs with sender `peer`."""

    node: str
    peer: str

    def to_dict(self) -> dict:
        return {"at": self.node, "peer": self.peer}

    def describe(self) -> str:
        return f"at {self.node} with {self.peer}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigStep:
    """Change protocol settings at `node` at run time (admin POST /config), e.g. xmit_interval."""

    node: str
    # (setting, value) pairs, sorted: a tuple keeps the step hashable like every other step.
    values: tuple[tuple[str, Any], ...]

    def to_dict(self) -> dict:
        return {"at": self.node, "set": dict(self.values)}

    def describe(self) -> str:
        return f"at {self.node} " + ", ".join(f"{k}={v}" for k, v in self.values)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeTarget:
    """kill, pause, resume, restart: the node they apply to."""

    node: str

    def to_dict(self) -> str:
        return self.node

    def describe(self) -> str:
        return self.node


@dataclass(frozen=True, slots=True, kw_only=True)
class Heal:
    """Undo every network fault and in-process rule ("all"), or one step (its sorted position)."""

    target: str | int

    def to_dict(self) -> str | int:
        return self.target

    def describe(self) -> str:
        return "all" if self.target == "all" else f"#{self.target}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Toxic:
    """A Toxiproxy toxic on the TCP links named by `link` (each directed link is routed through a
    proxy); `attributes` are the toxic's own, in Toxiproxy's names and units."""

    link: str
    links: tuple[tuple[str, str], ...]
    type: str
    attributes: tuple[tuple[str, int], ...] = ()
    toxicity: float = 1.0

    @property
    def attrs(self) -> dict[str, int]:
        return dict(self.attributes)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"link": self.link, "type": self.type}
        out.update(self.attributes)
        if self.toxicity != 1.0:
            out["toxicity"] = self.toxicity
        return out

    def describe(self) -> str:
        attrs = "".join(f" {k}={v}" for k, v in self.attributes)
        tox = f" toxicity={self.toxicity:g}" if self.toxicity != 1.0 else ""
        return f"{self.link} {self.type}{attrs}{tox}"


StepParams = (
    Partition | LinkProbability | Delay | Reorder | Drop | View | SyncStep | ConfigStep | NodeTarget | Heal | Toxic
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultStep:
    """One schedule entry: at time `at` (s from start), apply `kind` with typed `params`.

    `index` is the position in the sorted schedule (what `heal: N` refers to once resolved);
    `source_index` is the position as written in the file (used in error messages).
    """

    at: float
    kind: str
    params: StepParams
    index: int = 0
    source_index: int = 0

    def to_dict(self) -> dict:
        return {"at": self.at, self.kind: self.params.to_dict()}

    def describe(self) -> str:
        return f"#{self.index} {self.kind} {self.params.describe()}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    name: str
    protocol: str
    transport: str
    nodes: tuple[str, ...]
    config: dict = field(default_factory=dict)
    streams: tuple[Stream, ...] = ()
    schedule: tuple[FaultStep, ...] = ()
    duration: float = 10.0
    settle: float = DEFAULT_SETTLE_S
    checks: tuple[str, ...] = DEFAULT_CHECKS
    expect_fail: str | None = None  # None: every check must pass; a name: that check must fail
    seed: int = 0
    injector: str = "auto"  # which injector applies network faults (INJECTORS)
    # Where views come from: "static" (only `view:` steps) or a membership protocol ("gms").
    membership: str = "static"
    # no_loss owes a message once sender and receiver were up and connected this long after it
    # was sent; parse_scenario resolves it from the protocol's timers when the file gives none.
    recovery_bound: float | None = None
    # resync_traffic: the most resync messages between two nodes (None: the check is not listed).
    resync_bound: int | None = None
    # xmit_traffic: the most retransmissions over the run, requests and messages sent again (None: the
    # check is not listed).
    xmit_bound: int | None = None
    # sim backend: frames cross the simulated network through the real wire codec (node.wire)
    # instead of as message objects; the same seed gives the same run either way.
    wire: bool = False
    # Live backends over UDP: each multicast leaves as one IP multicast datagram to a group the
    # cluster picks, instead of one unicast per member (node key mcast_group).
    ip_multicast: bool = False
    # protocol jgroups: {"stack": property string, or absolute path of a JGroups XML file, or None
    # for the node's default stack; "jar": path of the JGroups jar}.
    jgroups: dict | None = None

    @property
    def end_time(self) -> float:
        """When a run stops: after the workload and the last step, plus the settle time."""
        last = self.schedule[-1].at if self.schedule else 0.0
        return max(self.duration, last) + self.settle

    @property
    def expect(self) -> str | dict:
        return "pass" if self.expect_fail is None else {"fail": self.expect_fail}

    def to_dict(self) -> dict:
        """The resolved scenario (nodes and streams expanded, schedule sorted); it parses back
        to an equal Scenario."""
        return {
            "name": self.name,
            "protocol": self.protocol,
            **({} if self.membership == "static" else {"membership": self.membership}),
            "transport": self.transport,
            "nodes": list(self.nodes),
            "config": dict(self.config),
            "workload": [s.to_dict() for s in self.streams],
            "schedule": [s.to_dict() for s in self.schedule],
            "duration": self.duration,
            "settle": self.settle,
            "checks": list(self.checks),
            "expect": self.expect,
            "seed": self.seed,
            **({} if self.injector == "auto" else {"injector": self.injector}),
            **({} if self.recovery_bound is None else {"recovery_bound": self.recovery_bound}),
            **({} if self.resync_bound is None else {"resync_bound": self.resync_bound}),
            **({} if self.xmit_bound is None else {"xmit_bound": self.xmit_bound}),
            **({"wire": True} if self.wire else {}),
            **({"ip_multicast": True} if self.ip_multicast else {}),
            **({} if self.jgroups is None else {"jgroups": dict(self.jgroups)}),
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None)


def _one_or_list(items: tuple[str, ...]) -> Any:
    return items[0] if len(items) == 1 else list(items)
