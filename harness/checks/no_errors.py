"""no_errors: no `error` event (an exception inside a protocol layer: a bug of ours).

Judged: the nodes' events, a run line counting as the messages it stands for.
"""

from __future__ import annotations

from .checker import Check, CheckContext
from .events import is_harness, run_message_count
from .results import FIRST_FEW, CheckResult, fmt_t, vacuous_result


class NoErrors(Check):
    """No exception was raised inside a protocol stack (`error` events)."""

    name = "no_errors"
    unit = " events"

    def __init__(self, ctx: CheckContext) -> None:
        super().__init__(ctx)
        self.judged = self.count = 0
        self.errors: list[dict] = []

    def see_send(self, ev: dict) -> None:
        if not is_harness(ev):
            self.judged += 1

    see_deliver = see_send

    def see_send_run(self, run: dict) -> None:
        if not is_harness(run):
            self.judged += run["count"]

    see_deliver_run = see_send_run

    def see_other(self, ev: dict) -> None:
        if is_harness(ev):
            return
        self.judged += run_message_count(ev)
        if ev["kind"] == "error":
            self.count += 1
            if len(self.errors) < FIRST_FEW:
                self.errors.append(
                    {"node": ev["node"], "t": ev["t"], "reason": ev.get("reason"), "detail": ev.get("detail")}
                )

    def result(self) -> CheckResult:
        return no_errors_result(self.judged, self.count, self.errors)


def no_errors_result(judged: int, count: int, errors: list[dict]) -> CheckResult:
    """no_errors' verdict from its tallies."""
    details = {"events": judged, "errors": count, "first": errors}
    if not judged:
        return vacuous_result("no_errors", "no event from any node", details)
    if not count:
        return CheckResult("no_errors", True, f"no internal error in {judged} node events", details, judged=judged)
    e = errors[0]
    explanation = (
        f"{count} internal error(s) in the protocol stack; first at {e['node']} {fmt_t(e['t'])}: {e['reason']}"
    )
    return CheckResult("no_errors", False, explanation, details, judged=judged)
