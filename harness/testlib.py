"""The library behind splitbrain's pytest plugin, usable without pytest (scripts, benchmarks,
notebooks): a started cluster a caller drives (`SplitbrainCluster`), faults in the scenario
vocabulary (`FaultController`), `eventually`, the event-log checkers (`Checkers`) and the text of a
failure report. harness.plugin only wires these into pytest fixtures and hooks.

    from splitbrain.harness.backends import get_backend
    from splitbrain.harness.testlib import SplitbrainCluster, cluster_scenario

    scenario = cluster_scenario(3, config={"xmit_interval": 0.2})
    cluster = SplitbrainCluster(get_backend("local").create_cluster(scenario, run_dir, seed=0), scenario).start()
    try:
        cluster.send("A", "B", rate=100, duration=3)
        fault = cluster.faults.partition("A", "B")
        cluster.sleep(1)
        cluster.faults.heal(fault)
        cluster.wait_settled()
        cluster.assert_checks()
    finally:
        cluster.teardown()

On the simulator, `harness.sim.driver.SimBackend().create_cluster(...)` gives a cluster the same
lines drive in virtual time (`sleep` and every wait advance the simulation).

This module must not import pytest (tests/harness/test_plugin.py checks it in a fresh interpreter).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from splitbrain.harness.backends import BackendError
from splitbrain.harness.backends.admin import AdminError
from splitbrain.harness.backends.base import Cluster, FaultInjector, NodeState
from splitbrain.harness.faultcontrol import FaultController

# eventually and its timeout are harness.poll's; re-exported for the callers that import them here.
from splitbrain.harness.poll import DEFAULT_TIMEOUT_S, EventuallyTimeout, eventually  # noqa: F401
from splitbrain.harness.scenario import (
    DEFAULT_CHECKS,
    MEMBERSHIP_DEFAULT_CHECKS,
    Scenario,
    Stream,
    parse_scenario,
)
from splitbrain.node.protocols import DEFAULT_PROTOCOL

WINDOW_SECTION_LIMIT = 12_000


# ---- a cluster under test ---------------------------------------------------------------------------


def cluster_scenario(
    nodes: int | Iterable[str] = 3,
    *,
    protocol: str = DEFAULT_PROTOCOL,
    transport: str = "udp",
    config: dict | None = None,
    seed: int = 0,
    name: str = "pytest",
    injector: str = "auto",
    membership: str = "static",
    ip_multicast: bool = False,
    jgroups: dict | None = None,
    recovery_bound: float | None = None,
) -> Scenario:
    """The Scenario a test cluster is made from (no workload, no schedule: the test drives it).
    `membership`: "static" (views installed by the harness) or "gms" (the nodes find each other and
    make their views; see SplitbrainCluster.wait_view). `ip_multicast`: multicasts as IP
    multicast datagrams (scenario key ip_multicast)."""
    data: dict[str, Any] = {
        "name": name,
        "protocol": protocol,
        "transport": transport,
        "nodes": nodes if isinstance(nodes, int) else list(nodes),
        "config": dict(config or {}),
        "workload": [],
        "duration": 1,
        "seed": seed,
        "injector": injector,
    }
    if membership != "static":
        data["membership"] = membership
    if ip_multicast:
        data["ip_multicast"] = True
    if jgroups is not None:
        data["jgroups"] = dict(jgroups)
    if recovery_bound is not None:
        data["recovery_bound"] = recovery_bound
    return parse_scenario(data)


class SplitbrainCluster:
    """A started cluster a test drives directly: workload, faults, waits, checks, teardown."""

    def __init__(self, cluster: Cluster, scenario: Scenario, *, timeout_scale: float = 1.0):
        self.cluster = cluster
        self.scenario = scenario
        self.timeout_scale = timeout_scale
        self.streams: list[Stream] = []
        self.timeline: list[dict] = []
        self.last_states: dict[str, dict] = {}
        self.faults = FaultController(self)
        self.events_: list[dict] | None = None
        self._stopped = False
        self._torn_down = False
        # Only the simulator (harness.sim.driver.SimCluster) has time that passes on demand.
        self._advance: Callable[[float], None] | None = getattr(cluster, "advance", None)

    # ---- basics ---------------------------------------------------------------------------------

    @property
    def backend(self) -> str:
        return self.cluster.backend_name

    @property
    def run_dir(self) -> Path:
        return self.cluster.run_dir

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.cluster.nodes)

    @property
    def label(self) -> str:
        extra = getattr(self.cluster, "cluster_id", "")
        return f"{self.backend}{' ' + extra if extra else ''}"

    def now(self) -> float:
        return self.cluster.now()

    def admin(self, name: str):
        return self.cluster.admin(name)

    @property
    def seed(self) -> int:
        return self.cluster.seed

    @property
    def virtual(self) -> bool:
        """True on the simulator: time passes only when the test waits (sleep, eventually)."""
        return self._advance is not None

    @property
    def membership(self) -> str:
        """ "static" (the harness installs every view), "gms" (the nodes make their own) or "own"
        (a real implementation, protocol jgroups, whose stack makes them)."""
        from splitbrain.node import protocols

        if protocols.get(self.scenario.protocol).external:
            return "own"
        return getattr(self.scenario, "membership", "static")

    def start(self) -> SplitbrainCluster:
        self.cluster.start()
        self.faults.live.attach_injectors()
        # With a membership protocol the nodes discover each other and install their own views.
        if self.membership == "static" and not getattr(self.cluster, "installs_views", False):
            for name in self.names:
                self.install_view(name, list(self.names))
        return self

    @property
    def injectors(self) -> list[FaultInjector]:
        return self.faults.live.injectors

    def install_view(self, name: str, members: list[str]) -> None:
        self.faults.live.post_view(name, members)

    def sleep(self, seconds: float) -> None:
        """Wait while watching the nodes (a crash fails at once, with the node's output); on the
        simulator, let `seconds` of virtual time pass."""
        if self._advance is not None:
            self._advance(seconds)
            return
        deadline = time.monotonic() + seconds
        while True:
            self.cluster.check_alive()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))

    # ---- workload -------------------------------------------------------------------------------

    def send(
        self,
        src: str,
        dst: str,
        *,
        count: int | None = None,
        rate: float = 100.0,
        duration: float | None = None,
        size: int = 100,
    ) -> Stream:
        """Start a stream src -> dst (count and/or duration at `rate` msgs/s); returns it. `dst`
        node.message.MCAST_DEST ("*") is one multicast per message (multicast protocols)."""
        if count is None and duration is None:
            raise ValueError("send() needs count or duration")
        stream = Stream(
            src=src, dest=dst, rate=rate, count=count, duration=duration, size=size, index=len(self.streams)
        )
        self.admin(src).send(dst, rate=rate, count=count, duration=duration, size=size, stream=stream.index)
        self.streams.append(stream)
        return stream

    def set_config(self, name: str, values: dict) -> dict:
        """Change run-time protocol settings at one node (admin POST /config), e.g. xmit_interval."""
        return self.admin(name).set_config(values)

    def delivered(self, dst: str, src: str, stream: int | None = None) -> int:
        """How many messages `dst` delivered from `src` (one stream, or all)."""
        per_stream = self.admin(dst).delivered().get("delivered", {}).get(src) or {}
        if stream is not None:
            return int((per_stream.get(str(stream)) or {}).get("count", 0))
        return sum(int(s.get("count", 0)) for s in per_stream.values())

    def state(self, name: str) -> dict:
        state = self.admin(name).state()
        self.last_states[name] = {"t": self.now(), "state": state}
        return state

    def states(self) -> dict[str, dict | str]:
        """The current /state of every node that answers; the last one seen (marked) otherwise."""
        out: dict[str, dict | str] = {}
        for name, handle in self.cluster.nodes.items():
            if handle.state is NodeState.RUNNING:
                try:
                    out[name] = self.state(name)
                    continue
                except AdminError as exc:
                    reason = str(exc)
            else:
                reason = f"node is {handle.state.value}"
            last = self.last_states.get(name)
            out[name] = (
                f"{reason}; last seen at t={last['t']:.2f}: {json.dumps(_windows(last['state']))}"
                if last
                else f"{reason}; never seen"
            )
        return out

    # ---- waiting ----------------------------------------------------------------------------------

    def eventually(self, check: Callable[[], Any], *, timeout: float = DEFAULT_TIMEOUT_S, **kwargs) -> Any:
        """`eventually`, scaled, with the tail of every node's output on failure."""
        kwargs.setdefault("context", self.log_tails)

        def watched():
            self.cluster.check_alive()
            return check()

        watched.__name__ = getattr(check, "__name__", "the condition")
        if self._advance is not None:  # poll in virtual time: deterministic, and as fast as the simulator
            kwargs.setdefault("clock", self.cluster.now)
            kwargs.setdefault("sleep", self._advance)
        return eventually(watched, timeout=timeout * self.timeout_scale, **kwargs)

    def wait_delivered(self, dst: str, src: str, count: int, *, timeout: float = DEFAULT_TIMEOUT_S) -> int:
        def enough():
            got = self.delivered(dst, src)
            return got if got >= count else None

        return self.eventually(
            enough,
            timeout=timeout,
            what=f"{dst} to deliver {count} messages from {src}",
            describe=lambda _v: f"{dst} delivered {self.delivered(dst, src)} from {src}",
        )

    def wait_settled(self, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """Until every stream is done and delivered and every send window is acked and matched."""
        from splitbrain.harness import live

        scenario = dataclasses.replace(self.scenario, streams=tuple(self.streams))
        restarted = {n for n, h in self.cluster.nodes.items() if h.incarnation > 1}

        def settled():
            obs = live.observe(self.cluster, scenario, restarted)
            for name in self.names:
                if self.cluster.node(name).state is NodeState.RUNNING:
                    try:
                        self.state(name)
                    except AdminError:
                        pass
            return obs if obs.ok else None

        last: list = []

        def describe(_value):
            obs = live.observe(self.cluster, scenario, restarted)
            last.append(obs)
            return "; ".join(obs.problems[:8]) or "settled just now"

        self.eventually(
            settled, timeout=timeout, interval=0.2, what=f"the cluster to settle ({live.EXPECTED})", describe=describe
        )

    def views(self) -> dict[str, dict | None]:
        """Each running node's membership as GET /state shows it (view_id, coord, members,
        suspects, is_coord), None for a node whose stack has no membership layer or that did not
        answer."""
        out: dict[str, dict | None] = {}
        for name, handle in self.cluster.nodes.items():
            if handle.state is not NodeState.RUNNING:
                continue
            try:
                out[name] = self.state(name).get("membership")
            except AdminError:
                out[name] = None
        return out

    def wait_view(self, members: Iterable[str], *, timeout: float = DEFAULT_TIMEOUT_S) -> dict:
        """Until every running node holds one view (same view_id and coordinator) whose members are
        exactly `members` (in any order); returns that membership. On timeout the error names each
        node's view. On the simulator it advances virtual time."""
        wanted = sorted(members)
        unknown = [m for m in wanted if m not in self.names]
        if unknown:
            raise ValueError(f"wait_view: {', '.join(unknown)} not in the cluster ({', '.join(self.names)})")

        def agreed():
            views = self.views()
            if not views:
                raise AssertionError("no node is running")
            held = list(views.values())
            if any(v is None for v in held):
                return None
            keys = {(v["view_id"], v["coord"], tuple(v["members"])) for v in held if v is not None}
            view = held[0]
            return view if len(keys) == 1 and view is not None and sorted(view["members"]) == wanted else None

        return self.eventually(
            agreed,
            timeout=timeout,
            what=f"every running node to hold one view of [{', '.join(wanted)}]",
            describe=lambda _v: describe_views(self.views()),
        )

    def log_tails(self, lines: int = 12) -> str:
        parts = []
        for name in self.names:
            try:
                parts.append(f"--- output of {name}:\n{self.cluster.log_tail(name, lines)}")
            except Exception as exc:
                parts.append(f"--- output of {name}: unavailable ({exc})")
        return "\n".join(parts)

    # ---- ending -----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Remove the injected faults, stop every node gracefully and collect the event logs."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.states()  # the last word of every window, for a failure report
        except Exception:
            pass
        try:
            self.faults.close()
        finally:
            problems = self.cluster.stop_all()
            self.cluster.collect_events()
            self.write_timeline()
            if problems:
                raise BackendError("; ".join(problems))

    def write_timeline(self) -> None:
        from splitbrain.harness.eventlog import write_events

        write_events(self.run_dir / "timeline.jsonl", self.timeline)

    def events(self) -> list[dict]:
        """Stop the cluster (once) and return the merged event log of the run."""
        if self.events_ is None:
            from splitbrain.harness.eventlog import read_run
            from splitbrain.node.events import expand_runs

            self.stop()
            # One event per message, run lines (node/events.py) expanded: what a test counts.
            self.events_ = expand_runs(read_run(self.run_dir))
        return self.events_

    def check(self, *names: str) -> list:
        """Stop the cluster and run the named checks (default: all five) over its event log."""
        from splitbrain.harness.checks import run_checks, scenario_ack_bounds

        defaults = list(DEFAULT_CHECKS) + ["windows_synced"]
        if self.membership != "static":
            defaults += list(MEMBERSHIP_DEFAULT_CHECKS)
        return run_checks(
            self.events(),
            list(names) or defaults,
            recovery_bound_s=self.scenario.recovery_bound,
            ack_bounds=scenario_ack_bounds(self.scenario),
        )

    def assert_checks(self, *names: str) -> list:
        results = self.check(*names)
        failed = [r for r in results if not r.passed and r.applicable]
        if failed:
            raise AssertionError(
                "checks failed: "
                + "; ".join(f"{r.name}: {r.explanation}" for r in failed)
                + f" (run directory {self.run_dir})"
            )
        return results

    def teardown(self) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        try:
            if not self._stopped and not self.cluster.options.keep:
                try:
                    self.faults.close()
                except Exception:
                    pass
        finally:
            try:
                self.cluster.teardown()
            finally:
                if not self._stopped:
                    self.write_timeline()

    def report(self) -> list[tuple[str, str]]:
        """Sections for a failed test's report: run directory, windows, timeline."""
        sections = [(f"splitbrain {self.label}: run directory", str(self.run_dir))]
        try:
            states = (
                self.states()
                if not self._torn_down
                else {
                    n: (f"last seen at t={s['t']:.2f}: " + json.dumps(_windows(s["state"])))
                    for n, s in self.last_states.items()
                }
            )
        except Exception as exc:
            states = {"?": f"unavailable: {exc}"}
        lines = []
        for name, state in states.items():
            text = state if isinstance(state, str) else json.dumps(_windows(state), sort_keys=True)
            lines.append(f"{name}: {text}")
        sections.append(
            (f"splitbrain {self.label}: windows (GET /state)", "\n".join(lines)[:WINDOW_SECTION_LIMIT] or "(no node)")
        )
        sections.append((f"splitbrain {self.label}: timeline", _timeline_text(self.timeline)))
        return sections


def _windows(state: dict) -> dict:
    """The part of GET /state that says where every window is."""
    if not isinstance(state, dict):
        return {"state": state}
    return {
        "incarnation": state.get("incarnation"),
        "view": state.get("view"),
        **({"membership": state["membership"]} if state.get("membership") is not None else {}),
        "windows": state.get("windows"),
        "busy": state.get("busy"),
    }


def describe_views(views: dict[str, dict | None]) -> str:
    """Each node's view on one line, e.g. "A: view 3 coord A [A, B, C] suspects [C]; B: no view"."""
    parts = []
    for name, v in views.items():
        if v is None:
            parts.append(f"{name}: no membership")
            continue
        text = f"{name}: view {v.get('view_id')} coord {v.get('coord')} [{', '.join(v.get('members') or ())}]"
        if v.get("suspects"):
            text += f" suspects [{', '.join(v['suspects'])}]"
        parts.append(text)
    return "; ".join(parts) or "no node running"


def _timeline_text(timeline: list[dict]) -> str:
    if not timeline:
        return "(no faults)"
    return "\n".join(
        f"t={ev['t']:8.3f} {ev['kind']:9} {ev.get('fault', '')}: {ev.get('detail', '')}" for ev in timeline
    )


# ---- the checkers ---------------------------------------------------------------------------------


class Checkers:
    """The event-log checks (harness.checks) over a cluster or a list of events."""

    @staticmethod
    def names() -> list[str]:
        from splitbrain.harness.checks import GENERAL_CHECKS

        return list(GENERAL_CHECKS)

    def run(self, target, *names: str) -> list:
        from splitbrain.harness.checks import run_checks

        if isinstance(target, SplitbrainCluster):
            return target.check(*names)
        return run_checks(list(target), list(names) or self.names())

    def assert_pass(self, target, *names: str) -> list:
        results = self.run(target, *names)
        failed = [r for r in results if not r.passed and r.applicable]
        if failed:  # raised, not asserted: outside pytest, python -O would skip an assert
            raise AssertionError("checks failed: " + "; ".join(f"{r.name}: {r.explanation}" for r in failed))
        return results


# ---- a finished run, for a failure report --------------------------------------------------------


def run_summary(run_dir: Path) -> str:
    """A finished run for a failure report: verdict, checks, fault timeline, final windows."""
    lines = []
    try:
        verdict = json.loads((run_dir / "verdict.json").read_text())
        lines.append(
            f"outcome {verdict.get('outcome')} (seed {verdict.get('seed')}, backend {verdict.get('backend')})"
            + (f": {verdict['error']}" if verdict.get("error") else "")
        )
        for check in verdict.get("checks", []):
            lines.append(f"  {check['name']}: {'passed' if check['passed'] else 'FAILED'}: {check['explanation']}")
        settle = (verdict.get("stats") or {}).get("settle") or {}
        if settle and not settle.get("ok"):
            lines.append(f"  live: {settle.get('message')}")
    except (OSError, ValueError) as exc:
        lines.append(f"(no verdict.json: {exc})")
    try:
        from splitbrain.harness.eventlog import read_events

        lines.append(_timeline_text(read_events(run_dir / "timeline.jsonl")))
    except (OSError, ValueError):
        pass
    windows = _final_windows(run_dir)
    if windows:
        lines.append("final windows (window events with final=true):")
        lines.extend(windows)
    return "\n".join(lines)


def _final_windows(run_dir: Path) -> list[str]:
    out = []
    for path in sorted(run_dir.glob("nodes/*/events.jsonl")):
        try:
            with path.open(encoding="utf-8") as f:
                for line in f:
                    if '"window"' in line and '"final":true' in line:
                        ev = json.loads(line)
                        keys = ("node", "side", "peer", "conn_id", "low", "high", "state")
                        out.append("  " + " ".join(f"{k}={ev.get(k)}" for k in keys if k in ev))
        except (OSError, ValueError):
            continue
    return out[:200]
