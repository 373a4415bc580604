"""How frames cross the simulated network: as message objects (the default) or as wire bytes.

`ObjectCodec` hands a frame's messages to the receiver as new Message objects with the same
addresses, payload, known app id and header dict, skipping the encode and decode that made up a
fifth of the simulator's time. Sharing the header dict is safe because layers write headers only
on the send path, before the frame leaves (a layer adds its own header to a message handed down;
Message.with_header copies), and read a received message's headers without changing them: the
same dict object, held in the receiver's window until a gap is filled, costs nothing where a copy
per message cost about 750 instructions and 224 bytes (tests/node/test_fast_paths.py runs a scenario
of every protocol with read-only received headers). The Message itself is new: multicast
layers readdress what they receive (msg.dest).

It splits a frame exactly where node.wire would (the same message groups for frames above the
simulator's max_frame_bytes), so that a run with objects and the same run through the real codec
(`wire: true` in a scenario, `--wire` on the CLI) take the same random draws and write the same
events. Only frames of more than one message can split; only those are measured, by encoding
their messages.
"""

from __future__ import annotations

from splitbrain.node import wire
from splitbrain.node.message import Message

# A received copy is built without Message.__init__ (a Python call through the type, about 750
# instructions a message in CPython 3.11): object.__new__ and the slots set here.
_new = object.__new__


class ObjectCodec:
    """A frame is (src, messages); nothing is encoded unless a frame may need splitting."""

    WireError = wire.WireError  # never raised: nothing is decoded

    @staticmethod
    def encode_frame(src: str, msgs: list[Message]) -> tuple:
        return (src, msgs)

    @staticmethod
    def decode_frame(data: tuple) -> tuple[str, list[Message]]:
        src, msgs = data
        if len(msgs) == 1:  # nearly every frame of a simulation: no loop to set up
            return src, [_received(msgs[0])]
        return src, [_received(m) for m in msgs]

    @staticmethod
    def split_groups(src: str, msgs: list[Message], max_bytes: int) -> list[list[Message]] | None:
        """The groups node.wire.split_into_frames would make of `msgs`, or None when the frame
        fits in max_bytes as it is."""
        # version, flags, two names with their length bytes, count: as split_into_frames counts it
        head = 6 + len(src.encode()) + len(msgs[0].dest.encode())
        sizes = [len(wire.encode_message(m)) for m in msgs]
        if head + sum(sizes) <= max_bytes:
            return None
        groups: list[list[Message]] = []
        batch: list[Message] = []
        size = head
        for msg, n in zip(msgs, sizes, strict=True):
            if batch and size + n > max_bytes:
                groups.append(batch)
                batch, size = [], head
            batch.append(msg)
            size += n
        groups.append(batch)
        return groups


def _received(m: Message) -> Message:
    """The receiver's Message for a sent one: every slot of Message, the header dict shared."""
    copy = _new(Message)
    copy.src = m.src
    copy.dest = m.dest
    copy.payload = m.payload
    copy.headers = m.headers
    copy.known_app = m.known_app
    return copy
