"""Message objects vs the real wire codec in the simulator, and the fast event-log writer.

The simulator passes message objects between nodes unless a scenario says `wire: true` (or the CLI
gets `--wire`). Every shipped scenario runs here once through node.wire, so the wire format stays
covered end to end, and must give the same verdict and the very same events as with objects.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from splitbrain.harness.cli import main
from splitbrain.harness.eventlog import encode_lines, read_run, write_events
from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import load_scenario, parse_scenario
from splitbrain.harness.sim import Simulation
from splitbrain.harness.sim.codec import ObjectCodec
from splitbrain.node import wire
from splitbrain.node.message import Message
from splitbrain.node.unicast3 import PROTO_ID, MsgType, U3Header

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


def _json_lines(events: list[dict]) -> bytes:
    return "".join(json.dumps(ev, separators=(",", ":")) + "\n" for ev in events).encode()


def verdict_of(outcome) -> tuple:
    return outcome.verdict.outcome, tuple((c.name, c.passed, c.vacuous) for c in outcome.verdict.checks)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_through_the_wire_codec_gives_the_same_run(path, tmp_path):
    """Each scenarios/*.yaml on sim with `wire: true`: the expected outcome, the same verdict and
    byte-identical event logs as with message objects."""
    scenario = load_scenario(path)
    objects = run_scenario(scenario, backend="sim", out=tmp_path / "objects")
    wired = run_scenario(dataclasses.replace(scenario, wire=True), backend="sim", out=tmp_path / "wire")
    assert wired.result.stats["wire"] is True and objects.result.stats["wire"] is False
    assert wired.result.stats["bytes_sent"] > 0
    assert verdict_of(wired) == verdict_of(objects)
    assert wired.verdict.outcome == "passed", f"{path.name}: {wired.verdict.summary()}"
    for name in scenario.nodes:
        a = (objects.run_dir / "nodes" / name / "events.jsonl").read_bytes()
        b = (wired.run_dir / "nodes" / name / "events.jsonl").read_bytes()
        assert a == b, f"{path.name}: node {name}'s log differs between objects and wire"


def test_wire_key_and_flag(tmp_path, capsys):
    """`wire: true` parses, round-trips through the run directory's scenario.yaml, and --wire sets it."""
    data = {
        "name": "w",
        "protocol": "unicast3",
        "nodes": ["A", "B"],
        "workload": [{"from": "A", "to": "B", "rate": 100, "count": 50}],
        "duration": 1,
        "wire": True,
    }
    scenario = parse_scenario(data)
    assert scenario.wire is True and scenario.to_dict()["wire"] is True
    assert parse_scenario(scenario.to_dict()) == scenario
    assert "wire" not in parse_scenario({**data, "wire": False}).to_dict()
    path = tmp_path / "w.yaml"
    path.write_text(json.dumps({**data, "wire": False}))
    assert main(["run", str(path), "--backend", "sim", "--wire", "--out", str(tmp_path / "runs")]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert load_scenario(run_dir / "scenario.yaml").wire is True
    assert json.loads((run_dir / "verdict.json").read_text())["stats"]["wire"] is True
    assert main(["run", str(path), "--backend", "local", "--wire"]) == 2
    assert "--wire is for --backend sim only" in capsys.readouterr().err


def test_a_bad_wire_value_names_the_field():
    """wire: must be a boolean."""
    with pytest.raises(Exception, match="wire"):
        parse_scenario(
            {"name": "w", "protocol": "unicast3", "nodes": ["A", "B"], "workload": [], "duration": 1, "wire": "yes"}
        )


def test_object_frames_split_where_the_wire_would():
    """A frame over max_frame_bytes splits into the same message groups as node.wire's frames."""
    msgs = [
        Message("A", "B", bytes(100 + 37 * (i % 5)), {PROTO_ID: U3Header(MsgType.DATA, i + 1, 7, i == 0)})
        for i in range(300)
    ]
    for limit in (500, 1_000, 4_096, 20_000):
        groups = ObjectCodec.split_groups("A", msgs, limit)
        frames = wire.split_into_frames("A", msgs, limit)
        assert groups is not None and len(groups) == len(frames) > 1
        for group, frame in zip(groups, frames, strict=True):
            _, decoded = wire.decode_frame(frame)
            assert decoded == group
    assert ObjectCodec.split_groups("A", msgs[:3], 10_000) is None
    assert len(wire.encode_frame("A", msgs[:3])) <= 10_000


def test_receiver_never_shares_a_message_object_with_the_sender():
    """ObjectCodec hands over new Message objects (a multicast layer readdresses what it receives);
    they share the sender's header dict, which no layer changes on receipt (test_fast_paths.py)."""
    sent = [Message("A", "B", b"x", {PROTO_ID: U3Header(MsgType.DATA, 1, 7, True)})]
    src, got = ObjectCodec.decode_frame(ObjectCodec.encode_frame("A", sent))
    assert src == "A" and got == sent
    assert got[0] is not sent[0] and got[0].headers is sent[0].headers
    got[0].dest = "*"
    assert sent[0].dest == "B"


def test_same_seed_same_run_with_and_without_wire_under_chaos():
    """A lossy, duplicating, reordering 3-node run: identical events with objects and with the codec."""
    data = {
        "name": "chaos",
        "protocol": "unicast3",
        "nodes": ["A", "B", "C"],
        "workload": [{"from": "all", "to": "all", "rate": 300, "duration": 4, "size": 400}],
        "schedule": [
            {"at": 0, "loss": {"link": "*", "p": 0.2}},
            {"at": 0, "duplicate": {"link": "*", "p": 0.05}},
            {"at": 0, "reorder": {"link": "*", "p": 0.1, "ms": 20}},
            {"at": 1, "partition": {"from": "A", "to": "B"}},
            {"at": 3, "heal": "all"},
        ],
        "duration": 4,
        "seed": 5,
    }
    scenario = parse_scenario(data)
    # A small frame limit makes the retransmission bursts after the heal split into several frames.
    objects = Simulation(scenario, max_frame_bytes=3_000).run()
    wired = Simulation(scenario, max_frame_bytes=3_000, wire=True).run()
    assert objects.stats["frames_split"] > 0
    assert objects.stats["frames_split"] == wired.stats["frames_split"]
    assert objects.events == wired.events


def test_writer_is_byte_identical_to_json_dumps_on_a_real_run(tmp_path):
    """harness.eventlog writes exactly json.dumps(ev, separators=(",", ":")) per line: a real run's
    logs, re-encoded both ways."""
    result = Simulation(load_scenario(ROOT / "scenarios" / "one-way-split-resync.yaml")).run()
    for name, events in result.events.items():
        path = tmp_path / f"{name}.jsonl"
        write_events(path, events)
        assert path.read_bytes() == _json_lines(events)
    write_events(tmp_path / "nodes" / "A" / "events.jsonl", result.events["A"])
    assert read_run(tmp_path) == sorted(result.events["A"], key=lambda ev: ev["t"])


@pytest.mark.parametrize(
    "events",
    [
        [],
        [{"t": 1e-5, "node": "é"}],
        [{"t": 0.5, "ranges": [[1, 2]], "first": True, "peer": None}],
        [{"t": float("nan")}, {"t": float("inf")}],
        [{"t": 3.0, "node": "node-1", "detail": "x 1e-3 y"}],
        [{"t": 7e-7, "node": "A"}, {"t": 0.25, "node": "B"}],
        [{"t": 1.0, "reason": "\x7f\u2028"}],
        [{"t": 1.0, "big": 2**70}, {"t": 2.0, "seqno": 2**63}],
        [{"t": 2.0, 1: 2}],
        [{"t": 1e16, "x": 1e-4, "y": 9.99e-5, "z": -0.0, "w": 123456.789}],
    ],
)
def test_writer_edge_cases(events):
    """Values orjson writes differently from json (small floats, NaN, non-ASCII, huge ints, int
    keys) still come out as json writes them."""
    assert encode_lines(events) == _json_lines(events)


def test_writer_still_refuses_what_json_refuses():
    """A value json cannot write raises TypeError, as before."""
    with pytest.raises(TypeError):
        encode_lines([{"t": 1.0, "x": object()}])


def test_writer_in_chunks_keeps_every_line(tmp_path):
    """A log longer than one chunk, with lines orjson writes differently here and there: the file
    is still json.dumps's bytes, line for line."""
    events = [{"t": i / 1000, "node": "A", "kind": "send", "seqno": i} for i in range(10_000)]
    events[4095]["t"] = 1e-6
    events[4096]["detail"] = "é"
    events[9_999]["x"] = None
    write_events(tmp_path / "e.jsonl", events)
    assert (tmp_path / "e.jsonl").read_bytes() == _json_lines(events) == encode_lines(iter(events))
