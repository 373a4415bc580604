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
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


class WireError(ValueError):
    """Raised for any byte string that is not a valid frame."""


@dataclass(frozen=True, slots=True)
class HeaderCodec:
    proto_id: int
    header_type: type
    # Any: each codec takes its own header type, which the registry cannot name.
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]  # raises WireError (or struct.error, which is wrapped)
    type_name: Callable[[Any], str]  # message type of a header, e.g. "DATA", "ACK"


_CODECS: dict[int, HeaderCodec] = {}


def register_header(codec: HeaderCodec) -> None:
    existing = _CODECS.get(codec.proto_id)
    if existing is not None and existing.header_type is not codec.header_type:
        raise ValueError(f"protocol id {codec.proto_id} is taken by {existing.header_type.__name__}")
    _CODECS[codec.proto_id] = codec


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


def split_into_frames(src: str, msgs: list[Message], max_bytes: int = MAX_FRAME_BYTES) -> list[bytes]:
    """Pack messages (all to one dest) into as few frames of at most max_bytes as order allows."""
    frames: list[bytes] = []
    batch: list[bytes] = []
    head = len(_encode_name(src)) + len(_encode_name(msgs[0].dest)) + 4 if msgs else 0
    size = head
    for msg in msgs:
        raw = encode_message(msg)
        if batch and size + len(raw) > max_bytes:
            frames.append(_assemble(src, msgs[0].dest, batch))
            batch, size = [], head
        batch.append(raw)
        size += len(raw)
    if batch:
        frames.append(_assemble(src, msgs[0].dest, batch))
    return frames


def _assemble(src: str, dest: str, encoded: list[bytes]) -> bytes:
    return b"".join(
        [_FRAME_HEAD.pack(WIRE_VERSION, 0), _encode_name(src), _encode_name(dest), _COUNT.pack(len(encoded))] + encoded
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
    msgs = []
    for _ in range(count):
        msg, pos = _message_at(data, pos, size, src, dest)
        msgs.append(msg)
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
