"""What containers cost: cluster start and teardown, per-scenario overhead, and UNICAST3 throughput
between two containers against two local processes.

1. Cluster start and teardown (5 nodes): `cluster.start()` until every node answers GET /health
   with its incarnation, and `cluster.teardown()` (graceful SIGTERM, logs and event files
   collected, containers and network removed); the same for 5 local processes. The docker start
   is split into image check, network, container create+start and health wait.
2. Overhead per scenario: wall time of `run_scenario` for the same scenario on local and docker
   (the scenario's own time is identical; the difference is what containers cost).
3. Throughput: two nodes, A streams to B at rate 0 ("as fast as possible") through the admin API
   (POST /send), measured as bench_node.py does: messages / (delivery time of the last message at
   B - the stream's start at A), both on the run clock (GET /samples, GET /streams). The same
   harness cluster code starts the nodes on both backends (event logs on, as in every run); the
   ratio docker / local is the number to watch. Over TCP on docker the links can also go through
   the Toxiproxy container (no toxics): the price of a proxy hop.
4. Image build (ci/images): `ci/images all` when current, and `ci/images node --force` (the node
   image rebuilt from the layer cache, as after a source change). From nothing (`ci/images clean
   --all` then `ci/images all`) only with --from-nothing: it removes every splitbrain image and
   container on the engine, including other sessions' (it needs mmdebstrap and a Debian mirror).

Run: .venv/bin/python benchmarks/bench_docker.py [--quick] [--repeat 3] [--measure-s 3]
     [--skip-build] [--from-nothing] [--json FILE]
Prints markdown tables.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_node import delivered_count, latencies_ms, percentile  # noqa: E402
from benchresults import recorded  # noqa: E402

from splitbrain.harness.backends import ClusterOptions, get_backend  # noqa: E402
from splitbrain.harness.run import run_scenario  # noqa: E402
from splitbrain.harness.scenario import load_scenario  # noqa: E402
from splitbrain.harness.testlib import cluster_scenario, eventually  # noqa: E402


def wait_for(predicate, timeout_s: float, what: str, every_s: float = 0.02):
    return eventually(predicate, timeout=timeout_s, interval=every_s, what=what)


def med(values):
    return statistics.median(values) if values else float("nan")


# ---- 1. start and teardown ----------------------------------------------------------------------


def start_teardown(backend_name: str, backend, nodes: int, repeat: int, workdir: Path) -> dict:
    starts, teardowns, parts = [], [], []
    for i in range(repeat):
        sc = cluster_scenario(nodes, name=f"start{nodes}")
        cluster = backend.create_cluster(sc, workdir / f"{backend_name}-start-{i}", seed=i)
        t0 = time.monotonic()
        try:
            cluster.start()
            starts.append(time.monotonic() - t0)
            parts.append(dict(getattr(cluster, "timings", {})))
        finally:
            t1 = time.monotonic()
            cluster.teardown()
            teardowns.append(time.monotonic() - t1)
    out = {"start_s": med(starts), "start_min_s": min(starts), "teardown_s": med(teardowns)}
    if parts and parts[0]:
        for key in ("image_s", "network_s", "containers_s", "healthy_s"):
            out[key] = med([p.get(key, 0.0) for p in parts])
    return out


# ---- 2. per-scenario overhead --------------------------------------------------------------------


def scenario_wall(name: str, backend: str, repeat: int, workdir: Path, client=None) -> tuple[float, float, bool]:
    """(median wall time, scenario time, all passed) of run_scenario."""
    path = ROOT / "scenarios" / f"{name}.yaml"
    walls, ok = [], True
    scenario_s = 0.0
    for _ in range(repeat):
        t0 = time.monotonic()
        outcome = run_scenario(
            load_scenario(path),
            backend=backend,
            out=workdir / f"runs-{backend}",
            backend_options={"client": client} if client is not None else None,
        )
        walls.append(time.monotonic() - t0)
        scenario_s = outcome.result.stats.get("scenario_time_s", 0.0)
        ok = ok and outcome.verdict.passed
    return med(walls), scenario_s, ok


# ---- 3. throughput --------------------------------------------------------------------------------


def throughput(
    backend_name: str,
    backend,
    transport: str,
    injector: str | None,
    measure_s: float,
    repeat: int,
    workdir: Path,
    size: int = 100,
) -> dict:
    rates, p50s, p99s, retx = [], [], [], []
    for i in range(repeat):
        sc = cluster_scenario(2, transport=transport, name=f"tput-{transport}")
        cluster = backend.create_cluster(
            sc,
            workdir / f"{backend_name}-{transport}-{injector}-{i}",
            seed=i,
            options=ClusterOptions(injector=injector),
        )
        with cluster:
            cluster.start()
            a, b = cluster.admin("A"), cluster.admin("B")
            for admin in (a, b):
                admin.view(["A", "B"], 1)
            warm = 20_000
            t0 = time.monotonic()
            a.send("B", rate=0, count=warm, size=size, stream=0)
            wait_for(lambda: delivered_count(b, "A", 0) >= warm, 120, "warm-up delivered")  # noqa: B023 - called here
            rough = warm / max(time.monotonic() - t0, 1e-3)
            count = max(64 * 50, int(rough * measure_s) // 64 * 64)
            retx0 = a.state()["unicast3"]["counters"].get("retransmit", 0)
            a.send("B", rate=0, count=count, size=size, stream=1)
            wait_for(
                lambda: delivered_count(b, "A", 1) >= count,  # noqa: B023 - called here, in this iteration
                max(120, measure_s * 30),
                f"{count} delivered",
                every_s=0.05,
            )
            sa, sb = a.get("/samples"), b.get("/samples")
            stream = next(s for s in a.streams() if s["stream"] == 1)
            delivered_at = dict((n, t) for n, t in sb["delivered"]["A"]["1"])
            elapsed = delivered_at[count] - stream["started"]
            lat = latencies_ms(sa["sent"]["1"], sb["delivered"]["A"]["1"])
            rates.append(count / elapsed)
            p50s.append(percentile(lat, 0.5))
            p99s.append(percentile(lat, 0.99))
            retx.append(a.state()["unicast3"]["counters"].get("retransmit", 0) - retx0)
    return {
        "msgs_s": med(rates),
        "best_msgs_s": max(rates),
        "p50_ms": med(p50s),
        "p99_ms": med(p99s),
        "retx": med(retx),
    }


# ---- 4. image build ----------------------------------------------------------------------------------


def timed(argv: list[str]) -> tuple[float, int, str]:
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, stdin=subprocess.DEVNULL)
    return time.monotonic() - t0, proc.returncode, (proc.stdout + proc.stderr)


def image_builds(from_nothing: bool) -> list[tuple[str, float, str]]:
    rows = []
    ci = [sys.executable, str(ROOT / "ci" / "images")]
    if from_nothing:
        seconds, code, _ = timed([*ci, "clean", "--all"])
        seconds, code, out = timed([*ci, "all"])
        rows.append(
            (
                "from nothing: `ci/images clean --all && ci/images all`",
                seconds,
                "ok" if code == 0 else f"exit {code}: {out[-300:]}",
            )
        )
    seconds, code, out = timed([*ci, "all"])
    note = "current: nothing built" if "node image is current" in out else "built (sources had changed)"
    rows.append(("`ci/images all` (first call)", seconds, note if code == 0 else f"exit {code}"))
    seconds, code, out = timed([*ci, "node", "--force"])
    steps = [
        line.split("ci/images: ", 1)[1]
        for line in out.splitlines()
        if line.startswith("ci/images: ") and line.rstrip().endswith(" s")
    ]
    rows.append(
        (
            "`ci/images node --force` (from the layer cache)",
            seconds,
            ("; ".join(steps[-3:]) if code == 0 else f"exit {code}"),
        )
    )
    seconds, code, out = timed([*ci, "all"])
    rows.append(("`ci/images all` when current", seconds, "ok" if code == 0 else f"exit {code}"))
    return rows


# ---- main -------------------------------------------------------------------------------------------


@recorded(
    "bench_docker",
    goals={
        "Cluster start": "a 5-node container cluster healthy within a few seconds of the local one",
        "Overhead per scenario": "containers add seconds per scenario, not minutes",
        "throughput": "UNICAST3 between two containers close to two local processes",
    },
)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, shorter measurements")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--measure-s", type=float, default=3.0)
    parser.add_argument("--skip-build", action="store_true", help="no image build measurements")
    parser.add_argument(
        "--from-nothing",
        action="store_true",
        help="also time a build from nothing (removes every splitbrain image and container!)",
    )
    args = parser.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    measure_s = 1.5 if args.quick else args.measure_s

    docker = get_backend("docker")
    ok, why = docker.check()
    if not ok:
        print(f"docker backend unavailable: {why}")
        return 2
    local = get_backend("local")
    import os

    cores = os.cpu_count()
    print(f"# bench_docker ({cores} cores; {why})\n")
    if not args.skip_build:
        rows = image_builds(args.from_nothing)
        print("## Image build (ci/images)\n\n| what | seconds | note |\n|---|---:|---|")
        for what, seconds, note in rows:
            print(f"| {what} | {seconds:.1f} | {note} |")
        print()
    t0 = time.monotonic()
    docker.ensure_image()
    print(f"(image ready in {time.monotonic() - t0:.1f} s)\n")

    with tempfile.TemporaryDirectory(prefix="bench-docker-") as tmp:
        work = Path(tmp)
        print("## Cluster start (all healthy) and teardown\n")
        print(
            "| backend | nodes | start (median) | start (best) | teardown | image check | network | "
            "create+start | health wait |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        )
        for name, backend in (("local", local), ("docker", docker)):
            r = start_teardown(name, backend, 5, repeat, work)
            extra = (
                f"{r['image_s']:.2f} s | {r['network_s']:.2f} s | {r['containers_s']:.2f} s | {r['healthy_s']:.2f} s"
                if "image_s" in r
                else "- | - | - | -"
            )
            print(
                f"| {name} | 5 | {r['start_s']:.2f} s | {r['start_min_s']:.2f} s | {r['teardown_s']:.2f} s | {extra} |"
            )
        print()

        print("## Overhead per scenario (run_scenario wall time)\n")
        print(
            "| scenario | scenario time | local wall | docker wall | docker - local | all passed |\n"
            "|---|---:|---:|---:|---:|---|"
        )
        for name in ("smoke", "steady"):
            lw, ls, lok = scenario_wall(name, "local", repeat, work)
            dw, ds, dok = scenario_wall(name, "docker", repeat, work, client=docker.client)
            print(f"| {name} | {ds:.1f} s | {lw:.2f} s | {dw:.2f} s | {dw - lw:+.2f} s | {lok and dok} |")
        print()

        print(f"## UNICAST3 throughput, 2 nodes, 100 B, rate 0 (median of {repeat}, {measure_s:g} s each)\n")
        print(
            "| transport | path | local msgs/s | docker msgs/s | docker / local | p50 local / docker (ms) | "
            "retx local / docker |\n|---|---|---:|---:|---:|---:|---:|"
        )
        for transport in ("udp", "tcp"):
            lr = throughput("local", local, transport, None, measure_s, repeat, work)
            dr = throughput("docker", docker, transport, "iptables", measure_s, repeat, work)
            print(
                f"| {transport} | direct | {lr['msgs_s']:,.0f} | {dr['msgs_s']:,.0f} | "
                f"{dr['msgs_s'] / lr['msgs_s']:.2f} | {lr['p50_ms']:.1f} / {dr['p50_ms']:.1f} | "
                f"{lr['retx']:.0f} / {dr['retx']:.0f} |"
            )
            if transport == "tcp":
                pr = throughput("docker", docker, "tcp", "toxiproxy", measure_s, repeat, work)
                print(
                    f"| tcp | docker via Toxiproxy | {lr['msgs_s']:,.0f} | {pr['msgs_s']:,.0f} | "
                    f"{pr['msgs_s'] / lr['msgs_s']:.2f} | {lr['p50_ms']:.1f} / {pr['p50_ms']:.1f} | "
                    f"{lr['retx']:.0f} / {pr['retx']:.0f} |"
                )
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
