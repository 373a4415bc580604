"""`splitbrain conformance`: the node contract's conformance suite against a node implementation."""

from __future__ import annotations

import argparse
import sys

from splitbrain.harness.commands.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK


def add(subparsers) -> None:
    """The `conformance` command."""
    conformance = subparsers.add_parser(
        "conformance",
        help="run the node contract's conformance suite against a node implementation",
        description="Start two nodes of an implementation on loopback and check every rule of the "
        "node contract (docs/node-contract.md): the admin API against node/contract/openapi.yaml, "
        "the token, errors, a stream's delivery, the event log against "
        "node/contract/events.schema.json, and that a kill -9 loses at most 100 ms of events.",
        epilog="Exit codes: 0 every rule kept, 1 a rule broken (each one is named), 2 the nodes "
        "could not start or bad arguments.",
    )
    which = conformance.add_mutually_exclusive_group(required=True)
    which.add_argument("--impl", choices=("python", "jgroups"), help="a built-in implementation")
    which.add_argument(
        "--node-command",
        metavar="CMD",
        help="the command that starts one node, with {config} for its configuration file, "
        'e.g. "./mynode --config {config}"',
    )
    conformance.add_argument(
        "--extra",
        metavar="JSON",
        default="{}",
        help="configuration keys your node needs besides the contract's, as a JSON object",
    )
    conformance.add_argument("--bind-host", default="127.0.0.1", help="the host nodes bind their protocol socket to")
    conformance.set_defaults(func=cmd_conformance)


def cmd_conformance(args: argparse.Namespace) -> int:
    import json
    import shlex

    from splitbrain.harness.conformance import Implementation, StartError, jgroups_node, python_node, run_suite

    if args.impl == "python":
        impl = python_node()
    elif args.impl == "jgroups":
        from splitbrain.node.jgroups.launch import runtime_problem

        why = runtime_problem()
        if why:
            print(f"splitbrain: {why}", file=sys.stderr)
            return EXIT_BAD_INPUT
        impl = jgroups_node()
    else:
        try:
            extra = json.loads(args.extra)
        except ValueError as exc:
            print(f"splitbrain: --extra: not JSON: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if not isinstance(extra, dict):
            print("splitbrain: --extra: expected a JSON object", file=sys.stderr)
            return EXIT_BAD_INPUT
        command = tuple(shlex.split(args.node_command))
        if not any("{config}" in part for part in command):
            print("splitbrain: --node-command: needs {config} where the configuration file goes", file=sys.stderr)
            return EXIT_BAD_INPUT
        impl = Implementation("your node", command, extra, host=args.bind_host)
    try:
        report = run_suite(impl)
    except StartError as exc:
        print(f"splitbrain: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(report.text())
    return EXIT_OK if report.ok else EXIT_FAILED
