"""The HTML report: one page per campaign (or analyze call) with PNG plots drawn by matplotlib (Agg).

- a pass/fail matrix (runs x checks, or scenarios x checks for big campaigns);
- pass rates per scenario, protocol, protocol variant (resync mode, xmit_interval, capacity) and fault type;
- latency and overhead distributions, a table of control messages per delivered message per
  scenario, time blocked per sender (MCAST), latency per receiver, time from heal to sync;
- a timeline per run for every failing run (and one passing run per scenario): one panel per
  link with the seqnos sent, delivered, acked and retransmitted over time, XMIT-REQs, faults
  shaded, nodes down, syncs and new windows marked, sends never delivered and repeated
  deliveries crossed out, and the final windows; the failing checks' explanations on top; under
  the links, when the run has `view` events, one band per node showing the view it held (members
  and coordinator per interval, each change marked) with suspicions and merges marked, and the same
  as a table in the page (who believed what, and when). A multicast run has a panel per sender
  instead of per link: every receiver's delivered seqno of its multicasts over time, faults
  shaded, the time it was blocked and (MCAST) its window's fill.

Everything here is presentation over results already computed; it only reads.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from splitbrain.node import protocols

from .metrics import bin_edges
from .timeline import RunTimeline
from .verdicts import RunVerdict

MAX_MATRIX_RUNS = 60
# Campaign plots (pass-rate bars, per-run scatters, box plots) need this many runs to say anything:
# below it a report shows each run's verdict table, its timelines and its latency distribution.
CAMPAIGN_MIN_RUNS = 5
MAX_TIMELINES = 24
MAX_LINKS_PER_TIMELINE = 12
FAULT_COLORS = {
    "partition": "#d62728",
    "loss": "#ff7f0e",
    "delay": "#bcbd22",
    "duplicate": "#9467bd",
    "reorder": "#8c564b",
    "drop": "#e377c2",
    "pause": "#7f7f7f",
}
INSTANT_FAULTS = ("kill", "restart", "view", "sync", "heal", "resume")
PASS, FAIL, WARN, NA = "#4caf50", "#e53935", "#ffb300", "#d0d0d0"


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


# ---- timelines --------------------------------------------------------------------------------

# Membership events marked on a node's view band: kind -> (marker, color, legend label).
MEMBERSHIP_MARKS = {
    "suspect": ("x", "#b71c1c", "suspects a member (peer)"),
    "unsuspect": ("+", "#2e7d32", "unsuspects a member"),
    "merge": ("D", "#6a1b9a", "merge phase"),
    "leave_tx": ("<", "#455a64", "leaves"),
}
VIEW_COLORS = ("#a6cee3", "#b2df8a", "#fdbf6f", "#cab2d6", "#ffff99", "#fb9a99", "#80cbc4", "#d7ccc8")
MAX_VIEW_ROWS = 60


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
    """Suspicions, merges and leaves, as they are marked on the view bands."""
    return [e for e in rare if e["kind"] in MEMBERSHIP_MARKS and e["node"] != "harness"]


def _plot_views(ax, tl: RunTimeline, bands: dict[str, list[dict]]) -> None:
    """The view bands: one row per node, one colored segment per view it held, labelled."""
    nodes = list(bands)
    colors: dict[tuple, str] = {}
    for t0, t1, fault, _detail in _fault_spans(tl.rare, tl.end_t)[0]:
        ax.axvspan(t0, t1, color=FAULT_COLORS.get(fault, "#17becf"), alpha=0.08, lw=0)
    for row, node in enumerate(nodes):
        for span in bands[node]:
            key = (span["view_id"], span["coord"], tuple(span["members"]))
            color = colors.setdefault(key, VIEW_COLORS[len(colors) % len(VIEW_COLORS)])
            ax.broken_barh(
                [(span["t0"], span["t1"] - span["t0"])], (row - 0.38, 0.76), facecolors=color, edgecolor="#555", lw=0.6
            )
            ax.plot([span["t0"]], [row], "|", ms=14, mew=1.6, color="black")  # the change
            ax.text(span["t0"], row, " " + span["label"], va="center", ha="left", fontsize=7, clip_on=True)
        for t0, t1 in _down_spans(tl.rare, node, tl.end_t):
            ax.broken_barh([(t0, t1 - t0)], (row - 0.38, 0.76), facecolors="none", edgecolor="#444", hatch="///", lw=0)
    labelled = set()
    for e in membership_marks(tl.rare):
        if e["node"] not in bands:
            continue
        marker, color, label = MEMBERSHIP_MARKS[e["kind"]]
        ax.plot(
            [e["t"]],
            [nodes.index(e["node"]) + 0.3],
            marker,
            ms=6,
            color=color,
            mec="black" if marker == "D" else None,
            mew=0.5 if marker == "D" else 1.5,
            label=None if e["kind"] in labelled else label,
        )
        labelled.add(e["kind"])
        text = e.get("peer") or e.get("phase") or ""
        if text:
            ax.annotate(
                text,
                (e["t"], nodes.index(e["node"]) + 0.3),
                textcoords="offset points",
                xytext=(3, 2),
                fontsize=6.5,
                color=color,
            )
    ax.set_yticks(range(len(nodes)), nodes)
    ax.set_ylim(len(nodes) - 0.5, -0.5)
    ax.set_title("views held (members and coordinator; | = a new view)", loc="left", fontsize=10)
    ax.grid(alpha=0.25, axis="x")


def _fault_spans(rare: list[dict], end_t: float) -> tuple[list, list]:
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
            if fault not in ("heal",):
                instants.append((e["t"], f"{fault} off", detail))
            continue
        open_.remove(match)
        spans.append((match[0], e["t"], match[1], match[2]))
    for o in open_:
        spans.append((o[0], end_t, o[1], o[2]))
    return spans, instants


def blocked_spans(rare: list[dict], node: str, end_t: float) -> list[tuple[float, float]]:
    """(t0, t1) of each time `node`'s sender was blocked: a block event to the next unblock, or to
    the end of the run (the rare events, in time order)."""
    spans: list[tuple[float, float]] = []
    since = None
    for e in rare:
        if e["node"] != node:
            continue
        if e["kind"] == "block" and since is None:
            since = e["t"]
        elif e["kind"] == "unblock" and since is not None:
            spans.append((since, e["t"]))
            since = None
    if since is not None:
        spans.append((since, end_t))
    return spans


def _down_spans(rare: list[dict], node: str, end_t: float) -> list[tuple[float, float]]:
    spans, down_since = [], None
    for e in rare:
        if e["node"] != node:
            continue
        if e["kind"] == "node_stop" and e.get("reason") != "stop":
            down_since = e["t"]
        elif e["kind"] == "node_start" and down_since is not None:
            spans.append((down_since, e["t"]))
            down_since = None
    if down_since is not None:
        spans.append((down_since, end_t))
    return spans


def _mentions(detail: str, nodes: set[str]) -> set[str]:
    return {tok for tok in re.findall(r"[A-Za-z][A-Za-z0-9_]*", detail) if tok in nodes}


def _link_notes(verdict: RunVerdict | None, link: str) -> list[str]:
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
        if c["name"] == "stuck_retransmission":
            if any(s["link"] == link for s in d.get("stuck", [])):
                notes.append("retransmission stuck")
    return notes


def _time_axes(axes: list, origin: float | None) -> None:
    """Label the event clock, and show scenario time on top when the two differ (a live run's
    clock starts before the scenario does: a partition at 2.0 s is shaded from 2.0 + origin)."""
    if origin is None:
        axes[-1].set_xlabel("time (s), the nodes' event clock")
    elif abs(origin) < 1e-9:
        axes[-1].set_xlabel("time (s) = scenario time")
    else:
        axes[-1].set_xlabel(f"run clock (s); scenario time 0 = run clock {origin:.2f} s")
        top = axes[0].secondary_xaxis("top", functions=(lambda x: x - origin, lambda x: x + origin))
        top.set_xlabel("scenario time (s)", fontsize=8)
        top.tick_params(labelsize=7)


def plot_timeline(tl: RunTimeline, verdict: RunVerdict | None, path: Path) -> Path:
    """One PNG: a panel per link, seqnos over time, with faults, syncs, losses and final windows;
    for a multicast run a panel per sender instead (plot_sender)."""
    fig = draw_timeline(tl, verdict)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def draw_timeline(tl: RunTimeline, verdict: RunVerdict | None) -> Figure:
    """The figure plot_timeline saves (tests measure where its texts landed)."""
    senders = sorted(tl.senders)[:MAX_LINKS_PER_TIMELINE]
    links = [] if senders else sorted(tl.links)[:MAX_LINKS_PER_TIMELINE]
    nodes = {n for link in tl.links for n in link}
    spans, instants = _fault_spans(tl.rare, tl.end_t)
    fail_text = []
    if verdict is not None:
        for c in verdict.checks + verdict.advisory:
            if not c["passed"]:
                fail_text.append(f"{c['name']}: {c['explanation']}")
    wrapped = [textwrap.fill(t, 165, subsequent_indent="    ") for t in fail_text[:6]]
    text_lines = sum(w.count("\n") + 1 for w in wrapped)
    bands = view_bands(tl.rare, tl.end_t)
    n = max(1, len(links) + len(senders))
    panel_h = 2.6
    origin = verdict.meta.get("origin_t") if verdict else None
    top_axis = origin is not None and abs(origin) >= 1e-9  # scenario time on top (_time_axes)
    # Inches: the title, the failing checks' explanations, and (above the first panel) its label
    # over the scenario-time axis, so that none of them runs into another.
    head_h = 0.55 + (0.17 * text_lines + 0.3 if text_lines else 0.0) + (0.45 if top_axis else 0.0)
    foot_h = 0.55  # x axis label
    views_h = 0.45 * len(bands) + 0.5 if bands else 0.0
    height = max(head_h + panel_h * n + views_h + foot_h, head_h + 4.4)  # room for the legend on one panel
    ratios = [panel_h] * n + ([views_h] if bands else [])
    fig, grid = plt.subplots(
        len(ratios), 1, figsize=(15, height), sharex=True, squeeze=False, gridspec_kw={"height_ratios": ratios}
    )
    axes = [row[0] for row in grid][:n]
    views_ax = grid[n][0] if bands else None
    fig.subplots_adjust(top=1 - head_h / height, bottom=foot_h / height, left=0.055, right=0.82, hspace=0.42)
    outcome = verdict.outcome.upper() if verdict else "?"
    scen = verdict.meta.get("scenario") if verdict else None
    title = f"{tl.run_id}  —  {outcome}" + (
        f"  (scenario {scen or '-: no scenario.yaml'}, expect {verdict.expect})" if verdict else ""
    )
    fig.text(
        0.01,
        1 - 0.12 / height,
        title,
        fontsize=12,
        fontweight="bold",
        ha="left",
        va="top",
        color=FAIL if outcome == "FAILED" else "black",
    )
    if wrapped:
        fig.text(
            0.01,
            1 - 0.45 / height,
            "\n".join(wrapped),
            fontsize=8.5,
            va="top",
            ha="left",
            family="monospace",
            color="#5d1010",
        )
    legend_faults: dict[str, Patch] = {}
    for ax, sender in zip(axes, senders):
        pad = 30 if top_axis and ax is axes[0] else 6
        plot_sender(ax, tl, sender, spans, nodes | set(tl.senders), legend_faults, title_pad=pad)
    for ax, link in zip(axes, links):
        src, dst = link
        s = tl.links[link]
        key = f"{src}->{dst}"
        for t0, t1, fault, detail in spans:
            strong = not _mentions(detail, nodes) or {src, dst} <= _mentions(detail, nodes)
            color = FAULT_COLORS.get(fault, "#17becf")
            ax.axvspan(t0, t1, color=color, alpha=0.18 if strong else 0.06, lw=0)
            legend_faults.setdefault(fault, Patch(color=color, alpha=0.3, label=f"fault: {fault}"))
        for node in (src, dst):
            for t0, t1 in _down_spans(tl.rare, node, tl.end_t):
                ax.axvspan(t0, t1, facecolor="none", edgecolor="#444", hatch="///", lw=0)
                ax.text(
                    (t0 + t1) / 2,
                    0.97,
                    f"{node} down",
                    transform=ax.get_xaxis_transform(),
                    ha="center",
                    va="top",
                    fontsize=8,
                    color="#333",
                )
        for t, fault, detail in instants:
            if fault == "view" or not ({src, dst} & _mentions(detail, nodes) or not _mentions(detail, nodes)):
                continue
            ax.axvline(t, color="black", lw=1)
            ax.text(t, 0.99, f" {fault}", transform=ax.get_xaxis_transform(), fontsize=7.5, va="top")
        if s.sent:
            ax.plot(*zip(*s.sent), ".", ms=2.5, color="tab:blue", label="sent (highest seqno)")
        if s.delivered:
            ax.plot(*zip(*s.delivered), ".", ms=2.5, color="tab:green", label="delivered")
        if s.acked:
            ax.step(
                *zip(*s.acked), where="post", lw=1.2, marker="_", ms=7, color="#1b5e20", label="acked (send window low)"
            )
        if s.retransmitted:
            ax.plot(*zip(*s.retransmitted), "x", ms=4, color="tab:orange", label="retransmitted")
        if s.xmit_reqs:
            ax.plot(
                [t for t, _ in s.xmit_reqs],
                [0.02] * len(s.xmit_reqs),
                "|",
                ms=9,
                color="tab:purple",
                transform=ax.get_xaxis_transform(),
                label="XMIT-REQ",
            )
        if s.lost:
            ax.plot(
                [m[0] for m in s.lost],
                [m[1] for m in s.lost],
                "X",
                ms=8,
                color=FAIL,
                mec="black",
                mew=0.5,
                label="sent, never delivered",
            )
        if s.again:
            ax.plot(
                [m[0] for m in s.again],
                [m[1] for m in s.again],
                "D",
                ms=6,
                color=WARN,
                mec="black",
                mew=0.5,
                label="delivered again",
            )
        _mark_rare(ax, tl, src, dst)
        notes = _link_notes(verdict, key)
        ax.set_title(
            f"{src} \u2192 {dst}" + (f"   [{', '.join(notes)}]" if notes else ""),
            loc="left",
            fontsize=10,
            color=FAIL if notes else "black",
            # Above the scenario-time axis's ticks and label on the first panel.
            pad=30 if top_axis and ax is axes[0] else 6,
        )
        ax.set_ylabel("seqno")
        ax.grid(alpha=0.25)
        ax.margins(x=0.01)
    if not links and not senders:
        axes[0].text(0.5, 0.5, "no DATA on any link", ha="center", va="center", transform=axes[0].transAxes)
    if views_ax is not None:
        _plot_views(views_ax, tl, bands)
    all_axes = axes + ([views_ax] if views_ax is not None else [])
    _time_axes(all_axes, origin)
    handles, labels = [], []
    for ax in all_axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    handles += list(legend_faults.values())
    labels += [h.get_label() for h in legend_faults.values()]
    axes[0].legend(handles, labels, loc="upper left", bbox_to_anchor=(1.005, 1.02), fontsize=8, frameon=False)
    return fig


RECEIVER_COLORS = ("tab:green", "tab:purple", "tab:red", "tab:pink", "tab:olive", "tab:cyan", "tab:gray", "gold")
FILL_COLOR = "#333333"


def window_fill(rare: list[dict], node: str) -> list[tuple[float, int]]:
    """(t, unacked multicasts) of `node`'s send window over time: MCAST's window_fill gauge (high -
    low, at most one per retransmit run) and the block/unblock events (the window full, then
    purged), in time order; empty for a protocol without them."""
    return [
        (e["t"], (e.get("high") or 0) - (e.get("low") or 0))
        for e in rare
        if e["node"] == node and e["kind"] in ("window_fill", "block", "unblock") and e.get("low") is not None
    ]


def blocked_total(rare: list[dict], node: str, end_t: float) -> tuple[int, float]:
    """(blocks, seconds blocked) of `node`'s sender, from blocked_spans."""
    spans = blocked_spans(rare, node, end_t)
    return len(spans), sum(t1 - t0 for t0, t1 in spans)


def plot_sender(
    ax, tl: RunTimeline, sender: str, spans: list, nodes: set, legend_faults: dict, title_pad: float = 6
) -> None:
    """A multicast sender's panel: the highest seqno it multicast, each receiver's highest
    delivered of its multicasts, faults shaded (strong where they name the sender), the time it
    was blocked, and on a right axis its window's fill (MCAST: unacked multicasts)."""
    series = tl.senders[sender]
    for t0, t1, fault, detail in spans:
        named = _mentions(detail, nodes)
        color = FAULT_COLORS.get(fault, "#17becf")
        ax.axvspan(t0, t1, color=color, alpha=0.18 if not named or sender in named else 0.06, lw=0)
        legend_faults.setdefault(fault, Patch(color=color, alpha=0.3, label=f"fault: {fault}"))
    for t0, t1 in _down_spans(tl.rare, sender, tl.end_t):
        ax.axvspan(t0, t1, facecolor="none", edgecolor="#444", hatch="///", lw=0)
    blocks, blocked_s = blocked_total(tl.rare, sender, tl.end_t)
    for t0, t1 in blocked_spans(tl.rare, sender, tl.end_t):
        ax.axvspan(t0, t1, color="tab:orange", alpha=0.15, lw=0, label="sender blocked (window full)")
    if series.sent:
        ax.plot(*zip(*series.sent), ".", ms=3, color="tab:blue", label="multicast (highest seqno sent)")
    receivers = sorted(r for r in series.delivered if r != sender)
    everyone = sorted({r for s in tl.senders.values() for r in s.delivered} | set(tl.senders))
    for receiver in receivers:
        color = RECEIVER_COLORS[everyone.index(receiver) % len(RECEIVER_COLORS)]
        # A step: the highest delivered holds until the next delivery (flat across a partition).
        ax.step(*zip(*series.delivered[receiver]), where="post", lw=1.1, color=color, label=f"delivered at {receiver}")
    fill = window_fill(tl.rare, sender)
    if fill:
        right = ax.twinx()
        right.step(*zip(*fill), where="post", lw=1.0, ls="--", color=FILL_COLOR, alpha=0.8)
        right.set_ylabel("window fill", fontsize=8, color=FILL_COLOR)
        right.tick_params(labelsize=7, colors=FILL_COLOR)
        right.set_ylim(bottom=0)
        ax.plot([], [], "--", color=FILL_COLOR, label="window fill (unacked, right axis)")
    title = f"{sender} multicasts → every member"
    if blocks:
        title += f"   [blocked {blocked_s:.2f} s in {blocks} block(s)]"
    ax.set_title(title, loc="left", fontsize=10, pad=title_pad)
    ax.set_ylabel("seqno")
    ax.grid(alpha=0.25)
    ax.margins(x=0.01)


def _mark_rare(ax, tl: RunTimeline, src: str, dst: str) -> None:
    """Blocked senders, syncs, new receive windows, SEND_FIRST_SEQNO, drops and final windows of one link."""
    end = tl.end_t
    labelled = set()
    finals: list[tuple[str, str]] = []  # (color, text) of the final windows, drawn last
    last_sync_label = [-math.inf]
    min_gap = max(end, 1e-9) * 0.03

    def once(label: str) -> str | None:
        if label in labelled:
            return None
        labelled.add(label)
        return label

    # A sender blocked on a full window: shaded on its links, where the gap between the sent and
    # the acked lines is the window's fill.
    for t0, t1 in blocked_spans(tl.rare, src, end):
        ax.axvspan(t0, t1, color="tab:orange", alpha=0.15, lw=0, label=once("sender blocked (window full)"))
    for e in tl.rare:
        kind, node, peer = e["kind"], e["node"], e.get("peer")
        on_link = (node, peer) in ((src, dst), (dst, src))
        if not on_link:
            continue
        if kind == "sync_tx":
            ax.axvline(e["t"], color="tab:cyan", ls="--", lw=1, label=once("resync (sync_tx)"))
            if e["t"] - last_sync_label[0] > min_gap:  # one label per burst of resync messages
                last_sync_label[0] = e["t"]
                ax.text(
                    e["t"], 0.97, " sync", transform=ax.get_xaxis_transform(), fontsize=7.5, color="#006064", va="top"
                )
        elif kind == "first_seqno_tx":
            ax.axvline(e["t"], color="tab:olive", ls=":", lw=1, label=once("first_seqno_tx"))
        elif (
            kind == "conn_state"
            and node == dst
            and e.get("side") == "recv"
            and str(e.get("reason") or "").startswith("new_window")
        ):
            y = e.get("low") or 0
            ax.plot([e["t"]], [y], "^", ms=8, color="tab:cyan", mec="black", mew=0.5, label=once("new receive window"))
            ax.annotate(f"conn {e.get('conn_id')}", (e["t"], y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        elif kind == "drop" and node == dst and e.get("seqno") is not None:
            ax.plot(
                [e["t"]],
                [e["seqno"]],
                "s",
                ms=3,
                mfc="none",
                mew=0.6,
                color="#777",
                alpha=0.6,
                label=once("dropped at receiver"),
            )
        elif kind == "window" and e.get("final"):
            if node == src and e.get("side") == "send":
                ax.plot(
                    [end, end],
                    [e.get("low") or 0, e.get("high") or 0],
                    "-",
                    lw=6,
                    color="tab:blue",
                    alpha=0.5,
                    solid_capstyle="butt",
                    label=once("final send window (HA..HS)"),
                )
                finals.append(("tab:blue", f"send HA={e.get('low')} HS={e.get('high')} conn {e.get('conn_id')}"))
            elif node == dst and e.get("side") == "recv":
                ax.plot(
                    [end],
                    [e.get("low") or 0],
                    "_",
                    ms=18,
                    mew=3,
                    color="tab:green",
                    label=once("final recv window (delivered)"),
                )
                finals.append(("tab:green", f"recv delivered={e.get('low')} conn {e.get('conn_id')}"))
    # The final windows' values in the panel's lower right corner, inside the axes: next to the
    # bars at the right edge they ran off the plot and over the lines.
    for i, (color, text) in enumerate(reversed(finals)):
        ax.text(
            0.995,
            0.03 + 0.09 * i,
            text,
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=7.5,
            color=color,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
        )


# ---- campaign plots ---------------------------------------------------------------------------


def plot_matrix(verdicts: list[RunVerdict], path: Path) -> Path:
    """Runs x checks (few runs) or scenarios x checks with failure fractions (many runs)."""
    names: list[str] = []
    for v in verdicts:
        for c in v.checks + v.advisory:
            if c["name"] not in names:
                names.append(c["name"])
    cols = names + ["outcome"]
    if len(verdicts) <= MAX_MATRIX_RUNS:
        rows = [v.run_id for v in verdicts]
        cells = []
        for v in verdicts:
            by = {c["name"]: c for c in v.checks}
            adv = {c["name"]: c for c in v.advisory}
            row = []
            for name in names:
                if name in by and by[name].get("vacuous"):
                    row.append((WARN, "nothing"))  # judged nothing: neither a pass nor a failure
                elif name in by:
                    expected_fail = v.expect == f"fail:{name}"
                    ok = by[name]["passed"] != expected_fail
                    row.append(
                        (
                            PASS if ok else FAIL,
                            (
                                "fail*"
                                if expected_fail and not by[name]["passed"]
                                else "pass"
                                if by[name]["passed"]
                                else "FAIL"
                            ),
                        )
                    )
                elif name in adv:
                    row.append((PASS if adv[name]["passed"] else WARN, "ok" if adv[name]["passed"] else "stuck"))
                else:
                    row.append((NA, "-"))
            row.append((PASS if v.outcome == "passed" else WARN if v.outcome == "vacuous" else FAIL, v.outcome))
            cells.append(row)
        footnote = (
            "fail* = failed as the scenario expects (expect: {fail: check}); nothing = the check judged "
            "nothing (vacuous: no pass); stuck = advisory only"
        )
    else:
        by_scen: dict[str, list[RunVerdict]] = {}
        for v in verdicts:
            by_scen.setdefault(v.meta.get("scenario") or "(none)", []).append(v)
        rows, cells = [], []
        for scen, vs in sorted(by_scen.items()):
            rows.append(f"{scen} ({len(vs)} runs)")
            row = []
            for name in cols:
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
                    row.append((WARN, f"nothing x{nothing}") if nothing else (NA, "-"))
                    continue
                frac = bad / total
                row.append(
                    (
                        PASS if frac == 0 else WARN if frac < 0.5 else FAIL,
                        f"{bad}/{total}" + (f" +{nothing} nothing" if nothing else ""),
                    )
                )
            cells.append(row)
        footnote = (
            "cells: runs failing the check / runs it judged something in; +N nothing = runs in which "
            "it judged nothing (outcome: vacuous runs)"
        )
    fig_h = 1.2 + 0.32 * len(rows)
    fig_w = max(7, 2.2 + 1.45 * len(cols) + 0.075 * max(len(r) for r in rows))
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    for i, row in enumerate(cells):
        for j, (color, text) in enumerate(row):
            ax.add_patch(plt.Rectangle((j, i), 1, 1, facecolor=color, edgecolor="white", lw=2))
            ax.text(
                j + 0.5,
                i + 0.5,
                text,
                ha="center",
                va="center",
                fontsize=8,
                color="white" if color in (PASS, FAIL) else "black",
            )
    ax.set_xlim(0, len(cols))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([j + 0.5 for j in range(len(cols))])
    ax.set_xticklabels(cols, rotation=20, ha="right", fontsize=9)
    ax.set_yticks([i + 0.5 for i in range(len(rows))])
    ax.set_yticklabels(rows, fontsize=8)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title("pass/fail matrix", loc="left", fontsize=11)
    fig.text(0.01, 0.005, footnote, fontsize=7.5, color="#555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_pass_rates(summary: dict, path: Path) -> Path:
    panels = [
        ("by_scenario", "scenario"),
        ("by_protocol", "protocol"),
        ("by_variant", "variant"),
        ("by_fault_type", "fault_type"),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(16, 1.0 + 0.35 * max([4] + [len(summary.get(k, [])) for k, _ in panels])))
    for ax, (key, col) in zip(axes, panels):
        rows = summary.get(key, [])
        labels = [str(r[col]) for r in rows]
        rates = [100.0 * r["pass_rate"] for r in rows]
        ax.barh(
            range(len(rows)), rates, height=0.6, color=[PASS if x == 100 else WARN if x >= 50 else FAIL for x in rates]
        )
        for i, r in enumerate(rows):
            ax.text(min(rates[i], 100) + 1, i, f"{r['passed']}/{r['runs']}", va="center", fontsize=8)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_xlim(0, 125)
        ax.set_ylim(max(len(rows), 4) - 0.5, -0.5)
        ax.set_xlabel("pass rate (%)")
        ax.set_title(f"by {col.replace('_', ' ')}", loc="left", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _hbox(ax, data, **kw):
    """Horizontal box plot (matplotlib >= 3.10 spells it orientation=, older ones vert=False)."""
    try:
        return ax.boxplot(data, orientation="horizontal", widths=0.6, **kw)
    except TypeError:
        return ax.boxplot(data, vert=False, widths=0.6, **kw)


def _by_scenario(verdicts: list[RunVerdict]) -> dict[str, list[RunVerdict]]:
    out: dict[str, list[RunVerdict]] = {}
    for v in verdicts:
        out.setdefault(v.meta.get("scenario") or "(none)", []).append(v)
    return dict(sorted(out.items()))


def plot_latency(verdicts: list[RunVerdict], path: Path, per_run: bool = True) -> Path | None:
    """The latency distribution per scenario and, with `per_run`, a scatter of each run's p50 and p99."""
    groups = _by_scenario(verdicts)
    fig, panels = plt.subplots(1, 2 if per_run else 1, figsize=(14, 4.2) if per_run else (8, 4.2), squeeze=False)
    ax = panels[0][0]
    bx = panels[0][1] if per_run else None
    drawn = False
    for scen, vs in groups.items():
        bins: dict[int, int] = {}
        for v in vs:
            for b, n in v.metrics.get("latency_hist", []):
                bins[b] = bins.get(b, 0) + n
        total = sum(bins.values())
        if not total:
            continue
        drawn = True
        xs, ys = [], []
        for b in range(min(bins), max(bins) + 1):
            lo, hi = bin_edges(b)
            xs += [lo, hi]
            ys += [bins.get(b, 0) / total] * 2
        ax.plot(xs, ys, label=f"{scen} ({total} msgs)")
        p99 = [v.metrics["latency"]["p99_s"] for v in vs if v.metrics.get("latency")]
        p50 = [v.metrics["latency"]["p50_s"] for v in vs if v.metrics.get("latency")]
        if bx is not None:
            bx.scatter(p50, p99, s=12, label=scen, alpha=0.7)
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xscale("log")
    ax.set_xlabel("delivery latency, send to first delivery (s)")
    ax.set_ylabel("fraction of messages")
    ax.set_title("latency distribution", loc="left", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.25)
    if bx is not None:
        bx.set_xscale("log")
        bx.set_yscale("log")
        bx.set_xlabel("p50 latency per run (s)")
        bx.set_ylabel("p99 latency per run (s)")
        bx.set_title("per run: median vs tail", loc="left", fontsize=10)
        bx.grid(alpha=0.25)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


# Overhead panels: the shared control traffic, then each protocol's own (node.protocols), titled
# by the kind logged (protocols other than the one a run used show no data and are left out).
OVERHEAD_MAX_PANELS = 6


def plot_overhead(verdicts: list[RunVerdict], path: Path) -> Path | None:
    groups = _by_scenario(verdicts)
    shown = [
        (key, kind)
        for key, kind in protocols.overhead_kinds().items()
        if any((v.metrics.get("overhead") or {}).get(key, {}).get("messages") for v in verdicts)
    ]
    shown = shown[:OVERHEAD_MAX_PANELS] or [("acks", "ack_tx")]
    fig, axes = plt.subplots(1, len(shown), figsize=(16, 0.8 + 0.45 * max(3, len(groups))), sharey=True, squeeze=False)
    axes = axes[0]
    any_data = False
    for ax, (key, label) in zip(axes, shown):
        data, names = [], []
        for scen, vs in groups.items():
            vals = [
                v.metrics["overhead"][key]["per_delivered"]
                for v in vs
                if v.metrics.get("overhead")
                and key in v.metrics["overhead"]
                and v.metrics["overhead"][key]["per_delivered"] is not None
            ]
            data.append(vals or [math.nan])
            names.append(scen)
            any_data |= bool(vals)
        _hbox(ax, data, showfliers=True, flierprops={"markersize": 3})
        ax.set_yticks(range(1, len(names) + 1))
        ax.set_yticklabels(names, fontsize=8)
        ax.set_title(f"{label} per delivered msg", loc="left", fontsize=9)
        ax.grid(alpha=0.25, axis="x")
    if not any_data:
        plt.close(fig)
        return None
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_heal_sync(verdicts: list[RunVerdict], path: Path) -> Path | None:
    groups = _by_scenario(verdicts)
    data, names, never = [], [], []
    for scen, vs in groups.items():
        vals = [h["sync_s"] for v in vs for h in v.metrics.get("heals", []) if h["sync_s"] is not None]
        nev = sum(1 for v in vs for h in v.metrics.get("heals", []) if h["sync_s"] is None)
        if vals or nev:
            data.append(vals or [math.nan])
            names.append(scen)
            never.append(nev)
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.5 * max(2, len(names))))
    _hbox(ax, data)
    for i, vals in enumerate(data, start=1):  # the points too: a campaign may have few heals
        ax.scatter(
            vals,
            [i + 0.25 * ((k * 0.618) % 1 - 0.5) for k in range(len(vals))],
            s=8,
            alpha=0.5,
            color="tab:blue",
            zorder=3,
        )
    ax.set_yticks(range(1, len(names) + 1))
    ax.set_yticklabels([f"{n}  (never synced: {k})" if k else n for n, k in zip(names, never)], fontsize=8)
    ax.set_xlabel("time from a heal until every message sent before it was delivered (s)")
    ax.set_title("heal to sync", loc="left", fontsize=10)
    ax.grid(alpha=0.25, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


# ---- the page ---------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:8px 0} td,th{border:1px solid #ddd;padding:3px 7px;
text-align:left;vertical-align:top} th{background:#f4f4f4} .passed{color:#2e7d32;font-weight:600}
.failed,.error{color:#c62828;font-weight:600} .vacuous{color:#ef6c00;font-weight:600} .muted{color:#777}
img{max-width:100%;border:1px solid #eee}
code{font-size:12px} .warn{color:#b26a00;font-weight:600}
"""


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _table(rows: list[dict], cols: list[str]) -> str:
    out = ["<table><tr>" + "".join(f"<th>{_e(c)}</th>" for c in cols) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{_e(_fmt(r.get(c)))}</td>" for c in cols) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _fmt(x):
    if isinstance(x, float):
        return f"{x:.3f}" if abs(x) < 1e6 else f"{x:.3g}"
    return x


def write_report(
    out_dir: str | os.PathLike,
    verdicts: list[RunVerdict],
    summary: dict,
    timelines: dict[str, RunTimeline],
    *,
    title: str,
    quarantine: list[dict] | None = None,
    extra: dict | None = None,
) -> Path:
    """Write <out_dir>/index.html and its PNGs; returns the page's path."""
    out = Path(out_dir)
    img = out / "img"
    img.mkdir(parents=True, exist_ok=True)
    by_id = {v.run_id: v for v in verdicts}
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
        f"<style>{_CSS}</style></head><body><h1>{_e(title)}</h1>"
    ]
    passed = sum(1 for v in verdicts if v.outcome == "passed")
    vacuous = sum(1 for v in verdicts if v.outcome == "vacuous")
    quarantined = sum(v.quarantined for v in verdicts)
    disagree = [v for v in verdicts if v.agrees_with_harness is False]
    parts.append(
        f"<p><b>{len(verdicts)}</b> run(s): <span class='passed'>{passed} passed</span>, "
        f"<span class='failed'>{len(verdicts) - passed - vacuous} failed</span>, "
        f"<span class='vacuous'>{vacuous} vacuous</span> (a check judged nothing). "
        f"Quarantined lines: <b>{quarantined}</b>. "
        f"Runs where the harness's own verdict.json disagrees: <b>{len(disagree)}</b>.</p>"
    )
    if extra:
        parts.append("<p class='muted'>" + " · ".join(f"{_e(k)}: {_e(_fmt(v))}" for k, v in extra.items()) + "</p>")

    # What a reader of a few runs came for leads: each run's verdict with its evidence, then the
    # timelines and views; plots over runs follow only when there are enough runs for them.
    def add_timelines() -> None:
        if timelines:
            parts.append(
                "<h2>Timelines</h2><p class='muted'>One panel per link (sender \u2192 receiver): dots are the "
                "highest seqno sent (blue) and delivered (green) per time slice, the dark step is the highest "
                "acked, orange crosses are retransmissions, purple ticks XMIT-REQs; red X marks sends never "
                "delivered, yellow diamonds repeated deliveries; shaded bands are faults, hatched bands a node "
                "down, dashed cyan lines resync messages (sync_tx), triangles new receive windows; the bars at "
                "the right edge are the final windows. A multicast run has one panel per "
                "sender instead: blue dots its highest seqno multicast, one colored line per receiver with the "
                "highest of its multicasts that receiver delivered, faults shaded (strongly where they name the "
                "sender), orange bands the time it was blocked (the total in the title) and, for a "
                "fixed-window protocol, the dashed step on the right axis its window's fill "
                "(multicasts not acked by every member).</p>"
            )
            for run_id, tl in timelines.items():
                safe = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)
                p = plot_timeline(tl, by_id.get(run_id), img / f"timeline-{safe}.png")
                v = by_id.get(run_id)
                parts.append(
                    f"<h3 id='{_e(safe)}'>{_e(run_id)} <span class='{_e(v.outcome if v else '')}'>"
                    f"{_e(v.outcome if v else '')}</span></h3><img src='img/{p.name}'>"
                )
                parts.append(_views_table(tl))

    campaign = len(verdicts) >= CAMPAIGN_MIN_RUNS
    if not campaign:
        for v in verdicts:
            parts.append(_verdict_section(v))
        add_timelines()
    if len(verdicts) > 1:
        parts.append("<h2>Pass/fail matrix</h2>")
        parts.append(f"<img src='img/{plot_matrix(verdicts, img / 'matrix.png').name}'>")
    if summary and campaign:
        parts.append("<h2>Pass rates</h2>")
        parts.append(f"<img src='img/{plot_pass_rates(summary, img / 'pass_rates.png').name}'>")
        for key, col in (
            ("by_scenario", "scenario"),
            ("by_protocol", "protocol"),
            ("by_variant", "variant"),
            ("by_fault_type", "fault_type"),
        ):
            parts.append(_table(summary.get(key, []), [col, "runs", "passed", "pass_rate"]))
        if summary.get("check_failures"):
            parts.append(
                "<p>Failing checks per scenario:</p>" + _table(summary["check_failures"], ["scenario", "check", "runs"])
            )
    if campaign:
        parts.append("<h2>Latency, overhead, heal to sync</h2>")
        for name, fn in (
            ("latency.png", plot_latency),
            ("overhead.png", plot_overhead),
            ("heal_sync.png", plot_heal_sync),
        ):
            p = fn(verdicts, img / name)
            if p is not None:
                parts.append(f"<p><img src='img/{p.name}'></p>")
    else:
        parts.append("<h2>Latency and overhead</h2>")
        p = plot_latency(verdicts, img / "latency.png", per_run=False)
        if p is not None:
            parts.append(f"<p><img src='img/{p.name}'></p>")
    parts.append(
        "<p class='muted'>Overhead counts the messages each node logged sending ("
        + ", ".join(protocols.overhead_kinds().values())
        + ") divided by the deliveries of the "
        "run (a multicast counts once per member that delivered it, the sender's own delivery "
        "included); the runs table gives their bytes per delivered message. "
        "Bytes are DATA payloads and the protocol headers of control messages (frame and transport "
        "headers not counted).</p>"
    )
    parts.append(_overhead_table(verdicts))
    parts.append(_blocked_table(verdicts))
    parts.append(_latency_table(verdicts))
    if campaign:
        add_timelines()
    parts.append("<h2>Runs</h2>")
    parts.append(
        "<table><tr><th>run</th><th>scenario</th><th>seed</th><th>backend</th><th>outcome</th>"
        "<th>harness</th><th>checks</th><th>advisory</th><th>events</th><th>quarantined</th>"
        "<th>p99 latency (s)</th><th>overhead bytes / delivered</th></tr>"
    )
    for v in verdicts:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", v.run_id)
        name = f"<a href='#{_e(safe)}'>{_e(v.run_id)}</a>" if v.run_id in timelines else _e(v.run_id)
        checks = "<br>".join(
            f"<span class='{_check_class(c)}'>{_e(c['name'])}</span>: {_e(c['explanation'])}" for c in v.checks
        )
        if v.error:
            checks = f"<span class='error'>{_e(v.error)}</span><br>" + checks
        adv = "<br>".join(
            f"<span class='{'passed' if c['passed'] else 'warn'}'>{_e(c['name'])}</span>"
            + ("" if c["passed"] else f": {_e(c['explanation'])}")
            for c in v.advisory
        )
        lat = (v.metrics.get("latency") or {}).get("p99_s")
        overhead = (v.metrics.get("overhead") or {}).get("total_bytes_per_delivered")
        parts.append(
            f"<tr><td>{name}</td><td>{_e(v.meta.get('scenario'))}</td><td>{_e(v.meta.get('seed'))}</td>"
            f"<td>{_e(v.meta.get('backend'))}</td><td class='{_e(v.outcome)}'>{_e(v.outcome)}</td>"
            f"<td>{_e(v.harness_outcome)}</td><td>{checks}</td><td>{adv}</td>"
            f"<td>{_e(v.metrics.get('events'))}</td><td>{_e(v.quarantined)}</td>"
            f"<td>{_e(_fmt(lat))}</td><td>{_e(_fmt(overhead))}</td></tr>"
        )
    parts.append("</table>")
    if quarantine:
        parts.append(f"<h2>Quarantined lines (first {len(quarantine)})</h2>")
        parts.append(_table(quarantine, ["run_id", "src", "line", "reason", "raw"]))
    parts.append(
        "<p class='muted'>verdicts.json next to this page holds every verdict, check detail and "
        "metric.</p></body></html>"
    )
    page = out / "index.html"
    page.write_text("\n".join(parts), encoding="utf-8")
    (out / "verdicts.json").write_text(
        json.dumps([v.to_dict() for v in verdicts], indent=1, default=str), encoding="utf-8"
    )
    return page


MAX_TABLE_ROWS = 60


def _verdict_section(v: RunVerdict) -> str:
    """One run's outcome and every check with its explanation (the evidence), as a table."""
    rows = [
        "<tr><th>check</th><th>result</th><th>judged</th><th>explanation</th></tr>",
        *(
            f"<tr><td>{_e(c['name'])}</td><td class='{_check_class(c)}'>"
            f"{'passed' if c['passed'] else 'vacuous' if c.get('judged') == 0 else 'failed'}</td>"
            f"<td>{_e(c.get('judged', ''))}</td><td>{_e(c['explanation'])}</td></tr>"
            for c in v.checks
        ),
        *(
            f"<tr><td>{_e(c['name'])} (advisory)</td><td class='{'passed' if c['passed'] else 'warn'}'>"
            f"{'passed' if c['passed'] else 'warning'}</td><td>{_e(c.get('judged', ''))}</td>"
            f"<td>{_e(c['explanation'])}</td></tr>"
            for c in v.advisory
        ),
    ]
    error = f"<p class='error'>{_e(v.error)}</p>" if v.error else ""
    scen = v.meta.get("scenario")
    return (
        f"<h2>Verdict: {_e(v.run_id)} <span class='{_e(v.outcome)}'>{_e(v.outcome.upper())}</span></h2>"
        f"<p class='muted'>scenario {_e(scen or '-')}, seed {_e(v.meta.get('seed'))}, backend "
        f"{_e(v.meta.get('backend'))}, expect {_e(v.expect)}</p>{error}<table>{''.join(rows)}</table>"
    )


def _overhead_table(verdicts: list[RunVerdict]) -> str:
    """Per scenario, the mean over its runs of each control message kind per delivered message,
    for the kinds some run sent (NAKACK2's STABLE, MCAST's ACK and XMIT-REQ, UNICAST3's SYNC...)."""
    kinds = [
        (key, kind)
        for key, kind in protocols.overhead_kinds().items()
        if any(((v.metrics.get("overhead") or {}).get(key) or {}).get("messages") for v in verdicts)
    ]
    if not kinds:
        return ""
    rows = []
    for scen, vs in _by_scenario(verdicts).items():
        row: dict = {"scenario": scen, "runs": len(vs)}
        for key, kind in kinds:
            vals = [
                v.metrics["overhead"][key]["per_delivered"]
                for v in vs
                if ((v.metrics.get("overhead") or {}).get(key) or {}).get("per_delivered") is not None
            ]
            row[kind] = sum(vals) / len(vals) if vals else None
        rows.append(row)
    return "<p>Control messages per delivered message (mean over runs):</p>" + _table(
        rows, ["scenario", "runs", *[kind for _, kind in kinds]]
    )


def _blocked_table(verdicts: list[RunVerdict]) -> str:
    """MCAST: the time each sender was blocked on a full window, per run (metrics.blocked)."""
    rows = [
        {"run": v.run_id, "sender": node, "blocks": b["blocks"], "seconds blocked": b["seconds"]}
        for v in verdicts
        for node, b in ((v.metrics.get("blocked") or {}).get("by_node") or {}).items()
    ]
    if not rows:
        return ""
    more = f"<p class='muted'>{len(rows) - MAX_TABLE_ROWS} more row(s) in verdicts.json.</p>"
    return (
        "<p>Time blocked per sender (sends waiting for acks on a full window; a block still "
        "open at the end counts to the run's end):</p>"
        + _table(rows[:MAX_TABLE_ROWS], ["run", "sender", "blocks", "seconds blocked"])
        + (more if len(rows) > MAX_TABLE_ROWS else "")
    )


def _latency_table(verdicts: list[RunVerdict]) -> str:
    """Delivery latency per receiver and run (a multicast: from its send to each other member's
    delivery), from metrics.latency_by_receiver."""
    rows = [
        {"run": v.run_id, "receiver": dst, "n": lat["n"], "p50 (s)": lat["p50_s"], "p99 (s)": lat["p99_s"]}
        | {"max (s)": lat["max_s"]}
        for v in verdicts
        for dst, lat in (v.metrics.get("latency_by_receiver") or {}).items()
    ]
    if not rows:
        return ""
    more = f"<p class='muted'>{len(rows) - MAX_TABLE_ROWS} more row(s) in verdicts.json.</p>"
    return (
        "<details><summary>latency per receiver (send to first delivery; a multicast to each other "
        "member)</summary>"
        + _table(rows[:MAX_TABLE_ROWS], ["run", "receiver", "n", "p50 (s)", "p99 (s)", "max (s)"])
        + (more if len(rows) > MAX_TABLE_ROWS else "")
        + "</details>"
    )


def _views_table(tl: RunTimeline) -> str:
    """Who believed what, and when: each node's views as rows (from, to, view, why), with the
    suspicions and merges in between; empty for a run without `view` events."""
    bands = view_bands(tl.rare, tl.end_t)
    if not bands:
        return ""
    rows = []
    for node, spans in bands.items():
        for span in spans:
            rows.append(
                (span["t0"], node, f"{span['t0']:.3f}", f"{span['t1']:.3f}", span["label"], span["reason"] or "")
            )
    for e in membership_marks(tl.rare):
        what = e["kind"] + (f" {e['peer']}" if e.get("peer") else "") + (f" {e['phase']}" if e.get("phase") else "")
        if e.get("members"):
            what += f" [{','.join(e['members'])}]"
        rows.append((e["t"], e["node"], f"{e['t']:.3f}", "", what, ""))
    rows.sort(key=lambda r: (r[0], r[1]))
    shown = rows[:MAX_VIEW_ROWS]
    body = "".join(
        f"<tr><td>{_e(node)}</td><td>{_e(t0)}</td><td>{_e(t1)}</td><td>{_e(view)}</td><td>{_e(why)}</td></tr>"
        for _t, node, t0, t1, view, why in shown
    )
    more = f"<p class='muted'>{len(rows) - len(shown)} more row(s) not shown.</p>" if len(rows) > len(shown) else ""
    return (
        "<details class='views'><summary>views held per node (who believed what, when)</summary>"
        "<table><tr><th>node</th><th>from (s)</th><th>to (s)</th><th>view / event</th><th>why</th></tr>"
        f"{body}</table>{more}</details>"
    )


def _check_class(check: dict) -> str:
    if check.get("applicable") is False:
        return "not applicable"
    return "passed" if check["passed"] else "vacuous" if check.get("vacuous") else "failed"
