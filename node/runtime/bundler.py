"""The bundler: messages queued per destination, packed into few frames once per loop iteration.

`add()` only queues; the first message of an iteration schedules `flush()` with `loop.call_soon`,
so everything the stack produced while handling the current burst of input (a batch of sends, a
batch of received frames and the ACKs they cause) leaves as one frame per destination, or as
few frames of at most `max_bytes` as order allows (node.wire.split_into_frames). With bundling
off every message is a frame of its own (the benchmark's baseline).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from operator import attrgetter, is_
from typing import TYPE_CHECKING, Any

from ..message import Message
from ..wire import encode_frame, readdressed, split_into_frames

if TYPE_CHECKING:
    from .transport import TcpTransport, UdpTransport

_ENCODE_ERRORS = (ValueError, OverflowError, struct.error)
_HEADERS = attrgetter("headers")
_PAYLOAD = attrgetter("payload")


class _Copies:
    """The first queue a flush encoded, to tell whether another dest's queue holds the copies of
    the same messages (each the same headers dict and payload object, as a multicast's copies):
    then that dest's frames are these frames readdressed, the same bytes as encoding them, as
    long as both dest names encode to the same length (the frames split at the same messages)."""

    __slots__ = ("msgs", "frames", "name_len", "_headers", "_payloads")

    def __init__(self, msgs: list[Message], frames: list[bytes], dest: str) -> None:
        self.msgs = msgs
        self.frames = frames
        self.name_len = len(dest.encode())
        self._headers: list[dict[int, Any]] | None = None
        self._payloads: list[bytes] = []

    def frames_for(self, dest: str, msgs: list[Message]) -> list[bytes] | None:
        """`dest`'s frames when `msgs` are copies of this queue's messages, else None."""
        if len(msgs) != len(self.msgs) or len(dest.encode()) != self.name_len:
            return None
        if self._headers is None:
            self._headers = list(map(_HEADERS, self.msgs))
            self._payloads = list(map(_PAYLOAD, self.msgs))
        if all(map(is_, map(_HEADERS, msgs), self._headers)) and all(map(is_, map(_PAYLOAD, msgs), self._payloads)):
            return [readdressed(frame, dest) for frame in self.frames]
        return None


class Bundler:
    def __init__(
        self,
        local: str,
        loop: asyncio.AbstractEventLoop,
        transport: UdpTransport | TcpTransport,
        max_bytes: int,
        enabled: bool = True,
        on_error: Callable[[str, Exception], None] | None = None,
    ):
        self.local = local
        self.loop = loop
        self.transport = transport
        self.max_bytes = max_bytes
        self.enabled = enabled
        self.on_error = on_error
        self._queues: dict[str, list[Message]] = {}
        self._scheduled = False
        self.flushes = 0

    def add(self, msgs: list[Message]) -> None:
        queues = self._queues
        last_dest: str | None = None
        queue: list[Message] = []
        for msg in msgs:
            dest = msg.dest
            # Runs of messages to one destination share the dest object: skip the dict lookup.
            if dest is not last_dest:
                last_dest = dest
                found = queues.get(dest)
                if found is None:
                    found = queues[dest] = []
                queue = found
            queue.append(msg)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        if not self._queues:
            return
        queues, self._queues = self._queues, {}
        self.flushes += 1
        send = self.transport.send
        local = self.local
        # A multicast's copies to several dests are encoded once: the first dest's frames are
        # readdressed for a dest whose queue holds the same copies (_Copies), and any other queue
        # reuses the bytes of the copies encoded before (wire.split_into_frames' memo). The
        # queues keep the messages alive and unchanged until the loop ends.
        encoded: dict[int, tuple[bytes, bytes]] | None = {} if len(queues) > 1 else None
        # Queues all of one length are likely a multicast's copies and nothing else: the first
        # one is encoded without filling the memo, which only a queue of other messages needs.
        memo_first = encoded is not None and len({len(q) for q in queues.values()}) > 1
        first: _Copies | None = None
        for dest, msgs in queues.items():
            try:
                if self.enabled:
                    if first is None:
                        frames = split_into_frames(local, msgs, self.max_bytes, encoded if memo_first else None)
                        if encoded is not None:
                            first = _Copies(msgs, frames, dest)
                    else:
                        frames = first.frames_for(dest, msgs) or split_into_frames(local, msgs, self.max_bytes, encoded)
                else:
                    frames = [encode_frame(local, [msg], dest) for msg in msgs]
            except _ENCODE_ERRORS as exc:
                # A message that cannot be encoded (e.g. a name too long for the wire) must not
                # take the others down with it: encode one by one and report the culprits.
                frames = []
                for msg in msgs:
                    try:
                        frames.append(encode_frame(local, [msg], dest))
                    except _ENCODE_ERRORS as one:
                        if self.on_error is not None:
                            self.on_error(dest, one)
                if not frames and self.on_error is None:
                    raise exc
            for frame in frames:
                send(dest, frame)

    @property
    def queued(self) -> int:
        return sum(len(q) for q in self._queues.values())
