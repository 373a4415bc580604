"""MCAST (the MCAST design) against NAKACK2: multicast throughput on loopback processes, in the same run,
and memory under a partitioned receiver (simulator: the same layer code, exact and repeatable).

Throughput (`python -m splitbrain.node` processes over UDP, static view, as benchmarks/bench_nakack2.py): for
each case fresh node processes start; every member sends a warm-up multicast stream, then the
measured one, `count` multicasts each at rate 0 (as fast as the runtime lets it), all members at
once. msgs/s = (members x count) / (the slowest member's last delivery - the streams' start). The
cases alternate NAKACK2 and MCAST on the same machine in the same run, so their ratio is fair;
MCAST also runs with several capacities.

Memory: the simulator, 3 members, A and B multicast 200/s for 10 s, C cut off from 1.5 s to the
end (static view: nobody removes C). Per node, the peak messages held by the multicast layer
(NAKACK2: its retransmit tables; MCAST: its send and receive windows and blocked sends) and their
payload bytes, sampled every 0.1 s.

Run: .venv/bin/python benchmarks/bench_mcast.py [--nodes 3,5] [--count N] [--capacities 256,1024,4096,16384]
     [--memory-only | --throughput-only] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchresults import recorded
from nodecluster import multicast, start_cluster, stop, stream_span, wait_delivered, warm_up

from splitbrain.harness.scenario import parse_scenario
from splitbrain.harness.sim.simulator import Simulation


def run_case(protocol: str, n: int, count: int, size: int, config: dict, workdir: Path) -> dict:
    procs = start_cluster(n, protocol, config, workdir / f"{protocol}-{n}-{time.monotonic_ns()}")
    names = [p.name for p in procs]
    try:
        clients = [p.client() for p in procs]
        warm_up(clients, names, 2_000, size)
        multicast(clients, 1, count, size)
        wait_delivered(clients, names, 1, count, 600, 0.1)
        start, last = stream_span(clients, names, 1)
        state = [c.get("/state") for c in clients]
        layer = [s.get(protocol, {}) for s in state]
        counters: dict = {}
        for entry in layer:
            for k, v in entry.get("counters", {}).items():
                counters[k] = counters.get(k, 0) + v
        elapsed = last - start
        return {"msgs_per_s": n * count / elapsed, "elapsed_s": elapsed, "counters": counters}
    finally:
        stop(procs)


def memory(protocol: str, config: dict) -> dict[str, tuple[int, int]]:
    """Peak (messages, payload bytes) held by the multicast layer per node, C cut off from 1.5 s."""
    sc = parse_scenario(
        {
            "name": f"memory-{protocol}",
            "protocol": protocol,
            "transport": "udp",
            "nodes": 3,
            "config": config,
            "workload": [
                {"from": "A", "to": "all", "rate": 200, "duration": 10, "size": 100},
                {"from": "B", "to": "all", "rate": 200, "duration": 10, "size": 100},
            ],
            "schedule": [{"at": 1.5, "partition": [["A", "B"], ["C"]]}],
            "duration": 10,
            "settle": 0,
        }
    )
    sim = Simulation(sc)
    sim.start()
    for stream in sc.streams:
        sim.add_stream(stream)
    steps = dict(enumerate(sc.schedule))
    peak: dict[str, tuple[int, int]] = {n: (0, 0) for n in sc.nodes}
    for k in range(1, 101):
        t = k * 0.1
        sim.advance(t)
        for step in steps.values():
            if abs(step.at - t) < 1e-9:
                sim.apply_step(step, steps)
        for name, node in sim.nodes.items():
            stack = node.stack
            assert stack is not None
            layer = stack.layers[1]
            if protocol == "mcast":
                held, held_bytes = layer.held(), layer.held_bytes()
            else:
                msgs = [m for t_ in layer.tables.values() for m in t_.msgs.values()]
                held, held_bytes = len(msgs), sum(len(m.payload) for m in msgs)
            peak[name] = (max(peak[name][0], held), max(peak[name][1], held_bytes))
    sim.finish()
    return peak


@recorded(
    "bench_mcast",
    goals={
        "MCAST against NAKACK2": "MCAST multicasts about as fast as NAKACK2 on the same machine in the same run",
        "MCAST capacity": "a larger window lets MCAST senders block less",
        "Memory under a partitioned receiver": "MCAST holds at most its capacity per sender "
        "while a receiver is cut off; "
        "NAKACK2 grows",
    },
)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="3,5")
    parser.add_argument("--count", type=int, default=10_000, help="multicasts per member in the measured stream")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--capacities", default="256,1024,4096,16384")
    parser.add_argument("--memory-only", action="store_true")
    parser.add_argument("--throughput-only", action="store_true")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-mcast-"))
    if not args.memory_only:
        print("# MCAST against NAKACK2, multicast throughput\n")
        print("| nodes | NAKACK2 msgs/s | MCAST msgs/s (capacity 16384) | MCAST / NAKACK2 | MCAST XMIT-REQs |")
        print("| --- | --- | --- | --- | --- |")
        for n in (int(x) for x in args.nodes.split(",")):
            n2 = run_case("nakack2", n, args.count, args.size, {"xmit_interval": 1.0}, workdir)
            mc = run_case("mcast", n, args.count, args.size, {"xmit_interval": 1.0}, workdir)
            print(
                f"| {n} | {n2['msgs_per_s']:,.0f} | {mc['msgs_per_s']:,.0f} | "
                f"{mc['msgs_per_s'] / n2['msgs_per_s']:.2f} | {mc['counters'].get('tx_MCAST_XMIT_REQ', 0)} |",
                flush=True,
            )
        print("\n# MCAST capacity, 3 nodes\n")
        print("| capacity | MCAST msgs/s, 3 nodes | blocks | XMIT-REQs |")
        print("| --- | --- | --- | --- |")
        for cap in (int(x) for x in args.capacities.split(",")):
            mc = run_case("mcast", 3, args.count, args.size, {"xmit_interval": 1.0, "capacity": cap}, workdir)
            c = mc["counters"]
            print(
                f"| {cap} | {mc['msgs_per_s']:,.0f} | {c.get('blocks', 0)} | {c.get('tx_MCAST_XMIT_REQ', 0)} |",
                flush=True,
            )
    if not args.throughput_only:
        print("\n# Memory under a partitioned receiver (simulator)\n")
        print("| protocol | settings | peak held per node A / B / C (msgs) | peak payload bytes A / B / C |")
        print("| --- | --- | --- | --- |")
        cases = [
            ("nakack2", {"xmit_interval": 0.2, "stable_interval": 1.0}),
            ("mcast", {"xmit_interval": 0.2, "capacity": 256}),
            ("mcast", {"xmit_interval": 0.2, "capacity": 1024}),
        ]
        for protocol, config in cases:
            peak = memory(protocol, config)
            msgs = " / ".join(str(peak[n][0]) for n in "ABC")
            held = " / ".join(str(peak[n][1]) for n in "ABC")
            print(f"| {protocol} | {config} | {msgs} | {held} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
