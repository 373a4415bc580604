"""How frames cross the simulated network: as message objects (the default) or as wire bytes.

`ObjectCodec` hands a frame's messages to the receiver as new Message objects (same addresses,
payload, known app id and header objects, a fresh header dict), skipping the encode and decode that made up a
fifth of the simulator's time. Headers are immutable values and every layer adds its own header
by replacing the dict entry, so sharing the header objects is safe; the fresh dict keeps a
receiver's layers from touching the sender's retransmission copy.

It splits a frame exactly where node.wire would (the same message groups for frames above the
simulator's max_frame_bytes), so that a run with objects and the same run through the real codec
(`wire: true` in a scenario, `--wire` on the CLI) take the same random draws and write the same
events. Only frames of more than one message can split; only those are measured, by encoding
their messages.
"""

from __future__ import annotations

from node import wire
from node.message import Message


class ObjectCodec:
    """A frame is (src, messages); nothing is encoded unless a frame may need splitting."""

    class WireError(ValueError):
        pass

    @staticmethod
    def encode_frame(src: str, msgs: list[Message]) -> tuple:
        return (src, msgs)

    @staticmethod
    def decode_frame(data: tuple) -> tuple[str, list[Message]]:
        src, msgs = data
        if len(msgs) == 1:  # nearly every frame of a simulation: no comprehension to set up
            m = msgs[0]
            return src, [Message(m.src, m.dest, m.payload, dict(m.headers), m.known_app)]
        return src, [Message(m.src, m.dest, m.payload, dict(m.headers), m.known_app) for m in msgs]

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
