"""A toy check, to prove that a check is its module plus one registry line (docs/extending.md).

payload_bytes: every delivered message carried a payload (bytes > 0). It reads deliveries only,
a run line of deliveries whole (its bytes are the sum of its messages'), and keeps two counters
and the first few empty deliveries: nothing per message. Registered from outside the tree with
`harness.checks.register(PayloadBytes)`.
"""

from __future__ import annotations

from splitbrain.harness.checks import FIRST_FEW, Check, CheckContext, CheckResult, vacuous_result


class PayloadBytes(Check):
    """Every delivered message carried a payload (its `bytes` above 0)."""

    name = "payload_bytes"
    unit = " delivered"

    def __init__(self, ctx: CheckContext) -> None:
        super().__init__(ctx)
        self.delivered = 0
        self.empty: list[str] = []
        self.empty_count = 0

    def see_deliver(self, ev: dict) -> None:
        if "app" not in ev:
            return
        self.delivered += 1
        if not ev.get("bytes"):
            self.empty_count += 1
            if len(self.empty) < FIRST_FEW:
                self.empty.append(f"{ev['node']} {ev['app']}")

    def see_deliver_run(self, run: dict) -> None:
        # A run's bytes are its messages' sum: fewer bytes than messages means some were empty.
        self.delivered += run["count"]
        if run["bytes"] < run["count"]:
            self.empty_count += run["count"] - run["bytes"]
            if len(self.empty) < FIRST_FEW:
                self.empty.append(f"{run['node']} {run['app']}..{run['last_app']}")

    def result(self) -> CheckResult:
        details = {"deliveries": self.delivered, "empty": self.empty_count, "first": self.empty}
        if not self.delivered:
            return vacuous_result(self.name, "no delivery with an application id", details)
        if self.empty_count:
            explanation = f"{self.empty_count} delivery(ies) without a payload; first: {', '.join(self.empty)}"
            return CheckResult(self.name, False, explanation, details, judged=self.delivered)
        return CheckResult(
            self.name, True, f"{self.delivered} deliveries with a payload", details, judged=self.delivered
        )
