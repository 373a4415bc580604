"""Instructions of the simulation loop and of its CPython ceiling (issue 15), independent of load.

CPU seconds on this shared 2-core machine move by 30 % with the load; instruction counts do not.
This script runs three short processes under `valgrind --tool=cachegrind` with PYTHONHASHSEED=0,
each doing the same imports and parsing the same scenario (a variant of
benchmarks/scenarios/speed-5x60.yaml shortened to `--seconds` virtual seconds, 10 by default: the
"5x10 variant"; with `--case mcast`, the same cut of speed-nakack2-5x60.yaml, the multicast case),
then:

- base: nothing more;
- sim: `Simulation(scenario).run()`, invariants on as the CLI runs it;
- ceiling: `bench_speed.ceiling_sim(scenario)` (`ceiling_mcast` for the multicast case), the
  stripped loop doing the same work.

The loop is sim - base and the ceiling is ceiling - base ("imports, parsing and loop minus imports
and parsing"); the ratio is the issue's goal (<= 3x). `BENCH_TREE=/other/checkout` measures that
tree's code with this script, as for bench_speed.py. Compile both trees' bytecode first (this
machine's shells set PYTHONDONTWRITEBYTECODE=1): `python -m compileall -q -j 0 node harness faults`.

Run: .venv/bin/python benchmarks/loop_instructions.py [--case unicast|mcast] [--seconds 10]
[--parts base,sim,ceiling]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from importlib import import_module
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
PARTS = ("base", "sim", "ceiling")


class Case(NamedTuple):
    """A benchmark scenario, how many `duration: 60` lines it has (its streams' and its own), the
    name of its ceiling function in bench_speed and the protocol module a run imports lazily."""

    scenario: Path
    durations: int
    ceiling: str
    protocol: str


CASES = {
    "unicast": Case(HERE / "scenarios" / "speed-5x60.yaml", 11, "ceiling_sim", "node.unicast3"),
    "mcast": Case(HERE / "scenarios" / "speed-nakack2-5x60.yaml", 2, "ceiling_mcast", "node.nakack2.spec"),
}


def shortened(case: Case, seconds: int) -> str:
    """The case's scenario text with its 60 virtual seconds (streams and heal) cut to `seconds`."""
    text = case.scenario.read_text()
    short = text.replace("duration: 60", f"duration: {seconds}").replace("at: 60", f"at: {seconds}")
    if short.count(f"duration: {seconds}") != case.durations:
        raise RuntimeError(f"{case.scenario.name} changed shape; update CASES")
    return short


def run_part(part: str, case: Case, seconds: int) -> None:
    """One measured process: the shared imports and parsing, then the part's work."""
    sys.path.insert(0, str(HERE))
    import bench_speed  # its imports (harness, node) are the shared base of every part

    import_module(case.protocol)  # part of the base, not of the loop

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "speed-short.yaml"
        path.write_text(shortened(case, seconds))
        scenario = bench_speed.load_scenario(path)
    if part == "sim":
        bench_speed.Simulation(scenario).run()
    elif part == "ceiling":
        getattr(bench_speed, case.ceiling)(scenario)


def instructions(part: str, case_name: str, seconds: int) -> int:
    """I refs of one part's process under cachegrind."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            f"--cachegrind-out-file={tmp}/cg.out",
            sys.executable,
            str(Path(__file__).resolve()),
            "--part",
            part,
            "--case",
            case_name,
            "--seconds",
            str(seconds),
        ]
        env = dict(os.environ, PYTHONHASHSEED="0")
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    match = re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{proc.stderr[-2000:]}")
    return int(match.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--case", choices=sorted(CASES), default="unicast", help="which 5x60 scenario (default unicast)"
    )
    parser.add_argument("--seconds", type=int, default=10, help="virtual seconds of traffic (default 10)")
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated: base, sim, ceiling")
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)  # the measured child process
    args = parser.parse_args(argv)
    if args.part:
        run_part(args.part, CASES[args.case], args.seconds)
        return 0
    tree = os.environ.get("BENCH_TREE", str(HERE.parent))
    counts = {}
    for part in args.parts.split(","):
        counts[part] = instructions(part, args.case, args.seconds)
        print(f"{part:8} {counts[part] / 1e9:.3f} G instructions", flush=True)
    base = counts.get("base")
    if base is None:
        return 0
    print(f"tree: {tree}, {args.case} case, 5x{args.seconds} variant")
    loop = counts.get("sim", base) - base
    ceiling = counts.get("ceiling", base) - base
    if "sim" in counts:
        print(f"simulation loop: {loop / 1e9:.3f} G")
    if "ceiling" in counts:
        print(f"ceiling loop:    {ceiling / 1e9:.3f} G")
    if "sim" in counts and "ceiling" in counts:
        print(f"ratio:           {loop / ceiling:.2f}x (goal <= 3.0x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
