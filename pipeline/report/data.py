"""What the report shows, computed from verdicts and timelines: no drawing and no HTML here.

- which runs get a timeline (timeline_runs);
- a run's timeline reduced to spans and marks: faults (fault_spans), nodes down, senders blocked,
  each node's views (view_bands) and membership events, the send window's fill, notes per link;
- the pass/fail matrix's cells (matrix_cells) and the page's tables (overhead, blocked senders,
  latency per receiver, views per node, the runs table, one run's verdict).

Which event kinds mark a resync, a blocked sender, a send window's fill or a membership change is
not written here: each protocol's spec in the registry (node/protocols.py) says so, so a new
protocol brings its own marks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from splitbrain.node import protocols

from ..timeline import RunTimeline
from ..verdicts import RunVerdict

MAX_MATRIX_RUNS = 60
# Campaign plots (pass-rate bars, per-run scatters, box plots) need this many runs to say anything:
# below it a report shows each run's verdict table, its timelines and its latency distribution.
CAMPAIGN_MIN_RUNS = 5
MAX_TIMELINES = 24
MAX_LINKS_PER_TIMELINE = 12
MAX_VIEW_ROWS = 60
MAX_TABLE_ROWS = 60
# Harness timeline faults that happen at an instant (a line on the plot), not over a span.
INSTANT_FAULTS = ("kill", "restart", "view", "sync", "heal", "resume")


def safe_id(run_id: str) -> str:
    """A run id as a file name and an HTML anchor."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)


# ---- choosing what to draw --------------------------------------------------------------------


def timeline_runs(verdicts: list[RunVerdict], limit: int = MAX_TIMELINES) -> list[str]:
    """Failing runs first (they need explaining), then runs with stuck retransmission or
    quarantined lines, then the first run of each scenario, up to `limit`."""
    chosen: list[str] = []

    def add(run_id: str) -> None:
        if run_id not in chosen and len(chosen) < limit:
            chosen.append(run_id)

    for v in verdicts:
        if v.outcome != "passed":
            add(v.run_id)
    for v in verdicts:
        if any(not a["passed"] for a in v.advisory) or v.quarantined:
            add(v.run_id)
    seen = set()
    for v in verdicts:
        scen = v.meta.get("scenario")
        if scen not in seen:
            seen.add(scen)
            add(v.run_id)
    return chosen


def by_scenario(verdicts: list[RunVerdict]) -> dict[str, list[RunVerdict]]:
    out: dict[str, list[RunVerdict]] = {}
    for v in verdicts:
        out.setdefault(v.meta.get("scenario") or "(none)", []).append(v)
    return dict(sorted(out.items()))


# ---- one run's timeline as spans and marks ----------------------------------------------------


def view_label(view_id, coord, members) -> str:
    """A view as a band's label: "v3 A [A,B,C]" (id, coordinator, members)."""
    return f"v{view_id} {coord} [{','.join(members)}]"


def view_bands(rare: list[dict], end_t: float) -> dict[str, list[dict]]:
    """Per node (sorted), the intervals during which it held one view: dicts t0, t1, view_id,
    coord, members, label, reason (why it came). A node's band ends at its death (a kill) and
    starts again at its next view; the last one lasts to end_t. Empty without `view` events."""
    bands: dict[str, list[dict]] = {}
    for e in rare:
        node, kind = e["node"], e["kind"]
        if node == "harness":
            continue
        spans = bands.get(node)
        current = spans[-1] if spans and spans[-1]["t1"] is None else None
        if kind == "view":
            members = list(e.get("members") or ())
            coord = e.get("coord") or (members[0] if members else "")
            if current is not None:
                current["t1"] = e["t"]
            bands.setdefault(node, []).append(
                {
                    "t0": e["t"],
                    "t1": None,
                    "view_id": e.get("view_id"),
                    "coord": coord,
                    "members": members,
                    "label": view_label(e.get("view_id"), coord, members),
                    "reason": e.get("reason"),
                }
            )
        elif kind == "node_stop" and current is not None:
            current["t1"] = e["t"]
    for spans in bands.values():
        for span in spans:
            if span["t1"] is None:
                span["t1"] = max(end_t, span["t0"])
    return dict(sorted(bands.items()))


def membership_marks(rare: list[dict]) -> list[dict]:
    """The membership events the protocols' specs mark on the view bands (suspicions, merges,
    leaves), in time order."""
    kinds = {m.kind for m in protocols.membership_marks()}
    return [e for e in rare if e["kind"] in kinds and e["node"] != "harness"]


def fault_spans(rare: list[dict], end_t: float) -> tuple[list, list]:
    """(spans, instants) from the harness timeline: spans (t0, t1, fault, detail) pair a fault_on
    with the fault_off of the same schedule step ("#N ..."), else with the next fault_off of the
    same fault; instants (t, fault, detail) are kills, restarts, views, heals."""
    spans, instants, open_ = [], [], []
    for e in rare:
        if e["kind"] not in ("fault_on", "fault_off") or e["node"] != "harness":
            continue
        fault, detail = e.get("fault") or "?", e.get("detail") or ""
        m = re.match(r"#(\d+)", detail)
        index = m.group(1) if m else None
        if e["kind"] == "fault_on":
            if fault in INSTANT_FAULTS:
                instants.append((e["t"], fault, detail))
            else:
                open_.append([e["t"], fault, detail, index])
            continue
        match = next((o for o in open_ if o[3] is not None and o[3] == index), None)
        if match is None:
            match = next((o for o in open_ if o[1] == fault), None)
        if match is None:
            if fault != "heal":
                instants.append((e["t"], f"{fault} off", detail))
            continue
        open_.remove(match)
        spans.append((match[0], e["t"], match[1], match[2]))
    for o in open_:
        spans.append((o[0], end_t, o[1], o[2]))
    return spans, instants


def _paired_spans(rare: list[dict], node: str, end_t: float, opens, closes) -> list[tuple[float, float]]:
    """(t0, t1) from each event of `node` that `opens` to the next one that `closes`, or to end_t."""
    spans: list[tuple[float, float]] = []
    since = None
    for e in rare:
        if e["node"] != node:
            continue
        if since is None and opens(e):
            since = e["t"]
        elif since is not None and closes(e):
            spans.append((since, e["t"]))
            since = None
    if since is not None:
        spans.append((since, end_t))
    return spans


def blocked_spans(rare: list[dict], node: str, end_t: float) -> list[tuple[float, float]]:
    """(t0, t1) of each time `node`'s sender was blocked: a block event (a kind the protocols' specs
    name) to the next unblock, or to the end of the run (the rare events, in time order)."""
    blocks, unblocks = protocols.block_kinds()
    return _paired_spans(rare, node, end_t, lambda e: e["kind"] in blocks, lambda e: e["kind"] in unblocks)


def down_spans(rare: list[dict], node: str, end_t: float) -> list[tuple[float, float]]:
    """(t0, t1) of each time `node` was down: killed (not stopped at the end) until it started again."""
    return _paired_spans(
        rare,
        node,
        end_t,
        lambda e: e["kind"] == "node_stop" and e.get("reason") != "stop",
        lambda e: e["kind"] == "node_start",
    )


def blocked_total(rare: list[dict], node: str, end_t: float) -> tuple[int, float]:
    """(blocks, seconds blocked) of `node`'s sender, from blocked_spans."""
    spans = blocked_spans(rare, node, end_t)
    return len(spans), sum(t1 - t0 for t0, t1 in spans)


def window_fill(rare: list[dict], node: str) -> list[tuple[float, int]]:
    """(t, unacked multicasts) of `node`'s send window over time: high - low of the events the
    protocols' specs name as showing the send window (MCAST's window_fill gauge and its
    block/unblock), in time order; empty for a protocol without them."""
    kinds = set(protocols.send_window_kinds())
    return [
        (e["t"], (e.get("high") or 0) - (e.get("low") or 0))
        for e in rare
        if e["node"] == node and e["kind"] in kinds and e.get("low") is not None
    ]


def mentions(detail: str, nodes: set[str]) -> set[str]:
    """The node names a fault's detail text names."""
    return {tok for tok in re.findall(r"[A-Za-z][A-Za-z0-9_]*", detail) if tok in nodes}


def link_notes(verdict: RunVerdict | None, link: str) -> list[str]:
    """What the checks found wrong on one link ("A->B"), for its panel's title."""
    if verdict is None:
        return []
    notes = []
    for c in verdict.checks + verdict.advisory:
        d = c["details"]
        if c["name"] == "no_loss" and link in d.get("lost", {}):
            notes.append(f"{d['lost'][link]['count']} lost")
        if c["name"] == "windows_synced":
            pair = d.get("pairs", {}).get(link)
            if pair and not pair["synced"]:
                notes.append("windows out of sync")
        if c["name"] == "stuck_retransmission" and any(s["link"] == link for s in d.get("stuck", [])):
            notes.append("retransmission stuck")
    return notes


def failing_explanations(verdict: RunVerdict | None) -> list[str]:
    """The failing checks and advisory checks of a run, as "check: explanation"."""
    if verdict is None:
        return []
    return [f"{c['name']}: {c['explanation']}" for c in verdict.checks + verdict.advisory if not c["passed"]]


# ---- the pass/fail matrix ---------------------------------------------------------------------


@dataclass(frozen=True)
class Matrix:
    """The matrix's rows, columns and cells (status, text); status is pass, fail, warn or na."""

    rows: list[str]
    cols: list[str]
    cells: list[list[tuple[str, str]]]
    footnote: str


def matrix_cells(verdicts: list[RunVerdict]) -> Matrix:
    """Runs x checks (few runs) or scenarios x checks with failure fractions (many runs)."""
    names: list[str] = []
    for v in verdicts:
        for c in v.checks + v.advisory:
            if c["name"] not in names:
                names.append(c["name"])
    cols = names + ["outcome"]
    if len(verdicts) <= MAX_MATRIX_RUNS:
        return Matrix(
            [v.run_id for v in verdicts],
            cols,
            [_run_row(v, names) for v in verdicts],
            "fail* = failed as the scenario expects (expect: {fail: check}); nothing = the check judged "
            "nothing (vacuous: no pass); stuck = advisory only",
        )
    rows, cells = [], []
    for scen, vs in by_scenario(verdicts).items():
        rows.append(f"{scen} ({len(vs)} runs)")
        cells.append([_fraction_cell(vs, name) for name in cols])
    return Matrix(
        rows,
        cols,
        cells,
        "cells: runs failing the check / runs it judged something in; +N nothing = runs in which "
        "it judged nothing (outcome: vacuous runs)",
    )


def _run_row(v: RunVerdict, names: list[str]) -> list[tuple[str, str]]:
    by = {c["name"]: c for c in v.checks}
    adv = {c["name"]: c for c in v.advisory}
    row = []
    for name in names:
        if name in by and by[name].get("vacuous"):
            row.append(("warn", "nothing"))  # judged nothing: neither a pass nor a failure
        elif name in by:
            passed = by[name]["passed"]
            expected_fail = v.expect == f"fail:{name}"
            text = "fail*" if expected_fail and not passed else "pass" if passed else "FAIL"
            row.append(("pass" if passed != expected_fail else "fail", text))
        elif name in adv:
            row.append(("pass", "ok") if adv[name]["passed"] else ("warn", "stuck"))
        else:
            row.append(("na", "-"))
    row.append(("pass" if v.outcome == "passed" else "warn" if v.outcome == "vacuous" else "fail", v.outcome))
    return row


def _fraction_cell(vs: list[RunVerdict], name: str) -> tuple[str, str]:
    # Vacuous checks (and vacuous runs) are counted apart: neither judged nor failing.
    if name == "outcome":
        nothing = sum(1 for v in vs if v.outcome == "vacuous")
        bad = sum(1 for v in vs if v.outcome not in ("passed", "vacuous"))
        total = len(vs) - nothing
    else:
        results = [c for v in vs for c in v.checks + v.advisory if c["name"] == name]
        nothing = sum(1 for c in results if c.get("vacuous"))
        bad = sum(1 for c in results if not c["passed"] and not c.get("vacuous"))
        total = len(results) - nothing
    if not total:
        return ("warn", f"nothing x{nothing}") if nothing else ("na", "-")
    frac = bad / total
    status = "pass" if frac == 0 else "warn" if frac < 0.5 else "fail"
    return status, f"{bad}/{total}" + (f" +{nothing} nothing" if nothing else "")


# ---- the page's tables ------------------------------------------------------------------------


def fmt(x):
    """A table cell's value: floats to three decimals (or three digits when huge)."""
    if isinstance(x, float):
        return f"{x:.3f}" if abs(x) < 1e6 else f"{x:.3g}"
    return x


def check_class(check: dict) -> str:
    """The CSS class of a check's result."""
    if check.get("applicable") is False:
        return "not applicable"
    return "passed" if check["passed"] else "vacuous" if check.get("vacuous") else "failed"


def shown_overhead_kinds(verdicts: list[RunVerdict]) -> list[tuple[str, str]]:
    """(metric key, event kind) of the control traffic (node.protocols.overhead_kinds) some run sent."""
    return [
        (key, kind)
        for key, kind in protocols.overhead_kinds().items()
        if any(((v.metrics.get("overhead") or {}).get(key) or {}).get("messages") for v in verdicts)
    ]


def overhead_rows(verdicts: list[RunVerdict]) -> tuple[list[dict], list[str]]:
    """Per scenario, the mean over its runs of each control message kind per delivered message,
    for the kinds some run sent (NAKACK2's STABLE, MCAST's ACK and XMIT-REQ, UNICAST3's SYNC...);
    (rows, columns), no rows when no run sent any."""
    kinds = shown_overhead_kinds(verdicts)
    if not kinds:
        return [], []
    rows = []
    for scen, vs in by_scenario(verdicts).items():
        row: dict = {"scenario": scen, "runs": len(vs)}
        for key, kind in kinds:
            vals = [
                v.metrics["overhead"][key]["per_delivered"]
                for v in vs
                if ((v.metrics.get("overhead") or {}).get(key) or {}).get("per_delivered") is not None
            ]
            row[kind] = sum(vals) / len(vals) if vals else None
        rows.append(row)
    return rows, ["scenario", "runs", *[kind for _, kind in kinds]]


def blocked_rows(verdicts: list[RunVerdict]) -> list[dict]:
    """The time each sender was blocked on a full window, per run (metrics.blocked)."""
    return [
        {"run": v.run_id, "sender": node, "blocks": b["blocks"], "seconds blocked": b["seconds"]}
        for v in verdicts
        for node, b in ((v.metrics.get("blocked") or {}).get("by_node") or {}).items()
    ]


def latency_rows(verdicts: list[RunVerdict]) -> list[dict]:
    """Delivery latency per receiver and run (a multicast: from its send to each other member's
    delivery), from metrics.latency_by_receiver."""
    return [
        {
            "run": v.run_id,
            "receiver": dst,
            "n": lat["n"],
            "p50 (s)": lat["p50_s"],
            "p99 (s)": lat["p99_s"],
            "max (s)": lat["max_s"],
        }
        for v in verdicts
        for dst, lat in (v.metrics.get("latency_by_receiver") or {}).items()
    ]


def views_rows(tl: RunTimeline) -> list[dict]:
    """Who believed what, and when: each node's views (from, to, view, why), with the membership
    events in between, in time order; empty for a run without `view` events."""
    bands = view_bands(tl.rare, tl.end_t)
    if not bands:
        return []
    rows = []
    for node, spans in bands.items():
        for span in spans:
            rows.append(
                {
                    "t": span["t0"],
                    "node": node,
                    "from": f"{span['t0']:.3f}",
                    "to": f"{span['t1']:.3f}",
                    "what": span["label"],
                    "why": span["reason"] or "",
                }
            )
    for e in membership_marks(tl.rare):
        what = e["kind"] + (f" {e['peer']}" if e.get("peer") else "") + (f" {e['phase']}" if e.get("phase") else "")
        if e.get("members"):
            what += f" [{','.join(e['members'])}]"
        rows.append({"t": e["t"], "node": e["node"], "from": f"{e['t']:.3f}", "to": "", "what": what, "why": ""})
    rows.sort(key=lambda r: (r["t"], r["node"]))
    return rows


def verdict_rows(v: RunVerdict) -> list[dict]:
    """One run's checks and advisory checks with their results and explanations (the evidence)."""
    rows = [
        {
            "name": c["name"],
            "class": check_class(c),
            "result": "passed" if c["passed"] else "vacuous" if c.get("judged") == 0 else "failed",
            "judged": c.get("judged", ""),
            "explanation": c["explanation"],
        }
        for c in v.checks
    ]
    rows += [
        {
            "name": f"{c['name']} (advisory)",
            "class": "passed" if c["passed"] else "warn",
            "result": "passed" if c["passed"] else "warning",
            "judged": c.get("judged", ""),
            "explanation": c["explanation"],
        }
        for c in v.advisory
    ]
    return rows


def run_row(v: RunVerdict) -> dict:
    """One row of the runs table."""
    return {
        "run_id": v.run_id,
        "anchor": safe_id(v.run_id),
        "scenario": v.meta.get("scenario"),
        "seed": v.meta.get("seed"),
        "backend": v.meta.get("backend"),
        "outcome": v.outcome,
        "harness": v.harness_outcome,
        "error": v.error,
        "checks": [{"name": c["name"], "class": check_class(c), "explanation": c["explanation"]} for c in v.checks],
        "advisory": [{"name": c["name"], "passed": c["passed"], "explanation": c["explanation"]} for c in v.advisory],
        "events": v.metrics.get("events"),
        "quarantined": v.quarantined,
        "p99": fmt((v.metrics.get("latency") or {}).get("p99_s")),
        "overhead": fmt((v.metrics.get("overhead") or {}).get("total_bytes_per_delivered")),
    }


def counts(verdicts: list[RunVerdict]) -> dict:
    """The page's opening line: runs passed, failed, vacuous, quarantined lines, disagreements."""
    passed = sum(1 for v in verdicts if v.outcome == "passed")
    vacuous = sum(1 for v in verdicts if v.outcome == "vacuous")
    return {
        "runs": len(verdicts),
        "passed": passed,
        "failed": len(verdicts) - passed - vacuous,
        "vacuous": vacuous,
        "quarantined": sum(v.quarantined for v in verdicts),
        "disagree": sum(1 for v in verdicts if v.agrees_with_harness is False),
    }
