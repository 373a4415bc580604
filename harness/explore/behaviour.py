"""What a run did, abstracted into a set of behaviours (the guided search's feedback).

A behaviour is a short string; a run's behaviours are a set, and the explorer keeps the union over
every run it made. The abstraction (docs/explore.md says why it fits reliable delivery):

- per directed link, the 3-grams of the protocol events one node logged about one peer, in time
  order, with runs of the same kind collapsed to one (a stream of 200 ACKs is one `ack_tx`):
  `k|A>B|ack_rx,sync_rx,deliver`;
- per link and window side, the connection state transitions with their reason:
  `w|A>B|recv|OPEN>CLOSING:view`;
- the views each node installed: `v|B|A,B` (an injected view and the protocol's own);
- how close the run came to failing: per link, the longest a delivered message took, in powers of
  two of 100 ms (`late|A>B|3` = 0.8-1.6 s), and the number of retransmissions in powers of two;
- each check's verdict: `c|no_loss|passed`.

Node names stay in: with a handful of nodes the set stays small, and which side of a link did
something is what tells a resync from its mirror image.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

NGRAM = 3
# Kinds that say nothing about the protocol's state (the harness's own timeline).
_SKIP = frozenset({"fault_on", "fault_off", "window"})


def behaviours(events: Iterable[dict], verdicts: Iterable[tuple[str, str]] = ()) -> frozenset[str]:
    """The behaviours of one run's events (any order: they are sorted by time here)."""
    out: set[str] = set()
    per_link: dict[str, list[str]] = {}
    sent_at: dict[tuple[str, str], float] = {}
    late: dict[str, float] = {}
    resent: dict[str, int] = {}
    for ev in sorted(events, key=lambda e: e["t"]):
        kind = ev["kind"]
        if kind in _SKIP or ev.get("proto") == "harness":
            continue
        node = ev["node"]
        peer = ev.get("peer")
        if kind == "view":
            out.add(f"v|{node}|{','.join(ev.get('members') or ())}")
            continue
        if kind in ("node_start", "node_stop"):
            out.add(f"n|{kind}|{ev.get('reason', '')}")
            continue
        link = f"{node}>{peer}" if peer else f"{node}>*"
        seq = per_link.setdefault(link, [])
        if not seq or seq[-1] != kind:
            seq.append(kind)
        if kind == "conn_state":
            out.add(f"w|{link}|{ev.get('side')}|{ev.get('state')}:{ev.get('reason', '')}")
        app = ev.get("app")
        if kind == "send" and app:
            sent_at.setdefault((node, app), ev["t"])
        elif kind == "deliver" and app and peer:
            t0 = sent_at.get((peer, app))
            if t0 is not None:
                key = f"{peer}>{node}"
                late[key] = max(late.get(key, 0.0), ev["t"] - t0)
        elif kind == "retransmit":
            resent[link] = resent.get(link, 0) + 1
    for link, seq in per_link.items():
        for i in range(max(1, len(seq) - NGRAM + 1)):
            out.add(f"k|{link}|{','.join(seq[i : i + NGRAM])}")
    for link, seconds in late.items():
        out.add(f"late|{link}|{_log2_bucket(seconds / 0.1)}")
    for link, n in resent.items():
        out.add(f"rx|{link}|{_log2_bucket(n)}")
    out.update(f"c|{name}|{verdict}" for name, verdict in verdicts)
    return frozenset(out)


def _log2_bucket(x: float) -> int:
    return 0 if x < 1 else int(math.log2(x)) + 1
