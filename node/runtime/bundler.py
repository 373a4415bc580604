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
from typing import TYPE_CHECKING

from ..message import Message
from ..wire import encode_frame, split_into_frames

if TYPE_CHECKING:
    from .transport import TcpTransport, UdpTransport

_ENCODE_ERRORS = (ValueError, OverflowError, struct.error)


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
        # A multicast's copies to several dests are encoded once (wire.split_into_frames); the
        # queues keep them alive and unchanged until the loop ends.
        encoded: dict[int, tuple[bytes, bytes]] | None = {} if len(queues) > 1 else None
        for dest, msgs in queues.items():
            try:
                if self.enabled:
                    frames = split_into_frames(local, msgs, self.max_bytes, encoded)
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
