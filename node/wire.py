"""The binary wire format: frames of messages, each with per-protocol headers.

A frame is what one datagram (or one length-prefixed TCP write) carries: messages from one
source to one destination, packed by the bundler.

    frame   := version:u8 flags:u8 src:str8 dest:str8 count:u16 message*count
    message := nhdr:u8 (proto_id:u8 len:u16 body:len)*nhdr payload_len:u32 payload
    str8    := len:u8 utf8

Every length is checked against the bytes actually left before anything is sliced or
allocated, so a hostile length field costs nothing. Decoding any byte string returns a frame or
raises WireError; nothing else escapes. Protocols register their header codec with
`register_header` (UNICAST3 registers id 3).

Hot layouts: a codec may name the one fixed-size header body it sees on most messages (UNICAST3's
and NAKACK2's DATA). A message whose only header has that layout is then encoded and decoded in
one struct call (the message head, the header body and the payload length together) instead of
the generic per-header loop: the same bytes, about a third of the cost per message.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import BadInput
from .message import Message

WIRE_VERSION = 1
MAX_FRAME_BYTES = 65_000  # fits one UDP datagram
MAX_NAME_BYTES = 255
_MIN_MESSAGE_BYTES = 5  # nhdr + payload_len

_U8 = struct.Struct("!B")
_FRAME_HEAD = struct.Struct("!BB")
_COUNT = struct.Struct("!H")
_HDR_HEAD = struct.Struct("!BH")
_PAYLOAD_LEN = struct.Struct("!I")


class WireError(BadInput, ValueError):
    """Raised for any byte string that is not a valid frame."""


@dataclass(frozen=True, slots=True)
class HotLayout:
    """A codec's most frequent header body: fixed size, its first byte a type tag.

    `fields` is the body's struct format after the tag (e.g. "BQI"); `make(*values, payload_len)`
    builds the header from those values (raising WireError for a bad one, e.g. unknown flags;
    the payload length is for the frame codec and ignored); `values` returns
    them for a header of this layout and None for any other header, which then takes the
    codec's own encode. Both must agree with the codec's encode and decode byte for byte."""

    tag: int
    fields: str
    make: Callable[..., Any]
    values: Callable[[Any], tuple[Any, ...] | None]


@dataclass(frozen=True, slots=True)
class HeaderCodec:
    proto_id: int
    header_type: type
    # Any: each codec takes its own header type, which the registry cannot name.
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]  # raises WireError (or struct.error, which is wrapped)
    type_name: Callable[[Any], str]  # message type of a header, e.g. "DATA", "ACK"
    hot: HotLayout | None = None


_CODECS: dict[int, HeaderCodec] = {}
# A message with one header of a hot layout, keyed by its first 5 bytes (nhdr=1, proto_id, body
# length, tag): the struct of what follows up to the payload (the body after the tag and the
# payload length), the header's maker, the protocol id.
_HOT_DECODE: dict[bytes, tuple[struct.Struct, Callable[..., Any], int]] = {}
# proto_id -> (values of a header, struct of the message head up to the payload, body length, tag).
_HOT_ENCODE: dict[int, tuple[Callable[[Any], tuple[Any, ...] | None], struct.Struct, int, int]] = {}


def register_header(codec: HeaderCodec) -> None:
    existing = _CODECS.get(codec.proto_id)
    if existing is not None and existing.header_type is not codec.header_type:
        raise ValueError(f"protocol id {codec.proto_id} is taken by {existing.header_type.__name__}")
    _CODECS[codec.proto_id] = codec
    hot = codec.hot
    if hot is not None:
        body_len = 1 + struct.calcsize("!" + hot.fields)
        key = bytes((1, codec.proto_id)) + body_len.to_bytes(2, "big") + bytes((hot.tag,))
        _HOT_DECODE[key] = (struct.Struct(f"!{hot.fields}I"), hot.make, codec.proto_id)
        _HOT_ENCODE[codec.proto_id] = (hot.values, struct.Struct(f"!BBHB{hot.fields}I"), body_len, hot.tag)


def message_type(msg: Message) -> str:
    """The protocol message type ("DATA", "ACK", ...) of the lowest known header, or "APP"."""
    for proto_id, header in msg.headers.items():
        codec = _CODECS.get(proto_id)
        if codec is not None:
            return codec.type_name(header)
    return "APP"


def _encode_name(name: str) -> bytes:
    raw = name.encode()
    if len(raw) > MAX_NAME_BYTES:
        raise ValueError(f"address too long for the wire: {name!r}")
    return _U8.pack(len(raw)) + raw


def encode_message(msg: Message) -> bytes:
    head = _hot_head(msg)
    if head is not None:
        return head + msg.payload
    parts = [_U8.pack(len(msg.headers))]
    for proto_id, header in msg.headers.items():
        codec = _CODECS.get(proto_id)
        if codec is None:
            raise ValueError(f"no codec registered for protocol id {proto_id}")
        body = codec.encode(header)
        parts.append(_HDR_HEAD.pack(proto_id, len(body)))
        parts.append(body)
    parts.append(_PAYLOAD_LEN.pack(len(msg.payload)))
    parts.append(msg.payload)
    return b"".join(parts)


def _hot_head(msg: Message) -> bytes | None:
    """The bytes of msg before its payload when its only header has a hot layout, else None."""
    headers = msg.headers
    if len(headers) != 1:
        return None
    for proto_id, header in headers.items():
        hot = _HOT_ENCODE.get(proto_id)
        if hot is not None:
            values = hot[0](header)
            if values is not None:
                return hot[1].pack(1, proto_id, hot[2], hot[3], *values, len(msg.payload))
    return None


def encode_frame(src: str, msgs: list[Message], dest: str | None = None) -> bytes:
    """One frame from src to dest (default: the first message's dest)."""
    if not msgs:
        raise ValueError("a frame needs at least one message")
    if len(msgs) > 0xFFFF:
        raise ValueError("too many messages for one frame")
    dest = msgs[0].dest if dest is None else dest
    parts = [_FRAME_HEAD.pack(WIRE_VERSION, 0), _encode_name(src), _encode_name(dest), _COUNT.pack(len(msgs))]
    parts.extend(encode_message(m) for m in msgs)
    return b"".join(parts)


def split_into_frames(
    src: str,
    msgs: list[Message],
    max_bytes: int = MAX_FRAME_BYTES,
    encoded: dict[int, tuple[bytes, bytes]] | None = None,
) -> list[bytes]:
    """Pack messages (all to one dest) into as few frames of at most max_bytes as order allows.

    `encoded`, shared by the calls of one flush to several dests: a message whose headers dict
    and payload are those of a message encoded before (a multicast's copies share both) reuses
    its bytes. Keyed by the headers dict's id, so the caller keeps every message of those calls
    alive (an id is unique only among live objects) and changes none of them in between."""
    frames: list[bytes] = []
    # The current frame's parts: a hot message goes in as its head and its payload, joined once
    # with the frame (not first into a bytes of its own).
    batch: list[bytes] = []
    count = 0
    head = len(_encode_name(src)) + len(_encode_name(msgs[0].dest)) + 4 if msgs else 0
    size = head
    hot_get = _HOT_ENCODE.get
    for msg in msgs:
        payload = msg.payload
        if encoded is not None:
            seen = encoded.get(id(msg.headers))
            if seen is not None and seen[0] is payload:
                parts: tuple[bytes, ...] = (seen[1],)
            else:
                raw = encode_message(msg)
                encoded[id(msg.headers)] = (payload, raw)
                parts = (raw,)
            length = len(parts[0])
        else:
            # _hot_head, inline: one header with a hot layout is nearly every message.
            headers = msg.headers
            parts = ()
            if len(headers) == 1:
                for proto_id, header in headers.items():
                    hot = hot_get(proto_id)
                    if hot is not None:
                        values = hot[0](header)
                        if values is not None:
                            parts = (hot[1].pack(1, proto_id, hot[2], hot[3], *values, len(payload)), payload)
            if parts:
                length = len(parts[0]) + len(payload)
            else:
                parts = (encode_message(msg),)
                length = len(parts[0])
        if count and size + length > max_bytes:
            frames.append(_assemble(src, msgs[0].dest, batch, count))
            batch, size, count = [], head, 0
        batch += parts
        count += 1
        size += length
    if count:
        frames.append(_assemble(src, msgs[0].dest, batch, count))
    return frames


def _assemble(src: str, dest: str, parts: list[bytes], count: int) -> bytes:
    """A frame of `count` encoded messages, given as their bytes in one or more parts each."""
    return b"".join(
        [_FRAME_HEAD.pack(WIRE_VERSION, 0), _encode_name(src), _encode_name(dest), _COUNT.pack(count)] + parts
    )


def decode_frame(data: bytes) -> tuple[str, list[Message]]:
    """Decode one frame into (src, messages). Raises WireError on anything malformed."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    size = len(data)
    try:
        version, _flags = _FRAME_HEAD.unpack_from(data, 0)
        if version != WIRE_VERSION:
            raise WireError(f"unsupported wire version {version}")
        src, pos = _name_at(data, 2)
        dest, pos = _name_at(data, pos)
        (count,) = _COUNT.unpack_from(data, pos)
        pos += 2
    except struct.error as exc:
        raise WireError(f"truncated frame header ({size} bytes)") from exc
    if count == 0:
        raise WireError("frame with no messages")
    if count * _MIN_MESSAGE_BYTES > size - pos:
        raise WireError(f"frame claims {count} messages but has only {size - pos} bytes")
    msgs: list[Message] = []
    append = msgs.append
    hot_get = _HOT_DECODE.get
    new = object.__new__
    left = count
    while left:
        key = data[pos : pos + 5]
        hot = hot_get(key)
        if hot is not None:
            # A run of messages of this hot layout (a frame is nearly always one): the next
            # message has it too when its first 5 bytes are these.
            st, make, proto_id = hot
            unpack = st.unpack_from
            skip = 5 + st.size
            while left and data.startswith(key, pos):
                start = pos + skip
                if start > size:
                    break
                values = unpack(data, pos + 5)
                end = start + values[-1]
                if end > size:
                    break
                # Every slot set here rather than through Message's Python __init__ (a call
                # through the type costs about 700 instructions more in CPython 3.11).
                msg = new(Message)
                msg.src = src
                msg.dest = dest
                msg.payload = data[start:end]
                msg.headers = {proto_id: make(*values)}
                msg.known_app = None
                append(msg)
                pos = end
                left -= 1
            else:
                continue
        # Any other message, and a hot one cut short (the generic path names what is missing).
        msg, pos = _message_at(data, pos, size, src, dest)
        append(msg)
        left -= 1
    if pos != size:
        raise WireError(f"{size - pos} trailing bytes after the last message")
    return src, msgs


def _name_at(data: bytes, pos: int) -> tuple[str, int]:
    if pos >= len(data):
        raise WireError(f"truncated: address expected at offset {pos}")
    n = data[pos]
    end = pos + 1 + n
    if end > len(data):
        raise WireError(f"truncated address at offset {pos}")
    try:
        return data[pos + 1 : end].decode(), end
    except UnicodeDecodeError as exc:
        raise WireError(f"address is not UTF-8 at offset {pos}") from exc


def _message_at(data: bytes, pos: int, size: int, src: str, dest: str) -> tuple[Message, int]:
    """Decode the message at `pos`; every length is checked against `size` before slicing."""
    if pos >= size:
        raise WireError(f"truncated: message expected at offset {pos}")
    nhdr = data[pos]
    pos += 1
    headers = {}
    for _ in range(nhdr):
        if pos + 3 > size:
            raise WireError(f"truncated header at offset {pos}")
        proto_id, length = _HDR_HEAD.unpack_from(data, pos)
        pos += 3
        end = pos + length
        if end > size:
            raise WireError(f"truncated: header of {length} bytes at offset {pos}, have {size - pos}")
        codec = _CODECS.get(proto_id)
        if codec is None:
            raise WireError(f"unknown protocol id {proto_id}")
        if proto_id in headers:
            raise WireError(f"protocol id {proto_id} appears twice in one message")
        try:
            headers[proto_id] = codec.decode(data[pos:end])
        except WireError:
            raise
        except (struct.error, ValueError) as exc:
            raise WireError(f"bad header for protocol id {proto_id}: {exc}") from exc
        pos = end
    if pos + 4 > size:
        raise WireError(f"truncated: payload length expected at offset {pos}")
    (plen,) = _PAYLOAD_LEN.unpack_from(data, pos)
    pos += 4
    end = pos + plen
    if end > size:
        raise WireError(f"truncated: payload of {plen} bytes at offset {pos}, have {size - pos}")
    return Message(src, dest, data[pos:end], headers), end


def readdressed(frame: bytes, dest: str) -> bytes:
    """The same frame addressed to `dest`: an IP multicast frame is encoded once, for "*", and
    each receiver reads it as its own (node/runtime/ipmcast.py). Raises WireError when the bytes
    do not even hold a frame header."""
    size = len(frame)
    if size < 4 or frame[0] != WIRE_VERSION:
        raise WireError("not a frame")
    at = 3 + frame[2]  # past version, flags and src
    if at >= size or at + 1 + frame[at] > size:
        raise WireError("truncated frame header")
    return b"".join((frame[:at], _encode_name(dest), frame[at + 1 + frame[at] :]))
