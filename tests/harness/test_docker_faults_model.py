"""The fault vocabulary that the docker backend adds, without a Docker engine.

- `toxic:` steps and the `injector:` key parse, round-trip and are refused with the field's path;
- sim and local refuse toxic steps clearly ("needs the docker backend with transport tcp"), from
  run_scenario, from the CLI (exit 2) and from the live runner;
- the iptables injector turns partitions and loss into exactly the rules faults/iptables.py
  documents, heals by tag, and replays the rules of a restarted node (a recording runner stands
  in for nsenter / docker exec);
- the Toxiproxy injector puts a toxic on a directed link on both proxy streams that can carry it.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from splitbrain.harness.backends.base import NodeState
from splitbrain.harness.scenario import ScenarioError, check_backend, parse_scenario

ROOT = Path(__file__).resolve().parents[2]


def scenario(transport="tcp", schedule=(), **extra):
    data = {
        "name": "t",
        "protocol": "unicast3",
        "transport": transport,
        "nodes": 2,
        "duration": 3,
        "workload": [{"from": "A", "to": "B", "rate": 10, "count": 5}],
        "schedule": list(schedule),
    }
    data.update(extra)
    return parse_scenario(data)


# ---- the model ----------------------------------------------------------------------------------------


def test_toxic_steps_parse_and_round_trip():
    sc = scenario(
        schedule=[
            {"at": 1, "toxic": {"link": "A->B", "type": "latency", "latency": 40, "jitter": 10}},
            {"at": 1, "toxic": {"link": "A<->B", "type": "jitter", "jitter": 5}},
            {"at": 1, "toxic": {"link": "*", "type": "slicer", "average_size": 32, "size_variation": 8, "delay": 100}},
            {"at": 2, "toxic": {"link": "B->A", "type": "reset_peer", "timeout": 100, "toxicity": 0.5}},
            {"at": 2, "toxic": {"link": "A->B", "type": "down"}},
            {"at": 3, "heal": 0},
            {"at": 3, "heal": "all"},
        ],
        injector="toxiproxy",
    )
    toxics = [s for s in sc.schedule if s.kind == "toxic"]
    assert [t.params.type for t in toxics] == ["latency", "jitter", "slicer", "reset_peer", "down"]
    assert toxics[1].params.attrs == {"jitter": 5, "latency": 5}
    assert toxics[2].params.links == (("A", "B"), ("B", "A"))
    assert toxics[3].describe() == "#3 toxic B->A reset_peer timeout=100 toxicity=0.5"
    assert sc.injector == "toxiproxy"
    assert parse_scenario(sc.to_dict()) == sc
    assert "injector" not in scenario(schedule=[]).to_dict()


@pytest.mark.parametrize(
    "step, message",
    [
        ({"link": "A->B"}, r"schedule\[0\]\.toxic\.type: missing \(one of: latency, jitter"),
        ({"link": "A->B", "type": "netem"}, r"schedule\[0\]\.toxic\.type: must be one of latency"),
        ({"link": "A->B", "type": "latency", "rate": 5}, r"schedule\[0\]\.toxic\.rate: unknown key"),
        ({"link": "A->B", "type": "latency", "latency": -1}, r"toxic\.latency: must not be negative"),
        ({"link": "A->B", "type": "latency", "latency": 1.5}, r"toxic\.latency: must be an integer"),
        (
            {"link": "A->B", "type": "slicer", "average_size": 8, "size_variation": 8},
            r"size_variation: must be smaller",
        ),
        ({"link": "A->B", "type": "bandwidth"}, r"toxic\.rate: must be greater than 0"),
        ({"link": "A->B", "type": "down", "toxicity": 0.5}, r"toxic\.toxicity: down disables"),
        ({"link": "A->C", "type": "down"}, r"toxic\.link: unknown node 'C'"),
    ],
)
def test_bad_toxic_steps_name_their_field(step, message):
    with pytest.raises(ScenarioError, match=message):
        scenario(schedule=[{"at": 1, "toxic": step}])


def test_toxic_steps_need_tcp_and_injectors_are_checked():
    with pytest.raises(ScenarioError, match=r"schedule\[0\]\.toxic: needs transport: tcp"):
        scenario("udp", schedule=[{"at": 1, "toxic": {"link": "A->B", "type": "down"}}])
    with pytest.raises(ScenarioError, match=r"injector: toxiproxy needs transport: tcp"):
        scenario("udp", injector="toxiproxy")
    with pytest.raises(ScenarioError, match=r"injector: iptables cannot tell apart"):
        scenario(schedule=[{"at": 1, "toxic": {"link": "A->B", "type": "down"}}], injector="iptables")
    with pytest.raises(ScenarioError, match=r"injector: must be one of auto, inprocess, iptables, toxiproxy"):
        scenario(injector="netem")


def test_check_backend_refuses_what_a_backend_cannot_do():
    toxic = scenario(schedule=[{"at": 1, "toxic": {"link": "A->B", "type": "timeout", "timeout": 0}}])
    for backend in ("sim", "local"):
        with pytest.raises(
            ScenarioError,
            match=rf"schedule\[0\]\.toxic: needs the docker backend with transport "
            rf"tcp \(backend {backend}",
        ):
            check_backend(toxic, backend)
    check_backend(toxic, "docker")
    # The scenario's injector key is a docker preference: sim and local run the file anyway.
    check_backend(scenario("udp", injector="iptables"), "local")
    # A command-line demand is not.
    with pytest.raises(ScenarioError, match=r"--injector: iptables needs the docker backend"):
        check_backend(scenario("udp"), "local", "iptables")


def test_run_scenario_and_cli_refuse_toxics_off_docker(tmp_path):
    from splitbrain.harness.run import run_scenario

    toxic = scenario(schedule=[{"at": 1, "toxic": {"link": "A->B", "type": "down"}}])
    for backend in ("sim", "local"):
        with pytest.raises(ScenarioError, match="needs the docker backend with transport tcp"):
            run_scenario(toxic, backend=backend, out=tmp_path)
    assert not list(tmp_path.iterdir()), "nothing is written for a refused scenario"
    path = ROOT / "scenarios" / "docker" / "tcp-reset-peer.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "splitbrain.harness.cli", "run", str(path), "--backend", "sim", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "tcp-reset-peer.yaml: schedule[0].toxic: needs the docker backend with transport tcp" in proc.stderr


def test_live_runner_refuses_toxics_before_any_workload(tmp_path):
    """A cluster without Toxiproxy (here a fake one) gets a RunError before the first stream."""
    from splitbrain.harness.runner import LiveRun, RunError

    sc = scenario(schedule=[{"at": 1, "toxic": {"link": "A->B", "type": "down"}}])
    cluster = FakeCluster(sc.nodes)
    with pytest.raises(RunError, match=r"schedule\[0\]\.toxic: needs the docker backend with transport tcp"):
        LiveRun(sc, cluster).run()
    assert cluster.started and cluster.torn_down and not cluster.admin_calls


# ---- the injectors, with stand-ins --------------------------------------------------------------------


@dataclass
class Handle:
    state: NodeState = NodeState.RUNNING

    @property
    def alive(self):
        return self.state in (NodeState.RUNNING, NodeState.PAUSED)


class FakeCluster:
    backend_name = "fake"

    def __init__(self, nodes):
        self.nodes = {n: Handle() for n in nodes}
        self.started = self.torn_down = False
        self.admin_calls = []
        self.seed = 0

    def start(self):
        self.started = True

    def fault_injectors(self):
        return []

    @property
    def injector_name(self):
        return "inprocess"

    def teardown(self):
        self.torn_down = True

    def now(self):
        return 0.0

    def admin(self, name):
        self.admin_calls.append(name)
        raise AssertionError("no admin call expected")

    def node(self, name):
        return self.nodes[name]


@dataclass
class Recorder:
    """A faults.netns Runner that keeps `iptables -S` state for one namespace in a list."""

    rules: list = field(default_factory=list)
    calls: list = field(default_factory=list)

    def __call__(self, argv, *, input=None, timeout_s=None):
        from splitbrain.faults.netns import Result

        argv = list(argv)
        self.calls.append(argv)
        if argv[-1] == "--version":
            return Result(tuple(argv), 0, "iptables v1.8.9 (nf_tables)\n", "")
        if argv[0].endswith("-save"):
            return Result(tuple(argv), 0, "", "")
        words = argv[argv.index("-t") + 2 :]
        if words == ["-S"]:
            return Result(
                tuple(argv),
                0,
                "".join(
                    f"-A {c} " + " ".join(f'"{w}"' if " " in w else w for w in spec) + "\n" for c, spec in self.rules
                ),
                "",
            )
        op, chain, *spec = words
        if op == "-I":
            self.rules.insert(0, (chain, spec))
        elif op == "-D":
            self.rules.remove((chain, spec))
        return Result(tuple(argv), 0, "", "")


class Container:
    def __init__(self, cid):
        self.id = cid


class FakeDockerCluster:
    cluster_id = "sbfeedbeef"

    def __init__(self, nodes):
        self.handles = {n: Handle() for n in nodes}
        self.incarnation = {n: 1 for n in nodes}
        self.namespaces = {n: Recorder() for n in nodes}
        self.backend = type("B", (), {"iptables_runner": "nsenter"})()

    def node(self, name):
        return self.handles[name]

    def node_ip(self, name):
        return f"198.18.5.{10 + 'ABCD'.index(name)}"

    def container(self, name):
        return Container(f"{name}-{self.incarnation[name]}")

    def netns_runner(self, name):
        return self.namespaces[name]

    def restart(self, name):
        self.incarnation[name] += 1
        self.namespaces[name] = Recorder()


def test_iptables_injector_rules_heal_and_restart():
    from splitbrain.harness.backends.injectors import IptablesInjector

    sc = parse_scenario(
        {
            "name": "r",
            "protocol": "unicast3",
            "nodes": 3,
            "duration": 1,
            "workload": [],
            "schedule": [
                {"at": 0, "partition": {"from": "A", "to": ["B", "C"]}},
                {"at": 0, "loss": {"link": "C->B", "p": 0.25}},
            ],
        }
    )
    cluster = FakeDockerCluster("ABC")
    injector = IptablesInjector(cluster)
    assert injector.apply(sc.schedule[0]) == "iptables: 2 DROP rule(s) at B,C"
    injector.apply(sc.schedule[1])
    b = cluster.namespaces["B"].rules
    assert b[0] == (
        "INPUT",
        [
            "-s",
            "198.18.5.12",
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            "0.250000",
            "-m",
            "comment",
            "--comment",
            "splitbrain:sbfeedbeef:s1",
            "-j",
            "DROP",
        ],
    )
    assert b[1] == (
        "INPUT",
        ["-s", "198.18.5.10", "-m", "comment", "--comment", "splitbrain:sbfeedbeef:s0", "-j", "DROP"],
    )
    assert cluster.namespaces["A"].rules == []
    assert injector.remove(0) and not injector.remove(0)
    assert [r[1][-3] for r in cluster.namespaces["B"].rules] == ["splitbrain:sbfeedbeef:s1"]
    assert cluster.namespaces["C"].rules == []
    # A dead receiver gets its rules when it comes back, in its new namespace.
    cluster.handles["B"].state = NodeState.DEAD
    cluster.restart("B")
    step = parse_scenario(
        {
            "name": "r",
            "protocol": "unicast3",
            "nodes": 3,
            "duration": 1,
            "workload": [],
            "schedule": [{"at": 0, "partition": {"from": "C", "to": "B"}}],
        }
    ).schedule[0]
    step = type(step)(at=0, kind=step.kind, params=step.params, index=5, source_index=5)
    assert "B later (not running now)" in injector.apply(step)
    cluster.handles["B"].state = NodeState.RUNNING
    injector.node_restarted("B")
    assert sorted(r[1][-3] for r in cluster.namespaces["B"].rules) == [
        "splitbrain:sbfeedbeef:s1",
        "splitbrain:sbfeedbeef:s5",
    ]
    assert injector.close() == [1, 5]
    assert all(ns.rules == [] for ns in cluster.namespaces.values())


def test_toxiproxy_injector_puts_a_link_on_both_streams_that_can_carry_it():
    from splitbrain.harness.backends.injectors import ToxiproxyInjector

    calls = []

    class Api:
        def add_toxic(self, proxy, **kw):
            calls.append(("add", proxy, kw["name"], kw["type"], kw["stream"], kw["attributes"]))

        def remove_toxic(self, proxy, name):
            calls.append(("remove", proxy, name))

        def set_enabled(self, proxy, enabled):
            calls.append(("enabled", proxy, enabled))

    cluster = type("C", (), {})()
    cluster.toxiproxy_api = ("198.18.5.2", 8474)
    cluster.options = type("O", (), {"admin_timeout_s": 5.0})()
    cluster.proxies = {("A", "B"): ("A-to-B", 21000), ("B", "A"): ("B-to-A", 21001)}
    injector = ToxiproxyInjector(cluster, partitions=True)
    injector.api = Api()
    sc = scenario(
        schedule=[
            {"at": 1, "partition": {"from": "A", "to": "B"}},
            {"at": 1, "toxic": {"link": "A->B", "type": "jitter", "jitter": 7}},
            {"at": 1, "toxic": {"link": "B->A", "type": "down"}},
        ]
    )
    assert injector.apply(sc.schedule[0]) == "toxiproxy: blackhole (timeout 0) on 2 proxy stream(s)"
    assert calls == [
        ("add", "A-to-B", "s0-upstream", "timeout", "upstream", {"timeout": 0}),
        ("add", "B-to-A", "s0-downstream", "timeout", "downstream", {"timeout": 0}),
    ]
    calls.clear()
    injector.apply(sc.schedule[1])
    assert {c[3] for c in calls} == {"latency"} and calls[0][5] == {"jitter": 7, "latency": 7}
    calls.clear()
    injector.apply(sc.schedule[2])
    assert sorted(calls) == [("enabled", "A-to-B", False), ("enabled", "B-to-A", False)]
    calls.clear()
    assert injector.close() == [0, 1, 2]
    assert ("enabled", "A-to-B", True) in calls and ("remove", "A-to-B", "s0-upstream") in calls
