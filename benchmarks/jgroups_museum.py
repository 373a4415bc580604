"""The JGroups museum's reproduction rate: each piece of scenarios/jgroups/museum/ (and its twin)
run N times on one backend, seeds 1..N.

A piece reproduces when its run meets its `expect` (the check it names fails, the others pass);
a twin (`*-twin.yaml`, splitbrain's own protocols) holds when its run passes. The twins run on the
backend given with --twin-backend (default sim, where the museum states them); on docker they run
the Python node image. Prints one table row per scenario; --json writes the counts.

    .venv/bin/python benchmarks/jgroups_museum.py --backend docker [--runs 10] [--only partition]
        [--twin-backend docker|sim|none] [--twins-only]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from splitbrain.harness.backends import ClusterOptions
from splitbrain.harness.rundir import run_scenario
from splitbrain.harness.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
MUSEUM = ROOT / "scenarios" / "jgroups" / "museum"
START_TIMEOUT_S = 120.0  # JVMs starting on busy cores; the museum measures the pieces, not the start


def rate(path: Path, backend: str, runs: int) -> dict:
    scenario = load_scenario(path)
    held, seconds, notes = 0, [], []
    with tempfile.TemporaryDirectory(prefix="jgroups-museum-") as out:
        for seed in range(1, runs + 1):
            t0 = time.monotonic()
            try:
                options = None if backend == "sim" else ClusterOptions(start_timeout_s=START_TIMEOUT_S)
                outcome = run_scenario(scenario, seed=seed, backend=backend, out=Path(out), cluster_options=options)
            except Exception as exc:  # a run that could not run counts as not held, with why
                notes.append(f"seed {seed}: {type(exc).__name__}: {str(exc)[:160]}")
                continue
            finally:
                seconds.append(time.monotonic() - t0)
            if outcome.verdict.passed:
                held += 1
            else:
                notes.append(f"seed {seed}: {outcome.verdict.summary()}")
    return {"held": held, "runs": runs, "mean_s": sum(seconds) / len(seconds), "notes": notes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="docker", choices=("local", "docker"))
    ap.add_argument("--twin-backend", default="sim", choices=("sim", "local", "docker", "none"))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--only", default="", help="run only pieces whose file name contains this")
    ap.add_argument("--twins-only", action="store_true", help="run the twins, not the pieces")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = {}
    for piece in sorted(MUSEUM.glob("*.yaml")):
        if piece.stem.endswith("-twin") or args.only not in piece.stem:
            continue
        if not args.twins_only:
            rows[piece.stem] = {"backend": args.backend, **rate(piece, args.backend, args.runs)}
        twin = piece.with_name(f"{piece.stem}-twin.yaml")
        if twin.exists() and args.twin_backend != "none":
            rows[twin.stem] = {"backend": args.twin_backend, **rate(twin, args.twin_backend, args.runs)}
    print("| scenario | backend | held | mean run (s) |\n| --- | --- | --- | --- |")
    for name, row in rows.items():
        print(f"| {name} | {row['backend']} | {row['held']}/{row['runs']} | {row['mean_s']:.1f} |")
        for note in row["notes"]:
            print(f"    {note}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
