"""Command-line argument helpers shared by the `splitbrain` commands of harness/cli.py and of
pipeline/cli.py (analyze, campaign) and harness/mutants_cli.py; a module of its own so that those
command modules need not import each other."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def load_scenario_arg(path_text: str):
    """The scenario named on the command line, or None after printing why it cannot be loaded."""
    from splitbrain.harness.scenario import ScenarioError, load_scenario

    path = Path(path_text)
    try:
        return load_scenario(path)
    except FileNotFoundError:
        print(f"splitbrain: scenario file not found: {path}", file=sys.stderr)
    except IsADirectoryError:
        print(f"splitbrain: scenario path is a directory: {path}", file=sys.stderr)
    except ScenarioError as exc:
        for line in str(exc).splitlines():  # every problem of the file, one a line
            print(f"splitbrain: {path}: {line}", file=sys.stderr)
    return None


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (seeds, counts)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value
