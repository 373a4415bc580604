"""Instructions of the simulation loop and of its CPython ceiling, independent of load.

CPU seconds on a shared 2-core machine move by 30 % with the load; instruction counts do not.
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
and parsing"); the goal is a ratio <= 3x. `BENCH_TREE=/other/checkout` measures that
tree's code with this script, as for bench_speed.py. Compile both trees' bytecode first (where
the shell sets PYTHONDONTWRITEBYTECODE=1): `python -m compileall -q -j 0 node harness faults`.

With `--cache-sim`, cachegrind also simulates the caches (slower) and the script prints, next to
the instructions, the misses of the first-level instruction cache (I1), of the first-level data
cache (D1, reads and writes) and of the last level (LL, instructions and data): the loop's working
set is larger than the ceiling's, which shows in CPU seconds as misses, not as instructions.

Run: .venv/bin/python benchmarks/loop_instructions.py [--case unicast|mcast] [--seconds 10] [--json FILE]
[--parts base,sim,ceiling] [--cache-sim]
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

from benchresults import recorded

HERE = Path(__file__).resolve().parent
PARTS = ("base", "sim", "ceiling")
# cachegrind's summary lines: I refs always, the misses with --cache-sim=yes (D1 and LL as totals
# of reads and writes).
COUNTERS = {"Ir": "I   refs", "I1": "I1  misses", "D1": "D1  misses", "LL": "LL misses"}


class Case(NamedTuple):
    """A benchmark scenario, how many `duration: 60` lines it has (its streams' and its own), the
    name of its ceiling function in bench_speed and the protocol module a run imports lazily."""

    scenario: Path
    durations: int
    ceiling: str
    protocol: str


CASES = {
    "unicast": Case(HERE / "scenarios" / "speed-5x60.yaml", 11, "ceiling_sim", "splitbrain.node.unicast3"),
    "mcast": Case(HERE / "scenarios" / "speed-nakack2-5x60.yaml", 2, "ceiling_mcast", "splitbrain.node.nakack2.spec"),
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


def counts_of(part: str, case_name: str, seconds: int, cache_sim: bool = False) -> dict[str, int]:
    """cachegrind's counts of one part's process: Ir, and I1, D1 and LL misses with cache_sim."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            "valgrind",
            "--tool=cachegrind",
            f"--cache-sim={'yes' if cache_sim else 'no'}",
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
    wanted = COUNTERS if cache_sim else {"Ir": COUNTERS["Ir"]}
    out = {}
    for key, label in wanted.items():
        match = re.search(rf"{re.escape(label)}:\s+([\d,]+)", proc.stderr)
        if match is None:
            raise RuntimeError(f"no {label!r} in valgrind's output:\n{proc.stderr[-2000:]}")
        out[key] = int(match.group(1).replace(",", ""))
    return out


@recorded(
    "loop_instructions", goals={"": "the simulation loop within 3x the instructions of its stripped CPython ceiling"}
)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--case", choices=sorted(CASES), default="unicast", help="which 5x60 scenario (default unicast)"
    )
    parser.add_argument("--seconds", type=int, default=10, help="virtual seconds of traffic (default 10)")
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated: base, sim, ceiling")
    parser.add_argument(
        "--cache-sim", action="store_true", help="simulate the caches too and print I1, D1 and LL misses"
    )
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)  # the measured child process
    args = parser.parse_args(argv)
    if args.part:
        run_part(args.part, CASES[args.case], args.seconds)
        return 0
    tree = os.environ.get("BENCH_TREE", str(HERE.parent))
    counts: dict[str, dict[str, int]] = {}
    for part in args.parts.split(","):
        counts[part] = counts_of(part, args.case, args.seconds, args.cache_sim)
        misses = "".join(f", {key} misses {value / 1e6:.2f} M" for key, value in counts[part].items() if key != "Ir")
        print(f"{part:8} {counts[part]['Ir'] / 1e9:.3f} G instructions{misses}", flush=True)
    base = counts.get("base")
    if base is None:
        return 0
    print(f"tree: {tree}, {args.case} case, 5x{args.seconds} variant")
    loop = {key: counts.get("sim", base)[key] - value for key, value in base.items()}
    ceiling = {key: counts.get("ceiling", base)[key] - value for key, value in base.items()}
    if "sim" in counts:
        print(f"simulation loop: {loop['Ir'] / 1e9:.3f} G{_misses(loop)}")
    if "ceiling" in counts:
        print(f"ceiling loop:    {ceiling['Ir'] / 1e9:.3f} G{_misses(ceiling)}")
    if "sim" in counts and "ceiling" in counts:
        print(f"ratio:           {loop['Ir'] / ceiling['Ir']:.2f}x (goal <= 3.0x)")
        print(f"\n# Instructions of the simulation loop, {args.case} case, 5x{args.seconds} variant\n")
        print("| loop | G instructions | x ceiling |\n| --- | --- | --- |")
        print(f"| ceiling (stripped CPython) | {ceiling['Ir'] / 1e9:.3f} | 1.00 |")
        print(f"| simulation | {loop['Ir'] / 1e9:.3f} | {loop['Ir'] / ceiling['Ir']:.2f} |")
    return 0


def _misses(counts: dict[str, int]) -> str:
    return "".join(f", {key} misses {value / 1e6:.2f} M" for key, value in counts.items() if key != "Ir")


if __name__ == "__main__":
    raise SystemExit(main())
