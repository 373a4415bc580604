"""xmit_traffic (bounded, only when listed): at most `xmit_bound` retransmissions over the run.

Requests and messages sent again for any cause, counted from the events the spec's
`xmit_traffic` names (every built-in protocol: xmit_req_tx and retransmit); vacuous when no
application message was sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from .checker import Check, CheckContext
from .events import is_harness, run_message_count
from .results import FIRST_FEW, CheckResult, fmt_t, link_name, vacuous_result


class XmitTraffic(Check):
    """Over the whole run, at most `bound` retransmissions: what each protocol's spec calls
    retransmission traffic (`ProtocolSpec.xmit_traffic`: requests sent, and messages sent again
    for any cause, asked for or not), counted from the events of messages sent. A scenario on a
    lossless network states 0: nothing there needs asking for or sending again (MCAST's
    spurious retransmission). Judged: the application messages sent, which are what a
    retransmission could repeat; a run that sent none judges nothing."""

    name = "xmit_traffic"
    bound_key: ClassVar[str | None] = "xmit_bound"
    unit = " sent"

    def __init__(self, ctx: CheckContext) -> None:
        super().__init__(ctx)
        self.predicates: dict[str, Callable | None] = {}
        self.sent = 0
        self.links: dict[str, dict] = {}

    def see_other(self, ev: dict) -> None:
        if is_harness(ev):
            return
        if ev["kind"] == "send" and ev.get("app") is not None:
            self.sent += run_message_count(ev)
            return
        proto = ev["proto"]
        if proto not in self.predicates:
            from splitbrain.node import protocols

            try:
                self.predicates[proto] = protocols.get(proto).xmit_traffic
            except ValueError:
                self.predicates[proto] = None
        pred = self.predicates[proto]
        if pred is None or "peer" not in ev or not pred(ev):
            return
        # A request goes from the receiver (node) to the one asked (peer); a retransmission from the
        # one who sends again (node) to its receiver (peer).
        info = self.links.setdefault(
            link_name(ev["node"], ev["peer"]), {"requests": 0, "seqnos": 0, "retransmissions": 0, "first_t": ev["t"]}
        )
        if ev["kind"] == "retransmit":
            info["retransmissions"] += 1
            reason = str(ev.get("reason") or "unknown")
            by = info.setdefault("by_reason", {})
            by[reason] = by.get(reason, 0) + 1
        else:
            info["requests"] += 1
            info["seqnos"] += int(ev.get("count") or 0)
        info["last_t"] = ev["t"]

    # Every event is read alike, a run line as the messages it counts.
    see_send = see_deliver = see_send_run = see_deliver_run = see_other

    def result(self) -> CheckResult:
        return xmit_traffic_result(self.links, self.ctx.bound(self.bound_key), self.sent, self.predicates)


def xmit_traffic_result(links: dict, bound: int | None, sent: int, predicates: dict | None = None) -> CheckResult:
    """xmit_traffic's verdict from the traffic per link ("X->Y" -> requests, seqnos, retransmissions,
    by_reason, first_t, last_t) and the number of application messages sent."""
    requests = sum(p["requests"] for p in links.values())
    resent = sum(p.get("retransmissions", 0) for p in links.values())
    details = {"bound": bound, "sent": sent, "requests": requests, "retransmissions": resent, "links": links}
    if bound is None:
        return vacuous_result("xmit_traffic", "no xmit_bound given (a scenario key)", details)
    if not sent:
        return vacuous_result("xmit_traffic", "no application message was sent", details)
    declared = [p for p, pred in (predicates or {}).items() if pred is not None]
    if not declared:
        return vacuous_result("xmit_traffic", "no protocol in the log declares retransmission traffic", details)
    total = requests + resent

    def traffic(p: dict) -> int:
        return p["requests"] + p.get("retransmissions", 0)

    def line(name: str, p: dict) -> str:
        what = f"{p['requests']} requests ({p['seqnos']} seqnos)"
        if p.get("retransmissions"):
            reasons = ", ".join(f"{r} {n}" for r, n in sorted(p.get("by_reason", {}).items()))
            what += f", {p['retransmissions']} retransmissions ({reasons})"
        return f"{name}: {what} from {fmt_t(p['first_t'])} to {fmt_t(p['last_t'])}"

    busiest = sorted(links.items(), key=lambda item: -traffic(item[1]))[:FIRST_FEW]
    shown = "; ".join(line(name, p) for name, p in busiest)
    counted = f"{requests} retransmission requests and {resent} retransmissions"
    if total > bound:
        explanation = f"{counted} over the run, {total} against a bound of {bound}, for {sent} messages sent; {shown}"
        return CheckResult("xmit_traffic", False, explanation, details, judged=sent)
    explanation = f"{counted} (bound {bound}) for {sent} messages sent" + (f"; {shown}" if shown else "")
    return CheckResult("xmit_traffic", True, explanation, details, judged=sent)
