"""`splitbrain schema`: the JSON Schema of scenario files."""

from __future__ import annotations

import argparse

from splitbrain.harness.commands.common import EXIT_OK


def add(subparsers) -> None:
    """The `schema` command."""
    schema = subparsers.add_parser(
        "schema",
        help="print the JSON Schema of scenario files",
        description="Print the JSON Schema (draft 2020-12) of scenario files, for editors and other "
        "tools; `splitbrain run` checks more than a schema can say (node names, the "
        "schedule as a whole) and names the field of every problem.",
        epilog="Always exits 0.",
    )
    schema.set_defaults(func=cmd_schema)


def cmd_schema(args: argparse.Namespace) -> int:
    import json

    from splitbrain.harness.scenario import json_schema

    print(json.dumps(json_schema(), indent=2))
    return EXIT_OK
