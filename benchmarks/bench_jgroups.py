"""JGroups 2.12 nodes: throughput and launch to full view.

- throughput: 2 nodes, 100 B unicasts over UDP (UNICAST2), one sender, flat out: a bare JGroups
  sender and receiver without splitbrain (node/jgroups/java/.../Bare.java, two JVMs, the node's
  default stack), the JGroups node with its event log off (`event_log: false`), and on. The rate
  is messages / seconds from the first delivery (bare) or the POST /send (node) to the last.
- launch: 3 JGroups nodes on the local backend, from `start()` to every node's view listing all
  three (what the harness waits for before a scenario's time 0), classes already built.

Run: .venv/bin/python benchmarks/bench_jgroups.py [--messages 200000] [--runs 3] [--parts throughput,launch]
     [--json FILE]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import requests
from benchresults import recorded
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from splitbrain.harness.conformance import Pair, jgroups_node
from splitbrain.node.jgroups import launch


def bare(n: int) -> float:
    group = f"239.77.{random.randint(1, 250)}.{random.randint(1, 250)}"
    port = str(random.randint(30000, 60000))
    cluster = f"bare-{time.time_ns()}"
    props = ["-Djgroups.bind_addr=127.0.0.1", f"-Djgroups.udp.mcast_addr={group}", f"-Djgroups.udp.mcast_port={port}"]
    base = [
        "java",
        *launch.JVM_FLAGS,
        *props,
        "-cp",
        f"{launch.CLASSES}:{launch.DEFAULT_JAR}",
        "splitbrain.jgroups.Bare",
    ]
    recv = subprocess.Popen(
        [*base, "receive", str(n), cluster], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert recv.stdout is not None
    assert recv.stdout.readline().strip() == "ready"
    send = subprocess.Popen([*base, "send", str(n), cluster], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    secs = float(recv.stdout.readline())
    recv.wait(60)
    send.wait(60)
    return n / secs


def node(n: int, event_log: bool) -> float:
    impl = jgroups_node()
    impl.extra["event_log"] = event_log
    with tempfile.TemporaryDirectory() as tmp:
        pair = Pair(impl, Path(tmp))
        try:
            for name in ("A", "B"):
                pair.spawn(name)
            for name in ("A", "B"):
                pair.wait_healthy(name)
            s = requests.Session()
            s.trust_env = False
            Retrying(stop=stop_after_delay(30), wait=wait_fixed(0.1), retry=retry_if_result(lambda ok: not ok))(
                lambda: len((s.get(pair.url("B", "/state")).json().get("membership") or {}).get("members", [])) == 2
            )
            t0 = time.monotonic()
            s.post(
                pair.url("A", "/send"),
                json={"to": "B", "count": n, "rate": 0},
                headers={"X-Splitbrain-Token": "conformance-token"},
            )
            Retrying(stop=stop_after_delay(600), wait=wait_fixed(0.02), retry=retry_if_result(lambda ok: not ok))(
                lambda: s.get(pair.url("B", "/delivered")).json()["total"] >= n
            )
            return n / (time.monotonic() - t0)
        finally:
            pair.close()


def launch_3() -> float:
    from splitbrain.harness.backends.local import LocalBackend
    from splitbrain.harness.testlib import cluster_scenario

    scenario = cluster_scenario(3, protocol="jgroups", recovery_bound=5)
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalBackend().create_cluster(scenario, Path(tmp), seed=0)
        try:
            t0 = time.monotonic()
            cluster.start()
            return time.monotonic() - t0
        finally:
            cluster.teardown()


@recorded(
    "bench_jgroups",
    goals={"": "the JGroups node's throughput close to bare JGroups; a 3-node cluster formed in a few seconds"},
)
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--parts", default="throughput,launch", help="throughput, launch, bare (the baseline)")
    args = ap.parse_args(argv)
    launch.ensure_built()
    out: dict[str, list[float]] = {}
    parts = args.parts.split(",")
    for _ in range(args.runs):
        if "bare" in parts:
            out.setdefault("bare msgs/s", []).append(bare(args.messages))
        if "throughput" in parts:
            out.setdefault("node, log off msgs/s", []).append(node(args.messages, False))
            out.setdefault("node, log on msgs/s", []).append(node(args.messages, True))
        if "launch" in parts:
            out.setdefault("launch to full view, 3 nodes (s)", []).append(launch_3())
    print(f"# JGroups 2.12 nodes ({args.messages:,} messages per throughput run)\n")
    print("| what | median | runs |")
    print("| --- | --- | --- |")
    for key, values in out.items():
        print(f"| {key} | {statistics.median(values):,.2f} | {', '.join(f'{v:,.2f}' for v in values)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
