"""`splitbrain analyze RUN_DIR` in fresh processes, checkouts alternated: wall, CPU, load, outputs.

    python benchmarks/bench_analyze.py RUN_DIR --trees /work/main,. [--repeats 2] [--env K=V ...]

Each repeat runs the command once per checkout (PYTHONPATH=checkout, `python -m splitbrain.harness.cli`),
back to back, and reports its wall time (to the command's exit), the CPU (user + sys) of the whole
process tree (this process is the tree's subreaper, so the driver JVM and its Python workers are
waited for and counted) and the 1-min load before each run. It then compares what matters between
the checkouts' outputs: verdicts.json, the report page (its wall-time line removed) and the
warehouse's rows (events and quarantine, sorted; the runs rows without ingested_at).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
TIMEOUT_S = 900


def run_once(tree: Path, run_dir: str, out: Path, env: dict) -> dict:
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "splitbrain.harness.cli", "analyze", run_dir, "--out", str(out), "--quiet"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree), **env},
        stdout=subprocess.DEVNULL,
    )
    code = proc.wait(timeout=TIMEOUT_S)
    wall = time.perf_counter() - t0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the JVM and workers it left, reparented to us
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.05)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"tree": str(tree), "code": code, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "load": round(load, 1)}


def outputs(spark, out: Path) -> dict:
    """What two analyses of the same run must agree on."""
    from splitbrain.pipeline.ingest import load_events, load_quarantine, load_runs

    page = (out / "report" / "index.html").read_text()
    page = re.sub(r"analysis wall time \(s\): [0-9.]+", "", page)
    wh = str(out / "warehouse")
    runs = [
        {k: v for k, v in r.asDict(recursive=True).items() if k != "ingested_at"}
        for r in load_runs(spark, wh).collect()
    ]
    verdicts = json.loads((out / "report" / "verdicts.json").read_text())
    for v in verdicts:
        v["meta"].pop("ingested_at", None)
    return {
        "verdicts": verdicts,
        "page": page,
        "events": sorted(map(repr, load_events(spark, wh).collect())),
        "quarantine": sorted(map(repr, load_quarantine(spark, wh).collect())),
        "runs": sorted(map(repr, runs)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--trees", default="/work/main,.", help="comma-separated checkouts to alternate")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="extra environment for every run")
    ap.add_argument("--no-compare", action="store_true", help="skip the comparison of the outputs")
    args = ap.parse_args(argv)
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    env = dict(kv.split("=", 1) for kv in args.env)
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-analyze-"))
    rows = []
    for i in range(args.repeats):
        for j, tree in enumerate(trees):
            row = run_once(tree, args.run_dir, work / f"out-{i}-{j}", env)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if not args.no_compare and len(trees) > 1:
        from splitbrain.pipeline.session import get_spark

        spark = get_spark("local[2]")
        first = outputs(spark, work / "out-0-0")
        for j in range(1, len(trees)):
            other = outputs(spark, work / f"out-0-{j}")
            same = {k: first[k] == other[k] for k in first}
            print(f"outputs of {trees[0]} and {trees[j]} equal: {same}")
    print(f"outputs in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
