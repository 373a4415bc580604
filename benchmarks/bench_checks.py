"""Throughput of the plain-Python checkers (harness.checks), per check, in events per second.

The log judged is the simulator's 5-node case of bench_protocol.py: every ordered pair sending 200
msgs/s for `--duration` virtual seconds (60 by default: about 516 k events) with 10 % loss,
healed at the end. Each check runs alone over the merged, time-sorted log (what run_checks hands
it), then all of them together; the best of `--repeat` runs is reported.

Run: .venv/bin/python benchmarks/bench_checks.py [--duration 60] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_protocol  # the scenario shapes live there
from benchresults import Results, add_json_option

from splitbrain.harness.checks import CHECKS, run_checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="virtual seconds of traffic (default 60)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per check; the best is shown (default 3)")
    add_json_option(parser)
    args = parser.parse_args(argv)
    results_doc = Results("bench_checks", argv)

    data = {
        "protocol": "unicast3",
        **bench_protocol.lossy_scenario("checks", bench_protocol.mesh_workload(args.duration), args.duration),
    }
    result = bench_protocol.simulate(data, check_invariants=False)
    events = result.all_events()
    print(f"log: {len(events):,} events, {result.stats['msgs_sent']:,} messages sent\n")
    print("| check | best s | events/s | verdict |")
    print("| --- | --- | --- | --- |")
    rows = []
    for name in [*CHECKS, "all"]:
        names = list(CHECKS) if name == "all" else [name]
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            results = run_checks(events, names)
            best = min(best, time.perf_counter() - t0)
        verdict = "PASS" if all(r.passed for r in results) else "FAIL"
        print(f"| {name} | {best:.2f} | {len(events) / best:,.0f} | {verdict} |")
        rows.append([name, f"{best:.2f}", f"{len(events) / best:,.0f}", verdict])
    results_doc.table(
        "Checker throughput",
        ["check", "best s", "events/s", "verdict"],
        rows,
        goal="the plain-Python checkers judge a 60 s, 5-node run's half a million events in seconds",
        note=f"{len(events):,} events, {result.stats['msgs_sent']:,} messages sent; best of {args.repeat} runs.",
    )
    results_doc.write(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
