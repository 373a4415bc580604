"""`python -m splitbrain.node` as real processes: a stream between two of them over UDP and TCP, SIGTERM and
SIGKILL, and a fuzzed receive path."""

from __future__ import annotations

import json
import random
import signal
import socket
import time

import pytest

from splitbrain.harness.checks import run_checks
from splitbrain.node import wire
from splitbrain.node.compose import build_stack
from splitbrain.node.events import expand_runs, validate_event
from splitbrain.node.message import Message, app_payload
from splitbrain.node.runtime.testing import NodeProcess, pair_configs, wait_for
from splitbrain.node.unicast3 import PROTO_ID, MsgType, U3Header

TOKEN = "proc-token"
FAST = {"xmit_interval": 0.05, "ack_min_interval": 0.02}


def read_events(path) -> list[dict]:
    # Run lines (node/events.py) expanded: the tests count one event per message.
    return expand_runs([json.loads(line) for line in open(path, encoding="utf-8")])


def stats_of(client, sender: str, stream: int) -> dict:
    return client.get("/delivered")["delivered"].get(sender, {}).get(str(stream), {})


def synced(ca, cb, sender="A", receiver="B") -> bool:
    send = ca.get("/state")["unicast3"]["send"].get(receiver)
    recv = cb.get("/state")["unicast3"]["recv"].get(sender)
    return bool(send and recv and send["conn_id"] == recv["conn_id"] and send["ha"] == send["hs"] == recv["delivered"])


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_two_processes_deliver_and_stop_gracefully(tmp_path, transport):
    """Two daemons: a stream arrives in order exactly once, windows sync, SIGTERM writes final
    windows and node_stop and exits 0; the run passes every harness check."""
    cfg_a, cfg_b = pair_configs(tmp_path, transport, token=TOKEN, protocol_config=FAST)
    a, b = NodeProcess(cfg_a, tmp_path / "run"), NodeProcess(cfg_b, tmp_path / "run")
    try:
        a.start()
        b.start()
        ca, cb = a.client(), b.client()
        assert ca.get("/health")["node"] == "A"
        assert ca.post("/send", {"to": "B", "count": 5000, "rate": 0, "size": 150}) == {"stream": 0, "to": ["B"]}
        cb.post("/send", {"to": "A", "duration": 0.5, "rate": 400})
        stats = wait_for(lambda: (s := stats_of(cb, "A", 0)).get("count") == 5000 and s, 60, what="5000 at B")
        assert stats == {"count": 5000, "first": 1, "last": 5000, "order_violations": 0, "duplicates": 0}
        wait_for(lambda: stats_of(ca, "B", 0).get("count") == 200, 30, what="200 at A")
        wait_for(lambda: synced(ca, cb) and synced(cb, ca, "B", "A"), 20, what="windows in sync")
        assert "splitbrain_frames_total" in ca.get("/metrics")
        assert a.stop() == 0 and b.stop() == 0
    finally:
        a.kill()
        b.kill()
    events = []
    for cfg in (cfg_a, cfg_b):
        evs = read_events(cfg["events"])
        for ev in evs:
            validate_event(ev)
        assert evs[0]["kind"] == "node_start" and evs[-1] == {**evs[-1], "kind": "node_stop", "reason": "stop"}
        assert [ev for ev in evs if ev["kind"] == "window" and ev.get("final")]
        events.extend(evs)
    events.sort(key=lambda ev: ev["t"])
    results = run_checks(events)
    assert all(r.passed for r in results), [r.to_dict() for r in results if not r.passed]


def test_sigkill_writes_nothing_more_but_keeps_what_was_flushed(tmp_path):
    """After SIGKILL the log ends without node_stop, and what was logged >100 ms before is on disk."""
    cfg_a, cfg_b = pair_configs(tmp_path, "udp", token=TOKEN, protocol_config=FAST)
    a, b = NodeProcess(cfg_a, tmp_path / "run"), NodeProcess(cfg_b, tmp_path / "run")
    try:
        a.start()
        b.start()
        a.client().post("/send", {"to": "B", "count": 300, "rate": 0})
        wait_for(lambda: stats_of(b.client(), "A", 0).get("count") == 300, 30, what="300 at B")
        wait_for(
            lambda: sum(1 for ev in read_events(cfg_b["events"]) if ev["kind"] == "deliver") == 300,
            5,
            what="deliver events flushed",
        )
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(10)
        assert b.proc.returncode == -signal.SIGKILL
    finally:
        a.kill()
        b.kill()
    kinds = [ev["kind"] for ev in read_events(cfg_b["events"])]
    assert "node_stop" not in kinds and kinds.count("deliver") == 300


def test_restart_appends_to_the_log_with_a_new_incarnation(tmp_path):
    """A node restarted with incarnation + 1 appends to the same log; the peer resyncs and delivers."""
    cfg_a, cfg_b = pair_configs(tmp_path, "udp", token=TOKEN, protocol_config=FAST)
    a, b = NodeProcess(cfg_a, tmp_path / "run"), NodeProcess(cfg_b, tmp_path / "run")
    b2 = None
    try:
        a.start()
        b.start()
        a.client().post("/send", {"to": "B", "count": 100, "rate": 0, "stream": 0})
        wait_for(lambda: stats_of(b.client(), "A", 0).get("count") == 100, 30, what="100 at B")
        assert b.stop() == 0
        b2 = NodeProcess({**cfg_b, "incarnation": 1}, tmp_path / "run2").start()
        a.client().post("/send", {"to": "B", "count": 100, "rate": 0, "stream": 1})
        stats = wait_for(
            lambda: (s := stats_of(b2.client(), "A", 1)).get("count") == 100 and s, 30, what="stream 1 at the new B"
        )
        assert stats["order_violations"] == 0 and stats["duplicates"] == 0
        assert b2.client().get("/health")["incarnation"] == 1
    finally:
        a.kill()
        b.kill()
        if b2 is not None:
            b2.kill()
    starts = [ev["incarnation"] for ev in read_events(cfg_b["events"]) if ev["kind"] == "node_start"]
    assert starts == [0, 1]


# ---- fuzzing the receive path -----------------------------------------------------------------


def _valid_frames(rng: random.Random) -> list[bytes]:
    """Real frames from A to B: DATA from a stack (another life of A), and every control type."""
    a = build_stack("A", "unicast3", {}, random.Random(rng.random()), incarnation=7)
    frames = []
    for n in range(1, 40):
        a.send(Message("A", "B", app_payload("A", 0, n, rng.randrange(0, 200))), 1.0)
    out, _, _ = a.take()
    frames += wire.split_into_frames("A", out, 1500)
    conn = out[0].headers[PROTO_ID].conn_id
    controls = [
        U3Header(MsgType.ACK, 5, conn),
        U3Header(MsgType.ACK, 10**6, conn + 1),
        U3Header(MsgType.XMIT_REQ, conn_id=conn, ranges=((1, 3), (7, 9))),
        U3Header(MsgType.XMIT_REQ, conn_id=0, ranges=((1, 2**40),)),
        U3Header(MsgType.SYNC, conn_id=conn),
        U3Header(MsgType.SYNC_OK, 4, conn, prev_conn_id=conn - 1),
        U3Header(MsgType.SYNC_ACK, conn_id=conn),
        U3Header(MsgType.CLOSE, conn_id=conn),
        U3Header(MsgType.SEND_FIRST_SEQNO, conn_id=conn, timestamp=3),
    ]
    frames += [wire.encode_frame("A", [Message("A", "B", b"", {PROTO_ID: h})]) for h in controls]
    frames.append(wire.encode_frame("A", [Message("A", "B", b"", {PROTO_ID: h}) for h in controls]))
    return frames


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    choice = rng.randrange(6)
    if choice == 0 and data:
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif choice == 1:
        data = data[: rng.randrange(len(data) + 1)]
    elif choice == 2:
        data += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
    elif choice == 3 and len(data) > 8:
        i = rng.randrange(len(data) - 4)
        data[i : i + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x7f\xff\xff\xff"])
    elif choice == 4:
        # Rename the frame's source or destination (same length) to something unknown.
        data = bytearray(frame.replace(b"\x01A\x01B", b"\x01Q\x01B", 1).replace(b"\x01B\x01A", b"\x01B\x01Z", 1))
    else:
        data = bytearray(rng.randbytes(rng.randrange(0, 300)))
    return bytes(data)


def test_fuzzed_udp_input_is_counted_and_the_node_keeps_delivering(tmp_path):
    """Random bytes and mutated frames hit B's UDP port for a bounded time; B keeps running,
    counts malformed frames, and then delivers a normal stream from A in order, exactly once."""
    cfg_a, cfg_b = pair_configs(tmp_path, "udp", token=TOKEN, protocol_config=FAST)
    cfg_a["incarnation"] = 3
    b = NodeProcess(cfg_b, tmp_path / "run")
    a = NodeProcess(cfg_a, tmp_path / "run")
    rng = random.Random(20240611)
    host, port = cfg_b["bind"].rsplit(":", 1)
    sent = 0
    try:
        b.start()
        cb = b.client()
        frames = _valid_frames(rng)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            deadline = time.monotonic() + 3.0
            while sent < 20_000 and time.monotonic() < deadline:
                frame = rng.choice(frames)
                sock.sendto(_mutate(rng, frame) if rng.random() < 0.9 else frame, (host, int(port)))
                sent += 1
                if sent % 500 == 0:
                    assert b.proc.poll() is None, b.stderr_tail()
                    cb.get("/health")  # pace the fuzzer by the node's own speed
        assert cb.get("/health")["status"] == "ok"
        metrics = cb.get("/metrics")
        malformed = next(
            float(line.split()[-1])
            for line in metrics.splitlines()
            if line.startswith("splitbrain_malformed_frames_total")
        )
        assert malformed > 100, metrics
        a.start()
        a.client().post("/send", {"to": "B", "count": 2000, "rate": 0, "stream": 77})
        stats = wait_for(
            lambda: (s := stats_of(cb, "A", 77)).get("count") == 2000 and s,
            90,  # generous: timed out once at 30 s with the machine's load at 14
            what="stream 77 delivered after the fuzzing",
        )
        assert stats == {"count": 2000, "first": 1, "last": 2000, "order_violations": 0, "duplicates": 0}
        assert b.stop() == 0, b.stderr_tail()
    finally:
        a.kill()
        b.kill()
    drops = [ev for ev in read_events(cfg_b["events"]) if ev["kind"] == "drop" and ev["proto"] == "transport"]
    assert drops and all(ev["reason"] for ev in drops)
    for ev in read_events(cfg_b["events"]):
        validate_event(ev)
    assert sent >= 1000
