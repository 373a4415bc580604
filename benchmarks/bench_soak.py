"""A soak: 2 local nodes, A streams to B at full rate for a given time; what its evidence costs.

Two node processes (`python -m splitbrain.node`, UNICAST3, 100 B over UDP by default, event log
on, in a run directory's layout) are started on unique 127.x.y.z addresses; A streams to B "as fast
as possible" (rate 0: the runtime's flow control paces it) for `--seconds`. Measured:

- the run: messages delivered, msgs/s, both nodes' RSS every `--every` seconds (flat or not);
- the evidence: total event-log size, bytes per delivered message, lines;
- judging it with the harness checkers (harness.eventlog.read_run + harness.checks.run_checks,
  the general checks, in a fresh process): wall time and peak RSS (getrusage of that process);
- judging it with Spark (`splitbrain analyze RUN_DIR`): wall time and the peak of the summed RSS
  of the command's process tree (driver, JVM, Python workers), sampled every 0.2 s.

    .venv/bin/python benchmarks/bench_soak.py [--seconds 300] [--size 100] [--transport udp]
        [--every 5] [--keep DIR] [--no-spark] [--json FILE]

The machine's load changes wall times; the RSS figures are what to compare.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchresults import recorded

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from splitbrain.node.runtime.testing import NodeProcess, free_port, unique_host, wait_for

ROOT = Path(__file__).resolve().parent.parent
STREAM = 1


def rss_mb(pid: int) -> float:
    """Resident set size of a process now, in MB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def tree(pid: int) -> list[int]:
    """The process and its descendants (Linux /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def peak_tree_rss(proc: subprocess.Popen, every_s: float = 0.2) -> float:
    """Wait for `proc`; the peak of its process tree's summed RSS in MB, sampled."""
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, sum(rss_mb(p) for p in tree(proc.pid)))
        time.sleep(every_s)
    return peak


def delivered(client) -> int:
    d = client.get("/delivered")["delivered"]
    return d.get("A", {}).get(str(STREAM), {}).get("count", 0)


def sent(client) -> int | None:
    """How many messages A's stream sent, once it is done (None while it runs)."""
    for s in client.get("/streams")["streams"]:
        if s["stream"] == STREAM and s.get("done"):
            return int(s["sent"])
    return None


def soak(run_dir: Path, seconds: float, size: int, transport: str, every: float) -> dict:
    host_a, host_b = unique_host(), unique_host()
    pa, pb = free_port(host_a), free_port(host_b)
    common = {"transport": transport, "event_log": True, "epoch": time.time(), "admin_token": "soak"}
    cfgs = {
        "A": {"name": "A", "bind": f"{host_a}:{pa}", "admin": f"{host_a}:0", "peers": {"B": f"{host_b}:{pb}"}},
        "B": {"name": "B", "bind": f"{host_b}:{pb}", "admin": f"{host_b}:0", "peers": {"A": f"{host_a}:{pa}"}},
    }
    nodes = {}
    for name, cfg in cfgs.items():
        cfg.update(common, events=str(run_dir / "nodes" / name / "events.jsonl"))
        nodes[name] = NodeProcess(cfg, run_dir / "work" / name)
    trace: list[tuple[float, float, float]] = []
    try:
        for node in nodes.values():
            node.start()
        ca, cb = nodes["A"].client(), nodes["B"].client()
        t0 = time.monotonic()
        ca.post("/send", {"to": "B", "duration": seconds, "rate": 0, "size": size, "stream": STREAM})
        pids = (nodes["A"].proc.pid, nodes["B"].proc.pid)
        while time.monotonic() - t0 < seconds:
            trace.append((round(time.monotonic() - t0, 1), rss_mb(pids[0]), rss_mb(pids[1])))
            time.sleep(min(every, max(0.05, seconds - (time.monotonic() - t0))))
        total = wait_for(lambda: sent(ca), 120, 0.2, "A's stream done")
        wait_for(lambda: delivered(cb) >= total, max(120, seconds), 0.2, f"{total} messages delivered at B")
        elapsed = time.monotonic() - t0
        trace.append((round(elapsed, 1), rss_mb(pids[0]), rss_mb(pids[1])))
    finally:
        codes = [node.stop() for node in nodes.values()]
    if codes != [0, 0]:
        raise RuntimeError(f"nodes exited with {codes}\n{nodes['A'].stderr_tail()}\n{nodes['B'].stderr_tail()}")
    logs = list(run_dir.glob("nodes/*/events.jsonl"))
    log_bytes = sum(p.stat().st_size for p in logs)
    lines = sum(sum(1 for _ in p.open("rb")) for p in logs)
    return {
        "delivered": total,
        "seconds": elapsed,
        "msgs_per_s": total / elapsed,
        "log_bytes": log_bytes,
        "log_lines": lines,
        "bytes_per_msg": log_bytes / total,
        "rss_trace": trace,
    }


_HARNESS_JUDGE = """
import json, resource, sys, time
from splitbrain.harness.checks import run_checks
from splitbrain.harness.eventlog import read_run
t = time.monotonic()
results = run_checks(read_run(sys.argv[1]))
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
passed = {r.name: r.passed for r in results}
print(json.dumps({"seconds": time.monotonic() - t, "peak_rss_mb": peak_mb, "passed": passed}))
"""


def judge_harness(run_dir: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _HARNESS_JUDGE, str(run_dir)], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def judge_spark(run_dir: Path, out: Path) -> dict:
    started = time.monotonic()
    cmd = [sys.executable, "-m", "splitbrain.harness.cli", "analyze", str(run_dir), "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak: list[float] = []
    sampler = threading.Thread(target=lambda: peak.append(peak_tree_rss(proc)))
    sampler.start()
    output = proc.communicate()[0]
    sampler.join()
    verdicts = json.loads((out / "report" / "verdicts.json").read_text()) if (out / "report").exists() else None
    return {
        "seconds": time.monotonic() - started,
        "peak_rss_mb": peak[0] if peak else float("nan"),
        "exit": proc.returncode,
        "tail": output.strip().splitlines()[-3:],
        "verdicts": verdicts,
    }


@recorded(
    "bench_soak",
    goals={"Soak": "the nodes' RSS flat; at most 5 B of event log per delivered message; judged in at most 2 GB"},
)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="how long A streams (default 300)")
    parser.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    parser.add_argument("--transport", choices=("udp", "tcp"), default="udp")
    parser.add_argument("--every", type=float, default=5.0, help="RSS sampling interval in seconds (default 5)")
    parser.add_argument("--keep", metavar="DIR", help="keep the run directory and the analysis in DIR")
    parser.add_argument("--no-spark", action="store_true", help="skip judging with Spark")
    args = parser.parse_args(argv)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="soak-"))
    run_dir = work / f"soak-{int(args.seconds)}s"
    try:
        run = soak(run_dir, args.seconds, args.size, args.transport, args.every)
        print("RSS (s, A MB, B MB): " + ", ".join(f"({t}, {a:.0f}, {b:.0f})" for t, a, b in run["rss_trace"]))
        rss_a = [a for _t, a, _b in run["rss_trace"]] or [float("nan")]
        rss_b = [b for _t, _a, b in run["rss_trace"]] or [float("nan")]
        rows = [
            ["messages delivered", f"{run['delivered']} in {run['seconds']:.1f} s ({run['msgs_per_s']:.0f} msgs/s)"],
            [
                "event log",
                f"{run['log_bytes'] / 1e6:.2f} MB, {run['log_lines']} lines, "
                f"{run['bytes_per_msg']:.2f} B per delivered message",
            ],
            ["node RSS, A (min-max)", f"{min(rss_a):.0f}-{max(rss_a):.0f} MB"],
            ["node RSS, B (min-max)", f"{min(rss_b):.0f}-{max(rss_b):.0f} MB"],
        ]
        harness = judge_harness(run_dir)
        rows.append(
            [
                "harness checkers",
                f"{harness['seconds']:.1f} s, peak RSS {harness['peak_rss_mb']:.0f} MB, passed {harness['passed']}",
            ]
        )
        if not args.no_spark:
            spark = judge_spark(run_dir, work / "analysis")
            rows.append(
                [
                    "splitbrain analyze",
                    f"{spark['seconds']:.1f} s, peak RSS (process tree) {spark['peak_rss_mb']:.0f} MB, "
                    f"exit {spark['exit']}",
                ]
            )
            if spark["exit"]:
                print(f"  splitbrain analyze exit {spark['exit']}: {' | '.join(spark['tail'])}")
        print(f"\n### Soak, {args.seconds:g} s, {args.size} B over {args.transport.upper()}, 2 local nodes\n")
        print("| what | measured |\n| --- | --- |")
        for what, value in rows:
            print(f"| {what} | {value} |")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
