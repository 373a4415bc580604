"""A scripted network for exact protocol tests: a few stacks, explicit time, per-message drops.

Smaller than the simulator on purpose: no random link model, every frame takes `latency`
seconds, and a test decides exactly which message is lost (`net.drop = lambda msg: ...`) or which
direction is cut (`net.blocked`). Frames go through the real wire codec.
"""

from __future__ import annotations

import heapq
import itertools
import random

from splitbrain.node import wire
from splitbrain.node.compose import build_stack
from splitbrain.node.layer import Command
from splitbrain.node.message import Message, app_payload
from splitbrain.node.unicast3 import PROTO_ID, Unicast3


class Net:
    def __init__(
        self,
        names=("A", "B"),
        config: dict | None = None,
        seed: int = 1,
        latency: float = 0.001,
        protocol: str = "unicast3",
    ):
        self.protocol = protocol
        self.now = 0.0
        self.latency = latency
        self.config = dict(config or {})
        self.seed = seed
        self.stacks = {}
        self.incarnation = {n: 0 for n in names}
        self.delivered = {n: [] for n in names}  # app ids, in delivery order
        self.events: list[dict] = []
        self.drop = None  # drop(msg) -> bool, applied to each message as its frame arrives
        self.blocked: set[tuple[str, str]] = set()
        self._queue: list = []
        self._order = itertools.count()
        self._n = {}
        for name in names:
            self.start(name)

    # ---- nodes --------------------------------------------------------------------------------

    def start(self, name: str) -> None:
        """(Re)start a node with empty state and a higher incarnation."""
        if name in self.stacks:
            self.incarnation[name] += 1
            self.delivered[name] = []  # a new life: what it delivers is counted afresh
        rng = random.Random(f"{self.seed}/{name}/{self.incarnation[name]}")
        self.stacks[name] = build_stack(name, self.protocol, self.config, rng, self.incarnation[name])

    def u3(self, name: str) -> Unicast3:
        """UNICAST3's layer, for the tests that look inside it."""
        return self.stacks[name].layer(Unicast3)

    def send(self, src: str, dest: str, count: int = 1, size: int = 20) -> None:
        for _ in range(count):
            n = self._n.get((src, dest), 0) + 1
            self._n[(src, dest)] = n
            self.stacks[src].send(Message(src, dest, app_payload(src, 0, n, size)), self.now)
        self._collect(src)

    def connect(self, src: str, dest: str, bound: float = 2.0) -> None:
        """Send one message src -> dest and run until it is acked: the connection and its first
        SYNC are done, so a test can script what happens on an established connection."""
        self.send(src, dest, 1)
        self.run_until_quiet(bound)

    def inject(self, src: str, dest: str, header: object, payload: bytes = b"x") -> None:
        """A message from `src` with this UNICAST3 header, handed to `dest`'s stack now, not
        through the network: what a broken or hostile peer could send."""
        self.stacks[dest].receive([Message(src, dest, payload, {PROTO_ID: header})], self.now)
        self._collect(dest)

    def command(self, name: str, cmd: Command) -> None:
        self.stacks[name].command(cmd, self.now)
        self._collect(name)

    # ---- time ---------------------------------------------------------------------------------

    def run(self, duration: float) -> None:
        """Advance time by `duration`, delivering frames and firing timers in time order."""
        end = self.now + duration
        while True:
            frame_due = self._queue[0][0] if self._queue else None
            timer_due, timer_node = self._next_timer()
            due = min(d for d in (frame_due, timer_due, end) if d is not None)
            if due >= end and not (frame_due == end or timer_due == end):
                break
            self.now = due
            if frame_due is not None and frame_due == due:
                _, _, dest, frame = heapq.heappop(self._queue)
                if dest in self.stacks:
                    _src, msgs = wire.decode_frame(frame)
                    if self.drop is not None:
                        msgs = [m for m in msgs if not self.drop(m)]
                    self.stacks[dest].receive(msgs, self.now)
                    self._collect(dest)
            elif timer_due is not None and timer_due == due:
                self.stacks[timer_node].on_timer(self.now)
                self._collect(timer_node)
            else:
                break
        self.now = end

    def run_until_quiet(self, bound: float, step: float = 0.05) -> float:
        """Run until every send window is fully acked and no frame is in flight; return the time."""
        start = self.now
        while self.now - start < bound:
            if not self._queue and not self._unsettled():
                return self.now
            self.run(step)
        raise AssertionError(f"not quiet after {bound}s: {self._unsettled()}")

    def _unsettled(self) -> list[str]:
        """What keeps the stacks from being quiet, read from the layers' protocol-neutral views."""
        out = []
        for name, stack in self.stacks.items():
            for layer in stack.layers:
                out.extend(f"{name} {why}" for why in layer.busy())
                out.extend(
                    f"{name} send to {w.peer}: HA={w.low} HS={w.high}"
                    for w in layer.windows()
                    if w.side == "send" and w.low != w.high
                )
        return out

    def _next_timer(self):
        best = (None, None)
        for name, stack in self.stacks.items():
            d = stack.next_deadline()
            if d is not None and (best[0] is None or d < best[0]):
                best = (max(d, self.now), name)
        return best

    # ---- plumbing -----------------------------------------------------------------------------

    def _collect(self, name: str) -> None:
        stack = self.stacks[name]
        stack.check_invariants()
        to_transport, to_app, events = stack.take()
        self.events.extend(events)
        self.delivered[name].extend(m.app for m in to_app)
        by_dest: dict[str, list[Message]] = {}
        for msg in to_transport:
            by_dest.setdefault(msg.dest, []).append(msg)
        for dest, msgs in by_dest.items():
            if (name, dest) in self.blocked:
                continue
            heapq.heappush(
                self._queue, (self.now + self.latency, next(self._order), dest, wire.encode_frame(name, msgs))
            )

    # ---- queries ------------------------------------------------------------------------------

    def kinds(self, kind: str, node: str | None = None, **match) -> list[dict]:
        return [
            e
            for e in self.events
            if e["kind"] == kind
            and (node is None or e["node"] == node)
            and all(e.get(k) == v for k, v in match.items())
        ]

    def final_events(self) -> list[dict]:
        """All events plus each node's final window snapshot (what the checkers read)."""
        tail = []
        for stack in self.stacks.values():
            for layer in stack.layers:
                tail.extend(layer.window_events(self.now, final=True))
        return self.events + tail


def is_type(msg: Message, name: str, seqno: int | None = None, proto_id: int = PROTO_ID) -> bool:
    """Does msg carry a header of protocol `proto_id` (UNICAST3 by default) of this type (and seqno)?"""
    hdr = msg.headers.get(proto_id)
    return hdr is not None and hdr.type.name == name and (seqno is None or hdr.seqno == seqno)


def expected(src: str, n: int, start: int = 1) -> list[str]:
    return [f"{src}:0:{i}" for i in range(start, n + 1)]


def from_sender(delivered: list[str], src: str) -> list[str]:
    """The app ids of one sender, in the order delivered."""
    return [a for a in delivered if a.startswith(src + ":")]


def once(pred):
    """A drop filter that drops the first message matching pred, and only that one."""
    state = {"done": False}

    def drop(msg):
        if not state["done"] and pred(msg):
            state["done"] = True
            return True
        return False

    return drop


def checks_by_name(net: Net, bound: float = 2.0) -> dict:
    """The harness's checks over the net's final events, by check name."""
    from splitbrain.harness.checks import run_checks

    return {r.name: r for r in run_checks(net.final_events(), recovery_bound_s=bound)}
