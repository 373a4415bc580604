"""`splitbrain shrink`: the smallest schedule that still fails the same check."""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from splitbrain.harness.cliargs import load_scenario_arg, non_negative_int, positive_int
from splitbrain.harness.commands.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, error_exit, interrupted
from splitbrain.node.errors import BadInput


def add(subparsers) -> None:
    """The `shrink` command."""
    shrink = subparsers.add_parser(
        "shrink",
        help="shrink a failing scenario to the smallest schedule that still fails the same check",
        description="Run SCENARIO in the simulator; if a check fails (for `expect: {fail: X}`, check X), "
        "greedily drop schedule steps and streams, halve stream counts, durations and rates and the run's "
        "duration and settle, keeping each change after which the same check still fails with the same "
        "seed (and, for a scenario with `config.mutation`, passes without it). Writes the result as a "
        "scenario file `splitbrain run` accepts and prints the before/after sizes.",
        epilog="Exit codes: 0 shrunk and written, 1 the run crashed, 2 bad input or the scenario fails no check.",
    )
    shrink.add_argument("scenario", metavar="SCENARIO", help="path of the scenario YAML file")
    shrink.add_argument(
        "--seed", type=non_negative_int, default=None, metavar="N", help="seed (default: the scenario's seed)"
    )
    shrink.add_argument(
        "--backend", choices=("sim",), default="sim", help="where candidates run: sim only (deterministic, fast)"
    )
    shrink.add_argument(
        "--out", default=None, metavar="FILE", help="where to write the shrunk scenario (default: <name>-shrunk.yaml)"
    )
    shrink.add_argument(
        "--budget", type=positive_int, default=None, metavar="N", help="most simulator runs to spend (default 300)"
    )
    shrink.add_argument("--quiet", action="store_true", help="no progress lines, only the result")
    shrink.set_defaults(func=cmd_shrink)


def cmd_shrink(args: argparse.Namespace) -> int:
    import yaml

    from splitbrain.harness.shrink import DEFAULT_BUDGET, shrink_scenario, to_yaml

    path = Path(args.scenario)
    scenario = load_scenario_arg(args.scenario)
    if scenario is None:
        return EXIT_BAD_INPUT
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    seed = scenario.seed if args.seed is None else args.seed
    out = Path(args.out) if args.out else Path(f"{scenario.name}-shrunk.yaml")

    def progress(line: str) -> None:
        if not args.quiet:
            print(f"  {line}", flush=True)

    try:
        result = shrink_scenario(data, seed, budget=args.budget or DEFAULT_BUDGET, progress=progress)
    except BadInput as exc:  # e.g. the scenario fails no check
        return error_exit(exc, where=f"{path}: ")
    except KeyboardInterrupt as exc:
        return interrupted(exc)
    except Exception as exc:
        traceback.print_exc()
        print(f"splitbrain: shrink crashed (seed {seed}): {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    out.write_text(to_yaml(result, str(path), seed), encoding="utf-8")
    b, a = result.before, result.after
    print(
        f"{scenario.name} seed={seed}: {result.check} still fails after {result.runs} runs; "
        f"steps {b['steps']} -> {a['steps']}, streams {b['streams']} -> {a['streams']}, "
        f"messages {b['messages']} -> {a['messages']}, duration {b['duration']:g} -> {a['duration']:g} s, "
        f"settle {b['settle']:g} -> {a['settle']:g} s; written to {out}"
    )
    return EXIT_OK
