"""`splitbrain node ARGS`: the node daemon, as `python -m splitbrain.node ARGS`."""

from __future__ import annotations

import sys

from splitbrain.harness.commands.common import EXIT_BAD_INPUT


def add(subparsers) -> None:
    """The `node` entry of --help (harness.cli hands `node ARGS` to cmd_node before argparse)."""
    # `splitbrain node ARGS` hands ARGS to the daemon untouched (main() does it before argparse),
    # so `splitbrain node --help` is the daemon's own help. This entry only lists the command.
    subparsers.add_parser(
        "node",
        help="run one protocol node daemon: same as `python -m splitbrain.node` (try `splitbrain node --help`)",
        add_help=False,
    )


def cmd_node(argv: list[str]) -> int:
    """Run the node daemon in this process (`splitbrain node ARGS` = `python -m splitbrain.node ARGS`)."""
    try:
        from splitbrain.node.runtime.runner import main as node_main
    except ImportError as exc:
        print(f"splitbrain: the node daemon is not available ({exc})", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return node_main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_BAD_INPUT)
