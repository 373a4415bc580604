"""The backend interface: a cluster of real protocol nodes for one scenario run.

A backend (local processes now; docker containers and Kubernetes pods later) creates a `Cluster`
for a scenario and a run directory. The cluster owns the nodes' lives and nothing else: it starts
them, stops them gracefully (SIGTERM: final windows, node_stop), kills them (-9: nothing more is
written), pauses and resumes them, restarts them with empty state and incarnation + 1, and brings
every node's event log home to `run_dir/nodes/<name>/events.jsonl`. Everything else the harness
does (workload, faults, checks) goes through each node's admin API, so the runner never needs to
know where a node lives: a `NodeHandle` carries the admin URL and the protocol address, which may
be on another machine.

Contract for implementations:

- `start()` brings every node up and returns once each answers GET /health (or raises
  `NodeStartError` naming the node, with the tail of its log);
- lifecycle calls act on one node and record the time (`run clock`, seconds since `epoch`); a
  kill or restart appends a `node_stop` event (reason kill or restart) to that node's log on its
  behalf, because a killed process writes nothing more;
- `collect_events()` merges every finished incarnation's log into `nodes/<name>/events.jsonl`;
- `teardown()` is idempotent, never raises for a node that is already gone, and leaves no
  process, container or temporary file behind, whatever happened before. `with cluster:` calls it.

What every backend does the same way lives in `Cluster`: stop (all nodes against one deadline,
then a kill), kill, pause, resume, restart, the node_stop events written on a node's behalf, and
merging each incarnation's `events-inc<N>.jsonl` into `events.jsonl`. A backend supplies the
hooks (`_spawn`, `_wait_healthy`, `_has_process`, `_send_stop`, `_wait_exit`, `_send_kill`,
`_freeze`, `_thaw`, `_output`) and, where ending an incarnation needs more than collecting its
log, `_finish`.

The run clock: every node gets the same `epoch` (a time.time() value) and stamps its events with
time.time() - epoch; the harness timeline uses the same clock (`cluster.now()`).

Packet-level faults. A cluster may offer `fault_injectors()`: objects that apply some network
fault steps (partition, loss, toxic) outside the node processes, in the kernel (iptables in each
node's network namespace) or on a proxy (Toxiproxy). The runner gives them the steps they accept
and the node fault layer (admin API) everything else. The default is none: every fault is an
in-process rule, as on the local backend.
"""

from __future__ import annotations

import abc
import enum
import json
import random
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from splitbrain.harness.scenario import Scenario
from splitbrain.node.errors import BadInput, RunFailed
from splitbrain.node.events import make_event

from .admin import AdminClient, AdminError


class BackendError(RunFailed, RuntimeError):
    """A backend cannot do what it was asked (start, stop, reach a node)."""


class BackendUnavailable(BadInput, BackendError):
    """The backend cannot run on this host (the message says why)."""


class NodeStartError(BackendError):
    """A node did not come up; the message names it and quotes the tail of its log."""


class NodeAddressInUse(NodeStartError):
    """A node could not bind its address (another cluster got there first)."""


class NodeStopError(BackendError):
    """A node did not stop gracefully in time and was killed."""


class NodeCrashed(BackendError):
    """A node exited while the harness expected it to run."""


class NodeState(enum.Enum):
    NEW = "new"  # not started yet
    RUNNING = "running"
    PAUSED = "paused"
    DEAD = "dead"  # killed, crashed or stopped


@dataclass(kw_only=True)
class NodeHandle:
    """What the harness knows about one node: where it listens and in which life it is."""

    name: str
    address: str  # protocol address host:port (what the peers send to)
    admin_url: str  # http://host:port of its admin API
    incarnation: int = 0
    state: NodeState = NodeState.NEW
    started_at: float | None = None  # run clock, start of the current incarnation
    restarts: int = 0

    @property
    def alive(self) -> bool:
        return self.state in (NodeState.RUNNING, NodeState.PAUSED)

    @property
    def running(self) -> bool:
        return self.state is NodeState.RUNNING


@dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    """Knobs every backend understands."""

    start_timeout_s: float = 30.0  # per node, to answer /health (generous: CI has 2 busy cores)
    stop_timeout_s: float = 10.0  # graceful stop, before a kill
    admin_timeout_s: float = 5.0  # one admin request
    token: str | None = None  # admin token; default: a fresh random one per cluster
    # Which injector applies network faults: None or "auto" (the backend's default and the
    # scenario's `injector` key), "inprocess", "iptables" or "toxiproxy". Overrides the scenario.
    injector: str | None = None
    keep: bool = False  # leave containers (and their network) behind at teardown, for inspection


class Cluster(abc.ABC):
    """The nodes of one run. Subclasses implement the lifecycle for one kind of infrastructure."""

    backend_name = "?"

    def __init__(
        self,
        scenario: Scenario,
        run_dir: Path,
        *,
        seed: int,
        epoch: float | None = None,
        options: ClusterOptions | None = None,
    ):
        self.scenario = scenario
        self.run_dir = Path(run_dir)
        self.seed = seed
        self.epoch = time.time() if epoch is None else epoch
        self.options = options or ClusterOptions()
        self.token = self.options.token or secrets.token_hex(16)
        # The cluster's own IP multicast group (scenario ip_multicast): administratively scoped,
        # drawn per cluster so that clusters sharing a host's loopback never share a group.
        rng = random.SystemRandom()
        self.mcast_group = (
            f"239.{rng.randint(1, 254)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}:{rng.randint(20000, 60999)}"
        )
        self.nodes: dict[str, NodeHandle] = {}
        self._admins: dict[str, AdminClient] = {}
        # name -> [(incarnation, part path, spawn time)] of incarnations not yet merged
        self._parts: dict[str, list[tuple[int, Path, float]]] = {n: [] for n in scenario.nodes}
        self._synthetic: dict[str, SyntheticEvents] = {n: SyntheticEvents() for n in scenario.nodes}
        self.exit_codes: dict[str, list[int]] = {n: [] for n in scenario.nodes}
        self.bad_event_lines = 0
        self.problems: list[str] = []
        self._torn_down = False

    # ---- the run clock ------------------------------------------------------------------------

    def now(self) -> float:
        """Seconds since the epoch of this run: the `t` of every event."""
        return time.time() - self.epoch

    # ---- nodes and their admin API ------------------------------------------------------------

    def node(self, name: str) -> NodeHandle:
        try:
            return self.nodes[name]
        except KeyError:
            raise BackendError(f"no node {name!r} in this cluster (nodes: {', '.join(self.nodes)})") from None

    def admin(self, name: str) -> AdminClient:
        """The admin client of a node's current incarnation (its URL does not change on restart)."""
        handle = self.node(name)
        client = self._admins.get(name)
        if client is None:
            client = AdminClient(handle.admin_url, self.token, timeout_s=self.options.admin_timeout_s, node=name)
            self._admins[name] = client
        return client

    def node_seed(self, name: str, incarnation: int) -> int:
        """A node's seed per incarnation, derived from the run seed (stable across backends)."""
        return random.Random(f"{self.seed}/{name}/{incarnation}").getrandbits(31)

    def node_config(
        self, name: str, *, bind: str, admin: str, peers: dict[str, str], events: str, incarnation: int
    ) -> dict:
        """The `python -m splitbrain.node` configuration of one incarnation (the node contract)."""
        sc = self.scenario
        return {
            "name": name,
            "bind": bind,
            "admin": admin,
            "transport": sc.transport,
            "protocol": sc.protocol,
            "peers": dict(peers),
            "config": dict(sc.config),
            "events": events,
            "incarnation": incarnation,
            "seed": self.node_seed(name, incarnation),
            "epoch": self.epoch,
            "admin_token": self.token,
            # Only with a membership protocol, so a static node's configuration is unchanged.
            **({} if sc.membership == "static" else {"membership": sc.membership}),
            **({"mcast_group": self.mcast_group} if getattr(sc, "ip_multicast", False) else {}),
        }

    # ---- packet-level fault injectors ----------------------------------------------------------

    def fault_injectors(self) -> list[FaultInjector]:
        """Injectors that apply some network fault steps outside the nodes (default: none)."""
        return []

    @property
    def injector_name(self) -> str:
        """The injector network faults go to when no packet-level one takes them."""
        return "inprocess"

    # ---- lifecycle ----------------------------------------------------------------------------

    @abc.abstractmethod
    def start(self) -> None:
        """Start every node (incarnation 1) and wait until each answers /health."""

    def stop(self, name: str) -> None:
        """Stop a node gracefully (SIGTERM): it writes final windows and node_stop, then exits."""
        self._stop_many([name])

    def stop_all(self) -> list[str]:
        """Stop every live node gracefully; returns the problems (nodes that had to be killed)."""
        names = [n for n, h in self.nodes.items() if h.alive]
        if getattr(self.scenario, "membership", "static") != "static":
            # The run is over for the whole cluster: no node leaves the group on its way out, so
            # no membership message (LEAVE, the views it causes) changes a window after the final
            # snapshots, and views_agree judges the views of the run, not of its teardown.
            for name in names:
                if self.nodes[name].state is NodeState.RUNNING:
                    try:
                        self.admin(name).leave_on_stop(False)
                    except AdminError:  # a node that cannot answer is stopped all the same
                        pass
        try:
            self._stop_many(names)
        except NodeStopError as exc:
            return [str(exc)]
        return []

    def _stop_many(self, names: list[str]) -> None:
        """SIGTERM every node first, then wait for all of them against one deadline."""
        waiting = []
        for name in names:
            handle = self.node(name)
            if not self._has_process(name) or not handle.alive:
                continue
            self._send_stop(name)
            waiting.append(name)
        deadline = time.monotonic() + self.options.stop_timeout_s
        stuck = []
        for name in waiting:
            handle = self.nodes[name]
            code = self._wait_exit(name, max(0.0, deadline - time.monotonic()))
            if code is None:
                code = self._send_kill(name)
                stuck.append(name)
                self._record_stop(name, "stop_timeout")
            handle.state = NodeState.DEAD
            self.exit_codes[name].append(code)
            self._finish(name)
        if stuck:
            raise NodeStopError(
                f"node(s) {', '.join(stuck)} did not stop within "
                f"{self.options.stop_timeout_s:g}s of SIGTERM and were killed"
            )

    def kill(self, name: str, reason: str = "kill") -> None:
        """Kill a node at once (SIGKILL): it writes nothing more."""
        handle = self.node(name)
        if not self._has_process(name) or not handle.alive:
            return
        t = self.now()
        self.exit_codes[name].append(self._send_kill(name))
        handle.state = NodeState.DEAD
        # A killed node writes nothing more: its node_stop comes from the harness.
        self._record_stop(name, reason, t)
        self._finish(name)

    def pause(self, name: str) -> None:
        """Freeze a node (SIGSTOP): no timers, no reads; the kernel keeps what arrives."""
        handle = self.node(name)
        if handle.state is not NodeState.RUNNING:
            raise BackendError(f"cannot pause {name}: it is {handle.state.value}")
        self._freeze(name)
        handle.state = NodeState.PAUSED

    def resume(self, name: str) -> None:
        """Unfreeze a paused node (SIGCONT)."""
        handle = self.node(name)
        if handle.state is not NodeState.PAUSED:
            raise BackendError(f"cannot resume {name}: it is {handle.state.value}")
        self._thaw(name)
        handle.state = NodeState.RUNNING

    def restart(self, name: str) -> None:
        """Kill the node if it lives, then start it with empty state and incarnation + 1."""
        handle = self.node(name)
        if handle.alive:
            self.kill(name, reason="restart")
        handle.restarts += 1
        self._spawn(name, handle.incarnation + 1)
        self._wait_healthy(name)

    @abc.abstractmethod
    def check_alive(self) -> None:
        """Raise NodeCrashed if a node the cluster believes alive has exited."""

    def _record_stop(self, name: str, reason: str, t: float | None = None) -> None:
        """A node_stop for the current incarnation, written on its behalf (it cannot write one)."""
        handle = self.nodes[name]
        self._synthetic[name].add(
            handle.incarnation,
            make_event(
                self.now() if t is None else t, name, "node", "node_stop", reason=reason, incarnation=handle.incarnation
            ),
        )

    # ---- hooks (implemented by backends) ------------------------------------------------------

    @abc.abstractmethod
    def _spawn(self, name: str, incarnation: int) -> None:
        """Start one incarnation of a node (without waiting for it) and record its part file."""

    @abc.abstractmethod
    def _wait_healthy(self, name: str) -> None:
        """Wait until the node's current incarnation answers /health, or raise NodeStartError."""

    @abc.abstractmethod
    def _has_process(self, name: str) -> bool:
        """Whether the node has a process or container of its current incarnation to act on."""

    @abc.abstractmethod
    def _send_stop(self, name: str) -> None:
        """Ask a node to stop (SIGTERM), thawing it first if paused; failures are left to the wait."""

    @abc.abstractmethod
    def _wait_exit(self, name: str, timeout_s: float) -> int | None:
        """The node's exit code once it has exited, or None when it still runs after timeout_s."""

    @abc.abstractmethod
    def _send_kill(self, name: str) -> int:
        """Kill a node (SIGKILL), wait until it is gone and return its exit code."""

    @abc.abstractmethod
    def _freeze(self, name: str) -> None:
        """Suspend a running node."""

    @abc.abstractmethod
    def _thaw(self, name: str) -> None:
        """Let a suspended node run again."""

    @abc.abstractmethod
    def _output(self, name: str, lines: int) -> str | None:
        """The end of a node's own output (log_tail keeps `lines` lines); None when there is none."""

    def _finish(self, name: str) -> None:
        """A node's incarnation has ended: bring its event log home."""
        self._collect(name)

    # ---- event logs ---------------------------------------------------------------------------

    def _node_dir(self, name: str) -> Path:
        path = self.run_dir / "nodes" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _collect(self, name: str) -> None:
        """Append every finished incarnation's log to nodes/<name>/events.jsonl."""
        handle = self.nodes[name]
        keep = []
        for incarnation, part, spawned_at in self._parts[name]:
            if incarnation == handle.incarnation and handle.alive:
                keep.append((incarnation, part, spawned_at))
                continue
            events = self._read_part(part)
            if not any(ev.get("kind") == "node_start" for ev in events):
                events.insert(0, make_event(spawned_at, name, "node", "node_start", incarnation=incarnation))
            events.extend(self._synthetic[name].pop(incarnation))
            with open(self._node_dir(name) / "events.jsonl", "a", encoding="utf-8") as out:
                for ev in events:
                    out.write(json.dumps(ev, separators=(",", ":")))
                    out.write("\n")
            try:
                part.unlink(missing_ok=True)
            except PermissionError:  # pragma: no cover - a run dir a container's user made read-only
                pass
        self._parts[name] = keep

    def _read_part(self, part: Path) -> list[dict]:
        events: list[dict] = []
        try:
            text = part.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return events
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                # A node killed in the middle of a write leaves half a line at the end.
                self.bad_event_lines += 1
                continue
            if isinstance(ev, dict) and isinstance(ev.get("t"), (int, float)):
                events.append(ev)
            else:
                self.bad_event_lines += 1
        return events

    def collect_events(self) -> dict[str, Path]:
        """Merge every finished incarnation's log into nodes/<name>/events.jsonl; returns the paths."""
        paths = {}
        for name in self.nodes:
            self._collect(name)
            path = self._node_dir(name) / "events.jsonl"
            path.touch()
            paths[name] = path
        return paths

    no_output = "    (no output)"  # what log_tail says for a node without any output

    def log_tail(self, name: str, lines: int = 20) -> str:
        """The last lines of a node's own output, indented (for error messages)."""
        text = self._output(name, lines)
        if text is None:
            return self.no_output
        return "\n".join("    " + line for line in text.splitlines()[-lines:]) or "    (empty)"

    # ---- teardown -----------------------------------------------------------------------------

    @abc.abstractmethod
    def _teardown(self) -> None:
        """Stop every node and release every resource; called once by teardown()."""

    def teardown(self) -> None:
        """Stop everything and release every resource. Idempotent; signals wait until it is done."""
        if self._torn_down:
            return
        with signals_deferred():
            try:
                self._teardown()
            finally:
                self._torn_down = True
                for client in self._admins.values():
                    client.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()


class FaultInjector(abc.ABC):
    """Network faults applied outside the node processes, one schedule step at a time.

    Steps are keyed by their index in the scenario's sorted schedule (what `heal: N` names). An
    injector remembers what it applied, so that `remove` undoes exactly that, `node_restarted`
    puts back what a new incarnation's fresh network namespace lost, and `close` removes all
    that is left, whatever happened before (it must not raise for a node that is gone).
    """

    name = "?"

    @abc.abstractmethod
    def handles(self, step) -> bool:
        """Whether this injector applies the step (harness.scenario.FaultStep)."""

    @abc.abstractmethod
    def apply(self, step) -> str:
        """Apply the step; returns a short description of what was done (for the timeline)."""

    @abc.abstractmethod
    def remove(self, step_index: int) -> bool:
        """Undo one applied step; False when it was not active."""

    def node_restarted(self, node: str) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """A node came back in a new network namespace: re-apply what is in force there."""

    def node_resumed(self, node: str) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """A paused node runs again: do what could not reach it while it was frozen."""

    def active(self) -> list[int]:
        """Indexes of the steps in force."""
        return []

    def close(self) -> list[int]:
        """Remove everything still applied; returns the indexes of the steps it removed."""
        removed = self.active()
        for index in removed:
            self.remove(index)
        return removed


class Backend(abc.ABC):
    """A kind of infrastructure that can host a cluster of nodes."""

    name = "?"

    @abc.abstractmethod
    def check(self) -> tuple[bool, str]:
        """Whether this host can run the backend, and why (or why not)."""

    @abc.abstractmethod
    def create_cluster(
        self,
        scenario: Scenario,
        run_dir: Path,
        *,
        seed: int,
        epoch: float | None = None,
        options: ClusterOptions | None = None,
    ) -> Cluster:
        """A cluster for a scenario whose nodes write into `run_dir` (not started yet)."""


# ---- signals ----------------------------------------------------------------------------------

_DEFERRED = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def signals_deferred() -> Iterator[list[int]]:
    """Hold SIGINT and SIGTERM while the body runs, then deliver them to the previous handlers.

    Used around spawning a process (so that an interrupt cannot land between fork and
    bookkeeping, leaving a process nobody tracks) and around teardown (so that a second Ctrl-C
    does not abandon half-stopped nodes). Outside the main thread signals go to the main
    thread anyway, so this is a no-op there.
    """
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    pending: list[int] = []
    previous = {}

    def record(signum, _frame):
        pending.append(signum)

    for sig in _DEFERRED:
        previous[sig] = signal.signal(sig, record)
    try:
        yield pending
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)


@dataclass
class SyntheticEvents:
    """Lifecycle events a backend writes on a node's behalf (a killed node cannot)."""

    by_incarnation: dict[int, list[dict]] = field(default_factory=dict)

    def add(self, incarnation: int, event: dict) -> None:
        self.by_incarnation.setdefault(incarnation, []).append(event)

    def pop(self, incarnation: int) -> list[dict]:
        return self.by_incarnation.pop(incarnation, [])
