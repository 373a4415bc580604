"""Per-run verdicts from the collected result rows of pipeline.checks.

The decisions were made by DataFrame operations; this module only arranges their (small) results
into the dicts harness.checks.CheckResult.to_dict() produces - same names, same details, same
explanation sentences - so a verdict from Spark can be compared with the harness's field by field.
The sentence formats below are copies of harness/checks.py's and must change with them (the
agreement tests fail when they drift).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .checks import ADVISORY_CHECKS, CHECK_NAMES, FIRST_FEW, STUCK_MIN_RETRANSMITS, STUCK_MIN_SECONDS


def _fmt_t(t) -> str:
    return "never" if t is None else f"t={t:.3f}"


def _link(sender: str, receiver: str) -> str:
    return f"{sender}->{receiver}"


def _o(row) -> int:
    """The run-order position (schema.SEQ) a result row carries."""
    return row["o"]


def _result(name: str, passed: bool, explanation: str, details: dict) -> dict:
    return {"name": name, "passed": passed, "explanation": explanation, "details": details}


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
    delivered = _sum(parts, "fifo", "deliveries")
    count = _sum(parts, "fifo", "violations")
    violations = [
        {"receiver": r["receiver"], "incarnation": r["incarnation"], "sender": r["sender"],
         "conn_id": r["conn_id"], "stream": r["stream"], "app": r["app"], "after": r["after"], "t": r["t"]}
        for r in _first(parts, "fifo", "fifo_first", FIRST_FEW)
    ]
    details = {"deliveries": delivered, "violations": count, "first": violations}
    if not count:
        return _result("fifo", True, f"{delivered} deliveries in FIFO order", details)
    v = violations[0]
    explanation = (
        f"receiver {v['receiver']} (incarnation {v['incarnation']}) delivered {v['app']} after "
        f"{v['after']} from {v['sender']} (conn {v['conn_id']}, stream {v['stream']}) at "
        f"{_fmt_t(v['t'])}; {count} FIFO violation(s) in total"
    )
    return _result("fifo", False, explanation, details)


def no_duplicates(parts: dict) -> dict:
    delivered = _sum(parts, "dup", "deliveries")
    count = _sum(parts, "dup", "duplicates")
    redelivered = _sum(parts, "dup", "redelivered_after_reset")
    duplicates = [
        {"receiver": r["receiver"], "incarnation": r["incarnation"], "sender": r["sender"],
         "conn_id": r["conn_id"], "window": r["window"], "app": r["app"], "first_t": r["first_t"], "t": r["t"]}
        for r in _first(parts, "dup", "dup_first", FIRST_FEW)
    ]
    details = {"deliveries": delivered, "duplicates": count, "first": duplicates,
               "redelivered_after_reset": redelivered}
    if not count:
        explanation = f"no duplicates among {delivered} deliveries"
        if redelivered:
            explanation += f" ({redelivered} app id(s) redelivered under a new conn_id after a reset)"
        return _result("no_duplicates", True, explanation, details)
    d = duplicates[0]
    explanation = (
        f"receiver {d['receiver']} (incarnation {d['incarnation']}) delivered {d['app']} from "
        f"{d['sender']} twice on conn {d['conn_id']}, at {_fmt_t(d['first_t'])} and "
        f"{_fmt_t(d['t'])}; {count} duplicate delivery(ies) in total"
    )
    return _result("no_duplicates", False, explanation, details)


def no_loss(parts: dict) -> dict:
    sent = _sum(parts, "loss", "sent")
    excused = {"dead_at_end": _sum(parts, "loss", "dead_at_end"),
               "sender_restarted": _sum(parts, "loss", "sender_restarted")}
    last_link = {(r["src"], r["dst"]): r["last_deliver_t"] for r in parts.get("link", [])
                 if r["last_deliver_t"] is not None}
    last_deliver = max(last_link.values(), default=None)
    checked = sent - sum(excused.values())
    details: dict = {"sent": sent, "checked": checked, "excused": excused,
                     "last_deliver_t": last_deliver, "lost": {}}
    for r in sorted(parts.get("loss_link", []), key=_o):
        first = [x["app"] for x in sorted(r["first"], key=lambda x: x["first_o"])]
        details["lost"][_link(r["src"], r["dst"])] = {"count": r["count"], "first": first,
                                                      "last_deliver_t": last_link.get((r["src"], r["dst"]))}
    if not details["lost"]:
        explanation = f"all {checked} checked messages delivered"
        if checked != sent:
            explanation += (f" (not checked: {excused['dead_at_end']} to or from a node dead at "
                            f"end, {excused['sender_restarted']} sent before a sender restart)")
        return _result("no_loss", True, explanation, details)
    total = sum(info["count"] for info in details["lost"].values())
    text = [
        f"{name}: {info['count']} never delivered (first {' '.join(info['first'])}; "
        f"last delivery on this link {_fmt_t(info['last_deliver_t'])})"
        for name, info in details["lost"].items()
    ]
    explanation = (f"{total} message(s) lost: " + "; ".join(text)
                   + f"; last delivery anywhere {_fmt_t(last_deliver)}")
    return _result("no_loss", False, explanation, details)


def _window_view(w) -> dict | None:
    if w is None:
        return None
    return {"conn_id": w["conn_id"], "low": w["low"], "high": w["high"], "state": w["state"]}


def _pair_problem(sender: str, receiver: str, send: dict, recv: dict | None) -> str | None:
    ha, hs = send.get("low"), send.get("high")
    sent_part = f"{sender} send conn {send.get('conn_id')} HA={ha} HS={hs}"
    if recv is None:
        return None if ha == hs else f"{sent_part}, {receiver} has no recv window"
    recv_part = (f"{receiver} recv conn {recv.get('conn_id')} delivered={recv.get('low')} "
                 f"received={recv.get('high')}")
    if send.get("conn_id") != recv.get("conn_id"):
        return f"conn_id mismatch: {sent_part}, {recv_part}"
    if ha != hs or recv.get("low") != hs:
        return f"{sent_part}, {recv_part}"
    return None


def windows_synced(parts: dict) -> dict:
    pairs: dict[str, dict] = {}
    problems: list[str] = []
    for r in sorted(parts.get("ws_pair", []), key=_o):
        send, recv = _window_view(r["send"]), _window_view(r["recv"])
        problem = _pair_problem(r["src"], r["dst"], send, recv)
        if (problem is None) != bool(r["synced"]):  # the DataFrame decision and the text disagree
            raise AssertionError(f"windows_synced: pair {r['src']}->{r['dst']} synced={r['synced']} "
                                 f"but problem={problem!r}")
        if problem is not None:
            problems.append(f"{_link(r['src'], r['dst'])} {problem}")
        pairs[_link(r["src"], r["dst"])] = {"synced": problem is None, "problem": problem, "send": send,
                                            "recv": recv, "sync_time": r["sync_time"]}
    skipped = len(parts.get("ws_skipped", []))
    heal = _one(parts, "ws_heal")
    last_heal = heal["last_heal"] if heal else 0.0
    stale_recv = sorted(_link(r["src"], r["dst"]) for r in parts.get("ws_stale", []))
    silent = sorted(r["node"] for r in parts.get("ws_silent", []))
    if silent:
        problems.append(f"final windows not reported by {', '.join(silent)} (alive at end, with traffic)")
    sync_times = [p["sync_time"] for p in pairs.values() if p["sync_time"] is not None]
    max_sync_time = max(sync_times, default=None)
    details = {"pairs": pairs, "out_of_sync": len(pairs) - len(sync_times), "not_reported": silent,
               "skipped_dead": skipped, "stale_recv": stale_recv,
               "last_heal_t": last_heal, "max_sync_time": max_sync_time}
    if problems:
        return _result("windows_synced", False, "; ".join(problems), details)
    explanation = f"{len(pairs)} pair(s) in sync"
    if max_sync_time is not None:
        explanation += f", max sync time {max_sync_time:.3f}s after last heal at {_fmt_t(last_heal)}"
    return _result("windows_synced", True, explanation, details)


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
        return _result("stuck_retransmission", True, explanation, details)
    text = [f"{s['link']}: {s['retransmits']} retransmit(s) and {s['xmit_reqs']} XMIT-REQ(s) from "
            f"t={s['first_t']:.3f} to t={s['last_t']:.3f} without a delivery, last delivery on this link "
            f"{_fmt_t(s['last_deliver_t'])}" for s in stuck]
    return _result("stuck_retransmission", False, "retransmission stuck: " + "; ".join(text), details)


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
