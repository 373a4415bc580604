"""Scenario files: the documented format loads, bad input names its field; runs and the CLI."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from splitbrain.harness.cli import main
from splitbrain.harness.run import run_scenario
from splitbrain.harness.rundir import make_run_dir
from splitbrain.harness.scenario import ScenarioError, cut_links, load_scenario, parse_scenario
from splitbrain.harness.sim import IdentityCodec, SimulationError, simulate
from splitbrain.harness.verdict import judge
from splitbrain.node.events import make_event
from splitbrain.node.layer import Layer
from splitbrain.node.stack import Stack

EXAMPLE = textwrap.dedent("""\
    name: asym-split-resync
    protocol: unicast3          # unicast3 | unicast2 | unicast | nakack2 | mcast
    transport: udp              # udp | tcp
    nodes: [A, B, C]            # or a count: 3 -> A, B, C
    config: {xmit_interval: 0.5, conn_close_timeout: 2.0, resync: sync}
    workload:
      - {from: A, to: B, rate: 200, count: 2000, size: 100}
      - {from: all, to: all, rate: 50, duration: 5}
    schedule:                   # seconds from start
      - {at: 1.0, partition: {from: A, to: B}}     # one-way: nothing from A reaches B
      - {at: 1.0, partition: [[A], [B, C]]}        # two-way split into groups
      - {at: 2.0, loss: {link: A->C, p: 0.2}}      # link: X->Y, X<->Y, or "*"
      - {at: 2.0, delay: {link: "*", ms: 50, jitter_ms: 10}}
      - {at: 2.5, drop: {at: B, from: A, type: ACK, count: 3}}   # in-process, by message type
      - {at: 3.0, view: {at: B, members: [B, C]}}  # injected view
      - {at: 4.0, kill: B}                         # also pause: B, resume: B, restart: B
      - {at: 6.0, heal: all}                       # or heal: <index into schedule>
    duration: 10                # the workload's time budget (s)
    settle: 5                   # seconds after the last heal for the eventual checks
    checks: [fifo, no_duplicates, no_loss, windows_synced]
    expect: pass                # or {fail: no_loss}
    seed: 42
    """)

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def example() -> dict:
    return yaml.safe_load(EXAMPLE)


# ---- the format -------------------------------------------------------------------------------


def test_example_loads(tmp_path):
    """The documented example file loads with every field resolved."""
    path = tmp_path / "s.yaml"
    path.write_text(EXAMPLE)
    sc = load_scenario(path)
    assert sc.name == "asym-split-resync" and sc.protocol == "unicast3" and sc.transport == "udp"
    assert sc.nodes == ("A", "B", "C")
    assert sc.config == {"xmit_interval": 0.5, "conn_close_timeout": 2.0, "resync": "sync"}
    assert [(s.src, s.dest) for s in sc.streams] == [
        ("A", "B"),
        ("A", "B"),
        ("A", "C"),
        ("B", "A"),
        ("B", "C"),
        ("C", "A"),
        ("C", "B"),
    ]
    assert [s.index for s in sc.streams] == list(range(7))
    assert sc.streams[0].count == 2000 and sc.streams[1].duration == 5.0 and sc.streams[1].size == 100
    assert [step.kind for step in sc.schedule] == [
        "partition",
        "partition",
        "loss",
        "delay",
        "drop",
        "view",
        "kill",
        "heal",
    ]
    one_way, two_way = sc.schedule[0].params, sc.schedule[1].params
    assert one_way.one_way and one_way.links == (("A", "B"),)
    assert not two_way.one_way and set(two_way.links) == {("A", "B"), ("A", "C"), ("B", "A"), ("C", "A")}
    assert sc.schedule[3].params.links == tuple((a, b) for a in "ABC" for b in "ABC" if a != b)
    drop = sc.schedule[4].params
    assert (drop.node, drop.peer, drop.types, drop.count, drop.direction) == ("B", "A", ("ACK",), 3, "up")
    assert sc.schedule[5].params.members == ("B", "C")
    assert sc.schedule[7].params.target == "all"
    assert sc.checks == ("fifo", "no_duplicates", "no_loss", "windows_synced", "no_errors")
    assert sc.expect == "pass" and sc.seed == 42
    assert sc.end_time == 15.0


def test_resolved_scenario_round_trips():
    """to_dict() writes the resolved scenario, and it parses back to an equal Scenario."""
    sc = parse_scenario(example())
    again = parse_scenario(yaml.safe_load(sc.to_yaml()))
    assert again == sc


def test_node_count_expands_to_letters():
    """nodes: 3 means A, B, C; 28 goes on with AA, AB."""
    assert parse_scenario({**example(), "nodes": 3}).nodes == ("A", "B", "C")
    names = parse_scenario({**example(), "nodes": 28}).nodes
    assert names[25:] == ("Z", "AA", "AB")


def test_defaults():
    """transport, config, schedule, settle, checks, expect and seed have defaults."""
    sc = parse_scenario(
        {
            "name": "x",
            "protocol": "unicast3",
            "nodes": 2,
            "duration": 1,
            "workload": [{"from": "A", "to": "B", "rate": 10, "duration": 1}],
        }
    )
    assert (sc.transport, sc.config, sc.schedule, sc.settle, sc.expect, sc.seed) == ("udp", {}, (), 5.0, "pass", 0)
    assert sc.checks == ("fifo", "no_duplicates", "no_loss", "no_errors")
    assert sc.end_time == 6.0


def test_schedule_is_sorted_and_heal_index_follows():
    """An unsorted schedule is sorted by time; heal: N names the step as written in the file."""
    sc = parse_scenario(
        {
            **example(),
            "schedule": [
                {"at": 3.0, "heal": 2},
                {"at": 1.0, "loss": {"link": "A<->B", "p": 0.5}},
                {"at": 0.5, "delay": {"link": "B->C", "ms": 5}},
            ],
        }
    )
    assert [s.kind for s in sc.schedule] == ["delay", "loss", "heal"]
    assert sc.schedule[2].params.target == 0  # the delay step, now first
    assert sc.schedule[1].params.links == (("A", "B"), ("B", "A"))
    assert sc.end_time == 15.0


def test_expect_fail_and_extra_keys():
    """expect: {fail: X} names a listed check; duplicate, reorder and drop options parse."""
    sc = parse_scenario(
        {
            **example(),
            "expect": {"fail": "no_loss"},
            "schedule": [
                {"at": 0, "duplicate": {"link": "*", "p": 0.1}},
                {"at": 0, "reorder": {"link": "A->*", "p": 0.2, "ms": 15}},
                {
                    "at": 1,
                    "drop": {
                        "at": "A",
                        "to": "B",
                        "direction": "down",
                        "type": ["DATA", "SYNC_OK"],
                        "p": 0.5,
                        "after": 2,
                        "seqnos": [5, 9],
                        "until": 4,
                    },
                },
            ],
        }
    )
    assert sc.expect_fail == "no_loss" and sc.expect == {"fail": "no_loss"}
    assert sc.schedule[1].params.links == (("A", "B"), ("A", "C"))
    drop = sc.schedule[2].params
    assert (drop.direction, drop.peer, drop.types, drop.p, drop.after, drop.seqnos, drop.until) == (
        "down",
        "B",
        ("DATA", "SYNC_OK"),
        0.5,
        2,
        (5, 9),
        4.0,
    )
    assert parse_scenario(sc.to_dict()) == sc


# ---- bad input names the field ----------------------------------------------------------------


def _with(path: str, value):
    """The example with one field (a dotted path, [i] for list items) replaced or removed."""
    data = example()
    parts = path.replace("[", ".").replace("]", "").split(".")
    node = data
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last = parts[-1]
    key = int(last) if isinstance(node, list) else last
    if value is _DELETE:
        del node[key]
    else:
        node[key] = value
    return data


_DELETE = object()

BAD = [
    # (field to change, new value, expected message start)
    ("colour", "red", r"^colour: unknown key"),
    ("schedule[2].loss.q", 0.1, r"^schedule\[2\]\.loss\.q: unknown key"),
    ("workload[0].speed", 1, r"^workload\[0\]\.speed: unknown key"),
    ("schedule[0].flood", 1, r"^schedule\[0\]\.flood: unknown key"),
    ("duration", "ten", r"^duration: must be a number"),
    ("nodes", "ABC", r"^nodes: must be a non-empty list"),
    ("workload[0].rate", True, r"^workload\[0\]\.rate: must be a number"),
    ("config", [1], r"^config: must be a mapping"),
    ("workload[0].to", "D", r"^workload\[0\]\.to: unknown node 'D'"),
    ("schedule[5].view.members", ["B", "Z"], r"^schedule\[5\]\.view\.members\[1\]: unknown node 'Z'"),
    ("schedule[6].kill", "Q", r"^schedule\[6\]\.kill: unknown node 'Q'"),
    ("schedule[4].drop.from", "X", r"^schedule\[4\]\.drop\.from: unknown node"),
    ("schedule[1].at", -1, r"^schedule\[1\]\.at: must not be negative"),
    ("schedule[2].loss.p", 1.5, r"^schedule\[2\]\.loss\.p: must be between 0 and 1"),
    ("schedule[2].loss.p", -0.1, r"^schedule\[2\]\.loss\.p: must be between 0 and 1"),
    ("schedule[2].loss.link", "A-C", r"^schedule\[2\]\.loss\.link: 'A-C' is not a link"),
    ("schedule[2].loss.link", "A->", r"^schedule\[2\]\.loss\.link: 'A->' is not a link"),
    ("schedule[2].loss.link", "A->A", r"^schedule\[2\]\.loss\.link: 'A->A' names no link"),
    ("schedule[3].delay.ms", -5, r"^schedule\[3\]\.delay\.ms: must not be negative"),
    ("workload[1].duration", _DELETE, r"^workload\[1\]: needs count or duration"),
    ("workload[0].count", 5000, r"^workload\[0\]\.count: 5000 messages at 200/s"),
    ("workload[0].count", 0, r"^workload\[0\]\.count: must be a positive integer"),
    ("workload[1].duration", 11, r"^workload\[1\]\.duration: the stream ends at 11s"),
    ("protocol", "tcpish", r"^protocol: must be one of"),
    ("transport", "sctp", r"^transport: must be one of udp, tcp"),
    ("checks", ["fifo", "no_such_check"], r"^checks\[1\]: unknown check 'no_such_check'"),
    ("expect", {"fail": "windows"}, r"^expect\.fail: 'windows' is not among the checks"),
    ("expect", "maybe", r"^expect: must be 'pass' or"),
    ("seed", -3, r"^seed: must be a non-negative integer"),
    ("name", _DELETE, r"^name: missing"),
    ("schedule[7].heal", 9, r"^schedule\[7\]\.heal: no schedule step 9"),
    ("schedule[7].heal", 5, r"^schedule\[7\]\.heal: schedule\[5\] is a view step"),
    ("schedule[0].partition", [["A"]], r"^schedule\[0\]\.partition: a two-way partition needs"),
    ("schedule[1].partition", [["A"], ["A", "B"]], r"^schedule\[1\]\.partition\[1\]\[0\]: A is in more"),
    ("schedule[4].drop.seqnos", [9, 1], r"^schedule\[4\]\.drop\.seqnos: must be \[lo, hi\]"),
    ("schedule[4].drop.type", "ack", r"^schedule\[4\]\.drop\.type: 'ack' is not a message type"),
    ("schedule[4].drop.until", 1.0, r"^schedule\[4\]\.drop\.until: 1 is before"),
    ("schedule[5].view.members", ["C"], r"^schedule\[5\]\.view\.members: a view installed at B must"),
    ("schedule[6]", {"at": 4.0, "resume": "B"}, r"^schedule\[6\]\.resume: B is running at 4, not paused"),
    ("schedule[6]", {"at": 4.0}, r"^schedule\[6\]: needs exactly one of"),
    ("schedule[6]", {"at": 4.0, "kill": "B", "pause": "C"}, r"^schedule\[6\]: needs exactly one of"),
    ("nodes", ["A", "B", "A"], r"^nodes\[2\]: 'A' is listed twice"),
    ("nodes", ["A", "B", "all"], r"^nodes\[2\]: 'all' is not a valid node name"),
]


@pytest.mark.parametrize(
    "field, value, message", BAD, ids=[f"{b[0]}={'<removed>' if b[1] is _DELETE else repr(b[1])}" for b in BAD]
)
def test_bad_input_names_the_field(field, value, message):
    """Each kind of bad value raises ScenarioError whose message starts with the field path."""
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(_with(field, value))


def test_dead_node_cannot_get_steps():
    """A view or drop at a node that is dead by then is refused, naming the step."""
    data = example()
    data["schedule"].append({"at": 5.0, "view": {"at": "B", "members": ["B"]}})
    with pytest.raises(ScenarioError, match=r"^schedule\[8\]\.view\.at: B is dead at 5"):
        parse_scenario(data)


def test_not_a_mapping():
    """A file that is not a mapping at the top is refused."""
    with pytest.raises(ScenarioError, match="must be a mapping"):
        parse_scenario([1, 2])


def test_bad_yaml_and_missing_file(tmp_path):
    """Broken YAML is a ScenarioError with its line; a missing file is FileNotFoundError."""
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML at line"):
        load_scenario(path)
    with pytest.raises(FileNotFoundError):
        load_scenario(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: a: b\n", "at line 1, column 8: mapping values are not allowed here"),
        ("nodes: [A, B\n  - C\n", "at line 3, column 1: expected ',' or ']', but got '<stream end>'"),
        ("\tname: x\n", "at line 1, column 1: found character '\\t' that cannot start any token"),
    ],
)
def test_bad_yaml_names_the_place_and_the_problem(tmp_path, text, message):
    """Broken YAML is reported with PyYAML's own words and position (the fast libyaml parser's
    are vaguer, and a line late for an unclosed list)."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value).endswith(f"not valid YAML {message}"), str(err.value)


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_scenarios_load(path):
    """Every scenario in scenarios/ is valid and takes at most about 20 virtual seconds."""
    sc = load_scenario(path)
    assert sc.end_time <= 20.0
    assert sc.name == path.stem


# ---- judging and the run directory ------------------------------------------------------------


def _deliveries(*apps):
    return [make_event(float(i), "B", "unicast3", "deliver", peer="A", app=a, conn_id=1) for i, a in enumerate(apps)]


def test_outcome_follows_expect():
    """expect pass needs every check to pass; expect {fail: X} passes when X failed."""
    events = _deliveries("A:0:2", "A:0:1")
    sc = parse_scenario({**example(), "checks": ["fifo"]})
    verdict = judge(sc, events, seed=1, backend="sim", stats={})
    assert verdict.outcome == "failed" and [c.name for c in verdict.failures] == ["fifo"]

    sc = parse_scenario({**example(), "checks": ["fifo"], "expect": {"fail": "fifo"}})
    verdict = judge(sc, events, seed=1, backend="sim", stats={})
    assert verdict.passed and "bug reproduced" in verdict.summary()
    verdict = judge(sc, _deliveries("A:0:1", "A:0:2"), seed=1, backend="sim", stats={})
    assert verdict.outcome == "failed" and verdict.to_dict()["failed"] == ["fifo"]


def test_run_dirs_are_unique(tmp_path):
    """Two runs started in the same second get different directories."""
    a = make_run_dir(tmp_path, "s", 1, "20240101T000000")
    b = make_run_dir(tmp_path, "s", 1, "20240101T000000")
    assert a.name == "s-1-20240101T000000" and b.name == "s-1-20240101T000000-2"


class _Echo(Layer):
    proto = "echo"

    def __init__(self, name):
        self.name = name

    def up(self, msgs, now):
        from splitbrain.node.layer import Log, Up

        out = [Log(event=make_event(now, self.name, "echo", "deliver", peer=m.src, app=m.app, conn_id=1)) for m in msgs]
        return out + [Up(msgs=msgs)]

    def down(self, msg, now):
        from splitbrain.node.layer import Down, Log

        return [
            Log(event=make_event(now, self.name, "echo", "send", peer=msg.dest, app=msg.app, conn_id=1)),
            Down(msg=msg),
        ]


def _echo_factory(name, protocol, config, rng, incarnation):
    return Stack(name, [_Echo(name)])


def _small(**over):
    data = {
        "name": "small",
        "protocol": "unicast3",
        "nodes": 2,
        "duration": 1,
        "settle": 0.5,
        "workload": [{"from": "A", "to": "B", "rate": 50, "count": 20}],
        "checks": ["fifo", "no_duplicates", "no_loss"],
        "seed": 4,
    }
    data.update(over)
    return parse_scenario(data)


def test_run_scenario_writes_the_run_directory(tmp_path):
    """A run writes scenario.yaml, one events.jsonl per node, timeline.jsonl and verdict.json."""
    sc = _small(schedule=[{"at": 0.1, "loss": {"link": "A->B", "p": 0.0}}])
    out = run_scenario(
        sc, seed=9, out=tmp_path, stamp="20240101T000000", stack_factory=_echo_factory, codec=IdentityCodec()
    )
    d = out.run_dir
    assert d == tmp_path / "small-9-20240101T000000"
    assert load_scenario(d / "scenario.yaml") == parse_scenario({**sc.to_dict(), "seed": 9})
    b_events = [json.loads(line) for line in (d / "nodes" / "B" / "events.jsonl").read_text().splitlines()]
    assert len([e for e in b_events if e["kind"] == "deliver"]) == 20
    assert (d / "nodes" / "A" / "events.jsonl").exists()
    assert json.loads((d / "timeline.jsonl").read_text().splitlines()[0])["fault"] == "loss"
    verdict = json.loads((d / "verdict.json").read_text())
    assert verdict["outcome"] == "passed" and verdict["seed"] == 9 and verdict["backend"] == "sim"
    assert [c["name"] for c in verdict["checks"]] == ["fifo", "no_duplicates", "no_loss", "no_errors"]
    assert verdict["stats"]["msgs_sent"] == 20


def test_failed_run_still_writes_what_exists(tmp_path):
    """When the simulation raises, events so far and an error verdict are written, then it re-raises."""
    sc = _small()
    with pytest.raises(SimulationError):
        run_scenario(sc, out=tmp_path, stack_factory=_echo_factory, codec=IdentityCodec(), max_steps=15)
    (d,) = tmp_path.iterdir()
    verdict = json.loads((d / "verdict.json").read_text())
    assert verdict["outcome"] == "error" and "max_steps=15" in verdict["error"]
    assert (d / "nodes" / "A" / "events.jsonl").read_text()
    assert (d / "scenario.yaml").exists()


# ---- the CLI ----------------------------------------------------------------------------------


def test_cli_bad_scenario_exits_2_naming_the_field(tmp_path, capsys):
    """A scenario with a bad value exits 2 and prints the field path."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_with("schedule[2].loss.p", 2)))
    assert main(["run", str(path), "--out", str(tmp_path)]) == 2
    assert "schedule[2].loss.p: must be between 0 and 1" in capsys.readouterr().err


def test_cli_missing_file_and_bad_flags_exit_2(tmp_path, capsys):
    """A missing file, an unknown backend value and a negative seed all exit 2."""
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "not found" in capsys.readouterr().err
    for argv in (["run", "x.yaml", "--backend", "k8s"], ["run", "x.yaml", "--seed", "-1"], ["frobnicate"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2


def test_cli_node_without_config_is_bad_input(capsys):
    """`splitbrain node` without a configuration is bad input: exit 2."""
    assert main(["node"]) == 2
    assert "name: required" in capsys.readouterr().err


def test_cli_doctor(capsys):
    """doctor reports the Python version and every backend."""
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "python: 3." in out and "backend sim:" in out and "backend docker:" in out


@pytest.mark.live
def test_cli_run_steady(tmp_path, capsys):
    """splitbrain run on the steady scenario passes and prints one summary line with the run dir."""
    code = main(["run", str(SCENARIOS / "steady.yaml"), "--seed", "3", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "steady seed=3:" in out and "PASSED" in out and str(tmp_path) in out
    (d,) = tmp_path.iterdir()
    assert json.loads((d / "verdict.json").read_text())["outcome"] == "passed"


@pytest.mark.live
def test_cli_failed_outcome_exits_1_naming_the_check(tmp_path, capsys):
    """A run whose outcome fails exits 1 and prints the deciding check and its explanation."""
    data = yaml.safe_load((SCENARIOS / "steady.yaml").read_text())
    data.update(expect={"fail": "fifo"}, duration=1, settle=1)
    data["workload"][0]["duration"] = 1
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--out", str(tmp_path / "runs")]) == 1
    out = capsys.readouterr().out
    assert "expected fifo to fail" in out and "  fifo passed:" in out


def test_cli_protocol_config_error_exits_2(tmp_path, capsys):
    """A config key the protocol refuses exits 2 and names config.<key>."""
    data = yaml.safe_load((SCENARIOS / "steady.yaml").read_text())
    data["config"] = {"bogus": 1}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--out", str(tmp_path / "runs")]) == 2
    assert "config.bogus:" in capsys.readouterr().err


# ---- recovery bound and the links a fault cuts ------------------------------------------------


def _minimal(**extra) -> dict:
    return {
        "name": "rb",
        "protocol": "unicast3",
        "nodes": 3,
        "duration": 2,
        "workload": [{"from": "A", "to": "B", "rate": 10, "count": 5}],
        **extra,
    }


def test_recovery_bound_comes_from_the_protocol_timers():
    """No recovery_bound: 8 x xmit_interval + ack_min_interval (+ sync_min_interval for timestamp)."""
    assert parse_scenario(_minimal()).recovery_bound == pytest.approx(4.5)
    assert parse_scenario(
        _minimal(config={"xmit_interval": 0.2, "ack_min_interval": 0.1})
    ).recovery_bound == pytest.approx(1.7)
    assert parse_scenario(_minimal(config={"resync": "timestamp"})).recovery_bound == pytest.approx(6.5)


def test_recovery_bound_can_be_set_and_round_trips():
    """recovery_bound: 2.5 is kept, written to the resolved scenario and read back equal."""
    sc = parse_scenario(_minimal(recovery_bound=2.5))
    assert sc.recovery_bound == 2.5 and parse_scenario(sc.to_dict()) == sc


@pytest.mark.parametrize(
    "extra, path",
    [
        ({"recovery_bound": 0}, "recovery_bound"),
        ({"recovery_bound": "soon"}, "recovery_bound"),
        ({"config": {"xmit_interval": -1}}, "config.xmit_interval"),
        ({"config": {"colour": 1}}, "config.colour"),
    ],
)
def test_bad_recovery_bound_or_protocol_setting_names_the_field(extra, path):
    """A bad bound, or a protocol setting the protocol refuses, is reported at load time by its path."""
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_minimal(**extra))
    assert info.value.path == path


@pytest.mark.parametrize(
    "step, links",
    [
        ({"at": 1, "partition": {"from": "A", "to": "B"}}, ["A->B"]),
        ({"at": 1, "partition": [["A"], ["B", "C"]]}, ["A->B", "A->C", "B->A", "C->A"]),
        ({"at": 1, "loss": {"link": "A->B", "p": 1.0}}, ["A->B"]),
        ({"at": 1, "loss": {"link": "A->B", "p": 0.5}}, []),
        ({"at": 1, "pause": "C"}, ["A->C", "B->C", "C->A", "C->B"]),
        ({"at": 1, "drop": {"at": "B", "from": "A", "type": "SYNC"}}, ["A->B", "B->A"]),
        ({"at": 1, "drop": {"at": "B", "from": "A", "type": "SYNC", "count": 3}}, []),
        ({"at": 1, "delay": {"link": "*", "ms": 50}}, []),
        ({"at": 1, "kill": "A"}, []),
    ],
)
def test_cut_links_names_what_a_fault_cuts(step, links):
    """Partitions, pauses, total loss and unbounded drops cut links; bounded or partial faults do not."""
    sc = parse_scenario(_minimal(schedule=[step]))
    assert sorted(cut_links(sc.schedule[0], sc.nodes)) == links


# ---- the sync step (the SYNC admin operation) -------------------------------------------------


@pytest.mark.parametrize(
    "step, path, words",
    [
        ({"at": 1, "sync": {"at": "B", "peer": "B"}}, "schedule[0].sync.peer", "cannot sync with itself"),
        ({"at": 1, "sync": {"at": "B", "peer": "Z"}}, "schedule[0].sync.peer", "Z"),
        ({"at": 1, "sync": {"at": "B"}}, "schedule[0].sync.peer", "missing"),
        ({"at": 1, "sync": {"at": "B", "peer": "A", "nonce": 3}}, "schedule[0].sync.nonce", ""),
    ],
)
def test_sync_step_errors_name_the_field(step, path, words):
    """A bad sync step names its field."""
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_minimal(schedule=[step]))
    assert info.value.path == path and words in str(info.value)


def test_sync_step_needs_resync_sync_and_a_live_node():
    """The admin operation exists only with resync: sync, and not at a node the schedule killed."""
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_minimal(config={"resync": "timestamp"}, schedule=[{"at": 1, "sync": {"at": "B", "peer": "A"}}]))
    assert info.value.path == "schedule[0].sync" and "config.resync: sync" in str(info.value)
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_minimal(schedule=[{"at": 1, "kill": "B"}, {"at": 2, "sync": {"at": "B", "peer": "A"}}]))
    assert info.value.path == "schedule[1].sync.at"


def test_admin_sync_scenario_resyncs_live_connections_and_loses_nothing():
    """scenarios/admin-sync.yaml in the simulator: four admin syncs, each a SYNC from the step's node
    at its time, everything delivered once and in order, windows in step."""
    sc = load_scenario(SCENARIOS / "admin-sync.yaml")
    result = simulate(sc)
    verdict = judge(sc, result.all_events(), seed=sc.seed, backend="sim", stats=result.stats)
    assert verdict.passed, verdict.summary()
    syncs = [
        (e["node"], e["peer"], e["t"])
        for e in result.all_events()
        if e["kind"] == "sync_tx" and e["phase"] == "sync" and e["t"] in (1.0, 3.05, 4.0)
    ]
    assert {(n, p, t) for n, p, t in syncs} == {("B", "A", 1.0), ("B", "A", 3.05), ("C", "A", 4.0), ("A", "C", 4.0)}
    rekeys = [e for e in result.all_events() if e["kind"] == "conn_state" and e.get("reason") == "sync: re-keyed"]
    assert len(rekeys) >= 4
