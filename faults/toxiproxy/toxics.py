"""Toxic types: their attributes (as Toxiproxy's JSON shows them) and what each does to a stream.

Theory of operation (the same as Toxiproxy's `toxics/` package):

A link (one direction of one proxied connection) is a chain of stages. Data read from the
source socket enters the chain as `Chunk`s (bytes plus the time they were read); the end of the
source enters as a `Close` marker. Each stage runs one toxic's `pipe` coroutine: it takes items
from its input channel and puts items on its output channel. A stage ends after it forwards a
`Close` (a `Close(reset=True)` asks the link's writer to reset both sockets instead of closing
them). The writer at the end of the chain sends chunks to the destination socket.

A stage can be interrupted (its task is cancelled) when its toxic is updated or removed. Toxiproxy
promises never to drop data on an interrupt, so whatever a pipe holds (a chunk it is delaying, the
rest of a slice) is recorded in `stage.held` and the link flushes it to the stage's output.

Attribute units are Toxiproxy's: milliseconds, KB/s (1 KB = 1000 bytes), bytes, microseconds for
the slicer's delay.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .link import Stage


class Chunk:
    """Bytes read from a socket and the loop time they were read (latency counts from it)."""

    __slots__ = ("data", "ts")

    def __init__(self, data: bytes, ts: float) -> None:
        self.data = data
        self.ts = ts


class Close:
    """End of a stream; `reset=True` closes both sockets with SO_LINGER 0 (a TCP RST)."""

    __slots__ = ("reset",)

    def __init__(self, reset: bool) -> None:
        self.reset = reset

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return "RESET" if self.reset else "CLOSE"


CLOSE = Close(False)
RESET = Close(True)


async def send(stage: Stage, item: Chunk | Close, *rest: Chunk) -> None:
    """Put `item` on the stage's output.

    Until it is put, `item` and `rest` count as held (flushed by the link on an interrupt);
    afterwards only `rest` does.
    """
    stage.held = [item, *rest]
    await stage.output.put(item)
    stage.held = list(rest)


def now() -> float:
    return asyncio.get_running_loop().time()


# ---- pipes ------------------------------------------------------------------------------------


async def pipe_noop(stage: Stage) -> None:
    while True:
        item = await stage.input.get()
        await send(stage, item)
        if isinstance(item, Close):
            return


async def pipe_latency(stage: Stage) -> None:
    attrs = stage.attributes
    latency_ms, jitter_ms = attrs["latency"], attrs["jitter"]
    while True:
        item = await stage.input.get()
        if isinstance(item, Close):
            await send(stage, item)
            return
        delay_ms = latency_ms
        if jitter_ms > 0:
            delay_ms += stage.rng.randrange(jitter_ms * 2) - jitter_ms
        # Each chunk is delayed from the time it was read, so back-to-back chunks are pipelined
        # (latency, not a throughput cap) and a chunk never overtakes the one before it.
        sleep_s = delay_ms / 1000 - (now() - item.ts)
        stage.held = [item]
        if sleep_s > 0:
            await asyncio.sleep(sleep_s)
        item.ts += sleep_s
        await send(stage, item)


async def pipe_bandwidth(stage: Stage) -> None:
    rate_kbps = stage.attributes["rate"]
    owed_s = 0.0
    while True:
        item = await stage.input.get()
        if isinstance(item, Close):
            await send(stage, item)
            return
        if rate_kbps <= 0:
            # Toxiproxy means "no limit" here (its code then loops on empty writes); we pass through.
            await send(stage, item)
            continue
        data = item.data
        owed_s += len(data) / (rate_kbps * 1000)
        piece = rate_kbps * 100  # what 100 ms of the rate allows
        while len(data) > piece:
            stage.held = [Chunk(data, item.ts)]
            await asyncio.sleep(0.1)
            await send(stage, Chunk(data[:piece], item.ts), Chunk(data[piece:], item.ts))
            data = data[piece:]
            owed_s -= 0.1
        start = now()
        stage.held = [Chunk(data, item.ts)]
        if owed_s > 0:
            await asyncio.sleep(owed_s)
        # Sleeping overshoots a little; the next chunk's sleep is shortened by as much.
        owed_s -= now() - start
        await send(stage, Chunk(data, item.ts))


def slice_offsets(size: int, average: int, variation: int, rng) -> list[tuple[int, int]]:
    """Split [0, size) into slices of at most average+variation bytes, halving with some wobble."""
    out: list[tuple[int, int]] = []
    todo = [(0, size)]
    while todo:
        start, end = todo.pop()
        if (end - start) - average <= variation or end - start <= 1:
            out.append((start, end))
            continue
        mid = start + (end - start) // 2
        if variation > 0:
            mid += rng.randrange(variation * 2) - variation
        mid = min(max(mid, start + 1), end - 1)  # always progress, whatever the attributes
        todo.append((mid, end))
        todo.append((start, mid))
    return out


async def pipe_slicer(stage: Stage) -> None:
    attrs = stage.attributes
    delay_s = max(attrs["delay"], 0) / 1_000_000
    while True:
        item = await stage.input.get()
        if isinstance(item, Close):
            await send(stage, item)
            return
        data = item.data
        for start, end in slice_offsets(len(data), attrs["average_size"], attrs["size_variation"], stage.rng):
            rest = [Chunk(data[end:], item.ts)] if end < len(data) else []
            await send(stage, Chunk(data[start:end], item.ts), *rest)
            await asyncio.sleep(delay_s)
        stage.held = []


async def pipe_limit_data(stage: Stage) -> None:
    limit = stage.attributes["bytes"]
    state = stage.state  # survives updates: bytes already let through on this link
    state.setdefault("sent", 0)
    remaining = limit - state["sent"]
    while True:
        item = await stage.input.get()
        if isinstance(item, Close):
            await send(stage, item)
            return
        remaining = max(remaining, 0)
        data = item.data[:remaining]
        if data:
            await send(stage, Chunk(data, item.ts))
            state["sent"] += len(data)
        remaining = limit - state["sent"]
        if remaining <= 0:
            await send(stage, CLOSE)
            return


async def pipe_timeout(stage: Stage) -> None:
    timeout_ms = stage.attributes["timeout"]
    deadline = now() + timeout_ms / 1000 if timeout_ms > 0 else None
    while True:
        item = await stage.input.get(deadline=deadline)
        if item is None:  # the deadline passed: close the connection
            await send(stage, CLOSE)
            return
        if isinstance(item, Close):
            await send(stage, item)
            return
        # Data is dropped on the floor while the toxic is active.


async def pipe_reset_peer(stage: Stage) -> None:
    await stage.input.get()  # the first chunk (or the end of the stream) starts the countdown
    await asyncio.sleep(max(stage.attributes["timeout"], 0) / 1000)
    await send(stage, RESET)


async def pipe_slow_close(stage: Stage) -> None:
    delay_s = max(stage.attributes["delay"], 0) / 1000
    while True:
        item = await stage.input.get()
        if isinstance(item, Close):
            stage.held = [item]
            await asyncio.sleep(delay_s)
            await send(stage, item)
            return
        await send(stage, item)


# ---- registry ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ToxicType:
    name: str
    fields: dict[str, str]  # JSON attribute name -> Go type, in Go's struct order
    pipe: Callable[[Stage], Coroutine[Any, Any, None]]
    go_struct: str
    buffer: int = 1  # items the stage's input channel holds (Toxiproxy: 1024 for latency)
    closes_on_remove: bool = False  # Toxiproxy's CleanupToxic: removing it closes the link

    def default_attributes(self) -> dict[str, int]:
        return {name: 0 for name in self.fields}


TOXIC_TYPES: dict[str, ToxicType] = {
    t.name: t
    for t in (
        ToxicType("noop", {}, pipe_noop, "NoopToxic"),
        ToxicType("latency", {"latency": "int64", "jitter": "int64"}, pipe_latency, "LatencyToxic", buffer=1024),
        ToxicType("bandwidth", {"rate": "int64"}, pipe_bandwidth, "BandwidthToxic"),
        ToxicType("slow_close", {"delay": "int64"}, pipe_slow_close, "SlowCloseToxic"),
        ToxicType("timeout", {"timeout": "int64"}, pipe_timeout, "TimeoutToxic", closes_on_remove=True),
        ToxicType("reset_peer", {"timeout": "int64"}, pipe_reset_peer, "ResetToxic"),
        ToxicType(
            "slicer",
            {"average_size": "int", "size_variation": "int", "delay": "int"},
            pipe_slicer,
            "SlicerToxic",
        ),
        ToxicType("limit_data", {"bytes": "int64"}, pipe_limit_data, "LimitDataToxic"),
    )
}
