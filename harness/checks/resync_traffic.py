"""resync_traffic (bounded, only when listed): at most `resync_bound` resync messages per pair.

What each protocol's spec calls resync traffic (`ProtocolSpec.resync_traffic`; NAKACK2's is a
sender's catch-up of a joiner), counted from the events of messages sent, both directions of a pair
together (JGRP-1874); a protocol that declares none is named as not applicable. Judged: the pairs
with any resync traffic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from .checker import Check, CheckContext
from .events import is_harness, run_message_count
from .results import CheckResult, fmt_t, vacuous_result


class ResyncTraffic(Check):
    """Between any two nodes, at most `bound` resync messages (JGRP-1874): what each protocol's
    spec calls resync traffic (`ProtocolSpec.resync_traffic`), counted from the events of messages
    sent, both directions of a pair together. Judged: the pairs with any resync traffic."""

    name = "resync_traffic"
    bound_key: ClassVar[str | None] = "resync_bound"
    unit = " pairs"

    def __init__(self, ctx: CheckContext) -> None:
        super().__init__(ctx)
        self.predicates: dict[str, Callable | None] = {}
        self.pairs: dict[tuple[str, str], dict] = {}

    def see_other(self, ev: dict) -> None:
        if is_harness(ev) or "peer" not in ev:
            return
        proto = ev["proto"]
        if proto not in self.predicates:
            from splitbrain.node import protocols

            try:
                self.predicates[proto] = protocols.get(proto).resync_traffic
            except ValueError:
                self.predicates[proto] = None
        pred = self.predicates[proto]
        if pred is None or not pred(ev):
            return
        a, b = sorted((ev["node"], ev["peer"]))
        info = self.pairs.setdefault((a, b), {"messages": 0, "bytes": 0, "by_kind": {}, "first_t": ev["t"]})
        messages = run_message_count(ev)
        info["messages"] += messages
        info["bytes"] += int(ev.get("bytes") or 0)
        what = ev["kind"] if ev["kind"] != "retransmit" else f"retransmit({ev.get('reason')})"
        if ev.get("phase"):
            what = f"{what}:{ev['phase']}"
        info["by_kind"][what] = info["by_kind"].get(what, 0) + messages
        info["last_t"] = ev["t"]

    # Every event is read alike, a run line as the messages it counts.
    see_send = see_deliver = see_send_run = see_deliver_run = see_other

    def result(self) -> CheckResult:
        pairs = {f"{a}<->{b}": info for (a, b), info in sorted(self.pairs.items())}
        return resync_traffic_result(pairs, self.ctx.bound(self.bound_key), self.predicates)


def resync_traffic_result(pairs: dict, bound: int | None, predicates: dict | None = None) -> CheckResult:
    """resync_traffic's verdict from the counts per pair ("A<->B" -> messages, bytes, by_kind...)."""
    details = {"bound": bound, "pairs": pairs, "messages": sum(p["messages"] for p in pairs.values())}
    if bound is None:
        return vacuous_result("resync_traffic", "no resync_bound given (a scenario key)", details)
    if not pairs:
        declared = sorted(p for p, pred in (predicates or {}).items() if pred is not None)
        undeclared = sorted(p for p, pred in (predicates or {}).items() if pred is None)
        why = "no resync message was sent" + (
            f" ({', '.join(declared)} declare(s) resync traffic)"
            if declared
            else " (no protocol in the log declares resync traffic)"
        )
        if undeclared:
            why += f"; not applicable to {', '.join(undeclared)}, which declare(s) no resync"
        return vacuous_result("resync_traffic", why, details)

    def line(name: str, p: dict) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(p["by_kind"].items()))
        return (
            f"{name}: {p['messages']} resync messages ({p['bytes']} B; {kinds}) "
            f"from {fmt_t(p['first_t'])} to {fmt_t(p['last_t'])}"
        )

    over = {name: p for name, p in pairs.items() if p["messages"] > bound}
    if over:
        explanation = f"{len(over)} pair(s) over the bound of {bound} resync messages: " + "; ".join(
            line(n, p) for n, p in over.items()
        )
        return CheckResult("resync_traffic", False, explanation, details, judged=len(pairs))
    most = max(pairs.items(), key=lambda item: item[1]["messages"])
    explanation = f"{len(pairs)} pair(s) within {bound} resync messages; most: " + line(*most)
    return CheckResult("resync_traffic", True, explanation, details, judged=len(pairs))
