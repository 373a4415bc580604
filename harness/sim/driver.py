"""The simulator, driven step by step: the `sim` backend of the pytest plugin (harness.testlib).

A test written against harness.testlib.SplitbrainCluster (send, faults, sleep, eventually,
wait_settled, assert_checks) runs unchanged here, in virtual time. `SimCluster` offers what
SplitbrainCluster asks of a live cluster (node handles, `now`, an admin client per node, stop,
collect_events, teardown) on top of a harness.sim.Simulation:

- `now()` is virtual time; `advance(s)` runs the simulation s seconds further. SplitbrainCluster
  sleeps and polls (`eventually`, `wait_settled`) by advancing, so a test takes milliseconds and
  replays exactly from its seed;
- `admin(name)` answers the reads the settle test and a failure report make (GET /state, /streams,
  /delivered: the same shapes as node.runtime's admin API) from the simulator's stacks and event
  logs, and POST /send starts a stream in the simulator;
- faults go through `SimFaults`, which hands each schedule step to the simulator: it carries out
  the nemesis operations itself, exactly as in a whole-scenario run.

The run directory gets the same files as on a live backend (nodes/<name>/events.jsonl, and from
SplitbrainCluster timeline.jsonl), so the checkers judge a sim cluster exactly as any other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from splitbrain.harness import nemesis
from splitbrain.harness.backends.base import ClusterOptions, FaultInjector, NodeHandle, NodeState
from splitbrain.harness.eventlog import write_events
from splitbrain.harness.scenario import FaultStep, Scenario, Stream
from splitbrain.node.compose import protocol_layers
from splitbrain.node.events import compact_runs
from splitbrain.node.message import parse_app_id

from .cluster import DEAD, PAUSED, SimNode
from .simulator import Simulation, _StreamState

_STATES = {DEAD: NodeState.DEAD, PAUSED: NodeState.PAUSED}


class SimBackend:
    """The plugin's view of the simulator as a backend: it always runs."""

    name = "sim"

    def check(self) -> tuple[bool, str]:
        return True, ""

    def create_cluster(
        self, scenario: Scenario, run_dir: Path, *, seed: int, options: ClusterOptions | None = None, **sim_options
    ) -> SimCluster:
        return SimCluster(scenario, run_dir, seed=seed, options=options, **sim_options)


class SimCluster:
    """A simulated cluster a test drives step by step (see the module docstring)."""

    backend_name = "sim"
    # The simulator gives every node the view of all as it boots (as in a scenario run), so
    # SplitbrainCluster.start posts no views of its own.
    installs_views = True

    def __init__(
        self, scenario: Scenario, run_dir: Path, *, seed: int, options: ClusterOptions | None = None, **sim_options
    ):
        self.scenario = scenario
        self.run_dir = Path(run_dir)
        self.seed = seed
        self.options = options or ClusterOptions()
        self.sim = Simulation(scenario, seed, **sim_options)
        self.streams: dict[str, dict[int, _StreamState]] = {name: {} for name in scenario.nodes}
        self._delivered = _Delivered(scenario.nodes)
        self._admins = {name: SimAdmin(self, name) for name in scenario.nodes}
        self._collected = False

    # ---- what SplitbrainCluster reads ---------------------------------------------------------

    @property
    def nodes(self) -> dict[str, NodeHandle]:
        return {name: self.node(name) for name in self.scenario.nodes}

    def node(self, name: str) -> NodeHandle:
        node = self.sim.nodes[name]
        # Live backends count incarnations from 1, the simulator from 0.
        return NodeHandle(
            name=name,
            address=f"sim:{name}",
            admin_url=f"sim:{name}",
            incarnation=node.incarnation + 1,
            state=_STATES.get(node.state, NodeState.RUNNING),
        )

    def sim_node(self, name: str) -> SimNode:
        return self.sim.nodes[name]

    def admin(self, name: str) -> SimAdmin:
        return self._admins[name]

    def now(self) -> float:
        return self.sim.now

    def advance(self, seconds: float) -> None:
        """Let `seconds` of virtual time pass."""
        self.sim.advance(self.sim.now + max(0.0, seconds))

    def delivered(self, name: str) -> dict:
        return self._delivered.of(name, self.sim.nodes[name].events)

    def fault_executor(self, names: tuple[str, ...], steps: Mapping[int, FaultStep]) -> SimFaults:
        return SimFaults(self, steps)

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self.sim.start()

    def check_alive(self) -> None:
        """Simulated nodes cannot crash behind the harness's back (a broken invariant raises)."""

    def stop_all(self) -> list[str]:
        """End the run now: every live node logs its final windows, as at the end of a scenario."""
        self.sim.finish()
        return []

    def collect_events(self) -> dict[str, Path]:
        paths = {}
        for name, node in self.sim.nodes.items():
            paths[name] = self.run_dir / "nodes" / name / "events.jsonl"
            write_events(paths[name], compact_runs(node.events))  # runs as one line, as live nodes write
        self._collected = True
        return paths

    def log_tail(self, name: str, lines: int = 20) -> str:
        """The last events of a node (a simulated node has no other output)."""
        events = self.sim.nodes[name].events[-lines:]
        return "\n".join("    " + json.dumps(ev, separators=(",", ":")) for ev in events) or "    (empty)"

    def teardown(self) -> None:
        """Nothing runs outside this process; the event logs still go to the run directory."""
        if not self._collected:
            self.collect_events()


class SimAdmin:
    """A node's admin API on the simulator: the reads of GET /state, /streams and /delivered, and
    POST /send (faults and views go through SimFaults, as schedule steps)."""

    def __init__(self, cluster: SimCluster, name: str):
        self.cluster = cluster
        self.name = name

    def state(self) -> dict:
        node = self.cluster.sim_node(self.name)
        layers = protocol_layers(node.live_stack)
        return {
            "node": self.name,
            "incarnation": node.incarnation,
            "protocol": self.cluster.scenario.protocol,
            "now": self.cluster.now(),
            "view": node.view_id,
            "membership": None if (m := node.live_stack.membership()) is None else m.to_dict(),
            "windows": [{"proto": layer.proto, **w.to_dict()} for layer in layers for w in layer.windows()],
            "busy": [{"proto": layer.proto, "reason": why} for layer in layers for why in layer.busy()],
        }

    def streams(self) -> list[dict]:
        return [
            {"stream": index, "to": ss.dest, "sent": ss.n, "planned": ss.limit, "done": ss.k >= ss.limit}
            for index, ss in self.cluster.streams[self.name].items()
        ]

    def delivered(self) -> dict:
        return {"node": self.name, "delivered": self.cluster.delivered(self.name)}

    def set_config(self, values: dict) -> dict:
        """POST /config: the node's layers take the settings now (virtual time)."""
        self.cluster.sim.set_config(self.name, values)
        return {"config": values}

    def send(
        self,
        dest: str,
        *,
        rate: float,
        count: int | None = None,
        duration: float | None = None,
        size: int = 100,
        stream: int = 0,
    ) -> dict:
        sim = self.cluster.sim
        spec = Stream(
            src=self.name, dest=dest, rate=rate, count=count, duration=duration, size=size, start=sim.now, index=stream
        )
        self.cluster.streams[self.name][stream] = sim.add_stream(spec)
        return {"stream": stream}


class _Delivered:
    """Per receiver, per (sender, stream): how many app messages it delivered and the last app n,
    read incrementally from its event log (a restart starts the counts again, as on a live node)."""

    def __init__(self, names: tuple[str, ...]):
        self.seen = dict.fromkeys(names, 0)
        self.counts: dict[str, dict[str, dict[str, dict[str, int]]]] = {name: {} for name in names}

    def of(self, name: str, events: list[dict]) -> dict:
        counts = self.counts[name]
        for ev in events[self.seen[name] :]:
            kind = ev["kind"]
            if kind == "node_start":
                counts.clear()
            elif kind == "deliver" and "app" in ev:
                src, stream, n = parse_app_id(ev["app"])
                entry = counts.setdefault(src, {}).setdefault(str(stream), {"count": 0, "last": 0})
                entry["count"] += 1
                entry["last"] = n
        self.seen[name] = len(events)
        return counts


class SimFaults:
    """Schedule steps carried out by the simulator (the executor harness.testlib.FaultController
    uses on the sim backend, in place of harness.livefaults.LiveFaults)."""

    def __init__(self, cluster: SimCluster, steps: Mapping[int, FaultStep]):
        self.cluster = cluster
        self.steps = steps
        self.injectors: list[FaultInjector] = []

    @property
    def active(self) -> list[int]:
        return sorted(self.cluster.sim.active_steps)

    def attach_injectors(self) -> None:
        """The simulator's network model takes every network fault: no packet-level injectors."""

    def apply(self, step: FaultStep) -> list[nemesis.Timeline]:
        return self.cluster.sim.apply_step(step, self.steps)

    def post_view(self, node: str, members: list[str]) -> None:
        self.cluster.sim.view(node, tuple(members))

    def close(self) -> tuple[list[str], list[str]]:
        """Faults in force end with the simulation; nothing outside it to remove."""
        return [], []
