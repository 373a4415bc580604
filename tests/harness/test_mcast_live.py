"""MCAST on real processes (local backend): multicast over UDP under loss, and the flow control
with a cut-off receiver (senders block and unblock), judged by the checkers."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from splitbrain.harness.backends.local import LocalBackend
from splitbrain.harness.cli import main
from splitbrain.harness.scenario import load_scenario
from splitbrain.harness.sim.simulator import simulate
from splitbrain.node.events import expand_runs

ROOT = Path(__file__).resolve().parents[2]
local_only = pytest.mark.skipif(not LocalBackend().check()[0], reason="local backend unavailable here")


def events_of(run_dir: Path) -> list[dict]:
    out = []
    for path in sorted((run_dir / "nodes").glob("*/events.jsonl")):
        # Run lines (node/events.py) expanded: the tests count one event per message.
        out.extend(expand_runs([json.loads(line) for line in path.read_text().splitlines()]))
    return out


@pytest.mark.parametrize("scenario", ["mcast-loss", "mcast-flow-control"])
def test_scenarios_pass_in_the_simulator(scenario):
    """Both MCAST scenarios pass in the simulator; the flow-control one blocks and unblocks A and B."""
    sc = load_scenario(ROOT / "scenarios" / f"{scenario}.yaml")
    result = simulate(sc)
    kinds = Counter((e["node"], e["kind"]) for evs in result.events.values() for e in evs)
    if scenario == "mcast-flow-control":
        for name in ("A", "B"):
            assert kinds[(name, "block")] >= 1 and kinds[(name, "unblock")] == kinds[(name, "block")]
    else:
        assert sum(n for (_, k), n in kinds.items() if k == "xmit_req_tx") > 0


@local_only
@pytest.mark.parametrize("scenario", ["mcast-loss", "mcast-flow-control"])
def test_scenarios_pass_on_local(scenario, tmp_path, capsys):
    """The same scenarios on real processes (UDP, in-process faults): every check passes; under loss
    the gaps are repaired by XMIT-REQ; with C cut off A and B block and unblock."""
    out = tmp_path / "runs"
    code = main(["run", str(ROOT / "scenarios" / f"{scenario}.yaml"), "--out", str(out), "--no-progress"])
    text = capsys.readouterr().out
    assert code == 0, text
    (run_dir,) = out.iterdir()
    events = events_of(run_dir)
    counts = Counter((e["proto"], e["kind"]) for e in events)
    sends = counts[("mcast", "send")]
    assert sends > 0 and counts[("mcast", "deliver")] == 3 * sends
    if scenario == "mcast-loss":
        assert sends == 3 * 800
        assert counts[("mcast", "xmit_req_tx")] + counts[("mcast", "retransmit")] > 0
    else:
        for name in ("A", "B"):
            mine = Counter(e["kind"] for e in events if e["node"] == name)
            assert mine["block"] >= 1 and mine["unblock"] == mine["block"], mine


@pytest.mark.splitbrain_backend("sim", "local")
def test_plugin_senders_block_on_a_cut_off_member_and_unblock_at_the_heal(splitbrain_cluster, faults):
    """The pytest plugin with protocol mcast: A multicasts flat out with capacity 300 while C is cut off
    from A both ways; A blocks (a `block` event, its window full), the heal unblocks it, nothing is lost."""
    cluster = splitbrain_cluster(nodes=3, protocol="mcast", config={"xmit_interval": 0.2, "capacity": 300})
    faults.partition("A", "C", one_way=False)
    cluster.send("A", "*", rate=400, duration=3)

    def blocked():
        state = cluster.state("A")
        return state if any(b["reason"].startswith("blocked") for b in state["busy"]) else None

    state = cluster.eventually(blocked, timeout=30, what="A blocked")
    # Its window is full: 299 unacked (S - low >= capacity blocks the 300th), nothing more held.
    assert [w["pending"] for w in state["windows"] if w["side"] == "send"] == [299, 299]
    faults.heal()
    cluster.sleep(3)  # the stream's end (slots that found A blocked are not sent)
    cluster.wait_settled()
    cluster.stop()
    cluster.assert_checks("fifo", "no_duplicates", "no_loss")
    kinds = [e["kind"] for e in cluster.events() if e["node"] == "A" and e["kind"] in ("block", "unblock")]
    assert kinds and kinds[0] == "block" and kinds[-1] == "unblock"


RESTART_D_AT = 2.0
JOIN = {  # MCAST; the NAKACK2 run drops capacity
    "name": "mcast-join-local",
    "protocol": "mcast",
    "membership": "gms",
    "transport": "udp",
    "nodes": ["A", "B", "C", "D"],
    # fd_timeout 5 s: no false suspicion under this loss on 2 busy cores; the run is about the join.
    "config": {"xmit_interval": 0.2, "capacity": 512, "fd_timeout": 5.0},
    "workload": [
        {"from": "A", "to": "all", "rate": 100, "duration": 6},
        {"from": "B", "to": "all", "rate": 100, "duration": 6},
        {"from": "C", "to": "all", "rate": 100, "duration": 6},
        {"from": "D", "to": "all", "rate": 50, "duration": 4, "start": 2.0},
    ],
    "schedule": [
        {"at": 0.0, "kill": "D"},
        {"at": 0.5, "loss": {"link": "*", "p": 0.1}},
        {"at": RESTART_D_AT, "restart": "D"},
        {"at": 5.5, "heal": 1},
    ],
    "duration": 6,
    "settle": 8,
    "checks": ["fifo", "no_duplicates", "no_loss", "views_agree"],
    "expect": "pass",
    "seed": 13,
}


@local_only
@pytest.mark.parametrize("protocol", ["mcast", "nakack2"])
def test_a_joiner_on_local_processes_starts_at_the_join_digest(protocol, tmp_path, capsys):
    """MCAST and NAKACK2: D's process starts at 2 s and joins A, B, C, which multicast 100/s each
    under 10 % loss: D's windows start at its join digest, it delivers every multicast its senders
    sent once their view listed D, its own multicasts (held until its view) reach everyone, and
    every check passes."""
    import yaml

    path = tmp_path / "join.yaml"
    scenario = {**JOIN, "name": f"{protocol}-join-local", "protocol": protocol, "config": dict(JOIN["config"])}
    if protocol == "nakack2":
        del scenario["config"]["capacity"]
    path.write_text(yaml.safe_dump(scenario))
    out = tmp_path / "runs"
    code = main(["run", str(path), "--out", str(out), "--no-progress"])
    text = capsys.readouterr().out
    assert code == 0, text
    (run_dir,) = out.iterdir()
    assert_joiner_got_what_it_was_owed(run_dir, protocol)


def assert_joiner_got_what_it_was_owed(run_dir: Path, protocol: str) -> None:
    """The join test's assertions on D's deliveries and on its own multicasts, from the run's logs."""
    events = sorted(events_of(run_dir), key=lambda e: e["t"])
    # D's life after the restart: on busy cores the kill "at 0 s" may land after D's first life joined.
    restarted = max(e["t"] for e in events if e["node"] == "D" and e["kind"] == "node_start")
    join = next(
        e for e in events if e["node"] == "D" and e["kind"] == "view" and e["proto"] == "gms" and e["t"] >= restarted
    )
    assert join["reason"] == "join"
    digest = {item.rsplit(":", 1)[0]: int(item.rsplit(":", 1)[1]) for item in join["digest"]}
    # The digest names the senders the coordinator held tables for when D joined: on busy cores
    # A, B and C may not all have formed one view by then (the others join D's view later, and
    # D is owed their multicasts from the view that lists it, checked below).
    assert "A" in digest and set(digest) <= {"A", "B", "C"}, digest
    for sender in ("A", "B", "C"):
        got = [
            e["seqno"]
            for e in events
            if e["node"] == "D"
            and e["kind"] == "deliver"
            and e["proto"] == protocol
            and e["peer"] == sender
            and e["t"] >= restarted
        ]
        assert got == sorted(set(got)) and got[0] >= digest.get(sender, 0) + 1, sender
        listed = min(
            e["t"]
            for e in events
            if e["node"] == sender
            and e["kind"] == "view"
            and e["proto"] == protocol
            and "D" in e["members"]
            and e["t"] >= restarted  # a view of D's first life may list it
        )
        sends = [e for e in events if e["node"] == sender and e["kind"] == "send" and e["proto"] == protocol]
        owed = {e["app"] for e in sends if e["t"] >= listed}
        # A gap in D's deliveries is only what the sender multicast to its view without D (a sender
        # that installs the join view late purges those once the others acked, and D skips them).
        gaps = set(range(digest.get(sender, 0) + 1, got[-1] + 1)) - set(got)
        assert all(e["t"] < listed for e in sends if e["seqno"] in gaps), (sender, sorted(gaps)[:5])
        got_apps = {
            e["app"]
            for e in events
            if e["node"] == "D" and e["kind"] == "deliver" and e.get("peer") == sender and "app" in e
        }
        assert owed and owed <= got_apps, sender
    d_sends = [
        e for e in events if e["node"] == "D" and e["kind"] == "send" and e["proto"] == protocol and e["t"] >= restarted
    ]
    assert d_sends and min(e["t"] for e in d_sends) >= join["t"]
    for node in ("A", "B", "C"):
        got = [
            e["app"]
            for e in events
            if e["node"] == node
            and e["kind"] == "deliver"
            and e["proto"] == protocol
            and e.get("peer") == "D"
            and e["t"] >= restarted
        ]
        assert got == [e["app"] for e in d_sends], node
