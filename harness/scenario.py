"""Scenario files: a cluster, a workload and a fault schedule, loaded from YAML and validated.

A scenario says which protocol runs on which nodes, what the application sends (streams), which
faults the harness applies when (the schedule), how long the run lasts and which checks judge it.
Every backend (sim, local, docker) runs the same `Scenario` object, so everything is checked
here, once, before a node starts: unknown keys and bad values raise one `ScenarioError` that
lists every problem of the file, each with its field path, e.g. ``schedule[2].loss.p: must be
between 0 and 1``. Paths use the indexes as written in the file, even though the schedule is
stored sorted by time. `json_schema()` (`splitbrain schema`) is the JSON Schema of the files.

The fault vocabulary is shared with the simulator's network model and the real
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

import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    Strict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    create_model,
    model_validator,
)

from splitbrain.harness.names import INJECTORS  # which injector applies network faults
from splitbrain.harness.validation import (
    InputModel,
    NonNegative,
    NonNegativeInt,
    Positive,
    PositiveInt,
    Probability,
    Problems,
    choice,
    context,
    error_path,
    explain,
    fail,
    problem,
    problems_of,
    remember,
    type_name,
    validate_part,
)
from splitbrain.node import protocols
from splitbrain.node.compose import STATIC, recovery_bound_s, refusal, split_config
from splitbrain.node.errors import BadInput, SettingError
from splitbrain.node.layer import SyncPeer
from splitbrain.node.message import MCAST_DEST as GROUP_DEST
from splitbrain.node.runtime.config import TRANSPORTS

# Checks every run gets, listed or not: an exception inside a protocol layer is always our bug.
ALWAYS_CHECKS = ("no_errors",)
# A scenario without `checks:` is judged by its protocol's default checks (node/protocols.py)
# and ALWAYS_CHECKS; this is that list for the default protocol.
DEFAULT_CHECKS = ("fifo", "no_duplicates", "no_loss", "no_errors")


# Checks a membership protocol adds to the defaults (`membership: gms`): harness.checks.MEMBERSHIP_CHECKS.
MEMBERSHIP_DEFAULT_CHECKS = ("views_agree",)


def default_checks(protocol: str, membership: str = "static") -> tuple[str, ...]:
    """The checks of a scenario without `checks:`: its protocol's, the membership checks when a
    membership protocol makes the views (`membership: gms`), and ALWAYS_CHECKS."""
    own = protocols.get(protocol).default_checks
    extra = MEMBERSHIP_DEFAULT_CHECKS if membership != "static" else ()
    own = (*own, *(c for c in extra if c not in own))
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
# Toxiproxy toxics on TCP links (docker backend, transport tcp only) are healable like network faults.
STEP_KINDS = NETWORK_KINDS + ("drop", "view", "sync", "config") + NODE_KINDS + ("heal", "toxic")
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

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*$")
_CHECK_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_RESERVED_NAMES = frozenset({"all", "harness", "node"})


class ScenarioError(BadInput, ValueError):
    """A scenario that cannot run. `path` and `reason` are its (first) problem's; `problems` lists
    every (path, reason) of the file, and str() gives one "path: reason" line for each."""

    def __init__(self, path: str, message: str, problems: list[tuple[str, str]] | None = None):
        self.path = path
        self.reason = message
        self.problems = problems or [(path, message)]
        super().__init__("\n".join(f"{p}: {m}" if p else m for p, m in self.problems))


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
    if isinstance(p, Partition):
        pairs = p.links
    elif isinstance(p, LinkProbability) and step.kind == "loss" and p.p >= 1.0:
        pairs = p.links
    elif isinstance(p, Toxic) and p.type in _CUTTING_TOXICS:
        pairs = p.links
    elif isinstance(p, NodeTarget) and step.kind in ("pause", "resume"):
        pairs = node_links(p.node, nodes)
    elif (
        isinstance(p, Drop)
        and p.action == "drop"
        and p.p >= 1.0
        and p.count is None
        and p.seqnos is None
        and p.until is None
    ):
        peers = [p.peer] if p.peer is not None else [n for n in nodes if n != p.node]
        pairs = tuple((a, b) for peer in peers for a, b in ((peer, p.node), (p.node, peer)))
    return [f"{a}->{b}" for a, b in pairs]


def step_node(step: FaultStep) -> str:
    """The node a node step (lifecycle, drop, view, sync, config) acts at."""
    p = step.params
    if not isinstance(p, NodeTarget | Drop | View | SyncStep | ConfigStep):
        raise TypeError(f"{step.kind} step has no node")
    return p.node


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


# ---- loading ----------------------------------------------------------------------------------


# libyaml's parser when PyYAML has it: the same documents for a seventh of the instructions of the
# pure-Python parser on a scenario file (part of every command's start-up).
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read and validate a scenario file. A missing file raises FileNotFoundError; bad YAML or a
    bad value raises ScenarioError."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError:
        data = _load_yaml_slowly(path, text)
    return parse_scenario(data, base_dir=path.parent)


def _load_yaml_slowly(path: Path, text: str) -> Any:
    """The pure-Python parser, for a file libyaml refused: its messages and positions are the
    ones users get (libyaml's are vaguer and sometimes a line late)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ScenarioError("", f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None


def parse_scenario(data: Any, base_dir: str | os.PathLike[str] | None = None) -> Scenario:
    """Validate a scenario given as a dict (as loaded from YAML) and resolve it. Every problem of
    the file is reported at once, in one ScenarioError. `base_dir` is where relative paths in it
    (jgroups.stack) start: the scenario file's directory (default: the working directory)."""
    try:
        f = ScenarioFile.model_validate(data, context={"base_dir": Path(base_dir or ".")})
    except ValidationError as exc:
        problems = problems_of(exc)
        raise ScenarioError(*problems[0], problems=problems) from None
    return Scenario(
        name=f.name,
        protocol=f.protocol,
        transport=f.transport,
        nodes=f.nodes,
        config=f.config or {},
        streams=f.workload,
        schedule=f.schedule,
        duration=f.duration,
        settle=f.settle,
        checks=tuple(f.checks or ()),
        expect_fail=f.expect_fail,
        seed=f.seed,
        injector=f.injector,
        membership=f.membership,
        recovery_bound=f.recovery_bound,
        resync_bound=f.resync_bound,
        xmit_bound=f.xmit_bound,
        wire=f.wire,
        ip_multicast=f.ip_multicast,
        jgroups=None if f.jgroups is None else f.jgroups.resolved(),
    )


def json_schema() -> dict:
    """The JSON Schema of scenario files (`splitbrain schema`)."""
    schema = ScenarioFile.model_json_schema()
    schema["title"] = "splitbrain scenario"
    # The protocols registered now (the registry may grow at run time).
    schema["properties"]["protocol"]["enum"] = [*protocols.names(), *protocols.external_names()]
    schema["properties"]["membership"]["enum"] = ["static", *protocols.membership_names()]
    return schema


def check_backend(scenario: Scenario, backend: str, injector: str | None = None) -> None:
    """Raise ScenarioError (naming the field) when `backend` cannot run what the scenario asks.

    Toxic steps need the docker backend (with transport tcp). The scenario's `injector` key is a
    preference of the docker backend: sim and local run the same file with their own injector
    (the network model, the in-process fault layer), so that one file gives one verdict on every
    backend. `injector` (a command-line flag) is a demand: iptables or toxiproxy off docker is
    refused."""
    if protocols.get(scenario.protocol).external:
        _external_fits(scenario, backend)
    chosen = scenario.injector if injector in (None, "auto") else injector
    where = "injector" if injector in (None, "auto") else "--injector"
    if backend != "docker":
        for step in scenario.schedule:
            if step.kind == "toxic":
                raise ScenarioError(
                    f"schedule[{step.source_index}].toxic",
                    f"needs the docker backend with transport tcp (backend {backend} has no Toxiproxy in its links)",
                )
        if injector in ("iptables", "toxiproxy"):
            how = "in its network model" if backend == "sim" else "in-process"
            raise ScenarioError(
                where, f"{injector} needs the docker backend (backend {backend} applies network faults {how})"
            )
    why = _injector_problem(chosen, scenario.transport, scenario.schedule)
    if why:
        raise ScenarioError(where, why)
    if scenario.ip_multicast and backend == "local":
        from splitbrain.harness.mcastprobe import loopback_status

        works, why = loopback_status()
        if not works:
            raise ScenarioError(
                "ip_multicast", f"the local backend cannot use IP multicast here: {why} (splitbrain doctor)"
            )


def _external_fits(scenario: Scenario, backend: str) -> None:
    """A real implementation runs on live backends only, and needs its runtime on this host."""
    if backend == "sim":
        raise ScenarioError(
            "protocol",
            f"{scenario.protocol} is a real implementation (its own processes): the simulator cannot run it; "
            "use --backend local or --backend docker",
        )
    if backend == "local":
        from splitbrain.node.jgroups.launch import runtime_problem

        why = runtime_problem((scenario.jgroups or {}).get("jar"))
        if why:
            raise ScenarioError("jgroups.jar", why)
    if backend == "docker":
        from splitbrain.node.jgroups.launch import DEFAULT_JAR

        jar = (scenario.jgroups or {}).get("jar") or DEFAULT_JAR
        if jar != DEFAULT_JAR:
            raise ScenarioError(
                "jgroups.jar",
                f"the docker backend runs the jar of its JGroups node image ({DEFAULT_JAR}); {jar} needs an "
                "image of its own (node/jgroups/Dockerfile on a base that has it), or --backend local",
            )


def _injector_problem(injector: str, transport: str, schedule: tuple[FaultStep, ...]) -> str | None:
    if injector == "toxiproxy" and transport != "tcp":
        return f"toxiproxy needs transport: tcp (this scenario uses {transport})"
    if injector == "iptables" and any(step.kind == "toxic" for step in schedule):
        return (
            "iptables cannot tell apart TCP links routed through Toxiproxy, which toxic steps need: "
            "use injector auto, toxiproxy or inprocess"
        )
    return None


# ---- the file, as pydantic models -------------------------------------------------------------
#
# The models below describe the file as written (and give its JSON Schema); validators resolve
# what the runners use (node names, directed links, Stream, FaultStep). ScenarioFile's fields are
# validated in order and later ones read what earlier ones resolved from the validation context:
# nodes, config, duration, checks, the schedule. harness/validation.py says how problems are
# reported. Paths use the indexes as written in the file.


def _known_node(name: str, info: ValidationInfo) -> str:
    nodes = context(info).get("nodes")
    if nodes is not None and name not in nodes:
        raise problem(f"unknown node {name!r} (nodes: {', '.join(nodes)})")
    return name


NodeRef = Annotated[str, Strict(), Field(min_length=1), AfterValidator(_known_node)]
_NODE = TypeAdapter(NodeRef)
_NODE_LIST = TypeAdapter(list[NodeRef])


def _node_names(raw: Any, info: ValidationInfo) -> tuple[str, ...]:
    if isinstance(raw, int) and not isinstance(raw, bool):
        if not 1 <= raw <= MAX_NODES:
            raise problem(f"a node count must be between 1 and {MAX_NODES}")
        names: tuple[str, ...] = tuple(_letters(i) for i in range(raw))
    elif not isinstance(raw, list) or not raw:
        raise problem("must be a non-empty list of names or a count")
    else:
        problems = Problems()
        seen: list[str] = []
        for i, n in enumerate(raw):
            if not isinstance(n, str) or not n:
                problems.add(f"must be a non-empty string, got {type_name(n)} {n!r}", i)
            elif not _NAME_RE.match(n) or n.lower() in _RESERVED_NAMES:
                problems.add(
                    f"{n!r} is not a valid node name (letters, digits, '_', inner '-'; not 'all', 'harness' or 'node')",
                    i,
                )
            elif n in seen:
                problems.add(f"{n!r} is listed twice", i)
            seen.append(n)
        problems.raise_any()
        names = tuple(raw)
    context(info)["nodes"] = names
    return names


def _letters(i: int) -> str:
    if i < 26:
        return chr(ord("A") + i)
    return chr(ord("A") + i // 26 - 1) + chr(ord("A") + i % 26)


NodeNames = Annotated[
    tuple[str, ...],
    PlainValidator(
        _node_names,
        json_schema_input_type=Union[
            Annotated[int, Field(ge=1, le=MAX_NODES)],
            Annotated[list[Annotated[str, Field(pattern=_NAME_RE.pattern)]], Field(min_length=1)],
        ],
    ),
]


def _nodes_or_all(raw: Any, info: ValidationInfo) -> tuple[str, ...]:
    if raw == "all":
        return tuple(context(info).get("nodes", ()))
    if not isinstance(raw, list):
        return (validate_part(_NODE, raw, info),)
    if not raw:
        raise problem("must name at least one node")
    return tuple(validate_part(_NODE_LIST, raw, info))


NodesOrAll = Annotated[
    tuple[str, ...],
    PlainValidator(
        _nodes_or_all, json_schema_input_type=Union[Literal["all"], str, Annotated[list[str], Field(min_length=1)]]
    ),
]

Links = tuple[tuple[str, str], ...]


def _link(raw: Any, info: ValidationInfo) -> tuple[str, Links]:
    """Resolve "X->Y", "X<->Y" or "*" (and "X->*", "*->Y") into directed links."""
    if not isinstance(raw, str) or not raw:
        raise problem(f"must be a non-empty string, got {type_name(raw)} {raw!r}")
    spec = raw.strip()
    nodes = tuple(context(info).get("nodes", ()))
    if spec == "*":
        return spec, tuple((a, b) for a in nodes for b in nodes if a != b)
    both = "<->" in spec
    parts = [part.strip() for part in spec.split("<->" if both else "->")]
    if len(parts) != 2 or not all(parts):
        raise problem(f'{spec!r} is not a link (use X->Y, X<->Y or "*")')
    srcs = nodes if parts[0] == "*" else (validate_part(_NODE, parts[0], info),)
    dsts = nodes if parts[1] == "*" else (validate_part(_NODE, parts[1], info),)
    links = [(x, y) for x in srcs for y in dsts if x != y]
    if both:
        links += [(y, x) for x, y in links if (y, x) not in links]
    if not links and nodes:
        raise problem(f"{spec!r} names no link between two different nodes")
    return spec, tuple(links)


Link = Annotated[
    tuple[str, Links],
    PlainValidator(
        _link,
        json_schema_input_type=Annotated[
            str, Field(description='X->Y (one way), X<->Y (both ways) or "*" (every link); X->* and *->Y too')
        ],
    ),
]


# ---- the workload -----------------------------------------------------------------------------


class StreamSpec(InputModel):
    """One entry of `workload`: from each sender to each other receiver, `rate` messages a second."""

    src: NodesOrAll = Field(alias="from")
    dest: NodesOrAll = Field(alias="to")
    rate: Annotated[float, Field(gt=0), explain("must be greater than 0 (messages per second)")]
    count: PositiveInt | None = None
    duration: Positive | None = None
    size: Annotated[
        int, Field(ge=0, le=60_000), explain("must be an integer number of bytes in 0..60000, got {!r}")
    ] = DEFAULT_SIZE
    start: NonNegative = 0.0

    @model_validator(mode="after")
    def _fits(self, info: ValidationInfo) -> StreamSpec:
        if self.count is None and self.duration is None:
            fail("needs count or duration (or both)")
        problems = Problems()
        duration = context(info).get("duration")
        if duration is not None:
            # The scenario's duration is the workload's time budget, so a stream must fit in it: a
            # count that cannot be reached would silently shrink the run.
            if self.start >= duration:
                problems.add(f"{self.start:g} is not before the scenario duration {duration:g}", "start")
            elif self.count is not None and self.start + (self.count - 1) / self.rate >= duration:
                problems.add(
                    f"{self.count} messages at {self.rate:g}/s from t={self.start:g} do not fit in "
                    f"duration {duration:g}s",
                    "count",
                )
            elif self.duration is not None and self.start + self.duration > duration + 1e-9:
                problems.add(
                    f"the stream ends at {self.start + self.duration:g}s, after the scenario duration {duration:g}s",
                    "duration",
                )
        if not self.pairs():
            problems.add("a stream needs a sender and a different receiver")
        problems.raise_any()
        return self

    def pairs(self, multicast: bool = False) -> list[tuple[str, str]]:
        """(sender, receiver) per stream; with `multicast`, one stream per sender to MCAST_DEST."""
        if multicast:
            return [(s, GROUP_DEST) for s in self.src if any(r != s for r in self.dest)]
        return [(s, r) for s in self.src for r in self.dest if s != r]


_STREAMS = TypeAdapter(list[StreamSpec])


def _workload(raw: Any, info: ValidationInfo) -> tuple[Stream, ...]:
    specs = validate_part(_STREAMS, raw, info)
    protocol = context(info).get("protocol")
    try:
        multicasts = protocol is not None and protocols.get(protocol).multicast
    except ValueError:
        multicasts = False
    streams: list[Stream] = []
    for entry, spec in zip(raw, specs):
        # `to: all` under a multicast protocol: one stream per sender, each message one multicast
        # to the sender's current view (for a unicast protocol, one stream per receiver).
        multicast = multicasts and isinstance(entry, dict) and entry.get("to") == "all"
        for s, r in spec.pairs(multicast):
            streams.append(
                Stream(
                    src=s,
                    dest=r,
                    rate=spec.rate,
                    count=spec.count,
                    duration=spec.duration,
                    size=spec.size,
                    start=spec.start,
                    index=len(streams),
                )
            )
    return tuple(streams)


# ---- schedule steps ---------------------------------------------------------------------------


class OneWaySpec(InputModel):
    """partition: {from: X, to: Y}: nothing from X reaches Y."""

    src: NodesOrAll = Field(alias="from")
    dest: NodesOrAll = Field(alias="to")


TwoWaySpec = Annotated[list[Annotated[list[str], Field(min_length=1)]], Field(min_length=2)]


def _partition(raw: Any, info: ValidationInfo) -> Partition:
    if isinstance(raw, dict):
        one_way = OneWaySpec.model_validate(raw, context=info.context)
        links = tuple((a, b) for a in one_way.src for b in one_way.dest if a != b)
        if not links:
            raise problem("blocks no link (from and to are the same node)")
        return Partition(one_way=True, groups=(one_way.src, one_way.dest), links=links)
    if not isinstance(raw, list):
        raise problem("must be {from: X, to: Y} (one-way) or a list of groups [[A], [B, C]] (two-way)")
    if len(raw) < 2:
        raise problem("a two-way partition needs at least two groups")
    problems = Problems()
    groups: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for g, group in enumerate(raw):
        if not isinstance(group, list) or not group:
            problems.add("must be a non-empty list of nodes", g)
            continue
        try:
            members = tuple(validate_part(_NODE_LIST, group, info))
        except ValidationError as exc:
            problems.collect(exc, g)
            continue
        for j, n in enumerate(members):
            if n in seen:
                problems.add(f"{n} is in more than one group", g, j)
            seen.add(n)
        groups.append(members)
    problems.raise_any()
    links = tuple(
        (a, b) for gi, ga in enumerate(groups) for gj, gb in enumerate(groups) if gi != gj for a in ga for b in gb
    )
    return Partition(one_way=False, groups=tuple(groups), links=links)


class LinkProbabilitySpec(InputModel):
    """loss, duplicate: probability p per frame on the links named by `link`."""

    link: Link
    p: Probability

    def build(self) -> LinkProbability:
        return LinkProbability(link=self.link[0], links=self.link[1], p=self.p)


class DelaySpec(InputModel):
    """Latency `ms` plus or minus a uniform `jitter_ms` on the links named by `link`."""

    link: Link
    ms: NonNegative
    jitter_ms: NonNegative = 0.0

    def build(self) -> Delay:
        return Delay(link=self.link[0], links=self.link[1], ms=self.ms, jitter_ms=self.jitter_ms)


class ReorderSpec(InputModel):
    """With probability p a frame is held back by an extra uniform delay of up to `ms`."""

    link: Link
    p: Probability
    ms: Positive = DEFAULT_REORDER_MS

    def build(self) -> Reorder:
        return Reorder(link=self.link[0], links=self.link[1], p=self.p, ms=self.ms)


MessageType = Annotated[
    str, Strict(), Field(pattern=r"^[A-Z][A-Z0-9_-]*$"), explain("{!r} is not a message type (like DATA, ACK)")
]
_TYPE = TypeAdapter(MessageType)
_TYPE_LIST = TypeAdapter(list[MessageType])


def _message_types(raw: Any, info: ValidationInfo) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return (validate_part(_TYPE, raw, info),)
    if not raw:
        raise problem("must name at least one message type")
    return tuple(validate_part(_TYPE_LIST, raw, info))


def _seqnos(raw: Any) -> tuple[int, int]:
    if (
        not isinstance(raw, list)
        or len(raw) != 2
        or any(isinstance(x, bool) or not isinstance(x, int) for x in raw)
        or not 0 <= raw[0] <= raw[1]
    ):
        raise problem(f"must be [lo, hi] with 0 <= lo <= hi, got {raw!r}")
    return raw[0], raw[1]


_Direction = choice(("up", "down"))


class DropSpec(InputModel):
    """An in-process rule at `at` (see Drop)."""

    at: NodeRef
    src: NodeRef | None = Field(None, alias="from")
    dest: NodeRef | None = Field(None, alias="to")
    type: Annotated[
        tuple[str, ...] | None,
        PlainValidator(
            _message_types, json_schema_input_type=Union[MessageType, Annotated[list[MessageType], Field(min_length=1)]]
        ),
    ] = None
    direction: _Direction = "up"
    p: Probability = 1.0
    count: PositiveInt | None = None
    after: NonNegativeInt = 0
    seqnos: Annotated[
        tuple[int, int] | None,
        PlainValidator(
            _seqnos,
            json_schema_input_type=Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=2, max_length=2)],
        ),
    ] = None
    until: float | None = None
    action: choice(DROP_ACTIONS) = "drop"
    delay_ms: NonNegative = 0.0
    jitter_ms: NonNegative = 0.0

    @model_validator(mode="after")
    def _consistent(self) -> DropSpec:
        if self.direction == "up" and self.dest is not None:
            fail("only with direction: down (received messages use from:)", "to")
        if self.direction == "down" and self.src is not None:
            fail("only with direction: up (sent messages use to:)", "from")
        if self.peer == self.at:
            fail(f"a rule at {self.at} cannot name {self.at} as its peer")
        for key in ("delay_ms", "jitter_ms"):
            if getattr(self, key) and self.action != "delay":
                fail("only with action: delay", key)
        if self.action == "delay" and not self.delay_ms and not self.jitter_ms:
            fail("a delay needs delay_ms (or jitter_ms) greater than 0", "delay_ms")
        return self

    @property
    def peer(self) -> str | None:
        return self.src if self.direction == "up" else self.dest

    def build(self) -> Drop:
        return Drop(
            node=self.at,
            direction=self.direction,
            peer=self.peer,
            types=self.type,
            p=self.p,
            count=self.count,
            after=self.after,
            seqnos=self.seqnos,
            until=self.until,
            action=self.action,
            delay_ms=self.delay_ms,
            jitter_ms=self.jitter_ms,
        )


class ViewSpec(InputModel):
    """Inject a membership view at `at`; it must contain `at`."""

    at: NodeRef
    members: Annotated[list[NodeRef], Field(min_length=1), explain("must be a non-empty list of nodes")]

    @model_validator(mode="after")
    def _contains_at(self) -> ViewSpec:
        if len(set(self.members)) != len(self.members):
            fail("lists a node twice", "members")
        if self.at not in self.members:
            fail(f"a view installed at {self.at} must contain {self.at}", "members")
        return self

    def build(self) -> View:
        return View(node=self.at, members=tuple(self.members))


class SyncSpec(InputModel):
    """The SYNC admin operation: `at`, as receiver, resyncs with sender `peer`."""

    at: NodeRef
    peer: NodeRef

    @model_validator(mode="after")
    def _two_nodes(self) -> SyncSpec:
        if self.peer == self.at:
            fail(f"{self.at} cannot sync with itself", "peer")
        return self

    def build(self) -> SyncStep:
        return SyncStep(node=self.at, peer=self.peer)


class ConfigSpec(InputModel):
    """Change protocol settings at `at` at run time (as admin POST /config): `set` maps settings to
    their new values, validated by the protocol like the scenario's `config:`."""

    at: NodeRef
    set: Annotated[dict[str, Any], Field(min_length=1)]

    def build(self) -> ConfigStep:
        return ConfigStep(node=self.at, values=tuple(sorted(self.set.items())))


def _heal(raw: Any, info: ValidationInfo) -> Heal:
    if raw == "all":
        return Heal(target="all")
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise problem(f"must be 'all' or the index of a schedule step, got {raw!r}")
    steps = context(info).get("schedule_len", 0)
    if not 0 <= raw < steps:
        raise problem(f"no schedule step {raw} (the schedule has {steps})")
    return Heal(target=raw)


# ---- toxics: one model per Toxiproxy type ----------------------------------------------------

# Toxiproxy counts in integers; a whole float (40.0) is the same number.
_WholeInt = BeforeValidator(lambda v: int(v) if isinstance(v, float) and v.is_integer() else v)


class _ToxicSpec(InputModel):
    """A toxic on the TCP links named by `link`; each type's model adds its attributes."""

    link: Link
    type: str  # each type's model narrows it to its own name
    toxicity: Probability = 1.0

    @model_validator(mode="after")
    def _attributes_fit(self) -> _ToxicSpec:
        a, kind = self.attributes(), self.type
        if kind == "jitter" and a["jitter"] <= 0:
            fail("must be greater than 0", "jitter")
        if kind == "slicer" and a["average_size"] <= 0:
            fail("must be greater than 0 (bytes per slice)", "average_size")
        if kind == "slicer" and a["size_variation"] >= a["average_size"]:
            fail("must be smaller than average_size", "size_variation")
        if kind == "bandwidth" and a["rate"] <= 0:
            fail("must be greater than 0 (KB/s)", "rate")
        if kind == "limit_data" and a["bytes"] <= 0:
            fail("must be greater than 0", "bytes")
        if kind == "down" and self.toxicity != 1.0:
            fail("down disables the proxies: it has no toxicity", "toxicity")
        return self

    def attributes(self) -> dict[str, int]:
        return {key: getattr(self, key) for key in TOXIC_TYPES[self.type]}

    def build(self) -> Toxic:
        attrs = self.attributes()
        if self.type == "jitter" and attrs["latency"] == -1:
            attrs["latency"] = attrs["jitter"]
        return Toxic(
            link=self.link[0],
            links=self.link[1],
            type=self.type,
            attributes=tuple(attrs.items()),
            toxicity=self.toxicity,
        )


def _toxic_model(kind: str, attributes: dict[str, int]) -> type[_ToxicSpec]:
    fields: dict[str, Any] = {"type": (Literal[kind], ...)}
    for key, default in attributes.items():
        # A jitter toxic's latency -1 means "the same as the jitter".
        lowest = -1 if (kind, key) == ("jitter", "latency") else 0
        fields[key] = (Annotated[int, _WholeInt, Field(ge=lowest)], default)
    return create_model(f"Toxic_{kind}", __base__=_ToxicSpec, **fields)


_TOXIC_MODELS = {kind: _toxic_model(kind, attrs) for kind, attrs in TOXIC_TYPES.items()}


def _toxic(raw: Any, info: ValidationInfo) -> Toxic:
    if not isinstance(raw, dict):
        raise problem(f"must be a mapping, got {type_name(raw)}")
    if "type" not in raw:
        fail(f"missing (one of: {', '.join(TOXIC_TYPES)})", "type")
    model = _TOXIC_MODELS.get(raw["type"]) if isinstance(raw["type"], str) else None
    if model is None:
        fail(f"must be one of {', '.join(TOXIC_TYPES)}, got {raw['type']!r}", "type")
    return model.model_validate(raw, context=info.context).build()


# ---- a step and the schedule ------------------------------------------------------------------


def _built(model: type[BaseModel]) -> Any:
    """A step body validated by `model`, kept as the object the runners use."""
    return Annotated[model, AfterValidator(lambda spec: spec.build())]


NodeStep = Annotated[NodeRef, AfterValidator(lambda node: NodeTarget(node=node))]


class StepSpec(InputModel):
    """One entry of `schedule`: `at` (seconds from the start) and exactly one kind of step."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 2, "maxProperties": 2})

    at: Annotated[float, Field(ge=0), explain("must not be negative, got {:g}")]
    partition: (
        Annotated[Partition, PlainValidator(_partition, json_schema_input_type=Union[OneWaySpec, TwoWaySpec])] | None
    ) = None
    loss: _built(LinkProbabilitySpec) | None = None
    delay: _built(DelaySpec) | None = None
    duplicate: _built(LinkProbabilitySpec) | None = None
    reorder: _built(ReorderSpec) | None = None
    drop: _built(DropSpec) | None = None
    view: _built(ViewSpec) | None = None
    sync: _built(SyncSpec) | None = None
    config: _built(ConfigSpec) | None = None
    kill: NodeStep | None = None
    pause: NodeStep | None = None
    resume: NodeStep | None = None
    restart: NodeStep | None = None
    heal: (
        Annotated[
            Heal, PlainValidator(_heal, json_schema_input_type=Union[Literal["all"], Annotated[int, Field(ge=0)]])
        ]
        | None
    ) = None
    toxic: (
        Annotated[
            Toxic,
            PlainValidator(
                _toxic,
                json_schema_input_type=Annotated[Union[tuple(_TOXIC_MODELS.values())], Field(discriminator="type")],
            ),
        ]
        | None
    ) = None

    @classmethod
    def unknown_key_message(cls) -> str:
        return f"unknown key (a step has 'at' and one of: {', '.join(STEP_KINDS)})"

    @model_validator(mode="after")
    def _one_kind(self) -> StepSpec:
        kinds = [k for k in STEP_KINDS if k in self.model_fields_set]
        if len(kinds) != 1 or getattr(self, kinds[0]) is None:
            fail(f"needs exactly one of {', '.join(STEP_KINDS)}; got {', '.join(kinds) or 'none'}")
        if isinstance(self.params, Drop) and self.params.until is not None and self.params.until < self.at:
            fail(f"{self.params.until:g} is before the step's time {self.at:g}", "drop", "until")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in STEP_KINDS if k in self.model_fields_set)

    @property
    def params(self) -> StepParams:
        return getattr(self, self.kind)


_STEPS = TypeAdapter(list[StepSpec])


def _schedule(raw: Any, info: ValidationInfo) -> tuple[FaultStep, ...]:
    ctx = context(info)
    ctx["schedule_len"] = len(raw) if isinstance(raw, list) else 0
    specs: list[StepSpec] = validate_part(_STEPS, [] if raw is None else raw, info)
    # A stable sort keeps steps with equal times in file order; `heal: N` is written with file
    # indexes and resolved to sorted positions below.
    order = sorted(range(len(specs)), key=lambda i: specs[i].at)
    position = {src: pos for pos, src in enumerate(order)}
    problems = Problems()
    steps: list[FaultStep] = []
    for pos, src in enumerate(order):
        spec = specs[src]
        params = spec.params
        if isinstance(params, Heal) and isinstance(params.target, int):
            written = params.target
            target_kind = specs[written].kind
            if written == src:
                problems.add("a heal cannot undo itself", src, "heal")
            elif target_kind not in HEALABLE_KINDS:
                problems.add(
                    f"schedule[{written}] is a {target_kind} step; heal undoes "
                    f"{', '.join(sorted(HEALABLE_KINDS))} (use resume/restart for nodes)",
                    src,
                    "heal",
                )
            elif position[written] > pos:
                problems.add(f"schedule[{written}] happens after this heal", src, "heal")
            params = Heal(target=position[written])
        external = "protocol" in ctx and protocols.get(ctx["protocol"]).external
        if external and spec.kind in ("sync", "config"):
            # A real implementation has neither: they drive splitbrain's own protocols.
            problems.add(f"{ctx['protocol']} takes no {spec.kind} steps", src, spec.kind)
        elif isinstance(params, SyncStep) and "protocol" in ctx and "config" in ctx:
            why = refusal(
                ctx["protocol"],
                ctx["config"],
                SyncPeer(peer=params.peer),
                random.Random(0),
                ctx.get("membership", "static"),
            )
            if why:
                problems.add(f"the admin sync operation is refused: {why}", src, "sync")
        if isinstance(params, Drop) and params.types is not None and "protocol" in ctx:
            for why in _drop_type_problems(ctx["protocol"], ctx.get("membership", STATIC), params.types):
                problems.add(why, src, "drop", "type")
        if isinstance(params, ConfigStep) and "protocol" in ctx and "config" in ctx and not external:
            for key, why in _config_step_problems(ctx, dict(params.values), specs):
                problems.add(why, src, "config", "set", key)
        if spec.kind == "toxic" and ctx.get("transport", "tcp") != "tcp":
            problems.add(
                f"needs transport: tcp (Toxiproxy proxies TCP links; this scenario uses {ctx['transport']})",
                src,
                "toxic",
            )
        steps.append(FaultStep(at=spec.at, kind=spec.kind, params=params, index=pos, source_index=src))
    for message, *loc in _lifecycle_problems(steps, tuple(ctx.get("nodes", ()))):
        problems.add(message, *loc)
    problems.raise_any()
    ctx["schedule"] = tuple(steps)
    return tuple(steps)


def _drop_type_problems(protocol: str, membership: str, types: tuple[str, ...]) -> list[str]:
    """Message types a drop step names that no message of this stack has: the protocol's, the
    membership protocol's with `membership: gms`, and APP. A membership protocol's type in a
    static scenario says which `membership:` would send it."""
    known = protocols.message_types(protocol)
    if membership != STATIC:
        known |= protocols.message_types(membership)
    problems = []
    for mtype in types:
        if mtype in known:
            continue
        owners = [m for m in protocols.membership_names() if mtype in protocols.get(m).message_types]
        if owners:
            problems.append(
                f"{mtype} is a message of membership protocol {owners[0]}: it is sent only with "
                f"`membership: {owners[0]}` (this scenario's membership is {membership})"
            )
        else:
            problems.append(
                f"{protocol}{'' if membership == STATIC else ' with ' + membership} sends no {mtype} "
                f"messages (its types: {', '.join(sorted(known))})"
            )
    return problems


def _config_step_problems(ctx: dict, values: dict, specs: list) -> list[tuple[str, str]]:
    """A config step's settings, checked by the protocol on top of the scenario's: unknown keys and
    bad values (a membership protocol's keys by it, split off as the scenario's `config:` is), and
    settings unsafe on this transport or with the scenario's drop steps."""
    try:
        spec = protocols.get(ctx["protocol"])
        membership = ctx.get("membership", STATIC)
        split = split_config(ctx["protocol"], {**ctx["config"], **values}, membership)
        if membership != STATIC:
            protocols.get(membership).config(split[membership])
        own = split[ctx["protocol"]]
        spec.config(own)
        drops = any(s.kind == "drop" and getattr(s.params, "action", "") == "drop" for s in specs)
        return spec.unsafe_settings(own, ctx.get("transport", "udp"), drops)
    except SettingError as exc:
        return [(exc.key, exc.message)]
    except ValueError as exc:
        return [("set", str(exc))]


def _step_params(kind: str, body: Any, path: str, nodes: tuple[str, ...], at: float, raw_len: int) -> StepParams:
    """One step's body, validated as in a file, its problems named under `path` (the pytest fault
    controller builds its steps one at a time)."""
    try:
        spec = StepSpec.model_validate({"at": at, kind: body}, context={"nodes": tuple(nodes), "schedule_len": raw_len})
    except ValidationError as exc:
        problems = [(error_path((path, *e["loc"][1:])), e["msg"]) for e in exc.errors()]
        raise ScenarioError(*problems[0], problems=problems) from None
    return spec.params


def _lifecycle_problems(steps: list[FaultStep], nodes: tuple[str, ...]) -> list[tuple]:
    """Steps that make no sense for a node's state at that time: (message, index, kind[, "at"])."""
    state = {n: "running" for n in nodes}
    problems: list[tuple] = []
    for step in steps if nodes else ():
        if step.kind not in NODE_KINDS and step.kind not in ("view", "drop", "sync", "config"):
            continue
        node, where = step_node(step), (step.source_index, step.kind)
        if step.kind in NODE_KINDS:
            cur = state[node]
            if step.kind == "kill" and cur == "dead":
                problems.append((f"{node} is already dead at {step.at:g}", *where))
            elif step.kind == "pause" and cur != "running":
                problems.append((f"{node} is {cur} at {step.at:g}, not running", *where))
            elif step.kind == "resume" and cur != "paused":
                problems.append((f"{node} is {cur} at {step.at:g}, not paused", *where))
            # restart starts a dead node, or kills and starts a live one.
            state[node] = {"kill": "dead", "pause": "paused"}.get(step.kind, "running")
        elif step.kind in ("view", "drop", "sync", "config") and state[node] == "dead":
            problems.append((f"{node} is dead at {step.at:g}", *where, "at"))
    return problems


# ---- the file ---------------------------------------------------------------------------------


def _protocol(raw: Any) -> str:
    """A registered protocol (the registry may grow at run time, so this asks it each time)."""
    if protocols.is_protocol(raw):
        return raw  # without listing (and so importing) every protocol
    known = protocols.names()
    if raw not in known:
        raise problem(f"must be one of {', '.join(known)}, got {raw!r}")
    return raw


def _membership(raw: Any, info: ValidationInfo) -> str:
    """static, or a registered membership protocol (gms); a real implementation brings its own."""
    known = ("static", *protocols.membership_names())
    if raw not in known:
        raise problem(f"must be one of {', '.join(known)}, got {raw!r}")
    protocol = context(info).get("protocol")
    if raw != "static" and protocol is not None and protocols.get(protocol).external:
        raise problem(f"{protocol} brings its own membership (its stack's): leave membership out")
    return raw


def _transport_fits(transport: str, info: ValidationInfo) -> str:
    protocol = context(info).get("protocol")
    if transport != "udp" and protocol is not None and protocols.get(protocol).external:
        raise problem(f"{protocol} nodes run the transport of their stack: leave transport out")
    return transport


def _protocol_settings(config: dict | None, info: ValidationInfo) -> dict:
    """Check the settings with the protocol itself, so a bad one is reported before anything
    starts, as config.<key>; keep the recovery bound they give."""
    config = dict(config or {})
    ctx = context(info)
    ctx["config"] = config
    if "protocol" in ctx:
        try:
            ctx["recovery_bound"] = recovery_bound_s(ctx["protocol"], config, ctx.get("membership", "static"))
        except SettingError as exc:
            fail(exc.message, exc.key)
        except ValueError as exc:
            raise problem(str(exc)) from None
    return config


def _checks(checks: list[str] | None, info: ValidationInfo) -> tuple[str, ...]:
    """Check names against harness.checks (it owns the list); add the checks every run gets. No
    list: the protocol's default checks."""
    from splitbrain.harness.checks import KNOWN_CHECKS

    if checks is None:
        protocol = context(info).get("protocol")
        membership = context(info).get("membership", "static")
        return DEFAULT_CHECKS if protocol is None else default_checks(protocol, membership)
    problems = Problems()
    for i, c in enumerate(checks):
        if c in checks[:i]:
            problems.add(f"{c!r} is listed twice", i)
        elif c not in KNOWN_CHECKS:
            problems.add(f"unknown check {c!r} (known: {', '.join(KNOWN_CHECKS)})", i)
    problems.raise_any()
    return tuple(checks) + tuple(c for c in ALWAYS_CHECKS if c not in checks)


class ExpectFail(InputModel):
    fail: Annotated[str, Field(min_length=1)]


def _expect(raw: Any, info: ValidationInfo) -> str | None:
    if raw == "pass":
        return None
    if not isinstance(raw, dict):
        raise problem(f"must be 'pass' or {{fail: CHECK}}, got {raw!r}")
    name = ExpectFail.model_validate(raw, context=info.context).fail
    checks = context(info).get("checks")
    if checks is not None and name not in checks:
        fail(f"{name!r} is not among the checks ({', '.join(checks)})", "fail")
    return name


def _injector_fits(injector: str, info: ValidationInfo) -> str:
    ctx = context(info)
    if "transport" in ctx:
        why = _injector_problem(injector, ctx["transport"], ctx.get("schedule", ()))
        if why:
            raise problem(why)
    return injector


def _recovery_bound(bound: float | None, info: ValidationInfo) -> float | None:
    """The scenario's own bound, or the protocol's from its settings. A real implementation's
    timers are its stack's, which splitbrain does not read: its scenarios say how soon it must recover."""
    protocol = context(info).get("protocol")
    if bound is None and protocol is not None and protocols.get(protocol).external:
        raise problem(
            f"required with protocol {protocol}: the seconds within which your stack must deliver what was sent "
            "once both ends are up and connected (no_loss owes a message after that long)"
        )
    return context(info).get("recovery_bound") if bound is None else bound


def _resync_bound(bound: int | None, info: ValidationInfo) -> int | None:
    """Given exactly when the resync_traffic check is listed (it is that check's bound)."""
    checks = context(info).get("checks")
    if checks is None:
        return bound
    if bound is None and "resync_traffic" in checks:
        raise problem("required by the check resync_traffic (the most resync messages between two nodes)")
    if bound is not None and "resync_traffic" not in checks:
        raise problem("only the check resync_traffic uses it, and it is not among the checks")
    return bound


def _xmit_bound(bound: int | None, info: ValidationInfo) -> int | None:
    """Given exactly when the xmit_traffic check is listed (it is that check's bound)."""
    checks = context(info).get("checks")
    if checks is None:
        return bound
    if bound is None and "xmit_traffic" in checks:
        raise problem("required by the check xmit_traffic (the most retransmissions over the run)")
    if bound is not None and "xmit_traffic" not in checks:
        raise problem("only the check xmit_traffic uses it, and it is not among the checks")
    return bound


DEFAULT_JGROUPS_JAR = "/usr/share/java/jgroups.jar"


def _is_property_string(stack: str) -> bool:
    """A JGroups property string (`UDP(...):PING(...)...`) rather than the path of an XML file."""
    return "(" in stack or (":" in stack and not stack.endswith(".xml") and "/" not in stack)


def _stack(raw: Any, info: ValidationInfo) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise problem("expected a JGroups property string or the path of a JGroups XML file")
    if _is_property_string(raw):
        return raw
    path = Path(raw)
    if not path.is_absolute():
        path = Path(context(info).get("base_dir", ".")) / path
    if not path.is_file():
        raise problem(f"no such file: {path} (a path is relative to the scenario file)")
    return str(path.resolve())


class JGroupsBlock(InputModel):
    """`jgroups: {stack, jar}` of a protocol jgroups scenario."""

    stack: Annotated[str | None, PlainValidator(_stack, json_schema_input_type=str)] = Field(
        None,
        description="a JGroups property string or the path of a JGroups XML file (relative to the scenario "
        "file); default: the node's documented default stack. The harness sets bind address, ports, "
        "multicast group and cluster name.",
    )
    jar: Annotated[str, Field(min_length=1)] = Field(DEFAULT_JGROUPS_JAR, description="the JGroups jar")

    def resolved(self) -> dict:
        return {"stack": self.stack, "jar": self.jar}


class ScenarioFile(InputModel):
    """A scenario file. Fields are validated in this order; later ones use what earlier ones
    resolved (the node names, the duration, the checks)."""

    name: Annotated[
        str,
        Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"),
        explain("use letters, digits, '_', '.' and '-' (it names the run directory)"),
    ]
    protocol: Annotated[str, PlainValidator(_protocol, json_schema_input_type=str), remember("protocol")]
    transport: Annotated[choice(TRANSPORTS), AfterValidator(_transport_fits), remember("transport")] = Field(
        "udp", validate_default=True
    )
    nodes: NodeNames
    membership: Annotated[str, PlainValidator(_membership, json_schema_input_type=str), remember("membership")] = Field(
        "static", description="where views come from: static (view: steps only) or gms (membership protocol)"
    )
    config: Annotated[dict[str, Any] | None, AfterValidator(_protocol_settings)] = Field(
        None, validate_default=True, description="protocol settings (see the protocol's config)"
    )
    duration: Annotated[float, Field(gt=0), remember("duration")] = Field(description="the workload's time budget (s)")
    settle: NonNegative = Field(DEFAULT_SETTLE_S, description="seconds after the last step for the eventual checks")
    workload: Annotated[tuple[Stream, ...], PlainValidator(_workload, json_schema_input_type=list[StreamSpec])]
    schedule: Annotated[
        tuple[FaultStep, ...], PlainValidator(_schedule, json_schema_input_type=list[StepSpec] | None)
    ] = ()
    checks: Annotated[
        list[Annotated[str, Field(pattern=_CHECK_RE.pattern), explain("{!r} is not a check name")]] | None,
        AfterValidator(_checks),
        remember("checks"),
    ] = Field(None, validate_default=True, description="default: the protocol's checks; no_errors is always added")
    expect_fail: Annotated[
        str | None, PlainValidator(_expect, json_schema_input_type=Union[Literal["pass"], ExpectFail])
    ] = Field("pass", alias="expect", validate_default=True)
    seed: NonNegativeInt = 0
    injector: Annotated[choice(INJECTORS), AfterValidator(_injector_fits)] = "auto"
    recovery_bound: Annotated[
        Annotated[float, Field(gt=0), explain("must be greater than 0 (seconds)")] | None,
        AfterValidator(_recovery_bound),
    ] = Field(None, validate_default=True)
    resync_bound: Annotated[
        Annotated[int, Field(ge=1), explain("must be a whole number of messages, at least 1")] | None,
        AfterValidator(_resync_bound),
    ] = Field(
        None,
        validate_default=True,
        description="resync_traffic: the most resync messages (both directions) between two nodes",
    )
    xmit_bound: Annotated[
        Annotated[int, Field(ge=0), explain("must be a whole number of requests, 0 or more")] | None,
        AfterValidator(_xmit_bound),
    ] = Field(
        None,
        validate_default=True,
        description="xmit_traffic: the most retransmissions (requests and messages sent again) over the run "
        "(0 on a lossless network)",
    )
    wire: bool = Field(
        False,
        description="sim backend: send frames through the real wire codec instead of passing message "
        "objects (slower; the same seed gives the same run)",
    )

    jgroups: JGroupsBlock | None = Field(
        None, description="protocol jgroups: the JGroups stack and jar its nodes run (docs/jgroups.md)"
    )

    ip_multicast: bool = Field(
        False,
        description="live backends over UDP: each multicast is one IP multicast datagram to a group "
        "instead of one unicast per member (the simulator's links model either the same way)",
    )

    @model_validator(mode="after")
    def _ip_multicast_fits(self) -> ScenarioFile:
        """IP multicast is a UDP transport for multicast protocols; Toxiproxy carries no UDP."""
        if not self.ip_multicast:
            return self
        problems = Problems()
        if self.transport != "udp":
            problems.add(
                f"needs transport: udp (IP multicast is UDP; this scenario uses {self.transport})", "ip_multicast"
            )
        elif self.injector == "toxiproxy":
            problems.add("toxiproxy proxies TCP links only and cannot carry UDP multicast", "injector")
        if self.protocol in protocols.names() and not protocols.get(self.protocol).multicast:
            multicasting = ", ".join(n for n in protocols.names() if protocols.get(n).multicast)
            problems.add(f"{self.protocol} sends no multicasts: use one that does ({multicasting})", "ip_multicast")
        problems.raise_any()
        return self

    @model_validator(mode="after")
    def _external_keys(self) -> ScenarioFile:
        """The jgroups block belongs to protocol jgroups; a real implementation multicasts as its
        stack says (its membership, transport and steps are checked at their fields)."""
        problems = Problems()
        try:
            external = protocols.get(self.protocol).external
        except ValueError:
            return self  # reported at protocol already
        if self.jgroups is not None and self.protocol != "jgroups":
            problems.add(f"only with protocol: jgroups (this scenario's protocol is {self.protocol})", "jgroups")
        if external:
            if self.ip_multicast:
                problems.add(f"{self.protocol} multicasts as its stack says: leave ip_multicast out", "ip_multicast")
        problems.raise_any()
        return self

    @model_validator(mode="after")
    def _safe_settings(self) -> ScenarioFile:
        """A protocol's settings that are unsafe on this transport or with in-process drops
        (node/protocols.py ProtocolSpec.unsafe) are refused, each at its config key."""
        drops = any(s.kind == "drop" and getattr(s.params, "action", "") == "drop" for s in self.schedule)
        try:
            unsafe = protocols.get(self.protocol).unsafe_settings(self.config or {}, self.transport, drops)
        except (SettingError, ValueError):
            return self  # reported at config already
        if unsafe:
            problems = Problems()
            for key, why in unsafe:
                problems.add(why, "config", key)
            problems.raise_any()
        return self


def _one_or_list(items: tuple[str, ...]) -> Any:
    return items[0] if len(items) == 1 else list(items)
