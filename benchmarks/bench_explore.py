"""`splitbrain explore` measured, printed as Markdown tables.

1. Runs and wall seconds to the first counted failure, random and guided, median and max over
   explorer seeds, for each target below (a miss counts as the whole run budget), without shrinking.
2. Distinct behaviours after N runs, guided and random (median over the same seeds).
3. Throughput: simulated 3-node 20 s runs (unicast3 defaults, random plans) per minute of wall
   time with --jobs J worker processes.

Run:
    .venv/bin/python benchmarks/bench_explore.py [--seeds N] [--runs N] [--jobs J] [--only NAME ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchresults import recorded

from splitbrain.harness.explore import engine, nemesis
from splitbrain.harness.explore.engine import Target, explore
from splitbrain.harness.explore.vocab import vocabulary

_SYNC = {"resync": "sync", "xmit_interval": 0.5, "conn_close_timeout": 1.0}
# name -> (protocol, settings, reference settings or None)
TARGETS = {
    "nakack2-no-xmit": ("nakack2", {"xmit_interval": 0, "allow_unsafe": True}, None),
    "nakack2-last-seqno-once": ("nakack2", {}, None),
    "unicast-original": ("unicast", {}, None),
    "sync-bug-a": ("unicast3", {**_SYNC, "mutation": "sync_ok_rekeys_by_prev_only"}, None),
    "sync-bug-b": ("unicast3", {**_SYNC, "mutation": "sync_first_opens_window"}, None),
    "sync-bug-c": ("unicast3", {**_SYNC, "mutation": "sync_ok_ignores_nonce"}, None),
    # UNICAST2's known bugs (a baseline protocol: its defaults have them). The stale STABLE of
    # scenarios/bugs/unicast2-stale-stable.yaml on the defaults; the design's scenario #6
    # (unicast2-lost-first-after-reopen.yaml) against conn-ids on every message.
    "unicast2-stale-stable": ("unicast2", {}, None),
    "unicast2-scenario-6": ("unicast2", {"conn_id_in_every_message": False}, {"conn_id_in_every_message": True}),
    "jgrp-1875-first-seqno": (
        "unicast3",
        {"resync": "first_seqno", "conn_close_timeout": 1.0, "xmit_interval": 0.2, "ack_min_interval": 0.0},
        {"resync": "sync"},
    ),
}


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def target_of(name: str) -> Target:
    protocol, config, against = TARGETS[name]
    return Target(protocol=protocol, config=config, vocab=vocabulary(protocol, config, 3), against=against)


def to_first_failure(name: str, strategy: str, seed: int, runs: int, jobs: int) -> tuple[int, float, bool]:
    t0 = time.perf_counter()
    session = explore(target_of(name), strategy=strategy, seed=seed, runs=runs, jobs=jobs, max_findings=1, shrink=False)
    wall = time.perf_counter() - t0
    if session.first_failure is None:
        return runs, wall, False
    return session.first_failure[0], session.first_failure[1], True


def behaviours_after(strategy: str, seed: int, runs: int, jobs: int) -> int:
    session = explore(target_of_defaults(), strategy=strategy, seed=seed, runs=runs, jobs=jobs, shrink=False)
    return len(session.seen)


def target_of_defaults() -> Target:
    return Target(protocol="unicast3", config={}, vocab=vocabulary("unicast3", {}, 3))


def throughput(jobs: int, runs: int) -> float:
    """Simulated 3-node 20 s runs per minute (random plans, every one 20 s long)."""
    target = target_of_defaults()
    original = nemesis.DURATIONS_S
    nemesis.DURATIONS_S = (20.0,)
    try:
        t0 = time.perf_counter()
        session = explore(target, strategy="random", seed=0, runs=runs, jobs=jobs, shrink=False)
        wall = time.perf_counter() - t0
    finally:
        nemesis.DURATIONS_S = original
    return session.runs / wall * 60


@recorded(
    "bench_explore",
    goals={
        "first failure": "every target found from scratch, guided search in fewer runs than random",
        "behaviours": "guided search reaches more distinct behaviours than random in the same runs",
        "throughput": "hundreds of simulated runs per minute on two cores",
    },
)
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--runs", type=int, default=1000, help="run budget per search")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=None, help="targets (default all)")
    ap.add_argument("--skip-first-failure", action="store_true")
    args = ap.parse_args(argv)
    print(f"explorer generation: {engine.GENERATION} runs; budget {args.runs} runs; seeds 0..{args.seeds - 1}\n")
    if not args.skip_first_failure:
        rows = []
        medians: dict[str, list[float]] = {"random": [], "guided": []}
        for name in args.only or TARGETS:
            cells = [name]
            for strategy in ("random", "guided"):
                found = [to_first_failure(name, strategy, seed, args.runs, args.jobs) for seed in range(args.seeds)]
                runs = [r for r, _, _ in found]
                walls = [w for _, w, _ in found]
                hits = sum(ok for _, _, ok in found)
                medians[strategy].append(statistics.median(runs))
                cells += [
                    f"{hits}/{args.seeds}",
                    f"{statistics.median(runs):g} / {max(runs)}",
                    f"{statistics.median(walls):.1f} / {max(walls):.1f}",
                ]
            rows.append(cells)
            print(table(_HEADERS, rows[-1:]), file=sys.stderr, flush=True)  # progress; the table is below
        print("# Runs to the first failure\n")
        print(table(_HEADERS, rows))
        gm = {s: math.exp(statistics.fmean(math.log(max(1.0, m)) for m in v)) for s, v in medians.items()}
        print(f"\ngeometric mean of median runs to first failure: random {gm['random']:.1f}, guided {gm['guided']:.1f}")
    seen = {
        s: statistics.median(behaviours_after(s, seed, args.runs, args.jobs) for seed in range(min(3, args.seeds)))
        for s in ("random", "guided")
    }
    print(f"\n# Distinct behaviours after {args.runs} runs (unicast3 defaults, median of {min(3, args.seeds)} seeds)\n")
    print(
        table(
            ["random", "guided", "guided / random"],
            [[f"{seen['random']:g}", f"{seen['guided']:g}", f"{seen['guided'] / max(1, seen['random']):.2f}"]],
        )
    )
    per_min = throughput(args.jobs, 200)
    print("\n# Exploring throughput\n")
    print(table(["jobs", "simulated 3-node 20 s runs per minute"], [[args.jobs, f"{per_min:.0f}"]]))
    return 0


_HEADERS = [
    "target",
    "random found",
    "random runs median / max",
    "random wall s median / max",
    "guided found",
    "guided runs median / max",
    "guided wall s median / max",
]


if __name__ == "__main__":
    sys.exit(main())
