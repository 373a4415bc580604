"""The evidence a failed run (or a reproduced bug) prints under its verdict: what the protocol kept
doing at the end (retransmissions, XMIT-REQs, resync requests per second, per link: a counter still
climbing when the run ends is a liveness bug at work) and the final windows of every pair.

Protocol-neutral: the control traffic is the registry's overhead kinds (node.protocols), the
windows are the `window` events every protocol writes at the end of a run.
"""

from __future__ import annotations

from collections import defaultdict

from splitbrain.node import protocols
from splitbrain.node.events import RUN_VERSION

TAIL_S = 5  # seconds at the end of the run shown per second
MAX_LINES = 8


def evidence_lines(events: list[dict]) -> list[str]:
    """Lines to print under a verdict (at most MAX_LINES for traffic, then the windows)."""
    if not events:
        return []
    end = max(ev["t"] for ev in events)
    kinds = {kind: metric for metric, kind in protocols.overhead_kinds().items() if metric != "acks"}
    # (node, peer, kind) -> [per-second counts over the tail], total
    tail: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0] * TAIL_S)
    total: dict[tuple[str, str, str], int] = defaultdict(int)
    finals: list[dict] = []
    for ev in events:
        kind = ev["kind"]
        if kind in kinds and "peer" in ev:
            key = (ev["node"], ev["peer"], kind)
            n = ev["count"] if ev.get("v") == RUN_VERSION else 1  # a run line: its messages
            total[key] += n
            back = int(end - ev["t"])
            if back < TAIL_S:
                tail[key][TAIL_S - 1 - back] += n
        elif kind == "window" and ev.get("final") and "peer" in ev:
            finals.append(ev)
    lines = []
    climbing = sorted((k for k in total if tail[k][-1] or tail[k][-2]), key=lambda k: -total[k])
    for node, peer, kind in climbing[:MAX_LINES]:
        counts = " ".join(str(n) for n in tail[(node, peer, kind)])
        lines.append(
            f"{node}->{peer} {kind}: {total[(node, peer, kind)]} in all; per second over the last {TAIL_S} s: "
            f"{counts} (still going at the end)"
        )
    for ev in sorted(finals, key=lambda e: (e["node"], e.get("side") or "", e["peer"])):
        side = ev.get("side")
        if side == "send":
            lines.append(
                f"window {ev['node']} send to {ev['peer']}: {_conn(ev)}HA={ev.get('low')} "
                f"HS={ev.get('high')} {ev.get('state') or ''}".rstrip()
            )
        elif side == "recv":
            lines.append(
                f"window {ev['node']} recv from {ev['peer']}: {_conn(ev)}delivered={ev.get('low')} "
                f"received={ev.get('high')} {ev.get('state') or ''}".rstrip()
            )
    return lines


def _conn(window: dict) -> str:
    """ "conn N " for a window with a connection id; nothing for a protocol without them."""
    return "" if window.get("conn_id") is None else f"conn {window['conn_id']} "
