"""A protocol-level fuzzer: well-framed, hostile messages from peers in the view, for any protocol
whose spec names a header generator (`ProtocolSpec.fuzz`).

The fuzzer drives one node's Stack (node.compose.build_stack) directly, in scripted time: each
input is a batch of messages from one peer (fresh random headers, or a replay of an earlier one:
duplicated control messages), a timer run, an application send, a view change or an admin
command (a multicast protocol's application multicasts as well as it unicasts). Every header is
passed through its wire codec first, so only what could arrive in a
frame reaches the protocol, and every message the node sends is encoded, as the transport would.

After every input: `check_invariants()`, and the node's state must stay bounded whatever the
seqnos, read through the protocol-neutral views (node/views.py): at most one send and one receive
window per peer and layer, a receive window holds at most `max_pending` messages, a send window
no more than the application sent, and one input makes at most `max_work` messages and events.
Any exception is a crash (a live node turns it into an `error` event, which the checkers fail).
Rejections are `drop` events; they are counted by reason, with numbers replaced by N.
"""

from __future__ import annotations

import random
import re
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from splitbrain.node import protocols, wire
from splitbrain.node.compose import build_stack, protocol_layers
from splitbrain.node.layer import SyncPeer, ViewChange
from splitbrain.node.message import MCAST_DEST, Message

LOCAL = "N"
PEERS = ("P", "Q")
MEMBERSHIP_OVER = "unicast3"  # the reliable protocol a fuzzed membership protocol runs around
ECHO = 4  # headers of each type the node sent each peer, kept for the generator to echo
_NUMBER = re.compile(r"\d+")


class FuzzCrash(AssertionError):
    """The node raised or broke a bound; the message names the seed and the input to replay."""


@dataclass
class FuzzStats:
    inputs: int = 0
    messages: int = 0  # fuzzed messages handed to the stack
    kinds: Counter[str] = field(default_factory=Counter)  # inputs by kind, messages by type
    rejections: Counter[str] = field(default_factory=Counter)  # drop reason -> count
    delivered: int = 0
    max_pending: int = 0  # largest receive window seen (messages held)
    max_work: int = 0  # most messages + events one input produced


class ProtocolFuzzer:
    def __init__(
        self,
        protocol: str,
        seed: int,
        config: Mapping[str, Any] | None = None,
        max_pending: int = 1024,
        max_work: int = 2048,
        send_cap: int = 64,
    ) -> None:
        """`max_pending` is the receive-window bound to enforce: pass the protocol's configured
        limit (its default is far above what random seqnos fill in a CI run); `max_work` bounds
        the messages plus events of one input; `send_cap` the application's unacked sends."""
        spec = protocols.get(protocol)
        if spec.fuzz is None or spec.header is None:
            raise ValueError(f"protocol {protocol!r} has no header fuzzer (ProtocolSpec.fuzz)")
        self.fuzz = spec.fuzz
        self.codec = spec.header
        # A protocol may put its messages under several header ids (GMS: the unreliable ones
        # below the reliable protocol, its own above it); each header goes under the id that
        # decodes its type.
        self.codecs = (spec.header, *spec.extra_headers)
        self.seed = seed
        self.rng = random.Random(seed)
        if spec.membership:
            # A membership protocol runs around a reliable one (compose.build_stack), as with
            # `membership: gms`; the fuzzed headers are the membership protocol's.
            self.stack = build_stack(
                LOCAL, MEMBERSHIP_OVER, config, random.Random(seed), faults=False, membership=protocol
            )
        else:
            self.stack = build_stack(LOCAL, protocol, config, random.Random(seed), faults=False)
        self.layers = protocol_layers(self.stack)
        self.max_pending, self.max_work, self.send_cap = max_pending, max_work, send_cap
        self.now = 0.0
        self.members = (LOCAL, *PEERS)
        # Per peer and message type, so a burst of one type (retransmissions) leaves the others.
        self.sent: dict[str, dict[str, deque[Any]]] = {p: {} for p in PEERS}
        self.replay: dict[str, deque[tuple[wire.HeaderCodec, Any]]] = {p: deque(maxlen=4 * ECHO) for p in PEERS}
        self.app_sent: Counter[str] = Counter()
        # Messages to each peer carrying a fuzzed membership protocol's header: its reliable ones
        # (JOIN_RSP, VIEW, MERGE_RSP) sit in the reliable protocol's send windows next to the
        # application's. Retransmissions are counted too, which only loosens the bound.
        self.member_sent: Counter[str] = Counter()
        self.membership = spec.membership
        self.multicast = spec.multicast
        self.stats = FuzzStats()
        self.stack.command(ViewChange(members=self.members, view_id=1), self.now)
        self.stack.take()

    def run(self, inputs: int) -> FuzzStats:
        for _ in range(inputs):
            self.step()
        return self.stats

    def step(self) -> None:
        rng = self.rng
        self.now += rng.random() * 0.05
        roll = rng.random()
        kind = (
            "receive"
            if roll < 0.8
            else "timer"
            if roll < 0.9
            else "send"
            if roll < 0.97
            else "view"
            if roll < 0.985
            else "sync"
        )
        self.stats.inputs += 1
        self.stats.kinds[kind] += 1
        try:
            getattr(self, "_" + kind)()
            self.stack.check_invariants()
            self._drain()
            self._check_bounds()
        except Exception as exc:
            raise FuzzCrash(
                f"seed {self.seed}, input {self.stats.inputs} ({kind}) at t={self.now:.3f}: {type(exc).__name__}: {exc}"
            ) from exc

    # ---- inputs -------------------------------------------------------------------------------

    def _receive(self) -> None:
        rng = self.rng
        live = [p for p in PEERS if p in self.members]
        if not live:
            return
        peer = rng.choice(live)
        batch = [self._message(peer) for _ in range(1 + int(rng.random() * 3))]
        self.stats.messages += len(batch)
        self.stack.receive(batch, self.now)

    def _message(self, peer: str) -> Message:
        rng = self.rng
        earlier = self.replay[peer]
        if earlier and rng.random() < 0.15:
            header = rng.choice(earlier)  # a duplicated (or reordered) earlier message
        else:
            fresh = self.fuzz(rng, [h for recent in self.sent[peer].values() for h in recent])
            # What a frame can carry: the header as its codec decodes it.
            header = self._framed(fresh)
            earlier.append(header)
        codec, header = header
        self.stats.kinds[codec.type_name(header)] += 1
        return Message(peer, LOCAL, b"fuzz", {codec.proto_id: header})

    def _framed(self, header: Any) -> tuple[wire.HeaderCodec, Any]:
        """(codec, header as that codec decodes it) for the first codec that takes its type."""
        for codec in self.codecs:
            try:
                return codec, codec.decode(codec.encode(header))
            except wire.WireError:
                continue
        raise AssertionError(f"no codec of the protocol decodes the fuzzed header {header!r}")

    def _timer(self) -> None:
        deadline = self.stack.next_deadline()
        if deadline is not None and deadline > self.now:
            self.now = deadline
        self.stack.on_timer(self.now)

    def _send(self) -> None:
        if self.multicast and self.rng.random() < 0.5:
            # A multicast: one message to every member, in each one's send window.
            if all(sum(layer.unacked(p) for layer in self.layers) < self.send_cap for p in PEERS):
                for p in PEERS:
                    self.app_sent[p] += 1
                self.stack.send(Message(LOCAL, MCAST_DEST, b"app"), self.now)
            return
        peer = self.rng.choice(PEERS)
        if sum(layer.unacked(peer) for layer in self.layers) < self.send_cap:
            self.app_sent[peer] += 1
            self.stack.send(Message(LOCAL, peer, b"app"), self.now)

    def _view(self) -> None:
        # A peer leaves the view (its connections start closing) or everyone is back.
        gone = self.rng.choice(PEERS) if len(self.members) == len(PEERS) + 1 else None
        self.members = tuple(m for m in (LOCAL, *PEERS) if m != gone)
        self.stack.command(ViewChange(members=self.members, view_id=self.stats.kinds["view"] + 1), self.now)

    def _sync(self) -> None:
        cmd = SyncPeer(peer=self.rng.choice(PEERS))
        if all(layer.refusal(cmd) is None for layer in self.layers):
            self.stack.command(cmd, self.now)

    # ---- outputs and bounds -------------------------------------------------------------------

    def _drain(self) -> None:
        out, up, events = self.stack.take()
        for msg in out:
            wire.encode_message(msg)  # what the transport does next: must not raise
            carried = False
            for codec in self.codecs:
                header = msg.headers.get(codec.proto_id)
                carried = carried or header is not None
                if header is not None and msg.dest in self.sent:
                    by_type = self.sent[msg.dest]
                    mtype = codec.type_name(header)
                    if mtype not in by_type:
                        by_type[mtype] = deque(maxlen=ECHO)
                    by_type[mtype].append(header)
            if carried and self.membership:
                self.member_sent[msg.dest] += 1
        for event in events:
            if event["kind"] == "drop":
                self.stats.rejections[_NUMBER.sub("N", str(event.get("reason")))] += 1
        self.stats.delivered += len(up)
        work = len(out) + len(events)
        self.stats.max_work = max(self.stats.max_work, work)
        if work > self.max_work:
            raise AssertionError(f"one input made {work} messages and events (bound {self.max_work})")

    def _check_bounds(self) -> None:
        for layer in self.layers:
            windows = layer.windows()
            if len(windows) > 2 * len(PEERS):
                raise AssertionError(f"{layer.proto}: {len(windows)} windows for {len(PEERS)} peers")
            for w in windows:
                if w.side == "recv":
                    self.stats.max_pending = max(self.stats.max_pending, w.pending)
                    if w.pending > self.max_pending:
                        raise AssertionError(
                            f"{layer.proto}: recv window for {w.peer} holds {w.pending} "
                            f"messages (bound {self.max_pending})"
                        )
                elif w.pending > self.app_sent[w.peer] + self.member_sent[w.peer]:
                    raise AssertionError(
                        f"{layer.proto}: send window to {w.peer} keeps {w.pending} messages, "
                        f"{self.app_sent[w.peer]} were sent (and {self.member_sent[w.peer]} membership messages)"
                    )
            if len(layer.busy()) > 2 * len(PEERS):
                raise AssertionError(f"{layer.proto}: busy with {layer.busy()}")


def fuzzable() -> tuple[str, ...]:
    """The registered protocols that name a header fuzzer, membership protocols (GMS) included:
    those are fuzzed running around MEMBERSHIP_OVER."""
    names = (*protocols.names(), *protocols.membership_names())
    return tuple(name for name in names if protocols.get(name).fuzz is not None)
