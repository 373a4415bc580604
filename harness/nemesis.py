"""The nemesis: what a schedule step means, as primitive operations (pure: no I/O, no clock).

A step (harness.scenario.FaultStep) plus the part of the cluster's state it depends on (which
nodes run, are paused or are dead; which steps have faults in force) becomes a list of operations
that an executor carries out in order: the simulator on its in-memory network and stacks
(harness.sim.simulator), the live runner and the pytest fault controller through the backend and
each node's admin API (harness.livefaults). The rules that make a step mean the same thing on
every backend are written here once:

- a drop, view or sync step aimed at a dead node is skipped, and the timeline says so;
- kill acts on a live node, pause on a running one, resume on a paused one; restart always
  (it starts a dead node, or stops and starts a live one); each is on the timeline either way;
- a heal undoes one step or every step in force (in step order) and names each step it undid,
  with ", was not active" for a target that was not in force, or "nothing to heal";
- each step leaves timeline entries (fault_on; fault_off for resume and heals) whose `links` are
  the links the step cut (harness.scenario.cut_links), so no_loss knows when nodes could talk.

It also holds the fault vocabulary's translations: a network step as a change of
the simulator's link model, and as in-process rules at the receiving nodes (live backends); a
drop step as the node.faultlayer.FaultRule both sides install.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from splitbrain.harness import scenario as sc
from splitbrain.harness.scenario import NETWORK_KINDS, FaultStep, cut_links
from splitbrain.node.events import make_event
from splitbrain.node.faultlayer import FaultRule

RUNNING, PAUSED, DEAD = "running", "paused", "dead"
# Steps whose fault lives on links (the simulator's network, injectors, receiver-side rules).
LINK_KINDS = frozenset(NETWORK_KINDS + ("toxic",))
# Steps that talk to a node's process, which a dead node cannot hear.
_PROCESS_KINDS = frozenset({"drop", "view", "sync", "config"})
_RULE_DEFAULTS = {f.name: f.default for f in fields(FaultRule)}
P = TypeVar("P")


def params_as(step: FaultStep, cls: type[P]) -> P:
    """The step's params as the class its kind implies (harness.scenario pairs each kind with one)."""
    p = step.params
    if not isinstance(p, cls):
        raise TypeError(f"{step.describe()}: {step.kind} step with {type(p).__name__} params")
    return p


# ---- what an executor needs to know ----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterState:
    """What the meaning of a step depends on, as the executor sees it just before the step."""

    nodes: tuple[str, ...]  # every node, in scenario order
    states: Mapping[str, str]  # node -> RUNNING | PAUSED | DEAD
    active: Collection[int]  # indexes of the steps whose faults are in force
    steps: Sequence[FaultStep] | Mapping[int, FaultStep]  # step index -> step (heal targets)


# ---- operations --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    """One primitive operation; executors carry them out in the order given."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkFault(Op):
    """Put a network or toxic step's fault in force on its links (on) or remove it (off)."""

    step: FaultStep
    on: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleAdd(Op):
    """Install a drop step's rule in the fault layer of `node`'s current process."""

    step: FaultStep
    node: str
    rule: FaultRule  # `until` in scenario time


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleRemove(Op):
    """Remove the rule a drop step installed (nothing if its process is gone)."""

    step: FaultStep


@dataclass(frozen=True, slots=True, kw_only=True)
class Lifecycle(Op):
    """kill, pause, resume or restart `node` (the state rules have been applied already)."""

    action: str
    node: str


@dataclass(frozen=True, slots=True, kw_only=True)
class View(Op):
    """Install a view at `node` (waits for a paused node's resume)."""

    node: str
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminSync(Op):
    """The SYNC admin operation: `node` resyncs with `peer` (waits for a paused node's resume)."""

    node: str
    peer: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminConfig(Op):
    """Change protocol settings at `node` (admin POST /config; waits for a paused node's resume)."""

    node: str
    values: tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeline(Op):
    """A harness event for timeline.jsonl: kind fault_on or fault_off."""

    kind: str
    fault: str
    detail: str
    links: tuple[str, ...] = ()

    def event(self, t: float) -> dict:
        """The event, stamped with the time the executor began the step."""
        return make_event(
            t, "harness", "harness", self.kind, fault=self.fault, detail=self.detail, links=list(self.links) or None
        )


# ---- the interpretation ------------------------------------------------------------------------


def step_ops(step: FaultStep, state: ClusterState) -> list[Op]:
    """The operations that carry out `step` in `state`, timeline entries included."""
    kind = step.kind
    if kind == "heal":
        return _heal_ops(step, state)
    done = Timeline(kind="fault_on", fault=kind, detail=step.describe(), links=_links(step, state))
    if kind in LINK_KINDS:
        return [LinkFault(step=step, on=True), done]
    p = step.params
    if not isinstance(p, sc.Drop | sc.View | sc.SyncStep | sc.ConfigStep | sc.NodeTarget):
        raise ValueError(f"unknown step kind {kind!r}")
    node = p.node  # every other step acts on one node
    node_state = state.states[node]
    if kind in _PROCESS_KINDS and node_state == DEAD:
        return [Timeline(kind="fault_on", fault=kind, detail=f"{step.describe()} (skipped: {node} is dead)")]
    if kind == "drop":
        return [RuleAdd(step=step, node=node, rule=drop_rule(step)), done]
    if kind == "view":
        return [View(node=node, members=params_as(step, sc.View).members), done]
    if kind == "sync":
        return [AdminSync(node=node, peer=params_as(step, sc.SyncStep).peer), done]
    if kind == "config":
        return [AdminConfig(node=node, values=params_as(step, sc.ConfigStep).values), done]
    if kind == "resume":
        # The end of a pause is a fault_off of the pause, naming the links it gave back.
        done = Timeline(kind="fault_off", fault="pause", detail=step.describe(), links=done.links)
    acts = {"kill": node_state != DEAD, "pause": node_state == RUNNING, "resume": node_state == PAUSED, "restart": True}
    if kind not in acts:
        raise ValueError(f"unknown step kind {kind!r}")
    return ([Lifecycle(action=kind, node=node)] if acts[kind] else []) + [done]


def _heal_ops(step: FaultStep, state: ClusterState) -> list[Op]:
    target = params_as(step, sc.Heal).target
    if target == "all":
        undone = [state.steps[index] for index in sorted(state.active)]
        ops: list[Op] = [_undo(undo) for undo in undone]
        if not undone:
            ops.append(Timeline(kind="fault_off", fault="heal", detail=f"{step.describe()}: nothing to heal"))
        ops.extend(
            Timeline(
                kind="fault_off",
                fault=undo.kind,
                detail=f"{undo.describe()} (by {step.describe()})",
                links=_links(undo, state),
            )
            for undo in undone
        )
        return ops
    assert isinstance(target, int), "the loader turns a heal's step name into its index"
    undo = state.steps[target]
    if target in state.active:
        return [
            _undo(undo),
            Timeline(
                kind="fault_off",
                fault=undo.kind,
                detail=f"{undo.describe()} (by {step.describe()})",
                links=_links(undo, state),
            ),
        ]
    return [
        Timeline(kind="fault_off", fault=undo.kind, detail=f"{undo.describe()} (by {step.describe()}, was not active)")
    ]


def _undo(step: FaultStep) -> Op:
    return RuleRemove(step=step) if step.kind == "drop" else LinkFault(step=step, on=False)


def _links(step: FaultStep, state: ClusterState) -> tuple[str, ...]:
    return tuple(cut_links(step, state.nodes))


# ---- the fault vocabulary's translations ---------------------------------------------------------


def link_changes(step: FaultStep) -> dict[str, Any]:
    """A network step as changes of the simulator's link model (harness.sim.network.LinkModel)."""
    kind = step.kind
    if kind == "partition":
        return {"blocked": True}
    if kind == "loss":
        return {"loss_p": params_as(step, sc.LinkProbability).p}
    if kind == "delay":
        delay = params_as(step, sc.Delay)
        return {"delay_s": delay.ms / 1000.0, "jitter_s": delay.jitter_ms / 1000.0}
    if kind == "duplicate":
        return {"dup_p": params_as(step, sc.LinkProbability).p}
    if kind == "reorder":
        reorder = params_as(step, sc.Reorder)
        return {"reorder_p": reorder.p, "reorder_s": reorder.ms / 1000.0}
    raise ValueError(f"{kind} has no link model (toxic steps need Toxiproxy)")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceiverRule:
    """One in-process rule that stands for a network step at the receiving end of a link."""

    node: str
    rule: FaultRule
    holds: bool  # holds messages (delay, duplicate, reorder): kept after every other rule


def receiver_rules(step: FaultStep) -> list[ReceiverRule]:
    """A network step as rules at each receiver, direction up, peer = the sending node (the
    simulator acts on frames at the sender's end of a link; the outcome is the same)."""
    kind = step.kind
    rules = []
    for src, dst in step_links(step):
        holds = kind in ("delay", "duplicate", "reorder")
        if kind == "partition":
            rule = FaultRule(peer=src)
        elif kind == "loss":
            rule = FaultRule(peer=src, p=params_as(step, sc.LinkProbability).p)
        elif kind == "delay":
            # The simulator's delay is ms plus or minus a uniform jitter (floored at 0); the fault
            # layer holds delay_s plus a uniform extra in [0, jitter_s).
            delay = params_as(step, sc.Delay)
            lo = max(0.0, delay.ms - delay.jitter_ms)
            hi = delay.ms + delay.jitter_ms
            if hi <= 0:
                continue  # a zero delay is no fault at all
            rule = FaultRule(peer=src, action="delay", delay_s=lo / 1000.0, jitter_s=(hi - lo) / 1000.0)
        elif kind == "duplicate":
            rule = FaultRule(peer=src, action="duplicate", p=params_as(step, sc.LinkProbability).p)
        elif kind == "reorder":
            reorder = params_as(step, sc.Reorder)
            rule = FaultRule(peer=src, action="delay", p=reorder.p, delay_s=0.0, jitter_s=reorder.ms / 1000.0)
        else:
            raise ValueError(f"{kind} is not a network fault")
        rules.append(ReceiverRule(node=dst, rule=rule, holds=holds))
    return rules


def step_links(step: FaultStep) -> tuple[tuple[str, str], ...]:
    """The directed links (src, dst) a network or toxic step acts on."""
    p = step.params
    if not isinstance(p, sc.Partition | sc.LinkProbability | sc.Delay | sc.Reorder | sc.Toxic):
        raise ValueError(f"{step.kind} is not a network fault")
    return p.links


def drop_rule(step: FaultStep) -> FaultRule:
    """A drop step's rule as written (`until` in scenario time)."""
    p = params_as(step, sc.Drop)
    return FaultRule(
        direction=p.direction,
        peer=p.peer,
        types=None if p.types is None else frozenset(p.types),
        p=p.p,
        count=p.count,
        after=p.after,
        seqnos=p.seqnos,
        until=p.until,
        action=p.action,
        delay_s=p.delay_ms / 1000.0,
        jitter_s=p.jitter_ms / 1000.0,
    )


def rule_body(rule: FaultRule) -> dict:
    """A rule as the body of the admin API's POST /faults: direction, action and the fields that
    differ from their defaults (a delay always with delay_s and jitter_s)."""
    keep = {"direction", "action"} | ({"delay_s", "jitter_s"} if rule.action == "delay" else set())
    return {name: value for name, value in rule.to_dict().items() if name in keep or value != _RULE_DEFAULTS[name]}
