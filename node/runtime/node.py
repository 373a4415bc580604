"""The asyncio shell around a sans-I/O stack: one Node = one protocol stack + sockets + admin API.

Theory of operation
-------------------
The stack (node.compose.build_stack, the same objects the simulator drives) is only ever touched
from the event loop, by four kinds of input: frames from the transport, workload sends, timer
expiries and admin commands. After every input the node drains the stack's outboxes
(`stack.take()`): messages for the network go to the bundler, messages for the application to
the delivered bookkeeping, events to the event log. Then it re-arms its one timer: `call_at` at
the stack's `next_deadline()`, converted from the run clock to loop time.

Run clock: now = time.time() - epoch, the same for every node of a run, used for the stack and
for event times. It is read as a monotonic offset from one wall-clock reading taken at start, so
a wall-clock step during a run cannot stall the timers.

Receive path: a frame is decoded (node.wire.decode_frame) and checked (it is for us, from a known
peer); anything else is dropped, counted exactly (rx_stats, /metrics) and logged as a `drop`
event of proto "transport", aggregated per reason and source (node/dropagg.py: at most one line
a second with a count, so a garbage flood cannot fill the disk), and the node carries on. The
messages of every frame that arrived during one loop iteration are handed to the stack as one
batch per source, at the end of that iteration, so a burst of datagrams becomes one batch (and
one cumulative ACK, when it reaches ack_threshold).

Start and stop: the transport reads before the node runs (start() still starts IP multicast and
the admin API), and a peer that has this node in its view may send by then. Such frames are kept,
up to START_HOLD_MAX_BYTES, and processed in order as soon as the node runs: over TCP without
retransmission (NAKACK2, the NAKACK2 design) nothing would ever resend them. Frames accepted but not yet
processed when stop() begins are processed first; a frame arriving after it began is dropped (the
process is going away). Every frame not kept is counted and logged like any other drop (reasons
`starting` and `stopping`; the latter come after the event log closed: the stop's log line says
how many).

Send path: the bundler (bundler.py) queues messages per destination and packs them into as few
frames as possible at the end of the current loop iteration.

Workload: streams started from the admin API send in batches (at most STREAM_BATCH messages per
loop iteration), paced by their rate. A stream with rate 0 ("as fast as possible") also waits
while its destination is not writable or more than INFLIGHT_BYTES of its messages are unacked,
which is the application's flow control, not the protocol's: without it a Python sender floods
the receiver's socket buffer and spends its time on retransmissions. Its price: a receiver that
gets small batches (bundling off) acks only every ack_min_interval, so such a stream moves at
most one window per ack_min_interval.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import traceback
from typing import TYPE_CHECKING, Any

from .. import protocols
from ..compose import STATIC, build_stack, protocol_layers, split_config
from ..dropagg import DropAggregator
from ..events import make_event
from ..faultlayer import FaultLayer
from ..layer import Bootstrap, Layer, Leave
from ..message import Message
from ..wire import WireError, decode_frame
from .bundler import Bundler
from .config import Address, ConfigError, NodeConfig
from .control import NodeControl
from .eventlog import EventLog
from .ipmcast import IpMulticast
from .streams import StreamSender
from .transport import TcpTransport, UdpTransport, resolve_peers
from .workload import Delivered, Stream

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from .admin import AdminServer

# Events of messages that let a peer purge state (the bundler sends them later in this loop turn).
_ACKING_EVENTS = frozenset(("ack_tx",))

log = logging.getLogger("splitbrain.node.runtime")

# A timer that fires at most this early runs the stack at its deadline: uvloop's timers count
# milliseconds, and re-arming for less than that would spin.
TIMER_SLACK_S = 0.001
# Frames kept while the node starts (its peers' flow control keeps them far below this).
START_HOLD_MAX_BYTES = 64 * 1024 * 1024


class RxStats:
    __slots__ = ("frames_in", "bytes_in", "malformed", "dropped", "stack_errors")

    def __init__(self) -> None:
        self.frames_in = 0
        self.bytes_in = 0
        self.malformed = 0
        self.dropped: dict[str, int] = {}
        self.stack_errors = 0


class Node(StreamSender, NodeControl):
    """One protocol node. `await start()`, then it runs on the loop until `await stop()`."""

    def __init__(self, config: NodeConfig):
        self.config = config
        self.name = config.name
        self.incarnation = config.incarnation
        self.peers = dict(config.peers)
        wall = time.time()
        self.epoch = config.epoch if config.epoch is not None else wall
        self._clock_offset = wall - self.epoch - time.monotonic()
        self._started_mono = time.monotonic()
        rng = random.Random(f"{config.seed}/{config.name}/{config.incarnation}")
        self.stack = build_stack(
            config.name, config.protocol, config.config, rng, config.incarnation, membership=config.membership
        )
        split = split_config(config.protocol, config.config, config.membership)
        self.settings = protocols.get(config.protocol).config(split[config.protocol])
        # The membership protocol's settings (GMS), changed at run time like the protocol's.
        self.membership_settings = (
            None if config.membership == STATIC else protocols.get(config.membership).config(split[config.membership])
        )
        self.protocol_layers: list[Layer] = protocol_layers(self.stack)
        # The layers that hold unacked messages, for back-pressure on streams.
        self._flow_layers = [layer for layer in self.protocol_layers if type(layer).unacked is not Layer.unacked]
        self.faults: FaultLayer = self.stack.layer(FaultLayer)
        self.delivered = Delivered()
        self.app_sent: dict[str, int] = {}
        self.streams: dict[int, Stream] = {}
        self.view: dict[str, Any] | None = None
        self.rx_stats = RxStats()
        self.drops = DropAggregator(self.name)
        self._drops_timer: asyncio.TimerHandle | None = None
        self.eventlog: EventLog | None = None
        self.transport: UdpTransport | TcpTransport | None = None
        self.bundler: Bundler | None = None
        self.ipmcast: IpMulticast | None = None  # with mcast_group: multicasts as IP multicast
        self.admin: AdminServer | None = None
        # Set by start(); the callbacks that use it run only after.
        self.loop: asyncio.AbstractEventLoop
        self.bind_address: Address | None = None
        self.admin_address: Address | None = None
        self._registry: CollectorRegistry | None = None
        self._rx: dict[str, list[Message]] = {}
        self._rx_scheduled = False
        self._held_bytes = 0  # of the frames kept before the node ran
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline: float | None = None
        self._stream_handles: dict[int, asyncio.Handle | asyncio.TimerHandle] = {}
        self._blocked: set[int] = set()
        self._blocked_poll: asyncio.TimerHandle | None = None
        self._running = False
        self._stopping = False
        # With a membership protocol a graceful stop leaves the group (LEAVE), unless the harness
        # ends the whole run (POST /leave_on_stop {"enabled": false}): a cluster shut down at the
        # end of a run sends no membership traffic after its final window snapshots.
        self.leave_on_stop = True
        self._stopped = asyncio.Event()

    # ---- clock --------------------------------------------------------------------------------

    def now(self) -> float:
        """The run clock: seconds since the run's epoch."""
        return time.monotonic() + self._clock_offset

    def uptime(self) -> float:
        return time.monotonic() - self._started_mono

    @property
    def registry(self) -> CollectorRegistry:
        """The node's Prometheus registry, made at the first scrape: prometheus_client costs a
        starting process about 25 ms of CPU, which ten nodes starting at once on two cores feel."""
        if self._registry is None:
            from .metrics import make_registry

            self._registry = make_registry(self)
        return self._registry

    def _loop_time(self, t: float) -> float:
        return self.loop.time() + (t - self.now())

    # ---- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the event log, bind the protocol socket and the admin API, log node_start.
        Raises ConfigError (naming the key) when an address cannot be bound or a file opened."""
        self.loop = asyncio.get_running_loop()
        cfg = self.config
        try:
            if cfg.event_log and cfg.events is not None:  # config requires events with event_log
                try:
                    self.eventlog = EventLog(cfg.events, self.loop)
                except OSError as exc:
                    raise ConfigError("events", f"cannot open {cfg.events}: {exc.strerror or exc}") from None
            else:
                # Nothing will read them: the layers need not build an event per message.
                for layer in self.stack.layers:
                    layer.data_events = False
            resolved = await resolve_peers(self.peers)
            cls = UdpTransport if cfg.transport == "udp" else TcpTransport
            transport = self.transport = cls(self.name, cfg.bind, resolved, self.on_frame, self._transport_drop)
            self._follow_lossless()
            self.bind_address = await transport.start()
            self.bundler = Bundler(
                self.name, self.loop, transport, cfg.bundle_max_bytes, cfg.bundling, on_error=self._bundle_error
            )
            if cfg.mcast_group is not None:
                self.ipmcast = IpMulticast(
                    self.name,
                    cfg.bind,
                    cfg.mcast_group,
                    resolved,
                    self.on_frame,
                    self._transport_drop,
                    transport.stats,
                    cfg.bundle_max_bytes,
                    cfg.bundling,
                    on_error=self._bundle_error,
                )
                await self.ipmcast.start()
            from .admin import AdminServer  # aiohttp is imported only by a node that serves

            admin = self.admin = AdminServer(self)
            self.admin_address = await admin.start(cfg.admin)
        except BaseException:
            await self._close_io()
            raise
        self._running = True
        now = self.now()
        self._log(make_event(now, self.name, "node", "node_start", incarnation=self.incarnation))
        if self.eventlog is not None:
            self.eventlog.start()
        if cfg.membership != STATIC:
            # The membership protocol looks for its group among the configured peers (TCPPING).
            self.command(Bootstrap(peers=(self.name, *sorted(self.peers))))
        self._rearm()
        if self._rx:
            self._process_rx()  # what arrived before the node ran, after Bootstrap as if just now
        self._held_bytes = 0
        if self._drops_timer is None:
            self._arm_drops_timer()  # the counts of drops before the node ran
        log.info(
            "node %s (incarnation %d) up: %s %s, admin http://%s",
            self.name,
            self.incarnation,
            cfg.transport,
            self.bind_address,
            self.admin_address,
        )

    async def stop(self, reason: str = "stop") -> None:
        """Graceful stop: final window snapshots, node_stop, flush the log, close sockets."""
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        try:
            if self._running:
                if self._rx:
                    # Frames the transport accepted in this loop iteration left the peer's socket:
                    # the peer counts them as delivered, so they are processed, not thrown away.
                    self._process_rx()
                now = self.now()
                if self.config.membership != STATIC and self.leave_on_stop:
                    # A graceful stop leaves the group: LEAVE goes out with the final flush below.
                    self.command(Leave())
                self._running = False
                for sid in list(self._stream_handles):
                    self._cancel_stream(sid)
                for stream in self.streams.values():
                    if not stream.done:
                        stream.done = True
                        stream.stopped_reason = "node stopped"
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                if self._drops_timer is not None:
                    self._drops_timer.cancel()
                    self._drops_timer = None
                # What the stack already decided to send goes out.
                if self.bundler is not None:
                    self.bundler.flush()
                if self.ipmcast is not None:
                    self.ipmcast.flush()
                events = self.drops.flush(now)
                for layer in self.stack.layers:
                    events.extend(layer.window_events(now, final=True))
                events.append(
                    make_event(now, self.name, "node", "node_stop", reason=reason, incarnation=self.incarnation)
                )
                for ev in events:
                    self._log(ev)
        finally:
            await self._close_io()
            self._stopped.set()
            # Frames that came while the transports closed (counted as drops after the event log
            # closed): said here, so that no drop goes unreported.
            late = self.rx_stats.dropped.get("stopping", 0)
            said = f"; {late} frames that came while stopping dropped" if late else ""
            log.info("node %s stopped (%s)%s", self.name, reason, said)

    async def _close_io(self) -> None:
        if self._blocked_poll is not None:
            self._blocked_poll.cancel()
            self._blocked_poll = None
        if self.eventlog is not None:
            self.eventlog.close()
        if self.transport is not None:
            await self.transport.close()
        if self.ipmcast is not None:
            await self.ipmcast.close()
        if self.admin is not None:
            await self.admin.stop()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    @property
    def running(self) -> bool:
        return self._running

    # ---- draining the stack -------------------------------------------------------------------

    def _log(self, event: dict[str, Any]) -> None:
        if self.eventlog is not None and not self.eventlog.closed:
            self.eventlog.append(event)

    def _drain(self, now: float) -> None:
        # Send and deliver events stay records (node/events.py): the event log formats them itself.
        to_net, to_app, events = self.stack.take_packed()
        if to_net:
            assert self.bundler is not None, "the stack produced frames before start()"
            if self.ipmcast is not None:
                to_net = self.ipmcast.take(to_net)
            if to_net:
                self.bundler.add(to_net)
        if to_app:
            self.delivered.add_batch(to_app, now)
        if events and self.eventlog is not None:
            self.eventlog.extend(events)
            # Log before acknowledging: an ACK lets the sender forget messages, so the deliveries
            # it covers must be on disk before it leaves, or a kill -9 in the next 100 ms would
            # lose their records and make a delivered message look lost.
            if any(type(ev) is dict and ev["kind"] in _ACKING_EVENTS for ev in events):
                self.eventlog.flush()
        self._rearm()
        if self._blocked:
            self._wake_blocked()

    def _rearm(self) -> None:
        if not self._running:
            return
        deadline = self.stack.next_deadline()
        if deadline == self._timer_deadline and (self._timer is not None or deadline is None):
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_deadline = deadline
        if deadline is not None:
            self._timer = self.loop.call_at(self._loop_time(deadline), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if not self._running:
            return
        now = self.now()
        deadline = self._timer_deadline
        if deadline is not None and deadline > now + TIMER_SLACK_S:
            # The loop's clock runs a little apart from ours (uvloop counts milliseconds).
            self._timer = self.loop.call_at(self._loop_time(deadline), self._on_timer)
            return
        try:
            self.stack.on_timer(max(now, deadline) if deadline is not None else now)
        except Exception as exc:  # a protocol bug must not stop the node's clock
            self._stack_error("timer", exc, now)
        finally:
            self._timer_deadline = None
            self._drain(now)

    def _stack_error(self, where: str, exc: Exception, now: float, peer: str | None = None) -> None:
        """An exception inside a protocol layer is a bug of ours, not bad input: an `error` event
        (which the no_errors check fails on) with the last frames of its traceback; the node goes on."""
        self.rx_stats.stack_errors += 1
        log.exception("%s: protocol error on %s input", self.name, where)
        self._log(
            make_event(
                now,
                self.name,
                "node",
                "error",
                peer=peer,
                reason=f"{type(exc).__name__}: {exc} (on {where} input)"[:500],
                detail=traceback_tail(exc),
            )
        )

    # ---- receive path -------------------------------------------------------------------------

    def on_frame(self, data: bytes, conn_peer: str | None = None) -> str | None:
        """A frame from the transport; returns its source when accepted, None when dropped."""
        rx = self.rx_stats
        rx.frames_in += 1
        rx.bytes_in += len(data)
        if not self._running and not self._may_hold(len(data), conn_peer):
            return None
        try:
            src, msgs = decode_frame(data)
        except WireError as exc:
            rx.malformed += 1
            self._drop("malformed", f"malformed frame: {exc}", None, len(data))
            return None
        except Exception as exc:  # decode_frame promises WireError only; never trust the network
            rx.malformed += 1
            self._drop("malformed", f"malformed frame (decoder error {type(exc).__name__}: {exc})", None, len(data))
            return None
        dest = msgs[0].dest
        if dest != self.name:
            self._drop("wrong_dest", f"frame for {dest!r}, not for this node", src, len(data))
            return None
        if src not in self.peers:
            self._drop("unknown_src", f"frame from unknown node {src!r}", None, len(data))
            return None
        if conn_peer is not None and src != conn_peer:
            self._drop("wrong_conn", f"frame from {src!r} on the connection of {conn_peer!r}", src, len(data))
            return None
        pending = self._rx.get(src)
        if pending is None:
            self._rx[src] = msgs
        else:
            pending.extend(msgs)
        if not self._rx_scheduled:
            self._rx_scheduled = True
            self.loop.call_soon(self._process_rx)
        return src

    def _may_hold(self, nbytes: int, conn_peer: str | None) -> bool:
        """Whether a frame that arrives while the node does not run is kept (before it runs, while
        less than START_HOLD_MAX_BYTES are); one that is not is a counted drop."""
        if self._stopping:
            self._drop("stopping", "frame arrived after the node began to stop", conn_peer, nbytes)
            return False
        if self._held_bytes + nbytes > START_HOLD_MAX_BYTES:
            why = f"frame arrived before the node ran, {self._held_bytes} bytes held already"
            self._drop("starting", why, conn_peer, nbytes)
            return False
        self._held_bytes += nbytes
        return True

    def _drop(self, key: str, reason: str, peer: str | None, nbytes: int) -> None:
        dropped = self.rx_stats.dropped
        dropped[key] = dropped.get(key, 0) + 1
        # A name the frame only claims is no source to aggregate by: it would give an attacker
        # a new key (and a new line) per frame.
        source = peer if peer in self.peers else None
        ev = self.drops.drop(self.now(), key, source, nbytes, reason=reason)
        if ev is not None:
            self._log(ev)
        elif self._drops_timer is None and self._running:
            self._arm_drops_timer()

    def _arm_drops_timer(self) -> None:
        deadline = self.drops.next_deadline()
        if deadline is not None:
            self._drops_timer = self.loop.call_at(self._loop_time(deadline), self._flush_drops)

    def _flush_drops(self) -> None:
        self._drops_timer = None
        if not self._running:
            return
        # The loop's clock runs a little apart from ours: a timer that fires early still flushes.
        now = self.now()
        due = self.drops.next_deadline()
        for ev in self.drops.on_timer(now if due is None else max(now, due)):
            self._log(ev)
        self._arm_drops_timer()

    def _transport_drop(self, reason: str, peer: str | None) -> None:
        self.rx_stats.malformed += 1
        self._drop("malformed", reason, peer, 0)

    def _process_rx(self) -> None:
        self._rx_scheduled = False
        if not self._running:
            return
        batches, self._rx = self._rx, {}
        now = self.now()
        receive = self.stack.receive
        for src, msgs in batches.items():
            try:
                receive(msgs, now)
            except Exception as exc:
                self._stack_error("receive", exc, now, src)
        self._drain(now)

    def _bundle_error(self, dest: str, exc: Exception) -> None:
        log.error("%s: cannot encode frames for %s: %s", self.name, dest, exc)
        self._log(
            make_event(self.now(), self.name, "transport", "drop", peer=dest, reason=f"cannot encode frame: {exc}")
        )


def traceback_tail(exc: BaseException, frames: int = 4, limit: int = 1000) -> str:
    """The last few frames of an exception's traceback, one line each, at most `limit` characters."""
    summary = traceback.extract_tb(exc.__traceback__)[-frames:]
    lines = [
        f"{f.filename.rsplit('/', 2)[-1] if '/' in f.filename else f.filename}:{f.lineno} {f.name}: {f.line}"
        for f in summary
    ]
    text = " | ".join(lines)
    return text if len(text) <= limit else "..." + text[-(limit - 3) :]
