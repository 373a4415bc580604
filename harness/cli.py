"""The `splitbrain` command line: run scenarios, check the machine, (later) start a node.

Exit codes (DESIGN.md): 0 the outcome passed, 1 a check failed (its name and explanation are
printed) or the run itself failed, 2 bad input (a scenario field, a missing file, a bad flag).
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
import traceback
from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="splitbrain",
        description="A chaos lab for reliable-delivery protocols: run fault scenarios against "
                    "UNICAST3 and friends and check ordering, loss, duplicates and window sync.",
        epilog="Exit codes: 0 outcome passed, 1 a check failed, 2 bad input.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = sub.add_parser(
        "run",
        help="run a scenario file and judge it",
        description="Run one scenario, write runs/<scenario>-<seed>-<stamp>/ and judge the run "
                    "with the scenario's checks.",
        epilog="Exit codes: 0 outcome passed, 1 a check failed (or the run broke), 2 bad input.",
    )
    run.add_argument("scenario", metavar="SCENARIO", help="path of the scenario YAML file")
    run.add_argument("--backend", choices=("sim", "local", "docker"), default="sim",
                     help="where the nodes run: sim (deterministic simulator, default), local "
                          "(processes on 127.0.0.x) or docker (containers)")
    run.add_argument("--seed", type=_seed, default=None, metavar="N",
                     help="seed of the run (a non-negative integer); default: the scenario's seed")
    run.add_argument("--out", default="runs", metavar="DIR",
                     help="parent directory of the run directory (default: runs)")
    run.add_argument("--no-invariants", action="store_true",
                     help="sim only: skip check_invariants() after every input (faster)")
    run.add_argument("--max-steps", type=_positive_int, default=None, metavar="N",
                     help="sim only: stop with an error after N queue entries (default 20 million)")
    run.set_defaults(func=cmd_run)

    doctor = sub.add_parser(
        "doctor",
        help="report what this machine can run",
        description="Report the Python version and which backends and node modules are available.",
    )
    doctor.set_defaults(func=cmd_doctor)

    node = sub.add_parser(
        "node",
        help="run a protocol node daemon (not implemented yet)",
        description="Run one protocol node on real sockets (not implemented yet).",
    )
    node.set_defaults(func=cmd_node)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse exits 2 on a bad flag, naming it
    return args.func(args)


# ---- commands ---------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from harness.scenario import ScenarioError, load_scenario

    if args.backend != "sim":
        print(f"splitbrain: backend {args.backend} is not available yet", file=sys.stderr)
        return EXIT_BAD_INPUT
    path = Path(args.scenario)
    try:
        scenario = load_scenario(path)
    except FileNotFoundError:
        print(f"splitbrain: scenario file not found: {path}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except IsADirectoryError:
        print(f"splitbrain: scenario path is a directory: {path}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ScenarioError as exc:
        print(f"splitbrain: {path}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    from harness.rundir import run_scenario
    from harness.sim import SimulationError

    options = {"check_invariants": not args.no_invariants}
    if args.max_steps is not None:
        options["max_steps"] = args.max_steps
    seed = scenario.seed if args.seed is None else args.seed
    try:
        outcome = run_scenario(scenario, seed=seed, backend=args.backend, out=args.out, **options)
    except ScenarioError as exc:  # e.g. the protocol refused a config key
        print(f"splitbrain: {path}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SimulationError as exc:
        print(f"splitbrain: run failed (seed {seed}): {exc}", file=sys.stderr)
        _print_notes(exc)
        return EXIT_FAILED
    except Exception as exc:
        # Anything else is a bug in a layer or in the harness: keep the traceback.
        traceback.print_exc()
        print(f"splitbrain: run crashed (seed {seed}): {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED

    stats = outcome.result.stats
    verdict = outcome.verdict
    print(
        f"{scenario.name} seed={seed}: {stats['virtual_time_s']:.1f} virtual s in "
        f"{stats['wall_time_s']:.2f} s wall, {stats['msgs_sent']} msgs sent / "
        f"{stats['msgs_delivered']} delivered, {verdict.summary()}, run dir {outcome.run_dir}"
    )
    if verdict.passed:
        return EXIT_OK
    for check in verdict.failures:
        state = "passed" if check.passed else "failed"
        print(f"  {check.name} {state}: {check.explanation}")
    return EXIT_FAILED


def cmd_doctor(args: argparse.Namespace) -> int:
    print(f"python: {platform.python_version()} ({sys.executable})")
    missing = [m for m in ("node.compose", "node.wire", "node.faultlayer", "harness.checks")
               if not _importable(m)]
    sim = "yes" if not missing else f"partial (missing: {', '.join(missing)})"
    print(f"backend sim: {sim}")
    print("backend local: not yet")
    print("backend docker: not yet")
    return EXIT_OK


def cmd_node(args: argparse.Namespace) -> int:
    print("splitbrain: node is not implemented yet", file=sys.stderr)
    return EXIT_BAD_INPUT


# ---- helpers ----------------------------------------------------------------------------------


def _print_notes(exc: BaseException) -> None:
    for note in getattr(exc, "__notes__", ()):
        print(f"  {note}", file=sys.stderr)


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {value}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
