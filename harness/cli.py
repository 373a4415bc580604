"""The `splitbrain` command line: run scenarios, check the machine, run a node daemon, print the
JSON Schema of scenario files.

Exit codes: 0 the outcome passed, 1 a check failed or judged nothing (its name and
explanation are printed) or the run itself failed, 2 bad input (a scenario field, a missing file, a bad flag).
An interrupted run (Ctrl-C) tears its nodes down, writes what exists and exits 130 (143 for
SIGTERM).
"""

from __future__ import annotations

import argparse
import gc
import sys

from splitbrain.harness.commands import add_commands
from splitbrain.harness.commands.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    error_exit,
    interrupted,
)
from splitbrain.harness.commands.node import cmd_node
from splitbrain.harness.commands.run import DEFAULT_BACKEND, ProgressDisplay
from splitbrain.node.errors import BadInput

# Re-exported: the exit codes, the default backend and the live progress display were imported
# from here before the commands had modules of their own.
__all__ = [
    "DEFAULT_BACKEND",
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "ProgressDisplay",
    "build_parser",
    "main",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="splitbrain",
        description="A chaos lab for reliable-delivery protocols: run fault scenarios against "
        "the registered protocols and check ordering, loss, duplicates and window sync.",
        epilog="Exit codes: 0 outcome passed, 1 a check failed or judged nothing (vacuous), 2 bad input.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_commands(sub)  # harness/commands/__init__.py: COMMANDS
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is not None:
        return _main(list(argv))
    rc = _main(sys.argv[1:])
    # The command is done and the process ends here (the console script, `python -m`): what it
    # leaves is garbage in reference cycles (a simulation's layers refer to each other and hold
    # every event), which the collector would free object by object at exit, 0.15 s after a
    # 258k-event run. Frozen, it is left to the OS; atexit hooks still run.
    gc.freeze()
    return rc


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "node":
        return cmd_node(argv[1:])
    from splitbrain.node.protocols import check_extras

    try:
        check_extras()  # a bad SPLITBRAIN_PROTOCOLS is bad input, said once, before anything runs
    except BadInput as exc:
        return error_exit(exc)
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse exits 2 on a bad flag, naming it
    try:
        return args.func(args)
    except KeyboardInterrupt as exc:  # before a run started (loading modules, the scenario)
        return interrupted(exc)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
