"""The node's event log: events of node/events.py as JSON lines, buffered, flushed every 100 ms.

Events are kept as dicts until a flush and encoded then in one go: a flush runs at least every
`flush_interval_s` (so a killed node loses at most that much) and sooner when many events are
waiting, so that one flush never blocks the loop for long. The two events written once per
message (UNICAST3's send and deliver) have a fixed key order; they are formatted from parts
built once per (node, proto, kind, peer, conn_id), about 2.5x cheaper than json.dumps (and the
same JSON; tests/node/test_node_parts.py checks it). They mostly come as DataEvents records (one per
batch, node/events.py), whose lines are formatted straight from the record's messages, byte for
byte the lines of its dicts, which are never built: when every app id can be written as it is
(a workload's always can), the whole record is one bytes %-format of a line template repeated once
per message, with t, node, peer, conn_id (and the size, when all are the same) already in it; else
line by line. The app ids of a record whose payloads share one size and one id length (a stream's)
are read at fixed offsets by struct, not sliced payload by payload. Any other event goes through
the json encoder.

A record of two or more messages whose app ids are consecutive in one stream (a workload batch's
always are: checked byte column by byte column over the payloads, _stream_run) is written as one
run line (schema version 2, node/events.py, docs/event-log.md) instead of a line per message; a
record that is not is written as the run lines of its consecutive pieces.
`runs=False` keeps one line per message (version 1).

The file is opened for appending: a restarted node (a new incarnation) continues its own log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import struct
from io import FileIO

# The C implementation when available; the ASCII variant, as the json encoder's default, so a
# formatted line is byte for byte what the encoder writes for the same dict.
from json.encoder import encode_basestring_ascii as _c_str
from operator import attrgetter
from pathlib import Path
from typing import Any

from ..events import EVENT_VERSION, DataEvents, compact_runs, run_event, split_app, unpack_events

log = logging.getLogger("node.eventlog")

# The key order of UNICAST3's hot-path data event (node/unicast3/protocol.py: down, and DataEvents.dicts).
_DATA_KEYS = ("v", "t", "node", "proto", "kind", "peer", "seqno", "conn_id", "bytes", "app")
_INF = float("inf")
_UNSET = object()  # no t seen yet (None is a value an event could carry)
_NO_CONN = object()  # the conn_id of a record whose events have none (None would be a JSON null)
_payload_of = attrgetter("payload")
# The bytes JSON writes unchanged inside a string (json's ASCII escaping leaves exactly these).
_JSON_AS_IS = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')
# Messages whose app ids one struct unpack reads (a record's rest takes one more).
_ID_BLOCK = 64


def _interleave(*columns: Any) -> tuple[Any, ...]:
    """(a0, b0, a1, b1, ...) from columns (a0, a1, ...), (b0, b1, ...) of one length: the values
    of a format repeated once per row (slice assignment, about 2.5x cheaper than chain(zip()))."""
    width = len(columns)
    out: list[Any] = [None] * (width * len(columns[0]))
    for i, column in enumerate(columns):
        out[i::width] = column
    return tuple(out)


class _RunLine:
    """A DataEvents record already written as its run line (`n`: the messages it stands for)."""

    __slots__ = ("text", "n")

    def __init__(self, text: str, n: int) -> None:
        self.text = text
        self.n = n

    def __len__(self) -> int:
        return self.n


_COUNTED = (DataEvents, _RunLine)  # pending entries that count as their messages
_Pending = dict[str, Any] | DataEvents | _RunLine  # what waits for a flush


# The per-message kinds of recovery that come as one dict per message (a resent batch, the drops
# of a window's overflow): consecutive ones are written as runs too.
_RECOVERY = frozenset(("retransmit", "drop"))


def _compact_recovery(events: list[Any]) -> list[Any]:
    """The events with each stretch of consecutive retransmit and drop dicts as compact_runs
    gives it (node/events.py): consecutive seqnos that agree in all else become one run line."""
    n = len(events)
    i = 0
    out: list[Any] | None = None
    while i < n:
        ev = events[i]
        if type(ev) is dict and ev.get("kind") in _RECOVERY:
            j = i + 1
            while j < n and type(events[j]) is dict and events[j].get("kind") in _RECOVERY:
                j += 1
            if j - i > 1:
                if out is None:
                    out = list(events[:i])
                out.extend(compact_runs(events[i:j]))
            elif out is not None:
                out.append(ev)
            i = j
            continue
        if out is not None:
            out.append(ev)
        i += 1
    return events if out is None else out


def _stream_run(payloads: list[bytes]) -> tuple[str, str, int] | None:
    """(first app id, last app id, bytes in all) when the payloads are workload payloads of one size whose app
    ids (node.message.app_payload) are "P" + n, "P" + (n+1), ...; else None.

    Checked column by column over the payloads' concatenation: one strided slice per byte of the
    id, compared with what that column must hold (the prefix's byte, or the digit of n+i at that
    place: digit_column), so the cost per message is a few bytes of C, not a Python step. A
    batch whose numbers gain a digit (9999 -> 10000) is checked piece by piece, each of one length."""
    n = len(payloads)
    first = payloads[0]
    size = len(first)
    if size < 3 or list(map(len, payloads)).count(size) != n:
        return None
    joined = b"".join(payloads)
    if joined[::size] != b"S" * n or joined[1::size] != b"B" * n:
        return None
    lengths = joined[2::size]
    start, prefix, expect = 0, None, None
    while start < n:
        length = lengths[start]
        end = n - len(lengths[start:].lstrip(bytes((length,))))
        piece = _stream_piece(joined[start * size : end * size], end - start, size, length)
        if piece is None or (prefix is not None and (piece[0] != prefix or piece[1] != expect)):
            return None
        prefix, expect = piece[0], piece[1] + end - start
        start = end
    return first[3 : 3 + first[2]].decode(), payloads[-1][3 : 3 + payloads[-1][2]].decode(), len(joined)


def _stream_piece(joined: bytes, n: int, size: int, length: int) -> tuple[bytes, int] | None:
    """(prefix, first number) of n payloads of `size` bytes, concatenated, whose app ids are all
    `length` bytes long and "P" + n0, "P" + (n0+1), ...; else None."""
    if size < 3 + length:
        return None
    head, tail = joined[3 : 3 + length], joined[(n - 1) * size + 3 : (n - 1) * size + 3 + length]
    if not head.isascii() or not tail.isascii():
        return None
    a, b = split_app(head.decode()), split_app(tail.decode())
    if a is None or b is None or a[0] != b[0] or b[1] - a[1] != n - 1:
        return None
    prefix, n0 = a[0].encode(), a[1]
    for j, byte in enumerate(prefix):
        if joined[3 + j :: size] != bytes((byte,)) * n:
            return None
    width = length - len(prefix)  # every id has this length, so every number this many digits
    for j in range(width):
        if joined[3 + len(prefix) + j :: size] != digit_column(n0, n, 10 ** (width - 1 - j)):
            return None
    return prefix, n0


def _known_run(apps: list[str]) -> tuple[str, str, int | None] | None:
    """(first, last) when app ids known as strings are "P" + n, "P" + (n+1), ...; else None."""
    a, b = split_app(apps[0]), split_app(apps[-1])
    if a is None or b is None or a[0] != b[0] or b[1] - a[1] != len(apps) - 1:
        return None
    template = a[0].replace("%", "%%") + "%d\n"
    if "\n".join(apps) + "\n" != template * len(apps) % tuple(range(a[1], b[1] + 1)):
        return None
    return apps[0], apps[-1], None


_DIGITS = b"0123456789"


def digit_column(n0: int, n: int, place: int) -> bytes:
    """The ASCII digit at `place` (1, 10, 100...) of n0, n0+1, ..., n0+n-1, as n bytes."""
    if place >= n:  # the digit changes at most once over n consecutive numbers
        before = min(n, place - n0 % place)
        d0 = _DIGITS[(n0 // place) % 10]
        d1 = _DIGITS[((n0 + before) // place) % 10]
        return bytes((d0,)) * before + bytes((d1,)) * (n - before)
    period = _period(place)  # the column repeats every 10 * place numbers
    start = n0 % len(period)
    return (period * ((start + n) // len(period) + 1))[start : start + n]


_PERIODS: dict[int, bytes] = {}


def _period(place: int) -> bytes:
    found = _PERIODS.get(place)
    if found is None:
        found = _PERIODS[place] = b"".join(bytes((d,)) * place for d in _DIGITS)
    return found


class EventLog:
    """A buffered JSONL writer driven by the event loop (`loop.call_later`), never by a thread."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        loop: asyncio.AbstractEventLoop,
        flush_interval_s: float = 0.1,
        batch_events: int = 4096,
        runs: bool = True,
    ):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: FileIO | None = open(self.path, "ab", buffering=0)  # noqa: SIM115 - closed in close()
        self._loop = loop
        self._interval = flush_interval_s
        self._batch = batch_events
        # Write a batch's run of sends or deliveries as one run line (node/events.py), or, False,
        # one line per message (schema version 1, as a reader of version 1 needs).
        self.runs = runs
        self._pending: list[_Pending] = []
        self._pending_n = 0  # events in _pending, a record or a run line counting as its messages
        self._pending_lines = 0  # entries in _pending (what a flush's duration grows with)
        self._timer: asyncio.TimerHandle | None = None
        self._soon: asyncio.Handle | None = None
        self._encoder = json.JSONEncoder(separators=(",", ":"), check_circular=False, allow_nan=False)
        self._parts: dict[tuple[Any, ...], tuple[str, str, str] | None] = {}
        self._id_structs: dict[tuple[int, int, int], struct.Struct] = {}
        self.written = 0
        self.write_errors = 0
        self.closed = False

    def start(self) -> None:
        self._timer = self._loop.call_later(self._interval, self._tick)

    # ---- input --------------------------------------------------------------------------------

    def append(self, event: dict[str, Any] | DataEvents) -> None:
        self.extend([event])

    def extend(self, events: list[dict[str, Any] | DataEvents]) -> None:
        pending: list[_Pending] = events  # type: ignore[assignment]  # a list is invariant; only read here
        if self.runs:
            pending = [self._as_run(ev) if type(ev) is DataEvents and len(ev.msgs) > 1 else ev for ev in events]
        self._pending.extend(pending)
        self._pending_n += sum(len(ev) if type(ev) in _COUNTED else 1 for ev in pending)
        self._pending_lines += len(pending)
        if self._pending_lines >= self._batch and self._soon is None and not self.closed:
            self._soon = self._loop.call_soon(self._flush_soon)

    def _as_run(self, rec: DataEvents) -> _RunLine | DataEvents:
        """A record's run line, made now while its messages are fresh in the CPU's caches (at a
        flush, a tenth of a second later, they are not: several times the cost); the record
        itself when it is not one run. The line holds no message, so they are freed now too."""
        line = self._record_run(rec)
        return rec if line is None else _RunLine(line, len(rec))

    # ---- output -------------------------------------------------------------------------------

    def _tick(self) -> None:
        self._timer = None
        try:
            self.flush()
        finally:
            if not self.closed:
                self._timer = self._loop.call_later(self._interval, self._tick)

    def _flush_soon(self) -> None:
        self._soon = None
        self.flush()

    def flush(self) -> None:
        if not self._pending or self._file is None:
            return
        events, self._pending = self._pending, []
        count, self._pending_n = self._pending_n, 0
        self._pending_lines = 0
        try:
            data = self.encode(events)
        except (TypeError, ValueError) as exc:
            # A producer broke the schema; keep every event that can be written.
            log.error("event log: cannot encode a batch (%s); encoding one by one", exc)
            data = self._encode_tolerant(events)
        try:
            self._file.write(data)
            self.written += count
        except OSError as exc:
            self.write_errors += count
            log.error("event log %s: write failed: %s (%d events lost)", self.path, exc, count)

    def encode(self, events: list[_Pending] | list[dict[str, Any] | DataEvents]) -> bytes:
        """Events as JSON lines (bytes, with a final newline)."""
        if self.runs:
            events = _compact_recovery(events)
        enc = self._encoder.encode
        chunks: list[bytes] = []  # runs of lines as bytes, in order
        lines: list[str] = []  # the current run of lines formatted as str
        append = lines.append
        # The constant parts of the current data-event line and what they were built from.
        last_t = _UNSET
        lv = lnode = lproto = lkind = lpeer = lconn = None
        head = after_t = after_seqno = prefix = ""
        for ev in events:
            if isinstance(ev, _RunLine):
                append(ev.text)
                continue
            if isinstance(ev, DataEvents):
                if self.runs and len(ev.msgs) > 1:
                    run = self._record_run(ev)
                    if run is None:
                        lines.extend(map(enc, ev.run_dicts()))
                    else:
                        append(run)
                    continue
                block = self._record_block(ev)
                if block is None:
                    self._record_lines(ev, lines)
                    continue
                if lines:
                    append("")
                    chunks.append("\n".join(lines).encode())
                    lines.clear()
                chunks.append(block)
                continue
            if tuple(ev) != _DATA_KEYS:
                append(enc(ev))
                continue
            v, t, node, proto, kind, peer, seqno, conn_id, nbytes, app = ev.values()
            same_head = (
                kind is lkind and peer is lpeer and conn_id == lconn and node is lnode and proto is lproto and v == lv
            )
            if t is not last_t or not same_head:
                # Around t, seqno, bytes and app the line is the same for every event of one
                # (v, node, proto, kind, peer, conn_id), and events of one input share their t.
                if not same_head:
                    parts = self._parts_for((v, node, proto, kind, peer, conn_id))
                    if parts is None:
                        last_t, lkind = _UNSET, None
                        append(enc(ev))
                        continue
                    head, after_t, after_seqno = parts
                    lv, lnode, lproto, lkind, lpeer, lconn = v, node, proto, kind, peer, conn_id
                if type(t) is not float or not -_INF < t < _INF:
                    last_t = _UNSET
                    append(enc(ev))
                    continue
                last_t = t
                prefix = f"{head}{t!r}{after_t}"
            if type(seqno) is not int or type(nbytes) is not int or type(app) is not str or type(conn_id) is not int:
                append(enc(ev))
                continue
            append(f'{prefix}{seqno}{after_seqno}{nbytes},"app":{_c_str(app)}}}')
        if lines:
            append("")
            chunks.append("\n".join(lines).encode())
        return b"".join(chunks)

    def _record_run(self, rec: DataEvents) -> str | None:
        """The record as one run line (node/events.py, RUN_VERSION) when its app ids are "S:K:n"
        .. "S:K:n+count-1" in order, as a workload stream's are; None otherwise (then the record
        goes piece by piece through DataEvents.run_dicts)."""
        msgs = rec.msgs
        n = len(msgs)
        payloads = list(map(_payload_of, msgs))
        found: tuple[str, str, int | None] | None = _stream_run(payloads)
        if found is None:
            apps = [msg.known_app for msg in msgs]
            if None in apps:
                return None
            found = _known_run(apps)
            if found is None:
                return None
        first_app, last_app, total = found
        if total is None:
            total = sum(map(len, payloads))
        members = rec.members
        if members is not None:
            # A multicast sender's own record: its send run, then its loopback deliver run.
            send = run_event(
                rec.t, rec.node, rec.proto, "send", None, None, rec.first_seqno, n, total, first_app, last_app, members
            )
            deliver = run_event(
                rec.t, rec.node, rec.proto, "deliver", rec.node, None, rec.first_seqno, n, total, first_app, last_app
            )
            return self._encoder.encode(send) + "\n" + self._encoder.encode(deliver)
        ev = run_event(
            rec.t, rec.node, rec.proto, rec.kind, rec.peer, rec.conn_id, rec.first_seqno, n, total, first_app, last_app
        )
        return self._encoder.encode(ev)

    def _record_block(self, rec: DataEvents) -> bytes | None:
        """The lines of a DataEvents record in one bytes %-format over the whole record, when
        every message carries an app id that JSON writes as it is (printable ASCII, no quote or
        backslash), as a workload's always do; None otherwise (then _record_lines does it).

        One C-level format call per record instead of an f-string, an app id decode and a str
        escape per line: about a third less CPU per line (benchmarks/bench_speed.py, "event log
        lines"; docs/results.md)."""
        t = rec.t
        if type(t) is not float or not -_INF < t < _INF or type(rec.first_seqno) is not int:
            return None
        conn_id = _NO_CONN if rec.conn_id is None else rec.conn_id
        parts = self._parts_for((EVENT_VERSION, rec.node, rec.proto, rec.kind, rec.peer, conn_id))
        if parts is None:
            return None
        payloads = list(map(_payload_of, rec.msgs))
        n = len(payloads)
        apps = self._aligned_app_ids(payloads)
        if apps is None:
            try:
                # node.message.app_id_of, without the decode: b"SB", the id's length, the id.
                apps = [p[3 : 3 + p[2]] for p in payloads if p[0] == 83 and p[1] == 66 and len(p) >= 3 + p[2]]
            except IndexError:  # a payload shorter than 3 bytes
                return None
            if len(apps) != n:
                return None
        if b"".join(apps).translate(None, _JSON_AS_IS):
            return None
        head, after_t, after_seqno = parts
        start = f"{head}{t!r}{after_t}".replace("%", "%%").encode() + b"%d" + after_seqno.encode()
        sizes = list(map(len, payloads))
        seqnos = range(rec.first_seqno, rec.first_seqno + n)
        if n and sizes.count(sizes[0]) == n:
            # One size for the whole record (a stream's fixed payload size): part of the template.
            line = start + b'%d,"app":"%%b"}\n' % sizes[0]
            values = _interleave(seqnos, apps)
        else:
            line = start + b'%d,"app":"%b"}\n'
            values = _interleave(seqnos, sizes, apps)
        return (line * n) % values

    def _aligned_app_ids(self, payloads: list[bytes]) -> list[bytes] | None:
        """The app ids (undecoded) of payloads that all have one size and app ids of one length,
        as a workload stream's between two powers of ten; None when they are not like that.

        Read at fixed offsets of the payloads' concatenation: three strided slices check every
        payload's b"SB" and id length, one struct unpack per block of messages cuts the ids out:
        with the checks about a quarter of the instructions of slicing each payload in a
        comprehension (a 1,300-message record: 3,970 -> 2,600 instructions per line in all)."""
        first = payloads[0] if payloads else b""
        size = len(first)
        n = len(payloads)
        if size < 3 or size < 3 + first[2] or list(map(len, payloads)).count(size) != n:
            return None
        joined = b"".join(payloads)
        if joined[::size] != b"S" * n or joined[1::size] != b"B" * n or joined[2::size] != first[2:3] * n:
            return None
        length = first[2]
        apps: list[bytes] = []
        whole = n - n % _ID_BLOCK
        if whole:
            block = self._id_struct(length, size, _ID_BLOCK)
            step = _ID_BLOCK * size
            for offset in range(0, whole * size, step):
                apps.extend(block.unpack_from(joined, offset))
        if whole < n:
            apps.extend(self._id_struct(length, size, n - whole).unpack_from(joined, whole * size))
        return apps

    def _id_struct(self, length: int, size: int, count: int) -> struct.Struct:
        """The Struct that reads the app ids of `count` consecutive payloads of `size` bytes."""
        key = (length, size, count)
        found = self._id_structs.get(key)
        if found is None:
            if len(self._id_structs) > 1_000:
                self._id_structs.clear()
            found = self._id_structs[key] = struct.Struct(f"3x{length}s{size - 3 - length}x" * count)
        return found

    def _record_lines(self, rec: DataEvents, lines: list[str]) -> None:
        """The lines of a DataEvents record: those of rec.dicts(), without building them."""
        t = rec.t
        conn_id = _NO_CONN if rec.conn_id is None else rec.conn_id
        parts = self._parts_for((EVENT_VERSION, rec.node, rec.proto, rec.kind, rec.peer, conn_id))
        if parts is None or type(t) is not float or not -_INF < t < _INF or type(rec.first_seqno) is not int:
            lines.extend(self._encoder.encode(ev) for ev in rec.dicts())
            return
        head, after_t, after_seqno = parts
        prefix = f"{head}{t!r}{after_t}"
        append = lines.append
        seqno = rec.first_seqno
        for msg in rec.msgs:
            p = msg.payload
            size = len(p)
            # node.message.app_id_of, inlined: b"SB", the id's length, the id in UTF-8.
            if size > 2 and p[0] == 83 and p[1] == 66 and size >= 3 + p[2]:
                try:
                    append(f'{prefix}{seqno}{after_seqno}{size},"app":{_c_str(p[3 : 3 + p[2]].decode())}}}')
                    seqno += 1
                    continue
                except UnicodeDecodeError:
                    pass
            append(f"{prefix}{seqno}{after_seqno}{size}}}")
            seqno += 1

    def _parts_for(self, key: tuple[Any, ...]) -> tuple[str, str, str] | None:
        """The constant parts of a data event's line, or None when a value has the wrong type."""
        parts = self._parts.get(key)
        if parts is not None:
            return parts
        v, node, proto, kind, peer, conn_id = key
        if conn_id is _NO_CONN:
            after_seqno = ',"bytes":'
        elif type(conn_id) is int:
            after_seqno = ',"conn_id":%d,"bytes":' % conn_id
        else:
            return None
        if type(v) is not int or not all(type(x) is str for x in (node, proto, kind, peer)):
            return None
        parts = (
            '{"v":%d,"t":' % v,
            ',"node":%s,"proto":%s,"kind":%s,"peer":%s,"seqno":'
            % (_c_str(node), _c_str(proto), _c_str(kind), _c_str(peer)),
            after_seqno,
        )
        if len(self._parts) > 10_000:
            self._parts.clear()
        self._parts[key] = parts
        return parts

    def _encode_tolerant(self, events: list[_Pending]) -> bytes:
        out = []
        entry: Any
        for entry in unpack_events(events):
            if isinstance(entry, _RunLine):
                out.append(entry.text)
                continue
            try:
                out.append(self._encoder.encode(entry))
            except (TypeError, ValueError) as exc:
                self.write_errors += 1
                log.error("event log: dropping an event that is not JSON (%s): %r", exc, entry)
        out.append("")
        return "\n".join(out).encode()

    def close(self) -> None:
        """Flush what is buffered and close the file; later events are ignored."""
        if self.closed:
            return
        self.flush()
        self.closed = True
        for handle in (self._timer, self._soon):
            if handle is not None:
                handle.cancel()
        self._timer = self._soon = None
        file, self._file = self._file, None
        if file is not None:
            file.close()

    @property
    def pending(self) -> int:
        return self._pending_n
