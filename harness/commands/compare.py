"""`splitbrain compare`: scenarios on every protocol variant, as a table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from splitbrain.harness.cliargs import load_scenario_arg, positive_int
from splitbrain.harness.commands.common import EXIT_BAD_INPUT, EXIT_OK, interrupted


def add(subparsers) -> None:
    """The `compare` command."""
    compare = subparsers.add_parser(
        "compare",
        help="run scenarios on every registered protocol variant and print a table",
        description="Run each SCENARIO (default: every file of scenarios/bugs/, the bug museum) in the "
        "simulator with seeds 1..N on every registered protocol that delivers the way the scenario's protocol "
        "does (point-to-point or multicast) and each of its variants (the values of "
        "its variant setting, e.g. a resync mode), judged as `expect: pass`, and print per scenario and "
        "variant: pass rate, resync messages and bytes, time from the last heal to windows in sync, "
        "retransmissions (means per run).",
        epilog="With --impl the columns are implementations instead: each file runs as written on "
        "splitbrain's protocol (python, on --backend) and on real JGroups 2.12.2 nodes (jgroups, the local "
        "backend), side by side. Exit codes: 0 table printed, 2 bad input.",
    )
    compare.add_argument(
        "scenarios", metavar="SCENARIO", nargs="*", help="scenario files (default: scenarios/bugs/*.yaml)"
    )
    compare.add_argument("--seeds", type=positive_int, default=10, metavar="N", help="seeds 1..N per cell (default 10)")
    compare.add_argument("--jobs", type=positive_int, default=1, metavar="J", help="worker processes (default 1)")
    compare.add_argument(
        "--impl",
        default=None,
        metavar="LIST",
        help="implementations as columns, comma-separated: python (the file's own protocol), "
        "jgroups (JGroups 2.12.2 nodes on the local backend), e.g. python,jgroups",
    )
    compare.add_argument(
        "--backend",
        choices=("sim", "local"),
        default="sim",
        help="with --impl: the backend of the python column (default sim; jgroups always runs on local)",
    )
    compare.add_argument("--json", default=None, metavar="FILE", help="also write the table as JSON")
    compare.add_argument("--quiet", action="store_true", help="no progress lines")
    compare.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    import json

    import yaml

    from splitbrain.harness.compare import compare, implementations, markdown

    columns = None
    if args.impl is not None:
        try:
            columns = implementations([n.strip() for n in args.impl.split(",") if n.strip()], args.backend)
        except ValueError as exc:
            print(f"splitbrain: --impl: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if not columns:
            print("splitbrain: --impl: name at least one implementation (python, jgroups)", file=sys.stderr)
            return EXIT_BAD_INPUT
        if any(c.impl == "jgroups" for c in columns):
            from splitbrain.node.jgroups.launch import runtime_problem

            why = runtime_problem()
            if why:
                print(f"splitbrain: --impl jgroups: {why}", file=sys.stderr)
                return EXIT_BAD_INPUT
    elif args.backend != "sim":
        print("splitbrain: --backend: only with --impl (the variant table runs on the simulator)", file=sys.stderr)
        return EXIT_BAD_INPUT

    paths = [Path(p) for p in args.scenarios] or sorted(Path("scenarios/bugs").glob("*.yaml"))
    if not paths:
        print("splitbrain: no scenario files (and no scenarios/bugs/*.yaml here)", file=sys.stderr)
        return EXIT_BAD_INPUT
    files = []
    for path in paths:
        scenario = load_scenario_arg(str(path))
        if scenario is None:
            return EXIT_BAD_INPUT
        files.append((scenario.name, yaml.safe_load(path.read_text(encoding="utf-8"))))

    def advance(line: str) -> None:
        if not args.quiet:
            print(f"  {line}", file=sys.stderr, flush=True)

    try:
        vs, table = compare(files, range(1, args.seeds + 1), jobs=args.jobs, advance=advance, columns=columns)
    except KeyboardInterrupt as exc:
        return interrupted(exc)
    where = "simulator" if columns is None else ", ".join(f"{c.impl} on {c.backend}" for c in columns)
    print(f"seeds 1..{args.seeds} per cell, {where}, every run judged as expect: pass")
    print(markdown(vs, table))
    if args.json:
        rows = {name: {label: cell.row() for label, cell in row.items()} for name, row in table.items()}
        doc: dict = {"seeds": args.seeds, "table": rows}
        if columns is not None:
            doc["implementations"] = {c.label: {"impl": c.impl, "backend": c.backend} for c in columns}
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return EXIT_OK
