"""no_loss: a message sent X->Y is owed once X (in the incarnation that sent it) and Y (in any one
incarnation) have been up and connected for `recovery_bound_s` after it was sent, or are still
connected at the end of the run: both alive, neither paused, and no fault cutting X->Y or Y->X
(the `links` of the timeline's faults). What happens later (a kill, a restart) excuses nothing.
Owed messages must be delivered at Y (any incarnation); the others are excused and counted by
why, the explanation naming the first few of each multicast excuse. A multicast (a `send` with
the sender's view in `members` and no `peer`) is one message to each other member of that view,
owed by the same rule; the sender's own delivery (loopback) never crosses the network and is
not owed (excuse loopback). A member is excused a multicast only when it was really out of
reach for it (excuse left_view): the life of the member the sender's view listed was cut,
paused or dead from less than the recovery bound after the send until the sender dropped it
from its view, or the member dropped the sender (and on until it took the sender back); a view
installed while the two were connected excuses nothing, however brief. A member that joined
later is excused what its join digest starts it above (excuse join_digest: the first `view` of
a member's life, reason join, says in `digest` "S:N" that its table for S starts after seqno N;
a multicast of S numbered N or lower and sent before that view is not owed to it), but never a
multicast S sent after installing a view with the joiner (the joiner's join view or a later
one): that one S addressed to it, whatever a digest says.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator
from itertools import islice

from splitbrain.node.rangeset import RangeSet

from .checker import Check, CheckContext, default_recovery_bound_s
from .events import HARNESS, digest_entries, parse_app, run_span
from .results import FIRST_FEW, LOST_IDS_SHOWN, CheckResult, fmt_t, link_name, vacuous_result
from .timeline import OPEN, Connectivity

# Why a message was not owed (no_loss), in the order they are tested and reported.
EXCUSES = ("sender_lost_window", "receiver_dead", "cut_at_end", "too_little_time")
_EXCUSE_TEXT = {
    "sender_lost_window": "sender died or restarted before it could recover them",
    "receiver_dead": "receiver dead at the end",
    "cut_at_end": "link still cut at the end",
    "too_little_time": "sent less than the recovery bound before a cut or a death",
    "loopback": "the sender's own delivery of its multicast (never on the network, so never lost)",
    "left_view": "multicast to a member out of the sender's reach (cut, paused or dead) from (nearly) the "
    "send until one of the two dropped the other from its view",
    "join_digest": "multicast at or below a joiner's join digest, sent before the sender installed a view "
    "with the joiner",
}
# Why a multicast was not owed to a member, besides EXCUSES (only in runs with multicasts).
MULTICAST_EXCUSES = ("loopback", "left_view", "join_digest")


def _split(app: str) -> tuple[str | None, int]:
    """("origin:stream", n) of an application id in the nodes' form with a canonical n, which a
    range of n stands for exactly; (None, 0) for any other id (kept as it is)."""
    prefix, sep, raw = app.rpartition(":")
    if sep and raw.isascii() and raw.isdigit() and (raw == "0" or raw[0] != "0"):
        return prefix, int(raw)
    return None, 0


class _Sends:
    """Messages a link carried in one life of the sender with consecutive app n from `n0` (one
    stream's, in send order), sent in steps (a run line, or single sends) at `times`, the step
    ending at message `ends[i]` (a count). An app id not in the nodes' form is a run of one,
    kept as `odd`. What a long run costs is a few numbers per step, not an entry per message."""

    __slots__ = ("count", "ends", "life", "n0", "odd", "prefix", "times")

    def __init__(self, prefix: str | None, n0: int, life: int, t: float, count: int, odd: str | None) -> None:
        self.prefix, self.n0, self.life, self.count, self.odd = prefix, n0, life, count, odd
        self.times = array("d", (t,))
        self.ends = array("q", (count,))

    def add(self, t: float, count: int) -> None:
        self.count += count
        if self.times[-1] == t:
            self.ends[-1] = self.count
        else:
            self.times.append(t)
            self.ends.append(self.count)

    def sent_by(self, until: float) -> int:
        """How many of these messages were sent at or before `until`."""
        i = bisect_right(self.times, until)
        return self.ends[i - 1] if i else 0

    def app(self, i: int) -> str:
        return self.odd if self.odd is not None else f"{self.prefix}:{self.n0 + i}"

    def messages(self) -> Iterator[tuple[str, float]]:
        """(app id, time sent) of each message, in order."""
        i = 0
        for t, end in zip(self.times, self.ends):
            while i < end:
                yield self.app(i), t
                i += 1

    def arrived(self, app: str, arrived: RangeSet | None, odd: set[str]) -> bool:
        if self.odd is not None:
            return app in odd
        return arrived is not None and _split(app)[1] in arrived

    def missing(self, owed: int, arrived: RangeSet | None, odd: set[str]) -> list[tuple[int, int]]:
        """The ranges of the first `owed` messages (as offsets from n0) that never arrived."""
        if self.odd is not None:
            return [] if self.odd in odd else [(0, 0)]
        n0 = self.n0
        if arrived is None:
            return [(0, owed - 1)]
        return [(lo - n0, hi - n0) for lo, hi in arrived.missing(n0, n0 + owed - 1)]

    def apps(self, ranges: list[tuple[int, int]]) -> Iterator[str]:
        for lo, hi in ranges:
            for i in range(lo, hi + 1):
                yield self.app(i)


class NoLoss(Check):
    """Every message owed (see the module docstring) is delivered at its receiver."""

    name = "no_loss"
    unit = " owed"

    def __init__(self, ctx: CheckContext) -> None:
        super().__init__(ctx)
        self.bound = default_recovery_bound_s() if ctx.recovery_bound_s is None else ctx.recovery_bound_s
        self.conn = Connectivity()
        # (sender, receiver) -> its sends as runs of consecutive app ids, in send order (_Sends).
        self.sent: dict[tuple[str, str], list[_Sends]] = {}
        # What arrived: (sender, receiver, "origin:stream") -> the app n delivered, as ranges; app
        # ids not in that form, (sender, receiver) -> the ids themselves.
        self.delivered: dict[tuple[str, str, str], RangeSet] = {}
        self.delivered_odd: dict[tuple[str, str], set[str]] = {}
        self.last_deliver_link: dict[tuple[str, str], float] = {}
        self.last_deliver: float | None = None
        self.starts: dict[str, int] = {}  # a node's life is the number of its starts so far
        self.start_times: dict[str, list[float]] = {}
        # Multicast: (sender, member) -> [(app, t_sent, when the sender installed the view it went
        # to)] and each node's views, [(t, members, view_id)].
        self.multicasts: dict[tuple[str, str], list[tuple[str, float, float]]] = defaultdict(list)
        self.views: dict[str, list[tuple[float, frozenset[str], int | None]]] = defaultdict(list)
        self.loopback = 0  # a sender's own multicasts: never on the network, never owed
        # Join digests: the multicasts (sender, member) -> [(t, seqno, app)], and each member's first
        # view after a start: (member, from when, view time, view id, digest), "from when" being the end
        # of its previous life (its start when it had none), so that a multicast sent at the instant of
        # a restart counts, and one its earlier life should have delivered does not.
        self.mseq: dict[tuple[str, str], list[tuple[float, int, str]]] = defaultdict(list)
        self.joins: list[tuple[str, float, float, int | None, list]] = []
        self.fresh: dict[str, float] = {}  # started, no view yet -> from when
        self.stopped: dict[str, float] = {}

    def see_send(self, ev: dict) -> None:
        node = ev["node"]
        if node != HARNESS:  # what Connectivity.observe does with a send
            self.conn.nodes.add(node)
        if "app" not in ev:
            return
        if "peer" in ev:
            self._sent((node, ev["peer"]), ev["app"], ev["t"], self.starts.get(node, 0), 1)
        elif "members" in ev:
            # A multicast: owed to each other member of the sender's view when it was sent, by the
            # same rule as a unicast to that member; the sender's own (loopback) delivery is not owed.
            life = self.starts.get(node, 0)
            for member in ev["members"]:
                if member == node:
                    self.loopback += 1
                    continue
                self._sent((node, member), ev["app"], ev["t"], life, 1)
                self.multicasts[(node, member)].append((ev["app"], ev["t"], self._view_time(node, ev["t"])))
                if "seqno" in ev:
                    self.mseq[(node, member)].append((ev["t"], ev["seqno"], ev["app"]))

    def _view_time(self, sender: str, t: float) -> float:
        """When the sender installed the view a multicast it sends now goes to (`t` without one)."""
        views = self.views.get(sender)
        return views[-1][0] if views else t

    def see_deliver(self, ev: dict) -> None:
        node = ev["node"]
        if node != HARNESS:  # what Connectivity.observe does with a delivery
            self.conn.nodes.add(node)
        if "app" in ev:
            link = (ev.get("peer") or parse_app(ev)[0], node)
            app = ev["app"]
            prefix, n = _split(app)
            if prefix is None:
                self.delivered_odd.setdefault(link, set()).add(app)
            else:
                self._arrived(link, prefix, n, n)
            self.last_deliver_link[link] = self.last_deliver = ev["t"]

    def _arrived(self, link: tuple[str, str], prefix: str, n0: int, n1: int) -> None:
        key = (link[0], link[1], prefix)
        ranges = self.delivered.get(key)
        if ranges is None:
            ranges = self.delivered[key] = RangeSet()
        ranges.add(n0, n1)

    def _sent(self, link: tuple[str, str], app: str, t: float, life: int, count: int) -> None:
        """Count messages sent on a link at t from `app` on (consecutive app n, a run line's)."""
        prefix, n = _split(app)
        runs = self.sent.get(link)
        if runs is None:
            runs = self.sent[link] = []
        elif prefix is not None:
            last = runs[-1]
            if last.prefix == prefix and last.life == life and last.n0 + last.count == n:
                last.add(t, count)
                return
        runs.append(_Sends(prefix, n, life, t, count, app if prefix is None else None))

    def see_send_run(self, run: dict) -> None:
        """A run line of sends: one more step of a run of sends (a multicast run, message by message)."""
        if "peer" not in run:
            super().see_send_run(run)
            return
        node = run["node"]
        if node != HARNESS:
            self.conn.nodes.add(node)
        prefix, n0, _n1 = run_span(run)
        self._sent((node, run["peer"]), f"{prefix}:{n0}", run["t"], self.starts.get(node, 0), run["count"])

    def see_deliver_run(self, run: dict) -> None:
        """A run line of deliveries: one range of app n arrived."""
        node = run["node"]
        if node != HARNESS:
            self.conn.nodes.add(node)
        prefix, n0, n1 = run_span(run)
        link = (run.get("peer") or parse_app(run)[0], node)
        self._arrived(link, prefix, n0, n1)
        self.last_deliver_link[link] = self.last_deliver = run["t"]

    def see_other(self, ev: dict) -> None:
        self.conn.observe(ev)
        kind = ev["kind"]
        if kind == "node_start":
            self.starts[ev["node"]] = self.starts.get(ev["node"], 0) + 1
            self.start_times.setdefault(ev["node"], []).append(ev["t"])
            self.fresh[ev["node"]] = self.stopped.get(ev["node"], ev["t"])
        elif kind == "node_stop":
            self.stopped[ev["node"]] = ev["t"]
            self.fresh.pop(ev["node"], None)
        elif kind == "view" and "members" in ev:
            self.views[ev["node"]].append((ev["t"], frozenset(ev["members"]), ev.get("view_id")))
            since = self.fresh.pop(ev["node"], None)
            if since is not None and ev.get("reason") == "join" and ev.get("digest"):
                self.joins.append((ev["node"], since, ev["t"], ev.get("view_id"), ev["digest"]))

    def result(self) -> CheckResult:
        conn, sent, delivered, recovery_bound_s = self.conn, self.sent, self.delivered, self.bound
        conn.close()
        total = self.loopback
        excused = dict.fromkeys(EXCUSES, 0)
        # The first few messages each excuse covered, so that the explanation names them.
        excused_first: dict[str, list[str]] = defaultdict(list)
        left: set[tuple[str, str, str]] = set()
        before_join: set[tuple[str, str, str]] = set()
        if self.multicasts or self.loopback:
            excused.update(dict.fromkeys(MULTICAST_EXCUSES, 0))
            excused["loopback"] = self.loopback
            left = _left_view(self.multicasts, self.views, self.start_times, conn, recovery_bound_s)
            before_join = _before_join(self.joins, self.mseq, self.views, recovery_bound_s)
        # Per link: count and the first app ids, so a link losing millions stays cheap to report.
        lost_count: dict[tuple[str, str], int] = defaultdict(int)
        lost_first: dict[tuple[str, str], list[str]] = defaultdict(list)

        def excuse(why: str, sender: str, receiver: str, app: str) -> None:
            excused[why] += 1
            if why in MULTICAST_EXCUSES and len(excused_first[why]) < FIRST_FEW:
                excused_first[why].append(f"{link_name(sender, receiver)} {app}")

        def lose(link: tuple[str, str], first: Iterable[str], count: int) -> None:
            lost_count[link] += count
            shown = lost_first[link]
            shown.extend(islice(first, LOST_IDS_SHOWN - len(shown)))

        # The links with a multicast excuse are judged message by message; the others a run of
        # sends at a time: its owed messages are those sent up to the owed time (a prefix of it,
        # sends being in time order), and what of them is missing is what the ranges lack.
        by_message = {(s, r) for s, r, _app in left} | {(s, r) for s, r, _app in before_join}
        for link, runs in sent.items():
            sender, receiver = link
            owed_until = conn.owed_until(sender, receiver, recovery_bound_s)
            odd = self.delivered_odd.get(link, set())
            for sends in runs:
                total += sends.count
                until = owed_until.get(sends.life, float("-inf"))
                arrived = delivered.get((sender, receiver, sends.prefix)) if sends.prefix is not None else None
                if link in by_message:
                    for app, t in sends.messages():
                        if (sender, receiver, app) in left:
                            excuse("left_view", sender, receiver, app)
                        elif (sender, receiver, app) in before_join:
                            excuse("join_digest", sender, receiver, app)
                        elif t > until:
                            excused[conn.excuse(sender, receiver, sends.life)] += 1
                        elif not sends.arrived(app, arrived, odd):
                            lose(link, (app,), 1)
                    continue
                owed = sends.sent_by(until)
                if owed < sends.count:
                    excused[conn.excuse(sender, receiver, sends.life)] += sends.count - owed
                if owed:
                    missing = sends.missing(owed, arrived, odd)
                    count = sum(hi - lo + 1 for lo, hi in missing)
                    if count:
                        lose(link, sends.apps(missing), count)

        lost = {
            link_name(*link): {
                "count": count,
                "first": lost_first[link],
                "last_deliver_t": self.last_deliver_link.get(link),
            }
            for link, count in lost_count.items()
        }
        return no_loss_result(total, excused, self.last_deliver, lost, recovery_bound_s, dict(excused_first))


def _addressed_joiner_at(views: list[tuple[float, frozenset[str], int | None]], joiner: str, since: float, join_id):
    """When the sender installed a view with the joiner in its new life: its first view, after the
    joiner's start, that lists it and is the joiner's join view or a later one (None: never)."""
    for t, members, view_id in views:
        if t < since or joiner not in members:
            continue
        if join_id is None or (view_id is not None and view_id >= join_id):
            return t
    return None


def _before_join(
    joins: list[tuple[str, float, float, int | None, list]],
    mseq: dict[tuple[str, str], list[tuple[float, int, str]]],
    views: dict[str, list[tuple[float, frozenset[str], int | None]]],
    bound: float,
) -> set[tuple[str, str, str]]:
    """(sender, member, app) of the multicasts a joiner's digest puts before it: numbered at or
    below the digest's entry for their sender, sent between the end of the member's previous life
    (or its start) and its join view, and before the sender itself installed a view with the joiner
    (what the sender addressed to a view with the joiner is owed, whatever a digest says). The
    window opens the recovery bound before the previous life ended: a multicast sent that close to
    its end was not owed to that life either (too little time)."""
    out: set[tuple[str, str, str]] = set()
    for member, since, joined, join_id, digest in joins:
        for sender, start in digest_entries(digest):
            sends = mseq.get((sender, member), [])
            addressed = _addressed_joiner_at(views.get(sender, []), member, since, join_id)
            until = joined if addressed is None else min(joined, addressed)
            i = bisect_left(sends, (since - bound,))
            while i < len(sends) and sends[i][0] <= until:
                t, seqno, app = sends[i]
                if seqno <= start and (addressed is None or t < addressed):
                    out.add((sender, member, app))
                i += 1
    return out


def _unreachable_windows(
    sender: str,
    member: str,
    life: int,
    views: dict[str, list[tuple[float, frozenset[str], int | None]]],
    conn: Connectivity,
    bound: float,
) -> list[tuple[float, float]]:
    """The send times (lo, hi] at which a multicast of `sender` to `member` in its life `life` (the
    life the sender's view listed) is not owed because one of the two dropped the other from its
    view while that life of the member was out of the sender's reach (cut, paused, dead, gone):
    for each such view, installed at v, the sends from less than `bound` before they lost touch
    up to v, and, for the member's view, on until the member takes the sender back (it discards
    what a non-member sends). A view installed while the two were connected (a shrink that dropped
    a reachable member) excuses nothing."""
    ivs = [(a, b) for a, b, _ls, lr in conn.intervals(sender, member) if lr == life]
    out = []
    for viewer, other in ((sender, member), (member, sender)):
        mine = views.get(viewer, [])
        for k, (v, members, _view_id) in enumerate(mine):
            if other in members or (k and other not in mine[k - 1][1]):
                continue  # lists it, or dropped it earlier (that view's window covers this one)
            if any(a < v < b for a, b in ivs):
                continue  # reachable when it was dropped: the protocol's choice, not a loss it may have
            out_of_reach_since = max((b for _a, b in ivs if b <= v), default=float("-inf"))
            until = v
            if viewer == member:
                until = next((t for t, ms, _id in mine[k + 1 :] if other in ms), OPEN)
            out.append((out_of_reach_since - bound, until))
    return sorted(out)


def _left_view(
    multicasts: dict[tuple[str, str], list[tuple[str, float, float]]],
    views: dict[str, list[tuple[float, frozenset[str], int | None]]],
    start_times: dict[str, list[float]],
    conn: Connectivity,
    bound: float,
) -> set[tuple[str, str, str]]:
    """(sender, member, app) of the multicasts excused as left_view (see _unreachable_windows):
    views are rare, so a few windows per pair and life of the member, looked up per multicast.
    A multicast goes to the life of the member the sender's view listed when the sender installed
    it (a member restarted since is a new process that view does not know)."""
    out: set[tuple[str, str, str]] = set()
    for (sender, member), msgs in multicasts.items():
        dropped = any(member not in ms for _t, ms, _id in views.get(sender, ())) or any(
            sender not in ms for _t, ms, _id in views.get(member, ())
        )
        if not dropped:
            continue
        by_life: dict[int, list[tuple[float, float]]] = {}
        starts = start_times.get(member, [])
        for app, t, view_t in msgs:
            life = bisect_right(starts, view_t)
            windows = by_life.get(life)
            if windows is None:
                windows = by_life[life] = _unreachable_windows(sender, member, life, views, conn, bound)
            if any(lo < t <= hi for lo, hi in windows):
                out.add((sender, member, app))
    return out


def no_loss_result(
    sent: int,
    excused: dict,
    last_deliver: float | None,
    lost: dict,
    recovery_bound_s: float,
    excused_first: dict | None = None,
) -> CheckResult:
    """no_loss' verdict from its tallies: `lost` maps a link "X->Y" to its count, first app ids and
    last delivery time, in the order to report them; `excused_first` the first few "X->Y app" each
    multicast excuse covered (named in the explanation)."""
    checked = sent - sum(excused.values())
    details: dict = {
        "sent": sent,
        "checked": checked,
        "excused": excused,
        "recovery_bound_s": recovery_bound_s,
        "last_deliver_t": last_deliver,
        "lost": lost,
    }
    if excused_first:
        details["excused_first"] = excused_first

    def named(why: str) -> str:
        first = (excused_first or {}).get(why)
        return f" (rule {why}: {', '.join(first)}{', ...' if len(first) < excused[why] else ''})" if first else ""

    not_owed = "; ".join(f"{n} {_EXCUSE_TEXT[why]}{named(why)}" for why, n in excused.items() if n)
    if not checked:
        nothing = (
            f"none of {sent} sent messages was owed ({not_owed})"
            if sent
            else "no message with an application id was sent"
        )
        return vacuous_result("no_loss", nothing, details)
    if not lost:
        explanation = f"all {checked} owed messages delivered (owed: {recovery_bound_s:g}s of connection after sending)"
        if not_owed:
            explanation += f"; {sent - checked} not owed: {not_owed}"
        return CheckResult("no_loss", True, explanation, details, judged=checked)
    total = sum(info["count"] for info in lost.values())
    parts = [
        f"{name}: {info['count']} never delivered (first {' '.join(info['first'])}; "
        f"last delivery on this link {fmt_t(info['last_deliver_t'])})"
        for name, info in details["lost"].items()
    ]
    explanation = (
        f"{total} of {checked} owed message(s) lost: "
        + "; ".join(parts)
        + f"; last delivery anywhere {fmt_t(last_deliver)}"
    )
    return CheckResult("no_loss", False, explanation, details, judged=checked)
