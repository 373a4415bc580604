"""XMIT-REQ as UNICAST2 and UNICAST3 both have it: its ranges on the wire (a u16 count, then
u64 pairs lo..hi inclusive, at most MAX_XMIT_RANGES), and serving one from a send window, whose
entries keep `ha` (highest seqno acknowledged, so purged) and `hs` (highest seqno sent).

What is asked outside HA+1..HS (purged, or never sent) becomes one drop event per part of a range,
never a loop over what a peer may ask (0..2^64-1); what is inside is resent, at most
`budget` seqnos per request.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from .layer import Action, Log
from .wire import WireError

MAX_XMIT_RANGES = 256
_RANGE_COUNT = struct.Struct("!H")
_RANGE = struct.Struct("!QQ")


def encode_ranges(ranges: tuple[tuple[int, int], ...]) -> bytes:
    if len(ranges) > MAX_XMIT_RANGES:
        raise ValueError(f"XMIT-REQ with {len(ranges)} ranges (max {MAX_XMIT_RANGES})")
    return _RANGE_COUNT.pack(len(ranges)) + b"".join(_RANGE.pack(lo, hi) for lo, hi in ranges)


def decode_ranges(body: bytes, end: int) -> tuple[tuple[tuple[int, int], ...], int]:
    """The ranges of an XMIT-REQ whose range count starts at `end`, and where they end."""
    if len(body) < end + _RANGE_COUNT.size:
        raise WireError("XMIT-REQ without range count")
    (n,) = _RANGE_COUNT.unpack_from(body, end)
    end += _RANGE_COUNT.size
    if n > MAX_XMIT_RANGES or len(body) < end + n * _RANGE.size:
        raise WireError(f"XMIT-REQ claims {n} ranges")
    ranges = tuple(_RANGE.unpack_from(body, end + i * _RANGE.size) for i in range(n))
    if any(lo > hi for lo, hi in ranges):
        raise WireError("XMIT-REQ with an empty range")
    return ranges, end + n * _RANGE.size


class SendWindow(Protocol):
    @property
    def conn_id(self) -> int: ...
    @property
    def ha(self) -> int: ...
    @property
    def hs(self) -> int: ...


def serve_xmit_req(
    log: Callable[..., Log],
    resend: Callable[[Any, int, float, str], list[Action]],
    src: str,
    entry: SendWindow,
    ranges: Iterable[tuple[int, int]],
    budget: int,
    now: float,
    out: list[Action],
    half_open: bool = False,
) -> None:
    """Append to `out` the drops and resends that answer `ranges` from `src`; `log` and `resend`
    are the layer's own (`_log`, `_resend(entry, seqno, now, why)`). `half_open` reads every range
    as if its last seqno were excluded (a planted bug: that seqno is never resent)."""
    for lo, hi in ranges:
        if half_open:
            hi -= 1
        for out_lo, out_hi in ((lo, min(hi, entry.ha, lo + budget - 1)), (max(lo, entry.hs + 1), hi)):
            if out_lo <= out_hi:
                out.append(
                    log(
                        now,
                        "drop",
                        peer=src,
                        seqno=out_lo,
                        conn_id=entry.conn_id,
                        type="XMIT_REQ",
                        ranges=[[out_lo, out_hi]],
                        reason="requested seqno not in send window",
                    )
                )
        for seqno in range(max(lo, entry.ha + 1), min(hi, entry.hs, lo + budget - 1) + 1):
            out.extend(resend(entry, seqno, now, "xmit_req"))
        budget -= hi - lo + 1
        if budget <= 0:
            break
