"""The run's timeline as the checks interpret it: node lives (starts, stops, incarnations), which
pairs of nodes were up and connected when (lifecycles and the harness's fault timeline), which
nodes are paused, heals, the run's end, and the discards of a receiver's window.

Discards: the receiver R's window for sender S is discarded when R (re)starts, or when R logs its
receive window for S CLOSED for one of the reasons its protocol's spec lists
(`ProtocolSpec.discard_reasons`: a CLOSE received, reaped after leaving the view or idling). A
window the protocol replaced by itself is no discard.
"""

from __future__ import annotations

from dataclasses import dataclass

from .events import HARNESS, is_harness

LIFECYCLE = ("node_start", "node_stop")
# The node_stop reason of a node stopped gracefully at the end of a live run (node/runtime).
GRACEFUL_STOP = "stop"
CLOSED = "CLOSED"


def discard_reasons(proto: str) -> frozenset[str]:
    """The reasons of a receive window's move to CLOSED that discard it for real, as the protocol's
    spec lists them (none for a protocol not registered here)."""
    from splitbrain.node import protocols

    try:
        return protocols.get(proto).discard_reasons
    except ValueError:
        return frozenset()


def discards_window(ev: dict) -> bool:
    """Does this conn_state event discard the receiver's window for its peer (see above)?"""
    return ev.get("side") == "recv" and ev.get("state") == CLOSED and ev.get("reason") in discard_reasons(ev["proto"])


class Lives:
    """Each node's incarnation, number of starts and last lifecycle event, as the log is walked."""

    def __init__(self) -> None:
        self.incarnation: dict[str, int] = {}
        self.starts: dict[str, int] = {}
        self.last: dict[str, str] = {}
        self.last_reason: dict[str, str | None] = {}

    def observe(self, ev: dict) -> None:
        node, kind = ev["node"], ev["kind"]
        if kind == "node_start":
            # A start without an incarnation field still has to open a new epoch.
            self.incarnation[node] = ev.get("incarnation", self.incarnation.get(node, -1) + 1)
            self.starts[node] = self.starts.get(node, 0) + 1
        self.last[node] = kind
        self.last_reason[node] = ev.get("reason")

    def incarnation_of(self, node: str) -> int:
        return self.incarnation.get(node, 0)

    def dead(self, node: str) -> bool:
        """True when the node's last lifecycle event is a stop (a node never seen is not dead).

        A graceful stop (reason "stop": a live backend stopping its nodes when the run is over,
        after their final window snapshots) is the end of the run, not a death."""
        return self.last.get(node) == "node_stop" and self.last_reason.get(node) != GRACEFUL_STOP


@dataclass
class Life:
    start: float
    end: float | None = None
    graceful: bool = False


# The end of an interval that lasts to the end of the run.
OPEN = float("inf")


class Connectivity:
    """When each pair of nodes was up and connected, from lifecycles and the fault timeline.

    An interval still open at the end of the run (or ended by the graceful stop that ends a live
    run) has no end: a message sent in it is owed however late, because what is sent before the end
    must be delivered by the end (that budget is the scenario's `settle`, not the recovery bound).

    A node's lives are numbered by its starts (0 for a node whose log shows no start). A pair
    (X, Y) is connected while both are alive and no fault cuts X->Y or Y->X: recovery needs both
    directions (acks, retransmission requests and resync travel back). Faults say which directed
    links they cut in their `links` field (a partition, a pause, total loss, an unbounded drop)."""

    def __init__(self) -> None:
        self.lives: dict[str, list[Life]] = {}
        # The change points, in log order: (t, node or link, what).
        self._changes: list[tuple[float, object, str]] = []
        # Every node with an event (no_loss adds those of sends and deliveries itself: see observe).
        self.nodes: set[str] = set()
        self._intervals: dict[tuple[str, str], list[tuple[float, float, int, int]]] = {}
        self._excuses: dict[tuple[str, str, int], str] = {}

    def observe(self, ev: dict) -> None:
        """Take the next event of the sorted log; `close` after the last one."""
        kind, node = ev["kind"], ev["node"]
        if kind in LIFECYCLE:
            graceful = kind == "node_stop" and ev.get("reason") == GRACEFUL_STOP
            self._changes.append((ev["t"], node, "graceful_stop" if graceful else kind))
            lives = self.lives.setdefault(node, [])
            if kind == "node_start":
                lives.append(Life(ev["t"]))
            elif lives and lives[-1].end is None:
                lives[-1].end, lives[-1].graceful = ev["t"], ev.get("reason") == GRACEFUL_STOP
            elif not lives:
                # A stop before any start: the node was up from the beginning.
                lives.append(Life(float("-inf"), ev["t"], ev.get("reason") == GRACEFUL_STOP))
        elif kind in ("fault_on", "fault_off") and is_harness(ev):
            for link in ev.get("links") or ():
                src, _, dst = link.partition("->")
                self._changes.append((ev["t"], (src, dst), "cut" if kind == "fault_on" else "uncut"))
        elif node != HARNESS:
            self.nodes.add(node)

    def close(self) -> None:
        """The log is over: a node whose log shows no start was up from the beginning."""
        for node in self.nodes:
            self.lives.setdefault(node, [Life(float("-inf"))])

    def intervals(self, x: str, y: str) -> list[tuple[float, float, int, int]]:
        """Maximal intervals (start, end, life of x, life of y) during which x and y are connected."""
        cached = self._intervals.get((x, y))
        if cached is None:
            cached = self._sweep(x, y)
            self._intervals[(x, y)] = cached
            self._intervals[(y, x)] = [(a, b, ly, lx) for a, b, lx, ly in cached]
        return cached

    def _sweep(self, x: str, y: str) -> list[tuple[float, float, int, int]]:
        alive, life, cuts = {}, {}, {(x, y): 0, (y, x): 0}
        for n in (x, y):
            lives = self.lives.get(n, [])
            alive[n] = bool(lives) and lives[0].start == float("-inf")
            life[n] = 0
        out: list[tuple[float, float, int, int]] = []
        since: float | None = float("-inf") if alive[x] and alive[y] else None
        for t, who, what in self._changes:
            if what in ("cut", "uncut"):
                if who not in cuts:
                    continue
                cuts[who] = cuts[who] + 1 if what == "cut" else max(0, cuts[who] - 1)
            elif who in alive:
                if since is not None:
                    # Any start or stop of either ends the interval (a restart is a new life);
                    # a graceful stop is the end of the run, whose budget is the settle time.
                    out.append((since, OPEN if what == "graceful_stop" else t, life[x], life[y]))
                    since = None
                if what == "node_start":
                    life[who] += 1
                alive[who] = what == "node_start"
            else:
                continue
            connected = alive[x] and alive[y] and not cuts[(x, y)] and not cuts[(y, x)]
            if connected and since is None:
                since = t
            elif not connected and since is not None:
                out.append((since, t, life[x], life[y]))
                since = None
        if since is not None:
            out.append((since, OPEN, life[x], life[y]))
        return [iv for iv in out if iv[1] > iv[0]]

    def owed_until(self, sender: str, receiver: str, bound: float) -> dict[int, float]:
        """Per life of the sender, the latest send time of a message that is owed: one with at
        least `bound` of connection after it, within that life of the sender."""
        out: dict[int, float] = {}
        for a, b, life_s, _life_r in self.intervals(sender, receiver):
            if b - a >= bound:
                out[life_s] = max(out.get(life_s, float("-inf")), b - bound)
        return out

    def excuse(self, sender: str, receiver: str, life_s: int) -> str:
        """Why a message sent in the sender's life `life_s` was not owed (one of EXCUSES)."""
        key = (sender, receiver, life_s)
        why = self._excuses.get(key)
        if why is None:
            why = self._excuses[key] = self._excuse(sender, receiver, life_s)
        return why

    def _excuse(self, sender: str, receiver: str, life_s: int) -> str:
        lives = self.lives.get(sender, ())
        index = life_s - (0 if lives and lives[0].start == float("-inf") else 1)
        if 0 <= index < len(lives):
            life = lives[index]
            if life.end is not None and not life.graceful:
                return "sender_lost_window"
        rlives = self.lives.get(receiver, ())
        if rlives and rlives[-1].end is not None and not rlives[-1].graceful:
            return "receiver_dead"
        ivs = self.intervals(sender, receiver)
        if not ivs or ivs[-1][1] != OPEN:
            return "cut_at_end"
        return "too_little_time"


def pause_target(ev: dict) -> str | None:
    """The node a harness `pause` fault_on / fault_off is about: the endpoint every link it names
    shares (a pause cuts every link to and from its node), the detail's "pause X" / "resume X"
    telling the two ends of a two-node cluster apart."""
    ends = None
    for link in ev.get("links") or ():
        src, _, dst = link.partition("->")
        ends = {src, dst} if ends is None else ends & {src, dst}
    if not ends:
        return None
    if len(ends) == 1:
        return next(iter(ends))
    words = str(ev.get("detail") or "").replace("(", " ").split()
    named = [w for before, w in zip(words, words[1:]) if before in ("pause", "resume") and w in ends]
    return named[0] if named else None


class Pauses:
    """Which nodes are paused (frozen) as the log is walked: a pause's fault_on until its fault_off
    (a resume or a heal) or the node's next start or stop."""

    def __init__(self) -> None:
        self.paused: dict[str, float] = {}  # node -> paused since

    def observe(self, ev: dict) -> None:
        kind = ev["kind"]
        if kind in LIFECYCLE:
            self.paused.pop(ev["node"], None)
        elif kind in ("fault_on", "fault_off") and ev.get("fault") == "pause" and is_harness(ev):
            node = pause_target(ev)
            if node is None:
                return
            if kind == "fault_on":
                self.paused.setdefault(node, ev["t"])
            else:
                self.paused.pop(node, None)


def is_heal(ev: dict) -> bool:
    """A heal in the harness timeline: any fault_off, or a fault_on of the "heal" fault."""
    if not is_harness(ev):
        return False
    return ev["kind"] == "fault_off" or (ev["kind"] == "fault_on" and ev.get("fault") == "heal")


def run_end(events: list[dict]) -> float | None:
    """When the run ended for the nodes: the first graceful stop that is some node's last lifecycle
    event (a live backend stops every node gracefully when the run is over), or None when no node
    stopped that way (the simulator: the log's end is the run's end). What nodes do after it (a
    leave on SIGTERM) belongs to the teardown."""
    last: dict[str, dict] = {}
    for ev in events:
        if ev["kind"] in LIFECYCLE:
            last[ev["node"]] = ev
    ends = [ev["t"] for ev in last.values() if ev["kind"] == "node_stop" and ev.get("reason") == GRACEFUL_STOP]
    return min(ends, default=None)
