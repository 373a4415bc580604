"""fifo: per (receiver, sender, stream) the app n of successive deliveries strictly increases.

The sequence starts afresh only where the receiver really discarded its window for that sender
(timeline.discards_window, or a restart of the receiver); a re-key by SYNC on a live window starts
nothing. Multicast deliveries are judged as unicast ones, per (receiver, sender); a check that saw
only loopback deliveries (a sender's own multicasts) judged nothing.
"""

from __future__ import annotations

from .checker import Check, CheckContext
from .events import parse_app, run_span
from .redeliveries import Redeliveries
from .results import FIRST_FEW, CheckResult, fmt_t, only_loopback, vacuous_result


class Fifo(Check):
    """Successive deliveries of one stream carry strictly increasing app n, between discards."""

    name = "fifo"

    def __init__(self, ctx: CheckContext) -> None:
        super().__init__(ctx)
        self.walk = ctx.shared(Redeliveries)
        # (receiver, sender, origin, stream) -> (epoch, highest n delivered in that epoch)
        self.highest: dict[tuple, tuple[tuple[int, int], int]] = {}
        self.violations: list[dict] = []
        self.count = self.delivered = self.loopback = 0

    def result(self) -> CheckResult:
        return fifo_result(self.delivered, self.count, self.violations, self.loopback)

    def see_deliver_run(self, run: dict) -> None:
        """see_deliver for each message of a deliver run line (node/events.py), at once: its app n
        rise by one, so only what it starts at or below the stream's highest n can be out of order."""
        prefix, n0, n1 = run_span(run)
        origin, sep, raw_stream = prefix.rpartition(":")
        if not sep or not raw_stream.lstrip("-").isdigit():
            super().see_deliver_run(run)  # message by message, which names the malformed id
            return
        stream = int(raw_stream)
        walk, highest, violations = self.walk, self.highest, self.violations
        self.delivered += run["count"]
        receiver, sender = run["node"], run.get("peer", origin)
        if receiver == sender:
            self.loopback += run["count"]
        epoch = walk.epoch(receiver, sender)
        key = (receiver, sender, origin, stream)
        prev = highest.get(key)
        if prev is None or prev[0] != epoch or n0 > prev[1]:
            highest[key] = (epoch, n1)
            return
        top = prev[1]
        if n0 < top:
            # Each of n0 .. top-1 comes after top: out of order, as it would be one line at a time.
            below = min(n1, top - 1) - n0 + 1
            self.count += below
            for n in range(n0, n0 + min(below, FIRST_FEW - len(violations))):
                violations.append(
                    {
                        "receiver": receiver,
                        "incarnation": walk.lives.incarnation_of(receiver),
                        "sender": sender,
                        "conn_id": run.get("conn_id"),
                        "stream": stream,
                        "app": f"{prefix}:{n}",
                        "after": f"{origin}:{stream}:{top}",
                        "t": run["t"],
                    }
                )
        if n1 > top:
            highest[key] = (epoch, n1)

    def see_deliver(self, ev: dict) -> None:
        if "app" not in ev:
            return
        walk, highest, violations = self.walk, self.highest, self.violations
        self.delivered += 1
        try:  # node.message.parse_app_id, inlined: once per delivery
            origin, raw_stream, raw_n = ev["app"].rsplit(":", 2)
            stream, n = int(raw_stream), int(raw_n)
        except ValueError:
            origin, stream, n = parse_app(ev)  # raises, naming the event
        receiver, sender = ev["node"], ev.get("peer", origin)
        if receiver == sender:
            self.loopback += 1
        epoch = walk.epoch(receiver, sender)
        key = (receiver, sender, origin, stream)
        prev = highest.get(key)
        if prev is None or prev[0] != epoch or n > prev[1]:
            highest[key] = (epoch, n)
        elif n < prev[1]:
            # Compare with the highest n so far, so 5,3,4 reports both 3 and 4 as out of order.
            self.count += 1
            if len(violations) < FIRST_FEW:
                violations.append(
                    {
                        "receiver": receiver,
                        "incarnation": walk.lives.incarnation_of(receiver),
                        "sender": sender,
                        "conn_id": ev.get("conn_id"),
                        "stream": stream,
                        "app": ev["app"],
                        "after": f"{origin}:{stream}:{prev[1]}",
                        "t": ev["t"],
                    }
                )


def fifo_result(delivered: int, count: int, violations: list[dict], loopback: int = 0) -> CheckResult:
    """fifo's verdict from its tallies (`loopback`: the deliveries of a sender's own multicasts)."""
    details = {"deliveries": delivered, "violations": count, "first": violations}
    if loopback:
        details["loopback"] = loopback
    if not delivered:
        return vacuous_result("fifo", "no delivery with an application id", details)
    if not count and only_loopback(delivered, loopback):
        return vacuous_result("fifo", str(only_loopback(delivered, loopback)), details)
    if not count:
        return CheckResult("fifo", True, f"{delivered} deliveries in FIFO order", details, judged=delivered)
    v = violations[0]
    explanation = (
        f"receiver {v['receiver']} (incarnation {v['incarnation']}) delivered {v['app']} after "
        f"{v['after']} from {v['sender']} (conn {v['conn_id']}, stream {v['stream']}) at "
        f"{fmt_t(v['t'])} with no discard of its window in between; {count} FIFO violation(s) in total"
    )
    return CheckResult("fifo", False, explanation, details, judged=delivered)
