"""Per-run verdicts: the harness's check results (pipeline.judging) and the advisory check.

The checks' results come from harness.checks itself (run per run by pipeline.judging), so a
verdict from Spark has the same names, details and explanation sentences as the harness's. The
advisory stuck_retransmission is decided by DataFrame operations (pipeline.checks); this module
arranges its (small) result rows into a CheckResult-shaped dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from splitbrain.harness import checks as H
from splitbrain.harness.verdict import outcome_of

from .checks import ADVISORY_CHECKS, STUCK_MIN_RETRANSMITS, STUCK_MIN_SECONDS


def _fmt_t(t) -> str:
    return "never" if t is None else f"t={t:.3f}"


def _link(sender: str, receiver: str) -> str:
    return f"{sender}->{receiver}"


def group_rows(rows) -> dict[str, dict[str, list]]:
    """run_id -> part -> rows."""
    out: dict[str, dict[str, list]] = {}
    for row in rows:
        out.setdefault(row["run_id"], {}).setdefault(row["part"], []).append(row)
    return out


def _sum(parts: dict, part: str, col: str) -> int:
    """Results kept per (run, dst) by pipeline.checks, summed over the run."""
    return sum(r[col] or 0 for r in parts.get(part, []))


# ---- advisory ---------------------------------------------------------------------------------


def stuck_retransmission(parts: dict) -> dict:
    stuck = [
        {
            "link": _link(r["src"], r["dst"]),
            "retransmits": r["retransmits"],
            "xmit_reqs": r["xmit_reqs"],
            "first_t": r["first_t"],
            "last_t": r["last_t"],
            "seqnos": [r["min_seqno"], r["max_seqno"]],
            "last_deliver_t": r["last_deliver_t"],
        }
        for r in sorted(
            (x for row in parts.get("stuck", []) for x in row["stuck"] or []),
            key=lambda r: (r["first_t"], r["src"], r["dst"]),
        )
    ]
    per_dst = parts.get("stuck", [])
    longest = [r["longest_episode_s"] for r in per_dst if r["longest_episode_s"] is not None]
    details = {
        "stuck": stuck,
        "retransmits": _sum(parts, "stuck", "retransmits"),
        "xmit_reqs": _sum(parts, "stuck", "xmit_reqs"),
        "longest_episode_s": max(longest, default=None),
        "min_retransmits": STUCK_MIN_RETRANSMITS,
        "min_seconds": STUCK_MIN_SECONDS,
    }
    if not stuck:
        explanation = "no link kept retransmitting or asking for retransmission without delivery progress"
        return H.CheckResult("stuck_retransmission", True, explanation, details).to_dict()
    text = [
        f"{s['link']}: {s['retransmits']} retransmit(s) and {s['xmit_reqs']} XMIT-REQ(s) from "
        f"t={s['first_t']:.3f} to t={s['last_t']:.3f} without a delivery, last delivery on this link "
        f"{_fmt_t(s['last_deliver_t'])}"
        for s in stuck
    ]
    return H.CheckResult("stuck_retransmission", False, "retransmission stuck: " + "; ".join(text), details).to_dict()


ADVISORY_BUILDERS = {"stuck_retransmission": stuck_retransmission}
assert tuple(ADVISORY_BUILDERS) == ADVISORY_CHECKS


@dataclass
class RunVerdict:
    """The judgement of one run by the pipeline."""

    run_id: str
    outcome: str  # passed | failed | vacuous | error
    expect: str  # "pass" or "fail:<check>"
    checks: list[dict]  # the scenario's checks, in its order (CheckResult.to_dict() shape)
    advisory: list[dict]  # checks that never decide the outcome (stuck_retransmission)
    quarantined: int = 0
    harness_outcome: str | None = None
    error: str | None = None
    meta: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)

    @property
    def failed_checks(self) -> list[str]:
        return [c["name"] for c in self.checks if not c["passed"]]

    @property
    def deciding(self) -> list[dict]:
        """The checks that decided a failed or vacuous outcome (as harness.verdict.Verdict.failures)."""
        if self.outcome not in ("failed", "vacuous"):
            return []
        if self.expect.startswith("fail:"):
            name = self.expect.split(":", 1)[1]
            return [c for c in self.checks if c["name"] == name]
        return [c for c in self.checks if not c["passed"]]

    @property
    def agrees_with_harness(self) -> bool | None:
        if self.harness_outcome in (None, "error"):
            return None
        return self.harness_outcome == self.outcome

    def to_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "outcome": self.outcome,
            "expect": self.expect,
            "checks": self.checks,
            "failed": [c["name"] for c in self.deciding],
            "advisory": self.advisory,
            "quarantined": self.quarantined,
            "harness_outcome": self.harness_outcome,
            "error": self.error,
            "meta": self.meta,
            "metrics": self.metrics,
        }


def judge(run_id: str, meta: dict, parts: dict, results: list[dict], quarantined: int = 0) -> RunVerdict:
    """Decide a run's outcome the way harness.verdict.judge does, from its check results (in the
    scenario's order): passed, failed, or vacuous when only checks that judged nothing did not pass."""
    expect = meta.get("expect") or "pass"
    names = list(meta.get("checks") or H.GENERAL_CHECKS)
    unknown = [n for n in names if n not in H.KNOWN_CHECKS]
    advisory = [b(parts) for b in ADVISORY_BUILDERS.values()]
    common: dict[str, Any] = dict(
        run_id=run_id,
        expect=expect,
        checks=results,
        advisory=advisory,
        quarantined=quarantined,
        harness_outcome=meta.get("harness_outcome"),
        meta=meta,
    )
    if meta.get("event_files") == 0:
        return RunVerdict(outcome="error", error="no nodes/*/events.jsonl in the run directory", **common)
    if unknown:
        return RunVerdict(outcome="error", error=f"unknown check(s) {', '.join(unknown)}", **common)
    expect_fail = expect.split(":", 1)[1] if expect.startswith("fail:") else None
    outcome = outcome_of([H.CheckResult(**c) for c in results], expect_fail)
    return RunVerdict(outcome=outcome, **common)
