"""Nemesis operations carried out on a live cluster (local or docker), for the scenario runner and
the pytest fault controller alike.

harness.nemesis says what a step means; this module does it through the backend (kill, pause,
resume, restart), packet-level injectors and each node's admin API (views, SYNC, fault rules).

Fault translation (one vocabulary). The simulator acts on frames at the sender's
end of a link; here every network fault is a rule at the receiving node, direction up, peer =
the sending node (harness.nemesis.receiver_rules):

- partition X->Y: at Y drop everything from X; two-way: that for every link between groups;
- loss X->Y p: at Y drop from X with probability p;
- delay X->Y ms +- jitter: at Y hold messages from X for a uniform time in [ms - jitter, ms + jitter];
- duplicate X->Y p: at Y pass messages from X twice with probability p;
- reorder X->Y p ms: at Y hold a message from X, with probability p, for up to ms;
- drop: the rule as written (its `until` moved from scenario time to the run clock).

Two differences remain, by nature: the simulator draws loss per frame (a bundle), a rule per
message; and the simulator keeps a link FIFO under jitter, while held messages leave a fault
layer in the order their random delays end (jitter may reorder here; UNICAST3 must cope anyway).

A fault layer applies the first rule that acts on a message, and a held message is released
without meeting the rules again. So at every node the holding rules of network faults (delay,
duplicate, reorder) are kept after all other rules: a partition or loss added later still
applies, and drop steps still see every message. Network faults belong to the network: when a
node restarts, the rules of faults still in force at it are installed in its new process.
Drop steps belong to the process and die with it, as in the simulator. A heal removes exactly
the rules its step(s) created. A node that is paused cannot answer HTTP: what is asked of it
waits and is done, in order, right after it resumes.

Packet-level injectors (harness.backends.base.FaultInjector) apply some network steps outside
the nodes (docker: iptables, Toxiproxy). A step an injector takes never becomes an in-process
rule; its timeline detail ends with the injector's note in brackets (`[iptables ...]`,
`[inprocess]` for a network step that stays in the fault layer on such a cluster). Heals remove
what the step's injector applied, and a restarted node gets back what is in force at it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from splitbrain.harness import nemesis
from splitbrain.harness.backends.admin import AdminError
from splitbrain.harness.backends.base import BackendError, FaultInjector, NodeState
from splitbrain.harness.scenario import Drop, FaultStep
from splitbrain.node import protocols
from splitbrain.node.faultlayer import FaultRule


@dataclass(eq=False)
class Rule:
    """One in-process rule a schedule step asked for at one node."""

    step: int
    node: str
    spec: dict  # the POST /faults body
    network: bool  # a network fault: survives restarts of the node
    last: bool  # holds messages (delay, duplicate, reorder): kept after every other rule
    rule_id: int | None = None
    incarnation: int | None = None
    removed: bool = False

    @property
    def installed(self) -> bool:
        return self.rule_id is not None


def network_rules(step: FaultStep) -> list[Rule]:
    """The receiver-side rules of a network fault step (partition, loss, delay, duplicate, reorder)."""
    return [
        Rule(step=step.index, node=r.node, spec=nemesis.rule_body(r.rule), network=True, last=r.holds)
        for r in nemesis.receiver_rules(step)
    ]


def drop_rule(step: FaultStep, origin: float) -> Rule:
    """A drop step's rule as written; `until` moves from scenario time to the run clock."""
    return _process_rule(step.index, nemesis.params_as(step, Drop).node, nemesis.drop_rule(step), origin)


def _process_rule(step_index: int, node: str, rule: FaultRule, origin: float) -> Rule:
    if rule.until is not None:
        rule = replace(rule, until=origin + rule.until)
    return Rule(step=step_index, node=node, spec=nemesis.rule_body(rule), network=False, last=False)


class FaultBook:
    """The rules in force, per schedule step, and their ids at the nodes' current incarnations.

    `cluster` needs node(name) (state, incarnation) and admin(name) (add_fault, remove_fault).
    """

    def __init__(self, cluster):
        self.cluster = cluster
        self.active: dict[int, list[Rule]] = {}  # step index -> rules, in application order
        self.deferred: dict[str, list[Callable[[], None]]] = {}
        self.requests = 0

    # ---- deferral while a node is paused ------------------------------------------------------

    def defer(self, node: str, op: Callable[[], None]) -> None:
        self.deferred.setdefault(node, []).append(op)

    def flush(self, node: str) -> None:
        """Run, in order, what waited for a paused node (call right after it resumes)."""
        ops = self.deferred.pop(node, [])
        for op in ops:
            op()

    # ---- adding and removing ------------------------------------------------------------------

    def add(self, step_index: int, rules: list[Rule]) -> None:
        self.active[step_index] = rules
        for rule in rules:
            self._install(rule)

    def remove(self, step_index: int) -> bool:
        """Remove a step's rules; False when the step had none in force."""
        rules = self.active.pop(step_index, None)
        if rules is None:
            return False
        for rule in rules:
            self._uninstall(rule)
        return True

    def steps(self) -> list[int]:
        return list(self.active)

    def _install(self, rule: Rule) -> None:
        state = self.cluster.node(rule.node).state
        if state is NodeState.RUNNING:
            self._post(rule)
            if not rule.last:
                self._move_holding_rules_last(rule.node)
        elif state is NodeState.PAUSED:
            self.defer(rule.node, lambda: self._install_later(rule))
        # A dead node gets its network rules when it restarts (node_restarted).

    def _install_later(self, rule: Rule) -> None:
        if not rule.removed and not rule.installed:
            self._install(rule)

    def _post(self, rule: Rule) -> None:
        handle = self.cluster.node(rule.node)
        self.requests += 1
        rule.rule_id = self.cluster.admin(rule.node).add_fault(dict(rule.spec))
        rule.incarnation = handle.incarnation

    def _move_holding_rules_last(self, node: str) -> None:
        """Re-add the node's holding rules after the one just added (add the copy, then remove
        the original, so that no message slips through in between)."""
        handle = self.cluster.node(node)
        for rules in self.active.values():
            for rule in rules:
                if (
                    rule.node == node
                    and rule.last
                    and rule.rule_id is not None
                    and rule.incarnation == handle.incarnation
                ):
                    old = rule.rule_id
                    self._post(rule)
                    self._delete(node, old)

    def _uninstall(self, rule: Rule) -> None:
        rule.removed = True
        if not rule.installed:
            return
        handle = self.cluster.node(rule.node)
        rule_id, incarnation = rule.rule_id, rule.incarnation
        assert rule_id is not None and incarnation is not None  # installed rules have both
        rule.rule_id = None
        if incarnation != handle.incarnation:
            return  # it died with an earlier process
        if handle.state is NodeState.RUNNING:
            self._delete(rule.node, rule_id)
        elif handle.state is NodeState.PAUSED:
            self.defer(rule.node, lambda: self._delete_if(rule.node, rule_id, incarnation))

    def _delete_if(self, node: str, rule_id: int, incarnation: int) -> None:
        if self.cluster.node(node).incarnation == incarnation:
            self._delete(node, rule_id)

    def _delete(self, node: str, rule_id: int) -> None:
        self.requests += 1
        try:
            self.cluster.admin(node).remove_fault(rule_id)
        except AdminError as exc:
            if exc.status != 404:  # a rule that is already gone is what we wanted
                raise

    # ---- node lifecycle -----------------------------------------------------------------------

    def node_died(self, node: str) -> None:
        """The node's process is gone, and with it every rule and every deferred request."""
        self.deferred.pop(node, None)
        for rules in self.active.values():
            for rule in rules:
                if rule.node == node:
                    rule.rule_id = None

    def node_restarted(self, node: str) -> None:
        """A new process: network faults still in force are installed again; drop rules are not
        (they lived in the old process's fault layer, as in the simulator)."""
        for rules in self.active.values():
            for rule in rules:
                if rule.node == node and rule.network and not rule.removed:
                    rule.rule_id = None
                    self._install(rule)


class LiveFaults:
    """Carries out the nemesis's operations for each step on one live cluster.

    `cluster` is a harness.backends.base.Cluster (or a stand-in with node, admin, kill, pause,
    resume, restart); `names` its nodes in scenario order; `steps` maps a step index to its step
    (what a heal names); `origin` is the run clock's reading at scenario time 0; `restarted(node)`
    is called once a restarted node has its view and faults back (the runner resumes its streams).
    """

    def __init__(
        self,
        cluster,
        names: tuple[str, ...],
        steps: Sequence[FaultStep] | Mapping[int, FaultStep],
        *,
        origin: float = 0.0,
        restarted: Callable[[str], None] | None = None,
    ):
        self.cluster = cluster
        self.names = names
        self.steps = steps
        self.origin = origin
        self.restarted = restarted
        self.book = FaultBook(cluster)
        self.injectors: list[FaultInjector] = []
        self.injected: dict[int, FaultInjector] = {}  # step index -> the injector that applied it
        self._view_ids: dict[str, int] = {}
        # With a membership protocol (scenario `membership: gms`) a restarted node finds its group
        # itself; only static clusters get the view of all nodes posted.
        # A real implementation (protocol jgroups) brings its own membership, as gms does.
        scenario = getattr(cluster, "scenario", None)
        self.static_views = getattr(scenario, "membership", "static") == "static" and not (
            scenario is not None and protocols.get(scenario.protocol).external
        )

    def attach_injectors(self) -> None:
        """Take the cluster's packet-level injectors (once it has started); clusters that predate
        them (and test doubles) have none."""
        self.injectors = list(getattr(self.cluster, "fault_injectors", list)())

    @property
    def active(self) -> list[int]:
        """Indexes of the steps in force, in order."""
        return sorted(set(self.book.steps()) | set(self.injected))

    def injector_for(self, step: FaultStep) -> FaultInjector | None:
        for injector in self.injectors:
            if injector.handles(step):
                return injector
        return None

    def apply(self, step: FaultStep) -> list[nemesis.Timeline]:
        """Carry out one step; returns its timeline entries (the caller stamps the time)."""
        state = nemesis.ClusterState(
            nodes=self.names,
            active=self.active,
            steps=self.steps,
            states={name: self.cluster.node(name).state.value for name in self.names},
        )
        entries = []
        note = ""
        for op in nemesis.step_ops(step, state):
            if isinstance(op, nemesis.Timeline):
                entries.append(replace(op, detail=op.detail + note) if op.kind == "fault_on" else op)
            else:
                note = self._carry_out[type(op)](op) or note
        return entries

    def post_view(self, node: str, members: list[str]) -> None:
        """Install a view now; view ids count per node across its incarnations, as in the simulator."""
        self.cluster.admin(node).view(members, self._next_view_id(node))

    def close(self) -> tuple[list[str], list[str]]:
        """Remove what packet-level injectors still apply (in-process rules die with the nodes);
        returns what was removed ("#3 (iptables)") and the problems met on the way."""
        self.injected.clear()
        removed: list[str] = []
        problems: list[str] = []
        for injector in self.injectors:
            try:
                removed.extend(f"#{i} ({injector.name})" for i in injector.close())
            except Exception as exc:  # keep closing the others; teardown removes the rest anyway
                problems.append(f"{injector.name}: {exc}")
        return removed, problems

    # ---- the operations -----------------------------------------------------------------------

    @property
    def _carry_out(self) -> dict:
        return {
            nemesis.LinkFault: self._op_link_fault,
            nemesis.RuleAdd: self._op_rule_add,
            nemesis.RuleRemove: self._op_remove,
            nemesis.View: self._op_view,
            nemesis.AdminSync: self._op_sync,
            nemesis.AdminConfig: self._op_config,
            nemesis.Lifecycle: self._op_lifecycle,
        }

    def _op_link_fault(self, op: nemesis.LinkFault) -> str:
        """Returns the note that ends the step's timeline detail."""
        step = op.step
        if not op.on:
            return self._op_remove(op)
        injector = self.injector_for(step)
        if injector is not None:
            note = injector.apply(step)
            self.injected[step.index] = injector
            return f" [{note}]"
        if step.kind == "toxic":
            raise BackendError("toxic steps need the docker backend with transport tcp")
        self.book.add(step.index, network_rules(step))
        return " [inprocess]" if self.injectors else ""

    def _op_rule_add(self, op: nemesis.RuleAdd) -> None:
        self.book.add(op.step.index, [_process_rule(op.step.index, op.node, op.rule, self.origin)])

    def _op_remove(self, op: nemesis.LinkFault | nemesis.RuleRemove) -> str:
        index = op.step.index
        injector = self.injected.pop(index, None)
        if injector is None:
            self.book.remove(index)
            return ""
        try:
            injector.remove(index)
        except Exception as exc:
            raise BackendError(f"heal of step #{index} ({injector.name}): {exc}") from exc
        return ""

    def _op_view(self, op: nemesis.View) -> None:
        members, view_id = list(op.members), self._next_view_id(op.node)
        self._when_running(op.node, lambda: self.cluster.admin(op.node).view(members, view_id))

    def _op_sync(self, op: nemesis.AdminSync) -> None:
        self._when_running(op.node, lambda: self.cluster.admin(op.node).sync(op.peer))

    def _op_config(self, op: nemesis.AdminConfig) -> None:
        values = dict(op.values)
        self._when_running(op.node, lambda: self.cluster.admin(op.node).set_config(values))

    def _when_running(self, node: str, request: Callable[[], None]) -> None:
        if self.cluster.node(node).state is NodeState.PAUSED:
            self.book.defer(node, request)
        else:
            request()

    def _op_lifecycle(self, op: nemesis.Lifecycle) -> None:
        node, cluster = op.node, self.cluster
        if op.action == "kill":
            cluster.kill(node)
            self.book.node_died(node)
        elif op.action == "pause":
            cluster.pause(node)
        elif op.action == "resume":
            cluster.resume(node)
            self.book.flush(node)
            for injector in self.injectors:
                injector.node_resumed(node)
        else:
            if cluster.node(node).alive:
                self.book.node_died(node)
            cluster.restart(node)
            # Every (re)started node first installs the view of all nodes, as in the simulator
            # (a node with a membership protocol rejoins by itself).
            if self.static_views:
                self.post_view(node, list(self.names))
            self.book.node_restarted(node)
            for injector in self.injectors:
                injector.node_restarted(node)
            if self.restarted is not None:
                self.restarted(node)

    def _next_view_id(self, node: str) -> int:
        self._view_ids[node] = self._view_ids.get(node, 0) + 1
        return self._view_ids[node]
