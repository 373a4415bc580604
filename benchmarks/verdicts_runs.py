"""Do the checkers and the pipeline give the same verdicts on logs with run lines as on logs with one
line per message, on every backend?

For every shipped scenario (scenarios/*.yaml), museum piece (scenarios/bugs/*.yaml) and mutant
(each protocol's chaos set with each planted mutation), over seeds 1..N on the simulator, and for
the scenarios a live backend runs (local, docker; one seed each, `--live` picks them), each run's
verdict is computed on four forms of its evidence and compared check by check, whole result dicts
(explanations and details included):

- `mem`: the simulator's in-memory log, one event per message (sim only);
- `runs`: the run directory's logs as written (run lines: the simulator's and the live nodes'),
  read back with harness.eventlog.read_run;
- `v1`: the same logs with every run expanded into one line per message (node.events.expand_runs);
- `pipe`: the pipeline's per-run judge on the run's files (pipeline.runwise + pipeline.tasks:
  the Arrow columns a warehouse holds, one row per run line, judged by the columnar kernels).

Prints a table, a row per run as it is judged: its outcome per check on the `runs` form (P
passed, F failed, V vacuous, N not applicable) and whether every form agreed; then one line per
difference and a summary. Exits 1 when any form differs. Timings are not compared (a live run's
verdict may differ from the simulator's: the table shows both).

    .venv/bin/python benchmarks/verdicts_runs.py [--seeds 3] [--only NAME] [--backends sim,local,docker]
        [--live smoke,steady,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from splitbrain.harness import mutants
from splitbrain.harness.checks import scenario_ack_bounds
from splitbrain.harness.eventlog import read_run
from splitbrain.harness.run import run_scenario
from splitbrain.harness.rundir import write_events
from splitbrain.harness.scenario import load_scenario, parse_scenario
from splitbrain.harness.sim import Simulation
from splitbrain.harness.verdict import judge
from splitbrain.node.events import expand_runs
from splitbrain.pipeline import runwise as R
from splitbrain.pipeline import tasks as TK

ROOT = Path(__file__).resolve().parent.parent
# The scenarios the live backends run by default: one of each kind of fault the local and docker
# backends inject (a split, a pause, a kill, loss, TCP toxics on docker).
LIVE_DEFAULT = {
    "local": (
        "smoke",
        "steady",
        "one-way-split-resync",
        "two-way-split",
        "pause-receiver",
        "kill-restart-receiver",
        "lossy-link",
        "nakack2-loss",
    ),
    "docker": ("smoke", "one-way-split-resync", "pause-receiver", "tcp-toxics-order"),
}


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


def live_cases(backend: str, names: list[str]) -> list[tuple[str, object, int]]:
    out: list[tuple[str, object, int]] = []
    for name in names:
        found = sorted(ROOT.glob(f"scenarios/**/{name}.yaml"))
        if found:
            out.append((str(found[0].relative_to(ROOT)), found[0], 1))
    return out


def pipeline_results(run_dir: Path, scenario, names: list[str]) -> list[dict]:
    """The pipeline's per-run judge on the run directory's files, as ingest judges them."""
    files = sorted(
        (str(p.relative_to(run_dir)), p.read_text(encoding="utf-8"))
        for p in [*run_dir.glob("nodes/*/events.jsonl"), *run_dir.glob("timeline.jsonl")]
    )
    events, bad, plain = R.classify_run(files)
    R.order(events)
    bound = {
        "recovery_bound_s": scenario.recovery_bound,
        "resync_bound": scenario.resync_bound,
        "xmit_bound": scenario.xmit_bound,
        "ack_bounds": scenario_ack_bounds(scenario),
    }
    doc = TK.run_document(events, TK.events_table(events), plain, (names, bound, False), len(bad))
    return json.loads(doc)["results"]


def forms(source: object, seed: int, backend: str, tmp: Path) -> tuple[dict[str, list[dict]], int] | str:
    """form -> the run's result dicts, and how many run lines its logs hold; or why there are none."""
    if isinstance(source, Path):
        scenario = dataclasses.replace(load_scenario(source), seed=seed)
    else:
        scenario = parse_scenario({**source, "seed": seed})  # type: ignore[dict-item]
    out: dict[str, list[dict]] = {}
    try:
        if backend == "sim":
            result = Simulation(scenario, seed).run()
            out["mem"] = [
                c.to_dict() for c in judge(scenario, result.all_events(), seed=seed, backend="sim", stats={}).checks
            ]
            run_dir = tmp
            write_events(run_dir, result.events, result.timeline)
        else:
            run_dir = run_scenario(scenario, backend=backend, out=tmp).run_dir
    except Exception as exc:  # a crash or a refusal is the same on every form: nothing to compare
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    logged = read_run(run_dir)
    out["runs"] = [c.to_dict() for c in judge(scenario, logged, seed=seed, backend=backend, stats={}).checks]
    out["v1"] = [c.to_dict() for c in judge(scenario, expand_runs(logged), seed=seed, backend=backend, stats={}).checks]
    out["pipe"] = pipeline_results(run_dir, scenario, [c["name"] for c in out["runs"]])
    run_lines = sum(p.read_bytes().count(b'{"v":2,') for p in run_dir.glob("nodes/*/events.jsonl"))
    return out, run_lines


def mark(result: dict) -> str:
    if not result.get("applicable", True):
        return "N"
    if result.get("vacuous"):
        return "V"
    return "P" if result["passed"] else "F"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per case on the simulator (default 3)")
    parser.add_argument("--only", default=None, help="only cases whose name contains this")
    parser.add_argument("--backends", default="sim", help="comma-separated: sim, local, docker (default sim)")
    parser.add_argument("--live", default=None, help="comma-separated scenario names for the live backends")
    args = parser.parse_args()
    same = differ = crashed = run_lines = 0
    print("| case | backend | seed | outcome per check (runs form) | forms agree | run lines |")
    print("| --- | --- | --- | --- | --- | --- |", flush=True)
    for backend in args.backends.split(","):
        if backend == "sim":
            todo = cases(args.seeds)
        else:
            todo = live_cases(backend, args.live.split(",") if args.live else list(LIVE_DEFAULT[backend]))
        for name, source, seed in todo:
            if args.only and args.only not in name:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                got = forms(source, seed, backend, Path(tmp))
            if isinstance(got, str):
                crashed += 1
                print(f"| {name} | {backend} | {seed} | {got} | - | - |", flush=True)
                continue
            results, lines = got
            run_lines += lines
            reference = results["runs"]
            outcome = " ".join(f"{r['name']}:{mark(r)}" for r in reference)
            agree = all(results[form] == reference for form in results)
            print(f"| {name} | {backend} | {seed} | {outcome} | {'yes' if agree else 'NO'} | {lines} |", flush=True)
            if agree:
                same += 1
                continue
            differ += 1
            for form, got_form in results.items():
                for b, a in zip(reference, got_form):
                    if b != a:
                        print(f"DIFFER {name} {backend} seed {seed} {b['name']} ({form} vs runs):")
                        print(f"  runs: {b['explanation']}\n  {form}: {a['explanation']}")
                        keys = sorted(
                            k for k in {*b["details"], *a["details"]} if b["details"].get(k) != a["details"].get(k)
                        )
                        for key in keys:
                            print(
                                f"  details[{key}]: runs {b['details'].get(key)!r:.300}, "
                                f"{form} {a['details'].get(key)!r:.300}"
                            )
    print(
        f"{same} same, {differ} differ, {crashed} crashed or refused (same on every form); {run_lines} run lines judged"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
