"""Garbage floods cannot fill a disk: drop events of bad frames are aggregated per
(reason, source), at most one line a second with a count; counters stay exact."""

from __future__ import annotations

import json
import random
import socket
import time

import pytest

from splitbrain.node import wire
from splitbrain.node.dropagg import DropAggregator
from splitbrain.node.events import expand_runs, validate_event
from splitbrain.node.message import Message
from splitbrain.node.runtime.metrics import render
from splitbrain.node.runtime.testing import NodeGroup, pair_configs, wait_until

# ---- the aggregator, in scripted time ----------------------------------------------------------


def test_first_drop_logs_at_once_the_rest_once_a_second():
    """Drops of one key: the first is a line with count 1, those of the next second one line with
    their count at the window's end, and a quiet window makes the next drop log at once again."""
    agg = DropAggregator("B")
    first = agg.drop(10.0, "malformed", None, 40, reason="malformed frame: short")
    assert first is not None and (first["t"], first["count"], first["bytes"]) == (10.0, 1, 40)
    assert all(agg.drop(10.0 + i / 100, "malformed", None, 10, reason=f"r{i}") is None for i in range(1, 51))
    assert agg.next_deadline() == 11.0
    assert agg.on_timer(10.99) == []
    (line,) = agg.on_timer(11.0)
    assert (line["t"], line["count"], line["bytes"], line["reason"], line["kind"]) == (11.0, 50, 500, "r50", "drop")
    assert agg.next_deadline() is None
    assert agg.on_timer(12.0) == []  # the empty window is forgotten
    assert agg.drop(12.5, "malformed", None, 40, reason="again") is not None


def test_keys_are_reason_and_source():
    """Each (reason, source) has its own window and its own lines."""
    agg = DropAggregator("B")
    logged = [agg.drop(1.0, key, peer, 1, reason=key) for key in ("malformed", "wrong_dest") for peer in (None, "A")]
    assert all(ev is not None for ev in logged)
    for key in ("malformed", "wrong_dest"):
        for peer in (None, "A"):
            assert agg.drop(1.5, key, peer, 1, reason=key) is None
    lines = agg.on_timer(2.0)
    assert sorted((ev["reason"], ev.get("peer", ""), ev["count"]) for ev in lines) == [
        ("malformed", "", 1),
        ("malformed", "A", 1),
        ("wrong_dest", "", 1),
        ("wrong_dest", "A", 1),
    ]


def test_a_late_timer_loses_no_count_and_flush_logs_what_is_pending():
    """Drops after a window's end while its count waits for a late timer are counted on, not
    lost; flush() logs every pending count; the counts always add up."""
    agg = DropAggregator("B")
    total, lines = 0, []
    for i in range(500):  # 5 s of drops every 10 ms, the timer 0.3 s late each time
        now = i / 100
        ev = agg.drop(now, "malformed", None, reason="x")
        total += 1
        if ev is not None:
            lines.append(ev)
        due = agg.next_deadline()
        if due is not None and now >= due + 0.3:
            lines += agg.on_timer(now)
    lines += agg.flush(5.0)
    assert sum(ev["count"] for ev in lines) == total == 500
    assert len(lines) <= 5 + 2
    assert agg.next_deadline() is None and agg.flush(6.0) == []


def test_interval_must_be_positive():
    """A zero interval would log every drop: refused."""
    with pytest.raises(ValueError, match="interval_s"):
        DropAggregator("B", interval_s=0)


# ---- a node under a garbage flood ------------------------------------------------------------

FLOOD_S = 3.0
MAX_DATAGRAMS = 60_000
BURST = 200


def _datagrams(rng: random.Random) -> list[tuple[str, bytes]]:
    """One datagram of each bad kind, with the (reason, source) it is aggregated under."""
    return [
        ("malformed", rng.randbytes(rng.randrange(1, 100))),
        ("wrong_dest/A", wire.encode_frame("A", [Message("A", "X", b"x")])),  # from a peer, not for B
        ("wrong_dest/?", wire.encode_frame("Z", [Message("Z", "X", b"x")])),  # a name B does not know
        ("unknown_src", wire.encode_frame("Q", [Message("Q", "B", b"x")])),
    ]


def read_events(path) -> list[dict]:
    with open(path, encoding="utf-8") as src:
        # Run lines (node/events.py) expanded: the tests count one event per message.
        return expand_runs([json.loads(line) for line in src])


def _key_of(drop: dict) -> str:
    reason = drop["reason"]
    if reason.startswith("malformed"):
        return "malformed"
    if reason.endswith("not for this node"):
        return "wrong_dest/" + drop.get("peer", "?")
    assert reason.startswith("frame from unknown node"), reason
    return "unknown_src"


def _metric(text: str, reason: str) -> float:
    want = f'splitbrain_dropped_frames_total{{direction="in",reason="{reason}"}}'
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.split(" ")[0] == want)


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_udp_garbage_flood_writes_about_one_line_a_second_per_key(tmp_path):
    """Garbage datagrams of four (reason, source) keys for a few seconds: B's drop lines stay
    within keys x (seconds + 2), their counts add up to every datagram sent, per key, and equal
    /metrics' counters; every line has the event schema."""
    _cfg_a, cfg_b = pair_configs(tmp_path, "udp")
    rng = random.Random(16)
    sent: dict[str, int] = {}
    async with NodeGroup([cfg_b]) as (b,):
        addr = (b.bind_address.host, b.bind_address.port)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            t0 = time.monotonic()
            total = 0
            while time.monotonic() - t0 < FLOOD_S and total < MAX_DATAGRAMS:
                for _ in range(BURST // 4):
                    for key, data in _datagrams(rng):
                        sock.sendto(data, addr)
                        sent[key] = sent.get(key, 0) + 1
                total += BURST
                await wait_until(lambda n=total: b.rx_stats.frames_in >= n, 5, what=f"{total} datagrams received")
        metrics = render(b.registry).decode()
    elapsed = time.monotonic() - t0
    assert _metric(metrics, "malformed") == sent["malformed"]
    assert _metric(metrics, "wrong_dest") == sent["wrong_dest/A"] + sent["wrong_dest/?"]
    assert _metric(metrics, "unknown_src") == sent["unknown_src"]
    events = read_events(tmp_path / "B" / "events.jsonl")
    for ev in events:
        validate_event(ev)
    drops = [ev for ev in events if ev["kind"] == "drop"]
    assert all(ev["proto"] == "transport" and ev["count"] >= 1 for ev in drops)
    counted: dict[str, int] = {}
    for ev in drops:
        key = _key_of(ev)
        counted[key] = counted.get(key, 0) + ev["count"]
    assert counted == sent
    assert len(drops) <= len(sent) * (elapsed + 2), (len(drops), elapsed)
    assert sum(sent.values()) == total and total >= 2 * BURST


@pytest.mark.asyncio
async def test_a_stop_flushes_the_pending_count(tmp_path):
    """Drops counted but not yet logged when the node stops are logged before node_stop."""
    _cfg_a, cfg_b = pair_configs(tmp_path, "udp")
    async with NodeGroup([cfg_b]) as (b,):
        for _ in range(7):
            assert b.on_frame(b"garbage") is None
        assert b.drops.next_deadline() is not None  # the flush timer is a second away
    events = read_events(tmp_path / "B" / "events.jsonl")
    drops = [ev for ev in events if ev["kind"] == "drop"]
    assert [ev["count"] for ev in drops] == [1, 6]
    assert events[-1]["kind"] == "node_stop"
