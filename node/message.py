"""Messages as they travel through a stack, and the application payload convention.

A message carries one header per protocol layer (keyed by the layer's wire id, like JGroups'
header map) and an opaque payload. Payloads produced by the workload start with an application
id (sender, stream, n) so that checkers can verify order and completeness without trusting
protocol seqnos; `Message.app` reads it back. Whoever builds a workload payload from its app id may
hand the id to the message too (`known_app`, see `workload_message`), so that the layers logging
it (a send event, a deliver event) and the simulator's copies need not read it out of the bytes.
"""

from __future__ import annotations

from typing import Any

# The destination of a multicast to the sender's current view. A multicast layer (NAKACK2) turns
# one message to MCAST_DEST into what its transport needs (N unicasts, one per member) and hands
# what it delivers up with this dest, so the layers above know a multicast from a unicast.
MCAST_DEST = "*"

# Magic prefix of a workload payload: b"SB" + length of the app id.
_APP_MAGIC = b"SB"
_MAGIC_0, _MAGIC_1 = _APP_MAGIC  # its two bytes as ints, for app_id_of
MAX_APP_ID_BYTES = 255
# The magic and the length byte of an app id of each possible length (the daemon's stream builds
# its payloads from them too: node.runtime.workload.make_payloads).
APP_HEADS = [_APP_MAGIC + bytes((length,)) for length in range(MAX_APP_ID_BYTES + 1)]
_new = object.__new__


class Message:
    """One message: source and destination addresses, per-layer headers, payload bytes.

    `known_app`: the payload's app id (what app_id_of(payload) gives) when the message's builder
    knew it, else None; a payload never changes, so copies keep it. Read the id as
    `msg.known_app or app_id_of(msg.payload)` (or `msg.app`): the bytes are decoded only when the
    builder did not say (every message a real transport decodes)."""

    __slots__ = ("src", "dest", "payload", "headers", "known_app")

    def __init__(
        self,
        src: str,
        dest: str,
        payload: bytes = b"",
        headers: dict[int, Any] | None = None,
        known_app: str | None = None,
    ):
        self.src = src
        self.dest = dest
        self.payload = payload
        self.headers = headers if headers is not None else {}
        self.known_app = known_app

    def with_header(self, proto_id: int, header: Any) -> Message:
        """A copy with one more (or a replaced) header; the original is left untouched."""
        headers = dict(self.headers)
        headers[proto_id] = header
        return Message(self.src, self.dest, self.payload, headers, self.known_app)

    def copy(self) -> Message:
        return Message(self.src, self.dest, self.payload, dict(self.headers), self.known_app)

    @property
    def app(self) -> str | None:
        return self.known_app or app_id_of(self.payload)

    def __repr__(self) -> str:
        return f"Message({self.src}->{self.dest} {self.headers!r} {len(self.payload)}B)"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Message)
            and self.src == other.src
            and self.dest == other.dest
            and self.payload == other.payload
            and self.headers == other.headers
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, so unhashable (the typeshed says callable)


def app_payload(sender: str, stream: int, n: int, size: int = 0) -> bytes:
    """A workload payload: the app id "sender:stream:n", padded with zeros to `size` bytes."""
    app = f"{sender}:{stream}:{n}".encode()
    length = len(app)
    if length > MAX_APP_ID_BYTES:
        raise ValueError(f"app id too long: {length} bytes")
    # A ready-made head and at most two concatenations: the simulator builds one per message sent,
    # and bytes formatting (b"SB%c%s" % ...) is a large function for the CPU's instruction cache.
    head = APP_HEADS[length] + app
    pad = size - len(head)
    return head + bytes(pad) if pad > 0 else head


def workload_message(sender: str, dest: str, stream: int, n: int, size: int = 0) -> Message:
    """Message(sender, dest, app_payload(sender, stream, n, size)) that knows its app id
    (`known_app`), for a simulated workload: one built per message sent."""
    # app_payload's steps (it stays one function: the speed benchmark's ceiling loop calls it).
    app = f"{sender}:{stream}:{n}"
    raw = app.encode()
    length = len(raw)
    if length > MAX_APP_ID_BYTES:
        raise ValueError(f"app id too long: {length} bytes")
    head = APP_HEADS[length] + raw
    pad = size - len(head)
    # Every slot set here instead of a call of Message (a Python __init__ called through the
    # type: about 700 instructions more in CPython 3.11).
    msg = _new(Message)
    msg.src = sender
    msg.dest = dest
    msg.payload = head + bytes(pad) if pad > 0 else head
    msg.headers = {}
    msg.known_app = app
    return msg


def app_id_of(payload: bytes) -> str | None:
    """The app id embedded by `app_payload`, or None for any other payload."""
    # Read twice per message in the simulator (send and deliver events): the fewest steps, and
    # the magic compared byte by byte, which makes no object as a slice would.
    try:
        if payload[0] != _MAGIC_0 or payload[1] != _MAGIC_1:
            return None
        end = 3 + payload[2]
    except IndexError:  # shorter than the magic and the length byte
        return None
    if len(payload) < end:
        return None
    try:
        return payload[3:end].decode()
    except UnicodeDecodeError:
        return None


def parse_app_id(app: str) -> tuple[str, int, int]:
    """Split "sender:stream:n" into its parts (sender names may not contain ':')."""
    sender, stream, n = app.rsplit(":", 2)
    return sender, int(stream), int(n)
