"""Reading and writing event logs (JSONL, schema in node/events.py) and whole run directories.

A run directory looks like runs/<name>/{scenario.yaml, nodes/<node>/events.jsonl, timeline.jsonl,
verdict.json}. `read_run` merges every node's log with the harness timeline into one list sorted
by time; the sort is stable, so events with equal times keep the order they were written in.

Logs may hold run lines (one line for a run of sends or deliveries, node/events.py): they are
read as they are, never expanded (node.events.expand_runs does that for who needs one event
per message); a run line that contradicts itself is refused with its file and line.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

from splitbrain.node.errors import BadInput
from splitbrain.node.events import RUN_VERSION, run_problem

try:  # the `fast` extra; without it every line goes through json.dumps
    import orjson
except ImportError:  # pragma: no cover - exercised only where the extra is not installed
    orjson = None  # type: ignore[assignment]

_SEPARATORS = (",", ":")
_ENCODE = json.JSONEncoder(separators=_SEPARATORS).encode  # what json.dumps(ev, separators=...) does
# orjson writes what json.dumps writes (compact, keys in order) except: non-ASCII and DEL, which
# json escapes; floats below 1e-4 (orjson: 0.00005 and 5e-6, json: 5e-05 and 5e-06); NaN and
# infinities (orjson: null). A line with any of those, or with text that merely looks like them,
# is written by json instead, so the bytes are always json.dumps's. Types json cannot write
# (dataclasses, datetimes, subclasses) make orjson raise too, and json then raises as before.
_EXPONENT = re.compile(rb"[0-9]e-")
# Lines encoded at a time. orjson's results each hold a fresh block of the C heap, which the C
# library gives back to the kernel once a chunk is freed, unless a chunk stays small: 4096 lines
# cost 0.55 s of page faults per 258 k events, 128 lines none.
_CHUNK = 128
_ORJSON_OPTS = (
    0
    if orjson is None
    else orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
)


class EventLogError(BadInput, ValueError):
    """An event log or run directory that cannot be read; the message names the file (and line)."""


def write_events(path: str | os.PathLike, events: Iterable[dict]) -> None:
    """Write events as JSONL, one compact object per line, creating parent directories. The
    bytes are json.dumps(ev, separators=(",", ":")) per line; orjson writes them when installed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    events = events if isinstance(events, list) else list(events)
    with path.open("wb") as out:
        # In chunks (_CHUNK): they reuse the same memory, several times cheaper than one text
        # of the whole log (36 MB for 258 k events).
        for i in range(0, len(events), _CHUNK):
            out.write(encode_lines(events[i : i + _CHUNK]))


def encode_lines(events: Iterable[dict]) -> bytes:
    """Events as JSON lines, each ended by a newline, byte for byte as json.dumps writes them."""
    events = events if isinstance(events, list) else list(events)
    if len(events) > _CHUNK:
        return b"".join(encode_lines(events[i : i + _CHUNK]) for i in range(0, len(events), _CHUNK))
    if orjson is None:
        return "".join(_ENCODE(ev) + "\n" for ev in events).encode()
    dumps, opts = orjson.dumps, _ORJSON_OPTS
    try:
        lines = [dumps(ev, option=opts) for ev in events]
    except TypeError:
        lines = [_careful(ev) for ev in events]
    else:
        # One scan of the whole text (C loops, a few ms per MB); only a text with something
        # suspicious is looked at line by line.
        if _suspect(b"".join(lines)):
            lines = [_encode_line(ev).encode() if _suspect(line) else line for ev, line in zip(events, lines)]
    if not lines:
        return b""
    lines.append(b"")
    return b"\n".join(lines)


def _suspect(text: bytes) -> bool:
    """Whether orjson's text may differ from json's (see _EXPONENT)."""
    return (
        b"0.0000" in text
        or b"null" in text
        or b"\x7f" in text
        or not text.isascii()
        or (b"e-" in text and _EXPONENT.search(text) is not None)
    )


def _encode_line(ev: dict) -> str:
    return _ENCODE(ev)


def _careful(ev: dict) -> bytes:
    """One line when some event of the batch is not something orjson writes."""
    try:
        line = orjson.dumps(ev, option=_ORJSON_OPTS)
    except TypeError:
        return _ENCODE(ev).encode()
    return _ENCODE(ev).encode() if _suspect(line) else line


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
            # A run line stands for many messages: one that contradicts itself (a gap inside it)
            # would make every checker count the wrong messages, so it is refused here.
            if ev.get("v") == RUN_VERSION:
                problem = run_problem(ev)
                if problem is not None:
                    raise EventLogError(f"{path}:{lineno}: bad run line: {problem}")
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
