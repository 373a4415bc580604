"""The campaign's plots (matplotlib, Agg): the pass/fail matrix, pass rates per scenario, protocol,
variant and fault type, the latency distribution (with each run's p50 against its p99), control
messages per delivered message, and the time from a heal to sync. Each function writes one PNG
and returns its path (None when there is nothing to draw); the numbers come from report.data.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ..metrics import bin_edges
from ..verdicts import RunVerdict
from .data import by_scenario, matrix_cells, shown_overhead_kinds

PASS, FAIL, WARN, NA = "#4caf50", "#e53935", "#ffb300", "#d0d0d0"
STATUS_COLORS = {"pass": PASS, "fail": FAIL, "warn": WARN, "na": NA}


def plot_matrix(verdicts: list[RunVerdict], path: Path) -> Path:
    """The pass/fail matrix (report.data.matrix_cells) as a PNG."""
    matrix = matrix_cells(verdicts)
    rows, cols = matrix.rows, matrix.cols
    fig_h = 1.2 + 0.32 * len(rows)
    fig_w = max(7, 2.2 + 1.45 * len(cols) + 0.075 * max(len(r) for r in rows))
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    for i, row in enumerate(matrix.cells):
        for j, (status, text) in enumerate(row):
            color = STATUS_COLORS[status]
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
    fig.text(0.01, 0.005, matrix.footnote, fontsize=7.5, color="#555")
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


def plot_latency(verdicts: list[RunVerdict], path: Path, per_run: bool = True) -> Path | None:
    """The latency distribution per scenario and, with `per_run`, a scatter of each run's p50 and p99."""
    groups = by_scenario(verdicts)
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
    groups = by_scenario(verdicts)
    shown = shown_overhead_kinds(verdicts)[:OVERHEAD_MAX_PANELS] or [("acks", "ack_tx")]
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
    groups = by_scenario(verdicts)
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
