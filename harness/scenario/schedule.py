"""What a schedule means: the links a step cuts, the node a step acts at, and the problems of
steps that the protocol or the nodes' states at that time refuse."""

from __future__ import annotations

from splitbrain.harness.scenario.model import (
    ConfigStep,
    Drop,
    FaultStep,
    LinkProbability,
    NodeTarget,
    Partition,
    SyncStep,
    Toxic,
    View,
)
from splitbrain.harness.scenario.vocabulary import (
    NODE_KINDS,
)
from splitbrain.node import protocols
from splitbrain.node.compose import STATIC, split_config
from splitbrain.node.errors import SettingError

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


def drop_type_problems(protocol: str, membership: str, types: tuple[str, ...]) -> list[str]:
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


def config_step_problems(ctx: dict, values: dict, specs: list) -> list[tuple[str, str]]:
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


def lifecycle_problems(steps: list[FaultStep], nodes: tuple[str, ...]) -> list[tuple]:
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
