"""NAKACK2 measured in one process, deterministic: messages on the wire per delivered multicast
(simulator, with and without retransmission, with and without loss) and the Python heap held by
the retransmit table with STABLE every second and with STABLE effectively off (tracemalloc).

Run: .venv/bin/python benchmarks/bench_nakack2_sim.py [--json FILE]
"""

from __future__ import annotations

import random
import sys
import tracemalloc
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchresults import recorded

from splitbrain.harness.scenario import parse_scenario
from splitbrain.harness.sim.simulator import simulate
from splitbrain.node import wire
from splitbrain.node.compose import build_stack
from splitbrain.node.layer import ViewChange
from splitbrain.node.message import MCAST_DEST, Message, app_payload
from splitbrain.node.nakack2.protocol import Nakack2


def wire_row(transport: str, xmit: float, loss: float, n: int) -> str:
    sched = [{"at": 0.5, "loss": {"link": "*", "p": loss}}, {"at": 10, "heal": 0}] if loss else []
    sc = parse_scenario(
        {
            "name": "w",
            "protocol": "nakack2",
            "transport": transport,
            "nodes": n,
            "config": {"xmit_interval": xmit, "stable_interval": 1.0, "resend_last_seqno_max_times": 3},
            "workload": [{"from": "all", "to": "all", "rate": 100, "duration": 10}],
            "schedule": sched,
            "duration": 10,
            "settle": 6,
            "seed": 4,
        }
    )
    r = simulate(sc)
    c: Counter = Counter(e["kind"] for evs in r.events.values() for e in evs if e["proto"] == "nakack2")
    d = c["deliver"]
    wire_msgs = (
        c["send"] * (n - 1) + c["retransmit"] + c["xmit_req_tx"] + (c["stable_tx"] + c["highest_seqno_tx"]) * (n - 1)
    )
    return (
        f"| {transport}, xmit_interval {xmit:g}, loss {loss:g}, {n} members | {d} | {wire_msgs / d:.4f} | "
        f"{r.stats['frames_sent'] / d:.4f} | {c['retransmit']} | {c['xmit_req_tx']} | {c['highest_seqno_tx']} | "
        f"{c['stable_tx']} |"
    )


def heap_row(stable: float, names=("A", "B", "C"), rate: int = 500, seconds: int = 8) -> str:
    config = {"xmit_interval": 1.0, "stable_interval": stable, "stable_max_bytes": 10**9}
    stacks = {n: build_stack(n, "nakack2", config, random.Random(1)) for n in names}
    for n in names:
        stacks[n].command(ViewChange(members=names, view_id=1), 0.0)

    def flush(n: str, now: float) -> None:
        out, _app, _ev = stacks[n].take()
        by: dict[str, list[Message]] = {}
        for m in out:
            by.setdefault(m.dest, []).append(m)
        for dest, msgs in by.items():
            _src, got = wire.decode_frame(wire.encode_frame(n, msgs))
            stacks[dest].receive(got, now)

    tracemalloc.start()
    base = tracemalloc.take_snapshot()
    now, rows, per_tick = 0.0, [], rate // 100
    for step in range(seconds * 100):
        for n in names:
            if (stacks[n].next_deadline() or 1e9) <= now:
                stacks[n].on_timer(now)
            first = step * per_tick + 1
            batch = [Message(n, MCAST_DEST, app_payload(n, 0, k, 100)) for k in range(first, first + per_tick)]
            stacks[n].send_batch(batch, now)
        for n in names:
            flush(n, now)
        for n in names:
            flush(n, now)
        now += 0.01
        if step % 100 == 99:
            rows.append(max(stacks[n].layer(Nakack2).retransmit_table_size() for n in names))
    snap = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in snap.compare_to(base, "filename"))
    held = sum(stacks[n].layer(Nakack2).retransmit_table_size() for n in names)
    return (
        f"| STABLE every {stable:g} s | {rate}/s per member, 100 B | {' '.join(map(str, rows))} | {held} | "
        f"{grown / 1e6:.2f} MB ({grown / max(held, 1):.0f} B per held message) |"
    )


@recorded(
    "bench_nakack2_sim",
    goals={
        "NAKACK2 messages on the wire": "without loss, one copy per other member ((N - 1) / N messages per "
        "delivery) and little else",
        "NAKACK2 retransmit table": "STABLE keeps the retransmit table bounded; without it the table grows "
        "with the load",
    },
)
def main(argv: list[str] | None = None) -> int:
    print("# NAKACK2 messages on the wire per delivered multicast (simulator)\n")
    print(
        "| case | deliveries | NAKACK2 messages sent per delivery | frames per delivery | retransmits "
        "| XMIT-REQs | HIGHEST_SEQNO | STABLE |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in (3, 5):
        for transport, xmit, loss in (("tcp", 0, 0), ("udp", 1.0, 0), ("udp", 1.0, 0.05), ("udp", 0.2, 0.2)):
            print(wire_row(transport, xmit, loss, n), flush=True)
    print("\n# NAKACK2 retransmit table with and without STABLE (tracemalloc)\n")
    print("| STABLE | load (3 members) | held at one member, each second | held, all members | heap grown |")
    print("| --- | --- | --- | --- | --- |")
    for stable in (1.0, 1000.0):
        print(heap_row(stable), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
