"""The JGroups museum's reproduction rates: each piece of scenarios/jgroups/museum/ run N times on
the local or docker backend (real JGroups 2.12.2 nodes), each twin N times on the simulator (seeds
1..N) and, with --twins-live, on the pieces' backend (the Python node). A piece counts as
reproduced when its run meets `expect: {fail: <check>}` (that check failed, the others as the
piece says), a twin when every check passed.

Run: .venv/bin/python benchmarks/bench_museum_jgroups.py [--backend local|docker] [--runs 10] [--pieces a,b]
     [--twins-live]
     [--json benchmarks/results/bench_museum_jgroups.json]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchresults import Results, add_json_option

from splitbrain.harness.backends import ClusterOptions
from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import load_scenario

MUSEUM = Path(__file__).resolve().parents[1] / "scenarios" / "jgroups" / "museum"
# JVMs or containers starting on busy cores: the benchmark measures the pieces, not the start.
START_TIMEOUT_S = 120.0


def pieces() -> list[str]:
    return sorted(p.stem for p in MUSEUM.glob("*.yaml") if not p.stem.endswith("-twin"))


def rate(path: Path, backend: str, runs: int, out: Path) -> tuple[int, list[str], float]:
    """How many of `runs` runs met the file's expectation, the outcomes of the others, seconds per run."""
    scenario = load_scenario(path)
    met, other = 0, []
    t0 = time.monotonic()
    options = None if backend == "sim" else ClusterOptions(start_timeout_s=START_TIMEOUT_S)
    for seed in range(1, runs + 1):
        try:
            outcome = run_scenario(scenario, seed=seed, backend=backend, out=out, cluster_options=options)
        except Exception as exc:  # a run that could not run counts as not reproduced, with why
            other.append(f"seed {seed}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        if outcome.verdict.passed:
            met += 1
        else:
            other.append(outcome.verdict.summary()[:160])
        print(f"  {path.stem} [{backend}] run {seed}: {outcome.verdict.summary()[:100]}", file=sys.stderr, flush=True)
    return met, other, (time.monotonic() - t0) / runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="local", choices=("local", "docker"), help="where the pieces run")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--pieces", default="", help="comma-separated piece names (default: every piece)")
    ap.add_argument("--twins-live", action="store_true", help="also run every twin on the pieces' backend")
    add_json_option(ap)
    args = ap.parse_args()
    results = Results("bench_museum_jgroups")
    names = [n for n in args.pieces.split(",") if n] or pieces()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            piece = MUSEUM / f"{name}.yaml"
            twin = MUSEUM / f"{name}-twin.yaml"
            expect = load_scenario(piece).expect
            fails = expect["fail"] if isinstance(expect, dict) else "-"
            met, other, secs = rate(piece, args.backend, args.runs, Path(tmp))
            twin_sim, _, _ = rate(twin, "sim", args.runs, Path(tmp))
            row = [name, fails, f"{met}/{args.runs}", f"{twin_sim}/{args.runs}"]
            if args.twins_live:
                twin_live, _, _ = rate(twin, args.backend, args.runs, Path(tmp))
                row.append(f"{twin_live}/{args.runs}")
            row += [round(secs, 1), "; ".join(other)[:300] or "-"]
            rows.append(row)
            print(f"{name}: reproduced {met}/{args.runs}, twin {row[3]} (sim)", flush=True)
    headers = ["piece", "fails", f"reproduced ({args.backend})", "twin passes (sim)"]
    if args.twins_live:
        headers.append(f"twin passes ({args.backend})")
    headers += ["s per piece run", "other outcomes"]
    print("| " + " | ".join(headers) + " |")
    print("|" + " --- |" * len(headers))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    results.table(
        f"The JGroups 2.12.2 museum on {args.backend}: reproduction rate per piece, twins on splitbrain's protocols",
        headers,
        rows,
        goal="every piece reproduces in at least 9 of 10 runs and its twin passes 10 of 10",
    )
    results.write(args.json)


if __name__ == "__main__":
    main()
