"""`splitbrain protocols`: the registered protocols, their settings and mutants."""

from __future__ import annotations

import argparse
from typing import Any

from splitbrain.harness.commands.common import EXIT_OK


def add(subparsers) -> None:
    """The `protocols` command."""
    protocols_cmd = subparsers.add_parser(
        "protocols",
        help="list the registered protocols: settings and defaults, message types, event kinds, mutants",
        description="List every protocol the registry knows (node/protocols.py, plus the spec modules named "
        "in SPLITBRAIN_PROTOCOLS), with its settings and their defaults, message types, own "
        "event kinds, default checks and planted mutants.",
        epilog="Exit codes: 0 (every command exits 2 when a module named in SPLITBRAIN_PROTOCOLS cannot be loaded).",
    )
    protocols_cmd.add_argument("--json", action="store_true", help="print JSON instead of text")
    protocols_cmd.set_defaults(func=cmd_protocols)


def cmd_protocols(args: argparse.Namespace) -> int:
    import json

    from splitbrain.harness.scenario import MEMBERSHIP_DEFAULT_CHECKS
    from splitbrain.node import protocols

    # The reliable protocols (a scenario's `protocol:`), then the membership protocols (its
    # `membership:`, which run around a reliable one).
    specs = [protocols.get(name) for name in (*protocols.names(), *protocols.membership_names())]
    info: list[dict[str, Any]] = [
        {
            "name": spec.name,
            "summary": spec.summary,
            "multicast": spec.multicast,
            "membership": spec.membership,
            "settings": spec.config({}).as_dict(),
            "message_types": list(spec.message_types),
            "event_kinds": dict(spec.event_kinds),
            # A membership protocol's checks are added to the reliable protocol's defaults.
            "default_checks": list(spec.default_checks or (MEMBERSHIP_DEFAULT_CHECKS if spec.membership else ())),
            "mutations": dict(spec.mutations),
            "regressions": dict(spec.regressions),
        }
        for spec in specs
    ]
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    for p in info:
        kind = " (multicast)" if p["multicast"] else f" (membership: {p['name']})" if p["membership"] else ""
        print(f"{p['name']}: {p['summary']}{kind}")
        print("  settings: " + ", ".join(f"{k}={v}" for k, v in p["settings"].items()))
        print("  message types: " + ", ".join(p["message_types"]))
        print("  event kinds: " + (", ".join(p["event_kinds"]) or "(core kinds only)"))
        print("  default checks: " + ", ".join(p["default_checks"]))
        print(f"  mutants: {len(p['mutations'])}" + (f" ({', '.join(p['mutations'])})" if p["mutations"] else ""))
        if p["regressions"]:
            print(f"  regressions (old code for the bug museum): {', '.join(p['regressions'])}")
    return EXIT_OK
