"""no_duplicates: an app id is delivered once per receiver.

A second delivery is excused only when the receiver's window for that sender was discarded after
the first delivery AND the sender had not seen the message acked when it came again (see
redeliveries.py). Excused redeliveries are counted with their cause.
"""

from __future__ import annotations

from bisect import bisect_right, insort

from .checker import Check, CheckContext
from .events import sender_of
from .redeliveries import REDELIVERY_CAUSES, Redeliveries
from .results import FIRST_FEW, CheckResult, fmt_t, only_loopback, vacuous_result
from .timeline import OPEN


class NoDuplicates(Check):
    """Each app id is delivered once per receiver, unless excused by a discard of an unacked one."""

    name = "no_duplicates"

    def __init__(self, ctx: CheckContext) -> None:
        super().__init__(ctx)
        self.walk = ctx.shared(Redeliveries)
        # (receiver, sender, app) -> (epoch of the latest delivery, t of the first)
        self.seen: dict[tuple, tuple[tuple[int, int], float]] = {}
        # What deliver run lines delivered first: (receiver, sender, "S:K") -> sorted intervals
        # (n0, n1, epoch, t) that never overlap; `seen` holds what single lines did (and any later
        # epoch of a redelivered app id), for the pairs in _in_dict.
        self.seen_runs: dict[tuple[str, str, str], list[tuple[int, int, tuple[int, int], float]]] = {}
        self._in_dict: set[tuple[str, str]] = set()
        self.duplicates: list[dict] = []
        self.causes = dict.fromkeys(REDELIVERY_CAUSES, 0)
        self.count = self.delivered = self.loopback = 0

    def result(self) -> CheckResult:
        return no_duplicates_result(self.delivered, self.count, self.duplicates, self.causes, self.loopback)

    def see_deliver(self, ev: dict) -> None:
        if "app" not in ev:
            return
        self.delivered += 1
        receiver, app = ev["node"], ev["app"]
        sender = sender_of(ev)
        if receiver == sender:
            self.loopback += 1
        epoch = self.walk.epoch(receiver, sender)
        key = (receiver, sender, app)
        prev = self.seen.get(key)
        if prev is None and self.seen_runs:
            prev = self._in_runs(key)
        if prev is None:
            self.seen[key] = (epoch, ev["t"])
            self._in_dict.add((receiver, sender))
            return
        self._again(key, prev, epoch, ev["t"], ev.get("conn_id"))

    def see_deliver_run(self, run: dict) -> None:
        """see_deliver() for each message of a deliver run line (node/events.py), in order: what was not
        delivered before is kept as one interval per run (seen_runs), not one entry per message."""
        count, receiver, t = run["count"], run["node"], run["t"]
        self.delivered += count
        prefix, _, raw_n = run["app"].rpartition(":")
        n0 = int(raw_n)
        n1 = n0 + count - 1
        sender = run.get("peer") or prefix.rpartition(":")[0]
        if receiver == sender:
            self.loopback += count
        epoch = self.walk.epoch(receiver, sender)
        intervals = self.seen_runs.setdefault((receiver, sender, prefix), [])
        if (receiver, sender) not in self._in_dict and (not intervals or intervals[-1][1] < n0):
            intervals.append((n0, n1, epoch, t))  # nothing of it delivered before: the usual case
            return
        fresh: list[tuple[int, int, tuple[int, int], float]] = []
        start = None  # the first n of the current stretch never delivered before
        for n in range(n0, n1 + 1):
            key = (receiver, sender, f"{prefix}:{n}")
            prev = self.seen.get(key)
            if prev is None:
                prev = _interval_at(intervals, n)
            if prev is None:
                if start is None:
                    start = n
                continue
            if start is not None:
                fresh.append((start, n - 1, epoch, t))
                start = None
            self._again(key, prev, epoch, t, run.get("conn_id"))
        if start is not None:
            fresh.append((start, n1, epoch, t))
        for interval in fresh:
            insort(intervals, interval)

    def _in_runs(self, key: tuple[str, str, str]) -> tuple[tuple[int, int], float] | None:
        """(epoch, t) of the first delivery of an app id, if a run line delivered it."""
        receiver, sender, app = key
        prefix, _, raw_n = app.rpartition(":")
        intervals = self.seen_runs.get((receiver, sender, prefix))
        if not intervals or not raw_n.isdigit():
            return None
        return _interval_at(intervals, int(raw_n))

    def _again(
        self, key: tuple[str, str, str], prev: tuple[tuple[int, int], float], epoch: tuple[int, int], t: float, conn_id
    ) -> None:
        """An app id delivered before (`prev`: the epoch of its latest delivery, the time of its first)."""
        walk, duplicates = self.walk, self.duplicates
        receiver, sender, app = key
        discarded = prev[0] != epoch
        acked = walk.acked(sender, receiver, app, t)
        if discarded and not acked:
            self.causes[walk.cause(prev[0], epoch)] += 1
            self.seen[key] = (epoch, prev[1])  # read before seen_runs: the latest delivery's epoch
            self._in_dict.add((receiver, sender))
            return
        self.count += 1
        if len(duplicates) < FIRST_FEW:
            why = (
                "its window was discarded in between, but the sender had seen it acked"
                if discarded
                else "no discard of its window in between"
            )
            duplicates.append(
                {
                    "receiver": receiver,
                    "incarnation": walk.lives.incarnation_of(receiver),
                    "sender": sender,
                    "conn_id": conn_id,
                    "app": app,
                    "first_t": prev[1],
                    "t": t,
                    "why": why,
                }
            )


def _interval_at(
    intervals: list[tuple[int, int, tuple[int, int], float]], n: int
) -> tuple[tuple[int, int], float] | None:
    """(epoch, t) of the interval (n0, n1, epoch, t) holding n, in a list sorted by n0 of
    intervals that do not overlap; None when none holds it."""
    i = bisect_right(intervals, (n, OPEN)) - 1
    if i >= 0 and intervals[i][1] >= n:
        return intervals[i][2], intervals[i][3]
    return None


def no_duplicates_result(
    delivered: int, count: int, duplicates: list[dict], causes: dict, loopback: int = 0
) -> CheckResult:
    """no_duplicates' verdict from its tallies (`loopback`: the deliveries of a sender's own multicasts)."""
    redelivered = sum(causes.values())
    details = {
        "deliveries": delivered,
        "duplicates": count,
        "first": duplicates,
        "redelivered_after_reset": redelivered,
        "redelivered_by_cause": causes,
    }
    if loopback:
        details["loopback"] = loopback
    if not delivered:
        return vacuous_result("no_duplicates", "no delivery with an application id", details)
    if not count and only_loopback(delivered, loopback):
        return vacuous_result("no_duplicates", str(only_loopback(delivered, loopback)), details)
    if not count:
        explanation = f"no duplicates among {delivered} deliveries"
        if redelivered:
            why = ", ".join(f"{n} {cause.replace('_', ' ')}" for cause, n in causes.items() if n)
            explanation += (
                f" ({redelivered} unacked app id(s) legitimately redelivered after the receiver "
                f"discarded its window: {why})"
            )
        return CheckResult("no_duplicates", True, explanation, details, judged=delivered)
    d = duplicates[0]
    explanation = (
        f"receiver {d['receiver']} (incarnation {d['incarnation']}) delivered {d['app']} from "
        f"{d['sender']} twice, at {fmt_t(d['first_t'])} and {fmt_t(d['t'])} ({d['why']}); "
        f"{count} duplicate delivery(ies) in total"
    )
    return CheckResult("no_duplicates", False, explanation, details, judged=delivered)
