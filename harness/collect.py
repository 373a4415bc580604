"""Collecting a live run's logs: the harness's timeline joins what the nodes wrote, and the merged
log is read back for judging, with the message counts the run reports."""

from __future__ import annotations

from pathlib import Path

from splitbrain.harness.eventlog import read_run
from splitbrain.harness.rundir import write_timeline
from splitbrain.node.events import RUN_VERSION


def collect_live(run_dir: Path, timeline: list[dict], stats: dict) -> tuple[list[dict], dict]:
    """Write the timeline next to the nodes' logs; the merged log and the stats with its counts."""
    write_timeline(run_dir, timeline)
    events = read_run(run_dir)
    stats = dict(stats)
    stats["msgs_sent"], stats["msgs_delivered"] = count_messages(events)
    return events, stats


def count_messages(events: list[dict]) -> tuple[int, int]:
    """Application messages sent (first sends) and delivered in a merged log."""
    sent = delivered = 0
    for ev in events:
        kind = ev["kind"]
        if "app" in ev:
            # A run line (node/events.py) stands for `count` messages.
            n = ev["count"] if ev.get("v") == RUN_VERSION else 1
            if kind == "send":
                sent += n
            elif kind == "deliver":
                delivered += n
    return sent, delivered
