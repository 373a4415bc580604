"""Per-run verdicts from the collected result rows of pipeline.checks.

The decisions were made by DataFrame operations; this module only arranges their (small) results
into the tallies harness.checks' result builders take, so a verdict from Spark has the same
names, details and explanation sentences as the harness's and can be compared field by field.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness import checks as H

from .checks import ADVISORY_CHECKS, CHECK_NAMES, FIRST_FEW, STUCK_MIN_RETRANSMITS, STUCK_MIN_SECONDS


def _fmt_t(t) -> str:
    return "never" if t is None else f"t={t:.3f}"


def _link(sender: str, receiver: str) -> str:
    return f"{sender}->{receiver}"


def _o(row) -> int:
    """The run-order position (schema.SEQ) a result row carries."""
    return row["o"]


def group_rows(rows) -> dict[str, dict[str, list]]:
    """run_id -> part -> rows."""
    out: dict[str, dict[str, list]] = {}
    for row in rows:
        out.setdefault(row["run_id"], {}).setdefault(row["part"], []).append(row)
    return out


def _one(parts: dict, part: str):
    rows = parts.get(part) or []
    return rows[0] if rows else None


def _sum(parts: dict, part: str, col: str) -> int:
    """Results kept per (run, dst) by pipeline.checks, summed over the run."""
    return sum(r[col] or 0 for r in parts.get(part, []))


def _first(parts: dict, part: str, col: str, n: int) -> list:
    """The run's first n samples by position, from the first n of each (run, dst)."""
    samples = [x for r in parts.get(part, []) for x in (r[col] or [])]
    return sorted(samples, key=_o)[:n]


# ---- the four harness checks ------------------------------------------------------------------


def fifo(parts: dict) -> dict:
    violations = [
        {"receiver": r["receiver"], "incarnation": r["incarnation"], "sender": r["sender"],
         "conn_id": r["conn_id"], "stream": r["stream"], "app": r["app"], "after": r["after"], "t": r["t"]}
        for r in _first(parts, "fifo", "fifo_first", FIRST_FEW)
    ]
    return H.fifo_result(_sum(parts, "fifo", "deliveries"), _sum(parts, "fifo", "violations"),
                         violations).to_dict()


def no_duplicates(parts: dict) -> dict:
    duplicates = [
        {"receiver": r["receiver"], "incarnation": r["incarnation"], "sender": r["sender"],
         "conn_id": r["conn_id"], "window": r["window"], "app": r["app"], "first_t": r["first_t"], "t": r["t"]}
        for r in _first(parts, "dup", "dup_first", FIRST_FEW)
    ]
    return H.no_duplicates_result(_sum(parts, "dup", "deliveries"), _sum(parts, "dup", "duplicates"),
                                  duplicates, _sum(parts, "dup", "redelivered_after_reset")).to_dict()


def no_loss(parts: dict) -> dict:
    excused = {"dead_at_end": _sum(parts, "loss", "dead_at_end"),
               "sender_restarted": _sum(parts, "loss", "sender_restarted")}
    last_link = {(r["src"], r["dst"]): r["last_deliver_t"] for r in parts.get("link", [])
                 if r["last_deliver_t"] is not None}
    lost = {}
    for r in sorted(parts.get("loss_link", []), key=_o):
        first = [x["app"] for x in sorted(r["first"], key=lambda x: x["first_o"])]
        lost[_link(r["src"], r["dst"])] = {"count": r["count"], "first": first,
                                           "last_deliver_t": last_link.get((r["src"], r["dst"]))}
    return H.no_loss_result(_sum(parts, "loss", "sent"), excused, max(last_link.values(), default=None),
                            lost).to_dict()


def _window_view(w) -> dict | None:
    return None if w is None else H.window_view(w.asDict())


def windows_synced(parts: dict) -> dict:
    pairs: dict[str, dict] = {}
    for r in sorted(parts.get("ws_pair", []), key=_o):
        send, recv = _window_view(r["send"]), _window_view(r["recv"])
        problem = H.pair_problem(r["src"], r["dst"], send, recv)
        if (problem is None) != bool(r["synced"]):  # the DataFrame decision and the text disagree
            raise AssertionError(f"windows_synced: pair {r['src']}->{r['dst']} synced={r['synced']} "
                                 f"but problem={problem!r}")
        pairs[_link(r["src"], r["dst"])] = {"synced": problem is None, "problem": problem, "send": send,
                                            "recv": recv, "sync_time": r["sync_time"]}
    heal = _one(parts, "ws_heal")
    return H.windows_synced_result(
        pairs, sorted(r["node"] for r in parts.get("ws_silent", [])), len(parts.get("ws_skipped", [])),
        sorted(_link(r["src"], r["dst"]) for r in parts.get("ws_stale", [])),
        heal["last_heal"] if heal else 0.0).to_dict()


# ---- advisory ---------------------------------------------------------------------------------


def stuck_retransmission(parts: dict) -> dict:
    stuck = [
        {"link": _link(r["src"], r["dst"]), "retransmits": r["retransmits"], "xmit_reqs": r["xmit_reqs"],
         "first_t": r["first_t"],
         "last_t": r["last_t"], "seqnos": [r["min_seqno"], r["max_seqno"]], "last_deliver_t": r["last_deliver_t"]}
        for r in sorted((x for row in parts.get("stuck", []) for x in row["stuck"] or []),
                        key=lambda r: (r["first_t"], r["src"], r["dst"]))
    ]
    per_dst = parts.get("stuck", [])
    longest = [r["longest_episode_s"] for r in per_dst if r["longest_episode_s"] is not None]
    details = {"stuck": stuck, "retransmits": _sum(parts, "stuck", "retransmits"),
               "xmit_reqs": _sum(parts, "stuck", "xmit_reqs"),
               "longest_episode_s": max(longest, default=None),
               "min_retransmits": STUCK_MIN_RETRANSMITS, "min_seconds": STUCK_MIN_SECONDS}
    if not stuck:
        explanation = "no link kept retransmitting or asking for retransmission without delivery progress"
        return H.CheckResult("stuck_retransmission", True, explanation, details).to_dict()
    text = [f"{s['link']}: {s['retransmits']} retransmit(s) and {s['xmit_reqs']} XMIT-REQ(s) from "
            f"t={s['first_t']:.3f} to t={s['last_t']:.3f} without a delivery, last delivery on this link "
            f"{_fmt_t(s['last_deliver_t'])}" for s in stuck]
    return H.CheckResult("stuck_retransmission", False, "retransmission stuck: " + "; ".join(text),
                         details).to_dict()


CHECK_BUILDERS = {"fifo": fifo, "no_duplicates": no_duplicates, "no_loss": no_loss,
                  "windows_synced": windows_synced}
ADVISORY_BUILDERS = {"stuck_retransmission": stuck_retransmission}
assert tuple(CHECK_BUILDERS) == CHECK_NAMES and tuple(ADVISORY_BUILDERS) == ADVISORY_CHECKS


@dataclass
class RunVerdict:
    """The judgement of one run by the pipeline."""

    run_id: str
    outcome: str  # passed | failed | error
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
        """The checks that decided a failed outcome (as harness.rundir.Verdict.failures)."""
        if self.outcome != "failed":
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
        return {"run_id": self.run_id, "outcome": self.outcome, "expect": self.expect,
                "checks": self.checks, "failed": [c["name"] for c in self.deciding],
                "advisory": self.advisory, "quarantined": self.quarantined,
                "harness_outcome": self.harness_outcome, "error": self.error,
                "meta": self.meta, "metrics": self.metrics}


def judge(run_id: str, meta: dict, parts: dict, quarantined: int = 0) -> RunVerdict:
    """Decide a run's outcome the way harness.rundir.judge does: with `expect: pass` every check of
    the scenario must pass; with `expect: {fail: X}` check X must fail."""
    expect = meta.get("expect") or "pass"
    names = list(meta.get("checks") or CHECK_NAMES)
    checks = [CHECK_BUILDERS[n](parts) for n in names if n in CHECK_BUILDERS]
    unknown = [n for n in names if n not in CHECK_BUILDERS]
    advisory = [b(parts) for b in ADVISORY_BUILDERS.values()]
    if meta.get("event_files") == 0:
        return RunVerdict(run_id=run_id, outcome="error", expect=expect, checks=checks, advisory=advisory,
                          quarantined=quarantined, harness_outcome=meta.get("harness_outcome"),
                          error="no nodes/*/events.jsonl in the run directory", meta=meta)
    if unknown:
        return RunVerdict(run_id=run_id, outcome="error", expect=expect, checks=checks, advisory=advisory,
                          quarantined=quarantined, harness_outcome=meta.get("harness_outcome"),
                          error=f"unknown check(s) {', '.join(unknown)}", meta=meta)
    if expect.startswith("fail:"):
        name = expect.split(":", 1)[1]
        ok = any(c["name"] == name and not c["passed"] for c in checks)
    else:
        ok = all(c["passed"] for c in checks)
    return RunVerdict(run_id=run_id, outcome="passed" if ok else "failed", expect=expect, checks=checks,
                      advisory=advisory, quarantined=quarantined,
                      harness_outcome=meta.get("harness_outcome"), meta=meta)
