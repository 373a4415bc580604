"""Do the checkers give the same verdicts on logs with run lines as on logs with one line per message?

For every shipped scenario (scenarios/*.yaml), museum piece (scenarios/bugs/*.yaml) and mutant
(each protocol's chaos set with each planted mutation), over seeds 1..N on the simulator: the
verdict of the in-memory log (one event per message) against the verdict of the run directory's
logs written with runs (node/events.py) and read back (harness.eventlog.read_run). Prints one line
per difference and a summary; exits 1 when any verdict or explanation differs.

    .venv/bin/python benchmarks/verdicts_runs.py [--seeds 3] [--only NAME]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

from splitbrain.harness import mutants
from splitbrain.harness.eventlog import read_run
from splitbrain.harness.rundir import write_events
from splitbrain.harness.scenario import load_scenario, parse_scenario
from splitbrain.harness.sim import Simulation
from splitbrain.harness.verdict import judge

ROOT = Path(__file__).resolve().parent.parent


def cases(seeds: int) -> list[tuple[str, object, int]]:
    out: list[tuple[str, object, int]] = []
    for path in sorted((ROOT / "scenarios").glob("*.yaml")) + sorted((ROOT / "scenarios" / "bugs").glob("*.yaml")):
        for seed in range(1, seeds + 1):
            out.append((str(path.relative_to(ROOT)), path, seed))
    for protocol in mutants.hunted():
        for mutation in mutants.mutations(protocol):
            for seed in range(1, seeds + 1):
                data = mutants.with_mutation(mutants.chaos_scenario(seed, protocol), mutation)
                out.append((f"mutant {protocol}/{mutation}", data, seed))
    return out


def verdicts(source: object, seed: int, tmp: Path) -> tuple[list, list] | str:
    if isinstance(source, Path):
        scenario = dataclasses.replace(load_scenario(source), seed=seed)
    else:
        scenario = parse_scenario({**source, "seed": seed})  # type: ignore[dict-item]
    try:
        result = Simulation(scenario, seed).run()
    except Exception as exc:  # a crash is the same verdict on both forms: nothing to compare
        return f"crash {type(exc).__name__}"
    before = judge(scenario, result.all_events(), seed=seed, backend="sim", stats={})
    write_events(tmp, result.events, result.timeline)
    after = judge(scenario, read_run(tmp), seed=seed, backend="sim", stats={})
    return [c.to_dict() for c in before.checks], [c.to_dict() for c in after.checks]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--only", default=None, help="only cases whose name contains this")
    args = parser.parse_args()
    same = differ = crashed = run_lines = 0
    for name, source, seed in cases(args.seeds):
        if args.only and args.only not in name:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            got = verdicts(source, seed, Path(tmp))
            for path in Path(tmp).glob("nodes/*/events.jsonl"):
                run_lines += path.read_bytes().count(b'{"v":2,')
        if isinstance(got, str):
            crashed += 1
            continue
        before, after = got
        if before == after:
            same += 1
        else:
            differ += 1
            for b, a in zip(before, after):
                if b != a:
                    print(f"DIFFER {name} seed {seed} {b['name']}:")
                    print(f"  v1:   {b['explanation']}\n  runs: {a['explanation']}")
    print(f"{same} same, {differ} differ, {crashed} crashed (same on both forms); {run_lines} run lines judged")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
