"""Mutation testing of the checkers at full size, printed as Markdown tables.

1. Every planted mutant of a protocol (its spec's `mutations`; --protocol, default unicast3) over the
   first 20 seeds of its chaos set (harness.mutants.chaos_scenario), each seed judged as `splitbrain run --backend sim`
   judges it: seeds to kill (the first killing seed + 1), kill rate (how many of the 20 seeds kill
   it), the checks that failed on the first killing seed, whether the simulator crashed, and the
   size of the schedule the shrinker left. Mutation score = killed / total.
2. The unmutated protocol over 1000 schedules of the same chaos set (seeds 0..999), each in every
   mode a mutant forces besides the seed's own (UNICAST3: resync sync and timestamp), i.e. every
   scenario a mutant could have met on those seeds: the false-failure count, with each failure's
   seed, mode and check.

Wall times depend on the machine and its load. Run:
    .venv/bin/python benchmarks/bench_mutants.py [--protocol P] [--quick] [--jobs J] [--seeds N] [--baseline N]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchresults import recorded

from splitbrain.harness import mutants as mt
from splitbrain.node import protocols


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def measure_mutant(protocol: str, name: str, seeds: int) -> dict:
    """Every seed (no early stop, for the kill rate), then a shrink of the first killing seed."""
    t0 = time.perf_counter()
    mode = mt.mutant_mode(name, protocol)
    kills, first = [], None
    for seed in range(seeds):
        trial = mt.run_trial(mt.with_mutation(mt.chaos_scenario(seed, protocol, mode=mode), name), seed)
        if trial.killed:
            kills.append(seed)
            if first is None:
                first = trial
    hunt_s = time.perf_counter() - t0
    shrunk = None
    if first is not None and first.outcome != "crash":
        data = mt.with_mutation(mt.chaos_scenario(first.seed, protocol, mode=mode), name)
        shrunk = mt.shrink(data, first.seed, mt.killed_by(first.failed[0], first.seed))
    return {
        "name": name,
        "mode": mode or "any",
        "kills": kills,
        "first": first,
        "seeds": seeds,
        "hunt_s": hunt_s,
        "shrunk": shrunk,
        "wall_s": time.perf_counter() - t0,
    }


def measure_baseline(protocol: str, seeds: range) -> dict:
    cases = mt.baseline_scenarios([mt.Source("generated", protocol=protocol)], seeds, mt.mutations(protocol))
    res = mt.run_baseline(cases)
    return {"runs": res.runs, "failures": res.failures, "wall_s": res.wall_s}


@recorded(
    "bench_mutants",
    goals={
        "mutants": "every planted mutant killed (mutation score 1), each within a few seeds",
        "unmutated": "no false failure of the unmutated protocol",
    },
)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=mt.hunted(), default=protocols.DEFAULT_PROTOCOL)
    parser.add_argument("--quick", action="store_true", help="5 seeds per mutant, 50 baseline schedules")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per mutant (default 20)")
    parser.add_argument("--baseline", type=int, default=None, help="baseline schedules (default 1000)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = parser.parse_args(argv)
    seeds = args.seeds or (5 if args.quick else 20)
    base = args.baseline if args.baseline is not None else (50 if args.quick else 1000)

    t0 = time.perf_counter()
    chunk = 50
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        mutant_futs = [pool.submit(measure_mutant, args.protocol, name, seeds) for name in mt.mutations(args.protocol)]
        base_futs = [
            pool.submit(measure_baseline, args.protocol, range(a, min(base, a + chunk))) for a in range(0, base, chunk)
        ]
        rows = [f.result() for f in mutant_futs]
        parts = [f.result() for f in base_futs]
    wall = time.perf_counter() - t0

    killed = sum(1 for r in rows if r["kills"])
    mode_key = mt.chaos_of(args.protocol).mode_key or "mode"
    print(f"## {args.protocol}: mutants ({seeds} seeds each)\n")
    out = []
    for r in rows:
        first = r["first"]
        shrunk = r["shrunk"]
        out.append(
            [
                r["name"],
                r["mode"],
                "killed" if first else "SURVIVED",
                ", ".join(first.failed) if first else "-",
                first.seed + 1 if first else "-",
                f"{len(r['kills'])}/{r['seeds']}",
                "crash" if first is not None and first.outcome == "crash" else "-",
                f"{shrunk.steps_before} -> {shrunk.steps_after}" if shrunk else "-",
                f"{r['wall_s']:.1f}",
            ]
        )
    print(
        table(
            [
                "mutant",
                mode_key,
                "result",
                "checks (first kill)",
                "seeds to kill",
                "kill rate",
                "crash",
                "shrunk steps",
                "wall s (hunt+shrink)",
            ],
            out,
        )
    )
    print(f"\nmutation score: {killed}/{len(rows)}")
    runs = sum(p["runs"] for p in parts)
    failures = [f for p in parts for f in p["failures"]]
    modes = {m for m in (mt.mutant_mode(n, args.protocol) for n in mt.mutations(args.protocol)) if m}
    per = f" (each also in {mode_key} {', '.join(sorted(modes))} when not its own)" if modes else ""
    print(f"\n## {args.protocol}, unmutated: {base} schedules{per}\n")
    print(
        table(
            ["schedules", "runs", "false failures", "wall s (sum over workers)"],
            [[base, runs, len(failures), f"{sum(p['wall_s'] for p in parts):.1f}"]],
        )
    )
    for f in failures:
        print(
            f"- seed {f['seed']} {mode_key} {f['resync']}: {f['outcome']} {', '.join(f['checks'])}: {f['explanation']}"
        )
    print(f"\ntotal wall time: {wall:.1f} s with {args.jobs} worker(s)")
    return 0 if killed == len(rows) and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
