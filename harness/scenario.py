"""Scenario files: a cluster, a workload and a fault schedule, loaded from YAML and validated.

A scenario says which protocol runs on which nodes, what the application sends (streams), which
faults the harness applies when (the schedule), how long the run lasts and which checks judge it.
Every backend (sim, local, docker) runs the same `Scenario` object, so everything is checked
here, once, before a node starts: an unknown key or a bad value raises `ScenarioError` whose
message names the field path, e.g. ``schedule[2].loss.p: must be between 0 and 1``. Paths use
the indexes as written in the file, even though the schedule is stored sorted by time.

The fault vocabulary (STYLE.md #15) is shared with the simulator's network model and the real
injectors: partition (one-way or two-way), loss, delay, duplicate, reorder, drop (in-process, by
message type), view (injected), kill, pause, resume, restart, heal; and, for TCP links routed
through Toxiproxy (docker backend, transport tcp), toxic (latency, jitter, bandwidth, timeout,
reset_peer, slicer, limit_data, slow_close, down).

Which injector applies the network faults is the top-level key `injector`: auto (the default:
iptables for partitions and loss on docker over UDP, Toxiproxy for partitions on docker over TCP,
the in-process fault layer everywhere else), inprocess, iptables or toxiproxy. The key is a
preference of the docker backend: the simulator (whose network model is the injector) and the
local backend (in-process) run the same file with their own, so one file gives one verdict
everywhere. `check_backend(scenario, backend)` refuses what a backend cannot do (toxic steps off
docker), naming the field.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from node import protocols
from node.compose import recovery_bound_s, refusal
from node.layer import SyncPeer

TRANSPORTS = ("udp", "tcp")
# Checks every run gets, listed or not: an exception inside a protocol layer is always our bug.
ALWAYS_CHECKS = ("no_errors",)
# A scenario without `checks:` is judged by its protocol's default checks (node/protocols.py)
# and ALWAYS_CHECKS; this is that list for the default protocol.
DEFAULT_CHECKS = ("fifo", "no_duplicates", "no_loss", "no_errors")


def default_checks(protocol: str) -> tuple[str, ...]:
    own = protocols.get(protocol).default_checks
    return (*own, *(c for c in ALWAYS_CHECKS if c not in own))
DEFAULT_SETTLE_S = 5.0
DEFAULT_SIZE = 100
DEFAULT_REORDER_MS = 10.0
# What an in-process rule (a drop step) does to a matching message (node.faultlayer.ACTIONS).
DROP_ACTIONS = ("drop", "delay", "duplicate")
MAX_NODES = 26 * 27  # A..Z, then AA..ZZ

# Steps that change the network or the in-process fault layer, and can be undone by `heal: N`.
NETWORK_KINDS = ("partition", "loss", "delay", "duplicate", "reorder")
HEALABLE_KINDS = frozenset(NETWORK_KINDS + ("drop",))
NODE_KINDS = ("kill", "pause", "resume", "restart")
STEP_KINDS = NETWORK_KINDS + ("drop", "view", "sync") + NODE_KINDS + ("heal",)
# Toxiproxy toxics on TCP links (docker backend, transport tcp only); healable like network faults.
STEP_KINDS = STEP_KINDS + ("toxic",)
HEALABLE_KINDS = HEALABLE_KINDS | {"toxic"}
# Toxic types and their attributes (Toxiproxy's names and units, with its defaults). "jitter" is a
# latency toxic whose latency defaults to its jitter (delays uniform in [0, 2 * jitter] ms);
# "down" disables the link's proxies (both directions of the connection, as Toxiproxy does).
TOXIC_TYPES: dict[str, dict[str, int]] = {
    "latency": {"latency": 0, "jitter": 0},  # ms
    "jitter": {"jitter": 0, "latency": -1},  # ms; latency -1: the same as jitter
    "bandwidth": {"rate": 0},  # KB/s
    "timeout": {"timeout": 0},  # ms; 0: data is dropped until the toxic is removed
    "reset_peer": {"timeout": 0},  # ms before the connection is reset
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},  # bytes, bytes, microseconds
    "limit_data": {"bytes": 0},
    "slow_close": {"delay": 0},  # ms
    "down": {},
}
# Which injector applies network faults (see the module docstring).
INJECTORS = ("auto", "inprocess", "iptables", "toxiproxy")

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*$")
_CHECK_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_RESERVED_NAMES = frozenset({"all", "harness", "node"})
_TOP_KEYS = ("name", "protocol", "transport", "nodes", "config", "workload", "schedule", "duration",
             "settle", "checks", "expect", "seed", "injector", "recovery_bound")
_TOP_REQUIRED = ("name", "protocol", "nodes", "workload", "duration")


class ScenarioError(ValueError):
    """A scenario that cannot run; the message starts with the path of the offending field."""

    def __init__(self, path: str, message: str):
        self.path = path
        self.reason = message
        super().__init__(f"{path}: {message}" if path else message)


# ---- the model --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Stream:
    """One unicast stream: `src` sends `rate` msgs/s to `dest` from `start` until count or duration.

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
        out: dict[str, Any] = {"from": self.src, "to": self.dest, "rate": self.rate}
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
    """The SYNC admin operation of seed 000: `node`, as receiver, resyncs with sender `peer`."""

    node: str
    peer: str

    def to_dict(self) -> dict:
        return {"at": self.node, "peer": self.peer}

    def describe(self) -> str:
        return f"at {self.node} with {self.peer}"


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


StepParams = Partition | LinkProbability | Delay | Reorder | Drop | View | SyncStep | NodeTarget | Heal | Toxic


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


# Toxics that stop data on a link (the others only slow or reshape it).
_CUTTING_TOXICS = frozenset({"down", "timeout", "reset_peer", "limit_data"})


def cut_links(step: FaultStep, nodes: tuple[str, ...]) -> list[str]:
    """The directed links ("A->B") a step cuts while it is in force: partitions, a paused node's
    links both ways, total loss, cutting toxics, and in-process rules that drop every matching
    message without end (no count, p 1, no seqno range, no until). The timeline carries them
    (`links` on fault_on / fault_off) so no_loss knows when two nodes could talk. A resume
    names the links its pause cut."""
    p = step.params
    pairs: tuple[tuple[str, str], ...] = ()
    if step.kind == "partition":
        pairs = p.links
    elif step.kind == "loss" and p.p >= 1.0:
        pairs = p.links
    elif step.kind == "toxic" and p.type in _CUTTING_TOXICS:
        pairs = p.links
    elif step.kind in ("pause", "resume"):
        pairs = node_links(p.node, nodes)
    elif (step.kind == "drop" and p.action == "drop" and p.p >= 1.0 and p.count is None
          and p.seqnos is None and p.until is None):
        peers = [p.peer] if p.peer is not None else [n for n in nodes if n != p.node]
        pairs = tuple((a, b) for peer in peers for a, b in ((peer, p.node), (p.node, peer)))
    return [f"{a}->{b}" for a, b in pairs]


def node_links(node: str, nodes: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Every directed link to and from `node`."""
    return tuple(pair for other in nodes if other != node for pair in ((node, other), (other, node)))


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
    # no_loss owes a message once sender and receiver were up and connected this long after it
    # was sent; parse_scenario resolves it from the protocol's timers when the file gives none.
    recovery_bound: float | None = None

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
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None)


# ---- loading ----------------------------------------------------------------------------------


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file. A missing file raises FileNotFoundError; bad YAML or a
    bad value raises ScenarioError."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ScenarioError("", f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    return parse_scenario(data)


def parse_scenario(data: Any) -> Scenario:
    """Validate a scenario given as a dict (as loaded from YAML) and resolve it."""
    if not isinstance(data, dict):
        raise ScenarioError("", f"a scenario must be a mapping, got {_type_name(data)}")
    _check_keys(data, "", _TOP_KEYS, _TOP_REQUIRED)

    name = _string(data["name"], "name")
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", name):
        raise ScenarioError("name", "use letters, digits, '_', '.' and '-' (it names the run directory)")
    protocol = _choice(data["protocol"], "protocol", (*protocols.names(), *protocols.PLANNED))
    if protocol not in protocols.names():
        raise ScenarioError("protocol", f"{protocol} is not implemented yet (available: "
                                        f"{', '.join(sorted(protocols.names()))})")
    transport = _choice(data.get("transport", "udp"), "transport", TRANSPORTS)
    nodes = _nodes(data["nodes"])
    config = data.get("config", {})
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ScenarioError("config", f"must be a mapping, got {_type_name(config)}")
    for key in config:
        if not isinstance(key, str):
            raise ScenarioError(f"config.{key}", "keys must be strings")

    duration = _number(data["duration"], "duration")
    if duration <= 0:
        raise ScenarioError("duration", "must be greater than 0")
    settle = _number(data.get("settle", DEFAULT_SETTLE_S), "settle")
    if settle < 0:
        raise ScenarioError("settle", "must not be negative")

    streams = _workload(data["workload"], nodes, protocol, duration)
    schedule = _schedule(data.get("schedule") or [], nodes)

    checks_raw = data.get("checks", list(default_checks(protocol)))
    if not isinstance(checks_raw, list):
        raise ScenarioError("checks", f"must be a list of check names, got {_type_name(checks_raw)}")
    checks: list[str] = []
    for i, c in enumerate(checks_raw):
        c = _string(c, f"checks[{i}]")
        if not _CHECK_RE.match(c):
            raise ScenarioError(f"checks[{i}]", f"{c!r} is not a check name")
        if c in checks:
            raise ScenarioError(f"checks[{i}]", f"{c!r} is listed twice")
        checks.append(c)
    _known_checks(checks)
    checks += [c for c in ALWAYS_CHECKS if c not in checks]

    expect_fail = _expect(data.get("expect", "pass"), checks)
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ScenarioError("seed", f"must be a non-negative integer, got {seed!r}")

    injector = _choice(data.get("injector", "auto"), "injector", INJECTORS)
    for step in schedule:
        if step.kind == "sync":
            why = refusal(protocol, config, SyncPeer(peer=step.params.peer), random.Random(0))
            if why:
                raise ScenarioError(f"schedule[{step.source_index}].sync", f"the admin sync operation is refused: {why}")
        if step.kind == "toxic" and transport != "tcp":
            raise ScenarioError(f"schedule[{step.source_index}].toxic",
                                f"needs transport: tcp (Toxiproxy proxies TCP links; this scenario uses {transport})")
    if injector == "toxiproxy" and transport != "tcp":
        raise ScenarioError("injector", f"toxiproxy needs transport: tcp (this scenario uses {transport})")
    if injector == "iptables" and any(step.kind == "toxic" for step in schedule):
        raise ScenarioError("injector", "iptables cannot tell apart TCP links routed through Toxiproxy, which "
                                        "toxic steps need: use injector auto, toxiproxy or inprocess")

    return Scenario(
        name=name, protocol=protocol, transport=transport, nodes=nodes, config=dict(config),
        streams=streams, schedule=schedule, duration=duration, settle=settle,
        checks=tuple(checks), expect_fail=expect_fail, seed=seed, injector=injector,
        recovery_bound=_recovery_bound(data.get("recovery_bound"), protocol, config),
    )


def _recovery_bound(raw: Any, protocol: str, config: dict) -> float:
    """The scenario's own bound, or the protocol's from its settings (which are checked here, so a
    bad setting is reported before anything starts, named as config.<key>)."""
    if raw is not None:
        bound = _number(raw, "recovery_bound")
        if bound <= 0:
            raise ScenarioError("recovery_bound", "must be greater than 0 (seconds)")
        return bound
    try:
        return recovery_bound_s(protocol, config)
    except ValueError as exc:
        match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*): (.*)$", str(exc), re.S)
        if match:
            raise ScenarioError(f"config.{match.group(1)}", match.group(2)) from None
        raise ScenarioError("config", str(exc)) from None


def check_backend(scenario: Scenario, backend: str, injector: str | None = None) -> None:
    """Raise ScenarioError (naming the field) when `backend` cannot run what the scenario asks.

    Toxic steps need the docker backend (with transport tcp). The scenario's `injector` key is a
    preference of the docker backend: sim and local run the same file with their own injector
    (the network model, the in-process fault layer), so that one file gives one verdict on every
    backend. `injector` (a command-line flag) is a demand: iptables or toxiproxy off docker is
    refused."""
    chosen = scenario.injector if injector in (None, "auto") else injector
    where = "injector" if injector in (None, "auto") else "--injector"
    if backend != "docker":
        for step in scenario.schedule:
            if step.kind == "toxic":
                raise ScenarioError(f"schedule[{step.source_index}].toxic",
                                    f"needs the docker backend with transport tcp (backend {backend} has no "
                                    f"Toxiproxy in its links)")
        if injector in ("iptables", "toxiproxy"):
            raise ScenarioError(where, f"{injector} needs the docker backend (backend {backend} applies "
                                       f"network faults {'in its network model' if backend == 'sim' else 'in-process'})")
    if chosen == "toxiproxy" and scenario.transport != "tcp":
        raise ScenarioError(where, f"toxiproxy needs transport: tcp (this scenario uses {scenario.transport})")
    if chosen == "iptables" and any(step.kind == "toxic" for step in scenario.schedule):
        raise ScenarioError(where, "iptables cannot tell apart TCP links routed through Toxiproxy, which toxic "
                                   "steps need: use auto, toxiproxy or inprocess")


# ---- sections ---------------------------------------------------------------------------------


def _nodes(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, int) and not isinstance(raw, bool):
        if not 1 <= raw <= MAX_NODES:
            raise ScenarioError("nodes", f"a node count must be between 1 and {MAX_NODES}")
        return tuple(_letters(i) for i in range(raw))
    if not isinstance(raw, list) or not raw:
        raise ScenarioError("nodes", "must be a non-empty list of names or a count")
    names: list[str] = []
    for i, n in enumerate(raw):
        n = _string(n, f"nodes[{i}]")
        if not _NAME_RE.match(n) or n.lower() in _RESERVED_NAMES:
            raise ScenarioError(f"nodes[{i}]", f"{n!r} is not a valid node name (letters, digits, '_', "
                                               "inner '-'; not 'all', 'harness' or 'node')")
        if n in names:
            raise ScenarioError(f"nodes[{i}]", f"{n!r} is listed twice")
        names.append(n)
    return tuple(names)


def _letters(i: int) -> str:
    if i < 26:
        return chr(ord("A") + i)
    return chr(ord("A") + i // 26 - 1) + chr(ord("A") + i % 26)


def _workload(raw: Any, nodes: tuple[str, ...], protocol: str, duration: float) -> tuple[Stream, ...]:
    if not isinstance(raw, list):
        raise ScenarioError("workload", f"must be a list of streams, got {_type_name(raw)}")
    streams: list[Stream] = []
    for i, entry in enumerate(raw):
        path = f"workload[{i}]"
        if not isinstance(entry, dict):
            raise ScenarioError(path, f"must be a mapping, got {_type_name(entry)}")
        _check_keys(entry, path, ("from", "to", "rate", "count", "duration", "size", "start"),
                    ("from", "to", "rate"))
        senders = _node_or_all(entry["from"], f"{path}.from", nodes)
        receivers = _node_or_all(entry["to"], f"{path}.to", nodes)
        # For a unicast protocol "to: all" means one stream per receiver.
        if entry["to"] == "all" and protocols.get(protocol).multicast:
            # Multicast streams arrive with the protocols that have them.
            raise ScenarioError(f"{path}.to", f"multicast workloads for {protocol} are not implemented yet")
        rate = _number(entry["rate"], f"{path}.rate")
        if rate <= 0:
            raise ScenarioError(f"{path}.rate", "must be greater than 0 (messages per second)")
        count = entry.get("count")
        stream_duration = entry.get("duration")
        if count is None and stream_duration is None:
            raise ScenarioError(path, "needs count or duration (or both)")
        if count is not None:
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ScenarioError(f"{path}.count", f"must be a positive integer, got {count!r}")
        if stream_duration is not None:
            stream_duration = _number(stream_duration, f"{path}.duration")
            if stream_duration <= 0:
                raise ScenarioError(f"{path}.duration", "must be greater than 0")
        size = entry.get("size", DEFAULT_SIZE)
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= 60_000:
            raise ScenarioError(f"{path}.size", f"must be an integer number of bytes in 0..60000, got {size!r}")
        start = _number(entry.get("start", 0.0), f"{path}.start")
        if start < 0:
            raise ScenarioError(f"{path}.start", "must not be negative")
        if start >= duration:
            raise ScenarioError(f"{path}.start", f"{start:g} is not before the scenario duration {duration:g}")
        # The scenario's duration is the workload's time budget, so a stream must fit in it: a
        # count that cannot be reached would silently shrink the run.
        if count is not None and start + (count - 1) / rate >= duration:
            raise ScenarioError(f"{path}.count", f"{count} messages at {rate:g}/s from t={start:g} do not "
                                                 f"fit in duration {duration:g}s")
        if stream_duration is not None and start + stream_duration > duration + 1e-9:
            raise ScenarioError(f"{path}.duration", f"the stream ends at {start + stream_duration:g}s, "
                                                    f"after the scenario duration {duration:g}s")
        pairs = [(s, r) for s in senders for r in receivers if s != r]
        if not pairs:
            raise ScenarioError(path, "a stream needs a sender and a different receiver")
        for s, r in pairs:
            streams.append(Stream(src=s, dest=r, rate=rate, count=count, duration=stream_duration,
                                  size=size, start=start, index=len(streams)))
    return tuple(streams)


def _node_or_all(raw: Any, path: str, nodes: tuple[str, ...]) -> tuple[str, ...]:
    if raw == "all":
        return nodes
    if isinstance(raw, list):
        if not raw:
            raise ScenarioError(path, "must name at least one node")
        return tuple(_node(x, f"{path}[{i}]", nodes) for i, x in enumerate(raw))
    return (_node(raw, path, nodes),)


def _node(raw: Any, path: str, nodes: tuple[str, ...]) -> str:
    name = _string(raw, path)
    if name not in nodes:
        raise ScenarioError(path, f"unknown node {name!r} (nodes: {', '.join(nodes)})")
    return name


def _schedule(raw: Any, nodes: tuple[str, ...]) -> tuple[FaultStep, ...]:
    if not isinstance(raw, list):
        raise ScenarioError("schedule", f"must be a list of steps, got {_type_name(raw)}")
    parsed: list[tuple[float, int, str, Any]] = []
    for i, entry in enumerate(raw):
        path = f"schedule[{i}]"
        if not isinstance(entry, dict):
            raise ScenarioError(path, f"must be a mapping, got {_type_name(entry)}")
        for key in entry:
            if key != "at" and key not in STEP_KINDS:
                raise ScenarioError(f"{path}.{key}", f"unknown key (a step has 'at' and one of: "
                                                     f"{', '.join(STEP_KINDS)})")
        if "at" not in entry:
            raise ScenarioError(f"{path}.at", "missing")
        at = _number(entry["at"], f"{path}.at")
        if at < 0:
            raise ScenarioError(f"{path}.at", f"must not be negative, got {at:g}")
        kinds = [k for k in entry if k != "at"]
        if len(kinds) != 1:
            raise ScenarioError(path, f"needs exactly one of {', '.join(STEP_KINDS)}; got "
                                      f"{', '.join(kinds) or 'none'}")
        parsed.append((at, i, kinds[0], entry[kinds[0]]))

    # A stable sort keeps steps with equal times in file order; `heal: N` is written with file
    # indexes and resolved to sorted positions below.
    order = sorted(range(len(parsed)), key=lambda i: parsed[i][0])
    position = {src: pos for pos, src in enumerate(order)}
    steps: list[FaultStep] = []
    for pos, src in enumerate(order):
        at, _, kind, body = parsed[src]
        path = f"schedule[{src}].{kind}"
        params = _step_params(kind, body, path, nodes, at, raw_len=len(parsed))
        if isinstance(params, Heal) and params.target != "all":
            written = params.target
            target_pos = position[written]
            target_kind = parsed[written][2]
            if written == src:
                raise ScenarioError(path, "a heal cannot undo itself")
            if target_kind not in HEALABLE_KINDS:
                raise ScenarioError(path, f"schedule[{written}] is a {target_kind} step; heal undoes "
                                          f"{', '.join(sorted(HEALABLE_KINDS))} (use resume/restart for nodes)")
            if target_pos > pos:
                raise ScenarioError(path, f"schedule[{written}] happens after this heal")
            params = Heal(target=target_pos)
        steps.append(FaultStep(at=at, kind=kind, params=params, index=pos, source_index=src))
    _check_lifecycle(steps, nodes)
    return tuple(steps)


def _step_params(kind: str, body: Any, path: str, nodes: tuple[str, ...], at: float,
                 raw_len: int) -> StepParams:
    if kind == "partition":
        return _partition(body, path, nodes)
    if kind in ("loss", "duplicate"):
        body = _mapping(body, path)
        _check_keys(body, path, ("link", "p"), ("link", "p"))
        link, links = _link(body["link"], f"{path}.link", nodes)
        return LinkProbability(link=link, links=links, p=_probability(body["p"], f"{path}.p"))
    if kind == "delay":
        body = _mapping(body, path)
        _check_keys(body, path, ("link", "ms", "jitter_ms"), ("link", "ms"))
        link, links = _link(body["link"], f"{path}.link", nodes)
        ms = _number(body["ms"], f"{path}.ms")
        jitter = _number(body.get("jitter_ms", 0.0), f"{path}.jitter_ms")
        if ms < 0:
            raise ScenarioError(f"{path}.ms", "must not be negative")
        if jitter < 0:
            raise ScenarioError(f"{path}.jitter_ms", "must not be negative")
        return Delay(link=link, links=links, ms=ms, jitter_ms=jitter)
    if kind == "reorder":
        body = _mapping(body, path)
        _check_keys(body, path, ("link", "p", "ms"), ("link", "p"))
        link, links = _link(body["link"], f"{path}.link", nodes)
        ms = _number(body.get("ms", DEFAULT_REORDER_MS), f"{path}.ms")
        if ms <= 0:
            raise ScenarioError(f"{path}.ms", "must be greater than 0")
        return Reorder(link=link, links=links, p=_probability(body["p"], f"{path}.p"), ms=ms)
    if kind == "drop":
        return _drop(body, path, nodes, at)
    if kind == "view":
        body = _mapping(body, path)
        _check_keys(body, path, ("at", "members"), ("at", "members"))
        node = _node(body["at"], f"{path}.at", nodes)
        members_raw = body["members"]
        if not isinstance(members_raw, list) or not members_raw:
            raise ScenarioError(f"{path}.members", "must be a non-empty list of nodes")
        members = tuple(_node(m, f"{path}.members[{i}]", nodes) for i, m in enumerate(members_raw))
        if len(set(members)) != len(members):
            raise ScenarioError(f"{path}.members", "lists a node twice")
        if node not in members:
            raise ScenarioError(f"{path}.members", f"a view installed at {node} must contain {node}")
        return View(node=node, members=members)
    if kind == "sync":
        body = _mapping(body, path)
        _check_keys(body, path, ("at", "peer"), ("at", "peer"))
        node = _node(body["at"], f"{path}.at", nodes)
        peer = _node(body["peer"], f"{path}.peer", nodes)
        if peer == node:
            raise ScenarioError(f"{path}.peer", f"{node} cannot sync with itself")
        return SyncStep(node=node, peer=peer)
    if kind in NODE_KINDS:
        return NodeTarget(node=_node(body, path, nodes))
    if kind == "toxic":
        return _toxic(body, path, nodes)
    if kind == "heal":
        if body == "all":
            return Heal(target="all")
        if isinstance(body, bool) or not isinstance(body, int):
            raise ScenarioError(path, f"must be 'all' or the index of a schedule step, got {body!r}")
        if not 0 <= body < raw_len:
            raise ScenarioError(path, f"no schedule step {body} (the schedule has {raw_len})")
        return Heal(target=body)
    raise AssertionError(kind)


def _toxic(body: Any, path: str, nodes: tuple[str, ...]) -> Toxic:
    body = _mapping(body, path)
    if "type" not in body:
        raise ScenarioError(f"{path}.type", f"missing (one of: {', '.join(TOXIC_TYPES)})")
    kind = _choice(body["type"], f"{path}.type", tuple(TOXIC_TYPES))
    defaults = TOXIC_TYPES[kind]
    _check_keys(body, path, ("link", "type", "toxicity", *defaults), ("link",))
    link, links = _link(body["link"], f"{path}.link", nodes)
    attrs: dict[str, int] = {}
    for key, default in defaults.items():
        raw = body.get(key, default)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw != int(raw):
            raise ScenarioError(f"{path}.{key}", f"must be an integer, got {raw!r}")
        value = int(raw)
        if value < 0 and not (kind == "jitter" and key == "latency" and value == -1):
            raise ScenarioError(f"{path}.{key}", "must not be negative")
        attrs[key] = value
    if kind == "jitter":
        if attrs["jitter"] <= 0:
            raise ScenarioError(f"{path}.jitter", "must be greater than 0")
        if attrs["latency"] == -1:
            attrs["latency"] = attrs["jitter"]
    if kind == "slicer" and attrs["average_size"] <= 0:
        raise ScenarioError(f"{path}.average_size", "must be greater than 0 (bytes per slice)")
    if kind == "slicer" and attrs["size_variation"] >= attrs["average_size"]:
        raise ScenarioError(f"{path}.size_variation", "must be smaller than average_size")
    if kind == "bandwidth" and attrs["rate"] <= 0:
        raise ScenarioError(f"{path}.rate", "must be greater than 0 (KB/s)")
    if kind == "limit_data" and attrs["bytes"] <= 0:
        raise ScenarioError(f"{path}.bytes", "must be greater than 0")
    toxicity = _probability(body.get("toxicity", 1.0), f"{path}.toxicity")
    if kind == "down" and toxicity != 1.0:
        raise ScenarioError(f"{path}.toxicity", "down disables the proxies: it has no toxicity")
    return Toxic(link=link, links=links, type=kind, attributes=tuple(attrs.items()), toxicity=toxicity)


def _partition(body: Any, path: str, nodes: tuple[str, ...]) -> Partition:
    if isinstance(body, dict):
        _check_keys(body, path, ("from", "to"), ("from", "to"))
        src = _node_or_all(body["from"], f"{path}.from", nodes)
        dst = _node_or_all(body["to"], f"{path}.to", nodes)
        links = tuple((a, b) for a in src for b in dst if a != b)
        if not links:
            raise ScenarioError(path, "blocks no link (from and to are the same node)")
        return Partition(one_way=True, groups=(src, dst), links=links)
    if isinstance(body, list):
        if len(body) < 2:
            raise ScenarioError(path, "a two-way partition needs at least two groups")
        groups: list[tuple[str, ...]] = []
        seen: set[str] = set()
        for g, group in enumerate(body):
            gpath = f"{path}[{g}]"
            if not isinstance(group, list) or not group:
                raise ScenarioError(gpath, "must be a non-empty list of nodes")
            members = tuple(_node(n, f"{gpath}[{j}]", nodes) for j, n in enumerate(group))
            for j, n in enumerate(members):
                if n in seen:
                    raise ScenarioError(f"{gpath}[{j}]", f"{n} is in more than one group")
                seen.add(n)
            groups.append(members)
        links = tuple(
            (a, b)
            for gi, ga in enumerate(groups)
            for gj, gb in enumerate(groups)
            if gi != gj
            for a in ga
            for b in gb
        )
        return Partition(one_way=False, groups=tuple(groups), links=links)
    raise ScenarioError(path, "must be {from: X, to: Y} (one-way) or a list of groups [[A], [B, C]] (two-way)")


def _drop(body: Any, path: str, nodes: tuple[str, ...], at: float) -> Drop:
    body = _mapping(body, path)
    _check_keys(body, path, ("at", "from", "to", "type", "direction", "p", "count", "after", "seqnos",
                             "until", "action", "delay_ms", "jitter_ms"), ("at",))
    node = _node(body["at"], f"{path}.at", nodes)
    direction = _choice(body.get("direction", "up"), f"{path}.direction", ("up", "down"))
    peer = None
    if direction == "up":
        if "to" in body:
            raise ScenarioError(f"{path}.to", "only with direction: down (received messages use from:)")
        if "from" in body:
            peer = _node(body["from"], f"{path}.from", nodes)
    else:
        if "from" in body:
            raise ScenarioError(f"{path}.from", "only with direction: up (sent messages use to:)")
        if "to" in body:
            peer = _node(body["to"], f"{path}.to", nodes)
    if peer == node:
        raise ScenarioError(path, f"a rule at {node} cannot name {node} as its peer")
    types = None
    if "type" in body:
        raw = body["type"]
        items = raw if isinstance(raw, list) else [raw]
        if not items:
            raise ScenarioError(f"{path}.type", "must name at least one message type")
        names = []
        for i, t in enumerate(items):
            tpath = f"{path}.type[{i}]" if isinstance(raw, list) else f"{path}.type"
            t = _string(t, tpath)
            if not re.match(r"^[A-Z][A-Z0-9_-]*$", t):
                raise ScenarioError(tpath, f"{t!r} is not a message type (like DATA, ACK)")
            names.append(t)
        types = tuple(names)
    p = _probability(body.get("p", 1.0), f"{path}.p")
    count = body.get("count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ScenarioError(f"{path}.count", f"must be a positive integer, got {count!r}")
    after = body.get("after", 0)
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ScenarioError(f"{path}.after", f"must be a non-negative integer, got {after!r}")
    seqnos = None
    if "seqnos" in body:
        raw = body["seqnos"]
        if (not isinstance(raw, list) or len(raw) != 2
                or any(isinstance(x, bool) or not isinstance(x, int) for x in raw)
                or raw[0] > raw[1] or raw[0] < 0):
            raise ScenarioError(f"{path}.seqnos", f"must be [lo, hi] with 0 <= lo <= hi, got {raw!r}")
        seqnos = (raw[0], raw[1])
    until = None
    if "until" in body:
        until = _number(body["until"], f"{path}.until")
        if until < at:
            raise ScenarioError(f"{path}.until", f"{until:g} is before the step's time {at:g}")
    action = _choice(body.get("action", "drop"), f"{path}.action", DROP_ACTIONS)
    delay_ms = _number(body.get("delay_ms", 0.0), f"{path}.delay_ms")
    jitter_ms = _number(body.get("jitter_ms", 0.0), f"{path}.jitter_ms")
    for key, value in (("delay_ms", delay_ms), ("jitter_ms", jitter_ms)):
        if value < 0:
            raise ScenarioError(f"{path}.{key}", "must not be negative")
        if value and action != "delay":
            raise ScenarioError(f"{path}.{key}", "only with action: delay")
    if action == "delay" and not delay_ms and not jitter_ms:
        raise ScenarioError(f"{path}.delay_ms", "a delay needs delay_ms (or jitter_ms) greater than 0")
    return Drop(node=node, direction=direction, peer=peer, types=types, p=p, count=count,
                after=after, seqnos=seqnos, until=until, action=action, delay_ms=delay_ms,
                jitter_ms=jitter_ms)


def _link(raw: Any, path: str, nodes: tuple[str, ...]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Resolve "X->Y", "X<->Y" or "*" (and "X->*", "*->Y") into directed links."""
    spec = _string(raw, path).strip()
    if spec == "*":
        return spec, tuple((a, b) for a in nodes for b in nodes if a != b)
    both = "<->" in spec
    parts = spec.split("<->" if both else "->")
    if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
        raise ScenarioError(path, f"{spec!r} is not a link (use X->Y, X<->Y or \"*\")")
    a, b = parts[0].strip(), parts[1].strip()
    srcs = nodes if a == "*" else (_node(a, path, nodes),)
    dsts = nodes if b == "*" else (_node(b, path, nodes),)
    links = [(x, y) for x in srcs for y in dsts if x != y]
    if both:
        links += [(y, x) for x, y in links if (y, x) not in links]
    if not links:
        raise ScenarioError(path, f"{spec!r} names no link between two different nodes")
    return spec, tuple(links)


def _check_lifecycle(steps: list[FaultStep], nodes: tuple[str, ...]) -> None:
    """Walk the schedule and refuse steps that make no sense for a node's state at that time."""
    state = {n: "running" for n in nodes}
    for step in steps:
        path = f"schedule[{step.source_index}].{step.kind}"
        p = step.params
        if step.kind in NODE_KINDS:
            cur = state[p.node]
            if step.kind == "kill":
                if cur == "dead":
                    raise ScenarioError(path, f"{p.node} is already dead at {step.at:g}")
                state[p.node] = "dead"
            elif step.kind == "pause":
                if cur != "running":
                    raise ScenarioError(path, f"{p.node} is {cur} at {step.at:g}, not running")
                state[p.node] = "paused"
            elif step.kind == "resume":
                if cur != "paused":
                    raise ScenarioError(path, f"{p.node} is {cur} at {step.at:g}, not paused")
                state[p.node] = "running"
            else:  # restart: starts a dead node, or kills and starts a live one
                state[p.node] = "running"
        elif step.kind in ("view", "drop", "sync") and state[p.node] == "dead":
            raise ScenarioError(f"{path}.at", f"{p.node} is dead at {step.at:g}")


def _known_checks(checks: list[str]) -> None:
    """Check names against harness.checks when it is importable (it owns the list)."""
    try:
        from harness.checks import CHECKS
    except ImportError:  # pragma: no cover - only while harness.checks is being written
        return
    for i, c in enumerate(checks):
        if c not in CHECKS:
            raise ScenarioError(f"checks[{i}]", f"unknown check {c!r} (known: {', '.join(CHECKS)})")


def _expect(raw: Any, checks: list[str]) -> str | None:
    if raw == "pass":
        return None
    if isinstance(raw, dict):
        _check_keys(raw, "expect", ("fail",), ("fail",))
        name = _string(raw["fail"], "expect.fail")
        if name not in checks:
            raise ScenarioError("expect.fail", f"{name!r} is not among the checks ({', '.join(checks)})")
        return name
    raise ScenarioError("expect", f"must be 'pass' or {{fail: CHECK}}, got {raw!r}")


# ---- small validators -------------------------------------------------------------------------


def _check_keys(d: dict, path: str, allowed: tuple[str, ...], required: tuple[str, ...]) -> None:
    prefix = f"{path}." if path else ""
    for key in d:
        if key not in allowed:
            raise ScenarioError(f"{prefix}{key}", f"unknown key (expected one of: {', '.join(allowed)})")
    for key in required:
        if key not in d:
            raise ScenarioError(f"{prefix}{key}", "missing")


def _mapping(raw: Any, path: str) -> dict:
    if not isinstance(raw, dict):
        raise ScenarioError(path, f"must be a mapping, got {_type_name(raw)}")
    return raw


def _string(raw: Any, path: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise ScenarioError(path, f"must be a non-empty string, got {_type_name(raw)} {raw!r}")
    return raw


def _number(raw: Any, path: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise ScenarioError(path, f"must be a number, got {_type_name(raw)} {raw!r}")
    return float(raw)


def _probability(raw: Any, path: str) -> float:
    p = _number(raw, path)
    if not 0.0 <= p <= 1.0:
        raise ScenarioError(path, "must be between 0 and 1")
    return p


def _choice(raw: Any, path: str, options: tuple[str, ...]) -> str:
    if raw not in options:
        raise ScenarioError(path, f"must be one of {', '.join(options)}, got {raw!r}")
    return raw


def _one_or_list(items: tuple[str, ...]) -> Any:
    return items[0] if len(items) == 1 else list(items)


def _type_name(raw: Any) -> str:
    return "null" if raw is None else type(raw).__name__
