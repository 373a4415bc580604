"""The live scenario runner: play a scenario against real nodes, on any backend.

It speaks only to a `Cluster` (harness.backends.base): lifecycle calls for kill, pause, resume and
restart, and each node's admin API for everything else. The order of a run:

1. start every node and take the run clock's reading as the scenario's origin (scenario time 0);
2. walk a plan sorted by time (schedule steps before workload streams at equal times, as in the
   simulator) and apply each entry when its time comes: faults become in-process rules of the
   node fault layer (POST /faults), views POST /view, streams POST /send;
3. once the last step has run and the workload's time is over, poll the nodes until they have
   settled (harness.live), bounded by the scenario's `settle`;
4. stop every live node gracefully (final windows, node_stop) and collect the event logs.

The cluster is torn down in `finally`, so an error or a Ctrl-C still stops every node and
collects what they wrote.

Fault translation (one vocabulary, STYLE.md #15). The simulator acts on frames at the sender's
end of a link; here every network fault is a rule at the receiving node, direction up, peer =
the sending node:

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
the rules its step(s) created. A node that is paused cannot answer HTTP: what the schedule asks
of it waits and is done, in order, right after it resumes.

Packet-level injectors (harness.backends.base.FaultInjector). A cluster may offer injectors that
apply some network steps outside the nodes (docker: partitions and loss as iptables rules in the
receiver's network namespace, toxics and TCP partitions on Toxiproxy). A step an injector takes
never becomes an in-process rule; its timeline detail ends with the injector's note in brackets
(`[iptables ...]`, `[toxiproxy ...]`, `[inprocess]` for what stays in the fault layer on such a
cluster). Heals remove what the step's injector applied, a restarted node gets back what is in
force at it, and whatever is still applied when the run ends (or fails) is removed before the
cluster is torn down; stats["injectors"] lists it. A toxic step on a cluster without Toxiproxy
is refused before the first node starts its workload.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable

from node.events import make_event

from harness.backends.admin import AdminError
from harness.backends.base import BackendError, Cluster, FaultInjector, NodeState
from harness.scenario import FaultStep, Scenario, Stream, cut_links

MIN_TICK_S = 0.001
_EPS = 1e-9
PROGRESS_INTERVAL_S = 0.5
POLL_S = 0.05


class RunError(RuntimeError):
    """A live run could not go on (a node crashed, an admin request failed)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the harness: treated like Ctrl-C (tear down, write what exists)."""

    signum = signal.SIGTERM


# ---- workload ---------------------------------------------------------------------------------


def planned_count(stream: Stream, scenario_duration: float) -> int:
    """How many messages a stream sends: exactly the simulator's slot count, so that both backends
    send the same app ids (slots start + k / rate before the stream's end, capped by count)."""
    stop = scenario_duration if stream.duration is None else min(scenario_duration, stream.start + stream.duration)
    limit = max(0, int((stop - stream.start) * stream.rate) + 1)
    while limit > 0 and stream.start + (limit - 1) / stream.rate >= stop - _EPS:
        limit -= 1
    if stream.count is not None:
        limit = min(limit, stream.count)
    return limit


def slots_before(stream: Stream, t: float) -> int:
    """Slots of a stream due before scenario time t (what a sender that was away missed)."""
    if t <= stream.start:
        return 0
    return int(math.ceil((t - stream.start) * stream.rate - 1e-9))


# ---- fault rules ------------------------------------------------------------------------------


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
    p = step.params
    kind = step.kind
    rules = []
    for src, dst in p.links:
        spec: dict = {"direction": "up", "peer": src}
        last = False
        if kind == "partition":
            spec["action"] = "drop"
        elif kind == "loss":
            spec.update(action="drop", p=p.p)
        elif kind == "delay":
            # The simulator's delay is ms plus or minus a uniform jitter (floored at 0); the fault
            # layer holds delay_s plus a uniform extra in [0, jitter_s).
            lo = max(0.0, p.ms - p.jitter_ms)
            hi = p.ms + p.jitter_ms
            if hi <= 0:
                continue  # a zero delay is no fault at all
            spec.update(action="delay", delay_s=lo / 1000.0, jitter_s=(hi - lo) / 1000.0)
            last = True
        elif kind == "duplicate":
            spec.update(action="duplicate", p=p.p)
            last = True
        elif kind == "reorder":
            spec.update(action="delay", p=p.p, delay_s=0.0, jitter_s=p.ms / 1000.0)
            last = True
        else:  # pragma: no cover - callers pass network kinds only
            raise ValueError(f"{kind} is not a network fault")
        rules.append(Rule(step=step.index, node=dst, spec=spec, network=True, last=last))
    return rules


def drop_rule(step: FaultStep, origin: float) -> Rule:
    """A drop step's rule as written; `until` moves from scenario time to the run clock."""
    p = step.params
    spec: dict = {"direction": p.direction, "action": p.action}
    if p.peer is not None:
        spec["peer"] = p.peer
    if p.types is not None:
        spec["types"] = list(p.types)
    if p.p != 1.0:
        spec["p"] = p.p
    if p.count is not None:
        spec["count"] = p.count
    if p.after:
        spec["after"] = p.after
    if p.seqnos is not None:
        spec["seqnos"] = list(p.seqnos)
    if p.until is not None:
        spec["until"] = origin + p.until
    if p.action == "delay":
        spec["delay_s"] = p.delay_ms / 1000.0
        spec["jitter_s"] = p.jitter_ms / 1000.0
    return Rule(step=step.index, node=p.node, spec=spec, network=False, last=False)


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
                if rule.node == node and rule.last and rule.installed and rule.incarnation == handle.incarnation:
                    old = rule.rule_id
                    self._post(rule)
                    self._delete(node, old)

    def _uninstall(self, rule: Rule) -> None:
        rule.removed = True
        if not rule.installed:
            return
        handle = self.cluster.node(rule.node)
        rule_id, incarnation = rule.rule_id, rule.incarnation
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


# ---- progress ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    """What a progress display shows while a live run goes."""

    t: float  # scenario time (s since the origin); negative while nodes start
    end: float  # scenario time the workload and schedule end
    phase: str  # starting | running | settling | stopping
    sent: int
    delivered: int
    faults: tuple[str, ...]  # active faults, described
    nodes: dict  # name -> state value ("running", "paused", "dead")
    note: str = ""  # the step just applied, if any


# ---- the run ----------------------------------------------------------------------------------


@dataclass
class LiveResult:
    """What a live run produced besides the event logs (which are in the run directory)."""

    scenario: Scenario
    seed: int
    backend: str
    timeline: list[dict]
    stats: dict
    completed: bool = False
    settle: object = None  # harness.live.SettleResult
    error: str | None = None


class LiveRun:
    """One scenario on one cluster. `run()` once; the cluster is torn down when it returns."""

    def __init__(self, scenario: Scenario, cluster: Cluster, *,
                 progress: Callable[[Progress], None] | None = None,
                 progress_interval_s: float = PROGRESS_INTERVAL_S, poll_s: float = POLL_S,
                 sleep: Callable[[float], None] | None = None):
        """`sleep(seconds)` waits between polls (default: an interruptible wait; tests pass one
        that advances a fake cluster clock)."""
        self.scenario = scenario
        self.cluster = cluster
        self.progress = progress
        self.progress_interval_s = progress_interval_s
        self.poll_s = poll_s
        self.book = FaultBook(cluster)
        self.timeline: list[dict] = []
        self.origin: float | None = None
        self.phase = "starting"
        self.settle = None
        self._cancel = threading.Event()
        self._sleep = sleep if sleep is not None else self._interruptible_sleep
        self._limits = {s.index: planned_count(s, scenario.duration) for s in scenario.streams}
        self._started_streams: set[int] = set()
        self._posted: dict[int, int] = {}  # stream index -> messages asked for, all incarnations
        self._last_progress = 0.0
        self._last_counts = (0, 0)
        self._node_counts: dict[str, tuple[int, int]] = {}
        self._steps_applied = 0
        self._view_ids: dict[str, int] = {}
        self._step_t = 0.0
        self._wall0 = time.monotonic()
        self._wall_s = 0.0
        self._started = False
        self._finished = False
        self._stop_problems: list[str] = []
        self._injectors: list[FaultInjector] = []
        self._injected: dict[int, FaultInjector] = {}  # step index -> the injector that applied it
        self._removed_at_end: list[str] = []

    # ---- control ------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Ask a running run to stop at the next wait (from another thread)."""
        self._cancel.set()

    def scenario_time(self) -> float:
        return self.cluster.now() - (self.origin if self.origin is not None else self.cluster.now())

    @property
    def workload_end(self) -> float:
        last = self.scenario.schedule[-1].at if self.scenario.schedule else 0.0
        return max(self.scenario.duration, last)

    def run(self) -> LiveResult:
        if self._started:
            raise RuntimeError("a LiveRun runs once; build a new one to run again")
        self._started = True
        from harness import live

        self._wall0 = time.monotonic()
        try:
            self._report(force=True)
            self.cluster.start()
            # Clusters that predate packet-level injectors (and test doubles) have none.
            self._injectors = list(getattr(self.cluster, "fault_injectors", list)())
            self._check_injectors()
            for name in self.scenario.nodes:
                self._initial_view(name)
            self.origin = self.cluster.now()
            self.phase = "running"
            for at, _prio, _seq, kind, item in self._plan():
                self._wait_until(at)
                if kind == "step":
                    self._apply_step(item)
                else:
                    self._start_stream(item)
                self._report(force=True, note=self._note(kind, item))
            self._wait_until(self.workload_end)
            self.phase = "settling"
            self._report(force=True)
            self.settle = live.wait_settled(self.cluster, self.scenario, bound_s=self.scenario.settle,
                                            poll_s=max(self.poll_s, 0.1), restarted=self._restarted(),
                                            on_poll=lambda: self._report(), sleep=self._sleep)
            self.phase = "stopping"
            self._report(force=True)
            self._stop_problems = self.cluster.stop_all()
            self._finished = True
        finally:
            try:
                self._close_injectors()
            finally:
                try:
                    self.cluster.teardown()
                finally:
                    self._wall_s = time.monotonic() - self._wall0
        if self._stop_problems:
            raise RunError("; ".join(self._stop_problems))
        return self.result()

    def result(self, error: BaseException | None = None) -> LiveResult:
        return LiveResult(scenario=self.scenario, seed=self.cluster.seed, backend=self.cluster.backend_name,
                          timeline=self.timeline, stats=self.stats(), completed=self._finished,
                          settle=self.settle,
                          error=None if error is None else f"{type(error).__name__}: {error}")

    def stats(self) -> dict:
        nodes = {}
        for name, handle in self.cluster.nodes.items():
            nodes[name] = {"address": handle.address, "incarnation": handle.incarnation,
                           "state": handle.state.value,
                           "exit_codes": list(getattr(self.cluster, "exit_codes", {}).get(name, []))}
        return {
            "wall_time_s": self._wall_s or (time.monotonic() - self._wall0),
            "origin_t": self.origin,
            "scenario_time_s": self.scenario_time() if self.origin is not None else 0.0,
            "workload_end_s": self.workload_end,
            "steps_applied": self._steps_applied,
            "fault_requests": self.book.requests,
            "streams_posted": dict(self._posted),
            "settle": None if self.settle is None else self.settle.to_dict(),
            "nodes": nodes,
            "bad_event_lines": getattr(self.cluster, "bad_event_lines", 0),
            **({"cluster": self.cluster.describe()} if hasattr(self.cluster, "describe") else {}),
            **({"injectors": {"used": [i.name for i in self._injectors],
                              "default": getattr(self.cluster, "injector_name", "inprocess"),
                              "removed_at_end": list(self._removed_at_end)}} if self._injectors else {}),
        }

    # ---- the plan -----------------------------------------------------------------------------

    def _plan(self) -> list[tuple]:
        plan = []
        seq = 0
        for step in self.scenario.schedule:
            plan.append((step.at, 0, seq, "step", step))
            seq += 1
        for stream in self.scenario.streams:
            if self._limits[stream.index]:
                plan.append((stream.start, 1, seq, "stream", stream))
                seq += 1
        plan.sort(key=lambda e: (e[0], e[1], e[2]))
        return plan

    def _wait_until(self, at: float) -> None:
        """Wait until scenario time `at`, watching the nodes and reporting progress meanwhile."""
        deadline = self.origin + at
        while True:
            self.cluster.check_alive()
            remaining = deadline - self.cluster.now()
            if remaining <= 0:
                return
            self._report()
            self._sleep(min(remaining, self.poll_s))

    def _interruptible_sleep(self, seconds: float) -> None:
        if self._cancel.wait(seconds):
            raise KeyboardInterrupt("run cancelled")

    @staticmethod
    def _note(kind: str, item) -> str:
        if kind == "step":
            return f"{item.kind} {item.params.describe()}"
        return f"stream {item.index} {item.src}->{item.dest} starts"

    # ---- steps --------------------------------------------------------------------------------

    def _log(self, kind: str, fault: str, detail: str, cuts: FaultStep | None = None) -> None:
        # Stamped when the harness began applying the step: a heal takes effect during its
        # requests, so what happens after this time happened after the heal (a conservative
        # origin for heal-to-sync times), and a restart is dated when the old process died.
        links = cut_links(cuts, self.scenario.nodes) if cuts is not None else None
        self.timeline.append(make_event(self._step_t, "harness", "harness", kind, fault=fault, detail=detail,
                                        links=links or None))

    def _apply_step(self, step: FaultStep) -> None:
        kind = step.kind
        p = step.params
        cluster = self.cluster
        self._step_t = cluster.now()
        self._steps_applied += 1
        try:
            injector = self._injector_for(step)
            if injector is not None:
                note = injector.apply(step)
                self._injected[step.index] = injector
                self._log("fault_on", kind, f"{step.describe()} [{note}]", cuts=step)
                return
            if kind == "toxic":
                raise RunError(f"step {step.describe()}: toxic steps need the docker backend with transport tcp")
            if kind in ("partition", "loss", "delay", "duplicate", "reorder"):
                self.book.add(step.index, network_rules(step))
                if self._injectors:
                    self._log("fault_on", kind, f"{step.describe()} [inprocess]", cuts=step)
                    return
            elif kind == "drop":
                if not cluster.node(p.node).alive:
                    self._log("fault_on", kind, f"{step.describe()} (skipped: {p.node} is dead)")
                    return
                self.book.add(step.index, [drop_rule(step, self.origin)])
            elif kind == "view":
                handle = cluster.node(p.node)
                if not handle.alive:
                    self._log("fault_on", kind, f"{step.describe()} (skipped: {p.node} is dead)")
                    return
                members = list(p.members)
                view_id = self._next_view_id(p.node)
                if handle.state is NodeState.PAUSED:
                    self.book.defer(p.node, lambda: self._post_view(p.node, members, view_id))
                else:
                    self._post_view(p.node, members, view_id)
            elif kind == "sync":
                handle = cluster.node(p.node)
                if not handle.alive:
                    self._log("fault_on", kind, f"{step.describe()} (skipped: {p.node} is dead)")
                    return
                if handle.state is NodeState.PAUSED:
                    self.book.defer(p.node, lambda: cluster.admin(p.node).sync(p.peer))
                else:
                    cluster.admin(p.node).sync(p.peer)
            elif kind == "kill":
                if cluster.node(p.node).alive:
                    cluster.kill(p.node)
                    self.book.node_died(p.node)
            elif kind == "pause":
                if cluster.node(p.node).state is NodeState.RUNNING:
                    cluster.pause(p.node)
            elif kind == "resume":
                if cluster.node(p.node).state is NodeState.PAUSED:
                    cluster.resume(p.node)
                    self.book.flush(p.node)
                    for injector in self._injectors:
                        injector.node_resumed(p.node)
                self._log("fault_off", "pause", step.describe(), cuts=step)
                return
            elif kind == "restart":
                if cluster.node(p.node).alive:
                    self.book.node_died(p.node)
                cluster.restart(p.node)
                self._initial_view(p.node)
                self.book.node_restarted(p.node)
                for injector in self._injectors:
                    injector.node_restarted(p.node)
                self._restart_streams(p.node)
            elif kind == "heal":
                self._heal(step)
                return
            else:  # pragma: no cover - the scenario loader refuses other kinds
                raise RunError(f"unknown step kind {kind!r}")
        except (AdminError, BackendError) as exc:
            raise RunError(f"step {step.describe()} at t={step.at:g}: {exc}") from exc
        self._log("fault_on", kind, step.describe(), cuts=step)

    def _next_view_id(self, node: str) -> int:
        # View ids count per node across its incarnations, as in the simulator.
        self._view_ids[node] = self._view_ids.get(node, 0) + 1
        return self._view_ids[node]

    def _initial_view(self, node: str) -> None:
        """Every (re)started node first installs the view of all nodes, as in the simulator."""
        self._post_view(node, list(self.scenario.nodes), self._next_view_id(node))

    def _post_view(self, node: str, members: list[str], view_id: int) -> None:
        self.cluster.admin(node).view(members, view_id)

    def _heal(self, step: FaultStep) -> None:
        target = step.params.target
        schedule = self.scenario.schedule
        if target == "all":
            undone = sorted(set(self.book.steps()) | set(self._injected))
            for index in undone:
                self._remove_step(index)
            if not undone:
                self._log("fault_off", "heal", f"{step.describe()}: nothing to heal")
            for index in undone:
                undo = schedule[index]
                self._log("fault_off", undo.kind, f"{undo.describe()} (by {step.describe()})", cuts=undo)
            return
        undo = schedule[target]
        active = self._remove_step(target)
        note = "" if active else ", was not active"
        self._log("fault_off", undo.kind, f"{undo.describe()} (by {step.describe()}{note})",
                  cuts=undo if active else None)

    # ---- packet-level injectors ------------------------------------------------------------------

    def _injector_for(self, step: FaultStep) -> FaultInjector | None:
        for injector in self._injectors:
            if injector.handles(step):
                return injector
        return None

    def _check_injectors(self) -> None:
        """Refuse, before any workload, a step that only a missing injector could apply."""
        for step in self.scenario.schedule:
            if step.kind == "toxic" and self._injector_for(step) is None:
                raise RunError(f"schedule[{step.source_index}].toxic: needs the docker backend with transport tcp "
                               f"(backend {self.cluster.backend_name}, transport {self.scenario.transport})")

    def _remove_step(self, index: int) -> bool:
        injector = self._injected.pop(index, None)
        if injector is not None:
            try:
                return injector.remove(index)
            except Exception as exc:
                raise RunError(f"heal of step #{index} ({injector.name}): {exc}") from exc
        return self.book.remove(index)

    def _close_injectors(self) -> None:
        """Remove what packet-level injectors still apply (end of the run, or a failure)."""
        self._injected.clear()
        problems = []
        for injector in self._injectors:
            try:
                removed = injector.close()
            except Exception as exc:  # keep closing the others; teardown removes the rest anyway
                problems.append(f"{injector.name}: {exc}")
                continue
            self._removed_at_end.extend(f"#{i} ({injector.name})" for i in removed)
        if problems:
            self._stop_problems.append("could not remove every injected fault: " + "; ".join(problems))

    # ---- streams ------------------------------------------------------------------------------

    def _start_stream(self, stream: Stream) -> None:
        self._started_streams.add(stream.index)
        handle = self.cluster.node(stream.src)
        if handle.state is NodeState.RUNNING:
            self._post_stream(stream, self._limits[stream.index])
        elif handle.state is NodeState.PAUSED:
            # A paused application sends nothing; what is left of its slots starts at resume.
            self.book.defer(stream.src, lambda: self._post_remaining(stream))
        # A dead sender's slots pass unsent; a restart picks the stream up (_restart_streams).

    def _post_remaining(self, stream: Stream) -> None:
        missed = slots_before(stream, self.scenario_time())
        remaining = self._limits[stream.index] - missed
        if remaining > 0:
            # Numbered after every slot that passed, so no app id of the old process comes again.
            self._post_stream(stream, remaining, first_n=missed + 1)

    def _post_stream(self, stream: Stream, count: int, first_n: int = 1) -> None:
        try:
            self.cluster.admin(stream.src).send(stream.dest, rate=stream.rate, count=count, size=stream.size,
                                                stream=stream.index, first_n=first_n)
        except AdminError as exc:
            raise RunError(f"stream {stream.index} {stream.src}->{stream.dest}: {exc}") from exc
        self._posted[stream.index] = self._posted.get(stream.index, 0) + count

    def _restart_streams(self, node: str) -> None:
        """A restarted sender lost its streams with its process: what is left of them goes on."""
        for stream in self.scenario.streams:
            if stream.src == node and stream.index in self._started_streams:
                self._post_remaining(stream)

    def _restarted(self) -> set[str]:
        return {name for name, h in self.cluster.nodes.items() if h.incarnation > 1}

    # ---- progress -----------------------------------------------------------------------------

    def _report(self, force: bool = False, note: str = "") -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        due = now - self._last_progress >= self.progress_interval_s
        if not force and not due:
            return
        if due and self.origin is not None:
            # Polling the nodes costs requests: at most once per interval, however many steps
            # are reported in between (six streams starting at t=0 must not wait for it).
            self._last_progress = now
            self._last_counts = self._counts()
        sent, delivered = self._last_counts
        faults = tuple(self.scenario.schedule[i].describe()
                       for i in sorted(set(self.book.steps()) | set(self._injected)))
        nodes = {name: h.state.value for name, h in self.cluster.nodes.items()}
        t = self.scenario_time() if self.origin is not None else 0.0
        self.progress(Progress(t=t, end=self.workload_end, phase=self.phase, sent=sent, delivered=delivered,
                               faults=faults, nodes=nodes, note=note))

    def _counts(self) -> tuple[int, int]:
        """Messages sent and delivered so far, summed over nodes (a paused or dead node counts
        with what it last said)."""
        for name, handle in self.cluster.nodes.items():
            if handle.state is not NodeState.RUNNING:
                continue
            try:
                admin = self.cluster.admin(name)
                sent = sum(int(s.get("sent", 0)) for s in admin.streams())
                delivered = int(admin.delivered().get("total", 0))
            except (AdminError, AttributeError, TypeError, ValueError):
                continue
            key = (name, handle.incarnation)
            self._node_counts[key] = (sent, delivered)
        sent = sum(c[0] for c in self._node_counts.values())
        delivered = sum(c[1] for c in self._node_counts.values())
        return sent, delivered


# ---- signals ----------------------------------------------------------------------------------


class interrupt_handlers:
    """In the main thread: SIGTERM raises Terminated (like Ctrl-C raises KeyboardInterrupt), so
    that `finally` blocks tear the cluster down. Elsewhere: nothing."""

    def __enter__(self):
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            def on_term(signum, frame):
                raise Terminated(f"signal {signum}")

            self._previous = signal.signal(signal.SIGTERM, on_term)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
        return False

