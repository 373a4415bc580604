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

The workload is harness/livestreams.py's (POST /send, deferred while a sender is paused, picked up
after a restart) and the progress display's numbers harness/progress.py's.

What a step means is harness.nemesis's to say, the same as in the simulator; harness.livefaults
carries it out here: network faults as in-process rules at the receiving nodes or through the
cluster's packet-level injectors (docker: iptables, Toxiproxy), drop steps as rules, views and
SYNC through the admin API, and what a paused node cannot hear waits for its resume. Whatever an
injector still applies when the run ends (or fails) is removed before the cluster is torn down;
stats["injectors"] lists it. A toxic step on a cluster without Toxiproxy is refused before the
first node starts its workload.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from splitbrain.harness.backends.admin import AdminError
from splitbrain.harness.backends.base import BackendError, Cluster

# FaultBook, Rule, drop_rule and network_rules lived here first: re-exported by their old path.
from splitbrain.harness.livefaults import FaultBook as FaultBook
from splitbrain.harness.livefaults import LiveFaults
from splitbrain.harness.livefaults import Rule as Rule
from splitbrain.harness.livefaults import drop_rule as drop_rule
from splitbrain.harness.livefaults import network_rules as network_rules
from splitbrain.harness.livestreams import LiveStreams, RunError
from splitbrain.harness.progress import Progress, ProgressReporter
from splitbrain.harness.scenario import FaultStep, Scenario, Stream

# Re-exported: they lived here first.
__all__ = ["LiveResult", "LiveRun", "Progress", "RunError", "Terminated", "interrupt_handlers"]

if TYPE_CHECKING:
    from splitbrain.harness.live import SettleResult

PROGRESS_INTERVAL_S = 0.5
POLL_S = 0.05


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the harness: treated like Ctrl-C (tear down, write what exists)."""

    signum = signal.SIGTERM


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

    def __init__(
        self,
        scenario: Scenario,
        cluster: Cluster,
        *,
        progress: Callable[[Progress], None] | None = None,
        progress_interval_s: float = PROGRESS_INTERVAL_S,
        poll_s: float = POLL_S,
        sleep: Callable[[float], None] | None = None,
    ):
        """`sleep(seconds)` waits between polls (default: an interruptible wait; tests pass one
        that advances a fake cluster clock)."""
        self.scenario = scenario
        self.cluster = cluster
        self.poll_s = poll_s
        self.faults = LiveFaults(
            cluster, scenario.nodes, scenario.schedule, restarted=lambda n: self.streams.restart(n)
        )
        self.streams = LiveStreams(cluster, scenario, self.faults.book, self.scenario_time)
        self.reporter = ProgressReporter(cluster, progress, progress_interval_s)
        self.timeline: list[dict] = []
        self.origin: float | None = None
        self.phase = "starting"
        self.settle: SettleResult | None = None
        self._cancel = threading.Event()
        self._sleep = sleep if sleep is not None else self._interruptible_sleep
        self._steps_applied = 0
        self._wall0 = time.monotonic()
        self._wall_s = 0.0
        self._started = False
        self._finished = False
        self._stop_problems: list[str] = []
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
        from splitbrain.harness import live

        self._wall0 = time.monotonic()
        try:
            self._report(force=True)
            self.cluster.start()
            self.faults.attach_injectors()
            self._check_injectors()
            # A membership protocol (membership: gms) forms its views itself.
            if self.scenario.membership == "static":
                for name in self.scenario.nodes:
                    self.faults.post_view(name, list(self.scenario.nodes))
            self.origin = self.faults.origin = self.cluster.now()
            self.phase = "running"
            for at, _prio, _seq, kind, item in self._plan():
                self._wait_until(at)
                if kind == "step":
                    self._apply_step(item)
                else:
                    self.streams.start(item)
                self._report(force=True, note=self._note(kind, item))
            self._wait_until(self.workload_end)
            self.phase = "settling"
            self._report(force=True)
            self.settle = live.wait_settled(
                self.cluster,
                self.scenario,
                bound_s=self.scenario.settle,
                poll_s=max(self.poll_s, 0.1),
                restarted=self._restarted(),
                on_poll=lambda: self._report(),
                sleep=self._sleep,
            )
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
        return LiveResult(
            scenario=self.scenario,
            seed=self.cluster.seed,
            backend=self.cluster.backend_name,
            timeline=self.timeline,
            stats=self.stats(),
            completed=self._finished,
            settle=self.settle,
            error=None if error is None else f"{type(error).__name__}: {error}",
        )

    def stats(self) -> dict:
        nodes = {}
        for name, handle in self.cluster.nodes.items():
            nodes[name] = {
                "address": handle.address,
                "incarnation": handle.incarnation,
                "state": handle.state.value,
                "exit_codes": list(getattr(self.cluster, "exit_codes", {}).get(name, [])),
            }
        return {
            "wall_time_s": self._wall_s or (time.monotonic() - self._wall0),
            "origin_t": self.origin,
            "scenario_time_s": self.scenario_time() if self.origin is not None else 0.0,
            "workload_end_s": self.workload_end,
            "steps_applied": self._steps_applied,
            "fault_requests": self.faults.book.requests,
            "streams_posted": dict(self.streams.posted),
            "settle": None if self.settle is None else self.settle.to_dict(),
            "nodes": nodes,
            "bad_event_lines": getattr(self.cluster, "bad_event_lines", 0),
            **({"cluster": self.cluster.describe()} if hasattr(self.cluster, "describe") else {}),
            **(
                {
                    "injectors": {
                        "used": [i.name for i in self.faults.injectors],
                        "default": getattr(self.cluster, "injector_name", "inprocess"),
                        "removed_at_end": list(self._removed_at_end),
                    }
                }
                if self.faults.injectors
                else {}
            ),
        }

    # ---- the plan -----------------------------------------------------------------------------

    def _plan(self) -> list[tuple]:
        plan: list[tuple[float, int, int, str, FaultStep | Stream]] = []
        seq = 0
        for step in self.scenario.schedule:
            plan.append((step.at, 0, seq, "step", step))
            seq += 1
        for stream in self.scenario.streams:
            if self.streams.limits[stream.index]:
                plan.append((stream.start, 1, seq, "stream", stream))
                seq += 1
        plan.sort(key=lambda e: (e[0], e[1], e[2]))
        return plan

    def _wait_until(self, at: float) -> None:
        """Wait until scenario time `at`, watching the nodes and reporting progress meanwhile."""
        assert self.origin is not None, "the run has started"
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

    def _apply_step(self, step: FaultStep) -> None:
        # A heal (fault_off) is stamped when the harness began applying it: it takes effect during
        # its requests, so what happens after this time happened after the heal (a conservative
        # origin for heal-to-sync times), and a restart is dated when the old process died. A fault
        # (fault_on) is stamped when applying it ended: only then is it surely in force (installing
        # iptables rules or pausing a container takes a while on a busy machine), so nothing seen
        # after that time crossed the fault.
        began = self.cluster.now()
        self._steps_applied += 1
        try:
            entries = self.faults.apply(step)
        except (AdminError, BackendError) as exc:
            raise RunError(f"step {step.describe()} at t={step.at:g}: {exc}") from exc
        ended = self.cluster.now()
        self.timeline.extend(entry.event(ended if entry.kind == "fault_on" else began) for entry in entries)

    def _check_injectors(self) -> None:
        """Refuse, before any workload, a step that only a missing injector could apply."""
        for step in self.scenario.schedule:
            if step.kind == "toxic" and self.faults.injector_for(step) is None:
                raise RunError(
                    f"schedule[{step.source_index}].toxic: needs the docker backend with transport tcp "
                    f"(backend {self.cluster.backend_name}, transport {self.scenario.transport})"
                )

    def _close_injectors(self) -> None:
        """Remove what packet-level injectors still apply (end of the run, or a failure)."""
        removed, problems = self.faults.close()
        self._removed_at_end.extend(removed)
        if problems:
            self._stop_problems.append("could not remove every injected fault: " + "; ".join(problems))

    def _restarted(self) -> set[str]:
        return {name for name, h in self.cluster.nodes.items() if h.incarnation > 1}

    def _report(self, force: bool = False, note: str = "") -> None:
        self.reporter.report(
            t=self.scenario_time() if self.origin is not None else None,
            end=self.workload_end,
            phase=self.phase,
            faults=tuple(self.scenario.schedule[i].describe() for i in self.faults.active),
            force=force,
            note=note,
        )


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
