"""Speed of the protocol engine against a CPython ceiling measured in the same run.

Every figure is reported next to a ceiling: a stripped loop in plain CPython that does the same
work with nothing else, so the ratio (ours / ceiling) says how much the engine's structure costs,
whatever the machine's load. Sections:

1. Simulator, the 5x60 case (benchmarks/scenarios/speed-5x60.yaml: 5 nodes, 10 links x 200 msgs/s,
   10 % loss, 60 s + 5 s settle; 120 k messages, 258 k events):
   - the whole `splitbrain run --backend sim` command, in a fresh process (wall);
   - its parts in this process: the simulation loop (Simulation.run, invariants on as the CLI
     runs it, and off), writing the event logs, the checks (harness.verdict.judge), and the wall
     time of merging, writing and judging on two processes as the CLI does (harness.afterrun);
   - the ceiling loop: the same links, loss draws, heap-driven virtual time, dict windows,
     in-order delivery, ACK (ack_min_interval 0.5 s) and XMIT-REQ/resend-highest rounds every
     0.5 s per node, the same event dicts, and nothing else (`ceiling_sim`);
   - the same loop with the real wire codec (`wire: true`).
   The multicast case (section "mcast", benchmarks/scenarios/speed-nakack2-5x60.yaml: NAKACK2 over
   UNICAST3, 5 members multicasting 100 msgs/s each, 10 % loss, 60 s + 5 s settle; 30 k
   multicasts, 199 k events) is timed the same way next to a ceiling of its own (`ceiling_mcast`).
2. The node's receive and send paths in-process on real frames (341 messages of 100 B per frame,
   UNICAST3 over the fault layer, as the daemon bundles them, GC off as in the daemon): a connected
   receiver's Stack fed decoded frames, and a sender's Stack with the bundler's encoding, vs a
   stripped loop consuming or producing the same frames (`ceiling_frames_*`); next to each, what
   the daemon's event log then spends formatting those events as lines. CPU microseconds per
   message. 2b: the same for a NAKACK2 member receiving another member's multicasts (3 members).
3. A campaign: N seeds of the 5x60 case (runs only: Simulation.run, nothing written; with
   --campaign-judged the checks too), on 2 worker processes; runs per minute, CPU s per run.

Run: .venv/bin/python benchmarks/bench_speed.py [--quick] [--repeat N] [--campaign N] [--sections ...]
     [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import heapq
import os
import random
import resource
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# BENCH_TREE=/path/to/another/checkout measures that tree's code (a "before") with this script.
TREE = Path(os.environ.get("BENCH_TREE", ROOT)).resolve()
sys.path.insert(0, str(TREE))

from benchresults import recorded  # noqa: E402

from splitbrain.harness.eventlog import write_events  # noqa: E402
from splitbrain.harness.scenario import Scenario, load_scenario  # noqa: E402
from splitbrain.harness.sim import Simulation  # noqa: E402
from splitbrain.harness.slots import planned_count  # noqa: E402
from splitbrain.harness.verdict import judge  # noqa: E402
from splitbrain.node import wire  # noqa: E402
from splitbrain.node.compose import build_stack  # noqa: E402
from splitbrain.node.layer import ViewChange  # noqa: E402
from splitbrain.node.message import MCAST_DEST, Message, app_payload  # noqa: E402
from splitbrain.node.runtime.eventlog import EventLog  # noqa: E402
from splitbrain.node.stack import Stack  # noqa: E402

SCENARIO = ROOT / "benchmarks" / "scenarios" / "speed-5x60.yaml"
MCAST_SCENARIO = ROOT / "benchmarks" / "scenarios" / "speed-nakack2-5x60.yaml"
FRAME_MSGS = 341  # messages of 100 B in one bundled 64 KB datagram
GOAL_COMMAND_S = 3.0
GOAL_LOOP_RATIO = 3.0


# ---- 1. the simulator -------------------------------------------------------------------------


def ceiling_sim(scenario: Scenario, seed: int = 1) -> tuple[float, float, int]:
    """The 5x60 case's work in a stripped loop: returns (wall s, CPU s, events). Same shape as the real
    run: per message a send event, a frame on a lossy link (0.5 ms), a receive into a dict window,
    in-order delivery with a deliver event; per node every 0.5 s an ACK per receive window, a
    resend of the highest message when the send window did not move, an XMIT-REQ for old gaps."""
    t0, c0 = time.perf_counter(), time.process_time()
    rng = random.Random(seed)
    loss = 0.1
    delay = 0.0005
    xmit = 0.5
    end = scenario.end_time
    heap: list = []
    seq = 0
    events: dict[str, list[dict]] = {n: [] for n in scenario.nodes}
    # send windows: (src, dst) -> [next seqno, highest acked, {seqno: payload}, previous marks]
    send: dict[tuple[str, str], list] = {}
    # receive windows: (src, dst) -> [delivered, {seqno: payload}, previous gaps]
    recv: dict[tuple[str, str], list] = {}
    limits = {(s.index, s.src): planned_count(s, scenario.duration) for s in scenario.streams}
    for s in scenario.streams:
        heapq.heappush(heap, (s.start, seq, 0, s, 0))
        seq += 1
        send[(s.src, s.dest)] = [1, 0, {}, None]
        recv[(s.src, s.dest)] = [0, {}, None]
    for name in scenario.nodes:
        heapq.heappush(heap, (xmit, seq, 2, name, None))
        seq += 1
    while heap and heap[0][0] <= end:
        t, _, kind, a, b = heapq.heappop(heap)
        if kind == 0:  # a stream tick: one message
            s, n = a, b + 1
            w = send[(s.src, s.dest)]
            seqno = w[0]
            w[0] = seqno + 1
            payload = app_payload(s.src, s.index, n, s.size)
            w[2][seqno] = payload
            app = f"{s.src}:{s.index}:{n}"
            events[s.src].append(
                {"v": 1, "t": t, "node": s.src, "proto": "unicast3", "kind": "send", "peer": s.dest, "seqno": seqno,
                 "conn_id": 1, "bytes": len(payload), "app": app}
            )  # fmt: skip
            if rng.random() >= loss:
                heapq.heappush(heap, (t + delay, seq, 1, (s.src, s.dest), (seqno, payload, app)))
                seq += 1
            if n < limits[s.index, s.src]:
                heapq.heappush(heap, (s.start + n / s.rate, seq, 0, s, n))
                seq += 1
        elif kind == 1:  # DATA arrives
            src, dst = a
            seqno, payload, app = b
            r = recv[a]
            if seqno <= r[0] or seqno in r[1]:
                continue
            r[1][seqno] = (payload, app)
            held = r[1]
            nxt = r[0] + 1
            evs = events[dst]
            while nxt in held:
                payload, app = held.pop(nxt)
                evs.append(
                    {"v": 1, "t": t, "node": dst, "proto": "unicast3", "kind": "deliver", "peer": src,
                     "seqno": nxt, "conn_id": 1, "bytes": len(payload), "app": app}
                )  # fmt: skip
                nxt += 1
            r[0] = nxt - 1
        elif kind == 3:  # an ACK arrives at the sender
            w = send[a]
            upto = b
            for sq in range(w[1] + 1, upto + 1):
                w[2].pop(sq, None)
            w[1] = max(w[1], upto)
            events[a[0]].append({"v": 1, "t": t, "node": a[0], "proto": "unicast3", "kind": "ack_rx", "peer": a[1],
                                 "seqno": upto, "conn_id": 1})  # fmt: skip
        else:  # the retransmit task of node a
            node = a
            for (src, dst), r in recv.items():
                if dst != node:
                    continue
                events[node].append({"v": 1, "t": t, "node": node, "proto": "unicast3", "kind": "ack_tx", "peer": src,
                                     "seqno": r[0], "conn_id": 1, "bytes": 22})  # fmt: skip
                if rng.random() >= loss:
                    heapq.heappush(heap, (t + delay, seq, 3, (src, dst), r[0]))
                    seq += 1
                held = r[1]
                gaps = None
                if held:
                    top = max(held)
                    gaps = [sq for sq in range(r[0] + 1, top) if sq not in held]
                if gaps and r[2]:
                    ask = [sq for sq in gaps if sq in r[2]]
                    if ask:
                        events[node].append({"v": 1, "t": t, "node": node, "proto": "unicast3",
                                             "kind": "xmit_req_tx", "peer": src, "conn_id": 1,
                                             "ranges": [[ask[0], ask[-1]]], "count": len(ask)})  # fmt: skip
                        w = send[(src, dst)]
                        for sq in ask:
                            payload = w[2].get(sq)
                            if payload is not None and rng.random() >= loss:
                                app = f"{src}:{sq}"
                                heapq.heappush(heap, (t + 2 * delay, seq, 1, (src, dst), (sq, payload, app)))
                                seq += 1
                r[2] = set(gaps) if gaps else None
            for (src, dst), w in send.items():
                if src != node:
                    continue
                marks = (w[1], w[0] - 1)
                if w[1] < w[0] - 1 and w[3] == marks:
                    hs = w[0] - 1
                    events[node].append({"v": 1, "t": t, "node": node, "proto": "unicast3", "kind": "retransmit",
                                         "peer": dst, "seqno": hs, "conn_id": 1, "bytes": 100})  # fmt: skip
                    if rng.random() >= loss:
                        heapq.heappush(heap, (t + delay, seq, 1, (src, dst), (hs, w[2][hs], f"{src}:{hs}")))
                        seq += 1
                w[3] = marks
            heapq.heappush(heap, (t + xmit, seq, 2, node, None))
            seq += 1
    return time.perf_counter() - t0, time.process_time() - c0, sum(len(v) for v in events.values())


def ceiling_mcast(scenario: Scenario, seed: int = 1) -> tuple[float, float, int]:
    """The multicast case's work in a stripped loop: returns (wall s, CPU s, events). Per multicast a
    send event, a loopback delivery, a frame to each other member on a lossy link (0.5 ms), a receive
    into a dict window per (sender, receiver), in-order delivery with a deliver event; per node every
    xmit interval (0.5 s) each sender's highest seqno to its members (lost tails show up as gaps) and
    per receive window with gaps an XMIT-REQ event and a resend with a retransmit event per seqno;
    every 2 s a STABLE round that purges each sender's table up to what every member delivered."""
    t0, c0 = time.perf_counter(), time.process_time()
    rng = random.Random(seed)
    loss, delay, xmit, stable = 0.1, 0.0005, 0.5, 2.0
    end = scenario.end_time
    members = list(scenario.nodes)
    heap: list = []
    seq = 0
    events: dict[str, list[dict]] = {n: [] for n in members}
    table: dict[str, dict[int, bytes]] = {n: {} for n in members}  # sender -> seqno -> payload
    next_seqno = dict.fromkeys(members, 1)
    # (sender, receiver) -> [delivered, {seqno: (payload, app)}, highest known]
    recv = {(s, r): [0, {}, 0] for s in members for r in members if s != r}
    limits = {(s.index, s.src): planned_count(s, scenario.duration) for s in scenario.streams}
    for s in scenario.streams:
        heapq.heappush(heap, (s.start, seq, 0, s, 0))
        seq += 1
    for name in members:
        heapq.heappush(heap, (xmit, seq, 2, name, None))
        heapq.heappush(heap, (stable, seq + 1, 3, name, None))
        seq += 2
    while heap and heap[0][0] <= end:
        t, _, kind, a, b = heapq.heappop(heap)
        if kind == 0:  # a stream tick: one multicast
            s, n = a, b + 1
            src = s.src
            seqno = next_seqno[src]
            next_seqno[src] = seqno + 1
            payload = app_payload(src, s.index, n, s.size)
            table[src][seqno] = payload
            app = f"{src}:{s.index}:{n}"
            events[src].append(
                {"v": 1, "t": t, "node": src, "proto": "nakack2", "kind": "send", "members": members,
                 "seqno": seqno, "bytes": len(payload), "app": app}
            )  # fmt: skip
            events[src].append(
                {"v": 1, "t": t, "node": src, "proto": "nakack2", "kind": "deliver", "peer": src,
                 "seqno": seqno, "bytes": len(payload), "app": app}
            )  # fmt: skip
            for dst in members:
                if dst != src and rng.random() >= loss:
                    heapq.heappush(heap, (t + delay, seq, 1, (src, dst), (seqno, payload, app)))
                    seq += 1
            if n < limits[s.index, src]:
                heapq.heappush(heap, (s.start + n / s.rate, seq, 0, s, n))
                seq += 1
        elif kind == 1:  # a multicast (or its resend) arrives
            src, dst = a
            seqno, payload, app = b
            r = recv[a]
            if seqno > r[2]:
                r[2] = seqno
            if seqno <= r[0] or seqno in r[1]:
                continue
            held = r[1]
            held[seqno] = (payload, app)
            nxt = r[0] + 1
            evs = events[dst]
            while nxt in held:
                payload, app = held.pop(nxt)
                evs.append(
                    {"v": 1, "t": t, "node": dst, "proto": "nakack2", "kind": "deliver", "peer": src,
                     "seqno": nxt, "bytes": len(payload), "app": app}
                )  # fmt: skip
                nxt += 1
            r[0] = nxt - 1
        elif kind == 4:  # a sender's highest seqno arrives
            r = recv[a]
            if b > r[2]:
                r[2] = b
        elif kind == 2:  # the retransmit task of node a
            node = a
            hs = next_seqno[node] - 1
            for dst in members:
                if dst != node and rng.random() >= loss:
                    heapq.heappush(heap, (t + delay, seq, 4, (node, dst), hs))
                    seq += 1
            for src in members:
                if src == node:
                    continue
                r = recv[(src, node)]
                held = r[1]
                ask = [sq for sq in range(r[0] + 1, r[2] + 1) if sq not in held]
                if not ask:
                    continue
                events[node].append({"v": 1, "t": t, "node": node, "proto": "nakack2", "kind": "xmit_req_tx",
                                     "peer": src, "origin": src, "ranges": [[ask[0], ask[-1]]], "count": len(ask),
                                     "bytes": 69})  # fmt: skip
                sent = table[src]
                for sq in ask:
                    payload = sent.get(sq)
                    if payload is None:
                        continue
                    events[src].append({"v": 1, "t": t, "node": src, "proto": "nakack2", "kind": "retransmit",
                                        "peer": node, "seqno": sq, "origin": src, "bytes": len(payload),
                                        "reason": "xmit_req"})  # fmt: skip
                    if rng.random() >= loss:
                        heapq.heappush(heap, (t + 2 * delay, seq, 1, (src, node), (sq, payload, f"{src}:{sq}")))
                        seq += 1
            heapq.heappush(heap, (t + xmit, seq, 2, node, None))
            seq += 1
        else:  # the STABLE task of node a: purge its table up to what every member delivered
            node = a
            low = min(recv[(node, dst)][0] for dst in members if dst != node)
            sent = table[node]
            for sq in [sq for sq in sent if sq <= low]:
                del sent[sq]
            heapq.heappush(heap, (t + stable, seq, 3, node, None))
            seq += 1
    return time.perf_counter() - t0, time.process_time() - c0, sum(len(v) for v in events.values())


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_command(path: Path, extra: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of `splitbrain run --backend sim` in a fresh process (exit code checked),
    run from the tree measured (BENCH_TREE)."""
    with tempfile.TemporaryDirectory() as out:
        cpu0 = _children_cpu()
        t0 = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "splitbrain.harness.cli",
                "run",
                str(path),
                "--backend",
                "sim",
                "--out",
                out,
                *extra,
            ],
            cwd=TREE,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
        cpu = _children_cpu() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"splitbrain run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall, cpu


def sim_parts(scenario: Scenario, *, wire_codec: bool, invariants: bool) -> dict:
    """Loop, write and check times of one run in this process."""
    options = {"wire": True} if wire_codec else {}  # (an older tree has no wire=)
    t0, c0 = time.perf_counter(), time.process_time()
    result = Simulation(scenario, check_invariants=invariants, **options).run()
    loop, loop_cpu = time.perf_counter() - t0, time.process_time() - c0
    with tempfile.TemporaryDirectory() as out:
        c0 = time.process_time()
        for name, events in result.events.items():
            write_events(Path(out) / name / "events.jsonl", events)
        write_s = time.process_time() - c0
    c0 = time.process_time()
    verdict = judge(scenario, result.all_events(), seed=scenario.seed, backend="sim", stats=result.stats)
    checks_s = time.process_time() - c0
    return {
        "loop": loop,
        "loop_cpu": loop_cpu,
        "write": write_s,
        "checks": checks_s,
        "after_wall": after_run_wall(scenario, result),
        "events": sum(len(v) for v in result.events.values()) + len(result.timeline),
        "outcome": verdict.outcome,
    }


def after_run_wall(scenario: Scenario, result) -> float | None:
    """Wall s of writing and judging as the CLI does on two cores (harness.afterrun: a forked
    child writes and runs some checks); None for a tree without it."""
    try:
        from splitbrain.harness.afterrun import write_and_check
    except ImportError:
        return None
    from splitbrain.harness.rundir import write_events as write_run

    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        events = result.all_events()
        write_and_check(lambda: write_run(Path(out), result.events, result.timeline), events, scenario, workers=2)
        return time.perf_counter() - t0


def median_of(fn, repeat: int):
    runs = [fn() for _ in range(repeat)]
    return runs[sorted(range(repeat), key=lambda i: _key(runs[i]))[repeat // 2]]


def _key(run) -> float:
    return run if isinstance(run, float) else run[0] if isinstance(run, tuple) else run["loop_cpu"]


def bench_sim(scenario: Scenario, repeat: int, path: Path, wire_rows: bool = True, ceiling=None) -> None:
    """One simulator case: its ceiling loop (`ceiling`, default ceiling_sim), the loop in this
    process, and the whole command in a fresh process."""
    ceiling = ceiling_sim if ceiling is None else ceiling
    ceiling_wall, ceiling_cpu, ceiling_events = median_of(lambda: ceiling(scenario), repeat)
    objects = median_of(lambda: sim_parts(scenario, wire_codec=False, invariants=True), repeat)
    no_inv = median_of(lambda: sim_parts(scenario, wire_codec=False, invariants=False), repeat)
    rows = [("simulation loop, default codec, invariants on (CLI default)", objects)]
    rows.append(("simulation loop, default codec, invariants off", no_inv))
    if wire_rows:
        rows.append(("simulation loop, wire codec, invariants on", median_of(
            lambda: sim_parts(scenario, wire_codec=True, invariants=True), repeat)))  # fmt: skip
    command, command_cpu = median_of(lambda: run_command(path, []), repeat)
    print(f"## 1. Simulator: {scenario.name} ({objects['events']} events; ceiling loop {ceiling_events})\n")
    print(f"Code: {TREE}. Load average at the start: {os.getloadavg()[0]:.1f}.\n")
    print("| what | wall s | CPU s | CPU / ceiling CPU |")
    print("| --- | --- | --- | --- |")
    print(f"| ceiling loop (stripped CPython, same work) | {ceiling_wall:.2f} | {ceiling_cpu:.2f} | 1.0 |")
    for label, parts in rows:
        print(f"| {label} | {parts['loop']:.2f} | {parts['loop_cpu']:.2f} | {parts['loop_cpu'] / ceiling_cpu:.1f} |")
    print(f"| writing the event logs | | {objects['write']:.2f} | |")
    print(f"| the checks (judge) | | {objects['checks']:.2f} | |")
    if objects["after_wall"] is not None:
        print(f"| merging, writing and judging on two processes (the CLI's way) | {objects['after_wall']:.2f} | | |")
    print(f"| whole `splitbrain run --backend sim` (fresh process) | {command:.2f} | {command_cpu:.2f} | |")
    if wire_rows:
        wall_w, cpu_w = median_of(lambda: run_command(path, ["--wire"]), repeat)
        print(f"| whole `splitbrain run --backend sim --wire` | {wall_w:.2f} | {cpu_w:.2f} | |")
    ratio = objects["loop_cpu"] / ceiling_cpu
    print(
        f"\nGoals: command <= {GOAL_COMMAND_S:g} s ({'met' if command <= GOAL_COMMAND_S else 'not met'}: "
        f"{command:.2f} s wall, {command_cpu:.2f} s CPU); loop <= {GOAL_LOOP_RATIO:g}x the ceiling "
        f"({'met' if ratio <= GOAL_LOOP_RATIO else 'not met'}: {ratio:.1f}x in CPU s). "
        f"Outcome {objects['outcome']}.\n"
    )


# ---- 2. the node's paths on real frames -------------------------------------------------------


def connected_pair() -> tuple[Stack, Stack]:
    """Sender A and receiver B with an open UNICAST3 connection, as in a running daemon: the
    SYNC handshake done through the real codec (a fresh receiver would otherwise only cache and
    drop what it gets while it waits for a SYNC-OK, which is not the path being measured)."""
    a = build_stack("A", "unicast3", {}, random.Random(1), 1)
    b = build_stack("B", "unicast3", {}, random.Random(2), 1)
    for stack in (a, b):
        stack.command(ViewChange(members=("A", "B"), view_id=1), 0.0)
        stack.take()
    a.send(Message("A", "B", app_payload("A", 9, 1, 100)), 0.0)
    for _ in range(10):  # SYNC, SYNC-OK, SYNC-ACK, resends, ACK: a few round trips
        out_a, _, _ = a.take()
        out_b, _, _ = b.take()
        if not out_a and not out_b:
            break
        if out_a:
            b.receive(wire.decode_frame(wire.encode_frame("A", out_a))[1], 0.0)
        if out_b:
            a.receive(wire.decode_frame(wire.encode_frame("B", out_b))[1], 0.0)
    if b.layers[-1].recv_table["A"].delivered != 1:
        raise SystemExit("benchmark set-up: A and B did not connect")
    return a, b


def node_frames(n_frames: int) -> tuple[Stack, list[bytes]]:
    """A connected receiver and real frames A -> B for it, as the daemon's bundler sends them."""
    sender, receiver = connected_pair()
    frames = []
    n = 0
    for _ in range(n_frames):
        msgs = []
        for _ in range(FRAME_MSGS):
            n += 1
            msgs.append(Message("A", "B", app_payload("A", 0, n, 100)))
        sender.send_batch(msgs, 0.0)
        out, _, _ = sender.take()
        frames.append(wire.encode_frame("A", out))
    return receiver, frames


def _take(stack: Stack) -> tuple[list, list, list]:
    """What the daemon drains after an input: events as the event log gets them (records where
    the tree has them, dicts in older trees, batch records now)."""
    take = getattr(stack, "take_packed", stack.take)
    return take()


def receive_frames(stack: Stack, frames: list[bytes], expected: int, who: str) -> tuple[float, float]:
    """CPU s for `stack` to decode and take `frames`, which must deliver `expected` messages, and
    CPU s for the daemon's event log to format the events it produced."""
    delivered = 0
    events: list = []
    t0 = time.process_time()
    for i, frame in enumerate(frames):
        _src, msgs = wire.decode_frame(frame)
        stack.receive(msgs, 0.001 * i)
        _net, app, evs = _take(stack)
        delivered += len(app)
        events.extend(evs)
    cpu = time.process_time() - t0
    if delivered != expected:
        raise SystemExit(f"benchmark: {who} delivered {delivered} of {expected}")
    return cpu, encode_cpu(events)


def stack_receive(n_frames: int) -> tuple[float, float]:
    """CPU s for a connected receiver's Stack to take n_frames frames (decode + stack + events),
    and CPU s for the daemon's event log to format those events as lines."""
    return receive_frames(*node_frames(n_frames), n_frames * FRAME_MSGS, "the receiver")


def encode_cpu(events: list) -> float:
    """CPU s for the daemon's EventLog to format events as JSON lines (nothing written)."""
    loop = asyncio.new_event_loop()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            log = EventLog(Path(tmp) / "events.jsonl", loop)
            t0 = time.process_time()
            log.encode(events)
            cpu = time.process_time() - t0
            log.close()
    finally:
        loop.close()
    return cpu


def stack_send(n_frames: int) -> tuple[float, float]:
    """CPU s for a sender's Stack to send n_frames frames of FRAME_MSGS messages and the bundler
    to encode them (wire.split_into_frames), and CPU s for the event log to format its events."""
    stack = build_stack("A", "unicast3", {}, random.Random(1), 1)
    stack.command(ViewChange(members=("A", "B"), view_id=1), 0.0)
    stack.take()
    n = 0
    events: list = []
    t0 = time.process_time()
    for i in range(n_frames):
        msgs = []
        for _ in range(FRAME_MSGS):
            n += 1
            msgs.append(Message("A", "B", app_payload("A", 0, n, 100)))
        stack.send_batch(msgs, 0.001 * i)
        out, _, evs = _take(stack)
        events.extend(evs)
        wire.split_into_frames("A", out, 60_000)
        # The peer's ACK purges the window, as in a steady stream.
        stack.layers[-1].send_table["B"].msgs.clear()
        stack.layers[-1].send_table["B"].ha = n
    return time.process_time() - t0, encode_cpu(events)


_HDR = struct.Struct("!BBHBBQI")  # nhdr, proto_id, len, type, flags, seqno, conn_id
_PLEN = struct.Struct("!I")


def ceiling_frames_receive(frames: list[bytes]) -> float:
    """CPU s for a stripped loop to consume the same frames: parse each message's UNICAST3 DATA
    header and payload, hold it in a dict window, deliver in order with a deliver event dict.
    Its window starts where connected_pair() left the receiver's: message 1 delivered."""
    delivered = 1
    held: dict[int, bytes] = {}
    events: list[dict] = []
    t0 = time.process_time()
    for i, data in enumerate(frames):
        t = 0.001 * i
        pos = 2
        pos += 1 + data[pos]
        pos += 1 + data[pos]
        count = int.from_bytes(data[pos : pos + 2], "big")
        pos += 2
        for _ in range(count):
            _n, _pid, _ln, _type, _flags, seqno, conn_id = _HDR.unpack_from(data, pos)
            pos += 18
            (plen,) = _PLEN.unpack_from(data, pos)
            pos += 4
            payload = data[pos : pos + plen]
            pos += plen
            held[seqno] = payload
            nxt = delivered + 1
            while nxt in held:
                p = held.pop(nxt)
                events.append(
                    {"v": 1, "t": t, "node": "B", "proto": "unicast3", "kind": "deliver", "peer": "A", "seqno": nxt,
                     "conn_id": conn_id, "bytes": len(p), "app": p[3 : 3 + p[2]].decode()}
                )  # fmt: skip
                nxt += 1
            delivered = nxt - 1
    cpu = time.process_time() - t0
    if len(events) != len(frames) * FRAME_MSGS:
        raise SystemExit(f"benchmark: the ceiling delivered {len(events)} of {len(frames) * FRAME_MSGS}")
    return cpu


def ceiling_frames_send(n_frames: int) -> float:
    """CPU s for a stripped loop to number, keep and frame the same messages with send events."""
    window: dict[int, bytes] = {}
    events: list[dict] = []
    pack = _HDR.pack
    plen = _PLEN.pack
    head = b"\x01\x00\x01A\x01B"
    n = 0
    t0 = time.process_time()
    for i in range(n_frames):
        t = 0.001 * i
        parts = [head, FRAME_MSGS.to_bytes(2, "big")]
        for _ in range(FRAME_MSGS):
            n += 1
            payload = app_payload("A", 0, n, 100)
            window[n] = payload
            events.append(
                {"v": 1, "t": t, "node": "A", "proto": "unicast3", "kind": "send", "peer": "B", "seqno": n,
                 "conn_id": 1, "bytes": len(payload), "app": f"A:0:{n}"}
            )  # fmt: skip
            parts.append(pack(1, 3, 14, 0, 0, n, 1))
            parts.append(plen(len(payload)))
            parts.append(payload)
        b"".join(parts)
        window.clear()
    return time.process_time() - t0


def bench_node_paths(n_frames: int, repeat: int) -> None:
    # As in the daemon (node/runtime/runner.py GcPolicy): no automatic collection on the hot path.
    gc.collect()
    gc.disable()
    try:
        _bench_node_paths(n_frames, repeat)
    finally:
        gc.enable()


def _bench_node_paths(n_frames: int, repeat: int) -> None:
    _, frames = node_frames(n_frames)
    msgs = n_frames * FRAME_MSGS
    us = 1e6 / msgs
    recv, recv_log = (x * us for x in median_of(lambda: stack_receive(n_frames), repeat))
    recv_c = median_of(lambda: ceiling_frames_receive(frames), repeat) * us
    send, send_log = (x * us for x in median_of(lambda: stack_send(n_frames), repeat))
    send_c = median_of(lambda: ceiling_frames_send(n_frames), repeat) * us
    print(f"## 2. Node paths in-process ({n_frames} frames x {FRAME_MSGS} msgs of 100 B, CPU us per message)\n")
    print(f"Code: {TREE}. Load average at the start: {os.getloadavg()[0]:.1f}.\n")
    print("| path | stack us/msg | ceiling us/msg | ratio | + event log lines us/msg |")
    print("| --- | --- | --- | --- | --- |")
    print(
        f"| receive (decode + stack + deliver events) | {recv:.2f} | {recv_c:.2f} | {recv / recv_c:.1f} "
        f"| {recv_log:.2f} |"
    )
    print(
        f"| send (stack + send events + bundle encode) | {send:.2f} | {send_c:.2f} | {send / send_c:.1f} "
        f"| {send_log:.2f} |"
    )
    print()


def mcast_frames(n_frames: int) -> tuple[Stack, list[bytes]]:
    """A member B of a 3-member NAKACK2 group (static view) and the frames A multicasts to it: the
    copies for B of FRAME_MSGS multicasts of 100 B per frame, as the daemon bundles them."""
    members = ("A", "B", "C")
    sender, receiver = (build_stack(m, "nakack2", {}, random.Random(i), 1) for i, m in enumerate(members[:2]))
    for stack in (sender, receiver):
        stack.command(ViewChange(members=members, view_id=1), 0.0)
        stack.take()
    frames = []
    n = 0
    for _ in range(n_frames):
        msgs = []
        for _ in range(FRAME_MSGS):
            n += 1
            msgs.append(Message("A", MCAST_DEST, app_payload("A", 0, n, 100)))
        sender.send_batch(msgs, 0.0)
        out = [m for m in _take(sender)[0] if m.dest == "B"]
        frames.extend(wire.split_into_frames("A", out, 60_000))
    return receiver, frames


def mcast_receive(n_frames: int) -> tuple[float, float]:
    """CPU s for member B to take the frames of n_frames x FRAME_MSGS multicasts (decode + stack +
    deliver events), and CPU s for the event log to format the events."""
    return receive_frames(*mcast_frames(n_frames), n_frames * FRAME_MSGS, "the member")


_N2_HDR = struct.Struct("!BBHBQ")  # nhdr, proto_id, len, type, seqno


def ceiling_mcast_receive(frames: list[bytes]) -> float:
    """CPU s for a stripped loop to consume the same multicast frames: parse each NAKACK2 MSG header
    and payload, hold it in the sender's dict window, deliver in order with a deliver event dict."""
    delivered = 0
    held: dict[int, bytes] = {}
    events: list[dict] = []
    t0 = time.process_time()
    for i, data in enumerate(frames):
        t = 0.001 * i
        pos = 2
        pos += 1 + data[pos]
        pos += 1 + data[pos]
        count = int.from_bytes(data[pos : pos + 2], "big")
        pos += 2
        for _ in range(count):
            _n, _pid, _ln, _type, seqno = _N2_HDR.unpack_from(data, pos)
            pos += 13
            (plen,) = _PLEN.unpack_from(data, pos)
            pos += 4
            held[seqno] = data[pos : pos + plen]
            pos += plen
            nxt = delivered + 1
            while nxt in held:
                p = held.pop(nxt)
                events.append(
                    {"v": 1, "t": t, "node": "B", "proto": "nakack2", "kind": "deliver", "peer": "A", "seqno": nxt,
                     "bytes": len(p), "app": p[3 : 3 + p[2]].decode()}
                )  # fmt: skip
                nxt += 1
            delivered = nxt - 1
    cpu = time.process_time() - t0
    if delivered != sum(int.from_bytes(f[4 + f[2] + f[3 + f[2]] : 6 + f[2] + f[3 + f[2]]], "big") for f in frames):
        raise SystemExit(f"benchmark: the multicast ceiling delivered {delivered}")
    return cpu


def bench_mcast_paths(n_frames: int, repeat: int) -> None:
    gc.collect()
    gc.disable()
    try:
        _, frames = mcast_frames(n_frames)
        us = 1e6 / (n_frames * FRAME_MSGS)
        recv, recv_log = (x * us for x in median_of(lambda: mcast_receive(n_frames), repeat))
        ceiling = median_of(lambda: ceiling_mcast_receive(frames), repeat) * us
    finally:
        gc.enable()
    print(f"## 2b. NAKACK2 multicast receive path in-process (3 members; {n_frames} x {FRAME_MSGS} multicasts)\n")
    print("| path | stack us/msg | ceiling us/msg | ratio | + event log lines us/msg |")
    print("| --- | --- | --- | --- | --- |")
    print(
        f"| multicast receive at a member (decode + stack + deliver events) | {recv:.2f} | {ceiling:.2f} "
        f"| {recv / ceiling:.1f} | {recv_log:.2f} |"
    )
    print()


# ---- 3. a campaign ----------------------------------------------------------------------------


def _campaign_run(seed: int, judged: bool = False) -> tuple[str, float]:
    """One seed of the 5x60 case: (outcome, CPU s). Runs only (Simulation.run), or judged too."""
    c0 = time.process_time()
    scenario = dataclasses.replace(load_scenario(SCENARIO), seed=seed)
    result = Simulation(scenario).run()
    outcome = "run"
    if judged:
        outcome = judge(scenario, result.all_events(), seed=seed, backend="sim", stats=result.stats).outcome
    return outcome, time.process_time() - c0


def _campaign_judged(seed: int) -> tuple[str, float]:
    return _campaign_run(seed, judged=True)


def bench_campaign(runs: int, workers: int = 2, judged: bool = False) -> None:
    t0 = time.perf_counter()
    done = []
    with ProcessPoolExecutor(workers) as pool:
        for done_run in pool.map(_campaign_judged if judged else _campaign_run, range(runs)):
            done.append(done_run)
            if len(done) % 50 == 0 and len(done) < runs:  # progress of a long campaign, on stderr
                wall = time.perf_counter() - t0
                print(
                    f"campaign: {len(done)}/{runs} runs in {wall:.0f} s ({len(done) / wall * 60:.1f} runs/min, "
                    f"load {os.getloadavg()[0]:.1f})",
                    file=sys.stderr,
                    flush=True,
                )
    wall = time.perf_counter() - t0
    cpu = sorted(c for _, c in done)
    what = "runs and checks" if judged else "runs only"
    print(f"## 3. Campaign: {runs} seeds of the 5x60 case, {workers} workers ({what}, nothing written)\n")
    print(
        f"{runs} runs in {wall:.1f} s wall: {runs / wall * 60:.1f} runs/min; CPU per run median "
        f"{cpu[len(cpu) // 2]:.2f} s, max {cpu[-1]:.2f} s ({workers * 60 / cpu[len(cpu) // 2]:.1f} runs/min on "
        f"{workers} free cores). Load average at the end: {os.getloadavg()[0]:.1f}."
    )
    if judged:
        outcomes = [o for o, _ in done]
        print(f"{outcomes.count('passed')}/{runs} passed.")
    print()


@recorded(
    "bench_speed",
    goals={
        "Simulator": f"`splitbrain run --backend sim` of the 5x60 case <= {GOAL_COMMAND_S:g} s; "
        f"its loop <= {GOAL_LOOP_RATIO:g}x the ceiling",
        "Node paths": "the node's receive and send paths within 2x a stripped CPython loop doing the same work",
        "NAKACK2 multicast receive": "the multicast receive path within 2x its ceiling",
        "Campaign": "runs per minute scale with the worker processes",
    },
)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one repetition, fewer frames, a 4-seed campaign")
    parser.add_argument("--repeat", type=int, default=3, help="median of N runs per figure (default 3)")
    parser.add_argument("--campaign", type=int, default=None, help="seeds in the campaign (default 20; 0: skip)")
    parser.add_argument(
        "--sections", default="sim,mcast,node,campaign", help="comma-separated: sim, mcast, node, campaign"
    )
    parser.add_argument("--campaign-judged", action="store_true", help="the campaign judges every run too")
    parser.add_argument("--no-wire", action="store_true", help="skip the wire-codec rows (for a tree without --wire)")
    args = parser.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    campaign = args.campaign if args.campaign is not None else (4 if args.quick else 20)
    sections = set(args.sections.split(","))
    scenario = load_scenario(SCENARIO)
    if "sim" in sections:
        bench_sim(scenario, repeat, SCENARIO, wire_rows=not args.no_wire)
    if "mcast" in sections:
        bench_sim(load_scenario(MCAST_SCENARIO), repeat, MCAST_SCENARIO, wire_rows=False, ceiling=ceiling_mcast)
    if "node" in sections:
        bench_node_paths(30 if args.quick else 100, repeat)
        bench_mcast_paths(30 if args.quick else 100, repeat)
    if "campaign" in sections and campaign:
        bench_campaign(campaign, judged=args.campaign_judged)
    return 0


if __name__ == "__main__":
    sys.exit(main())
