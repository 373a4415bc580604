"""Benchmarks of UNICAST3 and of the deterministic simulator, printed as Markdown tables.

Every number comes from the sim backend (harness.sim.Simulation on scenarios built with
harness.scenario.parse_scenario) or, for JGRP-1875, from the scripted network of tests/netlab.py.
Virtual time is deterministic; only the wall-clock columns of section 1 vary between machines.

1. Simulator speed. The target case: 5 nodes, every ordered pair (20 directed links)
   sending 200 msgs/s for 60 virtual seconds with 10 % loss on every link, healed at 60 s, plus
   the default 5 s settle; and a lighter ring (A->B, B->C, ..., E->A). "events" counts every
   event in the result (all node logs plus the harness timeline). The simulator runs with
   check_invariants=False unless the invariants column says "on" (then every window's invariants
   are checked after every input). "checks s" is the wall time of run_checks, not included in
   "wall s". The goal is under 1 s of wall time for the 60 s, 5-node case.
2. Ack traffic. 2 nodes, A->B at 1000 msgs/s, no loss: ACKs sent per message delivered (ack_tx
   events over deliver events) for several ack_min_interval values, plus protocol messages per
   frame on each link (frames counted by wrapping the wire codec).
3. Control traffic per resync. The asymmetric split of the SYNC design (one-way partition A->B, B drops
   A from its view and closes its window, heal at 8 s) for each resync mode, over several seeds.
   Counted from the heal until B has caught up (delivered every message A had sent it so far):
   control messages between A and B by kind, and their bytes inside frames (UNICAST3 header and
   payload, as node.wire encodes them; the 8-byte frame header is not included). "catch-up" is
   that interval. run_checks' own windows_synced sync_time is shown too: it is the last data
   movement after the last heal, so with A sending until t=12 it is about 4 s in every mode.
   The scenario has no random network element, so seeds change conn-ids but rarely the counts.
4. JGRP-1875. tests/scenarios/test_jgrp1875.py's recipe (a stale ACK delayed past a resync) per mode:
   messages lost, XMIT-REQs B sent in the last 3 s (a stuck receiver keeps asking), stale ACKs
   A discarded, and app ids redelivered under a new conn-id after the reset (legal, not duplicates).

Run: .venv/bin/python benchmarks/bench_protocol.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchresults import Results, add_json_option

from splitbrain.harness.checks import CHECKS, run_checks
from splitbrain.harness.scenario import parse_scenario
from splitbrain.harness.sim import Simulation
from splitbrain.node import wire
from splitbrain.node.message import Message
from splitbrain.node.unicast3 import PROTO_ID, RESYNC_MODES, MsgType, U3Header
from tests.scenarios.test_jgrp1875 import jgrp1875

ALL_CHECKS = list(CHECKS)
FIVE_NODES = ["A", "B", "C", "D", "E"]
GOAL_WALL_S_PER_60_S = 1.0
ACK_MIN_INTERVALS = (0.0, 0.05, 0.5)
HEAL_T = 8.0
PAYLOAD_SIZE = 100  # the scenario default, so every retransmitted DATA carries this many bytes
CONTROL_KINDS = ("SYNC/SYNC_OK/SYNC_ACK", "SEND_FIRST_SEQNO", "XMIT_REQ", "retransmission", "ACK")
_SYNC_PHASES = {"sync": MsgType.SYNC, "sync_ok": MsgType.SYNC_OK, "sync_ack": MsgType.SYNC_ACK}


@dataclass(frozen=True)
class Sizes:
    speed_duration_s: float
    ack_duration_s: float
    resync_seeds: int


FULL = Sizes(speed_duration_s=60.0, ack_duration_s=10.0, resync_seeds=10)
QUICK = Sizes(speed_duration_s=10.0, ack_duration_s=2.0, resync_seeds=3)


# ---- output -----------------------------------------------------------------------------------


# The run's tables as data (--json); section() files the tables made since the previous one.
RESULTS: Results | None = None
# What each section is measured against (the results page shows it with the table).
GOALS = {
    "1. Simulator speed": "the 60 s, 5-node, 20-link case in under 1 s of wall time",
    "2. Ack traffic": "few ACKs per delivered message at the default ack_min_interval",
    "4. JGRP-1875 recipe": "sync and timestamp lose nothing; first_seqno reproduces the bug",
}
_PENDING: list[tuple[list[str], list[list]]] = []


def table(headers: list[str], rows: list[list]) -> str:
    _PENDING.append((headers, rows))
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def section(title: str, intro: str, body: str) -> None:
    for headers, rows in _PENDING:
        if RESULTS is not None:
            RESULTS.table(title, headers, rows, goal=GOALS.get(title, ""), note=intro)
    _PENDING.clear()
    print(f"## {title}\n\n{intro}\n\n{body}\n")


def verdict(results) -> str:
    failed = [r.name for r in results if not r.passed]
    return f"all {len(results)} passed" if not failed else "FAILED: " + ", ".join(failed)


def seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.3f}"


# ---- running ----------------------------------------------------------------------------------


def simulate(data: dict, *, seed: int | None = None, check_invariants: bool = True, codec=None):
    scenario = parse_scenario({"protocol": "unicast3", "checks": ALL_CHECKS, **data})
    return Simulation(scenario, seed, codec=codec, check_invariants=check_invariants).run()


def count_events(result, kind: str, node: str) -> int:
    return sum(1 for ev in result.events[node] if ev["kind"] == kind)


class FrameCounter:
    """node.wire, counting frames and protocol messages per directed link as they are encoded."""

    WireError = wire.WireError
    decode_frame = staticmethod(wire.decode_frame)

    def __init__(self) -> None:
        self.frames: Counter = Counter()
        self.msgs: Counter = Counter()

    def encode_frame(self, src: str, msgs: list[Message]) -> bytes:
        link = (src, msgs[0].dest)
        self.frames[link] += 1
        self.msgs[link] += len(msgs)
        return wire.encode_frame(src, msgs)

    def split_into_frames(self, src: str, msgs: list[Message], max_bytes: int) -> list[bytes]:
        frames = wire.split_into_frames(src, msgs, max_bytes)
        # The simulator encoded the whole batch (counted as one frame) before deciding to split it.
        self.frames[(src, msgs[0].dest)] += len(frames) - 1
        return frames

    def per_frame(self, src: str, dest: str) -> str:
        frames = self.frames[(src, dest)]
        return f"{self.msgs[(src, dest)] / frames:.2f}" if frames else "-"


# ---- 1. simulator speed -----------------------------------------------------------------------


def lossy_scenario(name: str, workload: list[dict], duration: float) -> dict:
    return {
        "name": name,
        "nodes": FIVE_NODES,
        "workload": workload,
        "schedule": [{"at": 0, "loss": {"link": "*", "p": 0.1}}, {"at": duration, "heal": 0}],
        "duration": duration,
    }


def mesh_workload(duration: float) -> list[dict]:
    return [{"from": "all", "to": "all", "rate": 200, "duration": duration}]


def ring_workload(duration: float) -> list[dict]:
    ring = zip(FIVE_NODES, FIVE_NODES[1:] + FIVE_NODES[:1])
    return [{"from": a, "to": b, "rate": 200, "duration": duration} for a, b in ring]


def speed_row(label: str, data: dict, check_invariants: bool) -> tuple[list, float]:
    result = simulate(data, check_invariants=check_invariants)
    t0 = time.perf_counter()
    checks = run_checks(result.all_events())
    checks_s = time.perf_counter() - t0
    wall = result.stats["wall_time_s"]
    events = sum(len(evs) for evs in result.events.values()) + len(result.timeline)
    row = [
        label,
        "on" if check_invariants else "off",
        f"{result.end_time:g}",
        f"{wall:.2f}",
        f"{result.end_time / wall:.1f}",
        events,
        f"{events / wall:,.0f}",
        result.stats["msgs_sent"],
        result.stats["msgs_delivered"],
        verdict(checks),
        f"{checks_s:.2f}",
    ]
    return row, wall


def bench_speed(sizes: Sizes) -> None:
    duration = sizes.speed_duration_s
    mesh = lossy_scenario("bench-speed-mesh", mesh_workload(duration), duration)
    ring = lossy_scenario("bench-speed-ring", ring_workload(duration), duration)
    mesh_label = f"5 nodes, 20 links x 200/s, {duration:g} s, 10 % loss"
    ring_label = f"5-node ring, 5 links x 200/s, {duration:g} s, 10 % loss"
    target_row, target_wall = speed_row(mesh_label, mesh, check_invariants=False)
    rows = [
        target_row,
        speed_row(mesh_label, mesh, check_invariants=True)[0],
        speed_row(ring_label, ring, check_invariants=False)[0],
    ]
    goal = GOAL_WALL_S_PER_60_S * duration / 60.0
    headers = [
        "case",
        "invariants",
        "virtual s",
        "wall s",
        "virtual s / wall s",
        "events",
        "events / wall s",
        "msgs sent",
        "msgs delivered",
        "checks",
        "checks s",
    ]
    outcome = (
        f"Goal: the {duration:g} s 5-node case in under {goal:.3g} s of wall time "
        f"(1 s per 60 virtual s). Measured {target_wall:.2f} s with invariants off: "
        f"{target_wall / goal:.1f}x the goal ({'met' if target_wall < goal else 'not met'})."
    )
    section(
        "1. Simulator speed",
        "Invariants off means Simulation(check_invariants=False). Virtual s includes the 5 s "
        "settle after the heal; wall s is the simulator's run only (no checks).",
        table(headers, rows) + "\n\n" + outcome,
    )


# ---- 2. ack traffic ---------------------------------------------------------------------------


def ack_row(ack_min_interval: float, duration: float) -> list:
    frames = FrameCounter()
    result = simulate(
        {
            "name": "bench-acks",
            "nodes": ["A", "B"],
            "config": {"ack_min_interval": ack_min_interval},
            "workload": [{"from": "A", "to": "B", "rate": 1000, "duration": duration}],
            "duration": duration,
        },
        codec=frames,
    )
    delivered = count_events(result, "deliver", "B")
    acks = count_events(result, "ack_tx", "B")
    return [
        f"{ack_min_interval:g}",
        delivered,
        acks,
        f"{acks / delivered:.4f}",
        count_events(result, "retransmit", "A"),
        frames.per_frame("A", "B"),
        frames.per_frame("B", "A"),
        verdict(run_checks(result.all_events())),
    ]


def bench_acks(sizes: Sizes) -> None:
    rows = [ack_row(interval, sizes.ack_duration_s) for interval in ACK_MIN_INTERVALS]
    headers = [
        "ack_min_interval s",
        "delivered",
        "ACKs",
        "ACKs / delivered",
        "retransmits",
        "msgs / frame A->B",
        "msgs / frame B->A",
        "checks",
    ]
    section(
        "2. Ack traffic",
        f"2 nodes, A->B at 1000 msgs/s for {sizes.ack_duration_s:g} s, no loss, 5 s settle; "
        "0.5 is the default. Retransmits are A's resends (highest-sent while unacked). The "
        "simulator has no bundler: each application send leaves as its own frame.",
        table(headers, rows),
    )


# ---- 3. control traffic per resync ------------------------------------------------------------


def split_scenario(resync: str, busy: bool) -> dict:
    """The SYNC design's asymmetric split: A->B is cut, B drops A from its view and closes its window.

    idle (busy=False): the workload ends during the split, so what is counted after the heal is
    the resync itself: getting B's new window in step and recovering the 500 messages A sent into
    the cut. busy: A keeps sending 100 msgs/s for 4 s after the heal, which is where the older
    designs pay for every message that reaches a receiver without a window (JGRP-1874)."""
    end = HEAL_T + 4.0 if busy else 7.0
    return {
        "name": "bench-resync",
        "nodes": ["A", "B", "C"],
        "config": {"conn_close_timeout": 2.0, "resync": resync},
        "workload": [
            {"from": "A", "to": "B", "rate": 100, "duration": end},
            {"from": "C", "to": "B", "rate": 50, "duration": end},
        ],
        "schedule": [
            {"at": 2.0, "partition": {"from": "A", "to": "B"}},
            {"at": 2.5, "view": {"at": "B", "members": ["B", "C"]}},
            {"at": HEAL_T, "heal": 0},
            {"at": HEAL_T, "view": {"at": "B", "members": ["A", "B", "C"]}},
        ],
        "duration": max(end, HEAL_T),
        "settle": 8,
    }


def encoded_size(hdr: U3Header, payload_size: int = 0) -> int:
    """Bytes one UNICAST3 message takes inside a frame (its headers, payload length, payload)."""
    return len(wire.encode_message(Message("A", "B", bytes(payload_size), {PROTO_ID: hdr})))


def control_message(ev: dict) -> tuple[str, int] | None:
    """The control kind of a protocol event and its message's encoded size, or None."""
    kind = ev["kind"]
    if kind == "sync_tx":
        return CONTROL_KINDS[0], encoded_size(U3Header(_SYNC_PHASES[ev["phase"]]))
    if kind == "first_seqno_tx":
        return CONTROL_KINDS[1], encoded_size(U3Header(MsgType.SEND_FIRST_SEQNO))
    if kind == "xmit_req_tx":
        ranges = tuple(tuple(r) for r in ev["ranges"])
        return CONTROL_KINDS[2], encoded_size(U3Header(MsgType.XMIT_REQ, ranges=ranges))
    if kind == "retransmit":
        return CONTROL_KINDS[3], encoded_size(U3Header(MsgType.DATA), PAYLOAD_SIZE)
    if kind == "ack_tx":
        return CONTROL_KINDS[4], encoded_size(U3Header(MsgType.ACK))
    return None


def catch_up_time(events: list[dict], sender: str, receiver: str) -> float | None:
    """Seconds from the heal until `receiver` has delivered every message `sender` sent it so far."""
    pending: set[str] = set()
    for ev in events:
        if ev.get("peer") == receiver and ev["node"] == sender and ev["kind"] == "send":
            pending.add(ev["app"])
        elif ev.get("peer") == sender and ev["node"] == receiver and ev["kind"] == "deliver":
            pending.discard(ev["app"])
            if not pending and ev["t"] >= HEAL_T:
                return ev["t"] - HEAL_T
    return None


def control_traffic(events: list[dict], until: float) -> dict[str, tuple[int, int]]:
    """Control messages A<->B in [heal, until]: kind -> (count, bytes)."""
    counts: Counter = Counter()
    sizes: Counter = Counter()
    for ev in events:
        if not HEAL_T <= ev["t"] <= until or {ev["node"], ev.get("peer")} != {"A", "B"}:
            continue
        message = control_message(ev)
        if message is not None:
            counts[message[0]] += 1
            sizes[message[0]] += message[1]
    return {kind: (counts[kind], sizes[kind]) for kind in CONTROL_KINDS}


@dataclass
class ResyncRun:
    traffic: dict[str, tuple[int, int]]
    catch_up_s: float | None
    checks_sync_s: float | None
    data_dropped: int
    verdict: str


def resync_run(resync: str, seed: int, busy: bool) -> ResyncRun:
    result = simulate(split_scenario(resync, busy), seed=seed)
    events = result.all_events()
    catch_up = catch_up_time(events, "A", "B")
    until = result.end_time if catch_up is None else HEAL_T + catch_up
    checks = run_checks(events)
    synced = next(r for r in checks if r.name == "windows_synced")
    pair = synced.details["pairs"].get("A->B", {})
    dropped = sum(
        1
        for ev in result.events["B"]
        if ev["kind"] == "drop" and ev.get("peer") == "A" and ev.get("type") == "DATA" and ev["t"] >= HEAL_T
    )
    return ResyncRun(control_traffic(events, until), catch_up, pair.get("sync_time"), dropped, verdict(checks))


def traffic_of(run: ResyncRun, kind: str) -> tuple[int, int]:
    if kind == "total":
        return (sum(c for c, _ in run.traffic.values()), sum(b for _, b in run.traffic.values()))
    return run.traffic[kind]


def median_max(values: list[float | None], fmt) -> str:
    """ "median / max"; None (never happened) counts as infinitely late."""
    ordered = [float("inf") if v is None else v for v in values]
    med, top = statistics.median(ordered), max(ordered)
    return " / ".join("never" if v == float("inf") else fmt(v) for v in (med, top))


def number(value: float) -> str:
    return f"{value:g}"


def bench_resync(sizes: Sizes, busy: bool) -> None:
    seeds = range(sizes.resync_seeds)
    runs = {mode: [resync_run(mode, seed, busy) for seed in seeds] for mode in RESYNC_MODES}
    traffic_rows = []
    for mode, mode_runs in runs.items():
        for kind in CONTROL_KINDS + ("total",):
            counts = [traffic_of(run, kind)[0] for run in mode_runs]
            nbytes = [traffic_of(run, kind)[1] for run in mode_runs]
            traffic_rows.append([mode, kind, median_max(counts, number), median_max(nbytes, number)])
    summary_rows = []
    for mode, mode_runs in runs.items():
        verdicts = Counter(run.verdict for run in mode_runs)
        summary_rows.append(
            [
                mode,
                median_max([run.catch_up_s for run in mode_runs], seconds),
                median_max([run.checks_sync_s for run in mode_runs], seconds),
                median_max([run.data_dropped for run in mode_runs], number),
                "; ".join(f"{v} ({n}/{len(mode_runs)} seeds)" for v, n in verdicts.items()),
            ]
        )
    label = "busy: A keeps sending after the heal" if busy else "idle: the workload ends during the split"
    intro = (
        f"The asymmetric split of JGRP-1875 ({label}), {sizes.resync_seeds} seeds (0-{sizes.resync_seeds - 1}) per "
        f"mode, heal at t={HEAL_T:g} s. Cells are median / max over seeds. Counts and bytes cover "
        "both directions A<->B from the heal to B's catch-up (to the end of the run if B never "
        "catches up)."
    )
    summary_intro = (
        "catch-up: heal until B has delivered everything A sent it. checks sync_time: "
        "run_checks windows_synced, pair A->B. DATA dropped: A's messages B discarded "
        "after the heal for want of a usable window."
    )
    section(
        f"3{'b' if busy else 'a'}. Control traffic per resync ({'busy' if busy else 'idle'})",
        intro,
        table(["resync", "control message", "count", "bytes"], traffic_rows),
    )
    section(
        f"3{'b' if busy else 'a'}. Catch-up per resync ({'busy' if busy else 'idle'})",
        summary_intro,
        table(["resync", "catch-up s", "checks sync_time s", "DATA dropped at B", "checks"], summary_rows),
    )


# ---- 4. JGRP-1875 -----------------------------------------------------------------------------


def jgrp1875_row(resync: str) -> list:
    net = jgrp1875(resync)
    checks = {r.name: r for r in run_checks(net.final_events())}
    lost = sum(info["count"] for info in checks["no_loss"].details["lost"].values())
    late_xmit_reqs = [e for e in net.kinds("xmit_req_tx", "B") if e["t"] > net.now - 3.0]
    stale_acks = [e for e in net.kinds("drop", "A", type="ACK") if e["reason"].startswith("stale")]
    redelivered = checks["no_duplicates"].details["redelivered_after_reset"]
    return [resync, lost, len(late_xmit_reqs), len(stale_acks), redelivered, verdict(list(checks.values()))]


def bench_jgrp1875() -> None:
    rows = [jgrp1875_row(mode) for mode in RESYNC_MODES]
    headers = [
        "resync",
        "messages lost",
        "XMIT-REQs by B, last 3 s",
        "stale ACKs discarded",
        "redelivered after reset",
        "checks",
    ]
    section(
        "4. JGRP-1875 recipe",
        "tests/scenarios/test_jgrp1875.py's jgrp1875(resync), one run per mode.",
        table(headers, rows),
    )


# ---- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smaller sizes ({QUICK.speed_duration_s:g} s speed runs, "
        f"{QUICK.resync_seeds} resync seeds): seconds instead of about a minute",
    )
    add_json_option(parser)
    args = parser.parse_args(argv)
    global RESULTS
    RESULTS = Results("bench_protocol", argv)
    sizes = QUICK if args.quick else FULL
    t0 = time.perf_counter()
    print(f"# UNICAST3 benchmarks ({'quick' if args.quick else 'full'})\n")
    bench_speed(sizes)
    bench_acks(sizes)
    bench_resync(sizes, busy=False)
    bench_resync(sizes, busy=True)
    bench_jgrp1875()
    print(f"Total wall time: {time.perf_counter() - t0:.1f} s")
    RESULTS.write(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
