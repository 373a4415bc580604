"""The deterministic simulator: a scenario run in virtual time on one thread (the `sim` backend).

Theory of operation. A priority queue (heapq) holds entries (time, sequence, kind, a, b); the
sequence number is a global counter, so entries with equal times run in the order they were
queued and the whole run is a total order. Kinds:

- FRAME: a frame arrives at node a (data b). A running node decodes it and gets one
  `stack.receive(msgs, now)`; a paused node buffers it; a dead node drops it.
- TIMER: node a's timer with generation b. Stale generations are skipped.
- STREAM: the workload stream a sends what is due (one message per tick: 1 ms or the stream's
  interval, whichever is larger) and queues its next tick.
- STEP: schedule step a is applied (all steps are queued first, so at equal times a fault applies
  before traffic).
- DROPS: node a's pending counts of bad frames are logged (node.dropagg: a frame the codec cannot
  decode is a `drop` event aggregated per second, as in the runtime; counts pending when a node
  stops or the run ends are logged then).

After every input to a stack (send, receive, command, timer) the simulator drains `take()`: events
go to the node's log, deliveries are counted, and messages for the transport are grouped by
destination in order, each group one frame (split above `max_frame_bytes`) put on the link model
(loss, delay, jitter, duplication, reordering, partitions: see network.py). Then it re-reads
`next_deadline()` and re-arms the node's one timer, and (by default) calls `check_invariants()`.

Randomness: one `random.Random(seed)` is the master; links (in node order, then loopbacks) and
then nodes each get `random.Random(master.getrandbits(64))`, and each incarnation of a node gets
its stack RNG from its node's generator. Nothing else draws randomness, so a seed replays
bit-for-bit, and wall-clock time never enters the simulation.

This module stays one piece (over 600 lines) because `Simulation` is one event loop: its handlers
share the queue, the virtual clock, the link models and every node's state, and the order in which
they read and write that state is what makes a seed replay exactly; its codecs, network model and
driver already live in codec.py, network.py and driver.py.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import operator
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from splitbrain.harness import nemesis
from splitbrain.harness.scenario import FaultStep, Scenario, ScenarioError, Stream
from splitbrain.harness.slots import planned_count
from splitbrain.node import wire
from splitbrain.node.errors import RunFailed, SettingError
from splitbrain.node.events import make_event
from splitbrain.node.faultlayer import FaultLayer
from splitbrain.node.layer import Bootstrap, Leave, SetConfig, SyncPeer, ViewChange
from splitbrain.node.message import Message, workload_message

from .cluster import DEAD, PAUSED, RUNNING, SimNode
from .network import LinkModel, Network

FRAME, TIMER, STREAM, STEP, DROPS = 0, 1, 2, 3, 4
_KIND_NAMES = {FRAME: "frame", TIMER: "timer", STREAM: "stream", STEP: "step", DROPS: "drops"}

MAX_FRAME_BYTES = 60_000
DEFAULT_MAX_STEPS = 20_000_000
DEFAULT_PAUSE_BUFFER_FRAMES = 10_000
# A timer that fires this often at one virtual instant is a layer re-arming without progress.
TIMER_LIVELOCK_REPEATS = 10_000
MIN_TICK_S = 0.001
_EPS = 1e-9

# (name, protocol, config, rng, incarnation) -> Stack; with a membership protocol it is also given
# membership="gms" (node.compose.build_stack's keyword), so factories for static runs need not take it.
StackFactory = Callable[..., Any]


class SimulationError(RunFailed, RuntimeError):
    """The simulation cannot go on (misconfiguration, livelock, a broken invariant)."""


class StepLimitExceeded(SimulationError):
    """The run took more than max_steps queue entries."""


class InvariantViolation(SimulationError):
    """A layer's check_invariants() failed; the message names node, time and seed."""


# ---- codecs -----------------------------------------------------------------------------------


class IdentityCodec:
    """A codec without bytes: a frame is (src, messages); decoding copies the messages so that a
    receiver never shares Message objects with the sender's retransmission window. For tests of
    the simulator and for stacks whose headers have no wire codec."""

    WireError = wire.WireError  # never raised: nothing is decoded

    @staticmethod
    def encode_frame(src: str, msgs: list[Message]) -> tuple:
        return (src, tuple(msgs))

    @staticmethod
    def decode_frame(data: tuple) -> tuple[str, list[Message]]:
        src, msgs = data
        return src, [m.copy() for m in msgs]


def _default_codec(wire: bool):
    if not wire:
        from .codec import ObjectCodec

        return ObjectCodec()
    from splitbrain.node import wire as codec  # the real codec (the parameter shadows the module's name)

    return codec


def _default_stack_factory() -> StackFactory:
    from splitbrain.node.compose import build_stack

    return build_stack


# ---- results ----------------------------------------------------------------------------------


@dataclass
class SimResult:
    """What a run produced: per-node event logs, the harness timeline, and counters."""

    scenario: Scenario
    seed: int
    events: dict[str, list[dict]]
    timeline: list[dict]
    stats: dict
    end_time: float
    completed: bool = True
    error: str | None = None

    def all_events(self) -> list[dict]:
        """Every node's log and the timeline merged by time (stable: ties keep node order)."""
        merged: list[dict] = []
        for name in self.scenario.nodes:
            merged.extend(self.events.get(name, ()))
        merged.extend(self.timeline)
        merged.sort(key=_event_time)
        return merged


_event_time = operator.itemgetter("t")  # a C call per event: the merge sorts every event of a run


class _StreamState:
    __slots__ = ("node", "src", "dest", "index", "size", "start", "rate", "tick", "ticks_per_s", "limit", "k", "n")

    def __init__(self, stream, node: SimNode, end: float):
        self.node = node
        self.src = stream.src
        self.dest = stream.dest
        self.index = stream.index
        self.size = stream.size
        self.start = stream.start
        self.rate = stream.rate
        self.tick = max(MIN_TICK_S, 1.0 / stream.rate)
        self.ticks_per_s = 1.0 / MIN_TICK_S
        # Slots k = 0, 1, ... are due at start + k / rate while before the stream's end.
        self.limit = planned_count(stream, end)
        self.k = 0  # next slot
        self.n = 0  # messages actually sent (app id n of the last one); survives restarts


# ---- the simulation ---------------------------------------------------------------------------


class Simulation:
    """Run one scenario with one seed in virtual time.

    stack_factory(name, protocol, config, rng, incarnation) -> node.stack.Stack; default
    node.compose.build_stack. codec: an object with encode_frame(src, msgs) and
    decode_frame(data) (and optionally WireError, split_into_frames, split_groups); by default
    message objects cross the network (harness.sim.codec.ObjectCodec), or frames go through the
    real codec, node.wire, when `wire` is true (default: the scenario's `wire:`). Both give the
    same run for the same seed.

    Automatic garbage collection is off while the loop runs (as in the node daemon, GcPolicy):
    messages, headers and events form no reference cycles, and the collector's passes over a
    growing event log cost several per cent of the run.
    """

    def __init__(
        self,
        scenario: Scenario,
        seed: int | None = None,
        stack_factory: StackFactory | None = None,
        *,
        codec=None,
        check_invariants: bool = True,
        max_steps: int = DEFAULT_MAX_STEPS,
        link_defaults: LinkModel | None = None,
        initial_view: bool = True,
        pause_buffer_frames: int = DEFAULT_PAUSE_BUFFER_FRAMES,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        wire: bool | None = None,
    ):
        self.scenario = scenario
        self.seed = scenario.seed if seed is None else seed
        self.stack_factory = stack_factory if stack_factory is not None else _default_stack_factory()
        self.wire = scenario.wire if wire is None else wire
        self.codec = codec if codec is not None else _default_codec(self.wire)
        self._encode = self.codec.encode_frame
        self._decode = self.codec.decode_frame
        self._wire_error = getattr(self.codec, "WireError", ())
        self._split = getattr(self.codec, "split_into_frames", None)
        self._split_groups = getattr(self.codec, "split_groups", None)
        self.check_invariants = check_invariants
        self.max_steps = max_steps
        self.initial_view = initial_view
        self.pause_buffer_frames = pause_buffer_frames
        self.max_frame_bytes = max_frame_bytes
        self.end_time = scenario.end_time

        self.master = random.Random(self.seed)
        self.network = Network(scenario.nodes, self.master, link_defaults)
        self.nodes: dict[str, SimNode] = {
            name: SimNode(name, random.Random(self.master.getrandbits(64))) for name in scenario.nodes
        }
        for (src, dst), link in self.network.links.items():
            link.target = self.nodes[dst]
            self.nodes[src].links[dst] = link
        self.timeline: list[dict] = []
        # schedule index -> (node, incarnation, rule id) of in-process rules in force
        self._rules: dict[int, tuple[SimNode, int, int]] = {}

        self.now = 0.0
        self._heap: list = []
        self._seq = itertools.count()
        self._started = False
        self._finished = False
        self._wall_s = 0.0
        self._last_entry: tuple | None = None
        # Counters (attributes, not a dict, because they sit in the hot path).
        self.steps = 0
        self.inputs = 0
        self.timers_fired = 0
        self.frames_sent = 0
        self.frames_lost = 0
        self.frames_blocked = 0
        self.frames_duplicated = 0
        self.frames_reordered = 0
        self.frames_delivered = 0
        self.frames_to_dead = 0
        self.frames_pause_overflow = 0
        self.frames_unroutable = 0
        self.frames_bad = 0
        self.frames_split = 0
        self.bytes_sent = 0
        self.msgs_sent = 0
        self.msgs_skipped = 0
        self.msgs_blocked = 0  # slots not sent because the sender was blocked
        self.msgs_delivered = 0

    # ---- running ------------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Run to the scenario's end time and return the result (raises SimulationError)."""
        if self._started:
            raise SimulationError("a Simulation runs once; build a new one to run again")
        self._started = True
        wall0 = time.perf_counter()
        try:
            self._setup()
            self._loop(self.end_time)
            self.now = self.end_time
            self._final_snapshots(self.end_time)
            self._finished = True
        finally:
            self._wall_s = time.perf_counter() - wall0
        return self.result()

    # ---- driving it step by step (the pytest plugin's sim backend, harness.sim.driver) --------
    #
    # Instead of `run`: `start` boots every node at t=0 with nothing queued; the caller then
    # interleaves `add_stream`, `apply_step` and `view` (all at the current virtual time) with
    # `advance`, and ends with `finish`. Entries queued at the current time run at the next
    # `advance`, so a fault applied together with a stream's start comes first, as in `run`.

    def start(self) -> None:
        if self._started:
            raise SimulationError("a Simulation runs once; build a new one to run again")
        self._started = True
        for node in self.nodes.values():
            self._start_node(node, 0.0)

    def advance(self, until: float) -> None:
        """Process every entry due up to virtual time `until`, then stand at `until`."""
        if not self._started or self._finished:
            raise SimulationError("advance() needs a started, unfinished simulation")
        wall0 = time.perf_counter()
        try:
            self._loop(until)
            self.now = max(self.now, until)
        finally:
            self._wall_s += time.perf_counter() - wall0

    def add_stream(self, stream: Stream) -> _StreamState:
        """Start a workload stream (its slots from stream.start, which must not be in the past)."""
        if stream.start < self.now:
            raise SimulationError(f"stream {stream.src}->{stream.dest} starts at {stream.start}, before now={self.now}")
        # A stream without a duration ends with its count; planned_count needs a finite end.
        end = stream.start + (stream.duration if stream.duration is not None else (stream.count or 0) / stream.rate + 1)
        ss = _StreamState(stream, self.nodes[stream.src], end)
        if ss.limit:
            self._push(ss.start, STREAM, ss)
        return ss

    def apply_step(self, step: FaultStep, steps: Mapping[int, FaultStep]) -> list[nemesis.Timeline]:
        """Carry out a step now (heal targets looked up in `steps`); returns its timeline entries."""
        return self._apply_step(step, self.now, steps)

    def view(self, name: str, members: tuple[str, ...]) -> None:
        """Install a view at a node now (as the admin API's POST /view would)."""
        self._op_view(nemesis.View(node=name, members=members), self.now)

    def leave(self, name: str) -> None:
        """Stop a node gracefully now (SIGTERM): it leaves the group (Leave), then stops."""
        node = self.nodes[name]
        if node.state is RUNNING:
            self._command(node, Leave(), self.now)
        if node.alive:
            self._stop_node(node, self.now, "stop")

    def membership(self, name: str):  # -> node.views.Membership | None
        """A live node's current view from its membership protocol (None: dead, or static)."""
        node = self.nodes[name]
        return node.stack.membership() if node.stack is not None else None

    def set_config(self, name: str, values: dict) -> None:
        """Change run-time settings at a node now (as the admin API's POST /config would)."""
        self._command_when_running(self.nodes[name], SetConfig(values=dict(values)), self.now)

    @property
    def active_steps(self) -> list[int]:
        """Indexes of the steps whose faults are in force (network faults, then in-process rules)."""
        return self.network.active + list(self._rules)

    def finish(self) -> SimResult:
        """End a step-by-step run at the current time: the final window snapshots, the result."""
        if not self._finished:
            self._final_snapshots(self.now)
            self._finished = True
        return self.result()

    def result(self, error: BaseException | None = None) -> SimResult:
        """The result so far (complete after `run`; partial if it raised)."""
        return SimResult(
            scenario=self.scenario,
            seed=self.seed,
            events={name: node.events for name, node in self.nodes.items()},
            timeline=self.timeline,
            stats=self.stats(),
            end_time=self.end_time,
            completed=self._finished,
            error=None if error is None else f"{type(error).__name__}: {error}",
        )

    def stats(self) -> dict:
        return {
            "virtual_time_s": self.now,
            "wall_time_s": self._wall_s,
            "steps": self.steps,
            "inputs": self.inputs,
            "timers_fired": self.timers_fired,
            "frames_sent": self.frames_sent,
            "frames_delivered": self.frames_delivered,
            "frames_lost": self.frames_lost,
            "frames_blocked": self.frames_blocked,
            "frames_duplicated": self.frames_duplicated,
            "frames_reordered": self.frames_reordered,
            "frames_to_dead": self.frames_to_dead,
            "frames_pause_overflow": self.frames_pause_overflow,
            "frames_unroutable": self.frames_unroutable,
            "frames_bad": self.frames_bad,
            "frames_split": self.frames_split,
            "bytes_sent": self.bytes_sent,
            "msgs_sent": self.msgs_sent,
            "msgs_skipped": self.msgs_skipped,
            "msgs_blocked": self.msgs_blocked,
            "msgs_delivered": self.msgs_delivered,
            "wire": self.wire,
        }

    def _push(self, t: float, kind: int, a, b=None) -> None:
        heapq.heappush(self._heap, (t, next(self._seq), kind, a, b))

    def _setup(self) -> None:
        for step in self.scenario.schedule:
            self._push(step.at, STEP, step)
        for stream in self.scenario.streams:
            ss = _StreamState(stream, self.nodes[stream.src], self.scenario.duration)
            if ss.limit:
                self._push(ss.start, STREAM, ss)
        for node in self.nodes.values():
            self._start_node(node, 0.0)

    def _loop(self, end: float) -> None:
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._run_loop(end)
        finally:
            if gc_was_enabled:
                gc.enable()

    def _run_loop(self, end: float) -> None:
        heap = self._heap
        pop = heapq.heappop
        max_steps = self.max_steps
        receive = self._receive_frame
        steps = self.steps
        try:
            while heap and heap[0][0] <= end:
                entry = pop(heap)
                steps += 1
                if steps > max_steps:
                    self.steps = steps
                    self._last_entry = entry
                    raise StepLimitExceeded(
                        f"simulation stopped after max_steps={max_steps} steps at virtual "
                        f"t={entry[0]:.6f}s of {end:g}s (seed {self.seed}); next entry: "
                        f"{self._describe_entry(entry)}. A layer may keep re-arming a timer or "
                        f"ping-ponging messages; raise max_steps if the scenario is simply big"
                    )
                t, _seq, kind, a, b = entry  # one unpacking, not a subscript per field
                self.now = t
                if kind == FRAME:
                    state = a.state
                    if state is RUNNING:
                        receive(a, b, t)
                    elif state is PAUSED:
                        if a.pending_frames >= self.pause_buffer_frames:
                            self.frames_pause_overflow += 1
                        else:
                            a.pending.append(("frame", b))
                            a.pending_frames += 1
                    else:
                        self.frames_to_dead += 1
                elif kind == TIMER:
                    if b == a.timer_gen and a.state is RUNNING:
                        self._fire_timer(a, t)
                elif kind == STREAM:
                    self._stream_tick(a, t)
                elif kind == STEP:
                    self._apply_step(a, t)
                else:
                    self._flush_drops(a, t)
        finally:
            self.steps = steps

    def _describe_entry(self, entry: tuple) -> str:
        kind = entry[2]
        what = _KIND_NAMES[kind]
        if kind in (FRAME, TIMER, DROPS):
            return f"{what} at node {entry[3].name}"
        if kind == STREAM:
            return f"{what} {entry[3].src}->{entry[3].dest}"
        return f"{what} {entry[3].describe()}"

    # ---- inputs to a stack --------------------------------------------------------------------

    def _after_input(self, node: SimNode, t: float) -> None:
        """Drain the stack's outboxes, transmit, check invariants and re-arm the node's timer."""
        stack = node.stack
        assert stack is not None, f"node {node.name} is dead"  # inline: this runs after every input
        self.inputs += 1
        if self.check_invariants:
            try:
                stack.check_invariants()
            except AssertionError as exc:
                raise InvariantViolation(
                    f"invariant broken at node {node.name} (incarnation {node.incarnation}) at "
                    f"t={t:.6f}s, seed {self.seed}: {exc}"
                ) from exc
        out, app = stack.drain(node.events)  # the frames keep the outbox's list
        if app:
            self.msgs_delivered += len(app)
        if out:
            if len(out) == 1:  # nearly every input: one message, one frame
                self._send_group(node, out[0].dest, out, t)
            else:
                self._transmit(node, out, t)
        deadline = stack.next_deadline()
        if deadline != node.timer_at:
            node.timer_gen += 1
            node.timer_at = deadline
            if deadline is not None:
                heapq.heappush(
                    self._heap,
                    (deadline if deadline > t else t, next(self._seq), TIMER, node, node.timer_gen),
                )

    def _fire_timer(self, node: SimNode, t: float) -> None:
        if t == node.timer_t:
            node.timer_repeats += 1
            if node.timer_repeats > TIMER_LIVELOCK_REPEATS:
                raise SimulationError(
                    f"timer livelock at node {node.name}: fired {node.timer_repeats} times at "
                    f"t={t:.6f}s without its deadline moving (seed {self.seed}); a layer's "
                    f"next_deadline() stays <= now after on_timer(now)"
                )
        else:
            node.timer_t = t
            node.timer_repeats = 0
        node.timer_at = None
        self.timers_fired += 1
        stack = node.stack  # hot path: see _receive_frame
        assert stack is not None
        stack.on_timer(t)
        self._after_input(node, t)

    def _receive_frame(self, node: SimNode, data, t: float) -> None:
        try:
            _src, msgs = self._decode(data)
        except self._wire_error as exc:
            # Bad input from the network is counted and logged, never fatal.
            self.frames_bad += 1
            drops = node.drops
            ev = drops.drop(t, "bad_frame", None, reason="bad_frame", detail=str(exc)[:200])
            if ev is not None:
                node.events.append(ev)
            elif not node.drops_queued:
                self._queue_drops(node)
            return
        self.frames_delivered += 1
        stack = node.stack  # not node.live_stack: this is the hot path, and the property costs 5 %
        assert stack is not None
        stack.receive(msgs, t)
        self._after_input(node, t)

    def _flush_drops(self, node: SimNode, t: float) -> None:
        node.drops_queued = False
        node.events.extend(node.drops.on_timer(t))
        self._queue_drops(node)

    def _queue_drops(self, node: SimNode) -> None:
        deadline = node.drops.next_deadline()
        if deadline is not None:
            node.drops_queued = True
            self._push(deadline, DROPS, node)

    def _command(self, node: SimNode, cmd, t: float) -> None:
        node.live_stack.command(cmd, t)
        self._after_input(node, t)

    # ---- the network --------------------------------------------------------------------------

    def _transmit(self, node: SimNode, out: list[Message], t: float) -> None:
        first = out[0].dest
        for msg in out:
            if msg.dest != first:
                break
        else:
            self._send_group(node, first, out, t)
            return
        groups: dict[str, list[Message]] = {}
        for msg in out:
            group = groups.get(msg.dest)
            if group is None:
                groups[msg.dest] = [msg]
            else:
                group.append(msg)
        for dest, msgs in groups.items():
            self._send_group(node, dest, msgs, t)

    def _send_group(self, node: SimNode, dest: str, msgs: list[Message], t: float) -> None:
        link = node.links.get(dest)
        if link is None:
            self.frames_unroutable += 1
            return
        frame = self._encode(node.name, msgs)
        if type(frame) is bytes:
            size = len(frame)
            if size > self.max_frame_bytes and len(msgs) > 1:
                for part in self._split_frames(node.name, msgs):
                    self.bytes_sent += len(part)
                    self._send_frame(link, part, t)
                return
            self.bytes_sent += size
        elif len(msgs) > 1 and self._split_groups is not None:
            groups = self._split_groups(node.name, msgs, self.max_frame_bytes)
            if groups is not None:
                self.frames_split += len(groups) - 1
                for group in groups:
                    self._send_frame(link, self._encode(node.name, group), t)
                return
        self._send_frame(link, frame, t)

    def _split_frames(self, src: str, msgs: list[Message]) -> list:
        if self._split is not None:
            frames = self._split(src, msgs, self.max_frame_bytes)
        else:
            frames = []
            todo = [msgs]
            # Halve until every part fits (a single message that is too big goes as it is).
            while todo:
                part = todo.pop()
                frame = self._encode(src, part)
                if len(frame) > self.max_frame_bytes and len(part) > 1:
                    mid = len(part) // 2
                    todo.append(part[mid:])
                    todo.append(part[:mid])
                else:
                    frames.append(frame)
        self.frames_split += len(frames) - 1
        return frames

    def _send_frame(self, link, frame, t: float) -> None:
        self.frames_sent += 1
        if link.blocked:
            self.frames_blocked += 1
            return
        rng = link.rng
        loss_p = link.loss_p
        if loss_p and rng.random() < loss_p:
            self.frames_lost += 1
            return
        arrival = t + link.delay_s
        jitter = link.jitter_s
        if jitter:
            arrival += rng.uniform(-jitter, jitter)
            if arrival < t:
                arrival = t
        reorder_p = link.reorder_p
        if reorder_p and rng.random() < reorder_p:
            # Held back: it neither waits for nor delays the FIFO frames around it.
            arrival += rng.uniform(0.0, link.reorder_s)
            self.frames_reordered += 1
        else:
            if arrival < link.last_arrival:
                arrival = link.last_arrival
            link.last_arrival = arrival
        heap = self._heap
        heapq.heappush(heap, (arrival, next(self._seq), FRAME, link.target, frame))
        dup_p = link.dup_p
        if dup_p and rng.random() < dup_p:
            self.frames_duplicated += 1
            heapq.heappush(heap, (arrival, next(self._seq), FRAME, link.target, frame))

    # ---- the workload -------------------------------------------------------------------------

    def _stream_tick(self, ss: _StreamState, t: float) -> None:
        # An entry is queued only when its first slot is due, so the loop always sends one.
        # Nearly every tick sends one message: the stream's fields are read where they are used,
        # not copied into locals first.
        node = ss.node
        k = ss.k
        while True:
            if node.state is RUNNING:
                stack = node.stack  # hot path: see _receive_frame
                assert stack is not None
                if stack.may_block and stack.blocked(ss.dest):
                    # The application's sender is blocked (a full MCAST window): this slot is not
                    # sent; the stream goes on with the next one once the layer unblocks it.
                    self.msgs_blocked += 1
                else:
                    n = ss.n = ss.n + 1
                    self.msgs_sent += 1
                    # The message carries its app id, which the send and deliver events log.
                    stack.send(workload_message(ss.src, ss.dest, ss.index, n, ss.size), t)
                    self._after_input(node, t)
            else:
                # A paused or dead application sends nothing; its slots are skipped, not queued.
                self.msgs_skipped += 1
            k += 1
            if k >= ss.limit:
                ss.k = k
                return
            due = ss.start + k / ss.rate
            if due > t + _EPS:
                break
        ss.k = k
        start = ss.start
        if due < t + ss.tick - _EPS:
            # Fast streams wake on a 1 ms grid anchored at their start (division keeps the grid
            # exact: 9 / 1000 is 0.009, 9 * 0.001 is not).
            due = start + (int((t - start) * ss.ticks_per_s + 1e-6) + 1) / ss.ticks_per_s
        heapq.heappush(self._heap, (due, next(self._seq), STREAM, ss, None))

    # ---- node lifecycle -----------------------------------------------------------------------

    def _start_node(self, node: SimNode, t: float) -> None:
        incarnation = node.incarnation + 1
        rng = random.Random(node.seed_rng.getrandbits(64))
        membership = getattr(self.scenario, "membership", "static")
        try:
            if membership == "static":
                stack = self.stack_factory(
                    node.name, self.scenario.protocol, dict(self.scenario.config), rng, incarnation
                )
            else:
                stack = self.stack_factory(
                    node.name,
                    self.scenario.protocol,
                    dict(self.scenario.config),
                    rng,
                    incarnation,
                    membership=membership,
                )
        except ValueError as exc:
            # The protocol validates its own settings and names the key ("xmit_interval: ...").
            raise _config_error(exc) from exc
        node.stack = stack
        node.incarnation = incarnation
        node.state = RUNNING
        node.cancel_timer()
        node.pending.clear()
        node.pending_frames = 0
        node.events.append(make_event(t, node.name, "node", "node_start", incarnation=incarnation))
        if membership != "static":
            # A membership protocol finds its group among the configured peers (TCPPING).
            stack.command(Bootstrap(peers=tuple(self.scenario.nodes)), t)
        elif self.initial_view:
            node.view_id += 1
            stack.command(ViewChange(members=tuple(self.scenario.nodes), view_id=node.view_id), t)
        self._after_input(node, t)

    def _stop_node(self, node: SimNode, t: float, reason: str) -> None:
        node.events.extend(node.drops.flush(t))
        node.events.append(make_event(t, node.name, "node", "node_stop", reason=reason, incarnation=node.incarnation))
        node.stack = None
        node.state = DEAD
        node.cancel_timer()
        # Frames and commands buffered while paused die with the process.
        self.frames_to_dead += node.pending_frames
        node.pending.clear()
        node.pending_frames = 0

    def _resume(self, node: SimNode, t: float) -> None:
        node.state = RUNNING
        pending = node.pending
        while pending and node.state is RUNNING:
            what, item = pending.popleft()
            if what == "frame":
                node.pending_frames -= 1
                self._receive_frame(node, item, t)
            else:
                self._command(node, item, t)
        # Timers were suspended: re-arm from the stack's deadline (which may be in the past).
        node.timer_at = None
        node.timer_gen += 1
        deadline = node.live_stack.next_deadline()
        if deadline is not None:
            node.timer_at = deadline
            self._push(deadline if deadline > t else t, TIMER, node, node.timer_gen)

    # ---- the schedule -------------------------------------------------------------------------

    def _apply_step(
        self, step: FaultStep, t: float, steps: Sequence[FaultStep] | Mapping[int, FaultStep] | None = None
    ) -> list[nemesis.Timeline]:
        state = nemesis.ClusterState(
            nodes=self.scenario.nodes,
            states={name: node.state.value for name, node in self.nodes.items()},
            active=self.active_steps,
            steps=self.scenario.schedule if steps is None else steps,
        )
        ops = nemesis.step_ops(step, state)
        for op in ops:
            self._carry_out[type(op)](op, t)
        return [op for op in ops if isinstance(op, nemesis.Timeline)]

    # Each nemesis operation, carried out on the in-memory network and stacks.

    def _op_link_fault(self, op: nemesis.LinkFault, t: float) -> None:
        step = op.step
        if op.on:
            self.network.apply(step.index, nemesis.step_links(step), **nemesis.link_changes(step))
        else:
            self.network.remove(step.index)

    def _op_rule_add(self, op: nemesis.RuleAdd, t: float) -> None:
        node = self.nodes[op.node]
        self._rules[op.step.index] = (node, node.incarnation, self._fault_layer(node).add_rule(op.rule))

    def _op_rule_remove(self, op: nemesis.RuleRemove, t: float) -> None:
        node, incarnation, rule_id = self._rules.pop(op.step.index)
        # A restart lost the rule together with the old stack; there is nothing left to remove.
        if node.alive and node.incarnation == incarnation:
            self._fault_layer(node).remove_rule(rule_id)

    def _op_view(self, op: nemesis.View, t: float) -> None:
        node = self.nodes[op.node]
        node.view_id += 1
        self._command_when_running(node, ViewChange(members=op.members, view_id=node.view_id), t)

    def _op_sync(self, op: nemesis.AdminSync, t: float) -> None:
        self._command_when_running(self.nodes[op.node], SyncPeer(peer=op.peer), t)

    def _op_config(self, op: nemesis.AdminConfig, t: float) -> None:
        self._command_when_running(self.nodes[op.node], SetConfig(values=dict(op.values)), t)

    def _command_when_running(self, node: SimNode, cmd, t: float) -> None:
        # A paused process reads its admin socket only when it runs again.
        if node.state is PAUSED:
            node.pending.append(("command", cmd))
        else:
            self._command(node, cmd, t)

    def _op_lifecycle(self, op: nemesis.Lifecycle, t: float) -> None:
        node = self.nodes[op.node]
        if op.action == "kill":
            self._stop_node(node, t, "kill")
        elif op.action == "pause":
            node.state = PAUSED
            node.cancel_timer()
        elif op.action == "resume":
            self._resume(node, t)
        else:
            if node.alive:
                # A restart kills the old incarnation, as live backends do (no LEAVE): see leave().
                self._stop_node(node, t, "restart")
            self._start_node(node, t)

    def _op_timeline(self, op: nemesis.Timeline, t: float) -> None:
        self.timeline.append(op.event(t))

    @property
    def _carry_out(self) -> dict:
        return {
            nemesis.LinkFault: self._op_link_fault,
            nemesis.RuleAdd: self._op_rule_add,
            nemesis.RuleRemove: self._op_rule_remove,
            nemesis.View: self._op_view,
            nemesis.AdminSync: self._op_sync,
            nemesis.AdminConfig: self._op_config,
            nemesis.Lifecycle: self._op_lifecycle,
            nemesis.Timeline: self._op_timeline,
        }

    # ---- in-process fault rules ---------------------------------------------------------------

    def _fault_layer(self, node: SimNode) -> FaultLayer:
        try:
            return node.live_stack.layer(FaultLayer)
        except KeyError:
            raise SimulationError(
                f"node {node.name}'s stack has no FaultLayer, so a drop step cannot be applied; "
                f"build the stack with the in-process fault layer"
            ) from None

    # ---- the end ------------------------------------------------------------------------------

    def _final_snapshots(self, t: float) -> None:
        for node in self.nodes.values():
            node.events.extend(node.drops.flush(t))
            if not node.alive:
                continue
            for layer in node.live_stack.layers:
                window_events = getattr(layer, "window_events", None)
                if window_events is not None:
                    node.events.extend(window_events(t, final=True))


def _config_error(exc: ValueError) -> ScenarioError:
    if isinstance(exc, SettingError):
        return ScenarioError(f"config.{exc.key}", exc.message)
    return ScenarioError("config", str(exc))


def simulate(scenario: Scenario, seed: int | None = None, **kwargs) -> SimResult:
    """Build a Simulation and run it (keyword arguments as for Simulation)."""
    return Simulation(scenario, seed, **kwargs).run()
