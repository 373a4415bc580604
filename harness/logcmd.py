"""`splitbrain log RUN_DIR`: a run's merged event log, one message per line, for people who grep.

Run lines (one line for a batch's run of sends or deliveries, node/events.py) are printed as the
version-1 lines of their messages; every other event as it is. The order is harness.eventlog's
read_run order (time, ties in file order), so what is printed is what the checkers judged.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO

from splitbrain.harness.eventlog import EventLogError, read_run
from splitbrain.node.events import expand_run, is_run

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def add_command(sub: argparse._SubParsersAction) -> None:
    log = sub.add_parser(
        "log",
        help="print a run directory's events, every run line expanded to one line per message",
        description="Print the merged event log of RUN_DIR (every node's events.jsonl and the timeline, "
        "in time order) as JSON lines, each run line (a batch of sends or deliveries written as one "
        "line) expanded into one line per message, for grep.",
        epilog="Exit codes: 0 printed, 2 RUN_DIR is not a run directory or a log cannot be read.",
    )
    log.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (runs/<name>)")
    log.add_argument(
        "--node",
        action="append",
        default=None,
        metavar="N",
        help="only the events of node N (repeat for several; 'harness' is the timeline)",
    )
    log.add_argument(
        "--kind", action="append", default=None, metavar="KIND", help="only events of this kind (repeat for several)"
    )
    log.set_defaults(func=cmd_log)


def cmd_log(args: argparse.Namespace) -> int:
    try:
        events = read_run(args.run_dir)
    except (EventLogError, OSError) as exc:
        print(f"splitbrain log: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    keep = _selector(args.node, args.kind)
    try:
        write_expanded((ev for ev in events if keep(ev)), sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:  # `splitbrain log ... | head`: the reader has what it wanted
        sys.stderr.close()  # the interpreter's own flush at exit would raise again
    return EXIT_OK


def _selector(nodes: list[str] | None, kinds: list[str] | None) -> Callable[[dict], bool]:
    node_set = frozenset(nodes) if nodes else None
    kind_set = frozenset(kinds) if kinds else None
    return lambda ev: (node_set is None or ev["node"] in node_set) and (kind_set is None or ev["kind"] in kind_set)


def expanded(events: Iterable[dict]) -> Iterator[dict]:
    """The events with each run line replaced by its messages (node.events.expand_run)."""
    for ev in events:
        if is_run(ev):
            yield from expand_run(ev)
        else:
            yield ev


def write_expanded(events: Iterable[dict], out: TextIO) -> int:
    """Write the events expanded as compact JSON lines; returns how many lines."""
    encode = json.JSONEncoder(separators=(",", ":")).encode
    n = 0
    batch: list[str] = []
    for ev in expanded(events):
        batch.append(encode(ev))
        n += 1
        if len(batch) >= 4096:
            out.write("\n".join(batch) + "\n")
            batch.clear()
    if batch:
        out.write("\n".join(batch) + "\n")
    return n
