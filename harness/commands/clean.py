"""`splitbrain clean`: remove what docker runs left behind."""

from __future__ import annotations

import argparse
import sys

from splitbrain.harness.commands.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK


def add(subparsers) -> None:
    """The `clean` command."""
    clean = subparsers.add_parser(
        "clean",
        help="remove containers and networks that docker runs left behind",
        description="Remove the containers and networks labelled splitbrain.cluster=<id> whose harness "
        "process is gone (a run killed with -9, --keep, --splitbrain-keep). Clusters whose "
        "owner still runs on this host are kept unless --all.",
        epilog="Exit codes: 0 done (or nothing to do), 1 something could not be removed, 2 no engine.",
    )
    clean.add_argument(
        "--all", action="store_true", help="also remove clusters whose owner still runs (or runs on another host)"
    )
    clean.add_argument("--cluster", metavar="ID", default=None, help="remove only this cluster (sb<8 hex>)")
    clean.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    clean.set_defaults(func=cmd_clean)


def cmd_clean(args: argparse.Namespace) -> int:
    """Remove leftover containers and networks of docker clusters (by label)."""
    try:
        import docker

        from splitbrain.harness.backends.docker import clean_leftovers

        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:  # no SDK, no engine
        print(f"splitbrain: cannot reach a Docker engine: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    removed, problems = clean_leftovers(client, everything=args.all, cluster=args.cluster, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(f"splitbrain clean: {verb} {removed} cluster(s)")
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    return EXIT_FAILED if problems else EXIT_OK
