"""Application side of a node: workload streams that send, and bookkeeping of what was delivered.

A stream sends app payloads (node.message.app_payload: "sender:stream:n", n from 1) to one or
more peers at a rate, until a count or a duration. Each n goes to every destination of the
stream, so `sent` counts n's (per destination), and a stream with `count` is done at sent == count.

Delivered bookkeeping keeps, per (sender, stream): count, first and last n, order violations (an
n lower than the highest seen that was not seen before) and duplicates (an n seen before). The
n's seen are a list of disjoint ranges: an in-order stream is one range whatever its length, so
memory grows with the number of gaps, not with the number of messages.

Latency samples: every SAMPLE_EVERY-th n of a stream records its send time at the sender and
its delivery time at the receiver (both on the run clock), at most MAX_SAMPLES per stream, so a
benchmark can compute delivery latency without an event log (GET /samples).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from itertools import repeat
from typing import Any

from ..message import APP_HEADS, MAX_APP_ID_BYTES, Message

SAMPLE_EVERY = 64
MAX_SAMPLES = 20_000
_SAMPLE_MASK = SAMPLE_EVERY - 1
_SAMPLE_SHIFT = SAMPLE_EVERY.bit_length() - 1
_MAGIC = b"SB"


def make_payloads(prefix: bytes, first: int, last: int, size: int) -> list[bytes]:
    """node.message.app_payload(sender, stream, n, size) for n from first to last, with `prefix` =
    b"sender:stream:": the hot path of a stream.

    All n with as many digits share the head (magic, length byte, prefix) and the padding, so each
    payload is one bytes format of three parts: about a fifth of the cost of building every one
    from its app id (0.2 against 0.9 us here)."""
    if first < 0:
        raise ValueError(f"message numbers start at 0, not {first}")
    out: list[bytes] = []
    n = first
    while n <= last:
        digits = len(str(n))
        top = min(last, 10**digits - 1)  # the last n with as many digits
        length = len(prefix) + digits
        if length > MAX_APP_ID_BYTES:
            raise ValueError(f"app id too long: {length} bytes")
        head = APP_HEADS[length] + prefix
        pad = bytes(size - 3 - length) if size > 3 + length else b""
        out += [b"%b%d%b" % (head, m, pad) for m in range(n, top + 1)]
        n = top + 1
    return out


# ---- sending ----------------------------------------------------------------------------------


class Stream:
    """One workload stream. Scheduling lives in the node; this object only knows what is due."""

    __slots__ = (
        "stream",
        "to",
        "count",
        "duration",
        "rate",
        "size",
        "sent",
        "done",
        "started",
        "prefix",
        "stopped_reason",
        "samples",
        "blocked",
        "first_n",
    )

    def __init__(
        self,
        sender: str,
        stream: int,
        to: list[str],
        count: int | None,
        duration: float | None,
        rate: float,
        size: int,
        started: float,
        first_n: int = 1,
    ):
        self.stream = stream
        self.to = to
        self.count = count
        self.duration = duration
        self.rate = rate
        self.size = size
        self.sent = 0
        self.done = False
        self.started = started
        self.prefix = f"{sender}:{stream}:".encode()
        self.stopped_reason: str | None = None
        self.samples: list[tuple[int, float]] = []
        self.blocked = False
        self.first_n = first_n  # app n of the first message; n = first_n + index

    @property
    def planned(self) -> int | None:
        """How many n's the stream will send: count, or rate x duration; None for rate 0 + duration."""
        if self.count is not None:
            return self.count
        if self.rate > 0 and self.duration is not None:
            # Message k (from 0) is due at k / rate, and those due before the duration are sent.
            return max(1, math.ceil(self.rate * self.duration - 1e-9))
        return None

    def due(self, now: float, batch: int) -> int:
        """How many n's to send now (at most `batch`)."""
        if self.done:
            return 0
        limit = batch
        planned = self.planned
        if planned is not None:
            limit = min(limit, planned - self.sent)
        else:
            assert self.duration is not None  # a stream has a count or a duration
            if now >= self.started + self.duration:
                return 0
        if self.rate > 0:
            target = math.floor((now - self.started) * self.rate + 1e-9) + 1  # the first goes at once
            limit = min(limit, target - self.sent)
        return max(0, limit)

    def finished(self, now: float) -> bool:
        planned = self.planned
        if planned is not None:
            return self.sent >= planned
        assert self.duration is not None  # a stream has a count or a duration
        return now >= self.started + self.duration

    def next_due(self) -> float:
        """Run-clock time the next message is due (rate > 0)."""
        return self.started + self.sent / self.rate

    def to_dict(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "to": list(self.to),
            "sent": self.sent,
            "planned": self.planned,
            "done": self.done,
            "rate": self.rate,
            "size": self.size,
            "count": self.count,
            "duration": self.duration,
            "started": self.started,
            "blocked": self.blocked,
            "stopped": self.stopped_reason,
        }


# ---- delivered bookkeeping --------------------------------------------------------------------


class StreamStats:
    """What one receiver delivered of one (sender, stream)."""

    __slots__ = ("count", "first", "last", "highest", "order_violations", "duplicates", "_lo", "_hi", "samples")

    def __init__(self) -> None:
        self.count = 0
        self.first: int | None = None
        self.last: int | None = None
        self.highest = 0
        self.order_violations = 0
        self.duplicates = 0
        # Seen n's as disjoint sorted ranges lo[i]..hi[i]; the last one usually ends at `highest`.
        self._lo: list[int] = []
        self._hi: list[int] = []
        self.samples: list[tuple[int, float]] | None = None

    def add(self, n: int) -> None:
        self.count += 1
        self.last = n
        if self.first is None:
            self.first = n
        highest = self.highest
        if n > highest:
            hi = self._hi
            if hi and hi[-1] == n - 1:
                hi[-1] = n
            else:
                self._lo.append(n)
                hi.append(n)
            self.highest = n
            return
        if self._seen(n):
            self.duplicates += 1
        else:
            self.order_violations += 1
            self._insert(n)

    def run_open(self) -> bool:
        """True when the seen ranges end at `highest`, so highest + 1 can extend the last one."""
        return bool(self._hi) and self._hi[-1] == self.highest

    def add_run(self, lo: int, hi: int) -> None:
        """Record lo, lo+1, ..., hi delivered in that order, lo == highest + 1 and run_open()."""
        self.count += hi - lo + 1
        self.last = hi
        if self.first is None:
            self.first = lo
        self._hi[-1] = hi
        self.highest = hi

    def _seen(self, n: int) -> bool:
        i = bisect_right(self._lo, n) - 1
        return i >= 0 and n <= self._hi[i]

    def _insert(self, n: int) -> None:
        lo, hi = self._lo, self._hi
        i = bisect_right(lo, n)  # ranges 0..i-1 start at or below n; range i starts above n
        joins_left = i > 0 and hi[i - 1] == n - 1
        joins_right = i < len(lo) and lo[i] == n + 1
        if joins_left and joins_right:
            hi[i - 1] = hi[i]
            del lo[i], hi[i]
        elif joins_left:
            hi[i - 1] = n
        elif joins_right:
            lo[i] = n
        else:
            lo.insert(i, n)
            hi.insert(i, n)

    @property
    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._lo, self._hi))

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "first": self.first,
            "last": self.last,
            "order_violations": self.order_violations,
            "duplicates": self.duplicates,
        }


def _run_matches(msgs: list[Message], start: int, prefix: bytes, first: int, most: int) -> int:
    """How many of msgs[start:] (at most `most`) carry the app ids prefix + first, prefix +
    first + 1, ... in that order, with no parsing: every payload must begin with the same head
    (magic, length byte, prefix) and then the number's digits, so the heads are compared one by
    one in C and the digits of the whole chunk as one bytes string."""
    digits = len(str(first))
    if len(prefix) + digits > MAX_APP_ID_BYTES:
        return 0  # no such app id: the parsing path says what the payload is
    last = min(first + most, 10**digits, first + len(msgs) - start) - 1  # as many digits
    head = APP_HEADS[len(prefix) + digits] + prefix
    payloads = [msg.payload for msg in msgs[start : start + last - first + 1]]
    at, end = len(head), len(head) + digits
    # A payload cut short gives fewer digit bytes, so the joined digits differ in length.
    numbers = b"".join([payload[at:end] for payload in payloads])
    if (
        all(map(bytes.startswith, payloads, repeat(head)))
        and numbers == "".join(map(str, range(first, last + 1))).encode()
    ):
        return len(payloads)
    for taken, payload in enumerate(payloads):  # the run breaks in this chunk: where
        if not payload.startswith(b"%b%d" % (head, first + taken)):
            return taken
    return len(payloads)


class Delivered:
    """All deliveries of one node, keyed by (sender, stream) as parsed from the app payload."""

    def __init__(self) -> None:
        self.by_key: dict[bytes, StreamStats] = {}  # b"sender:stream" -> stats
        self.by_sender: dict[str, dict[int, StreamStats]] = {}
        self.total = 0
        self.other = 0  # deliveries whose payload is not a workload payload

    def add_batch(self, msgs: list[Message], now: float) -> None:
        """Record a list of delivered messages (the stack's to_app outbox).

        UNICAST3 delivers each sender's messages in order, so a batch is mostly runs of n, n+1,
        n+2... of one stream: a run is recorded at once, and only a break in it goes through
        StreamStats.add."""
        by_key = self.by_key
        key: bytes | None = None
        stats: StreamStats | None = None
        run_lo = run_hi = 0  # the current run of consecutive n's for `stats`, not yet recorded
        run_prefix = b""  # the run's app id up to its n: key + b":"
        other = 0
        i, count = 0, len(msgs)
        while i < count:
            if run_hi:
                # Inside a run the next app ids are known: compared as bytes, not parsed, a chunk at
                # a time (the chunk grows with the run, so a run that breaks at once costs little).
                taken = _run_matches(msgs, i, run_prefix, run_hi + 1, min(max(run_hi - run_lo + 1, 4), 256))
                if taken:
                    if (run_hi + taken) >> _SAMPLE_SHIFT != run_hi >> _SAMPLE_SHIFT:
                        for n in range((run_hi | _SAMPLE_MASK) + 1, run_hi + taken + 1, SAMPLE_EVERY):
                            self._sample(stats, n, now)
                    run_hi += taken
                    i += taken
                    continue
            payload = msgs[i].payload
            i += 1
            if payload[:2] != _MAGIC:
                other += 1
                continue
            end = 3 + payload[2]
            cut = payload.rfind(b":", 3, end)
            if cut < 0 or end > len(payload):
                other += 1
                continue
            try:
                n = int(payload[cut + 1 : end])
            except ValueError:
                other += 1
                continue
            if n == run_hi + 1 and run_hi and payload[3:cut] == key:
                run_hi = n
            else:
                if run_hi:
                    assert stats is not None  # a run is open only while its stats are known
                    stats.add_run(run_lo, run_hi)
                    run_hi = 0
                new_key = payload[3:cut]
                if new_key != key:
                    key = new_key
                    stats = by_key.get(key)
                    if stats is None:
                        stats = self._new(key)
                if stats is None:
                    key = None
                    other += 1
                    continue
                if n == stats.highest + 1 and stats.run_open():
                    run_lo = run_hi = n
                    run_prefix = new_key + b":"
                else:
                    stats.add(n)
            if not n & _SAMPLE_MASK:
                self._sample(stats, n, now)
        if run_hi:
            assert stats is not None
            stats.add_run(run_lo, run_hi)
        self.total += len(msgs)
        self.other += other

    @staticmethod
    def _sample(stats: StreamStats | None, n: int, now: float) -> None:
        assert stats is not None  # set with the key, or the message was counted as other
        samples = stats.samples
        if samples is None:
            samples = stats.samples = []
        if len(samples) < MAX_SAMPLES:
            samples.append((n, now))

    def _new(self, key: bytes) -> StreamStats | None:
        try:
            sender, _, stream_text = key.decode().rpartition(":")
            stream = int(stream_text)
        except (UnicodeDecodeError, ValueError):
            return None
        if not sender:
            return None
        stats = StreamStats()
        self.by_key[key] = stats
        self.by_sender.setdefault(sender, {})[stream] = stats
        return stats

    def per_sender_counts(self) -> dict[str, int]:
        return {s: sum(st.count for st in streams.values()) for s, streams in self.by_sender.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "delivered": {
                sender: {str(stream): st.to_dict() for stream, st in sorted(streams.items())}
                for sender, streams in sorted(self.by_sender.items())
            },
            "total": self.total,
        }

    def samples(self) -> dict[str, Any]:
        return {
            sender: {str(stream): [list(s) for s in (st.samples or ())] for stream, st in sorted(streams.items())}
            for sender, streams in sorted(self.by_sender.items())
        }
