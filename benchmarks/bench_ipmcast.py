"""IP multicast vs N unicasts: multicast throughput and what goes on the wire, 3 and 5 nodes.

For each case (protocol, nodes, transport) fresh node processes start on unique 127.x.y.z
addresses (static full view, UDP, xmit_interval 1 s); every member sends a warm-up multicast
stream, then the measured one: `count` multicasts of `size` bytes at rate 0, all members at once.
"N unicasts" is today's UDP transport (one copy per member); "IP multicast" sets `mcast_group`,
so each (bundled) multicast leaves once, to the group on loopback.

- msgs/s: multicasts delivered at every member per second (as bench_nakack2.py);
- datagrams out / mcast: datagrams all nodes sent (unicast and multicast, /metrics
  splitbrain_frames_total{direction="out"}) per multicast sent, measured stream only;
- bytes out / mcast: the bytes of those datagrams per multicast;
- datagrams in / mcast: frames handed to the nodes' stacks (after a node dropped its own looped-back
  datagrams and those not addressed to it) per multicast;
- via group: the share of multicasts whose copies left as one datagram to the group.

`--rate R` paces the measured stream at R multicasts/s per member instead (msgs/s is then the
rate; what matters is the wire): paced multicasts rarely share a bundle, so N unicasts cost N - 1
datagrams per multicast and IP multicast one.

Loopback copies a multicast datagram once per member socket in the kernel, as a bridge would per
port: the sender's saving is in syscalls, encodings and its own bytes out.

Run: .venv/bin/python benchmarks/bench_ipmcast.py [--nodes 3,5] [--protocols nakack2,mcast] [--count N] [--rate R]
     [--json FILE]
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchresults import recorded
from nodecluster import multicast, start_cluster, stop, stream_span, wait_delivered, warm_up

_METRIC = re.compile(r'^splitbrain_(frames|bytes)_total\{direction="(in|out)"\} (\S+)$', re.M)


def group_address() -> str:
    """A random administratively scoped group and port, so that concurrent runs do not share one."""
    rng = random.SystemRandom()
    return f"239.{rng.randint(1, 254)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}:{rng.randint(20000, 60999)}"


def wire(clients) -> dict[str, float]:
    """frames/bytes in/out summed over the nodes, plus multicasts sent via the group."""
    out: dict[str, float] = {"via_group": 0}
    for c in clients:
        for kind, direction, value in _METRIC.findall(c.get("/metrics")):
            out[f"{kind}_{direction}"] = out.get(f"{kind}_{direction}", 0) + float(value)
        out["via_group"] += (c.get("/state").get("ip_multicast") or {}).get("multicasts", 0)
    return out


def run_case(protocol: str, n: int, ip_multicast: bool, count: int, size: int, rate: int, workdir: Path) -> dict:
    label = "IP multicast" if ip_multicast else "N unicasts"
    extra = {"mcast_group": group_address()} if ip_multicast else {}
    workdir = workdir / f"{protocol}-{n}-{int(ip_multicast)}"
    procs = start_cluster(n, protocol, {"xmit_interval": 1.0}, workdir, extra=extra)
    names = [p.name for p in procs]
    try:
        clients = [p.client() for p in procs]
        warm_up(clients, names, 2_000, size)
        before = wire(clients)
        multicast(clients, 1, count, size, rate)
        wait_delivered(clients, names, 1, count, 600, 0.2)
        start, last = stream_span(clients, names, 1)
        elapsed = last - start
        after = wire(clients)
        diff = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        mcasts = n * count
        return {
            "case": f"{protocol}, {n} nodes, {label}",
            "msgs_per_s": mcasts / elapsed,
            "frames_out": diff.get("frames_out", 0) / mcasts,
            "bytes_out": diff.get("bytes_out", 0) / mcasts,
            "frames_in": diff.get("frames_in", 0) / mcasts,
            "via_group": diff["via_group"] / mcasts,
        }
    finally:
        stop(procs)


@recorded(
    "bench_ipmcast", goals={"IP multicast": "with IP multicast a multicast leaves a sender as one datagram, not N - 1"}
)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="3,5")
    parser.add_argument("--protocols", default="nakack2")
    parser.add_argument("--count", type=int, default=10_000, help="multicasts per member in the measured stream")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rate", type=int, default=0, help="multicasts/s per member (0: as fast as possible)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-ipmcast-"))
    print("# IP multicast vs N unicasts\n")
    print("| case | msgs/s | datagrams out / mcast | bytes out / mcast | datagrams in / mcast | via group |")
    print("| --- | --- | --- | --- | --- | --- |")
    for protocol in args.protocols.split(","):
        for n in (int(x) for x in args.nodes.split(",")):
            for ipmc in (False, True):
                r = run_case(protocol, n, ipmc, args.count, args.size, args.rate, workdir)
                print(
                    f"| {r['case']} | {r['msgs_per_s']:,.0f} | {r['frames_out']:.4f} | {r['bytes_out']:.1f} | "
                    f"{r['frames_in']:.4f} | {r['via_group']:.1%} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
