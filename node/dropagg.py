"""Drop events for bad frames, aggregated per (reason, source) so that a flood cannot fill a disk.

A frame that is malformed or not meant for this node is bad input from the network:
it is counted and logged. Logged one line per frame, a garbage flood writes as fast as it
arrives, so the lines are aggregated here instead:

- the first drop of a key (reason, source) is logged at once, with count=1;
- further drops of that key within the next `interval_s` are only counted; when the window ends
  (`on_timer`) one `drop` event carries their number in `count`, the reason of the last of them
  and the sum of their bytes, and a new window starts, so a steady flood writes one line per key
  per interval;
- a window that ends with nothing counted is forgotten: the next drop of its key logs at once.

The source is a peer name or None; callers pass None for a name the frame merely claims (an
unknown node), so the number of keys is bounded by reasons x (known peers + 1). `flush` logs every
pending count (at node stop), so the counts of a key's events always add up to its drops.

Sans-I/O: time is an argument; the driver calls `on_timer(now)` at `next_deadline()`.
"""

from __future__ import annotations

from typing import Any

from .events import make_event

DROP_INTERVAL_S = 1.0


class _Window:
    __slots__ = ("end", "count", "bytes", "fields")

    def __init__(self, end: float):
        self.end = end
        self.count = 0  # drops counted since the last line of this key
        self.bytes: int | None = None
        self.fields: dict[str, Any] = {}


class DropAggregator:
    """Turns drops of bad frames into at most one `drop` event per key and interval."""

    def __init__(self, node: str, proto: str = "transport", interval_s: float = DROP_INTERVAL_S):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.node = node
        self.proto = proto
        self.interval_s = interval_s
        self._windows: dict[tuple[str, str | None], _Window] = {}

    def drop(
        self, now: float, key: str, peer: str | None, nbytes: int | None = None, **fields: Any
    ) -> dict[str, Any] | None:
        """One dropped frame: the event to log now, or None when it is counted for later."""
        win = self._windows.get((key, peer))
        # A window past its end with a count is still pending (its timer is late): count on.
        if win is None or now >= win.end and not win.count:
            self._windows[(key, peer)] = _Window(now + self.interval_s)
            return make_event(now, self.node, self.proto, "drop", peer=peer, bytes=nbytes, count=1, **fields)
        win.count += 1
        if nbytes is not None:
            win.bytes = (win.bytes or 0) + nbytes
        win.fields = fields
        return None

    def next_deadline(self) -> float | None:
        """When the earliest pending count is due, or None when nothing is pending."""
        return min((w.end for w in self._windows.values() if w.count), default=None)

    def on_timer(self, now: float) -> list[dict[str, Any]]:
        """Log the counts of the windows that ended by `now`; forget the empty ones."""
        out = []
        for (key, peer), win in list(self._windows.items()):
            if win.end > now:
                continue
            if win.count:
                out.append(self._line(now, peer, win))
                self._windows[(key, peer)] = _Window(now + self.interval_s)
            else:
                del self._windows[(key, peer)]
        return out

    def flush(self, now: float) -> list[dict[str, Any]]:
        """Log every pending count and forget all windows (the node stops)."""
        out = [self._line(now, peer, win) for (_key, peer), win in self._windows.items() if win.count]
        self._windows.clear()
        return out

    def _line(self, now: float, peer: str | None, win: _Window) -> dict[str, Any]:
        return make_event(now, self.node, self.proto, "drop", peer=peer, bytes=win.bytes, count=win.count, **win.fields)
