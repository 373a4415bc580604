"""Reading the event log (schema in node/events.py) as every check reads it: application ids,
who sent a delivery, digests, harness events, and run lines (one line for a run of sends or
deliveries) with the messages they stand for."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from itertools import islice

from splitbrain.node.events import EVENT_VERSION, RUN_VERSION, run_problem
from splitbrain.node.message import parse_app_id

# The node (and proto) of the events the harness writes itself: the fault timeline.
HARNESS = "harness"
# The keys of a run line (node/events.py) that its messages do not have.
_RUN_ONLY = frozenset(("last_seqno", "last_app", "count"))


class SortedLog(list):
    """A log run_checks has put in time order: the checks take it as it is."""


def ordered(events: list[dict]) -> list[dict]:
    """Events sorted by t with ties in original order; a sorted log is returned as is."""
    if isinstance(events, SortedLog):
        return events
    # Logs from read_run are already sorted, and checking costs one pass instead of a sort.
    times = [ev["t"] for ev in events]
    if all(map(operator.le, times, islice(times, 1, None))):
        return events
    return sorted(events, key=lambda ev: ev["t"])


def parse_app(ev: dict) -> tuple[str, int, int]:
    """(origin, stream, n) of an event's application id; ValueError naming the event if malformed."""
    try:
        return parse_app_id(ev["app"])
    except ValueError:
        raise ValueError(f"{ev['kind']} at {ev['node']} t={ev['t']} has a malformed app id {ev['app']!r}") from None


def sender_of(ev: dict) -> str:
    """Who sent what a delivery delivered: its peer, else the origin of its application id."""
    return ev.get("peer") or parse_app(ev)[0]


def is_harness(ev: dict) -> bool:
    """Is this one of the harness's own events (the fault timeline), not a node's?"""
    return ev["node"] == HARNESS or ev["proto"] == HARNESS


def digest_entries(digest: list) -> Iterable[tuple[str, int]]:
    """(sender, seqno) of a logged digest's "S:N" items (malformed ones are skipped)."""
    for item in digest:
        sender, _, raw = str(item).rpartition(":")
        try:
            yield sender, int(raw)
        except ValueError:
            continue


def run_message_count(ev: dict) -> int:
    """How many messages an event stands for: a run line's count, else 1."""
    return ev["count"] if ev.get("v") == RUN_VERSION else 1


def check_run(run: dict) -> None:
    """Raise ValueError when a run line contradicts itself."""
    problem = run_problem(run)
    if problem is not None:
        raise ValueError(f"{run['kind']} run at {run['node']} t={run['t']}: {problem}")


def run_span(run: dict) -> tuple[str, int, int]:
    """(prefix "origin:stream", first n, last n) of the application ids a run line stands for."""
    prefix, _, raw_n = run["app"].rpartition(":")
    n0 = int(raw_n)
    return prefix, n0, n0 + run["count"] - 1


def run_messages(run: dict) -> Iterable[dict]:
    """A run line's messages as the one-per-message events a version-1 log has (their bytes an
    even share of the run's), made one by one; a run line that contradicts itself raises."""
    check_run(run)
    prefix, _, raw_n = run["app"].rpartition(":")
    n0, seqno, count = int(raw_n), run["seqno"], run["count"]
    share, extra = divmod(run["bytes"], count)
    base = {key: value for key, value in run.items() if key not in _RUN_ONLY}
    base["v"] = EVENT_VERSION
    for i in range(count):
        one = base.copy()
        one["seqno"] = seqno + i
        one["bytes"] = share + 1 if i < extra else share
        one["app"] = f"{prefix}:{n0 + i}"
        yield one
