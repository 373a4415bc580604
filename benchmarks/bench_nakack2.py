"""Multicast throughput of NAKACK2 on loopback: 3 and 5 node processes (`python -m splitbrain.node`).

For each case (transport, nodes) fresh node processes start on unique 127.x.y.z addresses with a
shared epoch, each with the full view (static membership). Every member sends a warm-up
multicast stream, then the measured one: `count` multicasts each at rate 0 (as fast as the
runtime's flow control lets it), all members at once.

- msgs/s: multicasts delivered at every member per second: (members x count) / (the time the
  slowest member delivered the last of them - the start of the streams). JGroups' figures count the
  same thing (messages per second delivered, each at every member);
- wire/mcast: NAKACK2 messages sent per delivered multicast, from the layers' counters: the N-1
  copies of each multicast, retransmissions, XMIT-REQs and the STABLE and HIGHEST_SEQNO copies, over
  the multicasts delivered (one per member and multicast, the sender's loopback included);
- table: the largest retransmit table (messages held by NAKACK2) seen at any member while the
  stream ran, sampled every 0.2 s through GET /state;
- CPU: the busiest member's CPU time per multicast (each member delivers every multicast, and
  sends its own), and msgs/s divided by that member's share of a core: the figure that stays
  comparable when other work on the machine takes CPU time away from the nodes; and the bound
  that all members' CPU per multicast puts on msgs/s with every core of the machine free to them
  (cores x 1e6 / the sum of the members' us per multicast);
- ceiling (UDP cases, `--no-ceiling` to skip): benchmarks/mcast_ceiling.py in the same run, N
  stripped CPython members doing a member's work per multicast over the same loopback, with the
  same numbers; "x ceiling" is the node's figure over the ceiling's.

`--heap` instead measures the retransmit table under a steady paced load (rate per sender) with
STABLE every second and with STABLE effectively off (every 1000 s): held messages at the end of
each second, and the bytes they hold (payload + headers, the Python objects not counted).

Modes: udp = xmit_interval 1 s (JGroups' default; UDP needs retransmission); tcp = xmit_interval 0
(the NAKACK2 design: no retransmission over TCP). STABLE: stable_max_bytes 1 MB (JGroups 2 MB) and every 5 s.

JGroups measured on a 2-core machine (steady state, 100 B): NAKACK2 over UDP 2.35 M msgs/s, over TCP 1.52 M.

Run: .venv/bin/python benchmarks/bench_nakack2.py [--nodes 3,5] [--modes udp,tcp] [--count N] [--heap] [--no-ceiling]
     [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# BENCH_TREE=/path/to/another/checkout measures that tree's node code (a "before") with this script.
sys.path.insert(0, os.environ.get("BENCH_TREE", str(Path(__file__).resolve().parent.parent)))

import mcast_ceiling  # benchmarks/, next to this script
from benchresults import recorded
from nodecluster import all_delivered, cpu_seconds, multicast, start_cluster, stop, stream_span, warm_up

JGROUPS = {"udp": 2_350_000, "tcp": 1_520_000}


def n2_state(client) -> dict:
    return client.get("/state")["nakack2"]


def counters(clients) -> dict:
    out: dict = {}
    for c in clients:
        for k, v in n2_state(c)["counters"].items():
            out[k] = out.get(k, 0) + v
    return out


def run_case(transport: str, n: int, count: int, size: int, workdir: Path) -> dict:
    xmit = 1.0 if transport == "udp" else 0
    config = {"xmit_interval": xmit, "stable_interval": 5.0, "stable_max_bytes": 1_000_000}
    procs = start_cluster(n, "nakack2", config, workdir / f"{transport}-{n}", transport)
    names = [p.name for p in procs]
    try:
        clients = [p.client() for p in procs]
        warm_up(clients, names, 5_000, size)
        before = counters(clients)
        cpu0 = [cpu_seconds(p.proc.pid) for p in procs]
        wall0 = time.monotonic()
        t0 = time.time()
        multicast(clients, 1, count, size)
        peak = 0
        deadline = time.monotonic() + 600
        while not all_delivered(clients, names, 1, count):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{transport}-{n}: not all delivered in 600 s")
            peak = max([peak] + [n2_state(c)["retransmit_table"] for c in clients])
            time.sleep(0.2)
        cpu = [cpu_seconds(p.proc.pid) - c0 for p, c0 in zip(procs, cpu0)]
        busiest = max(cpu) / (time.monotonic() - wall0)
        # Each delivery's time comes from the samples (run clock), the start from the streams.
        start, last = stream_span(clients, names, 1)
        elapsed = last - start if last > start else time.time() - t0
        after = counters(clients)
        diff = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        mcasts = n * count
        deliveries = mcasts * n
        wire = (
            diff.get("tx_MSG", 0) * (n - 1)
            + diff.get("retransmit", 0)
            + diff.get("tx_NAK_XMIT_REQ", 0)
            + (diff.get("tx_STABLE", 0) + diff.get("tx_HIGHEST_SEQNO", 0)) * (n - 1)
        )
        return {
            "case": f"{transport}-{n}",
            "msgs_per_s": mcasts / elapsed,
            "elapsed_s": elapsed,
            "multicasts": mcasts,
            "wire_per_mcast": wire / deliveries,
            "copies": diff.get("tx_MSG", 0) * (n - 1),
            "retransmits": diff.get("retransmit", 0),
            "xmit_reqs": diff.get("tx_NAK_XMIT_REQ", 0),
            "stables": diff.get("tx_STABLE", 0),
            "highest": diff.get("tx_HIGHEST_SEQNO", 0),
            "peak_table": peak,
            # CPU of the busiest member per multicast it delivered (the sender's own included),
            # and the rate scaled to a full core for it: comparable on a machine others load.
            "us_per_delivery": max(cpu) / mcasts * 1e6,
            "all_us_per_mcast": sum(cpu) / mcasts * 1e6,
            "per_busy_core": mcasts / elapsed / max(busiest, 1e-9),
        }
    finally:
        stop(procs)


def run_heap(transport: str, n: int, rate: int, seconds: int, size: int, workdir: Path) -> None:
    for label, stable in (("STABLE every 1 s", 1.0), ("STABLE off (1000 s)", 1000.0)):
        xmit = 1.0 if transport == "udp" else 0
        config = {"xmit_interval": xmit, "stable_interval": stable, "stable_max_bytes": 10**9}
        procs = start_cluster(n, "nakack2", config, workdir / f"heap-{stable}", transport)
        try:
            clients = [p.client() for p in procs]
            for c in clients:
                c.post("/send", {"to": "*", "duration": seconds, "rate": rate, "size": size, "stream": 0})
            row = []
            for _ in range(seconds):
                time.sleep(1.0)
                row.append(max(n2_state(c)["retransmit_table"] for c in clients))
            held = row[-1]
            print(
                f"| {transport}-{n} | {label} | {rate}/s per sender | "
                + " ".join(str(x) for x in row)
                + f" | {held} msgs, {held * (size + 9) / 1e6:.2f} MB payload+header |"
            )
        finally:
            stop(procs)


@recorded(
    "bench_nakack2",
    goals={
        "NAKACK2 multicast throughput": "NAKACK2 multicasts close to the stripped-CPython ceiling of the same work",
        "ceiling": "the node within a small factor of the ceiling",
        "retransmit table": "STABLE keeps the retransmit table bounded under a steady load",
    },
)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="3,5")
    parser.add_argument("--modes", default="udp,tcp")
    parser.add_argument("--count", type=int, default=20_000, help="multicasts per member in the measured stream")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--heap", action="store_true", help="measure the retransmit table with and without STABLE")
    parser.add_argument("--rate", type=int, default=1000, help="--heap: multicasts per second per member")
    parser.add_argument("--seconds", type=int, default=8, help="--heap: length of the paced load")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the stripped members' ceiling")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-nakack2-"))
    if args.heap:
        print("# NAKACK2 retransmit table under a paced load\n")
        print("| case | STABLE | load | held messages at the end of each second | at the end |")
        print("| --- | --- | --- | --- | --- |")
        for mode in args.modes.split(","):
            run_heap(mode, 3, args.rate, args.seconds, args.size, workdir)
        return 0
    cores = os.cpu_count() or 1
    print("# NAKACK2 multicast throughput on loopback\n")
    print(
        "| case | msgs/s (delivered at every member) | x JGroups | NAKACK2 msgs on the wire per delivery "
        "| retransmits | XMIT-REQs | STABLE | HIGHEST_SEQNO | peak table | busiest member: CPU us per multicast "
        "| msgs/s per busy core | all members: CPU us per multicast | bound with all cores free |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    ceilings = []
    for mode in args.modes.split(","):
        for n in (int(x) for x in args.nodes.split(",")):
            r = run_case(mode, n, args.count, args.size, workdir)
            print(
                f"| {r['case']} | {r['msgs_per_s']:,.0f} | {r['msgs_per_s'] / JGROUPS[mode]:.3f} | "
                f"{r['wire_per_mcast']:.4f} | {r['retransmits']} | {r['xmit_reqs']} | {r['stables']} | "
                f"{r['highest']} | {r['peak_table']} | {r['us_per_delivery']:.2f} | {r['per_busy_core']:,.0f} | "
                f"{r['all_us_per_mcast']:.2f} | {cores * 1e6 / r['all_us_per_mcast']:,.0f} |",
                flush=True,
            )
            if mode == "udp" and not args.no_ceiling:
                ceilings.append((r, n, mcast_ceiling.run(n, args.count, args.size)))
    if ceilings:
        print("\n# NAKACK2 against its ceiling (stripped CPython members)")
        print(
            "\n| members | ceiling msgs/s | node x ceiling | ceiling: busiest member CPU us per multicast "
            "| all members | bound with all cores free | node x ceiling (bound) |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for r, n, c in ceilings:
            bound = cores * 1e6 / c["all_us_per_mcast"]
            print(
                f"| {n} | {c['msgs_per_s']:,.0f} | {r['msgs_per_s'] / c['msgs_per_s']:.2f} | {c['us_per_mcast']:.2f} "
                f"| {c['all_us_per_mcast']:.2f} | {bound:,.0f} | {c['all_us_per_mcast'] / r['all_us_per_mcast']:.2f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
