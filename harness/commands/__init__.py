"""The `splitbrain` commands, one module each, and COMMANDS, the registry the parser is built from.

A command is a module with `add(subparsers)`, which adds its argparse parser and sets
`func=<handler>` (handler(args) -> exit code: 0 passed, 1 failed, 2 bad input, by the error roots
of node/errors.py), plus one line in COMMANDS ("module:function", in --help order). Modules are
imported only when the parser is built, so a command's dependencies cost nothing at import.
"""

from __future__ import annotations

import importlib

COMMANDS: tuple[str, ...] = (
    "splitbrain.harness.commands.run:add",
    "splitbrain.harness.commands.clean:add",
    "splitbrain.harness.commands.doctor:add",
    "splitbrain.harness.commands.conformance:add",
    "splitbrain.harness.commands.schema:add",
    "splitbrain.harness.commands.protocols:add",
    "splitbrain.harness.commands.shrink:add",
    "splitbrain.harness.commands.compare:add",
    "splitbrain.pipeline.cli:add_commands",  # analyze, campaign (pyspark is imported only when they run)
    "splitbrain.harness.mutants_cli:add_command",  # mutants
    "splitbrain.harness.logcmd:add_command",  # log
    "splitbrain.harness.explore.cli:add_command",  # explore
    "splitbrain.harness.commands.node:add",
)


def add_commands(subparsers) -> None:
    """Add every registered command's parser to `subparsers`, in registry order."""
    for entry in COMMANDS:
        module, _, function = entry.partition(":")
        getattr(importlib.import_module(module), function)(subparsers)
