"""The workload half of a Node (node/runtime/node.py): streams started from the admin API,
sent in batches paced by their rate, and, for a rate-0 stream, the application's flow control
(wait while the destination is not writable or too much of the stream is unacked).

A mixin of Node: it reads the node's stack, clock and transport, declared below.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import protocols
from ..message import MCAST_DEST, Message
from ..wire import MAX_FRAME_BYTES
from .errors import RequestError
from .workload import MAX_SAMPLES, SAMPLE_EVERY, Stream, make_payloads

if TYPE_CHECKING:
    from ..layer import Layer
    from ..stack import Stack
    from .config import Address, NodeConfig
    from .transport import TcpTransport, UdpTransport

log = logging.getLogger("splitbrain.node.runtime")

STREAM_BATCH = 1024  # messages one stream sends per loop iteration, at most
# Rate-0 streams wait while this much is unacked per destination (at most half the receive buffer
# of our own UDP socket: the peer's is presumably alike, and a datagram costs the kernel more
# than its payload). A message counts its payload plus its overhead in a bundle, or plus the
# kernel's per-datagram overhead when every message is a datagram of its own.
INFLIGHT_BYTES = 8 * 1024 * 1024
MIN_INFLIGHT_MSGS = 1024
MSG_OVERHEAD_BUNDLED = 64
MSG_OVERHEAD_ALONE = 1024
BLOCKED_POLL_S = 0.005
STREAM_TICK_S = 0.001
MAX_TCP_PAYLOAD = 1_000_000 - 1024
MAX_UDP_PAYLOAD = MAX_FRAME_BYTES - 1024
_SAMPLE_MASK = SAMPLE_EVERY - 1


class StreamSender:
    # The Node's, which sets them in its __init__ and start().
    config: NodeConfig
    name: str
    peers: dict[str, Address]
    stack: Stack
    loop: asyncio.AbstractEventLoop
    transport: UdpTransport | TcpTransport | None
    app_sent: dict[str, int]
    streams: dict[int, Stream]
    _running: bool
    _flow_layers: list[Layer]
    _stream_handles: dict[int, asyncio.Handle | asyncio.TimerHandle]
    _blocked: set[int]
    _blocked_poll: asyncio.TimerHandle | None
    now: Callable[[], float]
    _drain: Callable[[float], None]
    _loop_time: Callable[[float], float]
    _stack_error: Callable[..., None]

    def resolve_targets(self, to: Any) -> list[str]:  # to: JSON from an admin request
        if to == MCAST_DEST:
            # One multicast per message to the current view (a multicast protocol's layer sends it).
            if not protocols.get(self.config.protocol).multicast:
                raise RequestError(f"{self.config.protocol} has no multicast: name the peers", "to")
            return [MCAST_DEST]
        if to == "all":
            targets = sorted(self.peers)
            if not targets:
                raise RequestError("this node has no peers", "to")
            return targets
        if isinstance(to, str):
            to = [to]
        if not isinstance(to, list) or not to or not all(isinstance(t, str) for t in to):
            raise RequestError('expected a peer name, a list of peer names or "all"', "to")
        for t in to:
            if t not in self.peers:
                raise RequestError(f"unknown peer {t!r} (peers: {', '.join(sorted(self.peers)) or 'none'})", "to")
        if len(set(to)) != len(to):
            raise RequestError("a peer is named twice", "to")
        return list(to)

    def start_stream(
        self,
        to: Any,
        count: int | None = None,
        duration: float | None = None,
        rate: float = 100.0,
        size: int = 100,
        stream: int | None = None,
        first_n: int = 1,
    ) -> Stream:
        """Start a workload stream (validated; RequestError names the bad field). `first_n` is the app
        n of its first message: a stream resumed after a restart of its sender goes on numbering
        where the old process left off, so application ids never repeat."""
        if not self._running:
            raise RequestError("the node is not running", None, 503)
        targets = self.resolve_targets(to)
        if (count is None) == (duration is None):
            raise RequestError("give exactly one of count and duration", "count")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise RequestError(f"count: expected an integer >= 1, got {count!r}", "count")
        if duration is not None and (
            isinstance(duration, bool) or not isinstance(duration, (int, float)) or not 0 < duration < float("inf")
        ):
            raise RequestError(f"duration: expected a number of seconds > 0, got {duration!r}", "duration")
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < float("inf"):
            raise RequestError(f"rate: expected a number of messages per second >= 0, got {rate!r}", "rate")
        max_size = MAX_UDP_PAYLOAD if self.config.transport == "udp" else MAX_TCP_PAYLOAD
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= max_size:
            raise RequestError(f"size: expected an integer between 0 and {max_size}, got {size!r}", "size")
        if stream is None:
            stream = 0
            while stream in self.streams:
                stream += 1
        elif isinstance(stream, bool) or not isinstance(stream, int) or not 0 <= stream < 2**31:
            raise RequestError(f"stream: expected an integer between 0 and 2**31 - 1, got {stream!r}", "stream")
        elif stream in self.streams:
            raise RequestError(f"stream {stream} exists already", "stream", 409)
        if isinstance(first_n, bool) or not isinstance(first_n, int) or not 1 <= first_n < 2**62:
            raise RequestError(f"first_n: expected an integer >= 1, got {first_n!r}", "first_n")
        s = Stream(
            self.name,
            stream,
            targets,
            count,
            float(duration) if duration is not None else None,
            float(rate),
            size,
            self.now(),
            first_n,
        )
        self.streams[stream] = s
        self._stream_handles[stream] = self.loop.call_soon(self._stream_step, s)
        return s

    def stop_stream(self, stream: int) -> None:
        s = self.streams[stream]
        self._cancel_stream(stream)
        if not s.done:
            s.done = True
            s.stopped_reason = "stopped"

    def _cancel_stream(self, sid: int) -> None:
        handle = self._stream_handles.pop(sid, None)
        if handle is not None:
            handle.cancel()
        self._blocked.discard(sid)

    def _inflight_limit(self, s: Stream) -> int:
        budget = INFLIGHT_BYTES
        rcvbuf = getattr(self.transport, "buffers", (0, 0))[0]
        if rcvbuf:
            budget = min(budget, rcvbuf // 2)
        overhead = MSG_OVERHEAD_BUNDLED if self.config.bundling else MSG_OVERHEAD_ALONE
        return max(MIN_INFLIGHT_MSGS, budget // (s.size + overhead))

    def _is_blocked(self, s: Stream) -> bool:
        limit = self._inflight_limit(s)
        transport = self.transport
        assert transport is not None, "streams run only on a started node"
        for dest in s.to:
            # A multicast goes out to every peer: any of them not writable blocks it.
            for link in self.peers if dest == MCAST_DEST else (dest,):
                if not transport.writable(link):
                    return True
            if self.stack.may_block and self.stack.blocked(dest):
                return True  # the protocol blocks this sender (MCAST's full window)
            for layer in self._flow_layers:
                if layer.unacked(dest) >= limit:
                    return True
        return False

    def _stream_blocked(self, s: Stream) -> bool:
        """A flat-out stream waits for back-pressure; any stream waits while the protocol blocks
        its sender (MCAST's full window: the application's send awaits room)."""
        if s.rate == 0:
            return self._is_blocked(s)
        return self.stack.may_block and any(self.stack.blocked(dest) for dest in s.to)

    def _stream_step(self, s: Stream) -> None:
        self._stream_handles.pop(s.stream, None)
        if s.done or not self._running:
            return
        now = self.now()
        if self._stream_blocked(s):
            s.blocked = True
            self._blocked.add(s.stream)
            if self._blocked_poll is None:
                self._blocked_poll = self.loop.call_later(BLOCKED_POLL_S, self._poll_blocked)
            if s.duration is not None and s.finished(now):
                self._finish(s, now)
            return
        s.blocked = False
        k = s.due(now, STREAM_BATCH)
        if k:
            try:
                self._send_batch(s, k, now)
            except Exception as exc:
                self._stack_error(f"send of stream {s.stream}", exc, now)
                s.done = True
                s.stopped_reason = f"error: {type(exc).__name__}: {exc}"
                self._drain(now)
                return
            self._drain(now)
        if s.finished(now):
            self._finish(s, now)
            return
        if s.rate == 0:
            self._stream_handles[s.stream] = self.loop.call_soon(self._stream_step, s)
        else:
            # A paced stream wakes at most once per STREAM_TICK_S and sends what is due by then:
            # one timer per message would cost more than the message (and uvloop counts in ms).
            due = max(s.next_due(), now + STREAM_TICK_S)
            if s.duration is not None:
                due = min(due, s.started + s.duration)
            self._stream_handles[s.stream] = self.loop.call_at(self._loop_time(due), self._stream_step, s)

    def _finish(self, s: Stream, now: float) -> None:
        s.done = True
        self._blocked.discard(s.stream)
        log.info("%s: stream %d done: %d sent", self.name, s.stream, s.sent)

    def _send_batch(self, s: Stream, k: int, now: float) -> None:
        name, prefix, size, targets = self.name, s.prefix, s.size, s.to
        first = s.first_n + s.sent
        last = first + k - 1
        payloads = make_payloads(prefix, first, last, size)
        if len(targets) == 1:
            dest = targets[0]
            msgs = [Message(name, dest, payload) for payload in payloads]
        else:
            msgs = []
            for payload in payloads:
                msgs.extend(Message(name, dest, payload) for dest in targets)
        # A failure here stops the stream (the caller logs it); `sent` then stays where it was.
        self.stack.send_batch(msgs, now)
        s.sent += k
        samples = s.samples
        n = (first + _SAMPLE_MASK) & ~_SAMPLE_MASK
        while n <= last and len(samples) < MAX_SAMPLES:
            samples.append((n, now))
            n += SAMPLE_EVERY
        app_sent = self.app_sent
        for dest in targets:
            app_sent[dest] = app_sent.get(dest, 0) + k

    def _wake_blocked(self) -> None:
        for sid in list(self._blocked):
            s = self.streams[sid]
            if s.done:
                self._blocked.discard(sid)
            elif not self._stream_blocked(s):
                self._blocked.discard(sid)
                if sid not in self._stream_handles:
                    self._stream_handles[sid] = self.loop.call_soon(self._stream_step, s)

    def _poll_blocked(self) -> None:
        self._blocked_poll = None
        if not self._running:
            return
        if self._blocked:
            self._wake_blocked()
            for sid in list(self._blocked):
                s = self.streams[sid]
                if s.duration is not None and s.finished(self.now()):
                    self._finish(s, self.now())
        if self._blocked:
            self._blocked_poll = self.loop.call_later(BLOCKED_POLL_S, self._poll_blocked)
