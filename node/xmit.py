"""Serving an XMIT-REQ from a send window: shared by UNICAST2 and UNICAST3, whose send entries
both keep `ha` (highest seqno acknowledged, so purged) and `hs` (highest seqno sent).

What is asked outside HA+1..HS (purged, or never sent) becomes one drop event per part of a range,
never a loop over what a peer may ask (0..2^64-1); what is inside is resent, at most
`budget` seqnos per request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from .layer import Action, Log


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
