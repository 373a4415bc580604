"""One run's timeline as a matplotlib figure (Agg): a panel per link, or per sender for a multicast
run, and a band per node of the views it held.

A link's panel shows the seqnos sent, delivered, acked and retransmitted over time, XMIT-REQs, faults
shaded, nodes down, the resync messages and new receive windows marked, sends never delivered and
repeated deliveries crossed out, and the final windows; a sender's panel shows every receiver's
delivered seqno of its multicasts, the time it was blocked and its send window's fill. The failing
checks' explanations go on top. What to mark comes from report.data (and, through it, from the
protocols' specs); this module only draws.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from splitbrain.node import protocols

from ..timeline import RunTimeline
from ..verdicts import RunVerdict
from .data import (
    MAX_LINKS_PER_TIMELINE,
    blocked_spans,
    blocked_total,
    down_spans,
    failing_explanations,
    fault_spans,
    link_notes,
    membership_marks,
    mentions,
    view_bands,
    window_fill,
)

FAULT_COLORS = {
    "partition": "#d62728",
    "loss": "#ff7f0e",
    "delay": "#bcbd22",
    "duplicate": "#9467bd",
    "reorder": "#8c564b",
    "drop": "#e377c2",
    "pause": "#7f7f7f",
}
FAIL, WARN = "#e53935", "#ffb300"
VIEW_COLORS = ("#a6cee3", "#b2df8a", "#fdbf6f", "#cab2d6", "#ffff99", "#fb9a99", "#80cbc4", "#d7ccc8")
RECEIVER_COLORS = ("tab:green", "tab:purple", "tab:red", "tab:pink", "tab:olive", "tab:cyan", "tab:gray", "gold")
FILL_COLOR = "#333333"
# The looks of the marks the protocols' specs name, handed out in the registry's order: membership
# events on the view bands (marker, color), resync messages on a link's panel (color, line style).
MEMBERSHIP_STYLES = (("x", "#b71c1c"), ("+", "#2e7d32"), ("D", "#6a1b9a"), ("<", "#455a64"), ("v", "#00838f"))
# (line color, line style, text color): the text darker than its line, to be read on white.
RESYNC_STYLES = (
    ("tab:cyan", "--", "#006064"),
    ("tab:olive", ":", "#5f6000"),
    ("tab:brown", "-.", "#4e2a1e"),
    ("tab:pink", "--", "#880e4f"),
)


def membership_styles() -> dict[str, tuple[str, str, str]]:
    """Membership mark kind -> (marker, color, legend label), from the protocols' specs."""
    return {
        m.kind: (*MEMBERSHIP_STYLES[i % len(MEMBERSHIP_STYLES)], m.label)
        for i, m in enumerate(protocols.membership_marks())
    }


def resync_styles() -> dict[str, tuple[str, str, str, str, str]]:
    """Resync mark kind -> (color, line style, text color, legend label, short text), from the
    protocols' specs."""
    return {
        m.kind: (*RESYNC_STYLES[i % len(RESYNC_STYLES)], m.label, m.text)
        for i, m in enumerate(protocols.resync_marks())
    }


def plot_views(ax, tl: RunTimeline, bands: dict[str, list[dict]]) -> None:
    """The view bands: one row per node, one colored segment per view it held, labelled."""
    nodes = list(bands)
    colors: dict[tuple, str] = {}
    for t0, t1, fault, _detail in fault_spans(tl.rare, tl.end_t)[0]:
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
        for t0, t1 in down_spans(tl.rare, node, tl.end_t):
            ax.broken_barh([(t0, t1 - t0)], (row - 0.38, 0.76), facecolors="none", edgecolor="#444", hatch="///", lw=0)
    labelled = set()
    styles = membership_styles()
    for e in membership_marks(tl.rare):
        if e["node"] not in bands:
            continue
        marker, color, label = styles[e["kind"]]
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


def time_axes(axes: list, origin: float | None) -> None:
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
    spans, instants = fault_spans(tl.rare, tl.end_t)
    wrapped = [textwrap.fill(t, 165, subsequent_indent="    ") for t in failing_explanations(verdict)[:6]]
    text_lines = sum(w.count("\n") + 1 for w in wrapped)
    bands = view_bands(tl.rare, tl.end_t)
    n = max(1, len(links) + len(senders))
    panel_h = 2.6
    origin = verdict.meta.get("origin_t") if verdict else None
    top_axis = origin is not None and abs(origin) >= 1e-9  # scenario time on top (time_axes)
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
            strong = not mentions(detail, nodes) or {src, dst} <= mentions(detail, nodes)
            color = FAULT_COLORS.get(fault, "#17becf")
            ax.axvspan(t0, t1, color=color, alpha=0.18 if strong else 0.06, lw=0)
            legend_faults.setdefault(fault, Patch(color=color, alpha=0.3, label=f"fault: {fault}"))
        for node in (src, dst):
            for t0, t1 in down_spans(tl.rare, node, tl.end_t):
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
            if fault == "view" or not ({src, dst} & mentions(detail, nodes) or not mentions(detail, nodes)):
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
        # Marked messages: (t, seqno, app id) of sends never delivered and repeated deliveries.
        for marks, marker, size, color, label in (
            (s.lost, "X", 8, FAIL, "sent, never delivered"),
            (s.again, "D", 6, WARN, "delivered again"),
        ):
            if marks:
                ts, seqnos = [m[0] for m in marks], [m[1] for m in marks]
                ax.plot(ts, seqnos, marker, ms=size, color=color, mec="black", mew=0.5, label=label)
        _mark_rare(ax, tl, src, dst)
        notes = link_notes(verdict, key)
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
        plot_views(views_ax, tl, bands)
    all_axes = axes + ([views_ax] if views_ax is not None else [])
    time_axes(all_axes, origin)
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


def plot_sender(
    ax, tl: RunTimeline, sender: str, spans: list, nodes: set, legend_faults: dict, title_pad: float = 6
) -> None:
    """A multicast sender's panel: the highest seqno it multicast, each receiver's highest
    delivered of its multicasts, faults shaded (strong where they name the sender), the time it
    was blocked, and on a right axis its window's fill (MCAST: unacked multicasts)."""
    series = tl.senders[sender]
    for t0, t1, fault, detail in spans:
        named = mentions(detail, nodes)
        color = FAULT_COLORS.get(fault, "#17becf")
        ax.axvspan(t0, t1, color=color, alpha=0.18 if not named or sender in named else 0.06, lw=0)
        legend_faults.setdefault(fault, Patch(color=color, alpha=0.3, label=f"fault: {fault}"))
    for t0, t1 in down_spans(tl.rare, sender, tl.end_t):
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
    """Blocked senders, resync messages (the specs' resync marks), new receive windows, drops and final
    windows of one link."""
    end = tl.end_t
    labelled = set()
    finals: list[tuple[str, str]] = []  # (color, text) of the final windows, drawn last
    last_text: dict[str, float] = {}
    resync = resync_styles()
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
        if kind in resync:
            color, style, text_color, label, text = resync[kind]
            ax.axvline(e["t"], color=color, ls=style, lw=1, label=once(label))
            # One text per burst of resync messages of a kind.
            if text and e["t"] - last_text.get(kind, -math.inf) > min_gap:
                last_text[kind] = e["t"]
                on_top = ax.get_xaxis_transform()
                ax.text(e["t"], 0.97, f" {text}", transform=on_top, fontsize=7.5, color=text_color, va="top")
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
