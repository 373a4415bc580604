"""A toy protocol, to prove that a protocol is its package plus one registry line.

TOY numbers each destination's messages 1, 2, 3... and delivers in seqno order, holding what
arrives early. It never retransmits, so a lost message blocks the flow for good: the checkers must
see that. It is registered by naming `tests.toyproto` in SPLITBRAIN_PROTOCOLS (node/protocols.py),
which is how a protocol kept outside node/ is added; node processes inherit the variable.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, replace

from splitbrain.node.errors import SettingError
from splitbrain.node.events import EVENT_VERSION
from splitbrain.node.layer import Action, Down, Layer, Log, Up
from splitbrain.node.message import Message
from splitbrain.node.protocols import ProtocolSpec
from splitbrain.node.views import Window
from splitbrain.node.wire import HeaderCodec, WireError

PROTO = "toy"
PROTO_ID = 90
_SEQNO = struct.Struct("!Q")


@dataclass(frozen=True)
class ToyConfig:
    recovery_bound_s: float = 1.0

    @classmethod
    def from_dict(cls, values) -> ToyConfig:
        unknown = [k for k in values if k != "recovery_bound_s"]
        if unknown:
            raise SettingError(unknown[0], "unknown toy setting (known: recovery_bound_s)")
        return cls(**values)

    def as_dict(self) -> dict:
        return asdict(self)

    def updated(self, values) -> ToyConfig:
        return replace(self, **values)


def _decode(body: bytes) -> int:
    if len(body) != _SEQNO.size:
        raise WireError("toy header is 8 bytes")
    return _SEQNO.unpack(body)[0]


class Toy(Layer):
    proto = PROTO

    def __init__(self, local: str, config: ToyConfig):
        self.local = local
        self.config = config
        self.sent: dict[str, int] = {}  # dest -> highest seqno sent
        self.delivered: dict[str, int] = {}  # src -> highest seqno delivered
        self.early: dict[str, dict[int, Message]] = {}  # src -> seqno -> message held

    def _event(self, now: float, kind: str, peer: str, seqno: int, msg: Message) -> Log:
        ev = {
            "v": EVENT_VERSION,
            "t": now,
            "node": self.local,
            "proto": PROTO,
            "kind": kind,
            "peer": peer,
            "seqno": seqno,
            "conn_id": 0,
            "bytes": len(msg.payload),
        }
        if msg.app is not None:
            ev["app"] = msg.app
        return Log(event=ev)

    def down(self, msg: Message, now: float) -> list[Action]:
        seqno = self.sent.get(msg.dest, 0) + 1
        self.sent[msg.dest] = seqno
        msg.headers[PROTO_ID] = seqno
        return [self._event(now, "send", msg.dest, seqno, msg), Down(msg=msg)]

    def up(self, msgs: list[Message], now: float) -> list[Action]:
        out: list[Action] = []
        ready: list[Message] = []
        for msg in msgs:
            early = self.early.setdefault(msg.src, {})
            early.setdefault(msg.headers.pop(PROTO_ID), msg)
            nxt = self.delivered.get(msg.src, 0) + 1
            while nxt in early:
                got = early.pop(nxt)
                self.delivered[msg.src] = nxt
                out.append(self._event(now, "deliver", msg.src, nxt, got))
                ready.append(got)
                nxt += 1
        if ready:
            out.append(Up(msgs=ready))
        return out

    def windows(self) -> list[Window]:
        # No acks: a send window counts as acked up to what was sent.
        out = [Window(peer=p, side="send", conn_id=0, low=n, high=n, state="OPEN") for p, n in self.sent.items()]
        out += [
            Window(
                peer=p,
                side="recv",
                conn_id=0,
                low=n,
                high=max([n, *self.early.get(p, {})]),
                state="OPEN",
                pending=len(self.early.get(p, {})),
            )
            for p, n in self.delivered.items()
        ]
        return out

    def snapshot(self) -> dict:
        return {"sent": dict(self.sent), "delivered": dict(self.delivered)}


SPEC = ProtocolSpec(
    name=PROTO,
    summary="numbers and delivers in order, never retransmits (a test's toy)",
    config=ToyConfig.from_dict,
    layers=lambda name, config, rng, incarnation: [Toy(name, config)],
    header=HeaderCodec(PROTO_ID, int, _SEQNO.pack, _decode, lambda h: "TOYDATA"),
    message_types=("TOYDATA",),
    event_kinds={"toy_note": "unused; shows that a protocol registers its own kinds"},
)
