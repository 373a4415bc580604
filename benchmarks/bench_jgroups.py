"""JGroups 2.12 nodes: throughput and launch to full view.

- throughput: 2 nodes, 100 B unicasts over UDP (UNICAST2), one sender, flat out: a bare JGroups
  sender and receiver without splitbrain (node/jgroups/java/.../Bare.java, two JVMs, the node's
  default stack), the JGroups node with its event log off (`event_log: false`), and on. The rate
  is messages / seconds from the first delivery (bare) or the POST /send (node) to the last.
- launch: 3 JGroups nodes on the local backend, from `start()` to every node's view listing all
  three (what the harness waits for before a scenario's time 0), classes already built.
- launch-docker: the same on the docker backend, the JGroups node image already built: network,
  three containers (JVMs), health, full view; the cluster's own timings split it.

Run: .venv/bin/python benchmarks/bench_jgroups.py [--messages 200000] [--runs 3]
     [--parts bare,throughput,launch,launch-docker] [--json benchmarks/results/bench_jgroups.json]
Goal: the event log costs at most 20 % of the bare rate (node with its log on >= 0.8 x bare).
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
from benchresults import Results, add_json_option
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


def launch_3_docker() -> tuple[float, dict[str, float]]:
    from splitbrain.harness.backends.docker import DockerBackend
    from splitbrain.harness.testlib import cluster_scenario

    scenario = cluster_scenario(3, protocol="jgroups", recovery_bound=5)
    backend = DockerBackend()
    backend.ensure_image("jgroups")
    with tempfile.TemporaryDirectory() as tmp:
        cluster = backend.create_cluster(scenario, Path(tmp), seed=0)
        try:
            t0 = time.monotonic()
            cluster.start()
            return time.monotonic() - t0, dict(cluster.timings)
        finally:
            cluster.teardown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--parts", default="bare,throughput,launch", help="bare (the baseline), throughput, launch, launch-docker"
    )
    add_json_option(ap)
    args = ap.parse_args()
    results = Results("bench_jgroups")
    launch.ensure_built()
    out: dict[str, list[float]] = {}
    parts = args.parts.split(",")
    # Interleaved, so a change of the machine's load touches every configuration alike.
    for _ in range(args.runs):
        if "bare" in parts:
            out.setdefault("bare JGroups (Bare.java)", []).append(bare(args.messages))
        if "throughput" in parts:
            out.setdefault("JGroups node, event log off", []).append(node(args.messages, False))
            out.setdefault("JGroups node, event log on", []).append(node(args.messages, True))
        if "launch" in parts:
            out.setdefault("launch to full view, 3 nodes (s)", []).append(launch_3())
        if "launch-docker" in parts:
            total, timings = launch_3_docker()
            out.setdefault("docker launch to full view, 3 nodes (s)", []).append(total)
            for key in ("network_s", "containers_s", "healthy_s", "full_view_s"):
                out.setdefault(f"docker launch: {key.removesuffix('_s')} (s)", []).append(
                    timings.get(key, float("nan"))
                )
    rates = {k: v for k, v in out.items() if "launch" not in k}
    base = statistics.median(rates["bare JGroups (Bare.java)"]) if "bare JGroups (Bare.java)" in rates else None
    rows = []
    for key, values in rates.items():
        med = statistics.median(values)
        rows.append([key, round(med), ", ".join(f"{v:.0f}" for v in values), round(med / base, 2) if base else "-"])
    headers = ["configuration", "msgs/s (median)", "runs", "x bare"]
    print("# JGroups 2.12.2 throughput, 2 nodes, 100 B unicasts over UDP (UNICAST2), one sender\n")
    print("| " + " | ".join(headers) + " |")
    print("|" + " --- |" * len(headers))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    if rows:
        results.table(
            "JGroups 2.12.2 throughput, 2 nodes, 100 B unicasts over UDP (UNICAST2), one sender",
            headers,
            rows,
            goal="the event log costs at most 20 % of the bare rate (log on >= 0.8 x bare)",
            note=f"{args.messages} messages per run, {args.runs} runs of each, interleaved",
        )
    if "launch to full view, 3 nodes (s)" in out:
        values = out["launch to full view, 3 nodes (s)"]
        print(
            f"\nlaunch to full view, 3 nodes: median {statistics.median(values):.2f} s of "
            f"{', '.join(f'{v:.2f}' for v in values)}"
        )
        results.table(
            "JGroups 2.12.2 launch to full view, 3 nodes, local backend",
            ["seconds (median)", "runs"],
            [[round(statistics.median(values), 2), ", ".join(f"{v:.2f}" for v in values)]],
            goal="<= 3 s",
        )
    docker_keys = [k for k in out if k.startswith("docker launch")]
    if docker_keys:
        rows = [[k, round(statistics.median(out[k]), 2), ", ".join(f"{v:.2f}" for v in out[k])] for k in docker_keys]
        for row in rows:
            print(f"{row[0]}: median {row[1]} of {row[2]}")
        results.table(
            "JGroups 2.12.2 launch to full view, 3 nodes, docker backend",
            ["part", "seconds (median)", "runs"],
            rows,
            goal="<= 3 s",
        )
    results.write(args.json)


if __name__ == "__main__":
    main()
