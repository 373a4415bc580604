"""Proxied connections: two links (upstream, downstream) of toxic stages between two sockets.

Theory of operation (Toxiproxy's `link.go` and `toxic_collection.go`, on asyncio):

    client socket -> reader -> [stage 0: noop] -> [stage 1] -> ... -> writer -> upstream socket
    (the upstream link; the downstream link is the mirror image)

Stages are joined by small bounded channels (`Chan`), so a slow toxic pushes back on the reader
and, through TCP flow control, on the sender, as Toxiproxy's unbuffered Go channels do. The chain
always starts with a hidden noop stage, so every visible toxic has a predecessor to rewire.

Changing toxics on live links (everything runs on one event loop, so each rewiring step below is
atomic between awaits):

- add: a new stage is appended; the previous last stage's output now points at its input.
- update: the stage's task is cancelled (what it held is flushed to its output without the toxic's
  effect, as Toxiproxy does on an interrupt) and restarted with the new attributes; the
  toxicity dice are rolled again; per-link state (limit_data's byte count) survives.
- remove: the task is cancelled and its held items flushed; its input channel is then forwarded
  into its output, so items already queued and puts still blocked on it arrive in order; the
  previous stage is rewired past it. Removing a `timeout` toxic closes the link (Toxiproxy's
  CleanupToxic).

Closing: when a link's writer sees `Close` it closes its destination socket fully (Toxiproxy
does not half-close), which ends the other link's reader; a `Close(reset=True)` aborts both
sockets with SO_LINGER 0, so peers see a TCP RST. When both writers are done the connection
cancels whatever is left.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import socket
import struct
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from .toxics import CLOSE, TOXIC_TYPES, Chunk, Close, pipe_noop

if TYPE_CHECKING:  # pragma: no cover
    from .proxy import Proxy, ToxicSpec

log = logging.getLogger(__name__)

READ_SIZE = 32 * 1024  # Go's io.Copy buffer
UPSTREAM, DOWNSTREAM = "upstream", "downstream"


def _wake(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_result(None)


class Chan:
    """A bounded FIFO between two stages, with forced puts and forwarding for rewiring.

    `put` waits while the channel is full; `force_put` never waits (used to flush held items,
    which must not block an API call). After `forward_to(other)`, everything queued moves to
    `other` and every later or pending `put` goes there too.
    """

    def __init__(self, maxsize: int = 1) -> None:
        self._items: collections.deque = collections.deque()
        self._maxsize = max(1, maxsize)
        self._getters: collections.deque[asyncio.Future] = collections.deque()
        self._putters: collections.deque[asyncio.Future] = collections.deque()
        self._forward: Chan | None = None
        self._discard = False

    def __len__(self) -> int:
        return len(self._items)

    def _wake(self, waiters: collections.deque) -> None:
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def _wake_all(self, waiters: collections.deque) -> None:
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)

    async def put(self, item: Any) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._forward is not None:
                await self._forward.put(item)
                return
            if self._discard:
                return
            if len(self._items) < self._maxsize:
                self._items.append(item)
                self._wake(self._getters)
                return
            fut = loop.create_future()
            self._putters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                fut.cancel()
                # Pass our wake-up on, so a free slot is not lost.
                if len(self._items) < self._maxsize:
                    self._wake(self._putters)
                raise

    def force_put(self, item: Any) -> None:
        if self._forward is not None:
            self._forward.force_put(item)
        elif not self._discard:
            self._items.append(item)
            self._wake(self._getters)

    async def get(self, deadline: float | None = None) -> Any:
        """The next item; None if `deadline` (loop time) passes first. Cancel-safe: an item is
        only taken from the channel by a get that returns it."""
        loop = asyncio.get_running_loop()
        while not self._items:
            if deadline is not None and loop.time() >= deadline:
                return None
            fut = loop.create_future()
            self._getters.append(fut)
            timer = None
            if deadline is not None:
                timer = loop.call_at(deadline, _wake, fut)
            try:
                await fut
            except asyncio.CancelledError:
                fut.cancel()
                if self._items:
                    self._wake(self._getters)
                raise
            finally:
                if timer is not None:
                    timer.cancel()
        item = self._items.popleft()
        self._wake(self._putters)
        return item

    def forward_to(self, other: Chan) -> None:
        """Move everything queued to `other`, and send every later or pending put there too."""
        while self._items:
            other.force_put(self._items.popleft())
        self._forward = other
        self._wake_all(self._putters)

    def discard(self) -> None:
        """Drop everything queued and everything put from now on (a link that was closed)."""
        self._items.clear()
        self._discard = True
        self._wake_all(self._putters)


class Stage:
    """One toxic of one link: its input channel, current output, held items and task."""

    def __init__(self, link: Link, spec: ToxicSpec | None, output: Chan) -> None:
        self.link = link
        self.spec = spec  # None for the hidden noop at the head of the chain
        buffer = TOXIC_TYPES[spec.type].buffer if spec is not None else 1
        self.input = Chan(buffer)
        self.output = output
        self.held: list = []
        self.state: dict[str, Any] = {}
        self.rng: random.Random = link.conn.rng
        self.attributes: dict[str, int] = {}
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        pipe: Callable[[Stage], Coroutine[Any, Any, None]]
        if self.spec is None:
            pipe = pipe_noop
        else:
            self.attributes = dict(self.spec.attributes)
            # Toxicity: the chance this toxic acts on this link, rolled each time its stage (re)starts.
            active = self.rng.random() < self.spec.toxicity
            pipe = TOXIC_TYPES[self.spec.type].pipe if active else pipe_noop
        self.held = []
        self.task = asyncio.get_running_loop().create_task(pipe(self), name=f"toxiproxy-stage-{self.link.name}")

    async def interrupt(self) -> bool:
        """Stop the stage's pipe and flush what it held to its output (no data is dropped).

        Returns False if the pipe had already ended (it closed its output), like Toxiproxy's
        InterruptToxic on a closed stub.
        """
        task, self.task = self.task, None
        running = task is not None and not task.done()
        if task is not None and running:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        for item in self.held:
            self.output.force_put(item)
        self.held = []
        return running


class Link:
    """One direction of one connection: reader -> stages -> writer."""

    def __init__(
        self, conn: Connection, direction: str, source: asyncio.StreamReader, dest: asyncio.StreamWriter
    ) -> None:
        self.conn = conn
        self.direction = direction
        self.name = f"{conn.proxy.name}/{conn.peer}/{direction}"
        self.source = source
        self.dest = dest
        self.tail = Chan(1)  # what the writer reads
        self.stages: list[Stage] = []
        self.reader_task: asyncio.Task | None = None
        self.writer_task: asyncio.Task | None = None
        self.done = asyncio.get_running_loop().create_future()

    def build(self, specs: list[ToxicSpec]) -> None:
        head = Stage(self, None, self.tail)
        self.stages = [head]
        for spec in specs:
            self._append(spec)

    def _append(self, spec: ToxicSpec) -> Stage:
        last = self.stages[-1]
        stage = Stage(self, spec, self.tail)
        last.output = stage.input
        self.stages.append(stage)
        return stage

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for stage in self.stages:
            stage.start()
        self.reader_task = loop.create_task(self._read(), name=f"toxiproxy-read-{self.name}")
        self.writer_task = loop.create_task(self._write(), name=f"toxiproxy-write-{self.name}")

    # ---- toxic changes on a live link --------------------------------------------------------

    def add_toxic(self, spec: ToxicSpec) -> None:
        self._append(spec).start()

    def stage_of(self, spec: ToxicSpec) -> Stage | None:
        return next((s for s in self.stages if s.spec is spec), None)

    async def update_toxic(self, spec: ToxicSpec) -> None:
        stage = self.stage_of(spec)
        if stage is None:
            return
        if await stage.interrupt() and not self.done.done():
            stage.start()

    def detach_toxic(self, spec: ToxicSpec) -> tuple[Stage, Stage] | None:
        """Take the stage out of the chain's list (synchronously); `finish_removal` completes it.

        The previous stage keeps writing into the detached stage's input until then, so nothing
        it sends can overtake what the detached stage still holds or has queued.
        """
        stage = self.stage_of(spec)
        if stage is None:
            return None
        i = self.stages.index(stage)
        self.stages.pop(i)
        return self.stages[i - 1], stage

    async def finish_removal(self, previous: Stage, stage: Stage) -> None:
        await stage.interrupt()  # what it held goes out first
        if stage.spec is not None and TOXIC_TYPES[stage.spec.type].closes_on_remove:
            # Toxiproxy's timeout toxic closes the link when it is removed.
            stage.input.discard()
            stage.output.force_put(CLOSE)
        else:
            stage.input.forward_to(stage.output)  # then what was queued, then later puts
        if previous.output is stage.input:
            previous.output = stage.output

    # ---- I/O ----------------------------------------------------------------------------------

    async def _read(self) -> None:
        head = self.stages[0].input
        loop = asyncio.get_running_loop()
        metrics = self.conn.proxy.metrics_key(self.direction)
        while True:
            try:
                data = await self.source.read(READ_SIZE)
            except (ConnectionError, OSError):
                data = b""  # a reset source ends the link like a closed one, as in Toxiproxy
            if not data:
                break
            self.conn.proxy.count_bytes("received", metrics, len(data))
            await head.put(Chunk(data, loop.time()))
        await head.put(CLOSE)

    async def _write(self) -> None:
        reset = False
        metrics = self.conn.proxy.metrics_key(self.direction)
        try:
            while True:
                item = await self.tail.get()
                if isinstance(item, Close):
                    reset = item.reset
                    break
                try:
                    self.dest.write(item.data)
                    await self.dest.drain()
                except (ConnectionError, OSError, RuntimeError):
                    break
                self.conn.proxy.count_bytes("sent", metrics, len(item.data))
        finally:
            if not self.done.done():
                self.done.set_result(None)
            self.conn.on_writer_done(self, reset)


def _set_linger0(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


class Connection:
    """A client connection through a proxy and its connection to the upstream."""

    def __init__(
        self,
        proxy: Proxy,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        rng: random.Random,
    ) -> None:
        self.proxy = proxy
        self.rng = rng
        peer = client[1].get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.client_reader, self.client_writer = client
        self.upstream_reader, self.upstream_writer = upstream
        self.linger0 = False
        self.closed = asyncio.get_running_loop().create_future()
        self.links = {
            UPSTREAM: Link(self, UPSTREAM, self.client_reader, self.upstream_writer),
            DOWNSTREAM: Link(self, DOWNSTREAM, self.upstream_reader, self.client_writer),
        }

    def start(self, chains: dict[str, list[ToxicSpec]]) -> None:
        # Toxiproxy sets SO_LINGER 0 on both sockets of a connection that starts while a
        # reset_peer toxic exists, so every close of such a connection is a reset.
        if any(spec.type == "reset_peer" for chain in chains.values() for spec in chain):
            self.set_linger0()
        for direction, link in self.links.items():
            link.build(chains[direction])
        for link in self.links.values():
            link.start()

    def set_linger0(self) -> None:
        self.linger0 = True
        _set_linger0(self.client_writer)
        _set_linger0(self.upstream_writer)

    def _close_writer(self, writer: asyncio.StreamWriter) -> None:
        if self.linger0:
            _set_linger0(writer)
            writer.transport.abort()
        else:
            # Sends what is buffered, then FIN; the other link's reader then sees the end.
            writer.close()

    def on_writer_done(self, link: Link, reset: bool) -> None:
        if reset:
            # A reset ends both directions at once: nothing more can be written to either socket.
            self.set_linger0()
            self.abort()
            return
        self._close_writer(link.dest)
        if all(other.done.done() for other in self.links.values()):
            self._finish()

    def abort(self) -> None:
        """Close both sockets now (proxy disabled or deleted) and stop every task."""
        for writer in (self.client_writer, self.upstream_writer):
            if self.linger0:
                _set_linger0(writer)
            writer.transport.abort()
        self._finish()

    def _finish(self) -> None:
        if self.closed.done():
            return
        self.closed.set_result(None)
        for writer in (self.client_writer, self.upstream_writer):
            if not writer.transport.is_closing():
                writer.transport.abort()
        for link in self.links.values():
            tasks = [link.reader_task, link.writer_task] + [s.task for s in link.stages]
            for task in tasks:
                if task is not None and not task.done() and task is not asyncio.current_task():
                    task.cancel()
            for stage in link.stages:
                stage.input.discard()
            link.tail.discard()
        self.proxy.connection_closed(self)
