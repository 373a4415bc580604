"""Throughput and latency of the node daemon on loopback: 2 nodes (`python -m splitbrain.node`), UNICAST3.

For each case (transport, payload size, bundling on/off, event log on/off) two fresh node
processes are started on unique 127.x.y.z addresses with a shared epoch (one run clock). Node A
sends a warm-up stream to B, then the measured stream: `count` messages at rate 0 ("as fast as
possible"; the runtime's flow control keeps at most a few MB unacked). Then a paced stream at a
fixed rate measures latency without queueing (full mode only).

- msgs/s: messages / (delivery time of the last message at B - the stream's start at A);
- latency: every 64th message records its send time at A and its delivery time at B (GET
  /samples, both on the run clock); p50/p99 over those pairs. Under saturation ("loaded") the
  latency is mostly the time spent in the unacked window; the paced column is the protocol's.
- acks: "default" is UNICAST3's ack_min_interval (0.5 s); without bundling a receiver's batches
  stay below ack_threshold, so acks come only that often and the flow-controlled sender moves one
  window per interval: the "5 ms" rows show what the same case does when acks are not delayed;
- retx: retransmissions A made during the case (UDP loses datagrams when a receiver falls behind);
- CPU A / CPU B: the share of one core each node process used while the measured stream ran
  (polling by this script included), which shows which side is the bottleneck; "msgs/s per busy
  core" divides msgs/s by the larger of the two, a figure that stays comparable when other work
  on the machine takes CPU time away from the nodes; "us CPU/msg" is each node's CPU time per
  message delivered;
- RSS: each node's resident memory when the measured stream started and when its last message
  was delivered, and (on stderr) every 30 s in between; `--seconds N` sizes the measured stream
  to about N seconds at the rate of a calibration stream (five warm-ups' worth, sent after the
  warm-up, timed on the run clock).

JGroups on a 2-core machine: 3.17 M msgs/s (100 B, UNICAST3 over UDP) at steady state. Our first
goal in Python: 225 k msgs/s at 100 B over UDP.

Run: .venv/bin/python benchmarks/bench_node.py [--quick] [--repeat 3] [--profile] [--cases udp-100,...]
     [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import pstats
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchresults import recorded

from splitbrain.node.runtime.testing import NodeProcess, free_port, unique_host, wait_for

GOAL_100B_UDP = 225_000
RSS_EVERY_S = 30.0
CALIBRATION = 3  # the stream that sizes the measured one (0: warm-up, 1: measured, 2: paced)


@dataclass(frozen=True)
class Case:
    transport: str
    size: int
    bundling: bool = True
    event_log: bool = False
    fast_acks: bool = False  # ack_min_interval 0.005 instead of the default 0.5

    @property
    def label(self) -> str:
        return (
            f"{self.transport}-{self.size}{'' if self.bundling else '-nobundle'}"
            f"{'-log' if self.event_log else ''}{'-fastack' if self.fast_acks else ''}"
        )


@dataclass
class Result:
    case: Case
    count: int
    msgs_per_s: float
    p50_ms: float
    p99_ms: float
    paced_rate: int | None = None
    paced_p50_ms: float | None = None
    paced_p99_ms: float | None = None
    retransmissions: int = 0
    wall_s: float = 0.0
    cpu_a: float = 0.0  # share of one core each node used during the measured stream
    cpu_b: float = 0.0
    # Resident memory (MB) of A and B when the measured stream started and when it was delivered.
    rss_start: tuple[float, float] = (0.0, 0.0)
    rss_end: tuple[float, float] = (0.0, 0.0)
    stream_s: float = 0.0  # how long the measured stream ran
    rss_trace: list[tuple[float, float, float]] = field(default_factory=list)  # (s, MB A, MB B)

    @property
    def per_core(self) -> float:
        """Throughput scaled to a full core for the busier node: comparable across runs on a
        machine where other work takes CPU time (it overstates when a node waits on I/O)."""
        return self.msgs_per_s / max(self.cpu_a, self.cpu_b, 1e-9)


def all_cases() -> list[Case]:
    cases = []
    for transport in ("udp", "tcp"):
        for size in (100, 1000):
            for bundling in (True, False):
                for event_log in (False, True):
                    cases.append(Case(transport, size, bundling, event_log))
    # Without bundling a receiver gets batches below ack_threshold and acks only every
    # ack_min_interval, which bounds a flow-controlled sender: these show the CPU-bound figure.
    cases += [Case("udp", 100, False, fast_acks=True), Case("tcp", 100, False, fast_acks=True)]
    return cases


QUICK_CASES = [
    Case("udp", 100),
    Case("udp", 100, event_log=True),
    Case("udp", 100, bundling=False),
    Case("udp", 1000),
    Case("tcp", 100),
    Case("tcp", 100, event_log=True),
    Case("tcp", 1000),
]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    idx = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[idx]


def latencies_ms(sent_samples: list, delivered_samples: list) -> list[float]:
    sent = {n: t for n, t in sent_samples}
    return [(t - sent[n]) * 1000 for n, t in delivered_samples if n in sent]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """Resident set size of a process now, in MB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def delivered_count(client, sender: str, stream: int) -> int:
    d = client.get("/delivered")["delivered"]
    return d.get(sender, {}).get(str(stream), {}).get("count", 0)


def stream_elapsed(ca, cb, stream: int, count: int, epoch: float) -> float:
    """Seconds from A's start of `stream` to B's delivery of its message `count` (run clock)."""
    started = next(s for s in ca.get("/streams")["streams"] if s["stream"] == stream)["started"]
    deliv = dict((n, t) for n, t in cb.get("/samples")["delivered"]["A"][str(stream)])
    # A long stream outruns the samples (MAX_SAMPLES): then its end is when it was seen done.
    return deliv.get(count, time.time() - epoch) - started


def run_case(case: Case, measure_s: float, paced: bool, workdir: Path, profile: bool = False) -> Result:
    host_a, host_b = unique_host(), unique_host()
    pa, pb = free_port(host_a), free_port(host_b)
    epoch = time.time()
    common = {
        "transport": case.transport,
        "bundling": case.bundling,
        "event_log": case.event_log,
        "epoch": epoch,
        "admin_token": "bench",
        "config": {"ack_min_interval": 0.005} if case.fast_acks else {},
    }
    cfg_a = {"name": "A", "bind": f"{host_a}:{pa}", "admin": f"{host_a}:0", "peers": {"B": f"{host_b}:{pb}"}, **common}
    cfg_b = {"name": "B", "bind": f"{host_b}:{pb}", "admin": f"{host_b}:0", "peers": {"A": f"{host_a}:{pa}"}, **common}
    case_dir = workdir / case.label
    if case.event_log:
        cfg_a["events"] = str(case_dir / "A" / "events.jsonl")
        cfg_b["events"] = str(case_dir / "B" / "events.jsonl")
    extra_a = ["-m", "cProfile", "-o", str(case_dir / "A.prof")] if profile else []
    extra_b = ["-m", "cProfile", "-o", str(case_dir / "B.prof")] if profile else []
    a = NodeProcess(cfg_a, case_dir, extra_args=extra_a)
    b = NodeProcess(cfg_b, case_dir, extra_args=extra_b)
    started = time.monotonic()
    try:
        a.start()
        b.start()
        ca, cb = a.client(), b.client()
        # Warm-up: connections, conn-ids, allocator, caches.
        warm = 2_000 if not case.bundling else 20_000
        ca.post("/send", {"to": "B", "count": warm, "rate": 0, "size": case.size, "stream": 0})
        wait_for(lambda: delivered_count(cb, "A", 0) >= warm, 60, 0.02, "warm-up delivered")
        # The measured stream is sized from the rate of a second, warm stream (its first send to
        # its last delivery, on the run clock): the first one's includes connecting, and the
        # wall time around it this script's polling (it sized a "6 s" stream at about 0.25 s).
        calibrate = warm * 5
        ca.post("/send", {"to": "B", "count": calibrate, "rate": 0, "size": case.size, "stream": CALIBRATION})
        wait_for(lambda: delivered_count(cb, "A", CALIBRATION) >= calibrate, 60, 0.02, "calibration delivered")
        rate = calibrate / max(stream_elapsed(ca, cb, CALIBRATION, calibrate, epoch), 1e-3)
        count = max(64 * 50, int(rate * measure_s) // 64 * 64)
        retx0 = ca.get("/state")["unicast3"]["counters"].get("retransmit", 0)

        rss0 = (rss_mb(a.proc.pid), rss_mb(b.proc.pid))
        cpu0 = (cpu_seconds(a.proc.pid), cpu_seconds(b.proc.pid), time.monotonic())
        ca.post("/send", {"to": "B", "count": count, "rate": 0, "size": case.size, "stream": 1})
        # Resident memory of both nodes about every RSS_EVERY_S while the stream runs: flat or not.
        trace: list[tuple[float, float, float]] = []

        def done() -> bool:
            elapsed = time.monotonic() - cpu0[2]
            if not trace or elapsed - trace[-1][0] >= RSS_EVERY_S:
                trace.append((elapsed, rss_mb(a.proc.pid), rss_mb(b.proc.pid)))
            return delivered_count(cb, "A", 1) >= count

        wait_for(
            done,
            max(60, measure_s * 20),
            0.05,
            f"{count} messages delivered ({case.label})",
        )
        cpu1 = (cpu_seconds(a.proc.pid), cpu_seconds(b.proc.pid), time.monotonic())
        rss1 = (rss_mb(a.proc.pid), rss_mb(b.proc.pid))
        elapsed = stream_elapsed(ca, cb, 1, count, epoch)
        sa, sb = ca.get("/samples"), cb.get("/samples")
        lat = latencies_ms(sa["sent"]["1"], sb["delivered"]["A"]["1"])
        retx = ca.get("/state")["unicast3"]["counters"].get("retransmit", 0) - retx0
        result = Result(
            case,
            count,
            count / elapsed,
            percentile(lat, 0.5),
            percentile(lat, 0.99),
            retransmissions=retx,
            cpu_a=(cpu1[0] - cpu0[0]) / (cpu1[2] - cpu0[2]),
            cpu_b=(cpu1[1] - cpu0[1]) / (cpu1[2] - cpu0[2]),
            rss_start=rss0,
            rss_end=rss1,
            stream_s=elapsed,
            rss_trace=trace,
        )
        if paced:
            rate = 10_000 if case.bundling else 2_000
            n = int(rate * 1.0) // 64 * 64
            ca.post("/send", {"to": "B", "count": n, "rate": rate, "size": case.size, "stream": 2})
            wait_for(lambda: delivered_count(cb, "A", 2) >= n, 30, 0.05, "paced stream delivered")
            sa, sb = ca.get("/samples"), cb.get("/samples")
            lat = latencies_ms(sa["sent"]["2"], sb["delivered"]["A"]["2"])
            result.paced_rate = rate
            result.paced_p50_ms = percentile(lat, 0.5)
            result.paced_p99_ms = percentile(lat, 0.99)
    finally:
        code_a, code_b = a.stop(), b.stop()
    if (code_a, code_b) != (0, 0):
        raise RuntimeError(f"{case.label}: nodes exited with {code_a}, {code_b}\n{a.stderr_tail()}\n{b.stderr_tail()}")
    result.wall_s = time.monotonic() - started
    if profile:
        for who in ("A", "B"):
            print(f"### cProfile of node {who} ({case.label}), top 18 by own time\n\n```")
            stats = pstats.Stats(str(case_dir / f"{who}.prof"))
            stats.sort_stats("tottime").print_stats(18)
            print("```\n")
    return result


def cost_breakdown(n_msgs: int = 100_000, batch: int = 1024, rounds: int = 3) -> list[tuple[str, str, float]]:
    """CPU time per message of each step of the node's message path, in-process and without
    sockets (time.process_time, best of `rounds`): where a node's time goes."""
    import asyncio
    import gc
    import random

    from splitbrain.node import wire
    from splitbrain.node.compose import build_stack
    from splitbrain.node.message import Message
    from splitbrain.node.runtime.eventlog import EventLog
    from splitbrain.node.runtime.workload import Delivered, make_payloads
    from splitbrain.node.unicast3 import Unicast3

    steps = [
        "payload + Message",
        "Stack.send_batch (UNICAST3 down), take_packed",
        "bundle: wire.split_into_frames",
        "wire.decode_frame",
        "Stack.receive (UNICAST3 up, deliver, ack), take_packed",
        "delivered bookkeeping",
        "event log: encode + write (sender)",
        "event log: encode + write (receiver)",
    ]
    best = dict.fromkeys(steps, float("inf"))
    loop = asyncio.new_event_loop()
    was = gc.isenabled()
    gc.disable()  # as in the daemon (runner.GcPolicy)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(rounds):
                a = build_stack("A", "unicast3", {}, random.Random(1))
                b = build_stack("B", "unicast3", {}, random.Random(2))
                log_a, log_b = EventLog(f"{tmp}/a.jsonl", loop), EventLog(f"{tmp}/b.jsonl", loop)
                delivered = Delivered()
                spent = dict.fromkeys(steps, 0.0)
                clock = time.process_time
                for first in range(1, n_msgs + 1, batch):
                    now = time.time()
                    t0 = clock()
                    upto = min(first + batch, n_msgs + 1)
                    msgs = [Message("A", "B", p) for p in make_payloads(b"A:0:", first, upto - 1, 100)]
                    t1 = clock()
                    a.send_batch(msgs, now)
                    out, _, ev_a = a.take_packed()
                    t2 = clock()
                    frames = wire.split_into_frames("A", out, 60_000)
                    t3 = clock()
                    received = []
                    for frame in frames:
                        received.extend(wire.decode_frame(frame)[1])
                    t4 = clock()
                    b.receive(received, now)
                    acks, app, ev_b = b.take_packed()
                    t5 = clock()
                    delivered.add_batch(app, now)
                    t6 = clock()
                    log_a.extend(ev_a)
                    log_a.flush()
                    t7 = clock()
                    log_b.extend(ev_b)
                    log_b.flush()
                    t8 = clock()
                    a.receive(acks, now)
                    # The first batch opens the connection (SYNC, SYNC-OK, SYNC-ACK): A's answers
                    # go back to B, which then delivers what it kept meanwhile.
                    back, _, _ = a.take()
                    if back:
                        b.receive(back, now)
                        more, late, _ = b.take()
                        delivered.add_batch(late, now)
                        a.receive(more, now)
                        a.take()
                    for step, dt in zip(
                        steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6, t8 - t7)
                    ):
                        spent[step] += dt
                assert delivered.total == n_msgs and not a.layer(Unicast3).send_table["B"].msgs
                log_a.close()
                log_b.close()
                for step in steps:
                    best[step] = min(best[step], spent[step] / n_msgs * 1e6)
    finally:
        loop.close()
        if was:
            gc.enable()
    sides = ["sender", "sender", "sender", "receiver", "receiver", "receiver", "sender", "receiver"]
    return [(step, side, best[step]) for step, side in zip(steps, sides)]


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


@recorded(
    "bench_node",
    goals={
        "Node daemon": f"{GOAL_100B_UDP:,} msgs/s at 100 B over UDP",
        "CPU time": "no step of the path dominates; the event log a small share",
    },
)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="7 cases, ~1 s of measurement each (< 30 s)")
    parser.add_argument("--profile", action="store_true", help="run the nodes under cProfile and print hot spots")
    parser.add_argument("--cases", help="comma-separated case labels (e.g. udp-100,tcp-1000-log)")
    parser.add_argument("--seconds", type=float, help="target measurement time per case")
    parser.add_argument("--keep", metavar="DIR", help="keep configs, logs and profiles in DIR")
    parser.add_argument("--repeat", type=int, default=1, help="run each case N times, report the median run")
    args = parser.parse_args(argv)
    cases = QUICK_CASES if args.quick else all_cases()
    if args.cases:
        wanted = args.cases.split(",")
        known = {c.label: c for c in all_cases()}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(known)}")
        cases = [known[w] for w in wanted]
    measure_s = args.seconds or (1.0 if args.quick else 3.0)
    paced = not args.quick
    t_start = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-node-") as tmp:
        workdir = Path(args.keep) if args.keep else Path(tmp)
        for case in cases:
            runs = []
            for i in range(max(1, args.repeat)):
                runs.append(run_case(case, measure_s, paced, workdir / f"{i}", args.profile))
                r = runs[-1]
                print(
                    f"  {case.label}: {r.msgs_per_s:,.0f} msgs/s ({r.count} msgs, {r.wall_s:.1f}s, "
                    f"CPU {r.cpu_a:.0%}/{r.cpu_b:.0%}); RSS MB A/B every {RSS_EVERY_S:g} s: "
                    + ", ".join(f"{ra:.0f}/{rb:.0f}" for _, ra, rb in r.rss_trace),
                    file=sys.stderr,
                )
            runs.sort(key=lambda r: r.msgs_per_s)
            results.append(runs[len(runs) // 2])
    print("## Node daemon: 2 nodes on loopback, UNICAST3, A -> B\n")
    headers = [
        "transport",
        "payload B",
        "bundling",
        "event log",
        "acks",
        "msgs",
        "msgs/s",
        "MB/s (payload)",
        "loaded p50 ms",
        "loaded p99 ms",
        "retx",
        "CPU A",
        "CPU B",
        "msgs/s per busy core",
        "us CPU/msg A / B",
        "RSS MB A / B, start -> end",
        "stream s",
    ]
    if paced:
        headers += ["paced rate", "paced p50 ms", "paced p99 ms"]
    print("| " + " | ".join(headers) + " |")
    print("|" + "|".join(" --- " for _ in headers) + "|")
    for r in results:
        c = r.case
        row = [
            c.transport,
            c.size,
            "on" if c.bundling else "off",
            "on" if c.event_log else "off",
            "5 ms" if c.fast_acks else "default",
            r.count,
            f"{r.msgs_per_s:,.0f}",
            f"{r.msgs_per_s * c.size / 1e6:.1f}",
            fmt(r.p50_ms),
            fmt(r.p99_ms),
            r.retransmissions,
            f"{r.cpu_a:.0%}",
            f"{r.cpu_b:.0%}",
            f"{r.per_core:,.0f}",
            f"{r.cpu_a / r.msgs_per_s * 1e6:.2f} / {r.cpu_b / r.msgs_per_s * 1e6:.2f}",
            f"{r.rss_start[0]:.0f} -> {r.rss_end[0]:.0f} / {r.rss_start[1]:.0f} -> {r.rss_end[1]:.0f}",
            f"{r.stream_s:.1f}",
        ]
        if paced:
            row += [r.paced_rate or "-", fmt(r.paced_p50_ms, 2), fmt(r.paced_p99_ms, 2)]
        print("| " + " | ".join(str(x) for x in row) + " |")
    # The cost of the event log, per transport and size, where both variants ran.
    by = {
        (r.case.transport, r.case.size, r.case.bundling, r.case.event_log): r for r in results if not r.case.fast_acks
    }
    lines: list[str] = []
    udp100 = by.get(("udp", 100, True, False))
    if udp100:  # the goal first: the results page reads it as the line right below the table
        lines.append(
            f"Goal: {GOAL_100B_UDP:,} msgs/s at 100 B over UDP: "
            f"{'met' if udp100.msgs_per_s >= GOAL_100B_UDP else 'not met'} ({udp100.msgs_per_s:,.0f} msgs/s; "
            f"{udp100.per_core:,.0f} per busy core, CPU {udp100.cpu_a:.0%} / {udp100.cpu_b:.0%})"
        )
    for (transport, size, bundling, log_on), r in sorted(by.items()):
        if log_on and (transport, size, bundling, False) in by:
            base = by[(transport, size, bundling, False)]
            lines.append(
                f"- event log cost, {transport} {size} B bundling {'on' if bundling else 'off'}: "
                f"{(1 - r.msgs_per_s / base.msgs_per_s) * 100:.1f} % of msgs/s, "
                f"{(1 - r.per_core / base.per_core) * 100:.1f} % of msgs/s per busy core"
            )
    print("\n" + "\n".join(lines))
    print("\n## Where a message's CPU time goes (in-process, no sockets, 100 B, µs per message)\n")
    print("| step | side | µs/msg |")
    print("| --- | --- | --- |")
    rows = cost_breakdown(30_000 if args.quick else 100_000)
    for step, side, us in rows:
        print(f"| {step} | {side} | {us:.2f} |")
    for side in ("sender", "receiver"):
        total = sum(us for _, s_, us in rows if s_ == side and "event log" not in _)
        log_us = sum(us for _, s_, us in rows if s_ == side and "event log" in _)
        print(f"| total {side} without / with event log | {side} | {total:.2f} / {total + log_us:.2f} |")
    print(f"\n(total wall time {time.monotonic() - t_start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
