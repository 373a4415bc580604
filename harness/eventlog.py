"""Reading and writing event logs (JSONL, schema in node/events.py) and whole run directories.

A run directory looks like runs/<name>/{scenario.yaml, nodes/<node>/events.jsonl, timeline.jsonl,
verdict.json}. `read_run` merges every node's log with the harness timeline into one list sorted
by time; the sort is stable, so events with equal times keep the order they were written in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

_SEPARATORS = (",", ":")


class EventLogError(ValueError):
    """An event log or run directory that cannot be read; the message names the file (and line)."""


def write_events(path: str | os.PathLike, events: Iterable[dict]) -> None:
    """Write events as JSONL, one compact object per line, creating parent directories."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for ev in events:
            out.write(json.dumps(ev, separators=_SEPARATORS))
            out.write("\n")


def read_events(path: str | os.PathLike) -> list[dict]:
    """Read one JSONL event log; a line that is not a JSON object with a numeric t raises
    EventLogError naming the file and line."""
    path = Path(path)
    events: list[dict] = []
    with path.open("r", encoding="utf-8") as src:
        for lineno, line in enumerate(src, start=1):
            # Blank lines carry no event; tolerating them costs nothing and hides no data.
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
            except json.JSONDecodeError as exc:
                raise EventLogError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(ev, dict):
                raise EventLogError(f"{path}:{lineno}: expected a JSON object, got {type(ev).__name__}")
            # Every consumer sorts by t; catching a missing time here keeps the file and line.
            t = ev.get("t")
            if isinstance(t, bool) or not isinstance(t, (int, float)):
                raise EventLogError(f"{path}:{lineno}: event has no numeric 't'")
            events.append(ev)
    return events


def read_run(run_dir: str | os.PathLike) -> list[dict]:
    """All node logs and the timeline of a run directory, merged and sorted by t (stable)."""
    run_dir = Path(run_dir)
    node_logs = sorted(run_dir.glob("nodes/*/events.jsonl"))
    # A run without node logs would make every check pass vacuously, so refuse it outright.
    if not node_logs:
        raise EventLogError(f"{run_dir}: no nodes/*/events.jsonl found")
    events: list[dict] = []
    for path in node_logs:
        events.extend(read_events(path))
    # The timeline is absent when the harness applied no faults and wrote nothing.
    timeline = run_dir / "timeline.jsonl"
    if timeline.exists():
        events.extend(read_events(timeline))
    events.sort(key=_time_of)
    return events


def _time_of(ev: dict) -> float:
    return ev["t"]
